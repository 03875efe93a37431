//! The joint forward+backward graph of every PyTorch conformance model, traced at op level
//! with its loss: run by the interpreter, it gives the loss and gradients eager autograd gives
//! on the same model and batch, and PyTorch's recorded gradients.

use crate::autodiff_common;

use autodiff_common::{
    TracedCase, assert_joint_matches_eager, case_loss, load_case_weights as load, parameters_read,
    trace_case, traced_loss,
};
use tessera_nn::layers::{Linear, ReLU};
use tessera_nn::models::note::{MyLinear, Net};
use tessera_nn::models::{Gpt, GptConfig, MobileNetV2, SmallCnn, VisionTransformer, VitConfig};
use tessera_nn::{Call, Layer, ModuleExt, Sequential};
use tessera_testkit::Case;

/// Traces `model` with `loss(model(x), target)` at op level, derives the joint graph with
/// respect to every parameter read (and `x` when it is float), and checks it against eager
/// autograd; then checks the joint gradients against PyTorch's `grad/*` entries.
fn check_model<M: Layer>(case_name: &str, model: &M, with_target: bool, tolerance: (f64, f64)) {
    let case = Case::load(case_name);
    let TracedCase {
        traced,
        inputs,
        input_names,
        wrt,
    } = trace_case(&case, model, case.io("input"), with_target);
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    assert_joint_matches_eager(
        model,
        &traced,
        &wrt,
        &input_names,
        &inputs,
        |t| case_loss(&model.call(t[0].clone()).unwrap(), t.get(1)).unwrap(),
        tolerance,
    );
    let (joint, outputs) = autodiff_common::run_joint(model, &traced, &wrt, &inputs);
    for (name, grad) in wrt.iter().zip(&outputs[joint.forward_outputs..]) {
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
    check_model("a_mylinear", &model, false, (1e-6, 1e-7));
}

#[test]
fn b_sequential() {
    let model = Sequential::new()
        .add(Linear::new(4, 3).unwrap())
        .add(ReLU::new())
        .add(Linear::new(3, 1).unwrap());
    load("b_sequential", &model);
    check_model("b_sequential", &model, false, (1e-6, 1e-7));
}

#[test]
fn d_cnn_eval() {
    let model = SmallCnn::new().unwrap();
    load("d_cnn_eval", &model);
    model.eval();
    check_model("d_cnn_eval", &model, true, (1e-5, 1e-6));
}

#[test]
fn d_cnn_train() {
    let model = SmallCnn::new().unwrap();
    load("d_cnn_train", &model);
    model.train(true);
    check_model("d_cnn_train", &model, true, (1e-5, 1e-6));
}

#[test]
fn f_train_net_first_step() {
    let case = Case::load("f_train_sgd");
    let model = Net::new().unwrap();
    load("f_train_sgd", &model);
    let x = case.io("inputs").select(0, 0).unwrap();
    let traced = traced_loss(&model, &[("x", x.meta())], |t| {
        Ok(vec![model.call(t[0].clone())?.abs()?.sum_all()?])
    });
    let wrt = parameters_read(&traced, &model);
    let wrt: Vec<&str> = wrt.iter().map(String::as_str).collect();
    assert_joint_matches_eager(
        &model,
        &traced,
        &wrt,
        &["x"],
        &[x],
        |t| {
            model
                .call(t[0].clone())
                .unwrap()
                .abs()
                .unwrap()
                .sum_all()
                .unwrap()
        },
        (1e-6, 1e-7),
    );
}

#[test]
fn r_models_mobilenet_v2() {
    let model = MobileNetV2::new(10, 0.25).unwrap();
    load("r_models_mobilenet_v2", &model);
    model.eval();
    check_model("r_models_mobilenet_v2", &model, true, (1e-4, 1e-5));
}

#[test]
fn r_models_vit() {
    let model = VisionTransformer::new(VitConfig::tiny(10)).unwrap();
    load("r_models_vit", &model);
    model.eval();
    check_model("r_models_vit", &model, true, (1e-4, 1e-5));
}

#[test]
fn r_models_gpt() {
    let model = Gpt::new(GptConfig::tiny()).unwrap();
    load("r_models_gpt", &model);
    check_model("r_models_gpt", &model, true, (1e-4, 1e-5));
}
