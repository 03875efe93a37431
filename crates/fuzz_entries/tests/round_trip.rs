//! Files the library writes load back equal: random state dicts (every dtype, 0-dim, empty and
//! small shapes, awkward key names) through `.pt` and safetensors.

use proptest::prelude::*;
use tessera_fuzz_entries::same_state_dict;
use tessera_nn::{
    StateDict, load_pt_state_dict, load_safetensors, save_pt_state_dict, save_safetensors,
};
use tessera_tensor::{DType, Tensor};

const DTYPES: [DType; 9] = DType::ALL;

fn tensor() -> impl Strategy<Value = Tensor> {
    (
        prop::collection::vec(0usize..4, 0..4),
        0..DTYPES.len(),
        any::<u64>(),
    )
        .prop_map(|(shape, dtype, seed)| {
            let numel: usize = shape.iter().product();
            // Values spread over signs, fractions and large magnitudes, from the seed.
            let values: Vec<f64> = (0..numel as u64)
                .map(|i| {
                    let bits = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(i.wrapping_mul(1442695040888963407));
                    ((bits >> 11) as f64 / (1u64 << 40) as f64) - 4096.0
                })
                .collect();
            Tensor::from_vec(values, &shape)
                .and_then(|t| t.to_dtype(DTYPES[dtype]))
                .expect("a small tensor")
        })
}

fn state_dict() -> impl Strategy<Value = StateDict> {
    (
        prop::collection::vec(("[a-z_]{1,4}(\\.[a-z0-9]{1,3}){0,2}", tensor()), 0..5),
        prop::collection::vec(("[a-z]{0,3}", any::<i64>()), 0..3),
    )
        .prop_map(|(entries, versions)| {
            let mut state = StateDict::new();
            for (key, tensor) in entries {
                state.insert(key, tensor);
            }
            for (prefix, version) in versions {
                state.metadata.insert(prefix, version);
            }
            state
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn a_written_pt_state_dict_loads_back_equal(state in state_dict()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.pt");
        save_pt_state_dict(&state, &path).unwrap();
        let back = load_pt_state_dict(&path).unwrap();
        prop_assert!(same_state_dict(&state, &back));
    }

    #[test]
    fn a_written_safetensors_state_dict_loads_back_equal(state in state_dict()) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        save_safetensors(&state, &path).unwrap();
        let back = load_safetensors(&path).unwrap();
        prop_assert!(same_state_dict(&state, &back));
    }
}
