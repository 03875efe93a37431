//! The interior of a row of guarded loads: with the outer loop indices fixed, every bound's
//! coordinate is affine in the innermost index `j` with a step that is never negative, so the
//! `j` where every guarded load of an elementwise kernel reads inside its input is one interval,
//! computed once per row. A backend runs that interval as plain loads
//! ([`unguarded_index`]) and only the `j` outside it through the guards (index-set splitting
//! of the innermost loop); a bound that does not move along `j` holds on the whole row or
//! nowhere on it, and a row where one fails has an empty interior.

use crate::{Bound, Expr, IndexExpr, Kernel};
use std::ops::Range;

/// One padded dim some guarded load of a kernel checks, with its element stride dropped:
/// the interior depends only on where the coordinate lies.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RowBound {
    /// The coordinate plus the padding, one stride per loop.
    pub coord: IndexExpr,
    pub pad: usize,
    pub len: usize,
}

impl RowBound {
    /// The coordinate's stride along the innermost loop.
    pub fn step(&self) -> usize {
        self.coord.strides.last().copied().unwrap_or(0)
    }

    /// The innermost indices `j` where the bound holds in a row whose coordinate at `j = 0`
    /// is `c0` (`usize::MAX` for "the whole row"): `pad <= c0 + step * j < pad + len`, so from
    /// `ceil((pad - c0) / step)` to `ceil((pad + len - c0) / step)`, each numerator taken as 0
    /// where negative; a step of 0 holds everywhere or nowhere.
    pub fn inside(&self, c0: usize) -> Range<usize> {
        match self.step() {
            0 if c0 >= self.pad && c0 - self.pad < self.len => 0..usize::MAX,
            0 => 0..0,
            s => {
                let lo = self.pad.saturating_sub(c0).div_ceil(s);
                let hi = (self.pad + self.len).saturating_sub(c0).div_ceil(s);
                lo..hi.max(lo)
            }
        }
    }
}

/// Where a guarded load of `index` and `bounds` reads when every bound holds, affine in the
/// loop indices: `offset + sum(strides[l] * i_l)`. The offset may be negative (the padding
/// moved back), the position never is where the load is inside.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Unguarded {
    pub offset: i64,
    pub strides: Vec<usize>,
}

impl Unguarded {
    /// The position at loop indices `point`.
    pub fn at(&self, point: &[usize]) -> i64 {
        self.strides
            .iter()
            .zip(point)
            .fold(self.offset, |at, (s, i)| at + (s * i) as i64)
    }
}

/// The element a guarded load reads where it is inside, with its bounds folded in:
/// `index + sum((coord - pad) * stride)`.
pub fn unguarded_index(index: &IndexExpr, bounds: &[Bound]) -> Unguarded {
    let mut out = Unguarded {
        offset: index.offset as i64,
        strides: index.strides.clone(),
    };
    for b in bounds {
        out.offset += (b.coord.offset as i64 - b.pad as i64) * b.stride as i64;
        for (s, c) in out.strides.iter_mut().zip(&b.coord.strides) {
            *s += c * b.stride;
        }
    }
    out
}

impl Kernel {
    /// The distinct dims the guarded loads of an elementwise kernel check (none for a kernel
    /// with reduction loops or no loops: its innermost loop is not split).
    pub fn row_bounds(&self) -> Vec<RowBound> {
        if !self.reduce.is_empty() || self.domain.is_empty() {
            return Vec::new();
        }
        let mut out: Vec<RowBound> = Vec::new();
        for (_, _, bounds) in self.guarded_loads() {
            for b in bounds {
                let rb = RowBound {
                    coord: b.coord.clone(),
                    pad: b.pad,
                    len: b.len,
                };
                if !out.contains(&rb) {
                    out.push(rb);
                }
            }
        }
        out
    }

    /// The innermost indices, within `range`, where every guarded load of the kernel is
    /// inside in the row at outer loop indices `outer`: the intersection of its
    /// [`RowBound::inside`]s, empty (`range.end..range.end`) when that is.
    pub fn interior(&self, outer: &[usize], range: Range<usize>) -> Range<usize> {
        let (lo, hi) = self
            .row_bounds()
            .iter()
            .fold((range.start, range.end), |(lo, hi), rb| {
                let inside = rb.inside(rb.coord.at(outer));
                (lo.max(inside.start), hi.min(inside.end))
            });
        if lo < hi {
            lo..hi
        } else {
            range.end..range.end
        }
    }

    /// Whether computing a point twice stores what computing it once does: no plain load reads
    /// at a store's index (an update written in place reads its target there,
    /// [`crate::in_place_outputs`]), so no point reads what another stored.
    pub fn recomputes_safely(&self) -> bool {
        !self.values.iter().any(|v| match &v.expr {
            Expr::Load { index, .. } => self.stores.iter().any(|s| s.index == *index),
            _ => false,
        })
    }

