//! CUDA tensors on the emulated driver: the CUDA backend registered with an [`EmulatedDriver`]
//! (PTX run by the emulator, memory bounds-checked), so what a GPU would compute is checked on
//! every machine. Copies round-trip every dtype; in-place writes reach device memory; every
//! elementwise op of the op table and the reductions equal the CPU eager result (f32 and f64,
//! odd sizes, non-contiguous operands, broadcasting) and `cat` is exact; kernels are loaded once per op and
//! layout and memory is reused; autograd through CUDA tensors gives the CPU's gradients.
//! (Its own test binary: the backend registry is per process.)

mod emulated_driver;
mod emulator;

use emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera_cuda::{CudaBackend, init_with_driver};
use tessera_tensor::op::{
    BinaryOp, CompareOp, DropoutOp, IndexOp, PoolOp, ReduceKind, ReduceOp, ScalarOp, UnaryOp,
};
use tessera_tensor::{DType, Device, Op, Result, Tensor, TensorError, manual_seed};

const CUDA: Device = Device::Cuda(0);

/// The emulated driver and the backend registered on it, once for the binary.
fn backend() -> &'static (Arc<EmulatedDriver>, Arc<CudaBackend>) {
    static BACKEND: OnceLock<(Arc<EmulatedDriver>, Arc<CudaBackend>)> = OnceLock::new();
    BACKEND.get_or_init(|| {
        // Device 2 is the cache test's alone, so its counters see no other test's work.
        let driver = Arc::new(EmulatedDriver::new(3));
        let backend = init_with_driver(driver.clone()).expect("registering the backend");
        (driver, backend)
    })
}

fn cuda(t: &Tensor) -> Result<Tensor> {
    backend();
    t.to_device(CUDA)
}

/// A sweep of [-4, 4] with, where `special`, signed zeros, infinities and NaN mixed in.
fn values(n: usize, seed: usize, special: bool) -> Vec<f64> {
    const SPECIAL: [f64; 5] = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
    (0..n)
        .map(|i| {
            let k = i * 7919 + seed * 104_729;
            if special && k % 13 == 5 {
                SPECIAL[(k / 13) % SPECIAL.len()]
            } else {
                (k % 997) as f64 / 997.0 * 8.0 - 4.0
            }
        })
        .collect()
}

fn tensor(dtype: DType, shape: &[usize], seed: usize, special: bool) -> Tensor {
    let v = values(shape.iter().product(), seed, special);
    Tensor::from_vec(v, shape).unwrap().to_dtype(dtype).unwrap()
}

/// Whether `got` (from the device) equals `want` (CPU eager) within `tol` relative to
/// max(1, |want|): NaN matches NaN, infinities match exactly.
fn close(want: f64, got: f64, tol: f64) -> bool {
    (want.is_nan() && got.is_nan())
        || want == got
        || (want.is_finite() && (want - got).abs() <= tol * want.abs().max(1.0))
}

/// Relative tolerance of results of `dtype`: integers and bools exact.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-13,
        d if d.is_float() => 1e-6,
        _ => 0.0,
    }
}

/// Runs `op` on the CPU and on the device and compares every output.
fn same_on_device(what: &str, op: &Op, inputs: &[Tensor]) {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let want = op
        .apply(&refs)
        .unwrap_or_else(|e| panic!("{what} on the cpu: {e}"));
    let on_device: Vec<Tensor> = inputs.iter().map(|t| cuda(t).unwrap()).collect();
    let refs: Vec<&Tensor> = on_device.iter().collect();
    let got = op
        .apply(&refs)
        .unwrap_or_else(|e| panic!("{what} on cuda: {e}"));
    assert_eq!(want.len(), got.len(), "{what}");
    for (w, g) in want.iter().zip(&got) {
        assert_eq!(g.device(), CUDA, "{what}");
        assert_eq!((g.shape(), g.dtype()), (w.shape(), w.dtype()), "{what}");
        let tol = tolerance(w.dtype());
        let (wv, gv) = (w.to_vec_f64().unwrap(), g.to_vec_f64().unwrap());
        for (i, (a, b)) in wv.iter().zip(&gv).enumerate() {
            assert!(close(*a, *b, tol), "{what}: element {i}: cpu {a}, cuda {b}");
        }
    }
}

