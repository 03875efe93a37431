//! The optimizer update ops (`sgd_update`, `adam_step_scalars`, `adam_update`) against the
//! eager ops they fuse: every combination of options, in f32, f64, f16 and bf16, for tensors
//! small and large enough to be split across threads, must give the same bits as the
//! single-tensor `torch.optim` formulas written with one eager op per operation; and their
//! meta functions reject wrong inputs with errors naming the op, the input and the shapes.

use tessera_tensor::op::OptimOp;
use tessera_tensor::{DType, Op, Tensor, TensorError, no_grad};

/// Deterministic values in about [-2, 2], some exactly zero, converted to `dtype`.
fn values(n: usize, seed: u64, dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let k = (i as u64)
                .wrapping_mul(2_654_435_761)
                .wrapping_add(seed * 40_503)
                % 10_007;
            if k.is_multiple_of(97) {
                0.0
            } else {
                (k as f64 / 10_007.0 - 0.5) * 4.0
            }
        })
        .collect();
    Tensor::from_vec(v, &[n]).unwrap().to_dtype(dtype).unwrap()
}

/// Squares of `values`: a valid second moment.
fn squares(n: usize, seed: u64, dtype: DType) -> Tensor {
    let v = values(n, seed, dtype);
    v.mul(&v).unwrap()
}

