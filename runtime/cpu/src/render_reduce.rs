//! Rendering a kernel with reduction loops, following its [`Stages`]: scalar output loops;
//! per output point, the outer values of pass 0, then one sweep of the reduction loops per
//! pass whose accumulators are cranelift variables (with a vector schedule, `unroll` F32X4
//! accumulators along the innermost reduction loop, folded lane by lane into the scalar one
//! that the tail accumulates into), then the outer values the sweep finished and, last, the
//! outer stores.

use crate::render::Renderer;
use cranelift_codegen::ir::condcodes::{FloatCC, IntCC};
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::{FunctionBuilder, Variable};
use tessera_kernel::{Expr, ReduceFn, ScalarType, Stages, ValueId};

/// Emits the whole kernel of `r` over outer iterations `begin..end`.
pub(crate) fn reduction(r: &mut Renderer, b: &mut FunctionBuilder, begin: Value, end: Value) {
    let stages = Stages::of(r.kernel);
    if r.kernel.domain.is_empty() {
        // No output loops: the body runs once when the caller asks for iteration 0.
        let go = b.create_block();
        let done = b.create_block();
        let nonempty = b.ins().icmp(IntCC::SignedLessThan, begin, end);
        b.ins().brif(nonempty, go, &[], done, &[]);
        b.switch_to_block(go);
        body(r, b, &stages);
        b.ins().jump(done, &[]);
        b.switch_to_block(done);
    } else {
        outer_nest(r, b, &stages, 0, begin, end);
    }
}

/// Output loop `level` and everything inside it; every output loop's index is pushed.
fn outer_nest(
    r: &mut Renderer,
    b: &mut FunctionBuilder,
    stages: &Stages,
    level: usize,
    start: Value,
    end: Value,
) {
    let last = r.kernel.domain.len() - 1;
    if level == last
        && let Some(columns) = crate::render_columns::ColumnReduction::of(r.kernel, stages)
    {
        columns.render(r, b, stages, start, end, &mut body);
        return;
    }
    r.counted(b, start, end, 1, &mut |r, b, i| {
        r.indices.push(i);
        if level < last {
            let zero = b.ins().iconst(types::I64, 0);
            let n = b
                .ins()
                .iconst(types::I64, r.kernel.domain[level + 1] as i64);
            outer_nest(r, b, stages, level + 1, zero, n);
        } else {
            body(r, b, stages);
        }
        r.indices.pop();
    });
}

/// The work of one output point.
fn body(r: &mut Renderer, b: &mut FunctionBuilder, stages: &Stages) {
    let kernel = r.kernel;
    let mut outer: Vec<Option<Value>> = vec![None; kernel.values.len()];
    let compute =
        |r: &Renderer, b: &mut FunctionBuilder, ids: &[ValueId], outer: &mut Vec<Option<Value>>| {
            for &v in ids {
                if outer[v.index()].is_none() {
                    outer[v.index()] = Some(r.eval(b, v, &[], outer, None, 1));
                }
            }
        };
    compute(r, b, &stages.outer_values[0], &mut outer);
    for k in 0..stages.sweeps {
        let finished = sweep(r, b, stages, k, &outer);
        for (id, value) in finished {
            outer[id.index()] = Some(value);
        }
        compute(r, b, &stages.outer_values[k + 1], &mut outer);
    }
    for &s in &stages.outer_stores {
        r.store(b, &kernel.stores[s], &[], &outer, None, 1);
    }
}

/// The accumulators of one reduction.
struct Accumulator {
    id: ValueId,
    f: ReduceFn,
    operand: ValueId,
    /// The value (an arg reduction's best value).
    scalar: Variable,
    vectors: Vec<Variable>,
    /// An arg reduction's position (its kernel has the scalar schedule).
    position: Option<Variable>,
}

