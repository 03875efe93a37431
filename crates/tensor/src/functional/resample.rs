//! Resampling of `[N, C, H, W]` images: `pixel_shuffle` (a reshape, permute and reshape) and
//! `interpolate` (nearest or bilinear, as PyTorch's `F.interpolate`), composed from
//! `index_select`, elementwise ops and views, so autograd, graphs and compilers see only
//! ordinary ops.

use crate::{DType, Result, Tensor, TensorError};

/// PyTorch's `pixel_shuffle`: `[*, C * r^2, H, W]` to `[*, C, H * r, W * r]`, with
/// `out[.., c, h * r + i, w * r + j] = in[.., c * r * r + i * r + j, h, w]`.
pub fn pixel_shuffle(input: &Tensor, upscale_factor: usize) -> Result<Tensor> {
    let shape = input.shape();
    let r = upscale_factor;
    let invalid = |msg: String| Err(TensorError::invalid("pixel_shuffle", msg));
    if shape.len() < 3 {
        return invalid(format!(
            "expected at least 3 dimensions, got shape {shape:?}"
        ));
    }
    let Some(r2) = r.checked_mul(r).filter(|&r2| r2 > 0) else {
        return invalid(format!(
            "upscale_factor must be positive and small, got {r}"
        ));
    };
    let rank = shape.len();
    let (lead, [c, h, w]) = (
        &shape[..rank - 3],
        [shape[rank - 3], shape[rank - 2], shape[rank - 1]],
    );
    if c % r2 != 0 {
        return invalid(format!(
            "channels ({c}) of input {shape:?} must be divisible by upscale_factor^2 ({r2})"
        ));
    }
    let (oh, ow) = match (h.checked_mul(r), w.checked_mul(r)) {
        (Some(oh), Some(ow)) => (oh, ow),
        _ => return invalid(format!("output size of input {shape:?} overflows")),
    };
    let split: Vec<usize> = lead.iter().copied().chain([c / r2, r, r, h, w]).collect();
    let n = lead.len();
    // [.., C, r, r, H, W] -> [.., C, H, r, W, r].
    let order: Vec<usize> = (0..n).chain([n, n + 3, n + 1, n + 4, n + 2]).collect();
    let out: Vec<usize> = lead.iter().copied().chain([c / r2, oh, ow]).collect();
    input.reshape(&split)?.permute(&order)?.reshape(&out)
}

/// How [`interpolate`] computes an output pixel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InterpolateMode {
    /// PyTorch's legacy `'nearest'`: `src = min(floor(dst * scale), in - 1)`.
    #[default]
    Nearest,
    /// `'bilinear'`, from the four nearest input pixels.
    Bilinear,
}

/// The output plane of [`interpolate`]: a size, or a scale factor per axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum InterpolateSize {
    /// `size=(h, w)`: the coordinate scale is `in / out`.
    Size([usize; 2]),
    /// `scale_factor=(sh, sw)`: the output is `floor(in * s)` and the coordinate scale is
    /// `1 / s` (PyTorch's `recompute_scale_factor=None`), not `in / out`.
    ScaleFactor([f64; 2]),
}

/// One output coordinate along an axis: the two input positions and their weights.
struct Tap {
    lower: i64,
    upper: i64,
    upper_weight: f64,
}

/// PyTorch's `area_pixel_compute_scale`.
fn coordinate_scale(input: usize, output: usize, factor: Option<f64>, align_corners: bool) -> f64 {
    if align_corners {
        return if output > 1 {
            (input as f64 - 1.0) / (output as f64 - 1.0)
        } else {
            0.0
        };
    }
    match factor {
        Some(f) if f > 0.0 => 1.0 / f,
        _ => input as f64 / output as f64,
    }
}

/// The bilinear taps along one axis (PyTorch's `area_pixel_compute_source_index`).
fn bilinear_taps(input: usize, output: usize, scale: f64, align_corners: bool) -> Result<Vec<Tap>> {
    let mut taps = reserve(output)?;
    taps.extend((0..output).map(|dst| {
        let src = if align_corners {
            dst as f64 * scale
        } else {
            (scale * (dst as f64 + 0.5) - 0.5).max(0.0)
        };
        let lower = (src.floor() as i64).min(input as i64 - 1);
        let upper = if lower < input as i64 - 1 {
            lower + 1
        } else {
            lower
        };
        Tap {
            lower,
            upper,
            upper_weight: src - lower as f64,
        }
    }));
    Ok(taps)
}

