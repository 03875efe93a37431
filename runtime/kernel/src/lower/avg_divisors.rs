//! The divisor of every average-pooling window, as the eager kernel takes it: along each axis
//! the window's extent inside the padded input when padding counts (`count_include_pad`, a
//! ceil-mode window past the padding cut short), else its taps inside the input; a window's
//! divisor is the product of its row's and its column's. Windows near the border divide by
//! fewer taps, so a backward kernel picks each window's divisor by its output coordinate: a
//! constant for the common value and a select for each border value.

use crate::{CompareFn, Expr, KernelBuilder, ScalarType, ValueId};
use tessera_tensor::op::Pool2dParams;

/// Per axis, the divisor factor of each output coordinate.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Divisors {
    axes: [Vec<usize>; 2],
}

impl Divisors {
    /// The factors of windows `p` over an input plane `input` pooled to `output`, or `None`
    /// for windows the residue grid does not take (dilated, empty, a zero stride or kernel).
    pub(super) fn of(
        p: &Pool2dParams,
        count_include_pad: bool,
        input: [usize; 2],
        output: [usize; 2],
    ) -> Option<Divisors> {
        let axis = |a: usize| -> Option<Vec<usize>> {
            if p.kernel[a] == 0 || p.stride[a] == 0 || p.dilation[a] != 1 || output[a] == 0 {
                return None;
            }
            let k = i64::try_from(p.kernel[a]).ok()?;
            let s = i64::try_from(p.stride[a]).ok()?;
            let pad = i64::try_from(p.padding[a]).ok()?;
            let len = i64::try_from(input[a]).ok()?;
            (0..i64::try_from(output[a]).ok()?)
                .map(|o| {
                    // Eager's window (`Window::strided`): from `o*s - pad`, at most `k` taps,
                    // never past the padded input.
                    let start = o.checked_mul(s)?.checked_sub(pad)?;
                    let end = start.checked_add(k)?.min(len.checked_add(pad)?);
                    let n = if count_include_pad {
                        end - start
                    } else {
                        end.min(len) - start.max(0)
                    };
                    usize::try_from(n.max(1)).ok()
                })
                .collect()
        };
        Some(Divisors {
            axes: [axis(0)?, axis(1)?],
        })
    }

    /// Whether every window divides by the same size.
    pub(super) fn uniform(&self) -> Option<usize> {
        let [rows, cols] = &self.axes;
        let same = |v: &[usize]| v.iter().all(|&n| n == v[0]).then_some(v[0]);
        Some(same(rows)? * same(cols)?)
    }

    /// The divisor, in `ty`, of the window at output `(q_h + offsets.0, q_w + offsets.1)`,
    /// `q` the i64 grid coordinates: the product of the two axes' factors, exact (each a small
    /// integer), so `g / n` is eager's `g / (n as T)`. A coordinate outside the output (its
    /// gradient reads 0) takes the common factor, never 0.
    pub(super) fn at(
        &self,
        b: &mut KernelBuilder,
        ty: ScalarType,
        q: [ValueId; 2],
        offsets: [i64; 2],
    ) -> ValueId {
        if let Some(n) = self.uniform() {
            return b.push(ty, Expr::Const(n as f64));
        }
        let rows = factor(b, ty, q[0], offsets[0], &self.axes[0]);
        let cols = factor(b, ty, q[1], offsets[1], &self.axes[1]);
        b.push(ty, Expr::Binary(crate::BinaryFn::Mul, rows, cols))
    }
}

/// The factor of output coordinate `q + offset` along one axis: the most common factor, with a
/// select for each coordinate whose factor differs.
fn factor(
    b: &mut KernelBuilder,
    ty: ScalarType,
    q: ValueId,
    offset: i64,
    per_output: &[usize],
) -> ValueId {
    let common = most_common(per_output);
    let mut n = b.push(ty, Expr::Const(common as f64));
    for (o, &f) in per_output.iter().enumerate() {
        let at = o as i64 - offset;
        if f == common || at < 0 {
            continue;
        }
        let at = b.push(ScalarType::I64, Expr::Const(at as f64));
        let hit = b.push(ScalarType::Bool, Expr::Compare(CompareFn::Eq, q, at));
        let f = b.push(ty, Expr::Const(f as f64));
        n = b.push(
            ty,
            Expr::Select {
                cond: hit,
                a: f,
                b: n,
            },
        );
    }
    n
}

fn most_common(values: &[usize]) -> usize {
    let mut counts: Vec<(usize, usize)> = Vec::new();
    for &v in values {
        match counts.iter_mut().find(|(value, _)| *value == v) {
            Some((_, c)) => *c += 1,
            None => counts.push((v, 1)),
        }
    }
    counts
        .into_iter()
        .max_by_key(|&(v, c)| (c, std::cmp::Reverse(v)))
        .map_or(1, |(v, _)| v)
}
