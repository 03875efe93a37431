//! The divisor of every average-pooling window, as the eager kernel takes it, for the forward
//! ([`super::pool`]) and the backward ([`super::pool_backward`]) lowerings alike: along each
//! pooled axis the window's extent inside the padded input when padding counts
//! (`count_include_pad`, a ceil-mode window past the padding cut short), else its taps inside
//! the input; a window's divisor is the product of its axes' factors. Windows near the border
//! divide by fewer taps, so a kernel picks each window's factor by its output coordinate, in
//! the cheaper of two forms per axis: a constant for the common factor and a select for each
//! coordinate whose factor differs (a few border windows), or, past [`MAX_SELECTS`] of them,
//! the window's taps counted from the coordinate (one formula, whatever the border). Both
//! compute in the divisor's float type, on the coordinate cast to it (exact integers), so a
//! forward kernel stays vector code (a loop index read as f32 is the lanes' indices); in i64
//! where f32 would not hold every coordinate exactly (planes of millions), or for an i64
//! divisor.

use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ScalarType, ValueId};
use tessera_tensor::op::Pool2dParams;

/// Coordinates of differing factor up to which an axis selects its factor: one select costs
/// about three values (the coordinate, the comparison, the select), a count per point about
/// fifteen.
const MAX_SELECTS: usize = 5;

/// Per pooled axis, the divisor factor of each output coordinate.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Divisors {
    axes: Vec<Factors>,
}

/// One axis's windows and the factor of each.
#[derive(Debug, Clone, PartialEq)]
struct Factors {
    per_output: Vec<usize>,
    /// The window's first position is `o * stride - pad`, its end at most `kernel` later and
    /// at most `limit` (the padded input's end when padding counts, else the input's).
    stride: i64,
    pad: i64,
    kernel: i64,
    limit: i64,
    /// Whether positions before the input count (padding does).
    count_include_pad: bool,
}

impl Divisors {
    /// The factors of windows `p` over an input plane `input` pooled to `output`, or `None`
    /// for windows the kernels do not take (dilated, empty, a zero stride or kernel).
    pub(super) fn of(
        p: &Pool2dParams,
        count_include_pad: bool,
        input: [usize; 2],
        output: [usize; 2],
    ) -> Option<Divisors> {
        let axes = (0..2)
            .map(|a| {
                if p.dilation[a] != 1 {
                    return None;
                }
                Factors::of(
                    [p.kernel[a], p.stride[a], p.padding[a], input[a], output[a]],
                    count_include_pad,
                )
            })
            .collect::<Option<_>>()?;
        Some(Divisors { axes })
    }

    /// The divisor, in `ty`, of the window at output coordinates `q[a] + offsets[a]` (one per
    /// pooled axis, `q` i64 values: the forward's loop indices, the backward's grid
    /// coordinates): the product of the axes' factors, exact (each a small integer), so
    /// `s / n` is eager's `s / (n as T)`. A coordinate outside the output (whose gradient
    /// reads 0) takes a factor of at least 1, never 0.
    pub(super) fn at(
        &self,
        b: &mut KernelBuilder,
        ty: ScalarType,
        q: &[ValueId],
        offsets: &[i64],
    ) -> ValueId {
        let mut constant = 1;
        let mut varying = Vec::new();
        for ((axis, &q), &offset) in self.axes.iter().zip(q).zip(offsets) {
            match axis.uniform() {
                // Saturating: eager's own product of such windows overflows.
                Some(f) => constant = f.saturating_mul(constant),
                None => varying.push(axis.factor(b, ty, q, offset)),
            }
        }
        let mut factors = varying.into_iter();
        let Some(first) = factors.next() else {
            return b.push(ty, Expr::Const(constant as f64));
        };
        let mut n = factors.fold(first, |n, f| b.push(ty, Expr::Binary(BinaryFn::Mul, n, f)));
        if constant != 1 {
            let c = b.push(ty, Expr::Const(constant as f64));
            n = b.push(ty, Expr::Binary(BinaryFn::Mul, n, c));
        }
        n
    }
}

