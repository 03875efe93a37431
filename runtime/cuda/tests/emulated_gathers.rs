//! Data-dependent loads on the PTX backend: the negative log-likelihood and its gradient,
//! embedding lookups, `index_select`, `gather` and `one_hot` rendered to PTX, run in the emulator and
//! checked bit for bit against the kernel-IR interpreter and eager execution (f32 and f64,
//! ignored targets, an empty batch, inputs with no classes and empty embedding gradients,
//! whose indices are still checked); every kernel is assembled by ptxas (sm_80 and sm_90) when
//! it is installed. An index outside its dim reads nothing (the emulator bounds-checks every
//! access) and fails the run with `IndexOutOfRange`, through the kernel executor and through
//! eager ops on CUDA tensors (the emulated driver).

use crate::common;
use crate::emulated;
use crate::emulated_agreement::bits;

use emulated::EmulatedPtx;
use tessera_kernel::{Interpreter, KernelError, NoEnvironment, run_program};
use tessera_tensor::op::{EmbeddingOp, IndexOp, LossOp, Reduction};
use tessera_tensor::{DType, Device, Op, Tensor};

const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Sum, Reduction::Mean];

fn floats(shape: &[usize], seed: u32, dtype: DType) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as u32 * 7919 + seed * 104_729) % 1000) as f64 / 137.0 - 3.5)
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

fn ints(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

fn nll(reduction: Reduction, ignore_index: i64, label_smoothing: f64) -> Op {
    Op::Loss(LossOp::Nll {
        reduction,
        ignore_index,
        label_smoothing,
    })
}

fn nll_backward(reduction: Reduction, ignore_index: i64, label_smoothing: f64) -> Op {
    Op::Loss(LossOp::NllBackward {
        reduction,
        ignore_index,
        label_smoothing,
    })
}

/// Emulated PTX fails `op` on `inputs` with `IndexOutOfRange` for `index` in a dim of `size`.
fn faults(op: Op, inputs: &[Tensor], index: i64, size: usize) {
    let program = common::lowered(op, inputs, 1);
    match run_program(&program, &NoEnvironment, &EmulatedPtx::default(), inputs) {
        Err(KernelError::IndexOutOfRange {
            index: i, size: s, ..
        }) => {
            assert_eq!((i, s), (index, size), "{program}")
        }
        other => panic!("expected IndexOutOfRange, got {other:?}\n{program}"),
    }
}

#[test]
fn nll_loss_and_its_gradient_on_emulated_ptx_equal_the_interpreter_and_eager() {
    for dtype in [DType::F32, DType::F64] {
        for reduction in REDUCTIONS {
            let x = floats(&[6, 5], 1, dtype);
            let t = ints(&[0, 4, -100, 2, 3, 1], &[6]);
            agrees(nll(reduction, -100, 0.0), &[x.clone(), t.clone()]);
            let grad = match reduction {
                Reduction::None => floats(&[6], 2, dtype),
                _ => floats(&[], 2, dtype),
            };
            agrees(nll_backward(reduction, -100, 0.25), &[grad, x, t]);
        }
        let x = floats(&[3, 4, 2], 3, dtype);
        let t = ints(&[3, 0, 1, 7, 2, 2], &[3, 2]);
        agrees(nll(Reduction::None, 7, 0.1), &[x, t]);
    }
}

#[test]
fn nll_loss_of_an_empty_batch_on_emulated_ptx_equals_eager() {
    for reduction in REDUCTIONS {
        let op = nll(reduction, -100, 0.0);
        let inputs = [floats(&[0, 3], 1, DType::F32), ints(&[], &[0])];
        let program = common::lowered(op.clone(), &inputs, 1);
        let want = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
        let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), &inputs).unwrap();
        assert_eq!(bits(&got[0]), bits(&want[0]), "{program}");
        // Eager's empty f64 sum is -0.0 (Rust's `Sum`), the kernel's +0.0: equal as numbers.
        let eager = op.apply(&[&inputs[0], &inputs[1]]).unwrap();
        let (w, e) = (
            want[0].to_vec_f64().unwrap(),
            eager[0].to_vec_f64().unwrap(),
        );
        assert!(
            w.iter()
                .zip(&e)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()))
        );
        assert_eq!(w.len(), e.len());
    }
}