/// Sweep `k` over the reduction loops; returns the reductions it finished.
fn sweep(
    r: &mut Renderer,
    b: &mut FunctionBuilder,
    stages: &Stages,
    k: usize,
    outer: &[Option<Value>],
) -> Vec<(ValueId, Value)> {
    let kernel = r.kernel;
    let s = kernel.schedule;
    let vector = s.vector_width == 4;
    let accs: Vec<Accumulator> = stages.sweep_reduces[k]
        .iter()
        .filter_map(|&id| {
            let v = kernel.value(id);
            let Expr::Reduce(f, operand) = v.expr else {
                return None;
            };
            // An arg reduction's value has its operand's type.
            let ty = if f.is_arg() {
                kernel.value(operand).ty
            } else {
                v.ty
            };
            let init = constant(b, ty, f.identity());
            let scalar = b.declare_var(crate::render::clif_type(ty));
            b.def_var(scalar, init);
            let position = f.is_arg().then(|| {
                let var = b.declare_var(types::I64);
                let none = b.ins().iconst(types::I64, tessera_kernel::ARG_NONE);
                b.def_var(var, none);
                var
            });
            let vectors = if vector {
                (0..s.unroll)
                    .map(|_| {
                        let var = b.declare_var(types::F32X4);
                        let splat = b.ins().splat(types::F32X4, init);
                        b.def_var(var, splat);
                        var
                    })
                    .collect()
            } else {
                Vec::new()
            };
            Some(Accumulator {
                id,
                f,
                operand,
                scalar,
                vectors,
                position,
            })
        })
        .collect();
    let zero = b.ins().iconst(types::I64, 0);
    // The row-major position of the reduction point, for arg reductions.
    let flat = b.declare_var(types::I64);
    b.def_var(flat, zero);
    reduce_nest(r, b, stages, k, outer, &accs, flat, 0, zero);
    accs.iter()
        .map(|a| {
            if let Some(position) = a.position {
                return (a.id, b.use_var(position));
            }
            let mut total = b.use_var(a.scalar);
            for &v in &a.vectors {
                let lanes = b.use_var(v);
                for lane in 0..4u8 {
                    let x = b.ins().extractlane(lanes, lane);
                    total = combine(b, a.f, total, x);
                }
            }
            (a.id, total)
        })
        .collect()
}

/// Reduction loop `level` (counted from the first reduction loop) of sweep `k`.
#[allow(clippy::too_many_arguments)]
fn reduce_nest(
    r: &mut Renderer,
    b: &mut FunctionBuilder,
    stages: &Stages,
    k: usize,
    outer: &[Option<Value>],
    accs: &[Accumulator],
    flat: Variable,
    level: usize,
    start: Value,
) {
    let kernel = r.kernel;
    let extent = kernel.reduce[level] as i64;
    let end = b.ins().iconst(types::I64, extent);
    if level + 1 < kernel.reduce.len() {
        r.counted(b, start, end, 1, &mut |r, b, i| {
            r.indices.push(i);
            let zero = b.ins().iconst(types::I64, 0);
            reduce_nest(r, b, stages, k, outer, accs, flat, level + 1, zero);
            r.indices.pop();
        });
        return;
    }
    let s = kernel.schedule;
    let tail = if s.vector_width == 4 {
        let step = (s.vector_width * s.unroll) as i64;
        r.counted(b, start, end, step, &mut |r, b, i| {
            for u in 0..s.unroll {
                let j = b.ins().iadd_imm_s(i, (u * s.vector_width) as i64);
                point(r, b, stages, k, outer, accs, flat, j, 4, Some(u));
            }
        })
    } else {
        start
    };
    r.counted(b, tail, end, 1, &mut |r, b, j| {
        point(r, b, stages, k, outer, accs, flat, j, 1, None);
    });
}

/// One point (`lanes` points) of sweep `k`: its inner values, accumulations and stores;
/// `vector` picks the unrolled vector accumulator, `None` the scalar one.
#[allow(clippy::too_many_arguments)]
fn point(
    r: &Renderer,
    b: &mut FunctionBuilder,
    stages: &Stages,
    k: usize,
    outer: &[Option<Value>],
    accs: &[Accumulator],
    flat: Variable,
    j: Value,
    lanes: usize,
    vector: Option<usize>,
) {
    let kernel = r.kernel;
    let mut vals: Vec<Option<Value>> = vec![None; kernel.values.len()];
    for &v in &stages.sweep_values[k] {
        vals[v.index()] = Some(r.eval(b, v, &vals, outer, Some(j), lanes));
    }
    for a in accs {
        let x = r.operand(b, a.operand, &vals, outer, lanes);
        if let Some(position) = a.position {
            let here = b.use_var(flat);
            arg_combine(b, a.f, a.scalar, position, x, here);
            continue;
        }
        let var = match vector {
            Some(u) => a.vectors[u],
            None => a.scalar,
        };
        let acc = b.use_var(var);
        let next = combine(b, a.f, acc, x);
        b.def_var(var, next);
    }
    for &s in &stages.sweep_stores[k] {
        r.store(b, &kernel.stores[s], &vals, outer, Some(j), lanes);
    }
    if accs.iter().any(|a| a.position.is_some()) {
        let here = b.use_var(flat);
        let next = b.ins().iadd_imm_s(here, lanes as i64);
        b.def_var(flat, next);
    }
}

