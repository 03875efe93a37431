//! Inverted dropout: in training each element is zeroed with probability `p` (drawn from the
//! global seeded generator) and survivors are scaled by `1/(1-p)`; in eval it is the identity.

use super::{BackwardCtx, Effects, FusionRole, OpDef, OpKind, expect_float, expect_inputs};
use crate::cpu::{float_dispatch, tensor_from};
use crate::{DType, Float, Result, Tensor, TensorError, TensorMeta, with_global_generator};

/// Dropout with drop probability `p`. Outputs the result and the bool keep-mask (not
/// differentiable), which backward reads.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DropoutOp {
    pub p: f64,
    pub training: bool,
}

impl DropoutOp {
    /// The factor survivors are multiplied by (0 when everything is dropped).
    pub fn scale(&self) -> f64 {
        if !self.training {
            1.0
        } else if self.p >= 1.0 {
            0.0
        } else {
            1.0 / (1.0 - self.p)
        }
    }

    /// Which of `numel` elements survive, drawn from the global generator in row-major order
    /// (one uniform draw per element in training with `0 < p < 1`, none otherwise): every
    /// backend draws its mask here, so a seed gives the same mask on every device.
    pub fn keep_mask(&self, numel: usize) -> Vec<bool> {
        if !self.training || self.p == 0.0 {
            vec![true; numel]
        } else if self.p >= 1.0 {
            vec![false; numel]
        } else {
            with_global_generator(|g| (0..numel).map(|_| g.uniform() >= self.p).collect())
        }
    }

    fn kernel<T: Float>(&self, x: &Tensor) -> Result<Vec<Tensor>> {
        let shape = x.shape();
        let keep = self.keep_mask(x.numel());
        let scale = T::from_f64(self.scale());
        let data = x.to_vec::<T>()?;
        let out: Vec<T> = data
            .iter()
            .zip(&keep)
            .map(|(&v, &k)| if k { v * scale } else { T::zero() })
            .collect();
        Ok(vec![tensor_from(out, &shape), tensor_from(keep, &shape)])
    }
}

impl OpDef for DropoutOp {
    op_identity!(name: "dropout", attributes: fields, kind: ElementwiseUnary);

    fn effects(&self) -> Effects {
        if self.training {
            Effects::RANDOM
        } else {
            Effects::PURE
        }
    }

    /// Eval dropout is removed by a pass; training dropout draws from the generator.
    fn fusion_role(&self) -> FusionRole {
        FusionRole::Alone
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        expect_inputs("dropout", inputs, 1)?;
        expect_float("dropout", &inputs[0])?;
        if !(0.0..=1.0).contains(&self.p) {
            return Err(TensorError::invalid(
                "dropout",
                format!("probability has to be between 0 and 1, but got {}", self.p),
            ));
        }
        let mask = TensorMeta::new(inputs[0].shape.clone(), DType::Bool);
        Ok(vec![inputs[0].clone(), mask])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        float_dispatch!(inputs[0].dtype(), self.name(), T => self.kernel::<T>(inputs[0]))
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        // g * (mask ? scale : 0), the factor made in g's dtype from the saved keep-mask.
        let g = cx.grad(0)?;
        let factor = cx.outputs[1]
            .to_dtype(g.dtype())?
            .mul_scalar(self.scale())?;
        Ok(vec![Some(g.mul(&factor)?)])
    }

    fn output_is_differentiable(&self, index: usize) -> bool {
        index == 0
    }
}