impl Factors {
    /// `[kernel, stride, padding, input, output]` of one axis.
    fn of(
        [kernel, stride, pad, input, output]: [usize; 5],
        count_include_pad: bool,
    ) -> Option<Factors> {
        if kernel == 0 || stride == 0 || output == 0 {
            return None;
        }
        let [k, s, pad, len] = [kernel, stride, pad, input].map(i64::try_from);
        let (k, s, pad, len) = (k.ok()?, s.ok()?, pad.ok()?, len.ok()?);
        let limit = if count_include_pad {
            len.checked_add(pad)?
        } else {
            len
        };
        // Eager's window (`Window::strided`): from `o*s - pad`, at most `k` taps, never past
        // the padded input.
        let per_output = (0..i64::try_from(output).ok()?)
            .map(|o| {
                let start = o.checked_mul(s)?.checked_sub(pad)?;
                let end = start.checked_add(k)?.min(limit);
                let first = if count_include_pad {
                    start
                } else {
                    start.max(0)
                };
                usize::try_from((end - first).max(1)).ok()
            })
            .collect::<Option<_>>()?;
        Some(Factors {
            per_output,
            stride: s,
            pad,
            kernel: k,
            limit,
            count_include_pad,
        })
    }

    /// The factor when every window of the axis has it.
    fn uniform(&self) -> Option<usize> {
        let v = &self.per_output;
        v.iter().all(|&n| n == v[0]).then_some(v[0])
    }

    /// The factor of output coordinate `q + offset` (`q` an i64), in `ty`.
    fn factor(&self, b: &mut KernelBuilder, ty: ScalarType, q: ValueId, offset: i64) -> ValueId {
        let common = most_common(&self.per_output);
        let differing = self.per_output.iter().filter(|&&f| f != common).count();
        let exact = match ty {
            ScalarType::F64 => true,
            ScalarType::F32 => self.below(offset, 1 << 24),
            _ => false,
        };
        let t = if exact { ty } else { ScalarType::I64 };
        let q = if exact { b.push(t, Expr::Cast(q)) } else { q };
        let n = if differing <= MAX_SELECTS {
            self.selected(b, t, q, offset, common)
        } else {
            self.counted(b, t, q, offset)
        };
        if t == ty {
            n
        } else {
            b.push(ty, Expr::Cast(n))
        }
    }

    /// Whether every integer [`Factors::counted`] computes for a coordinate `q + offset` (`q`
    /// at most the output or the input's size) is below `bound` in magnitude.
    fn below(&self, offset: i64, bound: i64) -> bool {
        let n = i64::try_from(self.per_output.len()).unwrap_or(i64::MAX);
        let reach = n
            .max(self.limit)
            .checked_add(offset.checked_abs().unwrap_or(i64::MAX))
            .and_then(|o| o.checked_mul(self.stride))
            .and_then(|at| at.checked_add(self.kernel))
            .and_then(|at| at.checked_add(self.pad))
            .and_then(|at| at.checked_add(self.limit));
        reach.is_some_and(|r| r < bound)
    }

