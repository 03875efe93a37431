//! The joint forward+backward graph of every PyTorch conformance model through the compiler:
//! traced at op level with its loss, differentiated (`tessera_fx::autodiff`), lowered (what
//! the lowering leaves to eager kernels runs as external steps), then run by the kernel-IR
//! interpreter and by the JIT, it gives the graph interpreter's loss and gradients, and
//! PyTorch's recorded gradients where the case has them.

#[path = "../../../crates/fx/tests/autodiff_common/mod.rs"]
mod autodiff_common;
use crate::common;

use autodiff_common::{TracedCase, load_case_weights as load, trace_case};
use common::joint_env::Attributes;
use tessera_cpu::JitProgram;
use tessera_fx::autodiff::joint_graph;
use tessera_kernel::{Interpreter, lower, run_program};
use tessera_nn::layers::{Linear, ReLU};
use tessera_nn::models::note::{MyLinear, Net};
use tessera_nn::models::{Gpt, GptConfig, MobileNetV2, SmallCnn, VisionTransformer, VitConfig};
use tessera_nn::{Layer, ModuleExt, Sequential};
use tessera_tensor::Tensor;
use tessera_testkit::Case;

/// Traces `loss(model(input), target)` (cross-entropy with a target, else the output's sum),
/// derives the joint graph with respect to every parameter read and a float input, and checks
/// the kernel-IR interpreter and the JIT against the graph interpreter within `tol` (relative
/// to `max(|expected|, 1)`), then the JIT's gradients against PyTorch's `grad/*` entries.
fn check_model<M: Layer>(case_name: &str, model: &M, input_key: &str, with_target: bool, tol: f64) {
    let case = Case::load(case_name);
    let mut input = case.io(input_key);
    if input_key == "inputs" {
        // A training case's batches: the first one.
        input = input.select(0, 0).unwrap();
    }
    let TracedCase {
        traced,
        inputs,
        wrt,
        ..
    } = trace_case(&case, model, input, with_target);
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    let joint = joint_graph(&traced, &wrt).unwrap();
    let expected = joint.traced.interpret(model, &inputs).unwrap();
    let layouts: Vec<_> = inputs.iter().map(Tensor::layout).collect();
    let program = lower(joint.graph(), &layouts).unwrap();
    let env = Attributes {
        root: model,
        joint: &joint,
    };
    let interpreted = run_program(&program, &env, &Interpreter, &inputs).unwrap();
    let jit = JitProgram::compile(&program).unwrap();
    let jitted = run_program(&program, &env, &jit, &inputs).unwrap();
    assert!(jitted.len() >= joint.forward_outputs + wrt.len());
    let names = std::iter::repeat_n("loss".to_string(), joint.forward_outputs)
        .chain(wrt.iter().map(|g| format!("gradient of {g}")));
    for (((name, e), i), j) in names.zip(&expected).zip(&interpreted).zip(&jitted) {
        common::assert_within(&format!("{name} (interpreter)"), e, i, tol, &program);
        common::assert_within(&format!("{name} (JIT)"), e, j, tol, &program);
    }
    for (name, grad) in wrt.iter().zip(&jitted[joint.forward_outputs..]) {
        let key = if *name == "x" {
            "grad/input".to_string()
        } else {
            format!("grad/{name}")
        };
        if case.io.contains_key(&key) {
            case.check(&key, grad);
        }
    }
}

#[test]
fn a_mylinear() {
    let model = MyLinear::new(4, 3).unwrap();
    load("a_mylinear", &model);
    check_model("a_mylinear", &model, "input", false, 1e-6);
}

#[test]
fn b_sequential() {
    let model = Sequential::new()
        .add(Linear::new(4, 3).unwrap())
        .add(ReLU::new())
        .add(Linear::new(3, 1).unwrap());
    load("b_sequential", &model);
    check_model("b_sequential", &model, "input", false, 1e-6);
}

#[test]
fn d_cnn_eval() {
    let model = SmallCnn::new().unwrap();
    load("d_cnn_eval", &model);
    model.eval();
    check_model("d_cnn_eval", &model, "input", true, 1e-5);
}

#[test]
fn d_cnn_train() {
    let model = SmallCnn::new().unwrap();
    load("d_cnn_train", &model);
    model.train(true);
    check_model("d_cnn_train", &model, "input", true, 1e-4);
}

#[test]
fn f_train_net() {
    let model = Net::new().unwrap();
    load("f_train_sgd", &model);
    check_model("f_train_sgd", &model, "inputs", false, 1e-5);
}

#[test]
fn r_models_mobilenet_v2() {
    let model = MobileNetV2::new(10, 0.25).unwrap();
    load("r_models_mobilenet_v2", &model);
    model.eval();
    check_model("r_models_mobilenet_v2", &model, "input", true, 1e-4);
}

#[test]
fn r_models_vit() {
    let model = VisionTransformer::new(VitConfig::tiny(10)).unwrap();
    load("r_models_vit", &model);
    model.eval();
    check_model("r_models_vit", &model, "input", true, 1e-4);
}

#[test]
fn r_models_gpt() {
    let model = Gpt::new(GptConfig::tiny()).unwrap();
    load("r_models_gpt", &model);
    check_model("r_models_gpt", &model, "input", true, 1e-4);
}
