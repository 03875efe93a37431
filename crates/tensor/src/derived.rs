//! Values derived from a tensor's storage (a packed int8 weight, say), kept beside the
//! storage and dropped with it, valid until the storage is written in place.

use crate::layout::Layout;
use crate::tensor::poisoned;
use crate::{DType, Result, Tensor};
use std::any::{Any, TypeId};
use std::sync::{Arc, Mutex};

/// The derived values of one storage: one per (type, layout, dtype), stamped with the
/// storage version they were computed from.
#[derive(Debug, Default)]
pub(crate) struct DerivedValues(Mutex<Vec<Entry>>);

#[derive(Debug)]
struct Entry {
    type_id: TypeId,
    layout: Layout,
    dtype: DType,
    version: u64,
    value: Arc<dyn Any + Send + Sync>,
}

impl Tensor {
    /// `make(self)`, computed once and shared by every later call on a view with the same
    /// layout and dtype until the storage is written in place (its version moves) or freed,
    /// or until `is_current` says a kept value no longer fits (it was made with other inputs):
    /// for derived forms of constant tensors, such as weights packed for a GEMM kernel. An
    /// error from `make` is returned and nothing is kept.
    pub fn derived<T: Any + Send + Sync>(
        &self,
        is_current: impl Fn(&T) -> bool,
        make: impl FnOnce(&Tensor) -> Result<T>,
    ) -> Result<Arc<T>> {
        let data = self.data();
        let key = |e: &Entry| {
            e.type_id == TypeId::of::<T>() && e.layout == data.layout && e.dtype == data.dtype
        };
        let version = self.version();
        {
            let values = data.storage.derived.0.lock().unwrap_or_else(poisoned);
            if let Some(hit) = values.iter().find(|e| key(e) && e.version == version)
                && let Ok(value) = Arc::clone(&hit.value).downcast::<T>()
                && is_current(&value)
            {
                return Ok(value);
            }
        }
        // Computed outside the lock: `make` may read this tensor.
        let value = Arc::new(make(self)?);
        let mut values = data.storage.derived.0.lock().unwrap_or_else(poisoned);
        values.retain(|e| !key(e));
        values.push(Entry {
            type_id: TypeId::of::<T>(),
            layout: data.layout.clone(),
            dtype: data.dtype,
            version,
            value: value.clone(),
        });
        Ok(value)
    }
}
