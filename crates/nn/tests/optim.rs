//! Optimizers and LR schedulers: PyTorch's 20-step training trajectories, every option
//! against scalar reference updates, param groups, state_dict round trips and load errors,
//! and schedules against PyTorch's closed forms.

use crate::common;

use common::{Case, assert_close};
use tessera_nn::optim::{
    Adam, AdamOptions, AdamW, AdamWOptions, CosineAnnealingLR, GroupOptions, LrScheduler,
    Optimizer, RMSprop, RmsPropOptions, SGD, SgdOptions, StepLR,
};
use tessera_nn::{Key, NnError, Result, Value};
use tessera_tensor::{DType, Tensor};

// ----- helpers -----

const KEYS: [&str; 4] = ["l0.weight", "l0.bias", "l1.weight", "l1.bias"];

/// A float64 leaf that requires grad.
fn param(values: &[f64]) -> Tensor {
    Tensor::from_vec(values.to_vec(), &[values.len()])
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// Gives `p` the gradient `grad` and takes one step.
fn step_with(opt: &mut dyn Optimizer, p: &Tensor, grad: &[f64]) -> Result<()> {
    p.set_grad(Some(Tensor::from_vec(grad.to_vec(), &[grad.len()])?));
    opt.step()
}

fn assert_all_close(actual: &[f64], expected: &[f64], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: length");
    for (i, (a, e)) in actual.iter().zip(expected).enumerate() {
        assert!(
            (a - e).abs() <= 1e-12 * (1.0 + e.abs()),
            "{what}[{i}]: {a} but expected {e}"
        );
    }
}

fn invalid_message(r: Result<()>) -> String {
    match r {
        Err(NnError::Invalid(msg)) => msg,
        other => panic!("expected NnError::Invalid, got {other:?}"),
    }
}

fn entry<'a>(v: &'a Value, path: &[Key]) -> &'a Value {
    path.iter().fold(v, |v, k| {
        v.get(k.clone())
            .unwrap_or_else(|| panic!("missing key {k} in {v:?}"))
    })
}

/// The dict under `path`, for editing a saved state dict.
fn dict_mut<'a>(v: &'a mut Value, path: &[Key]) -> &'a mut indexmap::IndexMap<Key, Value> {
    let v = path.iter().fold(v, |v, k| match v {
        Value::Dict(d) => d.get_mut(k).unwrap_or_else(|| panic!("missing key {k}")),
        other => panic!("not a dict: {other:?}"),
    });
    match v {
        Value::Dict(d) => d,
        other => panic!("not a dict: {other:?}"),
    }
}

fn int(i: i64) -> Key {
    Key::Int(i)
}

fn s(k: &str) -> Key {
    Key::from(k)
}

// ----- conformance: the Modules-note Net trained for 20 steps -----

/// Trains the note's Net on the case's inputs and checks losses, params after steps 1, 5
/// and 20, and the optimizer state after step 20.
fn check_trajectory(
    name: &str,
    make: impl FnOnce(Vec<Tensor>) -> Result<Box<dyn Optimizer>>,
    state_keys: &[&str],
) -> Result<()> {
    let case = Case::load(name);
    let params: Vec<Tensor> = KEYS
        .iter()
        .map(|k| case.weight(k).deep_clone()?.requires_grad_(true))
        .collect::<std::result::Result<_, _>>()?;
    let [w0, b0, w1, b1] = [0, 1, 2, 3].map(|i| params[i].clone());
    let mut opt = make(params.clone())?;
    let inputs = case.io("inputs");
    let losses = case.io("losses");
    for s in 1..=20 {
        let x = inputs.select(0, s - 1)?;
        let out = x.matmul(&w0)?.add(&b0)?.relu()?.matmul(&w1)?.add(&b1)?;
        let loss = out.abs()?.sum_all()?;
        let expected = losses.select(0, s - 1)?;
        assert_close(
            &loss,
            &expected,
            case.rtol,
            case.atol,
            &format!("{name} loss {s}"),
        );
        opt.zero_grad(true);
        loss.backward()?;
        opt.step()?;
        if [1, 5, 20].contains(&s) {
            for (k, p) in KEYS.iter().zip(&params) {
                case.check(&format!("after_step_{s}/{k}"), p);
            }
        }
    }
    let sd = opt.state_dict();
    for (i, k) in KEYS.iter().enumerate() {
        for key in state_keys {
            let t = entry(&sd, &[s("state"), int(i as i64), s(key)])
                .as_tensor()
                .expect("state tensor");
            case.check(&format!("opt_state_after_step_20/{k}/{key}"), t);
        }
    }
    Ok(())
}

