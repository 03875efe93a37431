//! The hand-written kernels of the emulator's tests (`tests/ptx/*.ptx`) are valid PTX: each is
//! assembled by `ptxas` for sm_80 and sm_90. Skipped (with a printed line) when `TESSERA_PTXAS`
//! is unset, unless `TESSERA_REQUIRE_PTXAS=1`.

use crate::common;

#[test]
fn hand_written_kernels_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = common::ptxas() else { return };
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ptx");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    paths.sort();
    assert!(
        paths.len() >= 10,
        "the hand-written kernels are missing from {dir}"
    );
    for path in paths {
        let text = std::fs::read_to_string(&path).unwrap();
        let stem = path.file_stem().unwrap().to_string_lossy().into_owned();
        common::assemble(&ptxas, &stem, &text, &[80, 90]);
    }
}
