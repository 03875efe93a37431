//! `FakeQuantize`, as PyTorch's `torch.ao.quantization.FakeQuantize`: in training it observes
//! the range of what flows through (when `observer_enabled`), sets its `scale` and
//! `zero_point` buffers from that range, and returns the input fake-quantized with them (when
//! `fake_quant_enabled`), so that gradients flow by the straight-through estimator.

use super::{FakeQuantizeBase, MinMaxObserver};
use crate::layers::py_float;
use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::Tensor;
use tessera_tensor::op::quant::QParams;
use tessera_tensor::op::{fake_quantize_per_channel_affine, fake_quantize_per_tensor_affine};

/// Observes its input's range and fake-quantizes the input to `[quant_min, quant_max]`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct FakeQuantize {
    core: ModuleCore,
    /// 1 while the forward fake-quantizes (u8 `[1]`, as PyTorch's buffer).
    #[module(buffer)]
    pub fake_quant_enabled: Tensor,
    /// 1 while the forward observes and updates `scale` and `zero_point`.
    #[module(buffer)]
    pub observer_enabled: Tensor,
    /// The scale (f32, `[1]`, or one per channel after the first observation).
    #[module(buffer)]
    pub scale: Tensor,
    /// The zero point (i64, shaped as `scale`).
    #[module(buffer)]
    pub zero_point: Tensor,
    /// The observer whose range sets `scale` and `zero_point`.
    pub activation_post_process: MinMaxObserver,
    #[module(skip)]
    pub quant_min: i64,
    #[module(skip)]
    pub quant_max: i64,
    /// Symmetric parameters (zero point 0) rather than affine ones.
    #[module(skip)]
    pub symmetric: bool,
}

/// A PyTorch-style switch buffer: u8 `[1]`, 1 for on.
pub(super) fn flag(on: bool) -> Result<Tensor> {
    Ok(Tensor::from_vec(vec![u8::from(on)], &[1])?)
}

/// Whether a switch buffer is on.
pub(super) fn is_on(flag: &Tensor) -> Result<bool> {
    Ok(flag.to_vec::<u8>()?.first().is_some_and(|v| *v != 0))
}

impl FakeQuantize {
    fn new(
        observer: MinMaxObserver,
        (quant_min, quant_max): (i64, i64),
        symmetric: bool,
    ) -> Result<Self> {
        Ok(FakeQuantize {
            core: ModuleCore::default(),
            fake_quant_enabled: flag(true)?,
            observer_enabled: flag(true)?,
            scale: Tensor::from_vec(vec![1f32], &[1])?,
            zero_point: Tensor::from_vec(vec![0i64], &[1])?,
            activation_post_process: observer,
            quant_min,
            quant_max,
            symmetric,
        })
    }

    /// Activations: per-tensor affine u8 `[0, 255]` from a min/max observer, the range
    /// Tessera's static int8 ops read and write.
    pub fn activation() -> Result<Self> {
        FakeQuantize::new(MinMaxObserver::new()?, (0, 255), false)
    }

    /// Weights of a conv or linear: per-channel symmetric along `ch_axis`, in `quant_range`
    /// (`(-128, 127)`: PyTorch's `default_per_channel_weight_fake_quant`; `(-8, 7)`: 4-bit
    /// values an int8 weight holds).
    pub fn weight_per_channel(ch_axis: usize, quant_range: (i64, i64)) -> Result<Self> {
        FakeQuantize::new(MinMaxObserver::per_channel(ch_axis)?, quant_range, true)
    }

    /// Turns observation (and the update of `scale` and `zero_point`) on or off.
    pub fn enable_observer(&self, on: bool) -> Result<()> {
        self.observer_enabled.set_data(&flag(on)?);
        Ok(())
    }

    /// Turns fake quantization on or off (off: the forward returns its input).
    pub fn enable_fake_quant(&self, on: bool) -> Result<()> {
        self.fake_quant_enabled.set_data(&flag(on)?);
        Ok(())
    }

    /// Whether the observer has seen any value (before that, `scale` and `zero_point` are
    /// PyTorch's initial 1 and 0).
    pub fn has_observed(&self) -> Result<bool> {
        Ok(self.activation_post_process.ranges()?.is_some())
    }

