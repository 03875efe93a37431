//! Lowering of `one_hot`: one kernel over the output `[.., num_classes]`, each element 1 where
//! its class position (the innermost loop's index) is the input's class and 0 elsewhere, as
//! i64s. The class is checked against `0..num_classes` in the kernel by a gather of the class
//! itself ([`super::gather::IndexKernel::checked_load`]): a class outside fails the run with
//! [`crate::KernelError::IndexOutOfRange`], where the eager kernel fails the op. With zero
//! classes the output is empty and a check kernel (`index_check.rs`) checks the classes.
//! Classes of u8, i8 and i32 are read in their own type and widened to i64 (exactly).

use super::gather::IndexKernel;
use super::{Lowering, Val};
use crate::{CompareFn, Expr, KernelBuilder, LoopId, Result, ScalarType};
use tessera_fx::NodeId;
use tessera_tensor::Op;

impl Lowering<'_> {
    /// Lowers a `one_hot` node of `num_classes` classes, or runs its eager kernel (reported as
    /// a fallback) when the kernel IR cannot express it.
    pub(super) fn one_hot(&mut self, id: &NodeId, op: &Op, num_classes: usize) -> Result<()> {
        let kernel = self.one_hot_kernel(id, num_classes)?;
        self.value_or_fallback(id, op, kernel)
    }

    fn one_hot_kernel(
        &mut self,
        id: &NodeId,
        num_classes: usize,
    ) -> Result<std::result::Result<Val, String>> {
        let operands = self
            .operands(id)?
            .iter()
            .map(|o| self.value(o))
            .collect::<Result<Vec<_>>>()?;
        let (Some(meta), [classes]) = (self.meta(id)?.first().cloned(), operands.as_slice()) else {
            return Ok(Err("one_hot takes one tensor of classes".into()));
        };
        // Classes are read in their own integer type and widened to i64 (exactly).
        let dtype = self.program.slot(classes.slot).meta.dtype;
        let Some(class_ty) = ScalarType::of_buffer(dtype).filter(|t| t.is_integer()) else {
            return Ok(Err(format!("classes of dtype {dtype}")));
        };
        if num_classes == 0 && class_ty != ScalarType::I64 {
            return Ok(Err(format!("zero classes of dtype {dtype}")));
        }
        if num_classes == 0 {
            // No output element, but eager checks the classes: every one is out of range.
            let classes = classes.clone();
            let check = self.index_check(id, &classes, 0, |_, class| class)?;
            return self.empty_after_check(id, &check, meta);
        }
        let out = meta.shape.clone();
        let rank = out.len();
        let name = format!("k{}_one_hot", self.kernel_count());
        let mut k = IndexKernel::new(KernelBuilder::new(name, out));
        // The classes' dims walk the output's outer loops; the innermost is the class position.
        let map: Vec<Option<usize>> = (0..rank - 1).map(Some).collect();
        let class = k.load(classes, class_ty, &map);
        let class = k.b.push(ScalarType::I64, Expr::Cast(class));
        let checked = k.checked_load(classes, class_ty, &map, class, num_classes);
        let checked = k.b.push(ScalarType::I64, Expr::Cast(checked));
        let position = k.b.push(
            ScalarType::I64,
            Expr::LoopIndex(LoopId::from_index(rank - 1)),
        );
        let hit = k.b.push(
            ScalarType::Bool,
            Expr::Compare(CompareFn::Eq, checked, position),
        );
        let value = k.b.push(ScalarType::I64, Expr::Cast(hit));
        Ok(Ok(self.finish_index_kernel(id, k, value, meta)?))
    }
}
