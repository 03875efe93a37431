//! The backward engine: walks recorded nodes in reverse topological order, sums gradients
//! per output, accumulates into the `.grad` of leaves, and runs a leaf's post-accumulate-grad
//! hooks once its last gradient of this backward has arrived.

use super::node::{InputEdge, Node};
use crate::{Result, Tensor, TensorError, TensorId, no_grad};
use std::collections::HashMap;
use std::sync::Arc;

/// Computes gradients of `root` with respect to every leaf that requires them and adds them to
/// the leaves' `.grad` (PyTorch's `tensor.backward(gradient, retain_graph)`). Without `gradient`
/// the root must hold one element.
pub fn backward(root: &Tensor, gradient: Option<&Tensor>, retain_graph: bool) -> Result<()> {
    if !root.requires_grad() {
        return Err(TensorError::Autograd(
            "element 0 of tensors does not require grad and does not have a grad_fn".into(),
        ));
    }
    let _guard = no_grad();
    let seed = match gradient {
        Some(g) => {
            if g.shape() != root.shape() {
                return Err(TensorError::shapes(
                    "backward",
                    &g.shape(),
                    &root.shape(),
                    "gradient must match the root's shape",
                ));
            }
            g.detach()
        }
        None => {
            if root.numel() != 1 {
                return Err(TensorError::Autograd(format!(
                    "grad can be implicitly created only for scalar outputs, the root has shape {:?}",
                    root.shape()
                )));
            }
            Tensor::ones_like(root)?
        }
    };
    let Some(root_edge) = root.grad_fn() else {
        accumulate_into_leaf(root, seed)?;
        return root.run_post_accumulate_grad_hooks();
    };

    // Count, for every reachable node and leaf, how many edges feed gradients into it.
    let mut dependencies: HashMap<u64, usize> = HashMap::new();
    let mut leaf_edges: HashMap<TensorId, LeafProgress> = HashMap::new();
    let mut stack = vec![Arc::clone(&root_edge.node)];
    let mut seen = std::collections::HashSet::from([root_edge.node.id]);
    while let Some(node) = stack.pop() {
        for edge in &node.inputs {
            match edge {
                InputEdge::Node(next) => {
                    *dependencies.entry(next.node.id).or_insert(0) += 1;
                    if seen.insert(next.node.id) {
                        stack.push(Arc::clone(&next.node));
                    }
                }
                InputEdge::Leaf(leaf) => leaf_edges.entry(leaf.id()).or_default().remaining += 1,
                InputEdge::None => {}
            }
        }
    }

    let mut pending: HashMap<u64, Vec<Option<Tensor>>> = HashMap::new();
    pending.insert(
        root_edge.node.id,
        slots_with(&root_edge.node, root_edge.index, seed),
    );
    let mut ready: Vec<Arc<Node>> = vec![Arc::clone(&root_edge.node)];
    while let Some(node) = ready.pop() {
        let grads = pending.remove(&node.id).unwrap_or_default();
        let input_grads = if grads.iter().all(Option::is_none) {
            // Nothing flows through this node (e.g. only its index output was used).
            node.release(retain_graph);
            vec![None; node.inputs.len()]
        } else {
            node.apply(&grads, retain_graph)?
        };
        for (edge, grad) in node.inputs.iter().zip(input_grads) {
            match edge {
                InputEdge::None => {}
                InputEdge::Leaf(leaf) => {
                    let progress = leaf_edges.entry(leaf.id()).or_default();
                    if let Some(g) = grad {
                        accumulate_into_leaf(leaf, g)?;
                        progress.received = true;
                    }
                    progress.remaining = progress.remaining.saturating_sub(1);
                    if progress.remaining == 0 && progress.received {
                        leaf.run_post_accumulate_grad_hooks()?;
                    }
                }
                InputEdge::Node(next) => {
                    let slots = pending
                        .entry(next.node.id)
                        .or_insert_with(|| vec![None; next.node.output_metas.len()]);
                    if let Some(g) = grad {
                        slots[next.index] = Some(match slots[next.index].take() {
                            Some(acc) => acc.add(&g)?,
                            None => g,
                        });
                    }
                    let count = dependencies.get_mut(&next.node.id).expect("counted above");
                    *count -= 1;
                    if *count == 0 {
                        ready.push(Arc::clone(&next.node));
                    }
                }
            }
        }
    }
    Ok(())
}

/// How many of a leaf's incoming edges are still to be walked, and whether any of the walked
/// ones carried a gradient (a leaf that received none has nothing for its hooks to see).
#[derive(Default)]
struct LeafProgress {
    remaining: usize,
    received: bool,
}

fn slots_with(node: &Node, index: usize, grad: Tensor) -> Vec<Option<Tensor>> {
    let mut slots = vec![None; node.output_metas.len()];
    slots[index] = Some(grad);
    slots
}

/// Adds `grad` to `leaf.grad`, owning fresh storage so that later in-place accumulation never
/// writes through an alias of another tensor.
fn accumulate_into_leaf(leaf: &Tensor, grad: Tensor) -> Result<()> {
    let grad = if grad.dtype() != leaf.dtype() {
        grad.to_dtype(leaf.dtype())?
    } else {
        grad
    };
    match leaf.grad() {
        Some(existing) => {
            existing.add_(&grad)?;
        }
        None => leaf.set_grad(Some(grad.deep_clone()?)),
    }
    Ok(())
}
