//! Guarded loads ([`crate::Expr::LoadIf`]): the reads of a tensor seen with padding, as a
//! padded pooling window makes them. Each padded dim is a [`Bound`], an affine coordinate of
//! the loop indices shifted by the padding; where every coordinate lies inside its dim the
//! element is read, elsewhere the load gives its fill value and reads no memory. So a window
//! that overlaps the padding needs neither a padded copy of its input nor a split of the
//! output domain into interior and border regions.

use crate::{BufferId, BufferRole, IndexExpr, Kernel, ValueId};

/// One padded dim of a guarded load: at a point, its coordinate is `coord - pad`, inside when
/// in `0..len`; inside, it moves the address by `stride` elements per unit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Bound {
    /// The coordinate plus the padding (so never negative), one stride per loop.
    pub coord: IndexExpr,
    pub pad: usize,
    pub len: usize,
    pub stride: usize,
}

impl Bound {
    /// The coordinate at loop indices `point`, when it lies inside the dim.
    pub fn at(&self, point: &[usize]) -> Option<usize> {
        self.coord
            .at(point)
            .checked_sub(self.pad)
            .filter(|&c| c < self.len)
    }
}

/// The element a guarded load reads at `point`: `index + sum(coordinate * stride)` when every
/// bound holds there, `None` (the fill value) otherwise.
pub fn guarded_index(index: &IndexExpr, bounds: &[Bound], point: &[usize]) -> Option<usize> {
    bounds.iter().try_fold(index.at(point), |at, b| {
        b.at(point).map(|c| at + c * b.stride)
    })
}

impl Kernel {
    /// One past the largest element a guarded load of `index` and `bounds` may read (0 when
    /// it never reads): its index's reach plus the largest step each bound can add.
    pub fn guarded_reach(&self, index: &IndexExpr, bounds: &[Bound]) -> usize {
        let base = self.reach(index);
        if base == 0 || bounds.iter().any(|b| b.len == 0) {
            return 0;
        }
        base + bounds.iter().map(|b| (b.len - 1) * b.stride).sum::<usize>()
    }

    /// Every guarded load: its buffer, index and bounds.
    pub fn guarded_loads(&self) -> impl Iterator<Item = (BufferId, &IndexExpr, &[Bound])> {
        self.values.iter().filter_map(|v| match &v.expr {
            crate::Expr::LoadIf {
                buffer,
                index,
                bounds,
                ..
            } => Some((*buffer, index, bounds.as_slice())),
            _ => None,
        })
    }

    /// One past the largest element any load or store of `buffer` reaches (0 when none does);
    /// a status buffer's writes are not counted.
    pub fn buffer_reach(&self, buffer: BufferId) -> usize {
        let plain = self
            .accesses()
            .filter(|(b, _)| *b == buffer)
            .map(|(_, ix)| self.reach(ix));
        let guarded = self
            .guarded_loads()
            .filter(|(b, ..)| *b == buffer)
            .map(|(_, ix, bounds)| self.guarded_reach(ix, bounds));
        let gathered = self.values.iter().filter_map(|v| match &v.expr {
            crate::Expr::Gather {
                buffer: b,
                index,
                stride,
                len,
                ..
            } if *b == buffer => Some(self.gather_reach(index, *stride, *len)),
            _ => None,
        });
        plain.chain(guarded).chain(gathered).max().unwrap_or(0)
    }

    /// Checks guarded load `here` of `buffer`: an input of its type whose every index has one
    /// stride per loop and whose reach stays inside the buffer.
    pub(crate) fn verify_guarded(
        &self,
        here: ValueId,
        buffer: BufferId,
        index: &IndexExpr,
        bounds: &[Bound],
    ) -> Result<(), String> {
        let param = self
            .buffers
            .get(buffer.index())
            .ok_or_else(|| format!("{buffer} is not a parameter"))?;
        if !matches!(param.role, BufferRole::Input | BufferRole::Scratch) {
            return Err(format!("{here} loads from {buffer}, an output"));
        }
        if param.ty != self.value(here).ty {
            return Err(format!(
                "{here} loads {} as {}",
                param.ty,
                self.value(here).ty
            ));
        }
        let loops = self.extents().len();
        let coords = bounds.iter().map(|b| &b.coord);
        if std::iter::once(index)
            .chain(coords)
            .any(|ix| ix.strides.len() != loops)
        {
            return Err(format!("an index of {here} has other than {loops} strides"));
        }
        let reach = self.guarded_reach(index, bounds);
        if reach > param.len {
            return Err(format!(
                "{here} reaches {reach} past the length {} of {buffer}",
                param.len
            ));
        }
        Ok(())
    }
}
