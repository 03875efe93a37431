//! A `.pt` file whose tensor bytes were changed after it was written is an error, never
//! changed values: every zip entry's CRC-32 is checked (200 of 200 single-bit flips in tensor
//! records used to load `Ok` with different values).

use tessera_nn::StateDict;
use tessera_nn::checkpoint::{load_pt_state_dict, save_pt_state_dict};
use tessera_tensor::Tensor;

#[test]
fn every_bit_flip_in_a_tensor_record_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.pt");
    let values: Vec<f32> = vec![1.5, -2.25, 3.125, 4.0625];
    let mut state = StateDict::new();
    state.insert("w", Tensor::from_vec(values.clone(), &[4]).unwrap());
    save_pt_state_dict(&state, &path).unwrap();
    let loaded = load_pt_state_dict(&path).unwrap();
    assert_eq!(loaded.get("w").unwrap().to_vec::<f32>().unwrap(), values);

    let original = std::fs::read(&path).unwrap();
    let pattern: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let at = original
        .windows(pattern.len())
        .position(|w| w == pattern.as_slice())
        .expect("the tensor's bytes are stored uncompressed");
    for byte in at..at + pattern.len() {
        for bit in 0..8 {
            let mut flipped = original.clone();
            flipped[byte] ^= 1 << bit;
            std::fs::write(&path, &flipped).unwrap();
            let e = load_pt_state_dict(&path).expect_err("a flipped bit must not load");
            assert!(
                e.to_string().contains("CRC-32"),
                "byte {byte} bit {bit}: {e}"
            );
        }
    }
}
