//! Finding the module a `call_module` node targets, with the error passes report.

use crate::{PassError, Result};
use tessera_fx::GraphModule;
use tessera_nn::{Module, ModuleExt};

/// The submodule at `target` of the graph module (the traced model's or an owned one).
pub(crate) fn module_at<'a>(gm: &'a GraphModule, target: &str) -> Result<&'a dyn Module> {
    gm.get_submodule(target)
        .map_err(|e| PassError::Unsupported(format!("call_module[{target}]: {e}")))
}