/// Nothing to read, the indices checked all the same: an nll of an input with no classes (a
/// loss of 0 or NaN where every target is ignored, an empty gradient) and an empty embedding
/// gradient; any other index fails the run as eager fails.
#[test]
fn degenerate_nll_and_embedding_gradients_on_emulated_ptx_check_their_indices() {
    use tessera_tensor::op::EmbeddingBackwardOp;
    for reduction in REDUCTIONS {
        let (x, t) = (floats(&[3, 0], 1, DType::F32), ints(&[-100; 3], &[3]));
        agrees(nll(reduction, -100, 0.1), &[x.clone(), t.clone()]);
        let grad = match reduction {
            Reduction::None => floats(&[3], 2, DType::F32),
            _ => floats(&[], 2, DType::F32),
        };
        agrees(
            nll_backward(reduction, -100, 0.0),
            &[grad.clone(), x.clone(), t],
        );
        let bad = ints(&[-100, 2, -100], &[3]);
        faults(nll(reduction, -100, 0.0), &[x.clone(), bad.clone()], 3, 1);
        faults(nll_backward(reduction, -100, 0.0), &[grad, x, bad], 3, 1);
    }
    let embedding = |num_weights| {
        Op::EmbeddingBackward(EmbeddingBackwardOp {
            num_weights,
            padding_idx: None,
        })
    };
    let ids = ints(&[4, 0, 2], &[3]);
    agrees(embedding(5), &[floats(&[3, 0], 1, DType::F64), ids.clone()]);
    faults(
        embedding(4),
        &[floats(&[3, 0], 1, DType::F64), ids.clone()],
        4,
        4,
    );
    // With no rows every id faults: one id, as threads may record any of several first.
    let id = ints(&[4], &[1]);
    faults(embedding(0), &[floats(&[1, 2], 1, DType::F32), id], 4, 0);
}

#[test]
fn embedding_index_select_and_gather_on_emulated_ptx_equal_eager() {
    let table = floats(&[10, 6], 4, DType::F32).t().unwrap();
    let ids = ints(&[5, 0, 3, 3, 1, 0], &[2, 3]);
    agrees(
        Op::Embedding(EmbeddingOp { padding_idx: None }),
        &[table, ids],
    );
    let x = floats(&[4, 5, 3], 7, DType::F64);
    agrees(
        Op::Index(IndexOp::IndexSelect { dim: 1 }),
        &[x.clone(), ints(&[4, 0, 2, 2], &[4])],
    );
    let index: Vec<i64> = (0..30).map(|i| (i * 5 + 2) % 4).collect();
    agrees(
        Op::Index(IndexOp::Gather { dim: 0 }),
        &[x, ints(&index, &[2, 5, 3])],
    );
}

#[test]
fn one_hot_on_emulated_ptx_equals_eager_and_checks_its_classes() {
    let one_hot = |num_classes| Op::Index(IndexOp::OneHot { num_classes });
    agrees(one_hot(5), &[ints(&[0, 4, 2, 2, 1, 3], &[2, 3])]);
    faults(one_hot(5), &[ints(&[0, 5, 2], &[3])], 5, 5);
    faults(one_hot(5), &[ints(&[-2, 1], &[2])], -2, 5);
    // Classes of u8, i8 and i32, gathered in their own type.
    for dtype in [DType::U8, DType::I8, DType::I32] {
        let x = ints(&[0, 4, 2, 2, 1, 3], &[2, 3]).to_dtype(dtype).unwrap();
        agrees(one_hot(5), &[x]);
    }
    let x = ints(&[0, 7, 2], &[3]).to_dtype(DType::U8).unwrap();
    faults(one_hot(5), &[x], 7, 5);
}

