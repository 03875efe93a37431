//! Rendering a kernel with reduction loops, following its [`Stages`]: scalar output loops;
//! per output point, the outer values of pass 0, then one sweep of the reduction loops per
//! pass whose accumulators are cranelift variables (with a vector schedule, `unroll` F32X4
//! accumulators along the innermost reduction loop, folded lane by lane into the scalar one
//! that the tail accumulates into), then the outer values the sweep finished and, last, the
//! outer stores.

use crate::render::Renderer;
use cranelift_codegen::ir::condcodes::IntCC;
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
    scalar: Variable,
    vectors: Vec<Variable>,
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
            let init = constant(b, v.ty, f.identity());
            let scalar = b.declare_var(crate::render::clif_type(v.ty));
            b.def_var(scalar, init);
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
            })
        })
        .collect();
    let zero = b.ins().iconst(types::I64, 0);
    reduce_nest(r, b, stages, k, outer, &accs, 0, zero);
    accs.iter()
        .map(|a| {
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
            reduce_nest(r, b, stages, k, outer, accs, level + 1, zero);
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
                point(r, b, stages, k, outer, accs, j, 4, Some(u));
            }
        })
    } else {
        start
    };
    r.counted(b, tail, end, 1, &mut |r, b, j| {
        point(r, b, stages, k, outer, accs, j, 1, None);
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
}

/// `f(acc, x)` (scalars or vectors); max and min propagate NaN, as `fmax`/`fmin` do.
fn combine(b: &mut FunctionBuilder, f: ReduceFn, acc: Value, x: Value) -> Value {
    match f {
        ReduceFn::Sum => b.ins().fadd(acc, x),
        ReduceFn::Max => b.ins().fmax(acc, x),
        ReduceFn::Min => b.ins().fmin(acc, x),
    }
}

fn constant(b: &mut FunctionBuilder, ty: ScalarType, c: f64) -> Value {
    match ty {
        ScalarType::F64 => b.ins().f64const(c),
        _ => b.ins().f32const(c as f32),
    }
}
