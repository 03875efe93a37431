//! One guard for thread-local state: [`Restore`] sets a thread-local for a scope and puts the
//! value it held back when the scope ends, also on an early return, an error or a panic. Grad
//! mode, the trace recorders, the module call path and the other per-thread settings of
//! Tessera all scope themselves with it.

use std::cell::{Cell, RefCell};
use std::thread::LocalKey;

/// A thread-local whose value can be swapped out: a `thread_local!` holding a `Cell` or a
/// `RefCell`.
pub trait SwapSlot<T>: 'static {
    /// Stores `value` and returns the value it replaces.
    fn swap_value(&'static self, value: T) -> T;
}

impl<T: 'static> SwapSlot<T> for LocalKey<Cell<T>> {
    fn swap_value(&'static self, value: T) -> T {
        self.replace(value)
    }
}

impl<T: 'static> SwapSlot<T> for LocalKey<RefCell<T>> {
    fn swap_value(&'static self, value: T) -> T {
        self.replace(value)
    }
}

/// Holds the previous value of a thread-local and puts it back when dropped.
///
/// ```
/// use std::cell::Cell;
/// use tessera_tensor::Restore;
///
/// thread_local!(static DEPTH: Cell<u32> = const { Cell::new(0) });
/// {
///     let _inner = Restore::set(&DEPTH, 1);
///     assert_eq!(DEPTH.get(), 1);
/// }
/// assert_eq!(DEPTH.get(), 0);
/// ```
#[must_use = "the previous value is restored as soon as the guard is dropped"]
pub struct Restore<T: 'static> {
    slot: &'static dyn SwapSlot<T>,
    previous: Option<T>,
}

impl<T: 'static> Restore<T> {
    /// Sets `slot` to `value` until the guard is dropped.
    pub fn set(slot: &'static impl SwapSlot<T>, value: T) -> Restore<T> {
        let previous = slot.swap_value(value);
        Restore {
            slot,
            previous: Some(previous),
        }
    }
}

impl<T: 'static> Drop for Restore<T> {
    fn drop(&mut self) {
        if let Some(previous) = self.previous.take() {
            self.slot.swap_value(previous);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        static FLAG: Cell<bool> = const { Cell::new(false) };
        static NAME: RefCell<Option<String>> = const { RefCell::new(None) };
    }

    #[test]
    fn nested_guards_restore_in_reverse_order() {
        let outer = Restore::set(&NAME, Some("outer".to_string()));
        {
            let _inner = Restore::set(&NAME, Some("inner".to_string()));
            assert_eq!(NAME.with_borrow(|n| n.clone()).as_deref(), Some("inner"));
        }
        assert_eq!(NAME.with_borrow(|n| n.clone()).as_deref(), Some("outer"));
        drop(outer);
        assert_eq!(NAME.with_borrow(|n| n.clone()), None);
    }

    #[test]
    fn a_panic_inside_the_scope_still_restores() {
        let result = std::panic::catch_unwind(|| {
            let _guard = Restore::set(&FLAG, true);
            panic!("inside the scope");
        });
        assert!(result.is_err());
        assert!(!FLAG.get());
    }
}
