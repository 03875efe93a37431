//! The printed, tabular and DOT forms of hand-built graphs, as reviewed snapshots.

use crate::common;

use common::{cnn_chain, multi_io, residual_block, snapshots};
use tessera_fx::Result;

#[test]
fn cnn_chain_prints_module_calls_with_shapes() -> Result<()> {
    let g = cnn_chain()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_cnn_chain_printed", g.to_string()));
    Ok(())
}

#[test]
fn cnn_chain_prints_as_a_table() -> Result<()> {
    let g = cnn_chain()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_cnn_chain_tabular", g.tabular()));
    Ok(())
}

#[test]
fn cnn_chain_exports_dot() -> Result<()> {
    let g = cnn_chain()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_cnn_chain_dot", g.to_dot()));
    Ok(())
}

#[test]
fn residual_block_prints_op_attributes_and_get_attr() -> Result<()> {
    let g = residual_block()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_residual_block_printed", g.to_string()));
    Ok(())
}

#[test]
fn residual_block_prints_as_a_table() -> Result<()> {
    let g = residual_block()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_residual_block_tabular", g.tabular()));
    Ok(())
}

#[test]
fn residual_block_exports_dot() -> Result<()> {
    let g = residual_block()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_residual_block_dot", g.to_dot()));
    Ok(())
}

#[test]
fn multi_io_prints_tuple_metas_and_a_tuple_return() -> Result<()> {
    let g = multi_io()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_multi_io_printed", g.to_string()));
    Ok(())
}

#[test]
fn multi_io_prints_as_a_table() -> Result<()> {
    let g = multi_io()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_multi_io_tabular", g.tabular()));
    Ok(())
}

#[test]
fn multi_io_exports_dot() -> Result<()> {
    let g = multi_io()?;
    snapshots().bind(|| insta::assert_snapshot!("fx_multi_io_dot", g.to_dot()));
    Ok(())
}

#[test]
fn graph_without_inputs_or_outputs_prints_empty_header() {
    let g = tessera_fx::Graph::new();
    assert_eq!(g.to_string(), "graph():\n");
}
