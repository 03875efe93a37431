//! `LearnableFakeQuantize`, as PyTorch's `_LearnableFakeQuantize` (LSQ): `scale` and
//! `zero_point` are parameters the optimizer trains through the learnable fake-quantize ops.
//! While `static_enabled` (the initial state, as in PyTorch) each forward observes its input
//! and copies the observer's parameters into them; `enable_param_learning` then freezes the
//! observer and lets gradients reach them. With `use_grad_scaling` their gradients are scaled
//! by `1 / sqrt(numel * quant_max)`, the LSQ paper's factor.

use super::fake_quantize::{flag, is_on};
use super::{FakeQuantizeBase, MinMaxObserver};
use crate::{Forward, Module, ModuleCore, ModuleExt, NnError, Parameter, Result};
use tessera_tensor::op::{
    fake_quantize_learnable_per_channel_affine, fake_quantize_learnable_per_tensor_affine,
};
use tessera_tensor::{DType, Tensor};

/// Fake-quantizes its input with a scale and zero point it first observes, then learns.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct LearnableFakeQuantize {
    core: ModuleCore,
    /// The scale (f32, one per channel), a parameter once learning is on.
    pub scale: Parameter,
    /// The zero point as a float (rounded when used), shaped as `scale`.
    pub zero_point: Parameter,
    /// 1 while the forward fake-quantizes (u8 `[1]`, as PyTorch's buffer).
    #[module(buffer)]
    pub fake_quant_enabled: Tensor,
    /// 1 while the forward observes and copies the observer's parameters.
    #[module(buffer)]
    pub static_enabled: Tensor,
    /// 1 while `scale` and `zero_point` require gradients.
    #[module(buffer)]
    pub learning_enabled: Tensor,
    /// The smallest scale learning may reach (f32 epsilon, `[1]`).
    #[module(buffer)]
    pub eps: Tensor,
    /// The observer whose range initializes `scale` and `zero_point`.
    pub activation_post_process: MinMaxObserver,
    #[module(skip)]
    pub quant_min: i64,
    #[module(skip)]
    pub quant_max: i64,
    /// Symmetric parameters (zero point held at 0) rather than affine ones.
    #[module(skip)]
    pub symmetric: bool,
    /// Scales the parameters' gradients by `1 / sqrt(numel * quant_max)`.
    #[module(skip)]
    pub use_grad_scaling: bool,
}

impl LearnableFakeQuantize {
    fn new(
        observer: MinMaxObserver,
        (quant_min, quant_max): (i64, i64),
        symmetric: bool,
        channels: usize,
    ) -> Result<Self> {
        if quant_min >= quant_max {
            return Err(NnError::Invalid(format!(
                "LearnableFakeQuantize: quant_min {quant_min} must be less than quant_max {quant_max}"
            )));
        }
        let fill = |v: f32| -> Result<Parameter> {
            Ok(Parameter::with_requires_grad(
                Tensor::from_vec(vec![v; channels], &[channels])?,
                false,
            ))
        };
        Ok(LearnableFakeQuantize {
            core: ModuleCore::default(),
            scale: fill(1.0)?,
            zero_point: fill(0.0)?,
            fake_quant_enabled: flag(true)?,
            static_enabled: flag(true)?,
            learning_enabled: flag(false)?,
            eps: Tensor::from_vec(vec![f32::EPSILON], &[1])?,
            activation_post_process: observer,
            quant_min,
            quant_max,
            symmetric,
            use_grad_scaling: false,
        })
    }

    /// Activations: per-tensor affine u8 `[0, 255]`, the range Tessera's static int8 ops
    /// read and write.
    pub fn activation() -> Result<Self> {
        LearnableFakeQuantize::new(MinMaxObserver::new()?, (0, 255), false, 1)
    }

    /// Weights of a conv or linear with `channels` output channels: per-channel symmetric
    /// along `ch_axis`, in `quant_range` (`(-128, 127)` for int8, `(-8, 7)` for 4-bit values).
    pub fn weight_per_channel(
        ch_axis: usize,
        channels: usize,
        quant_range: (i64, i64),
    ) -> Result<Self> {
        if channels == 0 {
            return Err(NnError::Invalid(
                "LearnableFakeQuantize: a per-channel quantizer needs at least one channel".into(),
            ));
        }
        let observer = MinMaxObserver::per_channel(ch_axis)?;
        LearnableFakeQuantize::new(observer, quant_range, true, channels)
    }

    /// The same quantizer with the LSQ gradient scaling on or off.
    pub fn with_grad_scaling(mut self, on: bool) -> Self {
        self.use_grad_scaling = on;
        self
    }

    /// Learning on, observation off, fake quantization on (PyTorch's `enable_param_learning`).
    pub fn enable_param_learning(&self) -> Result<()> {
        self.toggle_qparam_learning(true)?;
        self.toggle_fake_quant(true)?;
        self.toggle_observer_update(false)
    }

    /// Observation on, learning off, fake quantization on (`enable_static_estimate`).
    pub fn enable_static_estimate(&self) -> Result<()> {
        self.toggle_qparam_learning(false)?;
        self.toggle_fake_quant(true)?;
        self.toggle_observer_update(true)
    }

    /// Observation on, learning and fake quantization off: the forward returns its input
    /// (`enable_static_observation`).
    pub fn enable_static_observation(&self) -> Result<()> {
        self.toggle_qparam_learning(false)?;
        self.toggle_fake_quant(false)?;
        self.toggle_observer_update(true)
    }

