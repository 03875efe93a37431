//! The `.pt` target: a PyTorch zip checkpoint loaded as a value and as a state dict; whatever
//! loads must save and load back equal.

use tessera_nn::{load_pt, load_pt_state_dict, save_pt, save_pt_state_dict};

use crate::memory::{MemoryBound, measure};
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
    let (value, value_peak) = measure(|| load_pt(&path));
    PT_MEMORY.check("load_pt", data.len(), value_peak);
    if let Ok(value) = value {
        let again = scratch.path("value.pt");
        save_pt(&value, &again).expect("a loaded checkpoint saves again");
        let back = load_pt(&again).expect("a saved checkpoint loads back");
        assert!(
            same_value(&value, &back),
            "load(save(x)) != x for a .pt value"
        );
    }
    let (state, state_peak) = measure(|| load_pt_state_dict(&path));
    PT_MEMORY.check("load_pt_state_dict", data.len(), state_peak);
    if let Ok(state) = state {
        let again = scratch.path("state.pt");
        save_pt_state_dict(&state, &again).expect("a loaded state dict saves again");
        let back = load_pt_state_dict(&again).expect("a saved state dict loads back");
        assert!(
            same_state_dict(&state, &back),
            "load(save(x)) != x for a .pt state dict"
        );
    }
    value_peak.max(state_peak)
}
