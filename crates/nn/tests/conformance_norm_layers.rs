//! InstanceNorm1d/2d (`m_instance_norm`) and RMSNorm (`q_layers_misc`'s `rmsnorm` sub-cases)
//! against PyTorch: state dicts loaded strictly from `state_dict.pt`, reprs, outputs in train
//! and eval mode, gradients of inputs and parameters, and running statistics after a
//! train-mode forward.

use crate::common;

use common::Case;
use tessera_nn::layers::{
    InstanceNorm1d, InstanceNorm2d, InstanceNormOptions, RMSNorm, RMSNormOptions,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, StateDict, load_pt_state_dict};
use tessera_tensor::Tensor;

/// The holder module of `m_instance_norm`, children in PyTorch's order.
#[derive(Module)]
struct InstanceNorms {
    core: ModuleCore,
    in1d_track: InstanceNorm1d,
    in1d_default: InstanceNorm1d,
    in2d_track: InstanceNorm2d,
    in2d_default: InstanceNorm2d,
    in2d_affine: InstanceNorm2d,
}

fn tracked() -> InstanceNormOptions {
    InstanceNormOptions::default()
        .affine(true)
        .track_running_stats(true)
}

/// A fresh holder with the case's stored state (every sub-case starts from it).
fn instance_norms(case: &Case) -> InstanceNorms {
    let model = InstanceNorms {
        core: ModuleCore::default(),
        in1d_track: InstanceNorm1d::with_options(3, tracked()).unwrap(),
        in1d_default: InstanceNorm1d::new(3).unwrap(),
        in2d_track: InstanceNorm2d::with_options(3, tracked()).unwrap(),
        in2d_default: InstanceNorm2d::new(3).unwrap(),
        in2d_affine: InstanceNorm2d::with_options(3, InstanceNormOptions::default().affine(true))
            .unwrap(),
    };
    common::load_strict(case, &model);
    model
}

/// Runs sub-case `<module>/<variant>` on `layer` and checks outputs, gradients and buffers.
fn run_subcase<M: Forward<Output = Tensor>>(case: &Case, module: &str, variant: &str, layer: &M) {
    let id = format!("{module}/{variant}");
    let input = case.input(&id, "input");
    let output = layer.call(input.clone()).unwrap();
    let params = common::params_of(layer);
    case.check_subcase(&id, &[("output", output)], &[("input", input)], &params);
    for (name, buffer) in layer.named_buffers() {
        let key = format!("{id}/after/{name}");
        if case.io.contains_key(&key) {
            case.check_key(&key, &buffer);
        }
    }
}

fn layer_by_name<'a>(model: &'a InstanceNorms, name: &str) -> &'a dyn Module {
    model.get_submodule(name).unwrap()
}

#[test]
fn instance_norm_reprs_and_state_dict_keys_match_pytorch() {
    let case = Case::load("m_instance_norm");
    let model = instance_norms(&case);
    for (name, spec) in case.json["modules"].as_object().unwrap() {
        let layer = layer_by_name(&model, name);
        assert_eq!(layer.repr(), spec["repr"].as_str().unwrap(), "{name}");
        let keys = common::state_dict_keys(layer);
        let expected = common::json_strings(&spec["state_dict_keys"]);
        assert_eq!(keys, expected, "{name}");
    }
}

#[test]
fn instance_norm_train_and_eval_match_pytorch() {
    let case = Case::load("m_instance_norm");
    for variant in ["train", "eval"] {
        let model = instance_norms(&case);
        model.train(variant == "train");
        run_subcase(&case, "in1d_track", variant, &model.in1d_track);
        run_subcase(&case, "in1d_default", variant, &model.in1d_default);
        run_subcase(&case, "in2d_track", variant, &model.in2d_track);
        run_subcase(&case, "in2d_default", variant, &model.in2d_default);
        run_subcase(&case, "in2d_affine", variant, &model.in2d_affine);
    }
}

#[test]
fn instance_norm1d_takes_an_unbatched_input_as_one_sample() {
    let case = Case::load("m_instance_norm");
    let model = instance_norms(&case);
    run_subcase(&case, "in1d_default", "unbatched", &model.in1d_default);
}

#[test]
fn instance_norm_warmup_forwards_reproduce_the_stored_running_stats() {
    let case = Case::load("m_instance_norm");
    for (module, fresh) in [
        (
            "in1d_track",
            Box::new(InstanceNorm1d::with_options(3, tracked()).unwrap()) as Box<dyn Module>,
        ),
        (
            "in2d_track",
            Box::new(InstanceNorm2d::with_options(3, tracked()).unwrap()),
        ),
    ] {
        for i in 0..2 {
            let input = case.io(&format!("{module}/warmup_input/{i}"));
            match fresh.as_any().downcast_ref::<InstanceNorm1d>() {
                Some(l) => l.call(input).unwrap(),
                None => fresh
                    .as_any()
                    .downcast_ref::<InstanceNorm2d>()
                    .unwrap()
                    .call(input)
                    .unwrap(),
            };
        }
        for name in ["running_mean", "running_var", "num_batches_tracked"] {
            let stored = case.weight(&format!("{module}.{name}"));
            common::assert_close(&fresh.get_buffer(name).unwrap(), &stored, 1e-5, 1e-6, name);
        }
    }
}

#[test]
fn instance_norm_rank_and_channel_mismatches_are_errors_naming_the_layer() {
    let layer = InstanceNorm2d::with_options(3, tracked()).unwrap();
    let err = layer
        .call(Tensor::zeros(&[2, 3], tessera_tensor::DType::F32).unwrap())
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("InstanceNorm2d: expected 3D or 4D input"),
        "{err}"
    );
    let err = layer
        .call(Tensor::zeros(&[2, 4, 2, 2], tessera_tensor::DType::F32).unwrap())
        .unwrap_err();
    assert!(err.to_string().contains("match num_features (3)"), "{err}");
}

/// The RMSNorm modules of `q_layers_misc`, loaded strictly from their keys of the case's
/// `state_dict.pt` (the case's other modules are layers of issue 14's part B).
fn rms_norm_loaded(name: &str, layer: &RMSNorm) {
    let dir = common::conformance_dir().join("q_layers_misc");
    let all = load_pt_state_dict(dir.join("state_dict.pt")).unwrap();
    let mut own = StateDict::new();
    let prefix = format!("{name}.");
    for (key, tensor) in all.iter() {
        if let Some(rest) = key.strip_prefix(&prefix) {
            own.insert(rest, tensor.clone());
        }
    }
    assert!(layer.load_state_dict(&own, true, false).unwrap().is_empty());
}

#[test]
fn rms_norm_with_machine_epsilon_and_two_normalised_dims_matches_pytorch() {
    let case = Case::load("q_layers_misc");
    let layers = [
        ("rmsnorm", RMSNorm::new(&[6]).unwrap()),
        (
            "rmsnorm_2d",
            RMSNorm::with_options(&[3, 6], RMSNormOptions::default().eps(1e-5)).unwrap(),
        ),
    ];
    for (name, layer) in &layers {
        assert_eq!(
            layer.repr(),
            case.json["modules"][name]["repr"].as_str().unwrap()
        );
        rms_norm_loaded(name, layer);
        let input = case.input(name, "input");
        let output = layer.call(input.clone()).unwrap();
        let weight = layer.weight.as_ref().unwrap().tensor().clone();
        case.check_subcase(
            name,
            &[("output", output)],
            &[("input", input)],
            &[("weight".to_string(), weight)],
        );
    }
}
