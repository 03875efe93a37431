//! MobileNetV2 as torchvision builds it: `features` (a strided 3x3 stem, 17 inverted residual
//! blocks of depthwise convolutions, a 1x1 head to 1280 channels), global average pooling and
//! `classifier` (dropout, linear), with `width_mult` and torchvision's key layout
//! (`features.<i>.conv.<j>...`), so its state dicts load unchanged.

use super::named::NamedSequential;
use crate::layers::ReLU6;
use crate::layers::{BatchNorm2d, Conv2d, Conv2dOptions, Dropout, Linear};
use crate::{Call, Forward, Layer, Module, ModuleCore, NnError, Result, Sequential};
use tessera_tensor::Tensor;

/// torchvision's `_make_divisible`: `v` rounded to the nearest multiple of `divisor` (at
/// least `divisor`), never more than 10% below `v`.
fn make_divisible(v: f64, divisor: usize) -> usize {
    let d = divisor as f64;
    let rounded = (((v + d / 2.0) as usize) / divisor * divisor).max(divisor);
    if (rounded as f64) < 0.9 * v {
        rounded + divisor
    } else {
        rounded
    }
}

/// torchvision's `Conv2dNormActivation`: convolution without bias ("same" padding), batch
/// norm and `ReLU6(inplace=True)`, children `0`, `1`, `2`.
fn conv_norm_relu6(
    cin: usize,
    cout: usize,
    kernel: usize,
    stride: usize,
    groups: usize,
) -> Result<NamedSequential> {
    let options = Conv2dOptions::default()
        .stride(stride)
        .padding((kernel - 1) / 2)
        .groups(groups)
        .bias(false);
    let layers: Vec<Box<dyn Layer>> = vec![
        Box::new(Conv2d::with_options(cin, cout, kernel, options)?),
        Box::new(BatchNorm2d::new(cout)?),
        Box::new(ReLU6::with_inplace(true)),
    ];
    Ok(NamedSequential::indexed("Conv2dNormActivation", layers))
}

/// An optional 1x1 expansion, a depthwise 3x3 (strided) and a linear 1x1 projection, each
/// with batch norm; the input is added when the shape is kept (torchvision's
/// `InvertedResidual`).
#[derive(Module)]
pub struct InvertedResidual {
    core: ModuleCore,
    pub conv: Sequential,
    /// Whether the input is added to the output (stride 1, as many channels out as in).
    #[module(skip)]
    pub use_res_connect: bool,
}

impl InvertedResidual {
    pub fn new(cin: usize, cout: usize, stride: usize, expand_ratio: usize) -> Result<Self> {
        if !matches!(stride, 1 | 2) {
            return Err(NnError::Invalid(format!(
                "InvertedResidual: stride should be 1 or 2, got {stride}"
            )));
        }
        let hidden = cin * expand_ratio;
        let mut conv = Sequential::new();
        if expand_ratio != 1 {
            conv.append(conv_norm_relu6(cin, hidden, 1, 1, 1)?);
        }
        conv.append(conv_norm_relu6(hidden, hidden, 3, stride, hidden)?);
        let project = Conv2dOptions::default().bias(false);
        conv.append(Conv2d::with_options(hidden, cout, 1, project)?);
        conv.append(BatchNorm2d::new(cout)?);
        Ok(InvertedResidual {
            core: ModuleCore::default(),
            conv,
            use_res_connect: stride == 1 && cin == cout,
        })
    }
}

impl Forward for InvertedResidual {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let out = self.conv.call(x.clone())?;
        if self.use_res_connect {
            Ok(x.add(&out)?)
        } else {
            Ok(out)
        }
    }
}

/// torchvision's `mobilenet_v2(num_classes, width_mult)` (dropout 0.2 before the classifier).
#[derive(Module)]
pub struct MobileNetV2 {
    core: ModuleCore,
    pub features: Sequential,
    pub classifier: Sequential,
}

/// `(expansion t, channels c, repeats n, first stride s)` of each stage, as in the paper.
const INVERTED_RESIDUAL_SETTING: [(usize, usize, usize, usize); 7] = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
];

impl MobileNetV2 {
    /// Every channel count scaled by `width_mult` and rounded to a multiple of 8, except the
    /// last (1280), which only grows (`max(1, width_mult)`), as torchvision.
    pub fn new(num_classes: usize, width_mult: f64) -> Result<Self> {
        if !(width_mult.is_finite() && width_mult > 0.0) {
            return Err(NnError::Invalid(format!(
                "MobileNetV2: width_mult must be a positive number, got {width_mult}"
            )));
        }
        let mut cin = make_divisible(32.0 * width_mult, 8);
        let last = make_divisible(1280.0 * width_mult.max(1.0), 8);
        let mut features = Sequential::new().add(conv_norm_relu6(3, cin, 3, 2, 1)?);
        for (t, c, n, s) in INVERTED_RESIDUAL_SETTING {
            let cout = make_divisible(c as f64 * width_mult, 8);
            for i in 0..n {
                features.append(InvertedResidual::new(
                    cin,
                    cout,
                    if i == 0 { s } else { 1 },
                    t,
                )?);
                cin = cout;
            }
        }
        features.append(conv_norm_relu6(cin, last, 1, 1, 1)?);
        Ok(MobileNetV2 {
            core: ModuleCore::default(),
            features,
            classifier: Sequential::new()
                .add(Dropout::new(0.2)?)
                .add(Linear::new(last, num_classes)?),
        })
    }
}

impl Forward for MobileNetV2 {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.features.call(x)?;
        let pooled = tessera_tensor::functional::adaptive_avg_pool2d(&x, [1, 1])?;
        self.classifier.call(pooled.flatten(1, -1)?)
    }
}

#[cfg(test)]
mod tests {
    use super::make_divisible;

    #[test]
    fn make_divisible_rounds_like_torchvision() {
        assert_eq!(make_divisible(8.0, 8), 8);
        assert_eq!(make_divisible(4.0, 8), 8);
        assert_eq!(make_divisible(24.0 * 0.25, 8), 8);
        assert_eq!(make_divisible(160.0 * 0.25, 8), 40);
        assert_eq!(make_divisible(96.0 * 0.35, 8), 32);
        assert_eq!(make_divisible(32.0 * 1.4, 8), 48);
    }
}
