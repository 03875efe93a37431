//! Index checks with nothing to read: the degenerate cases of the scatters and of nll, whose
//! eager kernels still check their indices on the host although they read or write no
//! element (an `embedding_backward` of an empty weight gradient, an nll of an input with no
//! classes). A *check kernel* reduces over every element of the index, each read through a
//! gather of the index itself (stride 0) checked against the dim's size, so a bad index
//! faults its status and the run fails with [`crate::KernelError::IndexOutOfRange`] as
//! eager fails; it stores one f64 0, which the node's (empty) output kernel reads, so the
//! check runs before anything that uses the node.

use super::gather::IndexKernel;
use super::{Lowering, Val, at_least_one_dim};
use crate::{BinaryFn, CompareFn, Expr, KernelBuilder, ReduceFn, Result, ScalarType, ValueId};
use tessera_fx::NodeId;
use tessera_tensor::{DType, TensorMeta};

/// An nll target made checkable against a dim of one element when there are no classes:
/// `0` where it is `ignore_index` (so it passes), `target + 1` where it is not negative and
/// the target itself otherwise (so every other target faults: a target `t >= 0` is reported
/// as index `t + 1` of a dim of size 1, slot 0 standing for the ignored ones).
pub(super) fn classless_target(k: &mut IndexKernel, target: ValueId, ignored: ValueId) -> ValueId {
    let zero = k.constant(ScalarType::I64, 0.0);
    let one = k.constant(ScalarType::I64, 1.0);
    let negative =
        k.b.push(ScalarType::Bool, Expr::Compare(CompareFn::Lt, target, zero));
    let shifted =
        k.b.push(ScalarType::I64, Expr::Binary(BinaryFn::Add, target, one));
    let by = k.b.push(
        ScalarType::I64,
        Expr::Select {
            cond: negative,
            a: target,
            b: shifted,
        },
    );
    k.b.push(
        ScalarType::I64,
        Expr::Select {
            cond: ignored,
            a: zero,
            b: by,
        },
    )
}

impl Lowering<'_> {
    /// A check kernel for node `id` over every element of the i64 `index`: `by` makes the
    /// value checked against `len` from each element (its kernel and the loaded element);
    /// the slot of its one f64 0.
    pub(super) fn index_check(
        &mut self,
        id: &NodeId,
        index: &Val,
        len: usize,
        by: impl FnOnce(&mut IndexKernel, ValueId) -> ValueId,
    ) -> Result<Val> {
        let shape = index.layout.shape.clone();
        let name = format!("k{}_index_check", self.kernel_count());
        let mut k = IndexKernel::new(KernelBuilder::reduction(
            name,
            vec![],
            at_least_one_dim(&shape),
        ));
        let map: Vec<Option<usize>> = (0..shape.len()).map(Some).collect();
        let element = k.load(index, ScalarType::I64, &map);
        let by = by(&mut k, element);
        let checked = k.checked_load(index, ScalarType::I64, &map, by, len);
        let checked = k.b.push(ScalarType::F64, Expr::Cast(checked));
        let zero = k.constant(ScalarType::F64, 0.0);
        let nothing =
            k.b.push(ScalarType::F64, Expr::Binary(BinaryFn::Mul, checked, zero));
        let total =
            k.b.push(ScalarType::F64, Expr::Reduce(ReduceFn::Sum, nothing));
        self.finish_index_kernel(
            id,
            k,
            total,
            TensorMeta::new(Vec::<usize>::new(), DType::F64),
        )
    }

    /// The empty value `meta` of node `id`, made by a kernel that reads `check` (a check
    /// kernel's output), so that the check runs first.
    pub(super) fn empty_after_check(
        &mut self,
        id: &NodeId,
        check: &Val,
        meta: TensorMeta,
    ) -> Result<std::result::Result<Val, String>> {
        let Some(ty) = ScalarType::of_buffer(meta.dtype) else {
            return Ok(Err(format!("{:?} values", meta.dtype)));
        };
        if !meta.shape.contains(&0) {
            return Ok(Err(format!("a non-empty {:?} output", meta.shape)));
        }
        let name = format!("k{}_empty", self.kernel_count());
        let mut k = IndexKernel::new(KernelBuilder::new(name, meta.shape.clone()));
        let zero = k.load(check, ScalarType::F64, &[]);
        let value = k.b.push(ty, Expr::Cast(zero));
        Ok(Ok(self.finish_index_kernel(id, k, value, meta)?))
    }
}
