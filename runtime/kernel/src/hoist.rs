//! Which values of an elementwise kernel are computed once per run of its innermost loop
//! rather than at every point: values that do not vary along that loop (constants, loads whose
//! index does not walk it, and values of those only) and that are f64 or read an f64 (an
//! optimizer update's learning rate and the scalars derived from it), with their operands.
//! The schedule vectorises a kernel whose only f64 values are these, and the CPU renderer
//! computes them before the loop; other invariant values stay where they are.

use crate::{Expr, Kernel, ScalarType, operands};

/// Per value of `kernel`, whether it is computed before the innermost loop; all `false` for
/// a reduction kernel (its stages decide what runs where) and for one with no loops.
pub fn hoisted_values(kernel: &Kernel) -> Vec<bool> {
    let n = kernel.values.len();
    let loops = kernel.extents().len();
    if !kernel.reduce.is_empty() || loops == 0 {
        return vec![false; n];
    }
    let mut invariant = vec![false; n];
    for (i, v) in kernel.values.iter().enumerate() {
        invariant[i] = match &v.expr {
            Expr::Const(_) => true,
            Expr::Load { index, .. } => index.strides.get(loops - 1).is_none_or(|&s| s == 0),
            Expr::LoadIf { .. } | Expr::Gather { .. } | Expr::Reduce(..) => false,
            Expr::LoopIndex(l) => l.index() + 1 < loops,
            expr => operands(expr)
                .iter()
                .all(|o| o.index() < i && invariant[o.index()]),
        };
    }
    let wide = |i: usize| kernel.values[i].ty == ScalarType::F64;
    let mut hoisted: Vec<bool> = (0..n)
        .map(|i| {
            invariant[i]
                && (wide(i)
                    || operands(&kernel.values[i].expr)
                        .iter()
                        .any(|o| wide(o.index())))
        })
        .collect();
    // A hoisted value's operands are computed before it.
    for i in (0..n).rev() {
        if hoisted[i] {
            for o in operands(&kernel.values[i].expr) {
                hoisted[o.index()] = true;
            }
        }
    }
    hoisted
}
