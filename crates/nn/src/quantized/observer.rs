//! `MinMaxObserver`: an identity module that records the running minimum and maximum of
//! every tensor it sees (PyTorch's observer of the same name), from which calibration derives
//! u8 affine quantization parameters.

use crate::layers::py_float;
use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::op::quant::{QParams, affine_qparams};
use tessera_tensor::{DType, Tensor};

/// Records the running min and max of its input and returns the input unchanged.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct MinMaxObserver {
    core: ModuleCore,
    /// The smallest value seen (`inf` before any).
    #[module(buffer)]
    pub min_val: Tensor,
    /// The largest value seen (`-inf` before any).
    #[module(buffer)]
    pub max_val: Tensor,
}

impl MinMaxObserver {
    pub fn new() -> Result<Self> {
        Ok(MinMaxObserver {
            core: ModuleCore::default(),
            min_val: Tensor::full(&[], f64::INFINITY, DType::F32)?,
            max_val: Tensor::full(&[], f64::NEG_INFINITY, DType::F32)?,
        })
    }

    /// The observed range, or `None` before any (finite) value was seen.
    pub fn range(&self) -> Result<Option<(f32, f32)>> {
        let (lo, hi) = (self.min_val.item::<f32>()?, self.max_val.item::<f32>()?);
        Ok((lo.is_finite() && hi.is_finite() && lo <= hi).then_some((lo, hi)))
    }

    /// u8 `per_tensor_affine` parameters of the observed range (PyTorch's
    /// `MinMaxObserver.calculate_qparams` with `quint8`); an error before calibration.
    pub fn qparams(&self) -> Result<QParams> {
        let (lo, hi) = self.range()?.ok_or_else(|| {
            NnError::Invalid(
                "MinMaxObserver has not observed any value: run calibration batches first".into(),
            )
        })?;
        Ok(affine_qparams(lo, hi, (0, 255)))
    }

    fn repr_args(&self) -> String {
        let read = |t: &Tensor| t.item::<f64>().map_or_else(|_| "?".into(), py_float);
        format!(
            "min_val={}, max_val={}",
            read(&self.min_val),
            read(&self.max_val)
        )
    }
}

impl Forward for MinMaxObserver {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        if input.is_meta() || input.numel() == 0 {
            return Ok(input);
        }
        let x = input.detach().to_dtype(DType::F32)?;
        let (lo, hi) = x.with_slice(|v: &[f32]| {
            v.iter()
                .filter(|v| v.is_finite())
                .fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &v| {
                    (a.min(v), b.max(v))
                })
        })?;
        let (old_lo, old_hi) = (self.min_val.item::<f32>()?, self.max_val.item::<f32>()?);
        self.min_val
            .set_data(&Tensor::full(&[], f64::from(lo.min(old_lo)), DType::F32)?);
        self.max_val
            .set_data(&Tensor::full(&[], f64::from(hi.max(old_hi)), DType::F32)?);
        Ok(input)
    }
}
