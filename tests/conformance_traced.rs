//! Every PyTorch conformance model traced into a graph and run through the interpreter (as a
//! `GraphModule`): outputs, gradients, training trajectories, dropout semantics and hooks
//! match the recorded PyTorch results. Workspace-level: the models (nn), the tracer and
//! interpreter (fx) and the PyTorch cases (testkit) together, through the facade.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{Dropout, Linear, ReLU};
use tessera::nn::models::SmallCnn;
use tessera::nn::optim::{Adam, AdamOptions, AdamW, AdamWOptions, Optimizer, SGD, SgdOptions};
use tessera::nn::{Call, Layer, ModuleExt, Sequential, load_pt_state_dict};
use tessera::tensor::functional as F;
use tessera::tensor::{DType, Tensor, TensorMeta};
use tessera_testkit::{Case, conformance_dir};

use tessera::nn::models::note::{MyLinear, Net};

/// Traces `model` (with its case weights loaded from the PyTorch `.pt` file) for `input`, in
/// training mode or not: the modes of traced-through code are fixed at trace time, as in FX
/// (leaf modules keep following `train`/`eval`).
fn traced<M: Layer>(
    case: &str,
    model: M,
    input: TensorMeta,
    policy: LeafPolicy,
    training: bool,
) -> (Arc<M>, GraphModule) {
    let model = Arc::new(model);
    model.train(training);
    let path = conformance_dir().join(case).join("state_dict.pt");
    if path.exists() {
        model
            .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
            .unwrap();
    }
    let graph = trace(&*model, input, policy).unwrap();
    let gm = GraphModule::new(model.clone(), graph);
    (model, gm)
}

fn policies() -> [LeafPolicy; 2] {
    [LeafPolicy::default(), LeafPolicy::none()]
}

#[test]
fn a_mylinear() {
    let case = Case::load("a_mylinear");
    for input in ["input", "input_batch"] {
        let (_, gm) = traced(
            "a_mylinear",
            MyLinear::new(4, 3).unwrap(),
            case.io(input).meta(),
            LeafPolicy::default(),
            true,
        );
        let out = gm.call(case.io(input)).unwrap();
        case.check(
            if input == "input" {
                "output"
            } else {
                "output_batch"
            },
            &out,
        );
    }
    let (_, gm) = traced(
        "a_mylinear",
        MyLinear::new(4, 3).unwrap(),
        case.io("input").meta(),
        LeafPolicy::default(),
        true,
    );
    let x = case.io("input").detach().requires_grad_(true).unwrap();
    gm.call(x.clone())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    case.check("grad/input", &x.grad().unwrap());
    for (key, p) in gm.named_parameters() {
        case.check(&format!("grad/{key}"), &p.grad().unwrap());
    }
}

#[test]
fn b_sequential() {
    let case = Case::load("b_sequential");
    for policy in policies() {
        let seq = Sequential::new()
            .add(Linear::new(4, 3).unwrap())
            .add(ReLU::new())
            .add(Linear::new(3, 1).unwrap());
        let (_, gm) = traced("b_sequential", seq, case.io("input").meta(), policy, true);
        let x = case.io("input").detach().requires_grad_(true).unwrap();
        let out = gm.call(x.clone()).unwrap();
        case.check("output", &out);
        out.sum_all().unwrap().backward().unwrap();
        case.check("grad/input", &x.grad().unwrap());
        for (key, p) in gm.named_parameters() {
            case.check(&format!("grad/{key}"), &p.grad().unwrap());
        }
    }
}

fn cnn_case(name: &str, training: bool) {
    let case = Case::load(name);
    for policy in policies() {
        let (model, gm) = traced(
            name,
            SmallCnn::new().unwrap(),
            case.io("input").to_dtype(DType::F32).unwrap().meta(),
            policy,
            training,
        );
        let x = case
            .io("input")
            .to_dtype(DType::F32)
            .unwrap()
            .detach()
            .requires_grad_(true)
            .unwrap();
        let out = gm.call(x.clone()).unwrap();
        case.check("output", &out);
        let loss =
            F::cross_entropy(&out, &case.io("target"), F::CrossEntropyOptions::default()).unwrap();
        case.check("loss", &loss);
        loss.backward().unwrap();
        case.check("grad/input", &x.grad().unwrap());
        for (key, p) in gm.named_parameters() {
            case.check(&format!("grad/{key}"), &p.grad().unwrap());
        }
        if training {
            // Module-level graphs call the real BatchNorm layers, which update their running
            // statistics; op-level graphs record batch_norm ops, whose functional form
            // updates them too only through the layer (PyTorch's FX behaves the same).
            if matches!(policy_name(&gm), "module") {
                for (key, buffer) in model.named_buffers() {
                    case.check(&format!("after/{key}"), &buffer);
                }
            }
        }
    }
}