    /// `common`, with a select for each coordinate whose factor differs; `q` and the result
    /// in `ty`.
    fn selected(
        &self,
        b: &mut KernelBuilder,
        ty: ScalarType,
        q: ValueId,
        offset: i64,
        common: usize,
    ) -> ValueId {
        let mut n = b.push(ty, Expr::Const(common as f64));
        for (o, &f) in self.per_output.iter().enumerate() {
            let at = o as i64 - offset;
            if f == common || at < 0 {
                continue;
            }
            let at = b.push(ty, Expr::Const(at as f64));
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

    /// The window's taps counted from its coordinate `o = q + offset`, `q` and the result in
    /// `ty` (integers, exact): `max(min(start + kernel, limit) - first, 1)` of
    /// `start = o * stride - pad`, `first` the start or, when padding does not count,
    /// `max(start, 0)`.
    fn counted(&self, b: &mut KernelBuilder, ty: ScalarType, q: ValueId, offset: i64) -> ValueId {
        let c = |b: &mut KernelBuilder, v: i64| b.push(ty, Expr::Const(v as f64));
        let bin = |b: &mut KernelBuilder, f, x, y| b.push(ty, Expr::Binary(f, x, y));
        // `x` where `f(x, bound)`, else `bound`: the min (`Lt`) or max (`Gt`) of the two.
        let keep = |b: &mut KernelBuilder, f, x, bound| {
            let hit = b.push(ScalarType::Bool, Expr::Compare(f, x, bound));
            b.push(
                ty,
                Expr::Select {
                    cond: hit,
                    a: x,
                    b: bound,
                },
            )
        };
        let o = match offset {
            0 => q,
            _ => {
                let offset = c(b, offset);
                bin(b, BinaryFn::Add, q, offset)
            }
        };
        let (stride, pad, kernel) = (c(b, self.stride), c(b, self.pad), c(b, self.kernel));
        let at = bin(b, BinaryFn::Mul, o, stride);
        let start = bin(b, BinaryFn::Sub, at, pad);
        let reach = bin(b, BinaryFn::Add, start, kernel);
        let limit = c(b, self.limit);
        let end = keep(b, CompareFn::Lt, reach, limit);
        let first = if self.count_include_pad {
            start
        } else {
            let zero = c(b, 0);
            keep(b, CompareFn::Gt, start, zero)
        };
        let n = bin(b, BinaryFn::Sub, end, first);
        let one = c(b, 1);
        keep(b, CompareFn::Gt, n, one)
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{BufferPtr, BufferRole, IndexExpr, Interpreter, KernelExecutor, LoopId};

    /// `(kernel, stride, padding, input)` of one axis, ceil-mode sizes included: windows
    /// inside, cut by the padding, past the padding, and larger than the input.
    const AXES: [[usize; 4]; 7] = [
        [3, 1, 1, 7],
        [3, 2, 1, 8],
        [4, 3, 2, 9],
        [5, 2, 2, 6],
        [2, 2, 0, 5],
        [7, 1, 3, 7],
        [9, 4, 4, 21],
    ];

    /// The eager windows' divisors along one axis, from the tensor crate's own pooling: the
    /// average of ones over `[1, input]` with the window along the second axis, times the
    /// window's divisor, is that divisor.
    fn eager(p: &Pool2dParams, count_include_pad: bool, input: usize) -> Vec<usize> {
        let ones = tessera_tensor::Tensor::ones(&[1, 1, 1, input], tessera_tensor::DType::F64);
        let op = tessera_tensor::Op::Pool(tessera_tensor::op::PoolOp::AvgPool2d {
            params: *p,
            count_include_pad,
        });
        let mean = op.apply1(&[&ones.unwrap()]).unwrap().to_vec_f64().unwrap();
        // With ones inside and zeros in the padding, `mean = inside / n`; `inside` is the
        // number of taps inside the input.
        let p1 = p.padding[1] as i64;
        mean.iter()
            .enumerate()
            .map(|(o, m)| {
                let start = o as i64 * p.stride[1] as i64 - p1;
                let end = (start + p.kernel[1] as i64).min(input as i64);
                let inside = (end - start.max(0)) as f64;
                (inside / m).round() as usize
            })
            .collect()
    }

    /// A form of an axis's factor: `(axis, builder, type, q, offset)`.
    type Form = fn(&Factors, &mut KernelBuilder, ScalarType, ValueId, i64) -> ValueId;

    /// One axis's factor, picked by `form` in `ty`, at `q + offset` for each `q` of
    /// `0..points`, by the kernel-IR interpreter.
    fn factors(axis: &Factors, form: Form, ty: ScalarType, offset: i64, points: usize) -> Vec<i64> {
        let mut b = KernelBuilder::new("factors", vec![points]);
        let out = b.buffer(BufferRole::Output, ScalarType::I64, points);
        let q = b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(0)));
        let float = ty != ScalarType::I64;
        let q = if float { b.push(ty, Expr::Cast(q)) } else { q };
        let n = form(axis, &mut b, ty, q, offset);
        let n = if float {
            b.push(ScalarType::I64, Expr::Cast(n))
        } else {
            n
        };
        let index = IndexExpr {
            offset: 0,
            strides: vec![1],
        };
        b.store(out, index, n);
        let kernel = b.finish();
        let mut values = vec![0i64; points];
        let buffer = BufferPtr {
            ptr: values.as_mut_ptr().cast(),
            len: points,
            ty: ScalarType::I64,
        };
        // SAFETY: `values` is `points` i64s, written by the kernel only.
        unsafe { Interpreter.execute(0, &kernel, &[buffer]) }.unwrap();
        values
    }

    #[test]
    fn both_forms_give_eagers_divisor_of_every_window_and_at_least_1_outside() {
        let selected: Form = |axis, b, ty, q, offset| {
            let common = most_common(&axis.per_output);
            axis.selected(b, ty, q, offset, common)
        };
        let counted: Form = |axis, b, ty, q, offset| axis.counted(b, ty, q, offset);
        for [kernel, stride, padding, input] in AXES {
            for ceil_mode in [false, true] {
                for count_include_pad in [false, true] {
                    let p = Pool2dParams {
                        kernel: [1, kernel],
                        stride: [1, stride],
                        padding: [0, padding],
                        dilation: [1, 1],
                        ceil_mode,
                    };
                    let want = eager(&p, count_include_pad, input);
                    let output = want.len();
                    let divisors =
                        Divisors::of(&p, count_include_pad, [1, input], [1, output]).unwrap();
                    let axis = &divisors.axes[1];
                    assert_eq!(axis.per_output, want, "{p:?} {count_include_pad}");
                    assert_eq!(divisors.axes[0].uniform(), Some(1));
                    let types = [ScalarType::I64, ScalarType::F32, ScalarType::F64];
                    for (offset, ty) in (-2..=2).flat_map(|o| types.map(|t| (o, t))) {
                        for form in [selected, counted] {
                            let got = factors(axis, form, ty, offset, output + 3);
                            for (q, &n) in got.iter().enumerate() {
                                let o = q as i64 + offset;
                                match usize::try_from(o).ok().and_then(|o| want.get(o)) {
                                    Some(&w) => assert_eq!(n as usize, w, "{p:?} {ty} at {o}"),
                                    None => assert!(n >= 1, "{p:?} outside, at {o}: {n}"),
                                }
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn an_axis_selects_up_to_max_selects_border_factors_then_counts() {
        // 3 taps, stride 1, padding 1 over 56: the two border windows select.
        let p = |kernel, padding| Pool2dParams {
            kernel: [kernel, 1],
            stride: [1, 1],
            padding: [padding, 0],
            dilation: [1, 1],
            ceil_mode: false,
        };
        let forms = |p: &Pool2dParams, input: usize| {
            let output = input + 2 * p.padding[0] + 1 - p.kernel[0];
            let divisors = Divisors::of(p, false, [input, 3], [output, 3]).unwrap();
            let mut b = KernelBuilder::new("forms", vec![output, 3]);
            let q: Vec<ValueId> = (0..2)
                .map(|l| b.push(ScalarType::I64, Expr::LoopIndex(LoopId::from_index(l))))
                .collect();
            let n = divisors.at(&mut b, ScalarType::F32, &q, &[0, 0]);
            let out = b.buffer(BufferRole::Output, ScalarType::F32, output * 3);
            b.store(
                out,
                IndexExpr {
                    offset: 0,
                    strides: vec![3, 1],
                },
                n,
            );
            let kernel = b.finish();
            // In f32 but the loop indices read (vector code holds them as f32 lanes).
            assert!(kernel.values.iter().all(|v| {
                matches!(v.ty, ScalarType::F32 | ScalarType::Bool)
                    || matches!(v.expr, Expr::LoopIndex(_))
            }));
            let count = |f: fn(&Expr) -> bool| kernel.values.iter().filter(|v| f(&v.expr)).count();
            (
                count(|e| matches!(e, Expr::Select { .. })),
                count(|e| matches!(e, Expr::Binary(BinaryFn::Mul, ..))),
            )
        };
        assert_eq!(forms(&p(3, 1), 56), (2, 0));
        // 11 taps, padding 5: ten border windows, counted (`o * stride`; three selects: min,
        // max, at least 1).
        assert_eq!(forms(&p(11, 5), 56), (3, 1));
    }
}
