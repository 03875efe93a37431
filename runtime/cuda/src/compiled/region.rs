//! Where a tensor's elements lie in CUDA memory of one device: the block of its storage (views
//! of one storage share it), the address of its first element and the bytes of its elements,
//! found through the seam's device storage. The compiled runner's inputs, update targets and
//! their locks all look their memory up here.

use crate::driver::DevicePtr;
use crate::tensor::storage::CudaStorage;
use tessera_tensor::backend::DeviceStorage;
use tessera_tensor::layout::Layout;

/// The memory of the elements one layout addresses in CUDA storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Region {
    /// The start of the storage's block.
    pub(crate) block: DevicePtr,
    /// The address of the first element.
    pub(crate) first: DevicePtr,
    /// The bytes of `layout.numel()` elements.
    pub(crate) bytes: usize,
}

impl Region {
    /// The region `layout` addresses in `m`, when `m` is CUDA memory of device `ordinal`.
    pub(crate) fn of(m: &dyn DeviceStorage, layout: &Layout, ordinal: usize) -> Option<Region> {
        let s = (m as &dyn std::any::Any)
            .downcast_ref::<CudaStorage>()
            .filter(|s| s.ordinal() == ordinal)?;
        let element = s.element_bytes();
        Some(Region {
            block: s.ptr(),
            first: s.ptr().add(layout.offset * element),
            bytes: layout.numel() * element,
        })
    }
}