#[test]
fn copies_round_trip_every_dtype() -> Result<()> {
    let v = values(37, 1, false);
    for dtype in DType::ALL {
        let x = Tensor::from_vec(v.clone(), &[37])?.to_dtype(dtype)?;
        let d = cuda(&x)?;
        assert_eq!((d.device(), d.dtype(), d.shape()), (CUDA, dtype, vec![37]));
        let back = d.to_device(Device::Cpu)?;
        assert_eq!(back.to_vec_f64()?, x.to_vec_f64()?, "{dtype}");
    }
    // Empty and rank-0 tensors.
    let empty = cuda(&Tensor::from_vec(Vec::<f32>::new(), &[0, 3])?)?;
    assert_eq!(empty.to_vec::<f32>()?, Vec::<f32>::new());
    let scalar = cuda(&Tensor::from_vec(vec![2.5f64], &[])?)?;
    assert_eq!(scalar.to_vec::<f64>()?, vec![2.5]);
    Ok(())
}

#[test]
fn views_of_device_tensors_copy_back_what_they_select() -> Result<()> {
    let x = tensor(DType::F32, &[5, 7], 2, false);
    let d = cuda(&x)?;
    for (name, cpu, dev) in [
        ("t", x.t()?, d.t()?),
        ("narrow", x.narrow(1, 2, 3)?, d.narrow(1, 2, 3)?),
        ("narrow rows", x.narrow(0, 1, 3)?, d.narrow(0, 1, 3)?),
        (
            "expand",
            x.narrow(0, 1, 1)?.expand(&[4, 7])?,
            d.narrow(0, 1, 1)?.expand(&[4, 7])?,
        ),
    ] {
        assert!(dev.shares_storage(&d), "{name} is a view");
        assert_eq!(dev.to_vec::<f32>()?, cpu.to_vec::<f32>()?, "{name}");
        // `contiguous` of a strided view runs a copy kernel on the device.
        let packed = dev.contiguous()?;
        assert_eq!(packed.device(), CUDA);
        assert_eq!(!packed.shares_storage(&d), !dev.is_contiguous(), "{name}");
        assert_eq!(packed.to_vec::<f32>()?, cpu.to_vec::<f32>()?, "{name}");
    }
    // Flattening a transpose needs that copy too.
    assert_eq!(
        d.t()?.reshape(&[35])?.to_vec::<f32>()?,
        x.t()?.reshape(&[35])?.to_vec::<f32>()?
    );
    Ok(())
}

#[test]
fn in_place_writes_reach_device_memory() -> Result<()> {
    let d = cuda(&Tensor::zeros(&[3, 4], DType::F64)?)?;
    // A column: a strided write.
    d.narrow(1, 2, 1)?
        .copy_(&Tensor::from_vec(vec![1.0f64, 2.0, 3.0], &[3, 1])?)?;
    // A row: a contiguous one.
    d.narrow(0, 0, 1)?.fill_(-1.0)?;
    assert_eq!(
        d.to_vec::<f64>()?,
        vec![
            -1.0, -1.0, -1.0, -1.0, 0.0, 0.0, 2.0, 0.0, 0.0, 0.0, 3.0, 0.0
        ]
    );
    // Copying from another device tensor goes through the host.
    let src = cuda(&Tensor::from_vec(vec![9.0f64; 4], &[4])?)?;
    d.narrow(0, 2, 1)?.copy_(&src.reshape(&[1, 4])?)?;
    assert_eq!(d.to_vec::<f64>()?[8..], [9.0; 4]);
    d.add_scalar_(1.0)?;
    assert_eq!(d.to_vec::<f64>()?[..4], [0.0; 4]);
    Ok(())
}

