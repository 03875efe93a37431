//! Loading and launching on a GPU. Without one, the typed errors are tested: no driver (or no
//! such device) is `DeviceUnavailable`, never a panic. The tests marked
//! `#[ignore = "needs an NVIDIA GPU"]` run kernels on device 0 and compare them with the
//! kernel-IR interpreter; run them on a GPU machine with
//! `cargo test -p tessera-cuda --test device -- --ignored`.

mod common;

use common::{gemm_graphs, kernels, layer_norm_graph, op_graph, reduce_graph};
use tessera_cuda::{CudaDevice, CudaError, PtxTarget, RenderedKernel, driver_present, render};
use tessera_fx::Graph;
use tessera_kernel::{BufferPtr, BufferRole, Kernel, ScalarType, interpret};
use tessera_tensor::op::{BinaryOp, ReduceKind, UnaryOp};
use tessera_tensor::{DType, Op};

#[test]
fn a_missing_device_is_a_typed_error_not_a_panic() {
    match CudaDevice::new(4096) {
        Err(CudaError::DeviceUnavailable { reason }) => assert!(!reason.is_empty()),
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
}

#[test]
fn without_the_driver_library_device_zero_is_unavailable() {
    if driver_present() {
        println!("skipped: libcuda is present on this machine");
        return;
    }
    let err = CudaDevice::new(0).unwrap_err();
    assert!(
        err.to_string().contains("libcuda"),
        "the error names the missing library: {err}"
    );
}

/// Deterministic inputs for every input buffer, zeros for outputs, as f64.
fn host_buffers(kernel: &Kernel) -> Vec<Vec<f64>> {
    kernel
        .buffers
        .iter()
        .enumerate()
        .map(|(b, p)| match p.role {
            BufferRole::Output | BufferRole::Scratch => vec![0.0; p.len],
            BufferRole::Input => (0..p.len)
                .map(|i| ((i * 7919 + b * 104_729) % 997) as f64 / 997.0 * 4.0 - 1.8)
                .collect(),
        })
        .collect()
}

/// The interpreter's outputs of `kernel` on `host`.
fn interpreted(kernel: &Kernel, host: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let mut f32s: Vec<Vec<f32>> = Vec::new();
    let mut f64s: Vec<Vec<f64>> = Vec::new();
    let mut ptrs = Vec::new();
    for (p, data) in kernel.buffers.iter().zip(host) {
        if p.ty == ScalarType::F32 {
            f32s.push(data.iter().map(|&x| x as f32).collect());
        } else {
            f64s.push(data.clone());
        }
    }
    let (mut i32, mut i64) = (0, 0);
    for p in &kernel.buffers {
        let ptr = if p.ty == ScalarType::F32 {
            i32 += 1;
            f32s[i32 - 1].as_mut_ptr() as *mut u8
        } else {
            i64 += 1;
            f64s[i64 - 1].as_mut_ptr() as *mut u8
        };
        ptrs.push(BufferPtr {
            ptr,
            len: p.len,
            ty: p.ty,
        });
    }
    // SAFETY: one live buffer per parameter, of its type and length.
    unsafe { interpret(kernel, &ptrs) };
    let (mut i32, mut i64) = (0, 0);
    kernel
        .buffers
        .iter()
        .map(|p| {
            if p.ty == ScalarType::F32 {
                i32 += 1;
                f32s[i32 - 1].iter().map(|&x| f64::from(x)).collect()
            } else {
                i64 += 1;
                f64s[i64 - 1].clone()
            }
        })
        .collect()
}

/// Runs every kernel of `graph` on device 0 and compares its outputs with the interpreter's
/// within `tol` (relative to `max(|x|, 1)`).
fn agrees_on_gpu(graph: &Graph, tol: f64) {
    let device = CudaDevice::new(0).unwrap();
    for kernel in kernels(graph) {
        let rendered = render(&kernel, &PtxTarget::SM80).unwrap();
        let loaded = device.load(&rendered).unwrap();
        let host = host_buffers(&kernel);
        let mut dev: Vec<_> = kernel
            .buffers
            .iter()
            .zip(&host)
            .map(|(p, d)| match p.ty {
                ScalarType::F32 => {
                    device.upload_f32(&d.iter().map(|&x| x as f32).collect::<Vec<_>>())
                }
                _ => device.upload_f64(d),
            })
            .collect::<Result<_, _>>()
            .unwrap();
        let mut refs: Vec<_> = dev.iter_mut().collect();
        device.launch(&loaded, &mut refs).unwrap();
        device.synchronize().unwrap();
        let expected = interpreted(&kernel, &host);
        for (b, p) in kernel.buffers.iter().enumerate() {
            if p.role != BufferRole::Output {
                continue;
            }
            let got = device.download(&dev[b]).unwrap();
            for (i, (e, g)) in expected[b].iter().zip(&got).enumerate() {
                let same = (e.is_nan() && g.is_nan()) || (e - g).abs() <= tol * e.abs().max(1.0);
                assert!(same, "{}: buf{b}[{i}]: expected {e}, got {g}", kernel.name);
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn elementwise_ops_agree_with_the_interpreter_on_the_gpu() {
    for dtype in [DType::F32, DType::F64] {
        for u in UnaryOp::EVERY {
            agrees_on_gpu(&op_graph(Op::Unary(u), dtype, &[&[33, 70]]), 1e-6);
        }
        for b in BinaryOp::EVERY {
            agrees_on_gpu(&op_graph(Op::Binary(b), dtype, &[&[33, 70], &[70]]), 1e-6);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn reductions_agree_with_the_interpreter_on_the_gpu() {
    for dtype in [DType::F32, DType::F64] {
        for kind in [ReduceKind::Sum, ReduceKind::Amax, ReduceKind::LogSumExp] {
            agrees_on_gpu(&reduce_graph(kind, dtype, 9, 1000), 1e-5);
        }
        for log in [false, true] {
            let g = op_graph(Op::Softmax { dim: 1, log }, dtype, &[&[9, 1000]]);
            agrees_on_gpu(&g, 1e-5);
        }
        agrees_on_gpu(&layer_norm_graph(dtype, 9, 1000), 1e-5);
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn gemm_and_convolution_kernels_agree_with_the_interpreter_on_the_gpu() {
    for dtype in [DType::F32, DType::F64] {
        for (_, g) in gemm_graphs(dtype) {
            agrees_on_gpu(&g, 1e-5);
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU and libcublas"]
fn cublas_computes_the_planned_row_major_product() {
    use tessera_cuda::{CublasHandle, GemmOptions, GemmSpec, StridedOperand, cublas_plan};
    let device = CudaDevice::new(0).unwrap();
    let blas = CublasHandle::new(&device).unwrap();
    let (batch, m, n, k) = (2, 33, 17, 9);
    let spec = GemmSpec {
        name: "cublas".into(),
        dtype: DType::F32,
        batch,
        m,
        n,
        k,
        a: StridedOperand::row_major(m, k),
        // B read transposed from [batch, n, k].
        b: StridedOperand {
            offset: 0,
            batch_stride: n * k,
            row_stride: 1,
            col_stride: k,
        },
        c: StridedOperand::row_major(m, n),
        bias: None,
        options: GemmOptions::default(),
    };
    let plan = cublas_plan(&spec).unwrap();
    let a: Vec<f32> = (0..batch * m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b: Vec<f32> = (0..batch * n * k).map(|i| (i % 5) as f32 - 2.0).collect();
    let (da, db) = (
        device.upload_f32(&a).unwrap(),
        device.upload_f32(&b).unwrap(),
    );
    let mut dc = device.zeros(ScalarType::F32, batch * m * n).unwrap();
    blas.gemm(&plan, &da, &db, &mut dc).unwrap();
    let got = device.download(&dc).unwrap();
    for bi in 0..batch {
        for r in 0..m {
            for c in 0..n {
                let want: f32 = (0..k)
                    .map(|l| a[bi * m * k + r * k + l] * b[bi * n * k + c * k + l])
                    .sum();
                assert_eq!(got[bi * m * n + r * n + c], f64::from(want));
            }
        }
    }
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn a_rejected_kernel_reports_the_jit_log_with_its_line() {
    let device = CudaDevice::new(0).unwrap();
    let kernel = &kernels(&op_graph(Op::Unary(UnaryOp::Relu), DType::F32, &[&[4]]))[0];
    let mut rendered: RenderedKernel = render(kernel, &PtxTarget::SM80).unwrap();
    rendered.ptx = rendered.ptx.replace("ret;", "not_an_instruction;");
    match device.load(&rendered) {
        Err(CudaError::ModuleRejected { log, .. }) => {
            assert!(log.contains("line"), "the log names the line: {log}")
        }
        other => panic!("expected ModuleRejected, got {other:?}"),
    }
}
