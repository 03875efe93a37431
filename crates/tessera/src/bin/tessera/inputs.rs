//! The inputs a command runs a graph on: random tensors of the graph's own shapes or of
//! `--input-shape`, or the tensors of a safetensors file.

use crate::failure::{Failure, Result};
use std::path::Path;
use tessera::fx::Graph;
use tessera::fx::trace::TracedGraph;
use tessera::nn::layers::Identity;
use tessera::tensor::TensorMeta;
use tessera::{Generator, Tensor};

/// `1,3,224,224` as a shape.
pub fn parse_shape(text: &str) -> std::result::Result<Vec<usize>, String> {
    text.split(',')
        .map(|d| {
            d.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{text}` is not a shape like 1,3,224,224"))
        })
        .collect()
}

/// The metas of the graph's placeholders, in order.
pub fn placeholder_metas(graph: &Graph) -> Result<Vec<(String, TensorMeta)>> {
    graph
        .placeholders()
        .into_iter()
        .map(|id| {
            let node = graph
                .node(&id)
                .map_err(|e| Failure::failed("reading the graph", e))?;
            let meta = node.meta.first().cloned().ok_or_else(|| {
                Failure::usage(format!("placeholder %{} has no shape", node.name))
            })?;
            Ok((node.name.clone(), meta))
        })
        .collect()
}

/// Re-shapes `traced` for `shapes` (one per input, dtypes kept) when they differ from its
/// own, by running it on meta tensors.
pub fn reshape(traced: &mut TracedGraph, shapes: &[Vec<usize>]) -> Result<()> {
    if shapes.is_empty() {
        return Ok(());
    }
    let metas = placeholder_metas(&traced.graph)?;
    if shapes.len() != metas.len() {
        return Err(Failure::usage(format!(
            "the graph takes {} inputs but {} --input-shape were given",
            metas.len(),
            shapes.len()
        )));
    }
    if metas.iter().zip(shapes).all(|((_, m), s)| &m.shape == s) {
        return Ok(());
    }
    let new: Vec<TensorMeta> = metas
        .iter()
        .zip(shapes)
        .map(|((_, m), s)| TensorMeta::new(s.as_slice(), m.dtype))
        .collect();
    let root = Identity::new();
    let mut interpreter = tessera::fx::interpreter::GraphInterpreter {
        root: &root,
        constants: Some(&traced.attributes),
    };
    tessera::fx::shape_prop::propagate_shapes(&mut traced.graph, &mut interpreter, &new)
        .map_err(|e| Failure::input(format!("the graph cannot take inputs of {shapes:?}"), e))
}

/// Random normal inputs of the graph's placeholder shapes (seeded, so runs repeat).
pub fn random_inputs(graph: &Graph, seed: u64) -> Result<Vec<Tensor>> {
    let mut g = Generator::new(seed);
    placeholder_metas(graph)?
        .into_iter()
        .map(|(name, m)| {
            let t = if m.dtype.is_float() {
                Tensor::randn_with(&m.shape, m.dtype, &mut g)
            } else {
                Tensor::zeros(&m.shape, m.dtype)
            };
            t.map_err(|e| Failure::failed(format!("making input %{name}"), e))
        })
        .collect()
}

/// The inputs stored in a safetensors file: by placeholder name, or in order when the names
/// differ.
pub fn read_inputs(graph: &Graph, path: &Path) -> Result<Vec<Tensor>> {
    let dict = tessera::nn::load_safetensors(path)
        .map_err(|e| Failure::input(path.display().to_string(), e))?;
    let metas = placeholder_metas(graph)?;
    let by_name: Option<Vec<Tensor>> = metas
        .iter()
        .map(|(name, _)| dict.get(name).cloned())
        .collect();
    let tensors = match by_name {
        Some(t) => t,
        None if dict.len() == metas.len() => dict.iter().map(|(_, t)| t.clone()).collect(),
        None => {
            return Err(Failure::usage(format!(
                "{} holds {} tensors ({}); the graph takes {} inputs named {}",
                path.display(),
                dict.len(),
                dict.keys().collect::<Vec<_>>().join(", "),
                metas.len(),
                metas
                    .iter()
                    .map(|(n, _)| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
    };
    for ((name, meta), t) in metas.iter().zip(&tensors) {
        if t.dtype() != meta.dtype {
            return Err(Failure::usage(format!(
                "input %{name} must be {:?}, the file holds {:?}",
                meta.dtype,
                t.dtype()
            )));
        }
    }
    Ok(tensors)
}