/// The elementwise ops of the lowering table: every unary op, every binary op with a
/// broadcast operand, every scalar op, clamp and dtype conversions.
fn elementwise_cases(dtype: DType) -> Vec<(String, Op, Vec<Tensor>)> {
    let shape = [3, 37];
    let x = tensor(dtype, &shape, 3, true);
    let row = tensor(dtype, &[37], 4, true);
    let mut cases = Vec::new();
    for u in UnaryOp::EVERY {
        cases.push((format!("{u:?}"), Op::Unary(u), vec![x.clone()]));
    }
    for b in BinaryOp::EVERY {
        cases.push((
            format!("{b:?}"),
            Op::Binary(b),
            vec![x.clone(), row.clone()],
        ));
        for reversed in [false, true] {
            let op = Op::Scalar(ScalarOp {
                op: b,
                value: 1.5,
                reversed,
            });
            cases.push((
                format!("{b:?} scalar reversed={reversed}"),
                op,
                vec![x.clone()],
            ));
        }
    }
    let clamp = Op::Clamp {
        min: Some(-0.5),
        max: Some(0.75),
    };
    cases.push(("clamp".into(), clamp, vec![x.clone()]));
    let other = if dtype == DType::F32 {
        DType::F64
    } else {
        DType::F32
    };
    cases.push(("to_dtype".into(), Op::ToDType(other), vec![x.clone()]));
    cases
}

#[test]
fn every_elementwise_op_equals_the_cpu_in_f32_and_f64() {
    for dtype in [DType::F32, DType::F64] {
        for (what, op, inputs) in elementwise_cases(dtype) {
            same_on_device(&format!("{what} {dtype}"), &op, &inputs);
        }
    }
}

#[test]
fn elementwise_ops_read_non_contiguous_and_broadcast_operands_in_place() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let base = tensor(dtype, &[9, 5], 5, false);
        let t = base.t()?; // [5, 9], strides [1, 5]
        let narrow = tensor(dtype, &[5, 11], 6, false).narrow(1, 1, 9)?;
        let column = tensor(dtype, &[5, 1], 7, false);
        same_on_device(
            "exp of a transpose",
            &Op::Unary(UnaryOp::Exp),
            std::slice::from_ref(&t),
        );
        same_on_device(
            "add transpose + narrow",
            &Op::Binary(BinaryOp::Add),
            &[t.clone(), narrow.clone()],
        );
        same_on_device(
            "mul by a broadcast column",
            &Op::Binary(BinaryOp::Mul),
            &[narrow, column],
        );
        // The same op on another layout is another kernel, and both stay right.
        same_on_device("exp packed", &Op::Unary(UnaryOp::Exp), &[base]);
    }
    Ok(())
}

#[test]
fn reductions_softmax_and_layer_norm_equal_the_cpu() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let x = tensor(dtype, &[6, 45], 8, false);
        let reduce = |kind, dims: Vec<usize>, keepdim| {
            Op::Reduce(ReduceOp {
                kind,
                dims,
                keepdim,
            })
        };
        let kinds = [
            ReduceKind::Sum,
            ReduceKind::Mean,
            ReduceKind::Amax,
            ReduceKind::Amin,
            ReduceKind::Var { correction: 1 },
        ];
        for kind in kinds {
            same_on_device(
                &format!("{kind:?} rows {dtype}"),
                &reduce(kind, vec![1], false),
                std::slice::from_ref(&x),
            );
            same_on_device(
                &format!("{kind:?} cols {dtype}"),
                &reduce(kind, vec![0], true),
                std::slice::from_ref(&x),
            );
            same_on_device(
                &format!("{kind:?} all {dtype}"),
                &reduce(kind, vec![0, 1], false),
                std::slice::from_ref(&x),
            );
        }
        same_on_device(
            "sum of a transpose",
            &reduce(ReduceKind::Sum, vec![1], false),
            &[x.t()?],
        );
        for log in [false, true] {
            same_on_device(
                &format!("softmax log={log} {dtype}"),
                &Op::Softmax { dim: 1, log },
                std::slice::from_ref(&x),
            );
        }
        let w = tensor(dtype, &[45], 9, false);
        let b = tensor(dtype, &[45], 10, false);
        let cpu = tessera_tensor::functional::layer_norm(&x, &[45], Some(&w), Some(&b), 1e-5)?;
        let dev = tessera_tensor::functional::layer_norm(
            &cuda(&x)?,
            &[45],
            Some(&cuda(&w)?),
            Some(&cuda(&b)?),
            1e-5,
        )?;
        assert_eq!(dev.device(), CUDA);
        for (a, g) in cpu.to_vec_f64()?.iter().zip(dev.to_vec_f64()?) {
            assert!(close(*a, g, 1e-5), "layer norm {dtype}: cpu {a}, cuda {g}");
        }
    }
    Ok(())
}