/// Folds the candidate `x` at position `j` into the arg reduction (`best`, `position`) when
/// it replaces it ([`ReduceFn::replaces`]): more extreme, NaN where the best is not, or as
/// extreme at a lower position.
fn arg_combine(
    b: &mut FunctionBuilder,
    f: ReduceFn,
    best: Variable,
    position: Variable,
    x: Value,
    j: Value,
) {
    let (v, at) = (b.use_var(best), b.use_var(position));
    let lower = b.ins().icmp(IntCC::SignedLessThan, j, at);
    if b.func.dfg.value_type(x).is_int() {
        // Integers have no NaN: more extreme, or equal at a lower position.
        let more = if f.is_largest() {
            IntCC::SignedGreaterThan
        } else {
            IntCC::SignedLessThan
        };
        let more = b.ins().icmp(more, x, v);
        let equal = b.ins().icmp(IntCC::Equal, x, v);
        let tie = b.ins().band(equal, lower);
        let replaces = b.ins().bor(more, tie);
        let v = b.ins().select(replaces, x, v);
        let at = b.ins().select(replaces, j, at);
        b.def_var(best, v);
        b.def_var(position, at);
        return;
    }
    let more = if f.is_largest() {
        FloatCC::GreaterThan
    } else {
        FloatCC::LessThan
    };
    let more = b.ins().fcmp(more, x, v);
    let x_nan = b.ins().fcmp(FloatCC::Unordered, x, x);
    let v_nan = b.ins().fcmp(FloatCC::Unordered, v, v);
    let equal = b.ins().fcmp(FloatCC::Equal, x, v);
    let both_nan = b.ins().band(x_nan, v_nan);
    let same = b.ins().bor(equal, both_nan);
    let lower = b.ins().icmp(IntCC::SignedLessThan, j, at);
    let tie = b.ins().band(same, lower);
    let nan_wins = b.ins().band_not(x_nan, v_nan);
    let wins = b.ins().bor(more, nan_wins);
    let replaces = b.ins().bor(wins, tie);
    let v = b.ins().select(replaces, x, v);
    let at = b.ins().select(replaces, j, at);
    b.def_var(best, v);
    b.def_var(position, at);
}

/// `f(acc, x)` (scalars or vectors); max and min propagate NaN, as `fmax`/`fmin` do; i64
/// sums wrap, as the eager kernel's. (An arg reduction combines through [`arg_combine`].)
pub(crate) fn combine(b: &mut FunctionBuilder, f: ReduceFn, acc: Value, x: Value) -> Value {
    if b.func.dfg.value_type(acc).is_int() {
        return match f {
            ReduceFn::Sum => b.ins().iadd(acc, x),
            ReduceFn::Max | ReduceFn::ArgMax => b.ins().smax(acc, x),
            ReduceFn::Min | ReduceFn::ArgMin => b.ins().smin(acc, x),
        };
    }
    match f {
        ReduceFn::Sum => b.ins().fadd(acc, x),
        ReduceFn::Max | ReduceFn::ArgMax => b.ins().fmax(acc, x),
        ReduceFn::Min | ReduceFn::ArgMin => b.ins().fmin(acc, x),
    }
}

fn constant(b: &mut FunctionBuilder, ty: ScalarType, c: f64) -> Value {
    match ty {
        ScalarType::F64 => b.ins().f64const(c),
        // Saturating: an infinite identity is the type's extreme.
        ScalarType::I64 => b.ins().iconst(types::I64, c as i64),
        _ => b.ins().f32const(c as f32),
    }
}