#[test]
fn sgd_trajectory_matches_pytorch() -> Result<()> {
    let options = SgdOptions {
        lr: 1e-2,
        momentum: 0.9,
        weight_decay: 1e-2,
        ..Default::default()
    };
    check_trajectory(
        "f_train_sgd",
        |p| Ok(Box::new(SGD::new(p, options)?)),
        &["momentum_buffer"],
    )
}

#[test]
fn adam_trajectory_matches_pytorch() -> Result<()> {
    check_trajectory(
        "f_train_adam",
        |p| Ok(Box::new(Adam::new(p, AdamOptions::default())?)),
        &["step", "exp_avg", "exp_avg_sq"],
    )
}

#[test]
fn adamw_trajectory_matches_pytorch() -> Result<()> {
    check_trajectory(
        "f_train_adamw",
        |p| Ok(Box::new(AdamW::new(p, AdamWOptions::default())?)),
        &["step", "exp_avg", "exp_avg_sq"],
    )
}

// ----- SGD -----

#[test]
fn sgd_plain_step_is_p_minus_lr_grad() -> Result<()> {
    let p = param(&[1.0, 2.0]);
    let options = SgdOptions {
        lr: 0.1,
        ..Default::default()
    };
    let mut opt = SGD::new(vec![p.clone()], options)?;
    step_with(&mut opt, &p, &[0.5, -1.0])?;
    assert_all_close(&values(&p), &[0.95, 2.1], "p");
    // Without momentum PyTorch keeps no state.
    assert!(
        entry(&opt.state_dict(), &[s("state")])
            .as_dict()
            .unwrap()
            .is_empty()
    );
    Ok(())
}

#[test]
fn sgd_momentum_with_dampening_starts_from_the_gradient() -> Result<()> {
    let p = param(&[1.0]);
    let options = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        dampening: 0.5,
        ..Default::default()
    };
    let mut opt = SGD::new(vec![p.clone()], options)?;
    // buf = g = 2; p = 1 - 0.1 * 2.
    step_with(&mut opt, &p, &[2.0])?;
    assert_all_close(&values(&p), &[0.8], "step 1");
    // buf = 0.9 * 2 + 0.5 * 4 = 3.8; p = 0.8 - 0.38.
    step_with(&mut opt, &p, &[4.0])?;
    assert_all_close(&values(&p), &[0.42], "step 2");
    let buf = entry(
        &opt.state_dict(),
        &[s("state"), int(0), s("momentum_buffer")],
    )
    .clone();
    assert_all_close(&values(buf.as_tensor().unwrap()), &[3.8], "buf");
    Ok(())
}

#[test]
fn sgd_nesterov_with_weight_decay() -> Result<()> {
    let p = param(&[1.0]);
    let options = SgdOptions {
        lr: 0.1,
        momentum: 0.9,
        weight_decay: 0.1,
        nesterov: true,
        ..Default::default()
    };
    let mut opt = SGD::new(vec![p.clone()], options)?;
    // g = 0.5 + 0.1 * 1 = 0.6; buf = 0.6; update = 0.6 + 0.9 * 0.6 = 1.14.
    step_with(&mut opt, &p, &[0.5])?;
    assert_all_close(&values(&p), &[0.886], "step 1");
    // g = 0.5 + 0.0886 = 0.5886; buf = 0.54 + 0.5886 = 1.1286; update = 0.5886 + 1.01574.
    step_with(&mut opt, &p, &[0.5])?;
    assert_all_close(
        &values(&p),
        &[0.886 - 0.1 * (0.5886 + 0.9 * 1.1286)],
        "step 2",
    );
    Ok(())
}

#[test]
fn sgd_maximize_ascends() -> Result<()> {
    let p = param(&[1.0]);
    let options = SgdOptions {
        lr: 0.5,
        maximize: true,
        ..Default::default()
    };
    let mut opt = SGD::new(vec![p.clone()], options)?;
    step_with(&mut opt, &p, &[2.0])?;
    assert_all_close(&values(&p), &[2.0], "p");
    Ok(())
}

