//! Scheduling a kernel after lowering: loops every access walks as one are merged (so a
//! contiguous elementwise kernel is one long loop), loops of extent 1 are dropped, and the
//! vector width and unroll are chosen, and whether the outermost loop is split across
//! threads. None of this changes what the kernel computes.

use crate::{Expr, Kernel, LoopId, ScalarType, Schedule, ValueId};

/// f32 lanes of the vectors backends emit (128-bit, the widest cranelift lowers on x86).
pub const F32_LANES: usize = 4;
/// Vectors per iteration of a vectorised innermost loop.
pub const UNROLL: usize = 4;
/// The largest stride (in elements) along the vectorised loop at which a load still gathers
/// its lanes; beyond it the kernel stays scalar.
pub const MAX_GATHER_STRIDE: usize = 1 << 24;
/// Work (points of the nest times values computed per point) from which a kernel's outermost
/// loop is split across threads: below it, waking and joining a thread (a few microseconds)
/// costs more than it saves.
pub const PARALLEL_MIN_WORK: usize = 1 << 18;

/// Simplifies `kernel`'s nest and picks its schedule.
pub fn schedule(kernel: &mut Kernel) {
    // A GEMM or convolution kernel's call fills blocks of its outermost loop: its nest stays.
    // A loop index value names its loop: a kernel reading one keeps its nest too.
    let loop_index = kernel
        .values
        .iter()
        .any(|v| matches!(v.expr, Expr::LoopIndex(_)));
    if kernel.gemm.is_none() && kernel.conv.is_none() && !loop_index {
        coalesce_loops(kernel);
    }
    kernel.schedule = Schedule {
        parallel: parallel_loop(kernel),
        ..choose(kernel)
    };
}

/// The outermost loop, when the kernel has enough work to share and its iterations write
/// disjoint outputs: every output loop does (a store's index is one element per point of
/// the output loops). A GEMM kernel's rows are shared out when
/// [`crate::gemm::gemm_splits`]: each share calls the GEMM on its own rows on one thread and
/// runs the epilogue on them while they are in cache; a convolution kernel's runner
/// convolves each block of images first, then splits the block.
fn parallel_loop(kernel: &Kernel) -> Option<LoopId> {
    if kernel.domain.first().is_none_or(|&n| n < 2) {
        return None;
    }
    if let (Some(g), Some((m, n, _))) = (&kernel.gemm, kernel.gemm_shape()) {
        return crate::gemm::gemm_splits(m, n, g.k).then_some(LoopId(0));
    }
    let points = kernel.extents().iter().product::<usize>();
    let work = points.saturating_mul(kernel.values.len().max(1));
    (work >= PARALLEL_MIN_WORK).then_some(LoopId(0))
}

/// Every index expression of `kernel`, mutably.
fn indices_mut(kernel: &mut Kernel) -> Vec<&mut crate::IndexExpr> {
    let loads = kernel.values.iter_mut().flat_map(|v| match &mut v.expr {
        Expr::Load { index, .. } | Expr::Gather { index, .. } => vec![index],
        // A guarded load's coordinates are indices of the nest too.
        Expr::LoadIf { index, bounds, .. } => std::iter::once(index)
            .chain(bounds.iter_mut().map(|b| &mut b.coord))
            .collect(),
        _ => vec![],
    });
    loads
        .chain(kernel.stores.iter_mut().map(|s| &mut s.index))
        .collect()
}

/// Drops loops of extent 1 but the outermost output loop (a batch of one keeps the loops of
/// any other batch, see [`Kernel::code_difference`]), and merges loop `l` into loop `l + 1` wherever every access has
/// `stride[l] == stride[l + 1] * extent[l + 1]`, within the output loops and within the
/// reduction loops (never across; one reduction loop always stays). An empty elementwise nest
/// (some extent 0) becomes the single loop `i0 < 0`; an empty reduction nest is left as is.
fn coalesce_loops(kernel: &mut Kernel) {
    if kernel.extents().contains(&0) {
        if kernel.reduce.is_empty() {
            kernel.domain = vec![0];
            for index in indices_mut(kernel) {
                index.strides = vec![0];
            }
        }
        return;
    }
    let outer = kernel.domain.len();
    let (domain, reduce) = (kernel.domain.clone(), kernel.reduce.clone());
    let mut indices = indices_mut(kernel);
    let reduce = coalesce_group(&mut indices, outer, &reduce, UnitLoop::LastOfAllUnit);
    let domain = coalesce_group(&mut indices, 0, &domain, UnitLoop::Outermost);
    kernel.domain = domain;
    kernel.reduce = reduce;
}

/// Which loop of extent 1 a group keeps.
#[derive(Clone, Copy, PartialEq, Eq)]
enum UnitLoop {
    /// The last one, when every loop of the group has extent 1.
    LastOfAllUnit,
    /// The outermost one, always.
    Outermost,
}

/// Coalesces the loops `first..first + extents.len()` of every index; returns their new
/// extents. Loops of extent 1 are dropped, except the one `unit` keeps.
fn coalesce_group(
    indices: &mut [&mut crate::IndexExpr],
    first: usize,
    extents: &[usize],
    unit: UnitLoop,
) -> Vec<usize> {
    let mut keep: Vec<usize> = (0..extents.len())
        .filter(|&l| extents[l] != 1 || (l == 0 && unit == UnitLoop::Outermost))
        .collect();
    if keep.is_empty() && unit == UnitLoop::LastOfAllUnit && !extents.is_empty() {
        keep.push(extents.len() - 1);
    }
    for index in indices.iter_mut() {
        for l in (0..extents.len()).rev().filter(|l| !keep.contains(l)) {
            index.strides.remove(first + l);
        }
    }
    let mut group: Vec<usize> = keep.iter().map(|&l| extents[l]).collect();
    let mut l = group.len();
    while l > 1 {
        l -= 1;
        let inner = group[l];
        let mergeable = indices
            .iter()
            .all(|ix| ix.strides[first + l - 1] == ix.strides[first + l] * inner);
        if mergeable {
            group[l - 1] *= inner;
            group.remove(l);
            for ix in indices.iter_mut() {
                ix.strides.remove(first + l - 1);
            }
        }
    }
    group
}

