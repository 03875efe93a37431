//! The PyTorch conformance models run eagerly on a CUDA device against the same models on the
//! CPU: each model built and loaded from its case's `state_dict.pt` twice, one copy moved to
//! the device with `Module::to_device`, both run on the case's input, and the device's output
//! compared with the CPU's (and with PyTorch's recorded output), then `output.sum()`
//! back-propagated on both and the input's and every parameter's gradient compared. An op
//! with no device kernel yet stops that model's forward or backward and is reported by name,
//! so one run lists what the device still lacks; anything else (a mismatch, a device failure)
//! fails.

#![allow(dead_code)]

use std::error::Error;
use tessera_nn::layers::{Linear, ReLU};
use tessera_nn::models::note::MyLinear;
use tessera_nn::models::{Gpt, GptConfig, MobileNetV2, SmallCnn, VisionTransformer, VitConfig};
use tessera_nn::{Layer, ModuleExt, NnError, Sequential, load_pt_state_dict};
use tessera_tensor::{DType, Device, Tensor, TensorError};
use tessera_testkit::{Case, assert_close, conformance_dir};

/// A conformance model: its case, how to build it, and whether it runs in training mode.
pub struct ModelCase {
    pub case: &'static str,
    pub build: fn() -> Box<dyn Layer>,
    pub training: bool,
}

fn sequential() -> Box<dyn Layer> {
    Box::new(
        Sequential::new()
            .add(Linear::new(4, 3).unwrap())
            .add(ReLU::new())
            .add(Linear::new(3, 1).unwrap()),
    )
}

/// Every conformance case that is one model run on its `input`.
pub fn every_model() -> Vec<ModelCase> {
    vec![
        ModelCase {
            case: "a_mylinear",
            build: || Box::new(MyLinear::new(4, 3).unwrap()),
            training: true,
        },
        ModelCase {
            case: "b_sequential",
            build: sequential,
            training: true,
        },
        ModelCase {
            case: "d_cnn_eval",
            build: || Box::new(SmallCnn::new().unwrap()),
            training: false,
        },
        ModelCase {
            case: "d_cnn_train",
            build: || Box::new(SmallCnn::new().unwrap()),
            training: true,
        },
        ModelCase {
            case: "r_models_mobilenet_v2",
            build: || Box::new(MobileNetV2::new(10, 0.25).unwrap()),
            training: false,
        },
        ModelCase {
            case: "r_models_vit",
            build: || Box::new(VisionTransformer::new(VitConfig::tiny(10)).unwrap()),
            training: false,
        },
        ModelCase {
            case: "r_models_gpt",
            build: || Box::new(Gpt::new(GptConfig::tiny()).unwrap()),
            training: true,
        },
    ]
}

/// The op with no kernel on the device that `e` (or an error it wraps) reports, if any.
pub fn unsupported_op(e: &(dyn Error + 'static)) -> Option<String> {
    let mut at: Option<&(dyn Error + 'static)> = Some(e);
    while let Some(err) = at {
        // `NnError::Op` is transparent: its `source` skips the tensor error it holds.
        let tensor_error = err
            .downcast_ref::<TensorError>()
            .or_else(|| match err.downcast_ref() {
                Some(NnError::Op(t)) => Some(t),
                _ => None,
            });
        if let Some(TensorError::UnsupportedOnDevice { op, .. }) = tensor_error {
            return Some(op.clone());
        }
        at = err.source();
    }
    None
}

/// How far one model got on the device.
#[derive(Debug, PartialEq, Eq)]
pub enum Reached {
    /// Forward and backward ran and matched the CPU.
    Everything,
    /// The forward matched; the backward stopped at this op.
    ForwardOnly { missing: String },
    /// The forward stopped at this op.
    Nothing { missing: String },
}

/// The model of `m` built, loaded from its case and put in its mode.
fn loaded(m: &ModelCase) -> Box<dyn Layer> {
    let model = (m.build)();
    let path = conformance_dir().join(m.case).join("state_dict.pt");
    if path.exists() {
        model
            .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
            .unwrap();
    }
    model.train(m.training);
    model
}

/// The case's input as the model takes it: floats as f32 with gradients, ids as they are.
fn input(case: &Case, device: Device) -> Tensor {
    let x = case.io("input");
    if x.dtype().is_float() {
        let x = x.to_dtype(DType::F32).unwrap().to_device(device).unwrap();
        x.requires_grad_(true).unwrap()
    } else {
        x.to_device(device).unwrap()
    }
}

/// Runs `m` on the CPU and on `device` and compares them; panics on a mismatch or on any
/// device error other than a missing kernel.
pub fn check_model(m: &ModelCase, device: Device) -> Reached {
    let case = Case::load(m.case);
    let (rtol, atol) = (case.rtol.max(1e-4), case.atol.max(1e-5));
    let cpu_model = loaded(m);
    let cpu_x = input(&case, Device::Cpu);
    let cpu_y = cpu_model.forward(cpu_x.clone()).unwrap();
    case.check("output", &cpu_y);
    let dev_model = loaded(m);
    dev_model.to_device(device).unwrap();
    let dev_x = input(&case, device);
    let dev_y = match dev_model.forward(dev_x.clone()) {
        Ok(y) => y,
        Err(e) => match unsupported_op(&e) {
            Some(missing) => return Reached::Nothing { missing },
            None => panic!("{}: forward on {device}: {e}", m.case),
        },
    };
    assert_eq!(dev_y.device(), device, "{}", m.case);
    let dev_y_host = dev_y.to_device(Device::Cpu).unwrap();
    assert_close(
        &dev_y_host,
        &cpu_y,
        rtol,
        atol,
        &format!("{} output", m.case),
    );
    case.check("output", &dev_y_host);
    cpu_y.sum_all().unwrap().backward().unwrap();
    let backward = dev_y.sum_all().and_then(|s| s.backward());
    if let Err(e) = backward {
        return match unsupported_op(&e) {
            Some(missing) => Reached::ForwardOnly { missing },
            None => panic!("{}: backward on {device}: {e}", m.case),
        };
    }
    if let (Some(c), Some(d)) = (cpu_x.grad(), dev_x.grad()) {
        let d = d.to_device(Device::Cpu).unwrap();
        assert_close(&d, &c, rtol, atol, &format!("{} input gradient", m.case));
    }
    let dev_params = dev_model.named_parameters();
    for ((name, c), (_, d)) in cpu_model.named_parameters().iter().zip(&dev_params) {
        if let Some(c) = c.grad() {
            let d = d
                .grad()
                .unwrap_or_else(|| panic!("{}: no gradient of {name}", m.case));
            let d = d.to_device(Device::Cpu).unwrap();
            assert_close(
                &d,
                &c,
                rtol,
                atol,
                &format!("{} gradient of {name}", m.case),
            );
        }
    }
    Reached::Everything
}

/// Runs every model of `models` on `device`, printing how far each got.
pub fn check_models(models: &[ModelCase], device: Device) -> Vec<(&'static str, Reached)> {
    models
        .iter()
        .map(|m| {
            let reached = check_model(m, device);
            eprintln!("{} on {device}: {reached:?}", m.case);
            (m.case, reached)
        })
        .collect()
}