#[test]
fn sgd_rejects_nesterov_without_momentum_and_negative_lr() {
    let nesterov = SgdOptions {
        nesterov: true,
        ..Default::default()
    };
    let msg = invalid_message(SGD::new(vec![param(&[1.0])], nesterov).map(|_| ()));
    assert!(
        msg.contains("Nesterov momentum requires a momentum and zero dampening"),
        "{msg}"
    );
    let negative = SgdOptions {
        lr: -1.0,
        ..Default::default()
    };
    let msg = invalid_message(SGD::new(vec![param(&[1.0])], negative).map(|_| ()));
    assert!(msg.contains("invalid learning rate: -1"), "{msg}");
}

// ----- Adam, AdamW -----

/// Scalar Adam as PyTorch writes it, over a sequence of gradients of one element.
fn adam_reference(p0: f64, grads: &[f64], o: &AdamOptions) -> Vec<f64> {
    let (b1, b2) = o.betas;
    let (mut p, mut m, mut v, mut vmax) = (p0, 0.0, 0.0, 0.0f64);
    let mut out = Vec::new();
    for (t, &grad) in grads.iter().enumerate() {
        let t = (t + 1) as f64;
        let mut g = grad;
        if o.decoupled_weight_decay {
            p *= 1.0 - o.lr * o.weight_decay;
        } else {
            g += o.weight_decay * p;
        }
        m += (1.0 - b1) * (g - m);
        v = b2 * v + (1.0 - b2) * g * g;
        vmax = vmax.max(v);
        let second = if o.amsgrad { vmax } else { v };
        let denom = second.sqrt() / (1.0 - b2.powf(t)).sqrt() + o.eps;
        p -= o.lr / (1.0 - b1.powf(t)) * m / denom;
        out.push(p);
    }
    out
}

const GRADS: [f64; 4] = [0.5, -2.0, 0.1, 3.0];

fn drive(opt: &mut dyn Optimizer, p: &Tensor) -> Result<Vec<f64>> {
    GRADS
        .iter()
        .map(|&g| {
            step_with(opt, p, &[g])?;
            Ok(values(p)[0])
        })
        .collect()
}

#[test]
fn adam_l2_weight_decay_and_amsgrad_match_reference() -> Result<()> {
    for amsgrad in [false, true] {
        let options = AdamOptions {
            lr: 0.1,
            weight_decay: 0.3,
            amsgrad,
            ..Default::default()
        };
        let p = param(&[1.5]);
        let mut opt = Adam::new(vec![p.clone()], options.clone())?;
        let actual = drive(&mut opt, &p)?;
        assert_all_close(&actual, &adam_reference(1.5, &GRADS, &options), "adam");
        let state = entry(&opt.state_dict(), &[s("state"), int(0)]).clone();
        let keys: Vec<String> = state
            .as_dict()
            .unwrap()
            .keys()
            .map(|k| k.to_string())
            .collect();
        let mut expected = vec!["step", "exp_avg", "exp_avg_sq"];
        if amsgrad {
            expected.push("max_exp_avg_sq");
        }
        assert_eq!(keys, expected);
    }
    Ok(())
}

#[test]
fn adamw_decays_the_parameter_not_the_gradient() -> Result<()> {
    for amsgrad in [false, true] {
        let options = AdamWOptions {
            lr: 0.1,
            weight_decay: 0.3,
            amsgrad,
            ..Default::default()
        };
        let p = param(&[1.5]);
        let mut opt = AdamW::new(vec![p.clone()], options.clone())?;
        let actual = drive(&mut opt, &p)?;
        let reference = adam_reference(1.5, &GRADS, &options.into());
        assert_all_close(&actual, &reference, "adamw");
    }
    let adamw = AdamW::new(vec![param(&[1.0])], AdamWOptions::default())?;
    let GroupOptions::Adam(o) = &adamw.param_groups()[0].options else {
        panic!("AdamW groups hold Adam options")
    };
    assert!(o.decoupled_weight_decay && o.weight_decay == 1e-2);
    Ok(())
}

#[test]
fn adam_step_is_a_float32_scalar_tensor() -> Result<()> {
    let p = param(&[1.0]);
    let mut opt = Adam::new(vec![p.clone()], AdamOptions::default())?;
    step_with(&mut opt, &p, &[1.0])?;
    step_with(&mut opt, &p, &[1.0])?;
    let step = entry(&opt.state_dict(), &[s("state"), int(0), s("step")]).clone();
    let step = step.as_tensor().unwrap();
    assert_eq!((step.dtype(), step.shape()), (DType::F32, vec![]));
    assert_eq!(step.item::<f64>()?, 2.0);
    Ok(())
}

