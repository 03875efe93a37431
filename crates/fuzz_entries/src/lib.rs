//! The entry points of Tessera's fuzz targets: one function per kind of file a user receives
//! from others (`.pt` checkpoints, safetensors, printed graph text, graph artifacts). Each
//! takes the raw bytes, loads them through the public API and panics only when a property
//! fails: the loader panicked, used more memory than its stated bound, or a file it wrote
//! itself did not load back equal. The cargo-fuzz targets under `fuzz/` and the replay test
//! of this crate (which runs every file of `fuzz/corpus` and `fuzz/crashes` on stable) call
//! these same functions.

mod artifact;
mod corpus;
mod graph_text;
mod memory;
mod pt;
mod reload;
mod run_graph;
mod safetensors;
mod same;
mod scratch;

pub use artifact::{ARTIFACT_MEMORY, artifact, artifact_input};
pub use corpus::{TARGETS, Target, corpus_files, fuzz_dir};
pub use graph_text::{GRAPH_TEXT_MEMORY, graph_text};
pub use memory::{MemoryBound, PeakAlloc, measure};
pub use pt::{PT_MEMORY, pt};
pub use safetensors::{SAFETENSORS_MEMORY, safetensors};
pub use same::{same_state_dict, same_tensor, same_value};
