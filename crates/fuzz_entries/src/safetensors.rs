//! The safetensors target: a file loaded as a state dict; whatever loads must save and load
//! back equal.

use tessera_nn::{load_safetensors, save_safetensors};

use crate::memory::MemoryBound;
use crate::reload::Format;
use crate::same::same_state_dict;
use crate::scratch::Scratch;

/// The safetensors loader's bound: the file is read whole, its JSON header parsed into one
/// entry per tensor, and each tensor copied out of the file's bytes once.
pub const SAFETENSORS_MEMORY: MemoryBound = MemoryBound {
    per_input_byte: 64,
    fixed: 1 << 20,
};

/// Loads `data` as a safetensors file; panics if loading panics, exceeds
/// [`SAFETENSORS_MEMORY`], or a loaded state dict does not save and load back equal. Returns
/// the load's peak heap bytes.
pub fn safetensors(data: &[u8]) -> usize {
    let scratch = Scratch::new();
    let path = scratch.file("input.safetensors", data);
    let format = Format {
        name: "load_safetensors",
        bound: SAFETENSORS_MEMORY,
        load: |p| load_safetensors(p),
        save: |s, p| save_safetensors(s, p),
        same: same_state_dict,
    };
    format.check_reload(&path, data.len(), &scratch.path("again.safetensors"))
}
