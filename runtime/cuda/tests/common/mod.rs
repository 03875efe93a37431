//! Helpers of the CUDA backend's tests: graphs of one op (or a chain) lowered to kernels, and
//! assembling PTX with `ptxas` when `TESSERA_PTXAS` names it.

#![allow(dead_code)]

use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::process::{Command, Stdio};
use tessera_cuda::{PtxTarget, render};
use tessera_fx::Graph;
use tessera_kernel::{Kernel, LowerOptions, Program, lower, lower_with};
use tessera_tensor::op::{
    BinaryOp, CompareOp, NormOp, ReduceKind, ReduceOp, ScalarOp, UnaryOp, ViewOp,
};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// The kernels of `graph` lowered for packed inputs; the lowering must not fall back.
pub fn kernels(graph: &Graph) -> Vec<Kernel> {
    let program: Program = lower(graph, &[]).unwrap();
    assert!(program.fallbacks.is_empty(), "fell back:\n{program}");
    program.kernels().cloned().collect()
}

/// `op` on one placeholder per input (shaped and typed as `inputs`), its first `outputs`
/// results the graph's outputs.
pub fn graph_on(op: Op, inputs: &[Tensor], outputs: usize) -> Graph {
    let mut g = Graph::new();
    let ids: Vec<_> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| g.placeholder(&format!("a{i}"), t.meta()))
        .collect();
    let refs: Vec<_> = ids.iter().collect();
    let out = g.call_function(op, &refs).unwrap();
    if outputs == 1 {
        g.output(&[&out]).unwrap();
    } else {
        let items: Vec<_> = (0..outputs).map(|i| g.getitem(&out, i).unwrap()).collect();
        let refs: Vec<_> = items.iter().collect();
        g.output(&refs).unwrap();
    }
    g
}

/// `op` on `inputs` lowered for their layouts, with no fallback; each kernel assembled by
/// `ptxas` for sm_80 and sm_90 when `TESSERA_PTXAS` names it.
pub fn lowered(op: Op, inputs: &[Tensor], outputs: usize) -> Program {
    lowered_with(op, inputs, outputs, LowerOptions::default())
}

/// [`lowered`] with `options` (product kernels, as a device's compiled programs and the int8
/// linears of CUDA tensors ask).
pub fn lowered_with(op: Op, inputs: &[Tensor], outputs: usize, options: LowerOptions) -> Program {
    let layouts: Vec<_> = inputs.iter().map(|t| t.layout()).collect();
    let program = lower_with(&graph_on(op, inputs, outputs), &layouts, options).unwrap();
    assert!(program.fallbacks.is_empty(), "{program}");
    if let Some(ptxas) = ptxas() {
        for k in program.kernels() {
            let rendered = render(k, &PtxTarget::SM80).unwrap();
            assemble(&ptxas, &rendered.name, &rendered.ptx, &[80, 90]);
        }
    }
    program
}

/// `op` applied to placeholders of `shapes`, of `dtype`.
pub fn op_graph(op: Op, dtype: DType, shapes: &[&[usize]]) -> Graph {
    let mut g = Graph::new();
    let inputs: Vec<_> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| g.placeholder(&format!("x{i}"), TensorMeta::new(s.to_vec(), dtype)))
        .collect();
    let refs: Vec<_> = inputs.iter().collect();
    let out = g.call_function(op, &refs).unwrap();
    g.output(&[&out]).unwrap();
    g
}

/// A reduction `kind` over the last dim of a `[rows, n]` input.
pub fn reduce_graph(kind: ReduceKind, dtype: DType, rows: usize, n: usize) -> Graph {
    op_graph(
        Op::Reduce(ReduceOp {
            kind,
            dims: vec![1],
            keepdim: false,
        }),
        dtype,
        &[&[rows, n]],
    )
}

/// Layer norm of the last dim of `[rows, n]` with weight and bias.
pub fn layer_norm_graph(dtype: DType, rows: usize, n: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([rows, n], dtype));
    let w = g.placeholder("w", TensorMeta::new([n], dtype));
    let b = g.placeholder("b", TensorMeta::new([n], dtype));
    let norm = g
        .call_function(
            Op::Norm(NormOp::LayerNorm {
                normalized_ndim: 1,
                eps: 1e-5,
                weight: true,
                bias: true,
            }),
            &[&x, &w, &b],
        )
        .unwrap();
    let y = g.getitem(&norm, 0).unwrap();
    g.output(&[&y]).unwrap();
    g
}

