//! Rendering a column reduction (a bias gradient: `sum` of a `[rows, cols]` matrix over its
//! rows) across its output points: sixteen outputs at a time, four F32X4 accumulators, each
//! lane summing one output's column in order while the reduction loop reads rows with
//! contiguous vector loads. The generic reduction renderer vectorises along the reduction loop
//! instead, which for a column means gathering each lane from another row. Only kernels of the
//! simplest shape take this path ([`ColumnReduction::of`]); the output points left over after
//! the last group of sixteen run the generic body.

use crate::render::Renderer;
use cranelift_codegen::ir::{InstBuilder, Value, types};
use cranelift_frontend::FunctionBuilder;
use tessera_kernel::{Expr, Kernel, ReduceFn, ScalarType, Stages, ValueId};

/// Output points per group: four vectors of four lanes.
const GROUP: usize = 16;

/// A kernel with one sweep over its reduction loops whose values are f32 loads walking the
/// innermost output loop with stride 1 and f32 elementwise values of those and of constants
/// (computed once per group), whose reductions are f32, and whose values after the sweep are
/// f32 elementwise values of the reductions, stored at stride 1 along that loop.
pub(crate) struct ColumnReduction {
    /// The reductions (value, operand, function).
    reduces: Vec<(ValueId, ValueId, ReduceFn)>,
}

impl ColumnReduction {
    pub(crate) fn of(kernel: &Kernel, stages: &Stages) -> Option<ColumnReduction> {
        let inner_out = kernel.domain.len().checked_sub(1)?;
        let wide_enough = kernel.domain[inner_out] >= GROUP;
        let simple = kernel.gemm.is_none()
            && kernel.conv.is_none()
            && stages.sweeps == 1
            && stages.sweep_stores[0].is_empty()
            && stages.outer_values[0]
                .iter()
                .all(|&v| matches!(kernel.value(v).expr, Expr::Const(_)));
        if !wide_enough || !simple {
            return None;
        }
        let f32_ = |v: ValueId| kernel.value(v).ty == ScalarType::F32;
        for &v in &stages.sweep_values[0] {
            let ok = match &kernel.value(v).expr {
                Expr::Load { buffer, index } => {
                    f32_(v)
                        && kernel.buffers[buffer.index()].ty == ScalarType::F32
                        && index.strides[inner_out] == 1
                }
                Expr::Const(_) | Expr::Unary(..) | Expr::Binary(..) => f32_(v),
                _ => false,
            };
            if !ok {
                return None;
            }
        }
        let mut reduces = Vec::new();
        for &v in stages.sweep_reduces[0].iter() {
            let Expr::Reduce(f, operand) = kernel.value(v).expr else {
                return None;
            };
            if !f32_(v) || !f32_(operand) || f.is_arg() {
                return None;
            }
            reduces.push((v, operand, f));
        }
        // After the sweep: f32 elementwise values of the reductions (a mean's scaling), and
        // stores of f32 values at stride 1.
        let after_ok = stages.outer_values.iter().skip(1).flatten().all(|&v| {
            f32_(v)
                && match kernel.value(v).expr {
                    Expr::Reduce(..) => reduces.iter().any(|r| r.0 == v),
                    Expr::Const(_) | Expr::Unary(..) | Expr::Binary(..) => true,
                    _ => false,
                }
        });
        let stores_ok = stages.outer_stores.iter().all(|&s| {
            let store = &kernel.stores[s];
            f32_(store.value) && store.index.strides[inner_out] == 1
        });
        (after_ok && stores_ok && !reduces.is_empty()).then_some(ColumnReduction { reduces })
    }

    /// The innermost output loop over `start..end` (its outer loops' indices are pushed):
    /// groups of sixteen outputs, then `rest` for each point left over.
    pub(crate) fn render(
        &self,
        r: &mut Renderer,
        b: &mut FunctionBuilder,
        stages: &Stages,
        start: Value,
        end: Value,
        rest: &mut dyn FnMut(&mut Renderer, &mut FunctionBuilder, &Stages),
    ) {
        let tail = r.counted(b, start, end, GROUP as i64, &mut |r, b, i| {
            self.group(r, b, stages, i);
        });
        r.counted(b, tail, end, 1, &mut |r, b, i| {
            r.indices.push(i);
            rest(r, b, stages);
            r.indices.pop();
        });
    }

