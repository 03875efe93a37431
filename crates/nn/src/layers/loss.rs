//! Loss layers: `MSELoss`, `L1Loss`, `BCELoss`, `CrossEntropyLoss`, `NLLLoss` and `BCEWithLogitsLoss`,
//! called with `(input, target)`; they print as PyTorch's, with no arguments (`MSELoss()`).

use crate::{Forward, ModuleCore, NnError, Result};
use tessera_tensor::Tensor;
use tessera_tensor::functional::{self, CrossEntropyOptions, Reduction};

/// Declares a loss whose only option is the reduction.
macro_rules! reduction_loss {
    ($(#[$doc:meta])* $name:ident => $function:ident) => {
        $(#[$doc])*
        #[derive(crate::Module, Default)]
        pub struct $name {
            core: ModuleCore,
            #[module(skip)]
            pub reduction: Reduction,
        }

        impl $name {
            /// With PyTorch's default reduction, the mean.
            pub fn new() -> Self {
                Self::default()
            }

            pub fn with_reduction(reduction: Reduction) -> Self {
                $name {
                    core: ModuleCore::default(),
                    reduction,
                }
            }
        }

        impl Forward<(Tensor, Tensor)> for $name {
            type Output = Tensor;
            fn forward(&self, (input, target): (Tensor, Tensor)) -> Result<Tensor> {
                Ok(functional::$function(&input, &target, self.reduction)?)
            }
        }
    };
}

reduction_loss! {
    /// `(input - target)^2`, reduced.
    MSELoss => mse_loss
}
reduction_loss! {
    /// `|input - target|`, reduced.
    L1Loss => l1_loss
}
reduction_loss! {
    /// Binary cross entropy of probabilities against float targets of the same shape; each
    /// log term is floored at -100 as PyTorch's.
    BCELoss => binary_cross_entropy
}

/// Declares a class-index loss configured by `CrossEntropyOptions`.
macro_rules! class_loss {
    ($(#[$doc:meta])* $name:ident => $function:ident) => {
        $(#[$doc])*
        #[derive(crate::Module, Default)]
        pub struct $name {
            core: ModuleCore,
            #[module(skip)]
            pub options: CrossEntropyOptions,
        }

        impl $name {
            /// PyTorch's defaults: mean reduction, `ignore_index = -100`, no label smoothing.
            pub fn new() -> Self {
                Self::default()
            }

            pub fn with_options(options: CrossEntropyOptions) -> Self {
                $name {
                    core: ModuleCore::default(),
                    options,
                }
            }
        }

        impl Forward<(Tensor, Tensor)> for $name {
            type Output = Tensor;
            fn forward(&self, (input, target): (Tensor, Tensor)) -> Result<Tensor> {
                Ok(functional::$function(&input, &target, self.options)?)
            }
        }
    };
}

class_loss! {
    /// Cross entropy of logits `[N, C, d...]` (or `[C]`) against class indices; class
    /// weights are not supported.
    CrossEntropyLoss => cross_entropy
}
class_loss! {
    /// Negative log-likelihood of log-probabilities `[N, C, d...]` against class indices
    /// (`label_smoothing` is ignored by PyTorch's `NLLLoss` and should stay 0).
    NLLLoss => nll_loss
}

/// Binary cross entropy of logits against float targets of the same shape, computed stably.
/// The buffers `weight` (per-element rescaling, broadcast) and `pos_weight` (weighing the
/// positive term, broadcast) are optional as in PyTorch.
#[derive(crate::Module, Default)]
pub struct BCEWithLogitsLoss {
    core: ModuleCore,
    #[module(buffer)]
    pub weight: Option<Tensor>,
    #[module(buffer)]
    pub pos_weight: Option<Tensor>,
    #[module(skip)]
    pub reduction: Reduction,
}

impl BCEWithLogitsLoss {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn with_options(
        weight: Option<Tensor>,
        pos_weight: Option<Tensor>,
        reduction: Reduction,
    ) -> Self {
        BCEWithLogitsLoss {
            core: ModuleCore::default(),
            weight,
            pos_weight,
            reduction,
        }
    }
}

impl Forward<(Tensor, Tensor)> for BCEWithLogitsLoss {
    type Output = Tensor;
    fn forward(&self, (input, target): (Tensor, Tensor)) -> Result<Tensor> {
        if input.shape() != target.shape() {
            return Err(NnError::Invalid(format!(
                "BCEWithLogitsLoss: target size ({:?}) must be the same as input size ({:?})",
                target.shape(),
                input.shape()
            )));
        }
        let pos_weight = self.pos_weight.as_ref();
        let Some(weight) = &self.weight else {
            return Ok(functional::binary_cross_entropy_with_logits(
                &input,
                &target,
                pos_weight,
                self.reduction,
            )?);
        };
        let each = functional::binary_cross_entropy_with_logits(
            &input,
            &target,
            pos_weight,
            Reduction::None,
        )?
        .mul(weight)?;
        Ok(match self.reduction {
            Reduction::None => each,
            Reduction::Mean => each.mean_all()?,
            Reduction::Sum => each.sum_all()?,
        })
    }
}