#[test]
fn kernels_load_once_per_op_and_layout_and_memory_is_reused() -> Result<()> {
    let (driver, backend) = backend();
    let device = Device::Cuda(2);
    let x = tensor(DType::F32, &[13, 3], 11, false).to_device(device)?;
    let _warm = x.tanh()?;
    let loaded = driver.modules_loaded_on(2);
    assert_eq!(loaded, 1);
    assert_eq!(backend.cached_kernels(2).unwrap(), 1);
    let before = backend.memory_stats(2).unwrap();
    for _ in 0..5 {
        let y = x.tanh()?;
        drop(y);
    }
    assert_eq!(driver.modules_loaded_on(2), 1, "the kernel is loaded once");
    assert_eq!(backend.cached_kernels(2).unwrap(), 1);
    let after = backend.memory_stats(2).unwrap();
    // The first result went to the driver; the five after reuse one cached block.
    assert_eq!(after.driver_allocations, before.driver_allocations + 1);
    assert_eq!(after.cache_hits, before.cache_hits + 4);
    // Another layout of the same op is another kernel.
    let _t = x.t()?.tanh()?;
    assert_eq!(driver.modules_loaded_on(2), 2);
    backend.empty_cache(2).unwrap();
    assert_eq!(backend.memory_stats(2).unwrap().bytes_cached, 0);
    Ok(())
}

#[test]
fn autograd_through_cuda_tensors_gives_the_cpu_gradients() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let xs = tensor(dtype, &[4, 9], 12, false);
        let ws = tensor(dtype, &[9], 13, false);
        let run = |x: Tensor, w: Tensor| -> Result<(Tensor, Tensor, Tensor)> {
            let x = x.requires_grad_(true)?;
            let w = w.requires_grad_(true)?;
            // Binary and scalar ops with a broadcast, softmax, log-softmax and a mean (unary
            // ops have a test of their own below).
            let y = x.mul(&w)?.add_scalar(0.5)?.mul(&x)?.softmax(1)?;
            let z = y.sub(&w)?.log_softmax(1)?.div_scalar(3.0)?;
            let loss = z.mul(&x)?.mean(&[0, 1], false)?;
            loss.backward()?;
            Ok((loss, x, w))
        };
        let (cpu_loss, cpu_x, cpu_w) = run(xs.clone(), ws.clone())?;
        let (dev_loss, dev_x, dev_w) = run(cuda(&xs)?, cuda(&ws)?)?;
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        assert_eq!(dev_loss.device(), CUDA);
        assert!(close(
            cpu_loss.to_vec_f64()?[0],
            dev_loss.to_vec_f64()?[0],
            tol
        ));
        for (name, c, d) in [("x", cpu_x, dev_x), ("w", cpu_w, dev_w)] {
            let (c, d) = (c.grad().unwrap(), d.grad().unwrap());
            assert_eq!(
                d.device(),
                CUDA,
                "the gradient of {name} stays on the device"
            );
            for (a, b) in c.to_vec_f64()?.iter().zip(d.to_vec_f64()?) {
                assert!(close(*a, b, tol), "grad {name} {dtype}: cpu {a}, cuda {b}");
            }
        }
    }
    Ok(())
}

