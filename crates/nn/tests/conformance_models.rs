//! The `r_models_*` conformance cases: torchvision's MobileNetV2 and VisionTransformer and the
//! tied-weight `TinyGPT`, built from `tessera_nn::models`, loaded strictly from PyTorch's
//! `state_dict.pt`, with their key orders, reprs, outputs, activations (forward hooks), losses
//! and the gradients of the input and of every parameter the case stores.

use crate::common;

use common::{Case, check_state_dict_keys, load_strict};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tessera_nn::models::{Gpt, GptConfig, MobileNetV2, VisionTransformer, VitConfig};
use tessera_nn::optim::{Optimizer, SGD, SgdOptions};
use tessera_nn::{Call, Layer, Module, ModuleExt};
use tessera_tensor::Tensor;
use tessera_tensor::functional as F;

/// Loads the case's `state_dict.pt` strictly into `model` and checks its key order and repr.
fn load_case(case: &Case, model: &dyn Module) {
    load_strict(case, model);
    check_state_dict_keys(case, model);
    assert_eq!(model.repr(), case.json["model"]["repr"].as_str().unwrap());
}

/// Records the output of the submodule at each `act/<path>` io key of the case.
fn capture_activations(case: &Case, model: &dyn Module) -> Arc<Mutex<HashMap<String, Tensor>>> {
    let captured = Arc::new(Mutex::new(HashMap::new()));
    for key in case.io.keys().filter(|k| k.starts_with("act/")) {
        let path = key["act/".len()..].to_string();
        let sink = captured.clone();
        model
            .get_submodule(&path)
            .unwrap()
            .register_forward_hook(move |_, _, outputs| {
                sink.lock()
                    .unwrap()
                    .insert(path.clone(), outputs[0].clone());
                Ok(None)
            });
    }
    captured
}

/// Runs the case: `output = model(input)`, every activation, `cross_entropy` over the
/// flattened logits, then the gradients of a float input and of every parameter with a
/// `grad/<key>` entry (and no entry left unchecked).
fn check_forward_and_backward(case: &Case, model: &dyn Layer) {
    let acts = capture_activations(case, model);
    let input = case.io("input");
    let input = if input.dtype().is_float() {
        input.requires_grad_(true).unwrap()
    } else {
        input
    };
    let output = model.forward(input.clone()).unwrap();
    case.check_key("output", &output);
    let acts = acts.lock().unwrap();
    assert_eq!(
        acts.len(),
        case.io.keys().filter(|k| k.starts_with("act/")).count()
    );
    for (path, act) in acts.iter() {
        case.check_key(&format!("act/{path}"), act);
    }
    let classes = *output.shape().last().unwrap();
    let logits = output
        .reshape(&[output.numel() / classes, classes])
        .unwrap();
    let target = case.io("target");
    let target = target.reshape(&[target.numel()]).unwrap();
    let loss = F::cross_entropy(&logits, &target, Default::default()).unwrap();
    case.check_key("loss", &loss);
    loss.backward().unwrap();
    let mut checked = 0;
    if input.requires_grad() {
        case.check_key("grad/input", &input.grad().unwrap());
        checked += 1;
    }
    for (key, p) in model.named_parameters() {
        let io_key = format!("grad/{key}");
        if case.io.contains_key(&io_key) {
            case.check_key(&io_key, &p.grad().unwrap());
            checked += 1;
        }
    }
    let stored = case.io.keys().filter(|k| k.starts_with("grad/")).count();
    assert_eq!(checked, stored, "every stored gradient is checked");
}

#[test]
fn mobilenet_v2_matches_torchvision_in_eval_mode() {
    let case = Case::load("r_models_mobilenet_v2");
    let model = MobileNetV2::new(10, 0.25).unwrap();
    load_case(&case, &model);
    model.eval();
    check_forward_and_backward(&case, &model);
}

#[test]
fn vision_transformer_matches_torchvision() {
    let case = Case::load("r_models_vit");
    let model = VisionTransformer::new(VitConfig::tiny(10)).unwrap();
    load_case(&case, &model);
    model.eval();
    check_forward_and_backward(&case, &model);
}

#[test]
fn tiny_gpt_matches_pytorch_with_the_head_tied_to_the_token_embedding() {
    let case = Case::load("r_models_gpt");
    let model = Gpt::new(GptConfig::tiny()).unwrap();
    load_case(&case, &model);
    let names: Vec<String> = model
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        case.json["model"]["named_parameters"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    );
    check_forward_and_backward(&case, &model);
}

#[test]
fn tiny_gpt_head_stays_tied_after_loading_and_an_optimizer_step() {
    let case = Case::load("r_models_gpt");
    let model = Gpt::new(GptConfig::tiny()).unwrap();
    load_case(&case, &model);
    assert!(model.head.weight.shares_storage(&model.tok_emb.weight));
    assert_eq!(model.head.weight.id(), model.tok_emb.weight.id());
    let before = model.tok_emb.weight.detach().deep_clone().unwrap();
    let mut sgd = SGD::new(
        model.parameter_tensors(),
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
    )
    .unwrap();
    let logits = model.call(case.io("input")).unwrap();
    let loss = F::cross_entropy(
        &logits.reshape(&[24, 50]).unwrap(),
        &case.io("target").reshape(&[24]).unwrap(),
        Default::default(),
    )
    .unwrap();
    loss.backward().unwrap();
    sgd.step().unwrap();
    let (token, head) = (
        model.tok_emb.weight.to_vec::<f32>().unwrap(),
        model.head.weight.to_vec::<f32>().unwrap(),
    );
    assert_eq!(token, head);
    assert_ne!(token, before.to_vec::<f32>().unwrap());
    let state = model.state_dict().unwrap();
    assert_eq!(
        state.get("head.weight").unwrap().to_vec::<f32>().unwrap(),
        state
            .get("tok_emb.weight")
            .unwrap()
            .to_vec::<f32>()
            .unwrap()
    );
    assert_eq!(
        model.parameters().len(),
        28,
        "the tied weight is one parameter"
    );
}
