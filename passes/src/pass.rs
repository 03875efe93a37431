//! The [`Pass`] trait every rewrite implements, and [`Changed`], what a pass reports back.

use crate::Result;
use tessera_fx::GraphModule;

/// Whether a pass changed the graph (or the module's attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changed {
    Yes,
    No,
}

impl Changed {
    /// `Yes` when `changed` is true.
    pub fn from_bool(changed: bool) -> Changed {
        if changed { Changed::Yes } else { Changed::No }
    }

    pub fn is_changed(self) -> bool {
        self == Changed::Yes
    }
}

/// One rewrite of a [`GraphModule`]: its graph plus the tensors its `get_attr` nodes read
/// (the root's parameters and buffers, and `gm.constants`).
pub trait Pass {
    /// The pass's name in the registry, timing reports and errors.
    fn name(&self) -> &'static str;

    /// Rewrites `gm` in place.
    fn run(&self, gm: &mut GraphModule) -> Result<Changed>;
}
