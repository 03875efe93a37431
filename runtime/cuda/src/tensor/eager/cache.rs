//! The per-device cache of eager kernels, keyed by what decides their code: the op with its
//! attributes, and each operand's dtype and layout (shape, strides and offset are folded into
//! the index arithmetic). An op found unsupported is cached as such, so it is not lowered
//! again.

use super::compile::CompiledOp;
use crate::Result;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tessera_tensor::backend::DeviceOperand;
use tessera_tensor::{DType, Layout, Op};

/// What an eager op's kernels depend on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct EagerKey {
    /// The op with its attributes, as `Debug` prints it (ops hold floats, so they are not
    /// `Hash`; their printed form is exact and deterministic).
    op: String,
    operands: Vec<(DType, Layout)>,
}

impl EagerKey {
    pub(crate) fn new(op: &Op, inputs: &[DeviceOperand<'_>]) -> EagerKey {
        EagerKey {
            op: format!("{op:?}"),
            operands: inputs
                .iter()
                .map(|x| (x.memory.dtype(), x.layout.clone()))
                .collect(),
        }
    }
}

/// Loaded eager kernels of one device; `None` entries are ops with no kernels there.
#[derive(Debug, Default)]
pub(crate) struct KernelCache {
    entries: Mutex<HashMap<EagerKey, Option<Arc<CompiledOp>>>>,
}

impl KernelCache {
    /// The compiled op for `key`, compiling it with `compile` on a miss (outside the lock: two
    /// threads may both compile, and the second result is kept).
    pub(crate) fn get_or_compile(
        &self,
        key: EagerKey,
        compile: impl FnOnce() -> Result<Option<CompiledOp>>,
    ) -> Result<Option<Arc<CompiledOp>>> {
        if let Some(found) = self.lock().get(&key) {
            return Ok(found.clone());
        }
        let compiled = compile()?.map(Arc::new);
        self.lock().insert(key, compiled.clone());
        Ok(compiled)
    }

    /// How many ops have loaded kernels.
    pub(crate) fn len(&self) -> usize {
        self.lock().values().filter(|v| v.is_some()).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<EagerKey, Option<Arc<CompiledOp>>>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }
}
