//! The elementwise losses on CUDA tensors (the emulated driver): `mse_loss`, `l1_loss`,
//! `binary_cross_entropy` and `binary_cross_entropy_with_logits` (with and without a
//! broadcast `pos_weight`), each reduction, f32 and f64, odd sizes, 0-dim, empty and
//! non-contiguous operands, equal the CPU eager kernels; a small model trained through a
//! loss on CUDA tensors gets the CPU's gradients, which stay in device memory.
//! (Its own test binary: the backend registry is per process.)

mod emulated_driver;
mod emulator;

use emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera_cuda::{CudaBackend, init_with_driver};
use tessera_tensor::functional::{
    binary_cross_entropy, binary_cross_entropy_with_logits, l1_loss, mse_loss,
};
use tessera_tensor::op::{LossOp, Reduction};
use tessera_tensor::{DType, Device, Op, Result, Tensor};

const CUDA: Device = Device::Cuda(0);
const REDUCTIONS: [Reduction; 3] = [Reduction::None, Reduction::Mean, Reduction::Sum];

fn backend() -> &'static (Arc<EmulatedDriver>, Arc<CudaBackend>) {
    static BACKEND: OnceLock<(Arc<EmulatedDriver>, Arc<CudaBackend>)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        let driver = Arc::new(EmulatedDriver::new(1));
        let backend = init_with_driver(driver.clone()).expect("registering the backend");
        (driver, backend)
    })
}

fn cuda(t: &Tensor) -> Result<Tensor> {
    backend();
    t.to_device(CUDA)
}

/// `shape` of `dtype` with values in `[lo, hi]`, and, where `special`, infinities and NaN.
fn tensor(
    dtype: DType,
    shape: &[usize],
    seed: usize,
    (lo, hi): (f64, f64),
    special: bool,
) -> Tensor {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            match k % 17 {
                3 if special => f64::INFINITY,
                9 if special => f64::NAN,
                11 if special => f64::NEG_INFINITY,
                _ => lo + (k % 997) as f64 / 996.0 * (hi - lo),
            }
        })
        .collect();
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

fn close(want: f64, got: f64, tol: f64) -> bool {
    (want.is_nan() && got.is_nan())
        || want == got
        || (want.is_finite() && (want - got).abs() <= tol * want.abs().max(1.0))
}

fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::F64 { 1e-13 } else { 2e-6 }
}

/// Runs `op` on the CPU and on the device and compares the values.
fn same_on_device(what: &str, op: &Op, inputs: &[Tensor]) {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = op
        .apply1(&refs)
        .unwrap_or_else(|e| panic!("{what} on the cpu: {e}"));
    let on_device: Vec<Tensor> = inputs.iter().map(|t| cuda(t).unwrap()).collect();
    let refs: Vec<&Tensor> = on_device.iter().collect();
    let got = op
        .apply1(&refs)
        .unwrap_or_else(|e| panic!("{what} on cuda: {e}"));
    assert_eq!(got.device(), CUDA, "{what}");
    assert_eq!(
        (got.shape(), got.dtype()),
        (want.shape(), want.dtype()),
        "{what}"
    );
    let tol = tolerance(want.dtype());
    let (wv, gv) = (want.to_vec_f64().unwrap(), got.to_vec_f64().unwrap());
    for (i, (a, b)) in wv.iter().zip(&gv).enumerate() {
        assert!(close(*a, *b, tol), "{what}: element {i}: cpu {a}, cuda {b}");
    }
}

/// A value range `(low, high)`.
type Range = (f64, f64);

/// Every elementwise loss with `reduction`, and the value ranges of its input and target.
fn losses(reduction: Reduction) -> Vec<(Op, Range, Range)> {
    let any = (-4.0, 4.0);
    let probability = (0.0, 1.0);
    vec![
        (Op::Loss(LossOp::Mse { reduction }), any, any),
        (Op::Loss(LossOp::L1 { reduction }), any, any),
        (
            Op::Loss(LossOp::Bce { reduction }),
            probability,
            probability,
        ),
        (
            Op::Loss(LossOp::BceWithLogits {
                reduction,
                pos_weight: false,
            }),
            (-30.0, 30.0),
            probability,
        ),
    ]
}

#[test]
fn every_elementwise_loss_and_reduction_equals_the_cpu() {
    for dtype in [DType::F32, DType::F64] {
        for reduction in REDUCTIONS {
            for (op, x_range, y_range) in losses(reduction) {
                for shape in [vec![5, 7], vec![3, 1, 33], vec![], vec![0, 4], vec![300]] {
                    for special in [false, true] {
                        let what = format!("{op:?} {dtype} {shape:?} special={special}");
                        let x = tensor(dtype, &shape, 1, x_range, special);
                        let y = tensor(dtype, &shape, 2, y_range, false);
                        same_on_device(&what, &op, &[x, y]);
                    }
                }
            }
        }
    }
}