fn policy_name(gm: &GraphModule) -> &'static str {
    if gm.graph.to_string().contains("call_module") {
        "module"
    } else {
        "op"
    }
}

#[test]
fn d_cnn_eval() {
    cnn_case("d_cnn_eval", false);
}

#[test]
fn d_cnn_train() {
    cnn_case("d_cnn_train", true);
}

fn trajectory(case_name: &str, make: impl Fn(Vec<Tensor>) -> Box<dyn Optimizer>) {
    let case = Case::load(case_name);
    let inputs = case.io("inputs");
    let net = Net::new().unwrap();
    let (_, gm) = traced(
        case_name,
        net,
        TensorMeta::new([8, 4], DType::F32),
        LeafPolicy::default(),
        true,
    );
    let mut opt = make(gm.parameter_tensors());
    let losses = case.io("losses").to_vec_f64().unwrap();
    for step in 1..=20 {
        let loss = gm
            .call(inputs.select(0, step - 1).unwrap())
            .unwrap()
            .abs()
            .unwrap()
            .sum_all()
            .unwrap();
        let value = loss.item::<f64>().unwrap();
        assert!(
            (value - losses[step - 1]).abs() <= case.atol + case.rtol * losses[step - 1].abs(),
            "{case_name} step {step}"
        );
        opt.zero_grad(true);
        loss.backward().unwrap();
        opt.step().unwrap();
    }
    for (key, p) in gm.named_parameters() {
        case.check(&format!("after_step_20/{key}"), &p);
    }
}

#[test]
fn f_train_trajectories() {
    trajectory("f_train_sgd", |p| {
        Box::new(
            SGD::new(
                p,
                SgdOptions {
                    lr: 1e-2,
                    momentum: 0.9,
                    weight_decay: 1e-2,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    });
    trajectory("f_train_adam", |p| {
        Box::new(
            Adam::new(
                p,
                AdamOptions {
                    lr: 1e-3,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    });
    trajectory("f_train_adamw", |p| {
        Box::new(
            AdamW::new(
                p,
                AdamWOptions {
                    lr: 1e-3,
                    weight_decay: 1e-2,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    });
}

#[test]
fn g_dropout() {
    let case = Case::load("g_dropout");
    let x = case.io("input");
    let (_, gm) = traced(
        "g_dropout",
        // A leaf module call, so that the graph follows train/eval.
        Sequential::new().add(Dropout::new(0.5).unwrap()),
        x.meta(),
        LeafPolicy::default(),
        true,
    );
    gm.eval();
    assert_eq!(
        gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap(),
        case.io("output_eval").to_vec::<f32>().unwrap()
    );
    gm.train(true);
    let y = gm.call(x.clone()).unwrap().to_vec::<f32>().unwrap();
    assert!(
        y.iter()
            .zip(x.to_vec::<f32>().unwrap())
            .all(|(&o, i)| o == 0.0 || o == 2.0 * i)
    );
}

#[test]
fn l_hooks() {
    let case = Case::load("l_hooks");
    let x = case.io("input");
    let (_, gm) = traced(
        "l_hooks",
        Linear::new(3, 3).unwrap(),
        x.meta(),
        LeafPolicy::default(),
        true,
    );
    case.check("output_no_hooks", &gm.call(x.clone()).unwrap());
    let pre = gm.register_forward_pre_hook(|_, inputs| Ok(Some(vec![inputs[0].add_scalar(1.0)?])));
    case.check("output_pre_hook", &gm.call(x.clone()).unwrap());
    let post =
        gm.register_forward_hook(|_, inputs, outputs| Ok(Some(vec![outputs[0].add(&inputs[0])?])));
    case.check("output_both_hooks", &gm.call(x.clone()).unwrap());
    pre.remove();
    post.remove();
    case.check("output_after_remove", &gm.call(x.clone()).unwrap());
    gm.register_full_backward_hook(|grad_inputs, _| {
        Ok(Some(
            grad_inputs
                .iter()
                .map(|g| g.as_ref().map(|g| Tensor::full_like(g, 42.0).unwrap()))
                .collect(),
        ))
    });
    let xg = x.detach().requires_grad_(true).unwrap();
    gm.call(xg.clone())
        .unwrap()
        .sum_all()
        .unwrap()
        .backward()
        .unwrap();
    case.check("input_grad_backward_hook", &xg.grad().unwrap());
    case.check(
        "weight_grad_with_backward_hook",
        &gm.get_parameter("weight").unwrap().grad().unwrap(),
    );
}
