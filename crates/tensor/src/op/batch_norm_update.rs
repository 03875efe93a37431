//! The running-statistics update of a training batch norm as a pure op: from the batch's
//! mean and biased variance and the current running statistics (and batch counter), the new
//! running statistics (and counter). Eager batch norm applies it and copies the result into
//! its buffers; a traced graph returns the outputs as buffer mutations that its runner writes
//! back, so eager and graph training share this one definition of the update.

use super::{BackwardCtx, Effects, FusionRole, OpDef, OpKind, expect_float};
use crate::{DType, Result, Tensor, TensorError, TensorMeta};

/// PyTorch's `_BatchNorm` statistics update. Inputs `batch_mean, batch_var, running_mean,
/// running_var` and, with `counted`, the i64 scalar `num_batches_tracked`; outputs the new
/// `running_mean, running_var` and, with `counted`, `num_batches_tracked + 1`.
///
/// `count` is the number of elements each channel's statistics were taken over (`N * H * W`):
/// the running variance blends in the unbiased batch variance `var * count / (count - 1)`. The
/// blend weight is `momentum`, or, when it is `None` (a cumulative average), `1 / (new
/// num_batches_tracked)`, which needs the counter.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct BatchNormUpdateOp {
    pub momentum: Option<f64>,
    pub count: usize,
    pub counted: bool,
}

impl BatchNormUpdateOp {
    fn input_count(&self) -> usize {
        4 + usize::from(self.counted)
    }

    /// The blend weight for a counter that is `batches` after this update.
    pub fn factor(&self, batches: i64) -> f64 {
        match self.momentum {
            Some(m) => m,
            None => 1.0 / batches as f64,
        }
    }

    /// `(1 - factor) * running + factor * batch`, each in f64: the one formula of the blend.
    pub fn blend(running: f64, batch: f64, factor: f64) -> f64 {
        (1.0 - factor) * running + factor * batch
    }

    /// The unbiased variance of `count` elements whose biased variance is `var`.
    pub fn unbiased(&self, var: f64) -> f64 {
        let n = self.count as f64;
        var * n / (n - 1.0)
    }
}

impl OpDef for BatchNormUpdateOp {
    op_identity!(name: "batch_norm_update", attributes: fields, kind: Normalization);

    /// A small per-channel op that runs on its own (through its eager kernel when compiled).
    fn fusion_role(&self) -> FusionRole {
        FusionRole::Alone
    }

    fn effects(&self) -> Effects {
        Effects::PURE
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let name = "batch_norm_update";
        if inputs.len() != self.input_count() {
            let counter = if self.counted {
                ", num_batches_tracked"
            } else {
                ""
            };
            return Err(TensorError::invalid(
                name,
                format!(
                    "expected the inputs (batch_mean, batch_var, running_mean, running_var{counter}), got {} inputs",
                    inputs.len()
                ),
            ));
        }
        if self.momentum.is_none() && !self.counted {
            return Err(TensorError::invalid(
                name,
                "a cumulative average (momentum None) needs the num_batches_tracked input",
            ));
        }
        if self.count <= 1 {
            return Err(TensorError::invalid(
                name,
                format!(
                    "the unbiased variance needs more than 1 value per channel, got {}",
                    self.count
                ),
            ));
        }
        let channels = &inputs[0].shape;
        let names = ["batch_mean", "batch_var", "running_mean", "running_var"];
        for (meta, what) in inputs.iter().zip(names) {
            expect_float(name, meta)?;
            if meta.shape.len() != 1 || meta.shape != *channels {
                return Err(TensorError::shapes(
                    name,
                    channels,
                    &meta.shape,
                    format!("{what} must be a vector like batch_mean"),
                ));
            }
        }
        let mut outputs = vec![inputs[2].clone(), inputs[3].clone()];
        if self.counted {
            let counter = &inputs[4];
            if counter.dtype != DType::I64 || !counter.shape.is_empty() {
                return Err(TensorError::invalid(
                    name,
                    format!(
                        "num_batches_tracked must be an i64 scalar, got {}{:?}",
                        counter.dtype, counter.shape
                    ),
                ));
            }
            outputs.push(counter.clone());
        }
        Ok(outputs)
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let batches = match self.counted {
            true => Some(inputs[4].item::<i64>()? + 1),
            false => None,
        };
        let factor = self.factor(batches.unwrap_or(0));
        let batch_mean = inputs[0].to_vec_f64()?;
        let batch_var = inputs[1].to_vec_f64()?;
        let updated = |running: &Tensor, batch: &mut dyn Iterator<Item = f64>| -> Result<Tensor> {
            let blended: Vec<f64> = running
                .to_vec_f64()?
                .into_iter()
                .zip(batch)
                .map(|(r, b)| Self::blend(r, b, factor))
                .collect();
            Tensor::from_vec(blended, &running.shape())?.to_dtype(running.dtype())
        };
        let mut outputs = vec![
            updated(inputs[2], &mut batch_mean.into_iter())?,
            updated(
                inputs[3],
                &mut batch_var.into_iter().map(|v| self.unbiased(v)),
            )?,
        ];
        if let Some(batches) = batches {
            outputs.push(Tensor::scalar(batches));
        }
        Ok(outputs)
    }

    /// The update is state bookkeeping: no gradient flows through it.
    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None; cx.inputs.len()])
    }

    fn output_is_differentiable(&self, _index: usize) -> bool {
        false
    }

    /// The running statistics keep their dtype (f16 stays f16 like PyTorch's buffers); the
    /// kernel computes in f64 whatever the dtype.
    fn computes_half_in_f32(&self) -> bool {
        false
    }
}