    /// Whether the kernel's innermost loop is split around the interior of its guarded loads.
    pub fn splits_rows(&self) -> bool {
        !self.row_bounds().is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guard::guarded_index;
    use crate::{BufferRole, Expr, KernelBuilder, ScalarType};

    /// A bound `offset + 3 * i + step * j - pad in 0..len` over an outer loop `i` and the
    /// innermost loop `j`.
    fn bound(offset: usize, step: usize, pad: usize, len: usize) -> Bound {
        Bound {
            coord: IndexExpr {
                offset,
                strides: vec![3, step],
            },
            pad,
            len,
            stride: 1,
        }
    }

    /// The `j` in `0..n` where every bound holds at outer index `i`, point by point.
    fn brute(bounds: &[Bound], i: usize, n: usize) -> Vec<usize> {
        let index = IndexExpr {
            offset: 0,
            strides: vec![0, 0],
        };
        (0..n)
            .filter(|&j| guarded_index(&index, bounds, &[i, j]).is_some())
            .collect()
    }

    /// A kernel over `[rows, n]` whose one guarded load checks `bounds`.
    fn kernel_of(bounds: Vec<Bound>, rows: usize, n: usize) -> Kernel {
        let mut b = KernelBuilder::new("k", vec![rows, n]);
        let x = b.buffer(BufferRole::Input, ScalarType::F32, 1 << 16);
        let y = b.buffer(BufferRole::Output, ScalarType::F32, rows * n);
        let v = b.push(
            ScalarType::F32,
            Expr::LoadIf {
                buffer: x,
                index: IndexExpr {
                    offset: 0,
                    strides: vec![0, 0],
                },
                bounds,
                fill: 0.0,
            },
        );
        b.store(
            y,
            IndexExpr {
                offset: 0,
                strides: vec![n, 1],
            },
            v,
        );
        b.finish()
    }

    #[test]
    fn interior_is_exactly_where_every_guard_holds() {
        // Steps 0 to 3 (a bound fixed along the row, strides 1-3), paddings before and after
        // the row, intervals empty, partial and whole, and two bounds of one load intersected.
        for step in 0..4 {
            for offset in 0..12 {
                for pad in 0..6 {
                    for len in [0, 1, 3, 7, 20] {
                        for second in [None, Some(bound(2, 1, 1, 9))] {
                            let mut bounds = vec![bound(offset, step, pad, len)];
                            bounds.extend(second);
                            let k = kernel_of(bounds.clone(), 3, 13);
                            for i in 0..3 {
                                let want = brute(&bounds, i, 13);
                                let got: Vec<usize> = k.interior(&[i], 0..13).collect();
                                assert_eq!(got, want, "{bounds:?} row {i}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn interior_stays_within_the_range_asked() {
        let k = kernel_of(vec![bound(0, 1, 2, 30)], 1, 40);
        assert_eq!(k.interior(&[0], 0..40), 2..32);
        assert_eq!(k.interior(&[0], 5..20), 5..20);
        assert_eq!(k.interior(&[0], 33..40), 40..40);
        assert_eq!(k.interior(&[0], 0..2), 2..2);
    }

    #[test]
    fn unguarded_index_is_the_guarded_index_inside() {
        let bounds = vec![
            Bound {
                coord: IndexExpr {
                    offset: 1,
                    strides: vec![2, 0],
                },
                pad: 1,
                len: 5,
                stride: 11,
            },
            Bound {
                coord: IndexExpr {
                    offset: 0,
                    strides: vec![0, 3],
                },
                pad: 2,
                len: 11,
                stride: 1,
            },
        ];
        let index = IndexExpr {
            offset: 7,
            strides: vec![0, 0],
        };
        let plain = unguarded_index(&index, &bounds);
        let mut inside = 0;
        for i in 0..4 {
            for j in 0..6 {
                if let Some(at) = guarded_index(&index, &bounds, &[i, j]) {
                    assert_eq!(plain.at(&[i, j]), at as i64, "({i}, {j})");
                    inside += 1;
                }
            }
        }
        assert!(inside > 6, "the case reads inside at {inside} points");
    }

    #[test]
    fn points_recompute_safely_unless_a_load_reads_at_a_store_index() {
        let k = kernel_of(vec![bound(0, 1, 1, 4)], 2, 8);
        assert!(k.recomputes_safely());
        // `y[i, j] = x[i, j] + ...`: an update the runner may write over `x` in place.
        let mut b = KernelBuilder::new("update", vec![2, 8]);
        let x = b.buffer(BufferRole::Input, ScalarType::F32, 16);
        let y = b.buffer(BufferRole::Output, ScalarType::F32, 16);
        let at = IndexExpr {
            offset: 0,
            strides: vec![8, 1],
        };
        let v = b.push(
            ScalarType::F32,
            Expr::Load {
                buffer: x,
                index: at.clone(),
            },
        );
        b.store(y, at, v);
        assert!(!b.finish().recomputes_safely());
    }

    #[test]
    fn rows_split_only_in_elementwise_kernels_with_guards() {
        assert!(kernel_of(vec![bound(0, 1, 1, 4)], 2, 8).splits_rows());
        let mut k = kernel_of(vec![bound(0, 1, 1, 4)], 2, 8);
        k.reduce = vec![2];
        assert!(!k.splits_rows());
    }
}