/// The nearest input position of each output position along one axis, computed in f32 as
/// PyTorch's CPU kernel does.
fn nearest_positions(input: usize, output: usize, scale: f64) -> Result<Vec<i64>> {
    let mut positions = reserve(output)?;
    positions.extend((0..output).map(|dst| {
        let src = (dst as f32 * scale as f32).floor() as i64;
        src.min(input as i64 - 1)
    }));
    Ok(positions)
}

/// Room for `len` per-position entries, or `OutOfMemory` (a hostile output size).
fn reserve<T>(len: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| TensorError::OutOfMemory {
            op: "interpolate".into(),
            shape: vec![len],
            bytes: len.saturating_mul(std::mem::size_of::<T>()),
        })?;
    Ok(v)
}

fn index(positions: Vec<i64>) -> Result<Tensor> {
    let n = positions.len();
    Tensor::from_vec(positions, &[n])
}

/// Interpolates `x` along `dim` (2 or 3 of a 4-D tensor) with the given taps.
fn bilinear_axis(x: &Tensor, dim: isize, taps: &[Tap]) -> Result<Tensor> {
    let lower = x.index_select(dim, &index(taps.iter().map(|t| t.lower).collect())?)?;
    let upper = x.index_select(dim, &index(taps.iter().map(|t| t.upper).collect())?)?;
    let shape: Vec<usize> = if dim == 2 {
        vec![taps.len(), 1]
    } else {
        vec![taps.len()]
    };
    let weight = |f: fn(&Tap) -> f64| -> Result<Tensor> {
        Tensor::from_vec(taps.iter().map(f).collect::<Vec<f64>>(), &shape)?.to_dtype(x.dtype())
    };
    let upper_weight = weight(|t| t.upper_weight)?;
    let lower_weight = weight(|t| 1.0 - t.upper_weight)?;
    lower.mul(&lower_weight)?.add(&upper.mul(&upper_weight)?)
}

/// PyTorch's `F.interpolate` of a float `[N, C, H, W]` input to the plane given by `size`;
/// `align_corners` applies to bilinear only (PyTorch refuses it for nearest).
pub fn interpolate(
    input: &Tensor,
    size: InterpolateSize,
    mode: InterpolateMode,
    align_corners: bool,
) -> Result<Tensor> {
    let shape = input.shape();
    let invalid = |msg: String| Err(TensorError::invalid("interpolate", msg));
    if shape.len() != 4 {
        return invalid(format!(
            "expected a 4-D [N, C, H, W] input, got shape {shape:?}"
        ));
    }
    if !matches!(
        input.dtype(),
        DType::F32 | DType::F64 | DType::F16 | DType::BF16
    ) {
        return Err(TensorError::dtype("interpolate", input.dtype()));
    }
    if align_corners && mode == InterpolateMode::Nearest {
        return invalid("align_corners only has an effect in bilinear mode".into());
    }
    let plane = [shape[2], shape[3]];
    let mut out = [0usize; 2];
    let mut factors = [None; 2];
    for axis in 0..2 {
        out[axis] = match size {
            InterpolateSize::Size(s) => s[axis],
            InterpolateSize::ScaleFactor(f) => {
                let scaled = plane[axis] as f64 * f[axis];
                let finite = f[axis] > 0.0 && scaled < (1u64 << 40) as f64;
                if !finite {
                    return invalid(format!("scale_factor {f:?} must be positive and finite"));
                }
                factors[axis] = Some(f[axis]);
                scaled.floor() as usize
            }
        };
    }
    if plane.contains(&0) || out.contains(&0) {
        return invalid(format!(
            "input plane {plane:?} and output plane {out:?} must be non-empty"
        ));
    }
    let mut y = input.clone();
    for axis in 0..2 {
        let dim = 2 + axis as isize;
        let scale = coordinate_scale(plane[axis], out[axis], factors[axis], align_corners);
        y = match mode {
            InterpolateMode::Nearest => y.index_select(
                dim,
                &index(nearest_positions(plane[axis], out[axis], scale)?)?,
            )?,
            InterpolateMode::Bilinear => {
                let taps = bilinear_taps(plane[axis], out[axis], scale, align_corners)?;
                bilinear_axis(&y, dim, &taps)?
            }
        };
    }
    Ok(y)
}
