//! The artifact target: a graph artifact folder (`graph.json` and `weights.safetensors`) made
//! from one fuzz input, loaded, run when small, and saved and loaded back equal.

use tessera_fx::artifact::{load, save};

use crate::memory::{MemoryBound, measure};
use crate::run_graph::run_if_small;
use crate::same::same_tensor;
use crate::scratch::Scratch;

/// The artifact loader's bound: the graph's JSON and the weights' safetensors, each loaded
/// within its own bound, then verified in O(rank) per value.
pub const ARTIFACT_MEMORY: MemoryBound = MemoryBound {
    per_input_byte: 64,
    fixed: 1 << 20,
};

/// One fuzz input holding both files: a 4-byte little-endian length of `graph.json`, its bytes,
/// then the weights file's bytes.
pub fn artifact_input(graph_json: &[u8], weights: &[u8]) -> Vec<u8> {
    let len = u32::try_from(graph_json.len()).unwrap_or(u32::MAX);
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(graph_json);
    out.extend_from_slice(weights);
    out
}

/// The two files of an input made by [`artifact_input`]; lengths past the end are clamped.
fn split(data: &[u8]) -> (&[u8], &[u8]) {
    let Some((len, rest)) = data.split_first_chunk::<4>() else {
        return (data, &[]);
    };
    let len = (u32::from_le_bytes(*len) as usize).min(rest.len());
    rest.split_at(len)
}

/// Loads `data` as an artifact folder; panics if loading panics, exceeds [`ARTIFACT_MEMORY`],
/// a small loaded graph runs to other shapes than it declares, or a loaded artifact does not
/// save and load back equal. Returns the load's peak heap bytes.
pub fn artifact(data: &[u8]) -> usize {
    let (graph_json, weights) = split(data);
    let scratch = Scratch::new();
    scratch.file("graph.json", graph_json);
    scratch.file("weights.safetensors", weights);
    let (traced, peak) = measure(|| load(scratch.root()));
    ARTIFACT_MEMORY.check("artifact::load", data.len(), peak);
    let Ok(traced) = traced else {
        return peak;
    };
    run_if_small(&traced);
    let again = scratch.path("again");
    save(&traced, &again).expect("a loaded artifact saves again");
    let back = load(&again).expect("a saved artifact loads back");
    assert!(
        back.graph.same_structure(&traced.graph),
        "load(save(x)) changed the graph"
    );
    assert!(
        back.attributes.len() == traced.attributes.len()
            && back
                .attributes
                .iter()
                .all(|(k, t)| traced.attributes.get(k).is_some_and(|u| same_tensor(t, u))),
        "load(save(x)) changed the weights"
    );
    peak
}
