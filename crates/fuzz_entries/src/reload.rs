//! The property every checkpoint target checks: loading stays within the format's memory
//! bound, and whatever loads saves and loads back equal.

use std::path::Path;

use crate::memory::{MemoryBound, measure};

/// How one kind of checkpoint is loaded, saved and compared.
pub(crate) struct Format<T> {
    /// The loader's name in panic messages (`load_pt`).
    pub name: &'static str,
    pub bound: MemoryBound,
    pub load: fn(&Path) -> tessera_nn::Result<T>,
    pub save: fn(&T, &Path) -> tessera_nn::Result<()>,
    pub same: fn(&T, &T) -> bool,
}

impl<T> Format<T> {
    /// Loads `input` (`input_len` bytes) and checks the bound; when it loads, saves it to
    /// `again` and checks that it loads back equal. Returns the load's peak heap bytes.
    pub fn check_reload(&self, input: &Path, input_len: usize, again: &Path) -> usize {
        let (loaded, peak) = measure(|| (self.load)(input));
        self.bound.check(self.name, input_len, peak);
        if let Ok(loaded) = loaded {
            (self.save)(&loaded, again)
                .unwrap_or_else(|e| panic!("{}: what loaded does not save again: {e}", self.name));
            let back = (self.load)(again)
                .unwrap_or_else(|e| panic!("{}: what it saved does not load back: {e}", self.name));
            assert!(
                (self.same)(&loaded, &back),
                "{}: load(save(x)) != x",
                self.name
            );
        }
        peak
    }
}
