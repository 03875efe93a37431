//! `tessera summary FILE --input-shape 1,3,224,224`: a torchinfo-style table of the graph's
//! layers (module path, type, output shape, parameters, FLOPs, activation memory) with totals.

use crate::failure::{Failure, Result};
use crate::inputs::{parse_shape, reshape};
use crate::model_file::open_graph;
use crate::table::{Table, shape_text, thousands};
use std::path::PathBuf;
use tessera::fx::trace::TracedGraph;
use tessera::fx::{Graph, NodeId, NodeKind};

/// A layer table like torchinfo's summary, for the graph's input shape or another.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    file: PathBuf,
    /// The input's shape (`1,3,224,224`), once per input; default: the shapes it was saved with.
    #[arg(long = "input-shape", value_parser = parse_shape)]
    input_shape: Vec<Vec<usize>>,
}

/// One row: what ran, where its weights live, and what it cost.
struct Layer {
    path: String,
    kind: String,
    shape: Vec<usize>,
    parameters: u64,
    flops: u64,
    activation_bytes: u64,
}

pub fn run(args: &Args) -> Result<()> {
    let mut traced = open_graph(&args.file)?;
    reshape(&mut traced, &args.input_shape)?;
    let layers = layers(&traced).map_err(|e| Failure::failed("summarising the graph", e))?;
    let mut table = Table::new(&[
        "Layer (module path)",
        "Type",
        "Output Shape",
        "Param #",
        "FLOPs",
        "Activations (MB)",
    ]);
    for l in &layers {
        table.row(vec![
            l.path.clone(),
            l.kind.clone(),
            shape_text(&l.shape),
            thousands(l.parameters),
            thousands(l.flops),
            format!("{:.3}", l.activation_bytes as f64 / 1e6),
        ]);
    }
    print!("{}", table.render());
    let params: u64 = traced.attributes.values().map(|t| t.numel() as u64).sum();
    let trainable =
        crate::weights::totals(traced.attributes.iter().map(|(k, v)| (k.as_str(), v))).trainable;
    let param_bytes: u64 = traced
        .attributes
        .values()
        .map(|t| (t.numel() * t.dtype().size_in_bytes()) as u64)
        .sum();
    let flops: u64 = layers.iter().map(|l| l.flops).sum();
    let activations: u64 = layers.iter().map(|l| l.activation_bytes).sum();
    let input_bytes: u64 = crate::inputs::placeholder_metas(&traced.graph)?
        .iter()
        .map(|(_, m)| (m.shape.iter().product::<usize>() * m.dtype.size_in_bytes()) as u64)
        .sum();
    println!("Total params: {}", thousands(params));
    println!("Trainable params: {}", thousands(trainable));
    println!(
        "Total FLOPs: {} ({:.2} MFLOPs)",
        thousands(flops),
        flops as f64 / 1e6
    );
    println!("Input size (MB): {:.3}", input_bytes as f64 / 1e6);
    println!(
        "Forward activations size (MB): {:.3}",
        activations as f64 / 1e6
    );
    println!("Params size (MB): {:.3}", param_bytes as f64 / 1e6);
    println!(
        "Estimated total size (MB): {:.3}",
        (input_bytes + activations + param_bytes) as f64 / 1e6
    );
    Ok(())
}

fn layers(traced: &TracedGraph) -> tessera::passes::Result<Vec<Layer>> {
    let graph = &traced.graph;
    let mut out = Vec::new();
    for id in graph.nodes() {
        let node = graph.node(&id)?;
        let kind = match &node.kind {
            NodeKind::CallFunction { op } => op.name().to_string(),
            NodeKind::CallModule { kind, .. } => kind.to_string(),
            _ => continue,
        };
        let weights = weight_targets(graph, &id)?;
        let parameters = weights
            .iter()
            .filter_map(|w| traced.attributes.get(w))
            .map(|t| t.numel() as u64)
            .sum();
        let path = graph
            .weights_module(&id)
            .unwrap_or_else(|| format!("%{}", node.name));
        let meta = node.meta.first();
        out.push(Layer {
            path,
            kind,
            shape: meta.map(|m| m.shape.clone()).unwrap_or_default(),
            parameters,
            flops: tessera::passes::cost::op_flops(graph, &id)?,
            activation_bytes: node
                .meta
                .iter()
                .map(|m| (m.shape.iter().product::<usize>() * m.dtype.size_in_bytes()) as u64)
                .sum(),
        });
    }
    Ok(out)
}

/// The `get_attr` targets among a node's operands (`conv1.weight`, `conv1.bias`).
fn weight_targets(graph: &Graph, id: &NodeId) -> tessera::passes::Result<Vec<String>> {
    let mut targets = Vec::new();
    for operand in graph.operands(id)? {
        if let NodeKind::GetAttr { target } = &graph.node(&operand)?.kind {
            targets.push(target.clone());
        }
    }
    Ok(targets)
}