// ----- RMSprop -----

/// Scalar RMSprop as PyTorch writes it.
fn rmsprop_reference(p0: f64, grads: &[f64], o: &RmsPropOptions) -> Vec<f64> {
    let (mut p, mut sq, mut avg_g, mut buf) = (p0, 0.0, 0.0, 0.0);
    let mut out = Vec::new();
    for &grad in grads {
        let g = grad + o.weight_decay * p;
        sq = o.alpha * sq + (1.0 - o.alpha) * g * g;
        let avg = if o.centered {
            avg_g += (1.0 - o.alpha) * (g - avg_g);
            (sq - avg_g * avg_g).sqrt()
        } else {
            sq.sqrt()
        } + o.eps;
        if o.momentum > 0.0 {
            buf = o.momentum * buf + g / avg;
            p -= o.lr * buf;
        } else {
            p -= o.lr * g / avg;
        }
        out.push(p);
    }
    out
}

#[test]
fn rmsprop_options_match_reference() -> Result<()> {
    let variants = [
        RmsPropOptions::default(),
        RmsPropOptions {
            weight_decay: 0.2,
            ..Default::default()
        },
        RmsPropOptions {
            centered: true,
            momentum: 0.9,
            alpha: 0.9,
            lr: 0.05,
            ..Default::default()
        },
        RmsPropOptions {
            centered: true,
            weight_decay: 0.1,
            ..Default::default()
        },
    ];
    for options in variants {
        let p = param(&[1.5]);
        let mut opt = RMSprop::new(vec![p.clone()], options.clone())?;
        let actual = drive(&mut opt, &p)?;
        let what = format!("{options:?}");
        assert_all_close(&actual, &rmsprop_reference(1.5, &GRADS, &options), &what);
        let state = entry(&opt.state_dict(), &[s("state"), int(0)]).clone();
        let keys: Vec<String> = state
            .as_dict()
            .unwrap()
            .keys()
            .map(|k| k.to_string())
            .collect();
        let mut expected = vec!["step", "square_avg"];
        if options.momentum > 0.0 {
            expected.push("momentum_buffer");
        }
        if options.centered {
            expected.push("grad_avg");
        }
        assert_eq!(keys, expected, "{what}");
    }
    Ok(())
}

#[test]
fn rmsprop_first_step_by_hand() -> Result<()> {
    // sq = 0.01 * 4 = 0.04; p = 1 - 0.01 * 2 / (0.2 + 1e-8).
    let p = param(&[1.0]);
    let mut opt = RMSprop::new(vec![p.clone()], RmsPropOptions::default())?;
    step_with(&mut opt, &p, &[2.0])?;
    assert_all_close(&values(&p), &[1.0 - 0.02 / (0.2 + 1e-8)], "p");
    Ok(())
}

// ----- groups, skipping, zero_grad -----

#[test]
fn param_groups_use_their_own_lr() -> Result<()> {
    let a = param(&[1.0]);
    let b = param(&[1.0]);
    let defaults = SgdOptions {
        lr: 0.1,
        ..Default::default()
    };
    let mut opt = SGD::new(vec![a.clone()], defaults.clone())?;
    opt.add_param_group(
        vec![b.clone()],
        SgdOptions {
            lr: 0.01,
            ..defaults
        },
    )?;
    a.set_grad(Some(Tensor::from_vec(vec![1.0], &[1])?));
    b.set_grad(Some(Tensor::from_vec(vec![1.0], &[1])?));
    opt.step()?;
    assert_all_close(&values(&a), &[0.9], "a");
    assert_all_close(&values(&b), &[0.99], "b");
    opt.param_groups_mut()[1].set_lr(0.5);
    opt.step()?;
    assert_all_close(&values(&b), &[0.49], "b after set_lr");
    Ok(())
}

#[test]
fn params_without_grad_are_skipped_and_get_no_state() -> Result<()> {
    let a = param(&[1.0]);
    let b = param(&[1.0]);
    let mut opt = Adam::new(vec![a.clone(), b.clone()], AdamOptions::default())?;
    step_with(&mut opt, &b, &[1.0])?;
    assert_eq!(values(&a), [1.0]);
    let sd = opt.state_dict();
    let state = entry(&sd, &[s("state")]).as_dict().unwrap();
    assert_eq!(state.keys().cloned().collect::<Vec<_>>(), [int(1)]);
    Ok(())
}

