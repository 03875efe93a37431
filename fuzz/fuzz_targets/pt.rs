//! Fuzzes loading a `.pt` checkpoint (zip + restricted unpickler); the checks live in `tessera_fuzz_entries::pt`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tessera_fuzz_entries::PeakAlloc;

#[global_allocator]
static ALLOC: PeakAlloc = PeakAlloc;

fuzz_target!(|data: &[u8]| {
    tessera_fuzz_entries::pt(data);
});