#[test]
fn the_backward_of_unary_ops_runs_on_the_device_and_gives_the_cpu_gradients() -> Result<()> {
    // `UnaryOp::backward` applies `Op::UnaryBackward`, which lowers to a kernel of the IR like
    // any elementwise op, so the gradient is computed in device memory.
    for dtype in [DType::F32, DType::F64] {
        let xs = tensor(dtype, &[6], 17, false);
        let run = |x: Tensor| -> Result<Tensor> {
            let x = x.requires_grad_(true)?;
            x.tanh()?.mul(&x.gelu()?)?.sum_all()?.backward()?;
            Ok(x)
        };
        let (c, d) = (run(xs.clone())?, run(cuda(&xs)?)?);
        let (c, d) = (c.grad().unwrap(), d.grad().unwrap());
        assert_eq!(d.device(), CUDA, "the gradient stays on the device");
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        for (a, b) in c.to_vec_f64()?.iter().zip(d.to_vec_f64()?) {
            assert!(close(*a, b, tol), "{dtype}: cpu {a}, cuda {b}");
        }
    }
    Ok(())
}

/// The bits of `t` (NaNs as one pattern), for exact comparisons.
fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(t.to_device(Device::Cpu)?
        .to_vec_f64()?
        .iter()
        .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
        .collect())
}

#[test]
fn dropout_on_the_device_draws_the_cpu_mask_from_the_seed_and_gives_the_cpu_gradient() -> Result<()>
{
    for dtype in [DType::F32, DType::F64, DType::F16] {
        // A transposed operand with infinities and NaN: dropped elements are +0 whatever they
        // hold, kept ones `x * scale`, read through the view.
        for (p, training) in [(0.3, true), (0.0, true), (1.0, true), (0.6, false)] {
            // Fresh each time: a clone shares its gradient.
            let xs = tensor(dtype, &[7, 5], 21, true).t()?;
            let op = Op::Dropout(DropoutOp { p, training });
            let run = |x: Tensor| -> Result<(Vec<Tensor>, Tensor)> {
                manual_seed(11);
                let x = x.requires_grad_(true)?;
                let outs = op.apply(&[&x])?;
                outs[0].sum_all()?.backward()?;
                let grad = x.grad().expect("a gradient");
                Ok((outs, grad))
            };
            let (cpu, cpu_grad) = run(xs.clone())?;
            let xs = tensor(dtype, &[7, 5], 21, true).t()?;
            let (dev, dev_grad) = run(cuda(&xs)?)?;
            let what = format!("dropout p={p} training={training} {dtype}");
            assert_eq!(dev[0].device(), CUDA, "{what}");
            assert_eq!(
                dev_grad.device(),
                CUDA,
                "{what}: the gradient stays on the device"
            );
            assert_eq!(bits(&dev[0])?, bits(&cpu[0])?, "{what}: result");
            assert_eq!(bits(&dev[1])?, bits(&cpu[1])?, "{what}: mask");
            assert_eq!(bits(&dev_grad)?, bits(&cpu_grad)?, "{what}: gradient");
        }
    }
    // The draws advance the global generator as the CPU kernel's do: two calls, two masks.
    let x = cuda(&Tensor::ones(&[64], DType::F32)?)?;
    manual_seed(3);
    let first = Op::Dropout(DropoutOp {
        p: 0.5,
        training: true,
    })
    .apply(&[&x])?;
    let second = Op::Dropout(DropoutOp {
        p: 0.5,
        training: true,
    })
    .apply(&[&x])?;
    assert_ne!(bits(&first[1])?, bits(&second[1])?);
    Ok(())
}

#[test]
fn an_op_without_device_kernels_is_unsupported_naming_it() -> Result<()> {
    let x = cuda(&tensor(DType::F32, &[1, 1, 100, 7], 3, false))?;
    // Adaptive pooling whose bins are too many to unroll (100 -> 99 rows: one block of 99
    // bins) is left to its eager CPU kernel by the lowering, so it has no device kernel.
    let pool = Op::Pool(PoolOp::AdaptiveAvgPool2d {
        output_size: [99, 3],
    });
    match pool.apply(&[&x]) {
        Err(TensorError::UnsupportedOnDevice { op, device, .. }) => {
            assert_eq!((op.as_str(), device), ("adaptive_avg_pool2d", CUDA))
        }
        other => panic!("expected UnsupportedOnDevice, got {other:?}"),
    }
    Ok(())
}