#[test]
fn zero_grad_sets_none_or_zeros() -> Result<()> {
    let p = param(&[1.0, 2.0]);
    let opt = SGD::new(vec![p.clone()], SgdOptions::default())?;
    p.set_grad(Some(Tensor::from_vec(vec![3.0, 4.0], &[2])?));
    opt.zero_grad(false);
    assert_eq!(values(&p.grad().unwrap()), [0.0, 0.0]);
    opt.zero_grad(true);
    assert!(p.grad().is_none());
    Ok(())
}

#[test]
fn add_param_group_rejects_duplicates_non_leaves_and_empty_lists() -> Result<()> {
    let a = param(&[1.0]);
    let mut opt = SGD::new(vec![a.clone()], SgdOptions::default())?;
    let msg = invalid_message(opt.add_param_group(vec![a.clone()], SgdOptions::default()));
    assert!(
        msg.contains("param 0 of param group 1") && msg.contains("param group 0"),
        "{msg}"
    );
    let non_leaf = a.mul_scalar(2.0)?;
    let msg = invalid_message(opt.add_param_group(vec![non_leaf], SgdOptions::default()));
    assert!(msg.contains("not a leaf"), "{msg}");
    let msg = invalid_message(SGD::new(vec![], SgdOptions::default()).map(|_| ()));
    assert!(msg.contains("empty parameter list"), "{msg}");
    Ok(())
}

#[test]
fn step_refuses_a_group_holding_another_optimizers_options() -> Result<()> {
    let p = param(&[1.0]);
    let mut opt = SGD::new(vec![p.clone()], SgdOptions::default())?;
    opt.param_groups_mut()[0].options = GroupOptions::Adam(AdamOptions::default());
    let msg = invalid_message(step_with(&mut opt, &p, &[1.0]));
    assert_eq!(msg, "SGD: param group 0 holds Adam options");
    Ok(())
}

// ----- state_dict -----

#[test]
fn state_dict_numbers_params_across_groups_with_pytorch_keys() -> Result<()> {
    let (a, b, c) = (param(&[1.0]), param(&[1.0, 2.0]), param(&[3.0]));
    let mut opt = SGD::new(
        vec![a.clone(), b.clone()],
        SgdOptions {
            momentum: 0.9,
            ..Default::default()
        },
    )?;
    opt.add_param_group(
        vec![c.clone()],
        SgdOptions {
            lr: 0.5,
            ..Default::default()
        },
    )?;
    c.set_grad(Some(Tensor::from_vec(vec![1.0], &[1])?));
    opt.step()?;
    let sd = opt.state_dict();
    let groups = entry(&sd, &[s("param_groups")]).as_list().unwrap();
    let keys: Vec<String> = groups[0]
        .as_dict()
        .unwrap()
        .keys()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(
        keys,
        [
            "lr",
            "momentum",
            "dampening",
            "weight_decay",
            "nesterov",
            "maximize",
            "foreach",
            "differentiable",
            "fused",
            "params"
        ]
    );
    let indices = |g: &Value| -> Vec<i64> {
        g.get("params")
            .unwrap()
            .as_list()
            .unwrap()
            .iter()
            .map(|v| v.as_i64().unwrap())
            .collect()
    };
    assert_eq!(
        (indices(&groups[0]), indices(&groups[1])),
        (vec![0, 1], vec![2])
    );
    assert_eq!(groups[1].get("lr").unwrap().as_f64(), Some(0.5));
    // Group 1 has no momentum, so no param holds state.
    assert!(entry(&sd, &[s("state")]).as_dict().unwrap().is_empty());
    Ok(())
}

/// Steps `make`'s optimizer 6 times without interruption, and again with a state_dict
/// round trip into a fresh optimizer on fresh params after 3 steps: both must agree exactly.
fn check_round_trip(make: impl Fn(Vec<Tensor>) -> Result<Box<dyn Optimizer>>) -> Result<()> {
    let grads = [
        [0.5, -1.0],
        [0.2, 0.3],
        [-1.0, 2.0],
        [0.7, 0.1],
        [-0.4, -0.6],
        [1.0, 1.0],
    ];
    let fresh = || param(&[1.0, -0.5]);
    let run = |opt: &mut dyn Optimizer, p: &Tensor, steps: &[[f64; 2]]| -> Result<()> {
        steps.iter().try_for_each(|g| step_with(opt, p, g))
    };

    let p = fresh();
    let mut opt = make(vec![p.clone()])?;
    run(opt.as_mut(), &p, &grads)?;

    let q = fresh();
    let mut first = make(vec![q.clone()])?;
    run(first.as_mut(), &q, &grads[..3])?;
    let saved = first.state_dict();
    let saved_before = state_values(&saved);
    let r = q.deep_clone()?.requires_grad_(true)?;
    let mut second = make(vec![r.clone()])?;
    second.load_state_dict(&saved)?;
    run(second.as_mut(), &r, &grads[3..])?;

    assert_eq!(values(&r), values(&p));
    assert_eq!(
        state_values(&second.state_dict()),
        state_values(&opt.state_dict())
    );
    // The loaded state is a copy: the first optimizer's tensors did not move on.
    assert_eq!(state_values(&saved), saved_before);
    Ok(())
}

