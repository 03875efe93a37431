//! torchvision's models against fixtures that `scripts/torchvision_models.py` wrote once from
//! torchvision 0.29.2 (the tests never need PyTorch): the ordered state-dict keys and shapes of
//! resnet18/34/50, vgg11_bn, mobilenet_v2 and vit_b_16, and the eval-mode outputs of resnet34,
//! resnet50 and vgg11_bn on a fixed input with every weight given by the script's formula.

use crate::common;

use common::{assert_close, formula_tensor, read_safetensors};
use tessera_nn::models::{mobilenet_v2, resnet18, resnet34, resnet50, vgg11_bn, vit_b_16};
use tessera_nn::{Layer, Module, ModuleExt, StateDict, init};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

/// `key dim,dim,...` per state-dict entry, as the script wrote them.
fn torchvision_keys(model: &str) -> Vec<String> {
    let path = format!("{FIXTURES}/torchvision_keys/{model}.txt");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines().map(String::from).collect()
}

fn keys_and_shapes(model: &dyn Module) -> Vec<String> {
    let state = model.state_dict().unwrap();
    state
        .iter()
        .map(|(k, t)| {
            let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
            format!("{k} {}", dims.join(","))
        })
        .collect()
}

/// Builds without initialising the weights (the keys are all that matter here).
fn built<M>(build: impl FnOnce() -> tessera_nn::Result<M>) -> M {
    init::skip_init(build).unwrap()
}

#[test]
fn resnets_have_torchvisions_keys_and_shapes() {
    assert_eq!(
        keys_and_shapes(&built(|| resnet18(1000))),
        torchvision_keys("resnet18")
    );
    assert_eq!(
        keys_and_shapes(&built(|| resnet34(1000))),
        torchvision_keys("resnet34")
    );
    assert_eq!(
        keys_and_shapes(&built(|| resnet50(1000))),
        torchvision_keys("resnet50")
    );
}

#[test]
fn vgg11_bn_has_torchvisions_keys_and_shapes() {
    assert_eq!(
        keys_and_shapes(&built(|| vgg11_bn(1000))),
        torchvision_keys("vgg11_bn")
    );
}

#[test]
fn mobilenet_v2_has_torchvisions_keys_and_shapes() {
    let model = built(|| mobilenet_v2(1000, 1.0));
    assert_eq!(keys_and_shapes(&model), torchvision_keys("mobilenet_v2"));
}

#[test]
fn vit_b_16_has_torchvisions_keys_and_shapes() {
    assert_eq!(
        keys_and_shapes(&built(|| vit_b_16(1000))),
        torchvision_keys("vit_b_16")
    );
}

/// The script's formula for every state-dict entry of `model`.
fn formula_state(model: &dyn Module) -> StateDict {
    let mut state = StateDict::new();
    for (p, (key, t)) in model.state_dict().unwrap().iter().enumerate() {
        state.insert(key, formula_tensor(key, &t.shape(), p));
    }
    state
}

/// Loads the formula weights into `model`, runs it in eval mode on the fixture's input and
/// compares with torchvision's float32 output (atol 10x its float32-vs-float64 error, at least
/// 1e-5).
fn check_formula_output(name: &str, model: &dyn Layer) {
    let bytes = std::fs::read(format!("{FIXTURES}/torchvision_outputs.safetensors")).unwrap();
    let (_, header) = safetensors::SafeTensors::read_metadata(&bytes).unwrap();
    let error: f64 = header.metadata().as_ref().unwrap()[&format!("{name}/f32_vs_f64_maxabs")]
        .parse()
        .unwrap();
    let tensors = read_safetensors(&bytes);
    assert!(
        model
            .load_state_dict(&formula_state(model), true, false)
            .unwrap()
            .is_empty()
    );
    model.eval();
    let _guard = tessera_tensor::no_grad();
    let output = model.forward(tensors["input"].clone()).unwrap();
    let expected = &tensors[&format!("{name}/output")];
    assert_close(&output, expected, 1e-4, (10.0 * error).max(1e-5), name);
}

#[test]
fn resnet34_computes_torchvisions_output() {
    check_formula_output("resnet34", &built(|| resnet34(10)));
}

#[test]
fn resnet50_computes_torchvisions_output() {
    check_formula_output("resnet50", &built(|| resnet50(10)));
}

#[test]
fn vgg11_bn_computes_torchvisions_output() {
    check_formula_output("vgg11_bn", &built(|| vgg11_bn(10)));
}
