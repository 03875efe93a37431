//! PyTorch's `torch.nn.utils.prune`: masking a module's parameter so that `<name>` becomes
//! `<name>_orig * <name>_mask`, recomputed before every `call`.
//!
//! Pruning `weight` of a module hides the parameter `weight`, registers its tensor as the
//! parameter `weight_orig` and a mask as the buffer `weight_mask` (so a pruned `Linear`'s
//! `state_dict` keys are `bias`, `weight_orig`, `weight_mask`), and rebinds the module's
//! `weight` handle ([`Tensor::rebind`]) to their product, so `forward` reads the masked value
//! unchanged and gradients reach `weight_orig`. Pruning again combines masks as PyTorch's
//! `PruningContainer`: the new amount is taken from what is still unpruned. [`remove`]
//! makes the pruning permanent (`bias`, `weight`).
//!
//! ```
//! use tessera_nn::prune::{is_pruned, l1_unstructured, remove};
//! use tessera_nn::{Linear, ModuleExt};
//!
//! let mut lin = Linear::new(4, 3)?;
//! l1_unstructured(&mut lin, "weight", 0.5)?;
//! assert!(is_pruned(&lin));
//! assert_eq!(
//!     lin.state_dict()?.keys().collect::<Vec<_>>(),
//!     ["bias", "weight_orig", "weight_mask"]
//! );
//! remove(&mut lin, "weight")?;
//! assert_eq!(lin.state_dict()?.keys().collect::<Vec<_>>(), ["bias", "weight"]);
//! # Ok::<(), tessera_nn::NnError>(())
//! ```
//!
//! [`Tensor::rebind`]: tessera_tensor::Tensor::rebind

mod amount;
mod functions;
mod global;
mod method;
mod remove;
mod state;

pub use amount::Amount;
pub use functions::{l1_unstructured, ln_structured, random_structured, random_unstructured};
pub use global::global_unstructured;
pub(crate) use method::Method;
pub use remove::{is_pruned, remove};
pub(crate) use state::Pruned;
