//! Helpers of the CUDA backend's tests: graphs of one op (or a chain) lowered to kernels, and
//! assembling PTX with `ptxas` when `TESSERA_PTXAS` names it.

#![allow(dead_code)]

use std::process::Command;
use tessera_fx::Graph;
use tessera_kernel::{Kernel, Program, lower};
use tessera_tensor::op::{NormOp, ReduceKind, ReduceOp};
use tessera_tensor::{DType, Op, TensorMeta};

/// The kernels of `graph` lowered for packed inputs; the lowering must not fall back.
pub fn kernels(graph: &Graph) -> Vec<Kernel> {
    let program: Program = lower(graph, &[]).unwrap();
    assert!(program.fallbacks.is_empty(), "fell back:\n{program}");
    program.kernels().cloned().collect()
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

/// Assembles `ptx` with `ptxas -arch=sm_NN` for each architecture; panics with ptxas' message
/// and the numbered text when it rejects it.
pub fn assemble(ptxas: &str, name: &str, ptx: &str, archs: &[u32]) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("{name}.ptx"));
    std::fs::write(&path, ptx).unwrap();
    for arch in archs {
        let out = Command::new(ptxas)
            .arg(format!("-arch=sm_{arch}"))
            .arg(&path)
            .arg("-o")
            .arg(dir.path().join(format!("{name}.cubin")))
            .output()
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
    }
}
