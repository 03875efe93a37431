//! Scheduling a kernel after lowering: loops every access walks as one are merged (so a
//! contiguous elementwise kernel is one long loop), loops of extent 1 are dropped, and the
//! vector width and unroll are chosen. None of this changes what the kernel computes.

use crate::{Expr, Kernel, ScalarType, Schedule};

/// f32 lanes of the vectors backends emit (128-bit, the widest cranelift lowers on x86).
pub const F32_LANES: usize = 4;
/// Vectors per iteration of a vectorised innermost loop.
pub const UNROLL: usize = 4;

/// Simplifies `kernel`'s nest and picks its schedule.
pub fn schedule(kernel: &mut Kernel) {
    coalesce_loops(kernel);
    kernel.schedule = choose(kernel);
}

/// Every index expression of `kernel`, mutably.
fn indices_mut(kernel: &mut Kernel) -> Vec<&mut crate::IndexExpr> {
    let loads = kernel.values.iter_mut().filter_map(|v| match &mut v.expr {
        Expr::Load { index, .. } => Some(index),
        _ => None,
    });
    loads
        .chain(kernel.stores.iter_mut().map(|s| &mut s.index))
        .collect()
}

/// Drops loops of extent 1, and merges loop `l` into loop `l + 1` wherever every access has
/// `stride[l] == stride[l + 1] * extent[l + 1]`. An empty nest (some extent 0) becomes the
/// single loop `i0 < 0`.
fn coalesce_loops(kernel: &mut Kernel) {
    if kernel.domain.contains(&0) {
        kernel.domain = vec![0];
        for index in indices_mut(kernel) {
            index.strides = vec![0];
        }
        return;
    }
    let keep: Vec<usize> = (0..kernel.domain.len())
        .filter(|&l| kernel.domain[l] != 1)
        .collect();
    let mut domain: Vec<usize> = keep.iter().map(|&l| kernel.domain[l]).collect();
    let mut indices = indices_mut(kernel);
    for index in indices.iter_mut() {
        index.strides = keep.iter().map(|&l| index.strides[l]).collect();
    }
    let mut l = domain.len();
    while l > 1 {
        l -= 1;
        let inner = domain[l];
        let mergeable = indices
            .iter()
            .all(|ix| ix.strides[l - 1] == ix.strides[l] * inner);
        if mergeable {
            domain[l - 1] *= inner;
            domain.remove(l);
            for ix in indices.iter_mut() {
                ix.strides.remove(l - 1);
            }
        }
    }
    kernel.domain = domain;
}

/// F32X4 vectors unrolled 4 times along the innermost loop when every value is f32 (or a
/// comparison of f32s), every load walks it with stride 0 or 1 and every store with stride 1;
/// scalar code otherwise.
fn choose(kernel: &Kernel) -> Schedule {
    let Some(&inner) = kernel.domain.last() else {
        return Schedule::SCALAR;
    };
    let all_f32 = kernel.values.iter().all(|v| v.ty != ScalarType::F64)
        && kernel.buffers.iter().all(|b| b.ty == ScalarType::F32);
    let last = kernel.domain.len() - 1;
    let loads_ok = kernel.values.iter().all(|v| match &v.expr {
        Expr::Load { index, .. } => index.strides[last] <= 1,
        _ => true,
    });
    let stores_ok = kernel.stores.iter().all(|s| s.index.strides[last] == 1);
    if all_f32 && loads_ok && stores_ok && inner >= F32_LANES {
        Schedule {
            vector_width: F32_LANES,
            unroll: UNROLL,
            parallel: None,
        }
    } else {
        Schedule::SCALAR
    }
}
