//! The im2col buffers of a convolution call: one per image computed at once, from the
//! buffer cache and returned to it.

use crate::Float;

/// The im2col buffers of one convolution call, from the buffer cache (a fresh allocation of
/// this size would map new pages, each zeroed by a page fault): one per image computed at
/// once, taken and given back by each image, all returned to the cache at the end.
pub(super) struct Patches<T: Float> {
    free: std::sync::Mutex<Vec<Vec<T>>>,
    len: usize,
}

impl<T: Float> Patches<T> {
    /// Buffers of `len` elements for `images` images computed on the thread pool.
    pub(super) fn new(len: usize, images: usize) -> crate::Result<Self> {
        let count = if len == 0 {
            0
        } else {
            images.min(rayon::current_num_threads())
        };
        let free = (0..count)
            .map(|_| crate::buffer_cache::try_uninit_buffer::<T>("conv", len))
            .collect::<crate::Result<Vec<_>>>()?;
        Ok(Patches {
            free: std::sync::Mutex::new(free),
            len,
        })
    }

    /// A buffer: a new one only if every buffer is taken, which cannot happen while each
    /// image's task takes one and runs no other image's task before giving it back.
    pub(super) fn take(&self) -> Vec<T> {
        let taken = self.free.lock().unwrap_or_else(|e| e.into_inner()).pop();
        taken.unwrap_or_else(|| vec![T::zero(); self.len])
    }

    pub(super) fn give_back(&self, buffer: Vec<T>) {
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(buffer);
    }
}

impl<T: Float> Drop for Patches<T> {
    fn drop(&mut self) {
        let free = self.free.get_mut().unwrap_or_else(|e| e.into_inner());
        for buffer in free.drain(..) {
            crate::buffer_cache::recycle(buffer);
        }
    }
}
