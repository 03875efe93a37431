//! Resampling layers: `Upsample` (nearest or bilinear, over `functional::interpolate`) and
//! `PixelShuffle`; both print as PyTorch's.

use super::options::Size2;
use super::python::py_float;
use crate::{Forward, ModuleCore, Result};
use tessera_tensor::Tensor;
use tessera_tensor::functional::{self, InterpolateMode, InterpolateSize};

/// Upsamples `[N, C, H, W]` images to a fixed size or by a scale factor.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct Upsample {
    core: ModuleCore,
    #[module(skip)]
    pub size: Option<Size2>,
    #[module(skip)]
    pub scale_factor: Option<f64>,
    #[module(skip)]
    pub mode: InterpolateMode,
    /// Bilinear only: align the corner pixels of input and output.
    pub align_corners: bool,
}

impl Upsample {
    /// To a fixed output plane (`size=` in PyTorch).
    pub fn with_size(size: impl Into<Size2>, mode: InterpolateMode) -> Self {
        Upsample {
            core: ModuleCore::default(),
            size: Some(size.into()),
            scale_factor: None,
            mode,
            align_corners: false,
        }
    }

    /// By `scale_factor` along both axes; coordinates scale by `1 / scale_factor`.
    pub fn with_scale_factor(scale_factor: f64, mode: InterpolateMode) -> Self {
        Upsample {
            core: ModuleCore::default(),
            size: None,
            scale_factor: Some(scale_factor),
            mode,
            align_corners: false,
        }
    }

    /// Sets `align_corners` (bilinear only; PyTorch does not print it).
    pub fn align_corners(mut self, align_corners: bool) -> Self {
        self.align_corners = align_corners;
        self
    }

    fn repr_args(&self) -> String {
        let info = match (self.scale_factor, self.size) {
            (Some(f), _) => format!("scale_factor={}", py_float(f)),
            (None, Some(size)) => format!("size={size}"),
            (None, None) => "size=None".into(),
        };
        let mode = match self.mode {
            InterpolateMode::Nearest => "nearest",
            InterpolateMode::Bilinear => "bilinear",
        };
        format!("{info}, mode='{mode}'")
    }
}

impl Forward for Upsample {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        let size = match (self.scale_factor, self.size) {
            (Some(f), _) => InterpolateSize::ScaleFactor([f, f]),
            (None, Some(size)) => InterpolateSize::Size(size.pair()),
            (None, None) => {
                return Err(crate::NnError::Invalid(
                    "Upsample: either size or scale_factor must be given".into(),
                ));
            }
        };
        Ok(functional::interpolate(
            &input,
            size,
            self.mode,
            self.align_corners,
        )?)
    }
}

/// Rearranges `[*, C * r^2, H, W]` into `[*, C, H * r, W * r]`.
#[derive(crate::Module)]
#[module(extra_repr = "repr_args")]
pub struct PixelShuffle {
    core: ModuleCore,
    pub upscale_factor: usize,
}

impl PixelShuffle {
    pub fn new(upscale_factor: usize) -> Self {
        PixelShuffle {
            core: ModuleCore::default(),
            upscale_factor,
        }
    }

    fn repr_args(&self) -> String {
        format!("upscale_factor={}", self.upscale_factor)
    }
}

impl Forward for PixelShuffle {
    type Output = Tensor;
    fn forward(&self, input: Tensor) -> Result<Tensor> {
        Ok(functional::pixel_shuffle(&input, self.upscale_factor)?)
    }
}
