//! `MinMaxObserver`: an identity module that records the running minimum and maximum of
//! every tensor it sees (PyTorch's observer of the same name), from which calibration derives
//! u8 affine quantization parameters; with a channel axis it keeps one range per channel
//! (PyTorch's `PerChannelMinMaxObserver`), as weight fake quantization needs.

use crate::layers::py_float;
use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::op::quant::{QParams, affine_qparams, symmetric_qparams};
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
    /// The dimension with one range per index (`None`: one range for the whole tensor). The
    /// ranges are then 1-D, empty until the first observation.
    #[module(skip)]
    pub ch_axis: Option<usize>,
}

impl MinMaxObserver {
    pub fn new() -> Result<Self> {
        Ok(MinMaxObserver {
            core: ModuleCore::default(),
            min_val: Tensor::full(&[], f64::INFINITY, DType::F32)?,
            max_val: Tensor::full(&[], f64::NEG_INFINITY, DType::F32)?,
            ch_axis: None,
        })
    }

    /// An observer of one range per index of dimension `ch_axis`.
    pub fn per_channel(ch_axis: usize) -> Result<Self> {
        Ok(MinMaxObserver {
            core: ModuleCore::default(),
            min_val: Tensor::zeros(&[0], DType::F32)?,
            max_val: Tensor::zeros(&[0], DType::F32)?,
            ch_axis: Some(ch_axis),
        })
    }

    /// The observed range of each channel (one for a per-tensor observer), or `None` before
    /// any value was seen.
    pub fn ranges(&self) -> Result<Option<Vec<(f32, f32)>>> {
        let (lo, hi) = (self.min_val.to_vec::<f32>()?, self.max_val.to_vec::<f32>()?);
        let seen = !lo.is_empty() && lo.iter().zip(&hi).all(|(l, h)| l <= h);
        Ok(seen.then(|| lo.into_iter().zip(hi).collect()))
    }

    /// PyTorch's `calculate_qparams` for the range `[quant_min, quant_max]`, per channel:
    /// symmetric (`per_tensor_symmetric`/`per_channel_symmetric`) or affine; an error before
    /// any value was seen.
    pub fn calculate_qparams(
        &self,
        quant_range: (i64, i64),
        symmetric: bool,
    ) -> Result<Vec<QParams>> {
        let ranges = self.ranges()?.ok_or_else(|| {
            NnError::Invalid(
                "MinMaxObserver has not observed any value: run calibration batches first".into(),
            )
        })?;
        Ok(ranges
            .into_iter()
            .map(|(lo, hi)| {
                if symmetric {
                    symmetric_qparams(lo, hi, quant_range)
                } else {
                    affine_qparams(lo, hi, quant_range)
                }
            })
            .collect())
    }

    /// Widens each channel's range by the finite values of `x` along `ch_axis`.
    fn observe_channels(&self, x: &Tensor, axis: usize) -> Result<()> {
        let shape = x.shape();
        let channels = *shape.get(axis).ok_or_else(|| {
            NnError::Invalid(format!(
                "MinMaxObserver: ch_axis {axis} is out of range for an input of shape {shape:?}"
            ))
        })?;
        let inner: usize = shape[axis + 1..].iter().product();
        let mut lo = vec![f32::INFINITY; channels];
        let mut hi = vec![f32::NEG_INFINITY; channels];
        x.with_slice(|v: &[f32]| {
            for (i, &v) in v.iter().enumerate().filter(|(_, v)| v.is_finite()) {
                let c = (i / inner.max(1)) % channels;
                lo[c] = lo[c].min(v);
                hi[c] = hi[c].max(v);
            }
        })?;
        if let Some(old) = self.ranges()?.filter(|r| r.len() == channels) {
            for (c, (l, h)) in old.into_iter().enumerate() {
                lo[c] = lo[c].min(l);
                hi[c] = hi[c].max(h);
            }
        }
        self.min_val.set_data(&Tensor::from_vec(lo, &[channels])?);
        self.max_val.set_data(&Tensor::from_vec(hi, &[channels])?);
        Ok(())
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
        if let Some(axis) = self.ch_axis {
            return format!("ch_axis={axis}");
        }
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
        if let Some(axis) = self.ch_axis {
            self.observe_channels(&x, axis)?;
            return Ok(input);
        }
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