/// Every state tensor's values, keyed `param/name`, in state_dict order.
fn state_values(sd: &Value) -> Vec<(String, Vec<f64>)> {
    let state = entry(sd, &[s("state")]).as_dict().unwrap();
    state
        .iter()
        .flat_map(|(index, entries)| {
            entries
                .as_dict()
                .unwrap()
                .iter()
                .map(move |(name, v)| (format!("{index}/{name}"), values(v.as_tensor().unwrap())))
        })
        .collect()
}

#[test]
fn state_dict_round_trip_continues_the_trajectory() -> Result<()> {
    check_round_trip(|p| {
        Ok(Box::new(SGD::new(
            p,
            SgdOptions {
                lr: 0.1,
                momentum: 0.9,
                nesterov: true,
                weight_decay: 0.01,
                ..Default::default()
            },
        )?))
    })?;
    check_round_trip(|p| {
        Ok(Box::new(Adam::new(
            p,
            AdamOptions {
                lr: 0.1,
                amsgrad: true,
                ..Default::default()
            },
        )?))
    })?;
    check_round_trip(|p| {
        Ok(Box::new(AdamW::new(
            p,
            AdamWOptions {
                lr: 0.1,
                ..Default::default()
            },
        )?))
    })?;
    check_round_trip(|p| {
        Ok(Box::new(RMSprop::new(
            p,
            RmsPropOptions {
                momentum: 0.5,
                centered: true,
                ..Default::default()
            },
        )?))
    })
}

#[test]
fn load_state_dict_restores_hyper_parameters_and_copies_state() -> Result<()> {
    let p = param(&[1.0]);
    let mut opt = Adam::new(
        vec![p.clone()],
        AdamOptions {
            lr: 0.5,
            ..Default::default()
        },
    )?;
    step_with(&mut opt, &p, &[1.0])?;
    let saved = opt.state_dict();
    let q = param(&[1.0]);
    let mut other = Adam::new(vec![q.clone()], AdamOptions::default())?;
    other.load_state_dict(&saved)?;
    assert_eq!(other.param_groups()[0].lr(), 0.5);
    // Writing into the saved tensors does not reach the loaded optimizer.
    let saved_avg = entry(&saved, &[s("state"), int(0), s("exp_avg")])
        .as_tensor()
        .unwrap()
        .clone();
    saved_avg.fill_(100.0)?;
    let loaded = other.state_dict();
    let loaded_avg = entry(&loaded, &[s("state"), int(0), s("exp_avg")])
        .as_tensor()
        .unwrap();
    assert!(!loaded_avg.shares_storage(&saved_avg));
    assert_ne!(values(loaded_avg), [100.0]);
    Ok(())
}

/// A saved SGD state (momentum on, one step taken) for params of shapes `[2]` and `[3]`.
fn saved_sgd() -> Result<Value> {
    let (a, b) = (param(&[1.0, 2.0]), param(&[1.0, 2.0, 3.0]));
    let mut opt = SGD::new(
        vec![a.clone(), b.clone()],
        SgdOptions {
            momentum: 0.9,
            ..Default::default()
        },
    )?;
    a.set_grad(Some(Tensor::ones(&[2], DType::F64)?));
    b.set_grad(Some(Tensor::ones(&[3], DType::F64)?));
    opt.step()?;
    Ok(opt.state_dict())
}