#[test]
fn losses_read_transposed_operands_and_a_broadcast_pos_weight_in_place() -> Result<()> {
    for reduction in REDUCTIONS {
        for (op, x_range, y_range) in losses(reduction) {
            let what = format!("{op:?} of a transpose");
            let x = tensor(DType::F32, &[6, 5], 3, x_range, false).t()?;
            let y = tensor(DType::F32, &[5, 6], 4, y_range, false);
            same_on_device(&what, &op, &[x, y]);
        }
        let op = Op::Loss(LossOp::BceWithLogits {
            reduction,
            pos_weight: true,
        });
        let x = tensor(DType::F32, &[4, 6], 5, (-8.0, 8.0), false);
        let y = tensor(DType::F32, &[4, 6], 6, (0.0, 1.0), false);
        for pw_shape in [vec![6], vec![4, 1], vec![]] {
            let pw = tensor(DType::F32, &pw_shape, 7, (0.5, 3.0), false);
            let what = format!("bce_with_logits {reduction:?} pos_weight {pw_shape:?}");
            same_on_device(&what, &op, &[x.clone(), y.clone(), pw]);
        }
    }
    Ok(())
}

/// A two-layer model's loss and its parameters (and input), fresh leaves, after `backward`.
fn train_step(
    x: &Tensor,
    target: &Tensor,
    w1: &Tensor,
    w2: &Tensor,
    loss_of: &dyn Fn(&Tensor, &Tensor) -> Result<Tensor>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let params: Vec<Tensor> = [x, w1, w2]
        .iter()
        .map(|t| t.deep_clone()?.requires_grad_(true))
        .collect::<Result<_>>()?;
    let hidden = params[0].matmul(&params[1])?.tanh()?;
    let out = hidden.matmul(&params[2])?;
    let loss = loss_of(&out, target)?;
    loss.backward()?;
    Ok((loss, params))
}

#[test]
fn a_model_trained_through_each_loss_on_cuda_gets_the_cpu_gradients() -> Result<()> {
    type LossFn = Box<dyn Fn(&Tensor, &Tensor) -> Result<Tensor>>;
    let cases: Vec<(&str, LossFn)> = vec![
        ("mse mean", Box::new(|o, t| mse_loss(o, t, Reduction::Mean))),
        ("l1 sum", Box::new(|o, t| l1_loss(o, t, Reduction::Sum))),
        (
            "bce of sigmoid mean",
            Box::new(|o, t| binary_cross_entropy(&o.sigmoid()?, t, Reduction::Mean)),
        ),
        (
            "bce with logits and pos_weight, none then mean",
            Box::new(|o, t| {
                let pw = Tensor::from_vec(vec![2.0, 0.5, 1.5], &[3])?
                    .to_dtype(o.dtype())?
                    .to_device(o.device())?;
                binary_cross_entropy_with_logits(o, t, Some(&pw), Reduction::None)?
                    .mean(&[0, 1], false)
            }),
        ),
    ];
    for dtype in [DType::F32, DType::F64] {
        let x = tensor(dtype, &[4, 5], 11, (-1.0, 1.0), false);
        let w1 = tensor(dtype, &[5, 8], 12, (-0.5, 0.5), false);
        let w2 = tensor(dtype, &[8, 3], 13, (-0.5, 0.5), false);
        let target = tensor(dtype, &[4, 3], 14, (0.0, 1.0), false);
        for (name, loss_of) in &cases {
            let (cpu_loss, cpu) = train_step(&x, &target, &w1, &w2, loss_of.as_ref())?;
            let (dev_loss, dev) = train_step(
                &cuda(&x)?,
                &cuda(&target)?,
                &cuda(&w1)?,
                &cuda(&w2)?,
                loss_of.as_ref(),
            )?;
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            assert_eq!(dev_loss.device(), CUDA, "{name}");
            let (a, b) = (cpu_loss.to_vec_f64()?[0], dev_loss.to_vec_f64()?[0]);
            assert!(close(a, b, tol), "{name} {dtype} loss: cpu {a}, cuda {b}");
            for (k, (c, d)) in cpu.iter().zip(&dev).enumerate() {
                let (c, d) = (
                    c.grad().expect("a cpu grad"),
                    d.grad().expect("a cuda grad"),
                );
                assert_eq!(d.device(), CUDA, "{name}: gradient {k} stays on the device");
                for (a, b) in c.to_vec_f64()?.iter().zip(d.to_vec_f64()?) {
                    assert!(
                        close(*a, b, tol),
                        "{name} {dtype} grad {k}: cpu {a}, cuda {b}"
                    );
                }
            }
        }
    }
    Ok(())
}
