//! Fuzzes loading printed graph text (`Graph::parse`); the checks live in `tessera_fuzz_entries::graph_text`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_fuzz_entries::PeakAlloc;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

fuzz_target!(|data: &[u8]| {
    tessera_fuzz_entries::graph_text(data);
});