    /// Outputs `i..i + 16` of the innermost output loop.
    fn group(&self, r: &mut Renderer, b: &mut FunctionBuilder, stages: &Stages, i: Value) {
        let kernel = r.kernel;
        let vectors = GROUP / 4;
        let bases: Vec<Value> = (0..vectors)
            .map(|u| b.ins().iadd_imm_s(i, (4 * u) as i64))
            .collect();
        // One accumulator per reduction and vector of the group.
        let accs: Vec<Vec<cranelift_frontend::Variable>> = self
            .reduces
            .iter()
            .map(|&(_, _, f)| {
                let init = b.ins().f32const(f.identity() as f32);
                let splat = b.ins().splat(types::F32X4, init);
                (0..vectors)
                    .map(|_| {
                        let var = b.declare_var(types::F32X4);
                        b.def_var(var, splat);
                        var
                    })
                    .collect()
            })
            .collect();
        let mut consts: Vec<Option<Value>> = vec![None; kernel.values.len()];
        for &v in &stages.outer_values[0] {
            consts[v.index()] = Some(r.eval(b, v, &[], &consts, None, 1));
        }
        self.reduce_loops(r, b, stages, &bases, &accs, &consts, 0);
        for (u, &base) in bases.iter().enumerate() {
            let mut vals: Vec<Option<Value>> = vec![None; kernel.values.len()];
            for (acc, red) in accs.iter().zip(&self.reduces) {
                vals[red.0.index()] = Some(b.use_var(acc[u]));
            }
            r.indices.push(base);
            for &v in stages.outer_values.iter().skip(1).flatten() {
                if vals[v.index()].is_none() {
                    vals[v.index()] = Some(r.eval(b, v, &vals, &consts, None, 4));
                }
            }
            for &s in &stages.outer_stores {
                let store = &kernel.stores[s];
                let value = r.operand(b, store.value, &vals, &consts, 4);
                r.store_vector(b, store, value);
            }
            r.indices.pop();
        }
    }

    /// Reduction loop `level` and those inside it; at the innermost, each vector of the
    /// group evaluates the sweep's values at its four outputs and accumulates.
    #[allow(clippy::too_many_arguments)]
    fn reduce_loops(
        &self,
        r: &mut Renderer,
        b: &mut FunctionBuilder,
        stages: &Stages,
        bases: &[Value],
        accs: &[Vec<cranelift_frontend::Variable>],
        consts: &[Option<Value>],
        level: usize,
    ) {
        let kernel = r.kernel;
        let zero = b.ins().iconst(types::I64, 0);
        let n = b.ins().iconst(types::I64, kernel.reduce[level] as i64);
        r.counted(b, zero, n, 1, &mut |r, b, k| {
            if level + 1 < kernel.reduce.len() {
                r.indices.push(k);
                self.reduce_loops(r, b, stages, bases, accs, consts, level + 1);
                r.indices.pop();
                return;
            }
            for (u, &base) in bases.iter().enumerate() {
                // The innermost output index, then the reduction indices (the last is `k`).
                let depth = r.indices.len();
                let outer = depth - level;
                r.indices.insert(outer, base);
                r.indices.push(k);
                let mut vals: Vec<Option<Value>> = vec![None; kernel.values.len()];
                for &v in &stages.sweep_values[0] {
                    vals[v.index()] = Some(match &kernel.value(v).expr {
                        Expr::Load { buffer, index } => r.load_vector(b, buffer.index(), index),
                        _ => r.eval(b, v, &vals, consts, None, 4),
                    });
                }
                r.indices.pop();
                r.indices.remove(outer);
                for (acc, &(_, operand, f)) in accs.iter().zip(&self.reduces) {
                    let x = r.operand(b, operand, &vals, consts, 4);
                    let sum = b.use_var(acc[u]);
                    let next = crate::render_reduce::combine(b, f, sum, x);
                    b.def_var(acc[u], next);
                }
            }
        });
    }
}