#[test]
fn load_state_dict_errors_name_what_mismatches() -> Result<()> {
    let saved = saved_sgd()?;
    let options = SgdOptions {
        momentum: 0.9,
        ..Default::default()
    };

    let mut one_group_of_one = SGD::new(vec![param(&[1.0, 2.0])], options.clone())?;
    let msg = invalid_message(one_group_of_one.load_state_dict(&saved));
    assert_eq!(
        msg,
        "SGD.load_state_dict: param group 0 has 2 params in the loaded state dict, 1 in the optimizer"
    );

    let mut two_groups = SGD::new(vec![param(&[1.0, 2.0])], options.clone())?;
    two_groups.add_param_group(vec![param(&[1.0, 2.0, 3.0])], options.clone())?;
    let msg = invalid_message(two_groups.load_state_dict(&saved));
    assert_eq!(
        msg,
        "SGD.load_state_dict: loaded state dict has 1 parameter groups, the optimizer has 2"
    );

    let swapped = (param(&[1.0, 2.0, 3.0]), param(&[1.0, 2.0]));
    let mut wrong_shapes = SGD::new(vec![swapped.0, swapped.1], options.clone())?;
    let before = wrong_shapes.param_groups()[0].lr();
    let msg = invalid_message(wrong_shapes.load_state_dict(&saved));
    assert_eq!(
        msg,
        "SGD.load_state_dict: state of param 0 (group 0, param 0): \"momentum_buffer\" has shape [2] but the param has shape [3]"
    );
    // A failed load changes nothing.
    assert!(
        entry(&wrong_shapes.state_dict(), &[s("state")])
            .as_dict()
            .unwrap()
            .is_empty()
    );
    assert_eq!(wrong_shapes.param_groups()[0].lr(), before);

    let mut unknown = saved.clone();
    let state = dict_mut(&mut unknown, &[s("state")]);
    let entry = state[0].clone();
    state.insert(int(7), entry);
    let mut opt = SGD::new(
        vec![param(&[1.0, 2.0]), param(&[1.0, 2.0, 3.0])],
        options.clone(),
    )?;
    let msg = invalid_message(opt.load_state_dict(&unknown));
    assert_eq!(
        msg,
        "SGD.load_state_dict: state for param 7, which no param group holds"
    );

    let msg = invalid_message(opt.load_state_dict(&Value::dict()));
    assert!(msg.contains("\"param_groups\""), "{msg}");
    Ok(())
}

#[test]
fn load_state_dict_accepts_older_integer_steps() -> Result<()> {
    let p = param(&[1.0]);
    let mut opt = Adam::new(vec![p.clone()], AdamOptions::default())?;
    step_with(&mut opt, &p, &[1.0])?;
    let mut saved = opt.state_dict();
    dict_mut(&mut saved, &[s("state"), int(0)]).insert(s("step"), Value::Int(1));
    let mut other = Adam::new(vec![param(&[1.0])], AdamOptions::default())?;
    other.load_state_dict(&saved)?;
    let step = entry(&other.state_dict(), &[s("state"), int(0), s("step")]).clone();
    assert_eq!(step.as_tensor().unwrap().dtype(), DType::F32);
    Ok(())
}

// ----- LR schedulers -----

fn sgd_two_groups(lrs: [f64; 2]) -> Result<SGD> {
    let mut opt = SGD::new(
        vec![param(&[1.0])],
        SgdOptions {
            lr: lrs[0],
            ..Default::default()
        },
    )?;
    opt.add_param_group(
        vec![param(&[1.0])],
        SgdOptions {
            lr: lrs[1],
            ..Default::default()
        },
    )?;
    Ok(opt)
}

fn assert_lrs(opt: &dyn Optimizer, sched: &dyn LrScheduler, expected: &[f64], what: &str) {
    let actual: Vec<f64> = opt.param_groups().iter().map(|g| g.lr()).collect();
    assert_all_close(&actual, expected, what);
    assert_all_close(sched.get_last_lr(), expected, what);
}

#[test]
fn step_lr_follows_base_times_gamma_to_the_epoch_over_step_size() -> Result<()> {
    let bases = [0.1, 0.02];
    let mut opt = sgd_two_groups(bases)?;
    let mut sched = StepLR::new(&mut opt, 3, 0.5)?;
    for e in 0..12 {
        let expected = bases.map(|b| b * 0.5f64.powi(e / 3));
        assert_lrs(&opt, &sched, &expected, &format!("epoch {e}"));
        assert_eq!(sched.last_epoch(), e as i64);
        sched.step(&mut opt)?;
    }
    assert_eq!(opt.param_groups()[0].initial_lr, Some(0.1));
    Ok(())
}

