//! Every variant of the op table on CUDA tensors (the emulated driver), drawn with random
//! attributes and shapes by `tessera_testkit::op_cases`: each small case the CPU eager kernel
//! accepts runs on the device and must give the CPU's outputs (same shapes and dtypes, values
//! within a summation-order tolerance), or fail with `UnsupportedOnDevice` naming the op. The
//! variants that have no device kernels are pinned below, so the README's list stays true, a
//! variant that loses its kernels fails here, and one that gains them asks for the pin to go.
//! (Its own test binary: the backend registry is per process.)

mod emulated_driver;
mod emulator;

use emulated_driver::EmulatedDriver;
use proptest::strategy::{Strategy, ValueTree};
use proptest::test_runner::TestRunner;
use std::collections::BTreeSet;
use std::sync::Arc;
use tessera_cuda::init_with_driver;
use tessera_tensor::{DType, Device, Op, Tensor, TensorError, TensorMeta};
use tessera_testkit::op_cases::{input_dtypes, numel, op_strategies, real_input, shapes, variant};

const CUDA: Device = Device::Cuda(0);

/// Cases per variant run on the device, draws tried to find them, and the largest input or
/// output (in elements) a case may have: the emulator runs every thread of a kernel on the CPU.
const CASES_PER_VARIANT: usize = 2;
const DRAWS_PER_VARIANT: usize = 30000;
const ELEMENT_LIMIT: usize = 256;

/// The variants whose cases the CUDA backend refuses with `UnsupportedOnDevice` (none today).
const UNSUPPORTED_ON_CUDA: &[&str] = &[];

/// The variants no random draw made valid for the CPU within the draws (their shapes are too
/// constrained for the shared shape pool); they are not checked here (`cuda_products.rs`
/// checks the convolution backward ops against the CPU).
const NEVER_VALID: &[&str] = &[
    "batch_norm_update",
    "conv.backward_input",
    "conv.backward_weight",
    "optim.adam_update",
    "pool.avg_backward",
];

/// What happened to one variant's cases on the device.
enum Outcome {
    Equal,
    Unsupported,
    Wrong(String),
}

#[test]
fn every_op_of_the_table_runs_on_the_device_as_on_the_cpu_or_is_refused_by_name() {
    let driver = Arc::new(EmulatedDriver::new(1));
    init_with_driver(driver).expect("registering the backend");
    let mut unsupported = BTreeSet::new();
    let mut never_valid = BTreeSet::new();
    let mut wrong = Vec::new();
    for strategy in op_strategies() {
        let mut runner = TestRunner::deterministic();
        let mut name = None;
        let mut cases = 0;
        for _ in 0..DRAWS_PER_VARIANT {
            let op = strategy.new_tree(&mut runner).unwrap().current();
            name = Some(variant(&op));
            let dtypes = input_dtypes(&op);
            let shapes = shapes(dtypes.len())
                .new_tree(&mut runner)
                .unwrap()
                .current();
            let Some(inputs) = cpu_case(&op, &shapes, &dtypes) else {
                continue;
            };
            cases += 1;
            match on_device(&op, &inputs) {
                Outcome::Equal => {}
                Outcome::Unsupported => {
                    unsupported.insert(variant(&op));
                }
                Outcome::Wrong(why) => wrong.push(format!("{} on {shapes:?}: {why}", op.name())),
            }
            if cases == CASES_PER_VARIANT {
                break;
            }
        }
        if cases == 0 {
            never_valid.insert(name.expect("a drawn op"));
        }
    }
    assert!(
        wrong.is_empty(),
        "device results differ:\n{}",
        wrong.join("\n")
    );
    let pinned: BTreeSet<&str> = UNSUPPORTED_ON_CUDA.iter().copied().collect();
    assert_eq!(unsupported, pinned, "variants refused on CUDA");
    let pinned: BTreeSet<&str> = NEVER_VALID.iter().copied().collect();
    assert_eq!(never_valid, pinned, "variants never drawn valid");
}

/// The inputs of a small case the CPU eager kernel runs, or `None`.
fn cpu_case(op: &Op, shapes: &[Vec<usize>], dtypes: &[DType]) -> Option<Vec<Tensor>> {
    let metas: Vec<TensorMeta> = shapes
        .iter()
        .zip(dtypes)
        .map(|(s, &d)| TensorMeta::new(s.as_slice(), d))
        .collect();
    let promised = op.meta(&metas).ok()?;
    let small = |m: &TensorMeta| numel(&m.shape).is_some_and(|n| n <= ELEMENT_LIMIT);
    if !metas.iter().all(small) || !promised.iter().all(small) {
        return None;
    }
    let inputs: Vec<Tensor> = metas.iter().map(real_input).collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    op.apply(&refs).ok()?;
    Some(inputs)
}

/// Runs `op` on copies of `inputs` on the device and compares with the CPU.
fn on_device(op: &Op, inputs: &[Tensor]) -> Outcome {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = op.apply(&refs).expect("the case ran on the cpu");
    let on_device: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_device(CUDA).expect("a copy to the device"))
        .collect();
    let refs: Vec<&Tensor> = on_device.iter().collect();
    let got = match op.apply(&refs) {
        Ok(got) => got,
        Err(TensorError::UnsupportedOnDevice { op: named, .. }) if named == op.name() => {
            return Outcome::Unsupported;
        }
        Err(e) => return Outcome::Wrong(format!("the device failed: {e}")),
    };
    if got.len() != want.len() {
        return Outcome::Wrong(format!(
            "{} outputs, the cpu gives {}",
            got.len(),
            want.len()
        ));
    }
    for (k, (w, g)) in want.iter().zip(&got).enumerate() {
        if (g.device(), g.shape(), g.dtype()) != (CUDA, w.shape(), w.dtype()) {
            return Outcome::Wrong(format!(
                "output {k} is {:?} {:?} on {:?}, the cpu's {:?} {:?}",
                g.shape(),
                g.dtype(),
                g.device(),
                w.shape(),
                w.dtype()
            ));
        }
        if random_output(op) {
            continue;
        }
        let (wv, gv) = (w.to_vec_f64().unwrap(), g.to_vec_f64().unwrap());
        let tol = tolerance(op, w.dtype());
        if let Some(i) = (0..wv.len()).find(|&i| !close(wv[i], gv[i], tol)) {
            return Outcome::Wrong(format!(
                "output {k} element {i}: cpu {}, cuda {}",
                wv[i], gv[i]
            ));
        }
    }
    Outcome::Equal
}

/// Ops whose values are drawn at random (dropout masks): only shapes and dtypes compare.
fn random_output(op: &Op) -> bool {
    variant(op).starts_with("dropout")
}

/// Relative to max(1, |cpu|): the device sums in another order; f64 and integers are tight.
/// A normalisation multiplies the rounding of its mean by 1/sqrt(var + eps), up to 1/sqrt(eps)
/// on a group of equal values.
fn tolerance(op: &Op, dtype: DType) -> f64 {
    let amplification = if variant(op).starts_with("norm.") {
        300.0
    } else {
        1.0
    };
    amplification
        * match dtype {
            DType::F64 => 1e-12,
            DType::F32 => 1e-5,
            DType::F16 | DType::BF16 => 1e-2,
            _ => 0.0,
        }
}

fn close(want: f64, got: f64, tol: f64) -> bool {
    (want.is_nan() && got.is_nan())
        || want == got
        || (want.is_finite() && (want - got).abs() <= tol * want.abs().max(1.0))
}