#[test]
fn an_index_past_its_dim_on_emulated_ptx_fails_with_the_index_and_the_size() {
    let x = floats(&[4, 5], 1, DType::F32);
    faults(
        nll(Reduction::Mean, -100, 0.0),
        &[x.clone(), ints(&[0, 5, 1, 2], &[4])],
        5,
        5,
    );
    let grad = floats(&[], 2, DType::F32);
    faults(
        nll_backward(Reduction::Sum, -100, 0.0),
        &[grad, x.clone(), ints(&[0, 1, -2, 2], &[4])],
        -2,
        5,
    );
    let op = Op::Embedding(EmbeddingOp { padding_idx: None });
    faults(op, &[x, ints(&[1, 4], &[2])], 4, 4);
}

/// The emulated device, registered once for the eager tests of this binary.
fn emulated_device() -> Device {
    crate::eager_common::backend();
    crate::eager_common::CUDA
}

#[test]
fn eager_nll_loss_on_cuda_tensors_reports_a_bad_target_and_recovers() {
    let cuda = emulated_device();
    let x = floats(&[4, 5], 1, DType::F32).to_device(cuda).unwrap();
    let op = nll(Reduction::Mean, -100, 0.0);
    let bad = ints(&[0, 9, 1, 2], &[4]).to_device(cuda).unwrap();
    let err = op.apply(&[&x, &bad]).unwrap_err();
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    assert!(text.contains("nll_loss"), "{text}");
    assert!(
        text.contains("index 9 is out of bounds for a dimension of size 5"),
        "{text}"
    );
    let good = ints(&[0, 4, -100, 2], &[4]);
    let on_device = op.apply(&[&x, &good.to_device(cuda).unwrap()]).unwrap();
    let on_cpu = op
        .apply(&[&x.to_device(Device::Cpu).unwrap(), &good])
        .unwrap();
    assert_eq!(
        bits(&on_device[0].to_device(Device::Cpu).unwrap()),
        bits(&on_cpu[0])
    );
}

#[test]
fn degenerate_nll_and_embedding_gradients_of_cuda_tensors_equal_the_cpu() {
    use tessera_tensor::op::EmbeddingBackwardOp;
    let cuda = emulated_device();
    let on = |t: &Tensor| t.to_device(cuda).unwrap();
    let (x, t) = (floats(&[2, 0, 3], 1, DType::F32), ints(&[-100; 6], &[2, 3]));
    for reduction in REDUCTIONS {
        let op = nll(reduction, -100, 0.0);
        let got = op.apply(&[&on(&x), &on(&t)]).unwrap();
        let want = op.apply(&[&x, &t]).unwrap();
        assert_eq!(got[0].device(), cuda);
        let got = got[0].to_device(Device::Cpu).unwrap();
        assert_eq!(bits(&got), bits(&want[0]), "{reduction:?}");
    }
    let op = Op::EmbeddingBackward(EmbeddingBackwardOp {
        num_weights: 4,
        padding_idx: Some(1),
    });
    let (g, ids) = (floats(&[2, 0], 1, DType::F32), ints(&[3, 1], &[2]));
    let got = op.apply(&[&on(&g), &on(&ids)]).unwrap();
    assert_eq!(got[0].shape(), [4, 0]);
    let bad = ints(&[3, 4], &[2]);
    let err = op.apply(&[&on(&g), &on(&bad)]).unwrap_err();
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    assert!(text.contains("embedding_backward"), "{text}");
    assert!(
        text.contains("index 4 is out of bounds for a dimension of size 4"),
        "{text}"
    );
}

/// `a` and `b` equal within `tol` relative to the larger magnitude (NaNs equal).
fn close(a: &Tensor, b: &Tensor, tol: f64) -> bool {
    let (a, b) = (a.to_vec_f64().unwrap(), b.to_vec_f64().unwrap());
    a.len() == b.len()
        && a.iter().zip(&b).all(|(x, y)| {
            (x.is_nan() && y.is_nan()) || (x - y).abs() <= tol * x.abs().max(y.abs()).max(1.0)
        })
}

