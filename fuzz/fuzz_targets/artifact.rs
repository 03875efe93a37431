//! Fuzzes loading a graph artifact folder (`graph.json` + weights); the checks live in `tessera_fuzz_entries::artifact`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_fuzz_entries::PeakAlloc;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

fuzz_target!(|data: &[u8]| {
    tessera_fuzz_entries::artifact(data);
});