/// Where ptxas is, from `TESSERA_PTXAS`; `None` (with a printed line) when unset, unless
/// `TESSERA_REQUIRE_PTXAS=1`, which makes its absence a failure.
pub fn ptxas() -> Option<String> {
    match std::env::var("TESSERA_PTXAS") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            assert!(
                std::env::var("TESSERA_REQUIRE_PTXAS").as_deref() != Ok("1"),
                "TESSERA_REQUIRE_PTXAS=1 but TESSERA_PTXAS is not set"
            );
            println!("skipped: TESSERA_PTXAS is not set (path to ptxas)");
            None
        }
    }
}

/// Assembles `ptx` with `ptxas -arch=sm_NN` for each architecture (the architectures at once);
/// panics with ptxas' message and the numbered text when it rejects it. An acceptance is
/// recorded as a marker file under the build's test scratch folder, named by a hash of the
/// text, the architecture and the ptxas binary (path, size, modification time): a kernel that
/// several tests or test binaries render (the same op at one shape, a keepdim variant) is
/// assembled once per build, and any change of the text assembles it again.
pub fn assemble(ptxas: &str, name: &str, ptx: &str, archs: &[u32]) {
    let accepted = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ptxas-accepted");
    std::fs::create_dir_all(&accepted).unwrap();
    let binary = std::fs::metadata(ptxas)
        .and_then(|m| Ok((m.len(), m.modified()?)))
        .unwrap_or_else(|e| panic!("reading {ptxas}: {e}"));
    let marker = |arch: u32| {
        let mut hasher = DefaultHasher::new();
        (ptxas, binary, arch, ptx).hash(&mut hasher);
        accepted.join(format!("{:016x}", hasher.finish()))
    };
    let pending: Vec<u32> = archs
        .iter()
        .copied()
        .filter(|&arch| !marker(arch).exists())
        .collect();
    if pending.is_empty() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.ptx"));
    std::fs::write(&path, ptx).unwrap();
    let runs: Vec<_> = pending
        .iter()
        .map(|arch| {
            let child = Command::new(ptxas)
                .arg(format!("-arch=sm_{arch}"))
                .arg(&path)
                .arg("-o")
                .arg(dir.path().join(format!("{name}.sm_{arch}.cubin")))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap_or_else(|e| panic!("running {ptxas}: {e}"));
            (*arch, child)
        })
        .collect();
    for (arch, child) in runs {
        let out = child
            .wait_with_output()
            .unwrap_or_else(|e| panic!("running {ptxas}: {e}"));
        if !out.status.success() {
            let numbered: Vec<String> = ptx
                .lines()
                .enumerate()
                .map(|(i, l)| format!("{:4} {l}", i + 1))
                .collect();
            panic!(
                "ptxas -arch=sm_{arch} rejected {name}:\n{}{}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                numbered.join("\n")
            );
        }
        std::fs::write(marker(arch), name).unwrap();
    }
}

/// One graph per elementwise op of the lowering table (unary, binary with a broadcast operand,
/// scalar, compare + where, clamp, dtype conversion), named.
pub fn elementwise_graphs(dtype: DType) -> Vec<(String, Graph)> {
    let shape: &[usize] = &[3, 37];
    let mut out = Vec::new();
    for u in UnaryOp::EVERY {
        out.push((format!("{u:?}"), op_graph(Op::Unary(u), dtype, &[shape])));
    }
    for b in BinaryOp::EVERY {
        // The second operand broadcast along the rows.
        out.push((
            format!("{b:?}"),
            op_graph(Op::Binary(b), dtype, &[shape, &[37]]),
        ));
        out.push((
            format!("{b:?} scalar"),
            op_graph(
                Op::Scalar(ScalarOp {
                    op: b,
                    value: 1.5,
                    reversed: true,
                }),
                dtype,
                &[shape],
            ),
        ));
    }
    for c in CompareOp::EVERY {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new(shape.to_vec(), dtype));
        let y = g.placeholder("y", TensorMeta::new(shape.to_vec(), dtype));
        let cond = g.call_function(Op::Compare(c), &[&x, &y]).unwrap();
        let w = g.call_function(Op::Where, &[&cond, &x, &y]).unwrap();
        g.output(&[&w]).unwrap();
        out.push((format!("{c:?} where"), g));
    }
    out.push((
        "clamp".into(),
        op_graph(
            Op::Clamp {
                min: Some(-0.5),
                max: Some(0.5),
            },
            dtype,
            &[shape],
        ),
    ));
    let other = if dtype == DType::F32 {
        DType::F64
    } else {
        DType::F32
    };
    out.push((
        "to_dtype".into(),
        op_graph(Op::ToDType(other), dtype, &[shape]),
    ));
    out
}