#[test]
fn cat_joins_views_empty_inputs_and_f32_with_f64_on_the_device_as_on_the_cpu() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let a = tensor(dtype, &[3, 4], 30, true);
        let b = tensor(dtype, &[3, 2], 31, true);
        let c = tensor(dtype, &[3, 0], 32, false);
        // A transposed operand, read through its strides, and the same tensor twice.
        let t = tensor(dtype, &[5, 3], 33, true).t()?;
        let joined = Op::Index(IndexOp::Cat { dim: 1 });
        same_on_device(
            &format!("cat dim 1 {dtype}"),
            &joined,
            &[a.clone(), b, c, t, a.clone()],
        );
        let rows = Op::Index(IndexOp::Cat { dim: 0 });
        let legacy_empty = Tensor::zeros(&[0], dtype)?;
        same_on_device(
            &format!("cat dim 0 with a legacy empty tensor {dtype}"),
            &rows,
            &[a.clone(), legacy_empty, a.clone()],
        );
    }
    let signed_zeros = Tensor::from_vec(vec![-0.0f32, 0.0, -0.0], &[3])?;
    let wide = tensor(DType::F64, &[2], 34, true);
    let mixed = Op::Index(IndexOp::Cat { dim: 0 });
    same_on_device("cat f32 and f64", &mixed, &[signed_zeros.clone(), wide]);
    let got = mixed.apply1(&[&cuda(&signed_zeros)?, &cuda(&signed_zeros)?])?;
    let bits: Vec<u32> = got.to_vec::<f32>()?.iter().map(|v| v.to_bits()).collect();
    let want: Vec<u32> = [-0.0f32, 0.0, -0.0, -0.0, 0.0, -0.0]
        .iter()
        .map(|v| v.to_bits())
        .collect();
    assert_eq!(bits, want, "signed zeros survive the sum of guarded loads");
    // Half, integer and bool tensors, read in their storage types (signed zeros of halves kept).
    for dtype in [DType::F16, DType::BF16] {
        let a = signed_zeros.to_dtype(dtype)?;
        let b = tensor(DType::F32, &[3, 4], 35, true).to_dtype(dtype)?.t()?;
        same_on_device(
            &format!("cat {dtype}"),
            &joined_rows(),
            &[a.reshape(&[1, 3])?.expand(&[2, 3])?, b.clone()],
        );
        let got = joined_rows().apply1(&[&cuda(&a)?, &cuda(&a)?])?;
        assert_eq!(
            bits_of(&got.to_dtype(DType::F32)?)?,
            bits_of(
                &Op::Index(IndexOp::Cat { dim: 0 })
                    .apply1(&[&a, &a])?
                    .to_dtype(DType::F32)?
            )?
        );
    }
    for (da, db) in [
        (DType::U8, DType::U8),
        (DType::I8, DType::U8),
        (DType::I32, DType::I64),
        (DType::Bool, DType::Bool),
        (DType::Bool, DType::I8),
    ] {
        let a = tessera_testkit::narrow_int_values(6, da, 0).reshape(&[2, 3])?;
        let b = tessera_testkit::narrow_int_values(9, db, 1).reshape(&[3, 3])?;
        same_on_device(&format!("cat {da} and {db}"), &joined_rows(), &[a, b]);
    }
    Ok(())
}

/// `cat` along dim 0.
fn joined_rows() -> Op {
    Op::Index(IndexOp::Cat { dim: 0 })
}

/// The f32 bits of `t`'s elements.
fn bits_of(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.to_device(Device::Cpu)?
        .to_vec::<f32>()?
        .iter()
        .map(|v| v.to_bits())
        .collect())
}