    /// The per-tensor parameters the forward uses; an error for a per-channel module.
    pub fn qparams(&self) -> Result<QParams> {
        match (
            self.scale.to_vec::<f32>()?.as_slice(),
            self.zero_point.to_vec::<i64>()?.as_slice(),
        ) {
            ([scale], [zero_point]) => Ok(QParams::new(*scale, *zero_point)),
            (scales, _) => Err(NnError::Invalid(format!(
                "FakeQuantize has {} scales: per-tensor parameters were asked of a per-channel module",
                scales.len()
            ))),
        }
    }

    /// Observes `x` and sets `scale` and `zero_point` from the observer's range.
    fn observe(&self, x: &Tensor) -> Result<()> {
        self.activation_post_process.forward(x.detach())?;
        let params = self
            .activation_post_process
            .calculate_qparams((self.quant_min, self.quant_max), self.symmetric)?;
        let n = params.len();
        self.scale.set_data(&Tensor::from_vec(
            params.iter().map(|p| p.scale).collect(),
            &[n],
        )?);
        self.zero_point.set_data(&Tensor::from_vec(
            params.iter().map(|p| p.zero_point).collect(),
            &[n],
        )?);
        Ok(())
    }

    fn repr_args(&self) -> String {
        let floats = |t: &Tensor| {
            t.to_vec_f64().map_or_else(
                |_| "?".into(),
                |v| {
                    v.iter()
                        .map(|x| py_float(*x))
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            )
        };
        let integers = |t: &Tensor| {
            t.to_vec_f64().map_or_else(
                |_| "?".into(),
                |v| {
                    v.iter()
                        .map(|x| (*x as i64).to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                },
            )
        };
        let axis = self.activation_post_process.ch_axis;
        let qscheme = match (axis.is_some(), self.symmetric) {
            (true, true) => "torch.per_channel_symmetric",
            (true, false) => "torch.per_channel_affine",
            (false, true) => "torch.per_tensor_symmetric",
            (false, false) => "torch.per_tensor_affine",
        };
        format!(
            "fake_quant_enabled=[{}], observer_enabled=[{}], quant_min={}, quant_max={}, qscheme={qscheme}, ch_axis={}, scale=[{}], zero_point=[{}]",
            integers(&self.fake_quant_enabled),
            integers(&self.observer_enabled),
            self.quant_min,
            self.quant_max,
            axis.map_or(-1, |a| a as i64),
            floats(&self.scale),
            integers(&self.zero_point),
        )
    }
}

impl Forward for FakeQuantize {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        if is_on(&self.observer_enabled)? && !input.is_meta() && input.numel() > 0 {
            self.observe(&input)?;
        }
        if !is_on(&self.fake_quant_enabled)? {
            return Ok(input);
        }
        let (qmin, qmax) = (self.quant_min, self.quant_max);
        if self.activation_post_process.ch_axis.is_some() && !self.has_observed()? {
            return Err(NnError::Invalid(
                "FakeQuantize (per channel) has no scales yet: run it once with its observer enabled"
                    .into(),
            ));
        }
        Ok(match self.activation_post_process.ch_axis {
            Some(axis) => fake_quantize_per_channel_affine(
                &input,
                &self.scale,
                &self.zero_point,
                axis,
                qmin,
                qmax,
            )?,
            None => {
                fake_quantize_per_tensor_affine(&input, &self.scale, &self.zero_point, qmin, qmax)?
            }
        })
    }
}

impl FakeQuantizeBase for FakeQuantize {
    fn quant_range(&self) -> (i64, i64) {
        (self.quant_min, self.quant_max)
    }

    fn is_symmetric(&self) -> bool {
        self.symmetric
    }

    fn ch_axis(&self) -> Option<usize> {
        self.activation_post_process.ch_axis
    }

    fn has_observed(&self) -> Result<bool> {
        FakeQuantize::has_observed(self)
    }

    /// Copies of the `scale` and `zero_point` buffers.
    fn calculate_qparams(&self) -> Result<(Tensor, Tensor)> {
        Ok((self.scale.deep_clone()?, self.zero_point.deep_clone()?))
    }

    fn enable_observer(&self, on: bool) -> Result<()> {
        FakeQuantize::enable_observer(self, on)
    }

    fn enable_fake_quant(&self, on: bool) -> Result<()> {
        FakeQuantize::enable_fake_quant(self, on)
    }
}
