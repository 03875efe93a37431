//! The e-class analysis: the shape and dtype of every tensor class (computed by the op table's
//! meta functions, so a term the op table rejects has none), the value of scalar and dims
//! attributes, and the value every element shares where one is known (a uniform constant).
//! Merging classes whose shapes or values disagree is counted as a conflict, never ignored.

use super::language::{Attr, TensorLang};
use egg::{Analysis, DidMerge, EGraph, Id};
use tessera_tensor::op::OpKind;
use tessera_tensor::{Op, Tensor, TensorMeta};

/// The e-graph the pass builds.
pub type TensorGraph = EGraph<TensorLang, ShapeAnalysis>;

/// What is known about one e-class.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// Shape and dtype, for tensor classes whose every op the op table accepts.
    pub meta: Option<TensorMeta>,
    /// The value of every element of a tensor class (or of a `Num` attribute), if uniform.
    pub fill: Option<f64>,
    /// The value of a `Dims` attribute.
    pub dims: Option<Vec<usize>>,
}

/// What the graph says about one leaf: its meta, and its fill if it is a uniform constant.
#[derive(Debug, Clone)]
pub struct LeafFacts {
    pub meta: TensorMeta,
    pub fill: Option<f64>,
}

/// The analysis: the facts of the region's leaves, by leaf number, and a count of merges of
/// disagreeing classes (a rule that equated values of different shapes: a bug).
#[derive(Debug, Default)]
pub struct ShapeAnalysis {
    pub leaves: Vec<LeafFacts>,
    pub conflicts: usize,
}

/// How the analysis reads an attribute child.
pub fn attr(egraph: &TensorGraph, id: Id) -> Option<Attr> {
    let facts = &egraph[id].data;
    match (&facts.dims, facts.meta.is_none(), facts.fill) {
        (Some(d), _, _) => Some(Attr::Dims(d.clone())),
        (None, true, Some(v)) => Some(Attr::Num(v)),
        _ => None,
    }
}

/// The op of `enode` and its tensor operands, reading attributes from the analysis.
pub fn op_of(egraph: &TensorGraph, enode: &TensorLang) -> Option<(Op, Vec<Id>)> {
    enode.to_op(|id| attr(egraph, id))
}

/// The meta of the value `enode` computes, if the op table accepts its operands.
pub fn meta_of(egraph: &TensorGraph, enode: &TensorLang) -> Option<TensorMeta> {
    let (op, operands) = op_of(egraph, enode)?;
    let metas: Vec<TensorMeta> = operands
        .iter()
        .map(|&c| egraph[c].data.meta.clone())
        .collect::<Option<_>>()?;
    let mut out = op.meta(&metas).ok()?;
    (out.len() == 1).then(|| out.remove(0))
}

/// The uniform value of `op` applied to uniform operands, computed by the op's own kernel on
/// one-element tensors of the operands' dtypes (so rounding matches the graph's).
fn fold_fill(op: &Op, operands: &[(f64, TensorMeta)]) -> Option<f64> {
    if matches!(op.kind(), OpKind::View | OpKind::Copy) {
        return operands.first().map(|(v, _)| *v);
    }
    let tensors: Vec<Tensor> = operands
        .iter()
        .map(|(v, m)| Tensor::full(&[1], *v, m.dtype).ok())
        .collect::<Option<_>>()?;
    let refs: Vec<&Tensor> = tensors.iter().collect();
    let out = op.apply1(&refs).ok()?;
    out.to_vec_f64().ok()?.first().copied()
}

/// Merges `b` into `a` field by field: an unknown takes the other's value, two known values
/// must agree (compared by bits for numbers) or count as a conflict.
fn merge_field<T: Clone>(
    a: &mut Option<T>,
    b: Option<T>,
    same: impl Fn(&T, &T) -> bool,
    conflicts: &mut usize,
) -> DidMerge {
    match (a.as_ref(), b) {
        (None, None) => DidMerge(false, false),
        (None, Some(b)) => {
            *a = Some(b);
            DidMerge(true, false)
        }
        (Some(_), None) => DidMerge(false, true),
        (Some(x), Some(y)) => {
            if !same(x, &y) {
                *conflicts += 1;
            }
            DidMerge(false, !same(x, &y))
        }
    }
}

impl Analysis<TensorLang> for ShapeAnalysis {
    type Data = Facts;

    fn make(egraph: &mut TensorGraph, enode: &TensorLang, _id: Id) -> Facts {
        match enode {
            TensorLang::Num(s) => Facts {
                fill: Some(s.value()),
                ..Facts::default()
            },
            TensorLang::Dims(d) => Facts {
                dims: Some(d.0.clone()),
                ..Facts::default()
            },
            TensorLang::Leaf(l) => match egraph.analysis.leaves.get(l.0 as usize) {
                Some(leaf) => Facts {
                    meta: Some(leaf.meta.clone()),
                    fill: leaf.fill,
                    dims: None,
                },
                None => Facts::default(),
            },
            _ => {
                let meta = meta_of(egraph, enode);
                let fill = meta.as_ref().and_then(|_| {
                    let (op, operands) = op_of(egraph, enode)?;
                    let uniform: Vec<(f64, TensorMeta)> = operands
                        .iter()
                        .map(|&c| Some((egraph[c].data.fill?, egraph[c].data.meta.clone()?)))
                        .collect::<Option<_>>()?;
                    fold_fill(&op, &uniform)
                });
                Facts {
                    meta,
                    fill,
                    dims: None,
                }
            }
        }
    }

    fn merge(&mut self, a: &mut Facts, b: Facts) -> DidMerge {
        let c = &mut self.conflicts;
        merge_field(&mut a.meta, b.meta, |x, y| x == y, c)
            | merge_field(&mut a.fill, b.fill, |x, y| x.to_bits() == y.to_bits(), c)
            | merge_field(&mut a.dims, b.dims, |x, y| x == y, c)
    }
}
