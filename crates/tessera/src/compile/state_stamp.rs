//! What a compiled module's program was made from: each parameter and buffer of the source
//! module as it was (a detached view of its storage at the time) with its storage's version,
//! so that a changed weight (written in place, or given new storage by `set_data` or an
//! assigning `load_state_dict`) is noticed before the next call runs stale constants. The
//! check walks the module tree with a visitor and allocates nothing, as it runs on every call.

use crate::fx::GraphModule;
use crate::nn::{Module, Parameter, Visitor};
use tessera_tensor::Tensor;

/// The source's parameters and buffers, in visiting order (a tensor registered twice appears
/// twice): detached views of the storage each held (a handle's clone would follow `set_data`
/// to new storage) and that storage's version.
pub(super) struct StateStamp(Vec<(Tensor, u64)>);

impl StateStamp {
    /// The state of `source` now.
    pub(super) fn of(source: &GraphModule) -> Self {
        let mut stamp = Vec::new();
        visit_state(source, &mut |item| {
            if let StateItem::Tensor(t) = item {
                let version = t.version();
                stamp.push((t.detach(), version));
            }
        });
        StateStamp(stamp)
    }

    /// True when `source` holds the same storage in the same layout, unwritten since the stamp
    /// was taken.
    pub(super) fn is_current(&self, source: &GraphModule) -> bool {
        let (mut next, mut same) = (0, true);
        visit_state(source, &mut |item| {
            let StateItem::Tensor(t) = item else {
                return;
            };
            same = same
                && self.0.get(next).is_some_and(|(s, version)| {
                    t.shares_storage(s)
                        && t.version() == *version
                        && t.with_layout(|l, _| s.with_layout(|sl, _| l == sl))
                });
            next += 1;
        });
        same && next == self.0.len()
    }
}

/// What [`visit_state`] meets.
pub(super) enum StateItem<'a> {
    Module(&'a dyn Module),
    Tensor(&'a Tensor),
}

/// Calls `f` on `module` and each module of its tree, and on every parameter and buffer
/// tensor each registers (fields, then run-time registrations), depth first.
pub(super) fn visit_state<'a>(module: &'a dyn Module, f: &mut dyn FnMut(StateItem<'a>)) {
    struct Walk<'f, 'a>(&'f mut dyn FnMut(StateItem<'a>));
    impl<'a> Visitor<'a> for Walk<'_, 'a> {
        fn parameter(&mut self, _name: &str, param: Option<&'a Parameter>) {
            if let Some(p) = param {
                (self.0)(StateItem::Tensor(p.tensor()));
            }
        }
        fn buffer(&mut self, _name: &str, buffer: Option<&'a Tensor>, _persistent: bool) {
            if let Some(b) = buffer {
                (self.0)(StateItem::Tensor(b));
            }
        }
        fn child(&mut self, _name: &str, module: &'a dyn Module) {
            visit_state(module, self.0);
        }
    }
    f(StateItem::Module(module));
    let mut walk = Walk(f);
    module.visit_fields(&mut walk);
    module.core().visit_dynamic(&mut walk);
}