fn bits(t: &Tensor) -> Vec<u64> {
    t.to_dtype(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .map(|x| x.to_bits())
        .collect()
}

fn assert_same_bits(what: &str, expected: &Tensor, got: &Tensor) {
    assert_eq!(expected.dtype(), got.dtype(), "{what}: dtype");
    assert_eq!(expected.shape(), got.shape(), "{what}: shape");
    let (e, g) = (bits(expected), bits(got));
    if let Some(i) = (0..e.len()).find(|&i| e[i] != g[i]) {
        panic!(
            "{what}: element {i}: expected {}, got {}",
            f64::from_bits(e[i]),
            f64::from_bits(g[i])
        );
    }
}

/// `torch.optim.SGD`'s single-tensor step, one eager op per operation (the eager optimizer's
/// code before the update op existed).
fn sgd_reference(
    op: &OptimOp,
    p: &Tensor,
    grad: &Tensor,
    buf: Option<&Tensor>,
    lr: f64,
) -> (Tensor, Option<Tensor>) {
    let OptimOp::SgdUpdate {
        momentum,
        dampening,
        weight_decay,
        nesterov,
        maximize,
    } = *op
    else {
        unreachable!()
    };
    let mut g = if maximize {
        grad.neg().unwrap()
    } else {
        grad.clone()
    };
    if weight_decay != 0.0 {
        g = g.add(&p.mul_scalar(weight_decay).unwrap()).unwrap();
    }
    let mut new_buf = None;
    if momentum != 0.0 {
        let b = match buf {
            Some(b) => b
                .mul_scalar(momentum)
                .unwrap()
                .add(&g.mul_scalar(1.0 - dampening).unwrap())
                .unwrap(),
            None => g.clone(),
        };
        g = if nesterov {
            g.add(&b.mul_scalar(momentum).unwrap()).unwrap()
        } else {
            b.clone()
        };
        new_buf = Some(b);
    }
    (p.add(&g.mul_scalar(-lr).unwrap()).unwrap(), new_buf)
}

fn sgd_ops() -> Vec<OptimOp> {
    let mut ops = Vec::new();
    for momentum in [0.0, 0.9] {
        for dampening in [0.0, 0.25] {
            for weight_decay in [0.0, 0.01] {
                for nesterov in [false, true] {
                    for maximize in [false, true] {
                        if nesterov && (momentum == 0.0 || dampening != 0.0) {
                            continue;
                        }
                        ops.push(OptimOp::SgdUpdate {
                            momentum,
                            dampening,
                            weight_decay,
                            nesterov,
                            maximize,
                        });
                    }
                }
            }
        }
    }
    ops
}

const DTYPES: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

#[test]
fn sgd_update_gives_the_bits_of_the_eager_formula() {
    let _guard = no_grad();
    for dtype in DTYPES {
        // 40_000 elements run in parallel chunks; 37 on the calling thread.
        for n in [37, 40_000] {
            let p = values(n, 1, dtype);
            let g = values(n, 2, dtype);
            let buf = values(n, 3, dtype);
            let lr = 0.037;
            for op in sgd_ops() {
                let what = format!("{op:?} {dtype} n={n}");
                let has_momentum =
                    matches!(op, OptimOp::SgdUpdate { momentum, .. } if momentum != 0.0);
                let buffers: &[Option<&Tensor>] = if has_momentum {
                    &[None, Some(&buf)]
                } else {
                    &[None]
                };
                for b in buffers {
                    let mut inputs = vec![&p, &g];
                    inputs.extend(b);
                    let lr_t = Tensor::scalar(lr);
                    inputs.push(&lr_t);
                    let got = Op::Optim(op.clone()).apply(&inputs).unwrap();
                    let (want_p, want_b) = sgd_reference(&op, &p, &g, *b, lr);
                    assert_same_bits(&format!("{what} param"), &want_p, &got[0]);
                    match want_b {
                        Some(want_b) => {
                            assert_same_bits(&format!("{what} buffer"), &want_b, &got[1])
                        }
                        None => assert_eq!(got.len(), 1, "{what}"),
                    }
                }
            }
        }
    }
}

/// `torch.optim.Adam`'s single-tensor step, one eager op per operation: the new step, param,
/// exp_avg, exp_avg_sq and max_exp_avg_sq.
#[allow(clippy::type_complexity)]
fn adam_reference(
    op: &OptimOp,
    state: (&Tensor, &Tensor, &Tensor, &Tensor, Option<&Tensor>),
    grad: &Tensor,
    lr: f64,
) -> (Tensor, Tensor, Tensor, Tensor, Option<Tensor>) {
    let OptimOp::AdamUpdate {
        beta1,
        beta2,
        eps,
        weight_decay,
        amsgrad,
        maximize,
        decoupled_weight_decay,
    } = *op
    else {
        unreachable!()
    };
    let (step, p, m, v, max) = state;
    let step = step.add_scalar(1.0).unwrap();
    let t = step.item::<f64>().unwrap();
    let mut p = p.clone();
    let mut g = if maximize {
        grad.neg().unwrap()
    } else {
        grad.clone()
    };
    if weight_decay != 0.0 {
        if decoupled_weight_decay {
            p = p.mul_scalar(1.0 - lr * weight_decay).unwrap();
        } else {
            g = g.add(&p.mul_scalar(weight_decay).unwrap()).unwrap();
        }
    }
    let m = m
        .add(&g.sub(m).unwrap().mul_scalar(1.0 - beta1).unwrap())
        .unwrap();
    let v = v
        .mul_scalar(beta2)
        .unwrap()
        .add(&g.mul_scalar(1.0 - beta2).unwrap().mul(&g).unwrap())
        .unwrap();
    let step_size = lr / (1.0 - beta1.powf(t));
    let bc2_sqrt = (1.0 - beta2.powf(t)).sqrt();
    let max = if amsgrad {
        max.map(|mx| mx.maximum(&v).unwrap())
    } else {
        None
    };
    let second = max.clone().unwrap_or_else(|| v.clone());
    let denom = second
        .sqrt()
        .unwrap()
        .div_scalar(bc2_sqrt)
        .unwrap()
        .add_scalar(eps)
        .unwrap();
    let p = p
        .add(&m.mul_scalar(-step_size).unwrap().div(&denom).unwrap())
        .unwrap();
    (step, p, m, v, max)
}

fn adam_ops() -> Vec<OptimOp> {
    let mut ops = Vec::new();
    for weight_decay in [0.0, 0.05] {
        for amsgrad in [false, true] {
            for maximize in [false, true] {
                for decoupled_weight_decay in [false, true] {
                    ops.push(OptimOp::AdamUpdate {
                        beta1: 0.9,
                        beta2: 0.999,
                        eps: 1e-8,
                        weight_decay,
                        amsgrad,
                        maximize,
                        decoupled_weight_decay,
                    });
                }
            }
        }
    }
    ops
}

#[test]
fn adam_ops_give_the_bits_of_the_eager_formula() {
    let _guard = no_grad();
    let lr = 0.0123;
    for dtype in DTYPES {
        for n in [37, 40_000] {
            let p = values(n, 11, dtype);
            let g = values(n, 12, dtype);
            let m = values(n, 13, dtype).mul_scalar(0.1).unwrap();
            let v = squares(n, 14, dtype);
            let mx = squares(n, 15, dtype);
            for start in [0.0f32, 6.0] {
                let step = Tensor::scalar(start);
                for op in adam_ops() {
                    let what = format!("{op:?} {dtype} n={n} step={start}");
                    let OptimOp::AdamUpdate {
                        beta1,
                        beta2,
                        amsgrad,
                        ..
                    } = op
                    else {
                        unreachable!()
                    };
                    let scalars = Op::Optim(OptimOp::AdamStepScalars { beta1, beta2 })
                        .apply(&[&step, &Tensor::scalar(lr)])
                        .unwrap();
                    let lr_t = Tensor::scalar(lr);
                    let mut inputs = vec![&p, &g, &m, &v];
                    if amsgrad {
                        inputs.push(&mx);
                    }
                    inputs.extend([&lr_t, &scalars[1], &scalars[2]]);
                    let got = Op::Optim(op.clone()).apply(&inputs).unwrap();
                    let (want_step, want_p, want_m, want_v, want_max) =
                        adam_reference(&op, (&step, &p, &m, &v, Some(&mx)), &g, lr);
                    assert_same_bits(&format!("{what} step"), &want_step, &scalars[0]);
                    assert_same_bits(&format!("{what} param"), &want_p, &got[0]);
                    assert_same_bits(&format!("{what} exp_avg"), &want_m, &got[1]);
                    assert_same_bits(&format!("{what} exp_avg_sq"), &want_v, &got[2]);
                    match want_max {
                        Some(want) => assert_same_bits(&format!("{what} max"), &want, &got[3]),
                        None => assert_eq!(got.len(), 3, "{what}"),
                    }
                }
            }
        }
    }
}

fn message(e: TensorError) -> String {
    e.to_string()
}

#[test]
fn update_ops_reject_wrong_inputs_naming_the_op_and_shapes() {
    let sgd = Op::Optim(OptimOp::SgdUpdate {
        momentum: 0.0,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
        maximize: false,
    });
    let p = Tensor::zeros(&[2, 3], DType::F32).unwrap();
    let lr = Tensor::scalar(0.1f64);
    let short = Tensor::zeros(&[3], DType::F32).unwrap();
    let e = message(sgd.apply(&[&p, &short, &lr]).unwrap_err());
    assert!(
        e.contains("sgd_update") && e.contains("[2, 3]") && e.contains("[3]") && e.contains("grad"),
        "{e}"
    );

    let e = message(sgd.apply(&[&p, &p, &Tensor::scalar(0.1f32)]).unwrap_err());
    assert!(
        e.contains("sgd_update") && e.contains("lr must be a 0-d f64"),
        "{e}"
    );

    let e = message(sgd.apply(&[&p, &p, &p, &lr]).unwrap_err());
    assert!(
        e.contains("sgd_update") && e.contains("momentum is 0"),
        "{e}"
    );

    let half = Tensor::zeros(&[2, 3], DType::F16).unwrap();
    let e = message(sgd.apply(&[&p, &half, &lr]).unwrap_err());
    assert!(
        e.contains("grad has dtype f16") || e.contains("grad has dtype F16"),
        "{e}"
    );

    let ints = Tensor::zeros(&[2, 3], DType::I64).unwrap();
    let e = message(sgd.apply(&[&ints, &ints, &lr]).unwrap_err());
    assert!(e.contains("param must be a float tensor"), "{e}");

    let adam = Op::Optim(OptimOp::AdamUpdate {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.0,
        amsgrad: true,
        maximize: false,
        decoupled_weight_decay: false,
    });
    let e = message(adam.apply(&[&p, &p, &p, &p, &lr, &lr, &lr]).unwrap_err());
    assert!(
        e.contains("adam_update") && e.contains("max_exp_avg_sq") && e.contains("got 7 inputs"),
        "{e}"
    );

    let scalars = Op::Optim(OptimOp::AdamStepScalars {
        beta1: 0.9,
        beta2: 0.999,
    });
    let e = message(scalars.apply(&[&Tensor::scalar(1.0f64), &lr]).unwrap_err());
    assert!(
        e.contains("adam_step_scalars") && e.contains("step must be a 0-d f32"),
        "{e}"
    );
}

#[test]
fn update_ops_trace_on_meta_tensors_with_the_parameter_meta() {
    let op = Op::Optim(OptimOp::SgdUpdate {
        momentum: 0.9,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
        maximize: false,
    });
    let p = Tensor::new_meta(&[4, 5], DType::F32);
    let lr = Tensor::new_meta(&[], DType::F64);
    let outs = op.apply(&[&p, &p, &p, &lr]).unwrap();
    assert_eq!(outs.len(), 2);
    for o in outs {
        assert!(o.is_meta());
        assert_eq!(o.shape(), vec![4, 5]);
        assert_eq!(o.dtype(), DType::F32);
    }
}

#[test]
fn update_ops_have_no_backward() {
    let op = Op::Optim(OptimOp::SgdUpdate {
        momentum: 0.0,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
        maximize: false,
    });
    let p = Tensor::from_vec(vec![1.0f32, 2.0], &[2])
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let g = Tensor::from_vec(vec![0.5f32, 0.5], &[2]).unwrap();
    let out = op.apply1(&[&p, &g, &Tensor::scalar(0.1f64)]).unwrap();
    // The new parameter is not differentiable: nothing flows back into the update.
    assert!(!out.requires_grad());
}