/// Per value of `kernel`, whether it is a loop index that vector code may hold as f32 lanes
/// (the innermost loop's consecutive indices, another loop's index in every lane): one read
/// only by casts to f32, of a loop of at most 2^24 iterations (so every index is an exact
/// f32).
fn lane_indices(kernel: &Kernel) -> Vec<bool> {
    let extents = kernel.extents();
    let mut as_f32: Vec<bool> = kernel
        .values
        .iter()
        .map(|v| match v.expr {
            Expr::LoopIndex(l) => extents.get(l.index()).is_some_and(|&n| n <= 1 << 24),
            _ => false,
        })
        .collect();
    for v in &kernel.values {
        if !(matches!(v.expr, Expr::Cast(_)) && v.ty == ScalarType::F32) {
            for x in crate::operands(&v.expr) {
                as_f32[x.index()] = false;
            }
        }
    }
    for s in &kernel.stores {
        as_f32[s.value.index()] = false;
    }
    as_f32
}

/// F32X4 vectors unrolled 4 times along the innermost loop (the innermost reduction loop of a
/// reduction kernel) when every value computed per point of it is f32 (or a comparison of
/// f32s) and reads no f64 (an elementwise kernel's values computed once before the loop may
/// be f64, see [`crate::hoisted_values`]; its loop indices may be read as f32, see
/// [`lane_indices`]), every load walks it
/// with a stride of at most [`MAX_GATHER_STRIDE`] (strided ones gathering their lanes) and
/// every store inside it with stride 1; scalar code otherwise (always with an arg reduction,
/// whose positions are counted point by point).
fn choose(kernel: &Kernel) -> Schedule {
    let extents = kernel.extents();
    let Some(&inner) = extents.last() else {
        return Schedule::SCALAR;
    };
    let arg = |v: &crate::Value| matches!(v.expr, Expr::Reduce(f, _) if f.is_arg());
    if kernel.values.iter().any(arg) {
        return Schedule::SCALAR;
    }
    let stages = crate::Stages::of(kernel);
    // A reduction kernel computes its outer values once per output point, in scalar code: they
    // may be f64 (an eval batch norm's affine) where no vector value reads them.
    // Likewise an elementwise kernel's hoisted values (computed once per run of its innermost
    // loop): they may be f64 when every value computed per point is f32 (a hoisted operand is
    // splatted) and none is stored. Vector code holds f32 lanes and bool masks: other f64 and
    // every i64 value stays scalar, but a loop index read only as f32 (its casts), which is
    // the lanes' indices as f32s ([`lane_indices`]).
    let hoisted = crate::hoisted_values(kernel);
    let lanes = lane_indices(kernel);
    let wide = |v: &ValueId| {
        let ty = kernel.value(*v).ty;
        ty == ScalarType::F64 || ty.is_integer()
    };
    let all_f32 = kernel.values.iter().enumerate().all(|(i, v)| {
        let id = ValueId::from_index(i);
        let lane_index = |v: &crate::Value| match v.expr {
            Expr::LoopIndex(_) => lanes[i],
            Expr::Cast(x) => v.ty == ScalarType::F32 && lanes[x.index()],
            _ => false,
        };
        (!kernel.reduce.is_empty() && !stages.is_inner(id))
            || (kernel.reduce.is_empty() && lane_index(v))
            || (hoisted[i] && !v.ty.is_integer() && kernel.stores.iter().all(|s| s.value != id))
            || (!wide(&id) && !crate::operands(&v.expr).iter().any(wide))
    }) && kernel.buffers.iter().all(|b| {
        b.ty == ScalarType::F32
            || (b.role == crate::BufferRole::Input
                && !(b.ty == ScalarType::Bool || b.ty.is_integer())
                && only_hoisted(kernel, b, &hoisted))
    });
    let last = extents.len() - 1;
    // Strided loads gather their lanes, at byte offsets a backend can give as immediates.
    let loads_ok = kernel.values.iter().all(|v| match &v.expr {
        Expr::Load { index, .. } => index.strides[last] <= MAX_GATHER_STRIDE,
        _ => true,
    });
    let stores_ok = kernel.stores.iter().enumerate().all(|(i, s)| {
        s.index.strides[last] == 1
            || (!kernel.reduce.is_empty() && stages.outer_stores.contains(&i))
    });
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

/// Whether every load of buffer `b` is a value invariant along the innermost loop.
fn only_hoisted(kernel: &Kernel, b: &crate::BufferParam, hoisted: &[bool]) -> bool {
    let at = kernel.buffers.iter().position(|p| std::ptr::eq(p, b));
    kernel
        .values
        .iter()
        .enumerate()
        .all(|(i, v)| match &v.expr {
            Expr::Load { buffer, .. } | Expr::LoadIf { buffer, .. }
                if Some(buffer.index()) == at =>
            {
                hoisted[i]
            }
            _ => true,
        })
}
