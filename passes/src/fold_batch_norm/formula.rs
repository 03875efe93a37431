//! The folding formula: eval-mode batch norm after a linear map `y = W x + b` is the linear map
//! with `W' = W * s` and `b' = (b - mean) * s + beta` per output channel, where
//! `s = gamma / sqrt(var + eps)`. Computed in f64 and returned in the weight's dtype.

use crate::{PassError, Result};
use tessera_tensor::Tensor;

/// The running statistics and affine parameters of one eval-mode batch norm.
#[derive(Debug, Clone)]
pub struct BatchNormStats {
    pub mean: Vec<f64>,
    pub var: Vec<f64>,
    /// `None` when the batch norm has no affine weight (gamma = 1).
    pub gamma: Option<Vec<f64>>,
    /// `None` when the batch norm has no affine bias (beta = 0).
    pub beta: Option<Vec<f64>>,
    pub eps: f64,
}

impl BatchNormStats {
    /// Reads the tensors of a batch norm (weight and bias optional).
    pub fn from_tensors(
        mean: &Tensor,
        var: &Tensor,
        gamma: Option<&Tensor>,
        beta: Option<&Tensor>,
        eps: f64,
    ) -> Result<Self> {
        let read = |t: &Tensor| -> Result<Vec<f64>> {
            t.detach()
                .to_vec_f64()
                .map_err(|e| PassError::Unsupported(format!("reading batch norm state: {e}")))
        };
        Ok(BatchNormStats {
            mean: read(mean)?,
            var: read(var)?,
            gamma: gamma.map(read).transpose()?,
            beta: beta.map(read).transpose()?,
            eps,
        })
    }

    /// The number of channels normalised.
    pub fn channels(&self) -> usize {
        self.mean.len()
    }

    /// `gamma / sqrt(var + eps)` per channel.
    pub fn scale(&self) -> Vec<f64> {
        (0..self.channels())
            .map(|c| {
                let gamma = self.gamma.as_ref().map_or(1.0, |g| g[c]);
                gamma / (self.var[c] + self.eps).sqrt()
            })
            .collect()
    }

    /// `beta` per channel (zero without an affine bias).
    fn shift(&self, c: usize) -> f64 {
        self.beta.as_ref().map_or(0.0, |b| b[c])
    }
}

/// Where a weight keeps its output channels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WeightLayout {
    /// `[out, ...]`: convolutions and linear layers.
    OutputFirst,
    /// `[in, out / groups, ...]`: transposed convolutions.
    Transposed { groups: usize },
}

impl WeightLayout {
    /// The number of output channels of a weight of `shape`.
    fn output_channels(self, shape: &[usize]) -> usize {
        match self {
            WeightLayout::OutputFirst => shape[0],
            WeightLayout::Transposed { groups } => shape[1] * groups,
        }
    }

    /// The output channel of the weight element at flat (row-major) index `i`.
    fn channel_of(self, i: usize, shape: &[usize]) -> usize {
        let inner: usize = shape[2..].iter().product();
        match self {
            WeightLayout::OutputFirst => i / (shape[1] * inner),
            WeightLayout::Transposed { groups } => {
                let (in_channel, out_in_group) = (i / (shape[1] * inner), (i / inner) % shape[1]);
                let group = in_channel / (shape[0] / groups);
                group * shape[1] + out_in_group
            }
        }
    }
}

/// The folded weight and bias (the bias always exists after folding), in `weight`'s dtype.
pub fn fold(
    weight: &Tensor,
    bias: Option<&Tensor>,
    stats: &BatchNormStats,
    layout: WeightLayout,
) -> Result<(Tensor, Tensor)> {
    let shape = weight.shape().to_vec();
    let mismatch = |what: String| {
        PassError::Unsupported(format!(
            "cannot fold a batch norm over {} channels into {what}",
            stats.channels()
        ))
    };
    if shape.len() < 2 || layout.output_channels(&shape) != stats.channels() {
        return Err(mismatch(format!("a weight of shape {shape:?}")));
    }
    let read = |t: &Tensor| {
        t.detach()
            .to_vec_f64()
            .map_err(|e| PassError::Unsupported(format!("reading weights: {e}")))
    };
    let w = read(weight)?;
    let b = match bias {
        Some(b) if b.numel() != stats.channels() => {
            return Err(mismatch(format!("a bias of shape {:?}", b.shape())));
        }
        Some(b) => read(b)?,
        None => vec![0.0; stats.channels()],
    };
    let scale = stats.scale();
    let folded_w: Vec<f64> = w
        .iter()
        .enumerate()
        .map(|(i, &x)| x * scale[layout.channel_of(i, &shape)])
        .collect();
    let folded_b: Vec<f64> = (0..stats.channels())
        .map(|c| (b[c] - stats.mean[c]) * scale[c] + stats.shift(c))
        .collect();
    let tensor = |data: Vec<f64>, shape: &[usize]| -> Result<Tensor> {
        Tensor::from_vec(data, shape)
            .and_then(|t| t.to_dtype(weight.dtype()))
            .map_err(|e| PassError::Unsupported(format!("building folded weights: {e}")))
    };
    Ok((
        tensor(folded_w, &shape)?,
        tensor(folded_b, &[stats.channels()])?,
    ))
}
