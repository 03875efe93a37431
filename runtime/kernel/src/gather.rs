//! Data-dependent loads ([`crate::Expr::Gather`]): a class target or token id, an i64 value
//! computed per point, picks the element read. The index is checked against its dim before
//! any memory is read; an out-of-range one reads nothing, gives 0, and records the fault in
//! the kernel's status buffer, a small i64 scratch that the runner zeroes before the kernel
//! and reads after it ([`check_status`]), so every backend (the interpreter, the JIT, PTX)
//! reports a bad index as the same typed error, [`crate::KernelError::IndexOutOfRange`],
//! instead of reading out of bounds.

use crate::{BufferId, BufferRole, Expr, IndexExpr, Kernel, KernelError, ScalarType, ValueId};

/// Elements of a status buffer: a fault flag (0 or 1), the bad index, the size of its dim.
pub const STATUS_LEN: usize = 3;

/// Where the fault flag, the bad index and the dim's size lie in a status buffer.
pub const STATUS_FLAG: usize = 0;
pub const STATUS_INDEX: usize = 1;
pub const STATUS_SIZE: usize = 2;

/// The element position a gather of `index`, `stride` and `len` reads at `point` with index
/// value `by`, or `None` when `by` lies outside `0..len`.
pub fn gathered_index(
    index: &IndexExpr,
    by: i64,
    stride: usize,
    len: usize,
    point: &[usize],
) -> Option<usize> {
    usize::try_from(by)
        .ok()
        .filter(|&b| b < len)
        .map(|b| index.at(point) + b * stride)
}

/// The error the status of kernel `kernel`, read back after it ran, reports, if any.
pub fn check_status(kernel: &str, status: &[i64]) -> crate::Result<()> {
    match status {
        [flag, index, size, ..] if *flag != 0 => Err(KernelError::IndexOutOfRange {
            kernel: kernel.to_string(),
            index: *index,
            size: usize::try_from(*size).unwrap_or(0),
        }),
        _ => Ok(()),
    }
}

impl Kernel {
    /// The status buffers of the kernel's gathers, each once, in parameter order.
    pub fn status_buffers(&self) -> Vec<BufferId> {
        let mut out: Vec<BufferId> = self
            .values
            .iter()
            .filter_map(|v| match &v.expr {
                Expr::Gather { status, .. } => Some(*status),
                _ => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// One past the largest element a gather of `index`, `stride` and `len` may read (0 when
    /// it never reads).
    pub fn gather_reach(&self, index: &IndexExpr, stride: usize, len: usize) -> usize {
        let base = self.reach(index);
        if base == 0 || len == 0 {
            return 0;
        }
        base + (len - 1) * stride
    }

    /// Checks gather `here`: it reads an input of its type (f32, f64 or i64) inside the buffer for
    /// every index in range, by an i64 value that precedes it, and records faults in an i64
    /// scratch of [`STATUS_LEN`] elements.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn verify_gather(
        &self,
        here: ValueId,
        buffer: BufferId,
        index: &IndexExpr,
        by: ValueId,
        stride: usize,
        len: usize,
        status: BufferId,
    ) -> Result<(), String> {
        let param = self
            .buffers
            .get(buffer.index())
            .ok_or_else(|| format!("{buffer} is not a parameter"))?;
        if !matches!(param.role, BufferRole::Input | BufferRole::Scratch) {
            return Err(format!("{here} gathers from {buffer}, an output"));
        }
        let ty = self.value(here).ty;
        if param.ty != ty {
            return Err(format!("{here} gathers {} as {ty}", param.ty));
        }
        if by >= here || self.value(by).ty != ScalarType::I64 {
            return Err(format!(
                "{here} gathers by {by}, which is no earlier i64 value"
            ));
        }
        if index.strides.len() != self.extents().len() {
            return Err(format!(
                "the index of {here} has other than one stride per loop"
            ));
        }
        let reach = self.gather_reach(index, stride, len);
        if reach > param.len {
            return Err(format!(
                "{here} reaches {reach} past the length {} of {buffer}",
                param.len
            ));
        }
        let s = self
            .buffers
            .get(status.index())
            .ok_or_else(|| format!("the status {status} of {here} is not a parameter"))?;
        if s.role != BufferRole::Scratch || s.ty != ScalarType::I64 || s.len < STATUS_LEN {
            return Err(format!(
                "the status {status} of {here} is not an i64 scratch of {STATUS_LEN}"
            ));
        }
        Ok(())
    }
}