/// The scatter-add cases: `(op, inputs)`, f32 and f64, duplicates, padding, every kind.
fn scatter_cases() -> Vec<(Op, Vec<Tensor>)> {
    use tessera_tensor::op::EmbeddingBackwardOp;
    let mut cases = Vec::new();
    for dtype in [DType::F32, DType::F64] {
        let ids = ints(&[5, 0, 3, 3, 1, 0, 3, 5], &[2, 4]);
        for padding_idx in [None, Some(3)] {
            let op = Op::EmbeddingBackward(EmbeddingBackwardOp {
                num_weights: 6,
                padding_idx,
            });
            cases.push((op, vec![floats(&[2, 4, 7], 4, dtype), ids.clone()]));
        }
        let x = floats(&[4, 5, 3], 7, dtype);
        let picks = ints(&[2, 0, 4, 2, 3, 0], &[6]);
        cases.push((
            Op::Index(IndexOp::IndexAdd { dim: 1 }),
            vec![x, picks, floats(&[4, 6, 3], 3, dtype)],
        ));
        let index: Vec<i64> = (0..12).map(|i| (i * 5 + 2) % 4).collect();
        cases.push((
            Op::Index(IndexOp::ScatterAdd { dim: 0 }),
            vec![
                floats(&[4, 3], 1, dtype),
                ints(&index, &[4, 3]),
                floats(&[5, 3], 2, dtype),
            ],
        ));
    }
    cases
}

/// The block reduction adds a row's matches in a tree, the interpreter and eager in order:
/// equal within rounding where an element receives several rows.
#[test]
fn scatter_adds_on_emulated_ptx_equal_the_interpreter_and_eager_within_rounding() {
    for (op, inputs) in scatter_cases() {
        let program = common::lowered(op.clone(), &inputs, 1);
        assert_eq!(program.kernels().count(), 1, "{program}");
        let want = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
        let got = run_program(&program, &NoEnvironment, &EmulatedPtx::default(), &inputs).unwrap();
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let eager = op.apply(&refs).unwrap();
        assert!(
            close(&got[0], &want[0], 1e-6),
            "emulated PTX vs interpreter\n{program}"
        );
        assert!(
            close(&want[0], &eager[0], 1e-6),
            "interpreter vs eager\n{program}"
        );
    }
}

#[test]
fn eager_scatter_adds_on_cuda_tensors_equal_the_cpu_and_report_a_bad_index() {
    let cuda = emulated_device();
    for (op, inputs) in scatter_cases() {
        let on_device: Vec<Tensor> = inputs.iter().map(|x| x.to_device(cuda).unwrap()).collect();
        let refs: Vec<&Tensor> = on_device.iter().collect();
        let got = op
            .apply(&refs)
            .unwrap_or_else(|e| panic!("{} on the device: {e}", op.name()));
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let want = op.apply(&refs).unwrap();
        let got = got[0].to_device(Device::Cpu).unwrap();
        assert!(close(&got, &want[0], 1e-6), "{}", op.name());
    }
    let op = Op::Index(IndexOp::IndexAdd { dim: 0 });
    let x = floats(&[3, 2], 1, DType::F32).to_device(cuda).unwrap();
    let src = floats(&[2, 2], 2, DType::F32).to_device(cuda).unwrap();
    let bad = ints(&[1, 3], &[2]).to_device(cuda).unwrap();
    let err = op.apply(&[&x, &bad, &src]).unwrap_err();
    let mut text = err.to_string();
    let mut cause = std::error::Error::source(&err);
    while let Some(c) = cause {
        text += &format!(": {c}");
        cause = c.source();
    }
    assert!(text.contains("index_add"), "{text}");
    assert!(
        text.contains("index 3 is out of bounds for a dimension of size 3"),
        "{text}"
    );
}

/// `op` on `inputs`, one output: see [`crate::emulated_agreement::agrees`].
fn agrees(op: Op, inputs: &[Tensor]) {
    crate::emulated_agreement::agrees(op, inputs, 1);
}
