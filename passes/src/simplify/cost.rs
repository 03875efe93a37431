//! The cost model extraction minimises: every elementwise op is one kernel launch plus one
//! unit per output element, views are nearly free, and a term the op table rejects costs
//! infinity. E-nodes that were not in the original graph pay a small penalty, so that a tie
//! keeps the graph as it was instead of churning it into an equivalent spelling.

use super::analysis::{TensorGraph, meta_of};
use super::language::TensorLang;
use egg::{CostFunction, Id, Language};
use std::collections::HashSet;
use tessera_tensor::op::OpKind;
use tessera_tensor::{Op, TensorMeta};

/// The fixed cost of launching one kernel, in elements.
pub const KERNEL: f64 = 16.0;
/// The cost of a view (a shape change without arithmetic or copying).
pub const VIEW: f64 = 1.0;
/// The extra cost of an e-node the original graph did not contain.
pub const NEW_NODE: f64 = 0.25;

/// The cost of one node computing `op` with output `meta`.
pub fn op_cost(op: &Op, meta: &TensorMeta) -> f64 {
    match op.kind() {
        OpKind::View => VIEW,
        _ => KERNEL + meta.numel() as f64,
    }
}

/// Kernel-count-and-elements cost over an e-graph.
pub struct KernelCost<'a> {
    egraph: &'a TensorGraph,
    /// The original graph's e-nodes, with canonical children.
    original: HashSet<TensorLang>,
}

impl<'a> KernelCost<'a> {
    /// The cost model for `egraph`, preferring the e-nodes in `original` on ties.
    pub fn new(egraph: &'a TensorGraph, original: impl IntoIterator<Item = TensorLang>) -> Self {
        let original = original
            .into_iter()
            .map(|n| n.map_children(|c| egraph.find(c)))
            .collect();
        KernelCost { egraph, original }
    }

    /// The cost of `enode` alone, without its children.
    pub fn own_cost(&self, enode: &TensorLang) -> f64 {
        if matches!(
            enode,
            TensorLang::Num(_) | TensorLang::Dims(_) | TensorLang::Leaf(_)
        ) {
            return 0.0;
        }
        let Some(meta) = meta_of(self.egraph, enode) else {
            return f64::INFINITY;
        };
        let Some((op, _)) = super::analysis::op_of(self.egraph, enode) else {
            return f64::INFINITY;
        };
        let own = op_cost(&op, &meta);
        let canonical = enode.clone().map_children(|c| self.egraph.find(c));
        if self.original.contains(&canonical) {
            own
        } else {
            own + NEW_NODE
        }
    }
}

impl CostFunction<TensorLang> for KernelCost<'_> {
    type Cost = f64;

    fn cost<C>(&mut self, enode: &TensorLang, mut costs: C) -> f64
    where
        C: FnMut(Id) -> f64,
    {
        enode.fold(self.own_cost(enode), |sum, id| sum + costs(id))
    }
}