/// The reductions of the lowering (sum, mean, amax, amin, var, std, logsumexp, softmax,
/// log-softmax, layer norm, RMS norm) over rows of 300, named.
pub fn reduction_graphs(dtype: DType) -> Vec<(String, Graph)> {
    let kinds = [
        ReduceKind::Sum,
        ReduceKind::Mean,
        ReduceKind::Amax,
        ReduceKind::Amin,
        ReduceKind::Var { correction: 1 },
        ReduceKind::Std { correction: 0 },
        ReduceKind::LogSumExp,
    ];
    let mut out: Vec<(String, Graph)> = kinds
        .iter()
        .map(|&k| (format!("{k:?}"), reduce_graph(k, dtype, 4, 300)))
        .collect();
    for log in [false, true] {
        let g = op_graph(Op::Softmax { dim: 1, log }, dtype, &[&[4, 300]]);
        out.push((format!("softmax log={log}"), g));
    }
    out.push(("layer norm".into(), layer_norm_graph(dtype, 4, 300)));
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([4, 300], dtype));
    let rms = Op::Norm(NormOp::RmsNorm {
        normalized_ndim: 1,
        eps: 1e-5,
        weight: false,
    });
    let norm = g.call_function(rms, &[&x]).unwrap();
    let y = g.getitem(&norm, 0).unwrap();
    g.output(&[&y]).unwrap();
    out.push(("rms norm".into(), g));
    // A reduction over the leading dim (strided reads) and over two dims.
    let lead = op_graph(
        Op::Reduce(ReduceOp {
            kind: ReduceKind::Sum,
            dims: vec![0],
            keepdim: true,
        }),
        dtype,
        &[&[7, 6]],
    );
    out.push(("sum over dim 0".into(), lead));
    let two = op_graph(
        Op::Reduce(ReduceOp {
            kind: ReduceKind::Amax,
            dims: vec![0, 2],
            keepdim: false,
        }),
        dtype,
        &[&[3, 5, 7]],
    );
    out.push(("amax over dims 0 and 2".into(), two));
    out
}

/// Kernels whose index arithmetic is not a plain row-major walk: transposed and narrowed
/// views, broadcasts along several dims, a rank-0 output and an empty one.
pub fn layout_graphs() -> Vec<(String, Graph)> {
    let mut out = Vec::new();
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([3, 4, 5], DType::F64));
    let t = g
        .call_function(Op::View(ViewOp::Permute(vec![2, 0, 1])), &[&x])
        .unwrap();
    let n = g
        .call_function(
            Op::View(ViewOp::Narrow {
                dim: 0,
                start: 1,
                len: 3,
            }),
            &[&t],
        )
        .unwrap();
    let s = g.call_function(Op::Unary(UnaryOp::Sin), &[&n]).unwrap();
    g.output(&[&s]).unwrap();
    out.push(("permute narrow sin".into(), g));
    out.push((
        "broadcast both ways".into(),
        op_graph(
            Op::Binary(BinaryOp::Mul),
            DType::F32,
            &[&[3, 1, 5], &[4, 1]],
        ),
    ));
    out.push((
        "rank 0".into(),
        op_graph(Op::Unary(UnaryOp::Tanh), DType::F32, &[&[]]),
    ));
    out.push((
        "empty".into(),
        op_graph(Op::Unary(UnaryOp::Exp), DType::F32, &[&[0, 3]]),
    ));
    out
}

