//! The `.pt` target: a PyTorch zip checkpoint loaded as a value and as a state dict; whatever
//! loads must save and load back equal.

use tessera_nn::{load_pt, load_pt_state_dict, save_pt, save_pt_state_dict};

use crate::memory::MemoryBound;
use crate::reload::Format;
use crate::same::{same_state_dict, same_value};
use crate::scratch::Scratch;

/// The `.pt` loader's bound: each record is at most the file's size and is read once, the
/// unpickler's nodes grow with the pickle, and tensors may take up to the records' bytes plus
/// the rebuilder's fixed 256 MiB of slack for expanded or overlapping views.
pub const PT_MEMORY: MemoryBound = MemoryBound {
    per_input_byte: 64,
    fixed: 272 << 20,
};

/// Loads `data` as a `.pt` file both ways; panics if loading panics, exceeds [`PT_MEMORY`], or
/// a loaded checkpoint does not save and load back equal. Returns the larger of the two loads'
/// peak heap bytes.
pub fn pt(data: &[u8]) -> usize {
    let scratch = Scratch::new();
    let path = scratch.file("input.pt", data);
    let value = Format {
        name: "load_pt",
        bound: PT_MEMORY,
        load: |p| load_pt(p),
        save: |v, p| save_pt(v, p),
        same: same_value,
    };
    let state = Format {
        name: "load_pt_state_dict",
        bound: PT_MEMORY,
        load: |p| load_pt_state_dict(p),
        save: |s, p| save_pt_state_dict(s, p),
        same: same_state_dict,
    };
    let value_peak = value.check_reload(&path, data.len(), &scratch.path("value.pt"));
    let state_peak = state.check_reload(&path, data.len(), &scratch.path("state.pt"));
    value_peak.max(state_peak)
}
