//! `insert_observers`: a `MinMaxObserver` the graph module owns is called on the input and on
//! the output of every conv(+ReLU) and linear(+ReLU) block, so that running the graph
//! (calibration) records the ranges static quantization needs. An input that is already an
//! observer's output (the previous block's output observer), directly or through ops that keep
//! quantization parameters (pooling, flatten), is not observed again: the block shares that
//! observer's parameters. The observers return their input, so the graph computes the same
//! values.

use super::blocks::find_blocks;
use super::shared_qparams::through_shared_qparams;
use crate::{Changed, Pass, PassError, Result};
use tessera_fx::{GraphModule, NodeId, NodeKind};
use tessera_nn::quantized::{MinMaxObserver, as_fake_quantize};
use tessera_nn::{Module, ModuleExt, ModuleKind};

/// Inserts min/max observers around the blocks static quantization will convert.
pub struct InsertObservers;

/// Whether `node` calls an owned observer: a `MinMaxObserver` (post-training calibration) or
/// a fake quantizer (quantization-aware training), either of which records the parameters a
/// block's input or output is converted with.
pub(super) fn is_observer(gm: &GraphModule, node: &NodeId) -> Result<bool> {
    Ok(match &gm.graph.node(node)?.kind {
        NodeKind::CallModule { target, .. } => gm
            .owned_modules()
            .get(target)
            .is_some_and(|m| m.as_any().is::<MinMaxObserver>() || as_fake_quantize(&**m).is_some()),
        _ => false,
    })
}

/// Adds an owned observer called `base` (made unique) and returns its name, kind and repr.
fn new_observer(
    gm: &mut GraphModule,
    base: &str,
    make: &dyn Fn() -> tessera_nn::Result<Box<dyn Module>>,
) -> Result<(String, ModuleKind, String)> {
    let observer = make().map_err(|e| PassError::Unsupported(format!("{base}: {e}")))?;
    let (kind, repr) = (
        observer.kind(),
        tessera_nn::one_line_repr(observer.as_module()),
    );
    let name = gm.fresh_name(base);
    gm.add_owned_module(&name, observer)?;
    Ok((name, kind, repr))
}

/// Calls an observer made by `make` on the input and the output of every block that has none
/// yet, naming them `{layer}_input_{suffix}` and `{layer}_output_{suffix}`.
pub(super) fn observe_blocks(
    gm: &mut GraphModule,
    suffix: &str,
    make: &dyn Fn() -> tessera_nn::Result<Box<dyn Module>>,
) -> Result<bool> {
    let blocks = find_blocks(gm)?;
    let mut changed = false;
    for block in &blocks {
        let base = block.target.replace('.', "_");
        // The input.
        let Some(input) = gm.graph.operands(&block.layer)?.into_iter().next() else {
            continue;
        };
        if !is_observer(gm, &through_shared_qparams(gm, &input)?)? {
            let (name, kind, repr) = new_observer(gm, &format!("{base}_input_{suffix}"), make)?;
            let meta = gm.graph.node(&input)?.meta.clone();
            let observed = gm.graph.insert_before(&block.layer, |g| {
                g.call_module(&name, kind, &repr, &[&input], meta)
            })?;
            gm.graph.set_operand(&block.layer, 0, &observed)?;
            changed = true;
        }
        // The output.
        let last = *block.last();
        let users = gm.graph.users(&last)?;
        if let [user] = users.as_slice()
            && is_observer(gm, user)?
        {
            continue;
        }
        let (name, kind, repr) = new_observer(gm, &format!("{base}_output_{suffix}"), make)?;
        let meta = gm.graph.node(&last)?.meta.clone();
        let observed = gm
            .graph
            .insert_after(&last, |g| g.call_module(&name, kind, &repr, &[&last], meta))?;
        gm.graph.replace_all_uses_with(&last, &observed)?;
        changed = true;
    }
    Ok(changed)
}

impl Pass for InsertObservers {
    fn name(&self) -> &'static str {
        "insert_observers"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let changed = observe_blocks(gm, "observer", &|| {
            Ok(Box::new(MinMaxObserver::new()?) as Box<dyn Module>)
        })?;
        Ok(Changed::from_bool(changed))
    }
}