/// Graphs whose lowering calls the GEMM or the convolution with a fused epilogue: linear with
/// bias and relu (2-D and 3-D input), a matmul of transposed operands plus a residual, SGD
/// and Adam updates of the parameter whose gradient the matmul computes (multi-output
/// epilogues), and convolutions (3x3 padded, 1x1, 7x7 stride 2, dilated, grouped), named.
pub fn gemm_graphs(dtype: DType) -> Vec<(String, Graph)> {
    use tessera_tensor::op::{ConvOp, ConvParams};
    let mut out: Vec<(String, Graph)> = fused_update_graphs(dtype)
        .into_iter()
        .map(|(what, g, _)| (what, g))
        .collect();
    for x_shape in [vec![33, 20], vec![2, 5, 20]] {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new(x_shape.clone(), dtype));
        let w = g.placeholder("w", TensorMeta::new([7, 20], dtype));
        let b = g.placeholder("b", TensorMeta::new([7], dtype));
        let y = g
            .call_function(Op::Linear { bias: true }, &[&x, &w, &b])
            .unwrap();
        let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&y]).unwrap();
        g.output(&[&r]).unwrap();
        out.push((format!("linear {x_shape:?} relu"), g));
    }
    let mut g = Graph::new();
    let xt = g.placeholder("xt", TensorMeta::new([16, 9], dtype));
    let w = g.placeholder("w", TensorMeta::new([16, 5], dtype));
    let r = g.placeholder("r", TensorMeta::new([9, 5], dtype));
    let x = g
        .call_function(Op::View(ViewOp::Permute(vec![1, 0])), &[&xt])
        .unwrap();
    let y = g.call_function(Op::Matmul, &[&x, &w]).unwrap();
    let s = g
        .call_function(Op::Binary(BinaryOp::Add), &[&y, &r])
        .unwrap();
    g.output(&[&s]).unwrap();
    out.push(("x^T @ w + r".into(), g));
    let convs = [
        (
            "3x3",
            [2, 3, 7, 6],
            [5, 3, 3, 3],
            ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
        ),
        (
            "1x1",
            [1, 8, 5, 5],
            [7, 8, 1, 1],
            ConvParams::conv2d([1, 1], [0, 0], [1, 1], 1),
        ),
        (
            "7x7/2",
            [1, 3, 11, 10],
            [6, 3, 7, 7],
            ConvParams::conv2d([2, 2], [3, 3], [1, 1], 1),
        ),
        (
            "dilated",
            [1, 4, 9, 9],
            [3, 4, 3, 3],
            ConvParams::conv2d([1, 1], [2, 2], [2, 2], 1),
        ),
        (
            "groups 2",
            [2, 4, 6, 5],
            [6, 2, 3, 3],
            ConvParams::conv2d([1, 1], [1, 1], [1, 1], 2),
        ),
    ];
    for (what, x_shape, w_shape, params) in convs {
        let mut g = Graph::new();
        let x = g.placeholder("x", TensorMeta::new(x_shape, dtype));
        let w = g.placeholder("w", TensorMeta::new(w_shape, dtype));
        let b = g.placeholder("b", TensorMeta::new([w_shape[0]], dtype));
        let c = g
            .call_function(
                Op::Conv(ConvOp::Forward { params, bias: true }),
                &[&x, &w, &b],
            )
            .unwrap();
        let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&c]).unwrap();
        g.output(&[&r]).unwrap();
        out.push((format!("conv {what} relu"), g));
    }
    out
}

/// An SGD (nesterov momentum, weight decay) and an Adam (AMSGrad, decoupled weight decay)
/// update of a `[9, 7]` parameter of `dtype` whose gradient is `a^T @ x` over 11 rows: the
/// update is the GEMM kernel's epilogue. Named, with inputs (the second moments
/// non-negative).
pub fn fused_update_graphs(dtype: DType) -> Vec<(String, Graph, Vec<tessera_tensor::Tensor>)> {
    use tessera_testkit::update_cases::{GemmUpdate, gemm_update, sgd_momentum};
    let shape = GemmUpdate {
        rows: 9,
        cols: 7,
        k: 11,
    };
    let adam = tessera_tensor::op::OptimOp::AdamUpdate {
        beta1: 0.9,
        beta2: 0.999,
        eps: 1e-8,
        weight_decay: 0.01,
        amsgrad: true,
        maximize: false,
        decoupled_weight_decay: true,
    };
    let (sgd, sgd_inputs) = gemm_update(&sgd_momentum(), shape, dtype, (1, 1), false);
    let (adam, adam_inputs) = gemm_update(&adam, shape, dtype, (3, 3), false);
    vec![
        ("sgd of a^T @ x".into(), sgd, sgd_inputs),
        ("adam of a^T @ x".into(), adam, adam_inputs),
    ]
}