#[test]
fn cosine_annealing_follows_the_closed_form_over_two_periods() -> Result<()> {
    let bases = [0.1, 0.05];
    let (t_max, eta_min) = (5usize, 0.001);
    let mut opt = sgd_two_groups(bases)?;
    let mut sched = CosineAnnealingLR::new(&mut opt, t_max, eta_min)?;
    for e in 0..=(4 * t_max) {
        let closed = |b: f64| {
            eta_min
                + (b - eta_min) * (1.0 + (std::f64::consts::PI * e as f64 / t_max as f64).cos())
                    / 2.0
        };
        assert_lrs(&opt, &sched, &bases.map(closed), &format!("epoch {e}"));
        sched.step(&mut opt)?;
    }
    Ok(())
}

#[test]
fn cosine_annealing_matches_pytorch_values() -> Result<()> {
    // torch: SGD(lr=0.1), CosineAnnealingLR(T_max=2): lrs 0.1, 0.05, 0.0, 0.05, 0.1.
    let mut opt = SGD::new(
        vec![param(&[1.0])],
        SgdOptions {
            lr: 0.1,
            ..Default::default()
        },
    )?;
    let mut sched = CosineAnnealingLR::new(&mut opt, 2, 0.0)?;
    let mut lrs = vec![sched.get_last_lr()[0]];
    for _ in 0..4 {
        sched.step(&mut opt)?;
        lrs.push(sched.get_last_lr()[0]);
    }
    let expected = [0.1, 0.05, 0.0, 0.05, 0.1];
    for (a, e) in lrs.iter().zip(expected) {
        assert!((a - e).abs() < 1e-15, "{lrs:?}");
    }
    Ok(())
}

#[test]
fn scheduler_state_dict_round_trip_resumes_the_schedule() -> Result<()> {
    let mut opt = sgd_two_groups([0.1, 0.02])?;
    let mut sched = CosineAnnealingLR::new(&mut opt, 4, 0.0)?;
    for _ in 0..3 {
        sched.step(&mut opt)?;
    }
    let saved_sched = sched.state_dict();
    let saved_opt = opt.state_dict();
    let keys: Vec<String> = saved_sched
        .as_dict()
        .unwrap()
        .keys()
        .map(|k| k.to_string())
        .collect();
    assert_eq!(
        keys,
        [
            "T_max",
            "eta_min",
            "base_lrs",
            "last_epoch",
            "_step_count",
            "_get_lr_called_within_step",
            "_last_lr"
        ]
    );
    let groups = entry(&saved_opt, &[s("param_groups")]).as_list().unwrap();
    assert_eq!(
        groups[1].get("initial_lr").and_then(Value::as_f64),
        Some(0.02)
    );

    let mut opt2 = sgd_two_groups([0.1, 0.02])?;
    opt2.load_state_dict(&saved_opt)?;
    let mut sched2 = CosineAnnealingLR::new(&mut opt2, 4, 0.0)?;
    sched2.load_state_dict(&saved_sched)?;
    for e in 4..12 {
        sched.step(&mut opt)?;
        sched2.step(&mut opt2)?;
        assert_eq!(sched2.get_last_lr(), sched.get_last_lr(), "epoch {e}");
        assert_eq!(sched2.last_epoch(), e);
    }

    let mut step_sched = StepLR::new(&mut opt2, 2, 0.1)?;
    let saved = step_sched.state_dict();
    assert_eq!(saved.get("step_size").and_then(Value::as_i64), Some(2));
    step_sched.load_state_dict(&saved)?;
    Ok(())
}

#[test]
fn scheduler_errors_name_the_scheduler() -> Result<()> {
    let mut opt = sgd_two_groups([0.1, 0.02])?;
    let msg = invalid_message(StepLR::new(&mut opt, 0, 0.5).map(|_| ()));
    assert_eq!(msg, "StepLR: step_size must be positive");
    let mut sched = StepLR::new(&mut opt, 2, 0.5)?;
    let mut bad = sched.state_dict();
    dict_mut(&mut bad, &[]).insert(s("base_lrs"), Value::List(vec![Value::Float(0.1)]));
    let msg = invalid_message(sched.load_state_dict(&bad));
    assert_eq!(
        msg,
        "StepLR.load_state_dict: \"base_lrs\" has 1 entries but the scheduler has 2 param groups"
    );
    let mut single = SGD::new(vec![param(&[1.0])], SgdOptions::default())?;
    let msg = invalid_message(sched.step(&mut single));
    assert_eq!(
        msg,
        "StepLR: the optimizer has 1 param groups, the scheduler was built for 2"
    );
    Ok(())
}
