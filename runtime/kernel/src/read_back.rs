//! Computing a transcendental once when two sweeps of a reduction kernel need it: softmax's
//! last sweep stores `exp(x - max) / sum`, whose `exp(x - max)` the sweep before computed for
//! the sum. Here that earlier sweep also stores the shared value into the last store's own
//! buffer, at the last store's index, and the last sweep *reads it back* (a load of an output
//! buffer, see [`Kernel::read_back_source`]) instead of evaluating it again, so the last sweep
//! becomes a scaling pass over values still in cache. A kernel changes only when this is
//! exact: the buffer holds the shared value's type (no rounding through a half type), the
//! index gives every point of the nest its own element, and nothing else writes the buffer.
//! What it leaves alone: values that are cheap to recompute (no transcendental), kernels with
//! one sweep, and last-sweep stores that share no transcendental with an earlier sweep.

use crate::kernel::operands_mut;
use crate::{Expr, IndexExpr, Kernel, Stages, Store, Value, ValueId, operands};

/// Rewrites `kernel` so that each last-sweep store shares no transcendental with an earlier
/// sweep (see the module doc); returns whether it changed.
pub fn read_back_shared_values(kernel: &mut Kernel) -> bool {
    let stages = Stages::of(kernel);
    let Some(last) = stages.sweeps.checked_sub(1).filter(|&l| l > 0) else {
        return false;
    };
    let earlier: Vec<bool> = {
        let mut seen = vec![false; kernel.values.len()];
        for v in stages.sweep_values[..last].iter().flatten() {
            seen[v.index()] = true;
        }
        seen
    };
    let costly = costly_values(kernel);
    for &s in &stages.sweep_stores[last] {
        let store = kernel.stores[s].clone();
        let writers = kernel
            .stores
            .iter()
            .filter(|t| t.buffer == store.buffer)
            .count();
        if writers != 1 || !injective(&store.index, &kernel.extents()) {
            continue;
        }
        let cone = cone_of(kernel, store.value);
        // The shared transcendentals the store needs, and of those the ones no other one
        // feeds: what the earlier sweep hands over.
        let shared: Vec<ValueId> = (0..kernel.values.len())
            .filter(|&i| {
                cone[i] && earlier[i] && costly[i] && stages.is_inner(ValueId::from_index(i))
            })
            .map(ValueId::from_index)
            .collect();
        let handed: Vec<ValueId> = shared
            .iter()
            .copied()
            .filter(|&u| {
                !shared
                    .iter()
                    .any(|&w| w != u && cone_of(kernel, w)[u.index()])
            })
            .collect();
        let [u] = handed.as_slice() else {
            continue;
        };
        let ty = kernel.value(*u).ty;
        if kernel.buffer(store.buffer).ty != ty {
            continue;
        }
        // The earlier sweep stores `u`; the last one loads it and rebuilds what used it.
        kernel.stores.push(Store {
            buffer: store.buffer,
            index: store.index.clone(),
            value: *u,
        });
        let loaded = push(
            kernel,
            Value {
                ty,
                expr: Expr::Load {
                    buffer: store.buffer,
                    index: store.index.clone(),
                },
            },
        );
        let mut rebuilt: Vec<Option<ValueId>> = vec![None; kernel.values.len()];
        rebuilt[u.index()] = Some(loaded);
        let value = rebuild(kernel, &stages, store.value, &mut rebuilt);
        kernel.stores[s].value = value;
        // The stages above describe the kernel before this change: one rewrite per kernel.
        kernel.drop_dead_values();
        return true;
    }
    false
}

/// Per value, whether computing it evaluates a transcendental function.
fn costly_values(kernel: &Kernel) -> Vec<bool> {
    let mut costly = vec![false; kernel.values.len()];
    for (i, v) in kernel.values.iter().enumerate() {
        costly[i] = matches!(v.expr, Expr::Unary(f, _) if f.is_transcendental())
            || operands(&v.expr)
                .iter()
                .any(|o| o.index() < i && costly[o.index()]);
    }
    costly
}

/// Per value, whether `root` uses it (directly or not); `root` itself included.
fn cone_of(kernel: &Kernel, root: ValueId) -> Vec<bool> {
    let mut cone = vec![false; kernel.values.len()];
    cone[root.index()] = true;
    for i in (0..=root.index()).rev() {
        if cone[i] {
            for o in operands(&kernel.values[i].expr) {
                cone[o.index()] = true;
            }
        }
    }
    cone
}

/// `v` with the replacements in `rebuilt` made in its inner operands (new values appended,
/// in operand order, so operands still precede their users).
fn rebuild(
    kernel: &mut Kernel,
    stages: &Stages,
    v: ValueId,
    rebuilt: &mut Vec<Option<ValueId>>,
) -> ValueId {
    if let Some(done) = rebuilt.get(v.index()).copied().flatten() {
        return done;
    }
    // Outer values (the reductions among them) are computed once per output point, by the
    // sweeps before: they stay.
    if !stages.is_inner(v) {
        return v;
    }
    let old = kernel.value(v).clone();
    let mut expr = old.expr.clone();
    let mut any = false;
    for o in operands_mut(&mut expr) {
        let new = rebuild(kernel, stages, *o, rebuilt);
        any |= new != *o;
        *o = new;
    }
    let id = if any {
        push(kernel, Value { ty: old.ty, expr })
    } else {
        v
    };
    if rebuilt.len() <= v.index() {
        rebuilt.resize(v.index() + 1, None);
    }
    rebuilt[v.index()] = Some(id);
    id
}

fn push(kernel: &mut Kernel, value: Value) -> ValueId {
    kernel.values.push(value);
    ValueId::from_index(kernel.values.len() - 1)
}

/// Whether `index` gives each point of the nest `extents` its own element: sorted by stride,
/// every loop that moves steps past everything the loops inside it reach.
pub fn injective(index: &IndexExpr, extents: &[usize]) -> bool {
    if extents.contains(&0) || index.strides.len() != extents.len() {
        return false;
    }
    let mut moving: Vec<(usize, usize)> = index
        .strides
        .iter()
        .zip(extents)
        .filter(|(_, n)| **n > 1)
        .map(|(s, n)| (*s, *n))
        .collect();
    moving.sort_unstable();
    let mut span = 1;
    for (stride, n) in moving {
        if stride < span {
            return false;
        }
        span += stride * (n - 1);
    }
    true
}
