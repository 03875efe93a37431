//! Loss layers with an option besides the reduction: `SmoothL1Loss` (`beta`), `HuberLoss`
//! (`delta`), `KLDivLoss` (`log_target`, `batchmean`) and `MarginRankingLoss` (`margin`,
//! called with `(input1, input2, target)`); all print as PyTorch's, with no arguments.

use crate::{Forward, ModuleCore, Result};
use tessera_tensor::Tensor;
use tessera_tensor::functional::{self, KlDivReduction, Reduction};

/// Declares a loss with a reduction and one `f64` option.
macro_rules! scalar_option_loss {
    ($(#[$doc:meta])* $name:ident, $option:ident = $default:expr => $function:ident) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        pub struct $name {
            core: ModuleCore,
            #[module(skip)]
            pub reduction: Reduction,
            pub $option: f64,
        }

        impl Default for $name {
            fn default() -> Self {
                $name::new(Reduction::Mean, $default)
            }
        }

        impl $name {
            pub fn new(reduction: Reduction, $option: f64) -> Self {
                $name {
                    core: ModuleCore::default(),
                    reduction,
                    $option,
                }
            }
        }

        impl Forward<(Tensor, Tensor)> for $name {
            type Output = Tensor;
            fn forward(&self, (input, target): (Tensor, Tensor)) -> Result<Tensor> {
                Ok(functional::$function(&input, &target, self.reduction, self.$option)?)
            }
        }
    };
}

scalar_option_loss! {
    /// `0.5 * d^2 / beta` where `|d| < beta`, else `|d| - 0.5 * beta` (PyTorch's default
    /// `beta = 1.0`; `beta = 0` is the L1 loss).
    SmoothL1Loss, beta = 1.0 => smooth_l1_loss
}
scalar_option_loss! {
    /// `0.5 * d^2` where `|d| < delta`, else `delta * (|d| - 0.5 * delta)` (PyTorch's default
    /// `delta = 1.0`).
    HuberLoss, delta = 1.0 => huber_loss
}
/// `max(0, -y * (x1 - x2) + margin)` with `y` 1 or -1, called with
/// `(input1, input2, target)`; PyTorch's default margin is 0.
#[derive(crate::Module, Default)]
pub struct MarginRankingLoss {
    core: ModuleCore,
    #[module(skip)]
    pub reduction: Reduction,
    pub margin: f64,
}

impl MarginRankingLoss {
    pub fn new(reduction: Reduction, margin: f64) -> Self {
        MarginRankingLoss {
            core: ModuleCore::default(),
            reduction,
            margin,
        }
    }
}

impl Forward<(Tensor, Tensor, Tensor)> for MarginRankingLoss {
    type Output = Tensor;
    fn forward(&self, (input1, input2, target): (Tensor, Tensor, Tensor)) -> Result<Tensor> {
        Ok(functional::margin_ranking_loss(
            &input1,
            &input2,
            &target,
            self.margin,
            self.reduction,
        )?)
    }
}

/// The Kullback-Leibler divergence of log-probabilities `input` from `target` (probabilities,
/// or log-probabilities with `log_target`); PyTorch's default reduction is the element mean,
/// `KlDivReduction::BatchMean` gives the true divergence.
#[derive(crate::Module, Default)]
#[module(name = "KLDivLoss")]
pub struct KLDivLoss {
    core: ModuleCore,
    #[module(skip)]
    pub reduction: KlDivReduction,
    pub log_target: bool,
}

impl KLDivLoss {
    pub fn new(reduction: KlDivReduction, log_target: bool) -> Self {
        KLDivLoss {
            core: ModuleCore::default(),
            reduction,
            log_target,
        }
    }
}

impl Forward<(Tensor, Tensor)> for KLDivLoss {
    type Output = Tensor;
    fn forward(&self, (input, target): (Tensor, Tensor)) -> Result<Tensor> {
        Ok(functional::kl_div(
            &input,
            &target,
            self.reduction,
            self.log_target,
        )?)
    }
}
