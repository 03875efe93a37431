//! Conversion between dtypes (PyTorch's `.to(dtype)`); gradients flow back through float casts.

use super::{BackwardCtx, OpDef, OpKind, expect_inputs};
use crate::{DType, Result, Tensor, TensorMeta};

#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct CastOp(pub(crate) DType);

impl OpDef for CastOp {
    op_identity!(name: "to", attributes: fields, kind: ElementwiseUnary);

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("to", inputs, 1)?;
        Ok(vec![TensorMeta::new(inputs[0].shape.clone(), self.0)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let x = inputs[0];
        let shape = x.shape();
        let storage = x.with_storage(|s, layout| -> Result<_> {
            Ok(s.cpu("to")?.gather_cast(layout.offsets(), self.0))
        })?;
        Ok(vec![Tensor::from_cpu(storage, &shape)])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let input_dtype = cx.inputs[0].dtype();
        if !input_dtype.is_float() {
            return Ok(vec![None]);
        }
        Ok(vec![Some(cx.grad(0)?.to_dtype(input_dtype)?)])
    }

    fn computes_half_in_f32(&self) -> bool {
        false
    }
}