    /// Sets `static_enabled`.
    pub fn toggle_observer_update(&self, on: bool) -> Result<()> {
        self.static_enabled.set_data(&flag(on)?);
        Ok(())
    }

    /// Sets `learning_enabled` and whether `scale` and `zero_point` require gradients.
    pub fn toggle_qparam_learning(&self, on: bool) -> Result<()> {
        self.learning_enabled.set_data(&flag(on)?);
        self.scale.requires_grad_(on)?;
        self.zero_point.requires_grad_(on)?;
        Ok(())
    }

    /// Sets `fake_quant_enabled`.
    pub fn toggle_fake_quant(&self, on: bool) -> Result<()> {
        self.fake_quant_enabled.set_data(&flag(on)?);
        Ok(())
    }

    /// `scale` clamped in place to at least `eps`, as PyTorch does before using it.
    fn clamp_scale(&self) -> Result<()> {
        let eps = self.eps.to_vec::<f32>()?.first().copied().unwrap_or(0.0);
        let clamped = self.scale.detach().clamp(Some(f64::from(eps)), None)?;
        self.scale.set_data(&clamped);
        Ok(())
    }

    /// Observes `x` and copies the observer's parameters into `scale` and `zero_point`.
    fn observe(&self, x: &Tensor) -> Result<()> {
        self.activation_post_process.forward(x.detach())?;
        let params = self
            .activation_post_process
            .calculate_qparams((self.quant_min, self.quant_max), self.symmetric)?;
        let n = params.len();
        if n != self.scale.numel() {
            return Err(NnError::Invalid(format!(
                "LearnableFakeQuantize has {} scales but its observer saw {n} channels",
                self.scale.numel()
            )));
        }
        let scales = params.iter().map(|p| p.scale).collect();
        let zero_points = params.iter().map(|p| p.zero_point as f32).collect();
        self.scale.set_data(&Tensor::from_vec(scales, &[n])?);
        self.zero_point
            .set_data(&Tensor::from_vec(zero_points, &[n])?);
        Ok(())
    }

    fn repr_args(&self) -> String {
        let axis = self.activation_post_process.ch_axis;
        format!(
            "quant_min={}, quant_max={}, symmetric={}, ch_axis={}, use_grad_scaling={}",
            self.quant_min,
            self.quant_max,
            crate::layers::py_bool(self.symmetric),
            axis.map_or(-1, |a| a as i64),
            crate::layers::py_bool(self.use_grad_scaling),
        )
    }
}

impl Forward for LearnableFakeQuantize {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        if is_on(&self.static_enabled)? && !input.is_meta() && input.numel() > 0 {
            self.observe(&input)?;
        } else {
            self.clamp_scale()?;
        }
        if !is_on(&self.fake_quant_enabled)? {
            return Ok(input);
        }
        if self.symmetric {
            let n = self.zero_point.numel();
            self.zero_point.set_data(&Tensor::zeros(&[n], DType::F32)?);
        }
        let grad_factor = if self.use_grad_scaling {
            1.0 / ((input.numel() as f64) * self.quant_max as f64).sqrt()
        } else {
            1.0
        };
        let (qmin, qmax) = (self.quant_min, self.quant_max);
        let (scale, zero_point) = (self.scale.tensor(), self.zero_point.tensor());
        Ok(match self.activation_post_process.ch_axis {
            Some(axis) => fake_quantize_learnable_per_channel_affine(
                &input,
                scale,
                zero_point,
                axis,
                qmin,
                qmax,
                grad_factor,
            )?,
            None => fake_quantize_learnable_per_tensor_affine(
                &input,
                scale,
                zero_point,
                qmin,
                qmax,
                grad_factor,
            )?,
        })
    }
}

impl FakeQuantizeBase for LearnableFakeQuantize {
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
        Ok(self.activation_post_process.ranges()?.is_some())
    }

    /// The scale clamped to `eps` and the zero point rounded (half away from zero) and
    /// clamped to `[quant_min, quant_max]`, as PyTorch's `calculate_qparams`.
    fn calculate_qparams(&self) -> Result<(Tensor, Tensor)> {
        self.clamp_scale()?;
        let (lo, hi) = (self.quant_min as f32, self.quant_max as f32);
        let zero_points: Vec<i64> = self
            .zero_point
            .to_vec::<f32>()?
            .into_iter()
            .map(|z| z.round().clamp(lo, hi) as i64)
            .collect();
        let n = zero_points.len();
        Ok((
            self.scale.deep_clone()?,
            Tensor::from_vec(zero_points, &[n])?,
        ))
    }

    /// PyTorch's `enable_observer`: toggles `static_enabled`.
    fn enable_observer(&self, on: bool) -> Result<()> {
        self.toggle_observer_update(on)
    }

    fn enable_fake_quant(&self, on: bool) -> Result<()> {
        self.toggle_fake_quant(on)
    }
}

/// Switches every `LearnableFakeQuantize` of `module` from observing to learning
/// (`enable_param_learning`); an error, before any switch, if one has not observed yet: run
/// calibration batches first, so that learning starts from the observed parameters.
pub fn enable_param_learning(module: &dyn Module) -> Result<()> {
    let mut learnable = Vec::new();
    for (name, m) in module.named_modules() {
        if let Some(fq) = m.as_any().downcast_ref::<LearnableFakeQuantize>() {
            if !fq.has_observed()? {
                return Err(NnError::Invalid(format!(
                    "LearnableFakeQuantize `{name}` has not observed any value: run calibration batches before enabling learning"
                )));
            }
            learnable.push(fq);
        }
    }
    learnable
        .into_iter()
        .try_for_each(LearnableFakeQuantize::enable_param_learning)
}