#[test]
fn comparisons_where_and_integer_ops_run_on_the_device_as_on_the_cpu() -> Result<()> {
    for dtype in [DType::F32, DType::F64] {
        let (a, b) = (
            tensor(dtype, &[3, 5], 20, true),
            tensor(dtype, &[5], 21, true),
        );
        for c in CompareOp::EVERY {
            same_on_device(
                &format!("{c:?} {dtype}"),
                &Op::Compare(c),
                &[a.clone(), b.clone()],
            );
        }
        let mask = Op::Compare(CompareOp::Gt).apply1(&[&a, &b])?;
        assert_eq!(mask.dtype(), DType::Bool);
        // The condition read transposed, through strides.
        let cond = mask.t()?.contiguous()?.t()?;
        same_on_device(
            &format!("where {dtype}"),
            &Op::Where,
            &[cond, a.clone(), b.clone()],
        );
    }
    let counts = Tensor::from_vec(vec![0i64, 7, -3, 1 << 40], &[4])?;
    let plus_one = Op::Scalar(ScalarOp {
        op: BinaryOp::Add,
        value: 1.0,
        reversed: false,
    });
    same_on_device("i64 + 1", &plus_one, std::slice::from_ref(&counts));
    same_on_device(
        "i64 * i64",
        &Op::Binary(BinaryOp::Mul),
        &[counts.clone(), counts.clone()],
    );
    same_on_device(
        "i64 -> f32",
        &Op::ToDType(DType::F32),
        std::slice::from_ref(&counts),
    );
    let x = tensor(DType::F32, &[9], 22, true);
    same_on_device(
        "f32 -> i64",
        &Op::ToDType(DType::I64),
        std::slice::from_ref(&x),
    );
    same_on_device(
        "f32 -> bool",
        &Op::ToDType(DType::Bool),
        std::slice::from_ref(&x),
    );
    // The result stays on the device.
    let on = cuda(&counts)?;
    let next = plus_one.apply1(&[&on])?;
    assert_eq!((next.device(), next.dtype()), (CUDA, DType::I64));
    assert_eq!(next.to_vec::<i64>()?, vec![1, 8, -2, (1 << 40) + 1]);
    // u8, i8 and i32 operands, alone and mixed with other dtypes.
    for (op, inputs) in tessera_testkit::narrow_int_cases() {
        let dtypes: Vec<DType> = inputs.iter().map(|t| t.dtype()).collect();
        same_on_device(&format!("{} {dtypes:?}", op.name()), &op, &inputs);
    }
    // An integer reduction: the i64 sum of bools, an accuracy count.
    let guesses = Tensor::from_vec(vec![0i64, 7, 5, 1 << 40], &[4])?;
    let hits = Op::Compare(CompareOp::Eq).apply1(&[&counts, &guesses])?;
    let count = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![0],
        keepdim: false,
    });
    same_on_device("sum of bools", &count, std::slice::from_ref(&hits));
    Ok(())
}

#[test]
fn batch_norm_update_counts_batches_and_blends_statistics_on_the_device() -> Result<()> {
    for momentum in [Some(0.1), None] {
        for dtype in [DType::F32, DType::F64] {
            let op = Op::BatchNormUpdate(tessera_tensor::op::BatchNormUpdateOp {
                momentum,
                count: 12,
                counted: true,
            });
            let mut inputs: Vec<Tensor> =
                (0..4).map(|s| tensor(dtype, &[7], 30 + s, false)).collect();
            inputs.push(Tensor::scalar(3i64));
            same_on_device(
                &format!("batch_norm_update {momentum:?} {dtype}"),
                &op,
                &inputs,
            );
            let on: Vec<Tensor> = inputs.iter().map(cuda).collect::<Result<_>>()?;
            let refs: Vec<&Tensor> = on.iter().collect();
            let outs = op.apply(&refs)?;
            assert_eq!(
                (outs[2].device(), outs[2].to_vec::<i64>()?),
                (CUDA, vec![4])
            );
        }
    }
    Ok(())
}

#[test]
fn tensors_move_between_devices_and_mixing_them_is_a_mismatch() -> Result<()> {
    let x = tensor(DType::F32, &[5], 16, false);
    let on0 = cuda(&x)?;
    let on1 = on0.to_device(Device::Cuda(1))?;
    assert_eq!(on1.device(), Device::Cuda(1));
    assert_eq!(on1.neg()?.to_vec::<f32>()?, x.neg()?.to_vec::<f32>()?);
    assert!(matches!(
        on0.add(&on1),
        Err(TensorError::DeviceMismatch { .. })
    ));
    assert!(matches!(
        x.to_device(Device::Cuda(7)),
        Err(TensorError::DeviceUnavailable { .. })
    ));
    Ok(())
}
