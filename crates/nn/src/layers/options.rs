//! What layer constructors share: the `options!` macro that declares an options struct with
//! PyTorch's defaults and chainable setters, [`Size2`] (an `int` or a pair, printed the way it
//! was given), and making parameters of the requested dtype and device.

use crate::{Parameter, Result};
use tessera_tensor::{DType, Device, Tensor};

/// Declares `pub struct $name` with public fields, `Default` (PyTorch's defaults) and one
/// setter per field (taking any [`Setting`] of the field's type):
/// `Conv2dOptions::default().stride(2).padding(1)`.
macro_rules! options {
    ($(#[$meta:meta])* $name:ident { $($(#[$fmeta:meta])* $field:ident : $ty:ty = $default:expr),* $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, PartialEq)]
        pub struct $name {
            $($(#[$fmeta])* pub $field: $ty,)*
        }

        impl Default for $name {
            fn default() -> Self {
                $name { $($field: $default,)* }
            }
        }

        impl $name {
            $(
                $(#[$fmeta])*
                pub fn $field(mut self, value: impl $crate::layers::Setting<$ty>) -> Self {
                    self.$field = value.into_setting();
                    self
                }
            )*
        }
    };
}
pub(crate) use options;

/// A value an options setter accepts for a field of type `T`: a `T` itself, and for sizes
/// an `int`, `[h, w]` or `(h, w)` (also where the size is optional). Unlike `Into`, an
/// integer literal infers the field's own type (`groups(2)` for a `usize`).
pub trait Setting<T> {
    fn into_setting(self) -> T;
}

impl<T> Setting<T> for T {
    fn into_setting(self) -> T {
        self
    }
}

impl Setting<Option<f64>> for f64 {
    fn into_setting(self) -> Option<f64> {
        Some(self)
    }
}

impl Setting<Option<usize>> for usize {
    fn into_setting(self) -> Option<usize> {
        Some(self)
    }
}

impl Setting<Option<i64>> for i64 {
    fn into_setting(self) -> Option<i64> {
        Some(self)
    }
}

macro_rules! size_settings {
    ($($from:ty),*) => {
        $(
            impl Setting<Size2> for $from {
                fn into_setting(self) -> Size2 {
                    Size2::from(self)
                }
            }

            impl Setting<Option<Size2>> for $from {
                fn into_setting(self) -> Option<Size2> {
                    Some(Size2::from(self))
                }
            }
        )*
    };
}

size_settings!(usize, [usize; 2], (usize, usize));

impl Setting<Option<Size2>> for Size2 {
    fn into_setting(self) -> Option<Size2> {
        Some(self)
    }
}

/// A 2-D size given as one `int` (used for both dims) or a `(height, width)` pair; it prints
/// as given, as PyTorch's pooling reprs do (`kernel_size=2`, `kernel_size=(2, 3)`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size2 {
    Int(usize),
    Pair([usize; 2]),
}

impl Size2 {
    /// `[height, width]`.
    pub fn pair(self) -> [usize; 2] {
        match self {
            Size2::Int(n) => [n, n],
            Size2::Pair(p) => p,
        }
    }
}

impl From<usize> for Size2 {
    fn from(n: usize) -> Self {
        Size2::Int(n)
    }
}

impl From<[usize; 2]> for Size2 {
    fn from(p: [usize; 2]) -> Self {
        Size2::Pair(p)
    }
}

impl From<(usize, usize)> for Size2 {
    fn from((h, w): (usize, usize)) -> Self {
        Size2::Pair([h, w])
    }
}

impl std::fmt::Display for Size2 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Size2::Int(n) => write!(f, "{n}"),
            Size2::Pair([h, w]) => write!(f, "({h}, {w})"),
        }
    }
}

/// A zero-filled tensor of `dtype` on `device` (a device without a driver is the tensor
/// crate's `DeviceUnavailable` error).
pub(crate) fn zeros(shape: &[usize], dtype: DType, device: Device) -> Result<Tensor> {
    Ok(Tensor::zeros(shape, dtype)?.to_device(device)?)
}

/// A zero-filled parameter; the layer's `reset_parameters` gives it its initial values.
pub(crate) fn parameter(shape: &[usize], dtype: DType, device: Device) -> Result<Parameter> {
    Ok(Parameter::new(zeros(shape, dtype, device)?))
}

/// A zero parameter of `shape` when `wanted` (a layer's optional bias), else `None`.
pub(crate) fn optional_parameter(
    wanted: bool,
    shape: &[usize],
    dtype: DType,
    device: Device,
) -> Result<Option<Parameter>> {
    wanted.then(|| parameter(shape, dtype, device)).transpose()
}

/// Runs a layer's default initialisation unless inside `init::skip_init`.
pub(crate) fn initialized<L>(layer: L, reset: impl FnOnce(&L) -> Result<()>) -> Result<L> {
    if !crate::init::is_init_skipped() {
        reset(&layer)?;
    }
    Ok(layer)
}
