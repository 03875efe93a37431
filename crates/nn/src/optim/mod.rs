//! Optimizers and learning-rate schedulers with `torch.optim` semantics: the [`Optimizer`]
//! trait, [`ParamGroup`], and re-exports of every optimizer and scheduler.
//!
//! ```
//! use tessera_nn::optim::{LrScheduler, Optimizer, SGD, SgdOptions, StepLR};
//! use tessera_tensor::Tensor;
//!
//! let w = Tensor::from_vec(vec![1.0f32, -2.0], &[2])?.requires_grad_(true)?;
//! let options = SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() };
//! let mut opt = SGD::new(vec![w.clone()], options)?;
//! let mut sched = StepLR::new(&mut opt, 2, 0.5)?;
//! for _ in 0..3 {
//!     opt.zero_grad(true);
//!     w.mul(&w)?.sum_all()?.backward()?;
//!     opt.step()?;
//!     sched.step(&mut opt)?;
//! }
//! assert_eq!(sched.get_last_lr(), [0.05]);
//! assert!(w.to_vec::<f32>()?[0].abs() < 1.0);
//! # Ok::<(), tessera_nn::NnError>(())
//! ```

mod adam;
mod adamw;
mod cosine_annealing_lr;
mod lr_scheduler;
mod rmsprop;
mod sgd;
mod state;
mod state_snapshot;
mod step_lr;
mod update_sink;

pub use adam::{Adam, AdamOptions};
pub use adamw::{AdamW, AdamWOptions};
pub use cosine_annealing_lr::CosineAnnealingLR;
pub use lr_scheduler::LrScheduler;
pub use rmsprop::{RMSprop, RmsPropOptions};
pub use sgd::{SGD, SgdOptions};
pub use state_snapshot::StateSnapshot;
pub use step_lr::StepLR;
pub use update_sink::{EagerUpdate, UpdateSink};

use crate::{Result, Value};
use tessera_tensor::Tensor;

/// What every optimizer offers, so that schedulers and training loops work on any of them.
/// The [`Optimizer`] methods that every optimizer answers from its `inner` param groups and
/// state (only `step` differs between optimizers).
macro_rules! forward_to_groups {
    () => {
        fn zero_grad(&self, set_to_none: bool) {
            self.inner.zero_grad(set_to_none)
        }

        fn param_groups(&self) -> &[ParamGroup] {
            &self.inner.groups
        }

        fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
            &mut self.inner.groups
        }

        fn state_dict(&self) -> Value {
            self.inner.state_dict()
        }

        fn load_state_dict(&mut self, state_dict: &Value) -> Result<()> {
            self.inner.load_state_dict(state_dict)
        }

        fn save_state(&self) -> super::StateSnapshot {
            super::StateSnapshot::new(self.inner.state.clone())
        }

        fn restore_state(&mut self, snapshot: super::StateSnapshot) {
            if let Some(state) = snapshot.into_state() {
                self.inner.state = state;
            }
        }
    };
}
pub(crate) use forward_to_groups;

/// Declares an optimizer: a struct over its param groups (`Groups<$state>`), with `new` and
/// `add_param_group`, which store each group's options as `GroupOptions::$variant`.
macro_rules! optimizer_over_groups {
    ($(#[$doc:meta])* $name:ident, $state:ty, $options:ty, $variant:ident) => {
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name {
            inner: Groups<$state>,
        }

        impl $name {
            /// One group of `params` with `options`.
            #[allow(clippy::useless_conversion)]
            pub fn new(params: Vec<Tensor>, options: $options) -> Result<Self> {
                let options = GroupOptions::$variant(options.into());
                Ok($name {
                    inner: Groups::new(stringify!($name), params, options)?,
                })
            }

            /// Adds a group with its own options (e.g. `lr: 0.1, ..Default::default()`).
            #[allow(clippy::useless_conversion)]
            pub fn add_param_group(&mut self, params: Vec<Tensor>, options: $options) -> Result<()> {
                self.inner
                    .add_param_group(params, GroupOptions::$variant(options.into()))
            }
        }
    };
}
pub(crate) use optimizer_over_groups;

pub trait Optimizer {
    /// Applies one update to every parameter that has a gradient (others are skipped).
    fn step(&mut self) -> Result<()>;

    /// The step as update ops sent to `sink`: [`EagerUpdate`] applies them now (what
    /// [`Optimizer::step`] does for the optimizers that have update ops), a compiled training
    /// step records them into its graph. Optimizers without update ops refuse.
    fn step_with(&mut self, sink: &mut dyn UpdateSink) -> Result<()> {
        let _ = sink;
        Err(crate::NnError::Invalid(
            "this optimizer has no update ops (SGD, Adam and AdamW have): it can only step eagerly"
                .into(),
        ))
    }

    /// Clears the gradients: to `None` when `set_to_none` (PyTorch's default), else to zeros.
    fn zero_grad(&self, set_to_none: bool);

    fn param_groups(&self) -> &[ParamGroup];

    /// Mutable groups, e.g. for a scheduler setting `lr`.
    fn param_groups_mut(&mut self) -> &mut [ParamGroup];

    /// `{"state": {index: {...}}, "param_groups": [{..., "params": [index, ...]}]}` in
    /// PyTorch's format, params numbered across groups in order. As in PyTorch the state
    /// tensors are the live ones, not copies.
    fn state_dict(&self) -> Value;

    /// Loads hyper-parameters and per-parameter state (deep copies) from a
    /// [`Optimizer::state_dict`], checking group counts and sizes and state shapes first.
    fn load_state_dict(&mut self, state_dict: &Value) -> Result<()>;

    /// The per-parameter state's structure now (handles, not copies). With
    /// [`Optimizer::restore_state`] this undoes a recorded step whose program then failed to
    /// compile or run: recording a step creates state (a first step's momentum buffers and
    /// moments, AMSGrad's maximum switched on mid-run) before anything runs. The default (an
    /// optimizer that keeps no state) is [`StateSnapshot::empty`].
    fn save_state(&self) -> StateSnapshot {
        StateSnapshot::empty()
    }

    /// Puts back the state `snapshot` took (entries and buffers added since are dropped, so
    /// those parameters step next as if they had not gained them). A snapshot of another
    /// optimizer's type is ignored. The default does nothing.
    fn restore_state(&mut self, snapshot: StateSnapshot) {
        let _ = snapshot;
    }
}

/// A boxed optimizer is an optimizer (so a `Box<dyn Optimizer>` can be handed on by value).
impl<O: Optimizer + ?Sized> Optimizer for Box<O> {
    fn step(&mut self) -> Result<()> {
        (**self).step()
    }

    fn step_with(&mut self, sink: &mut dyn UpdateSink) -> Result<()> {
        (**self).step_with(sink)
    }

    fn zero_grad(&self, set_to_none: bool) {
        (**self).zero_grad(set_to_none)
    }

    fn param_groups(&self) -> &[ParamGroup] {
        (**self).param_groups()
    }

    fn param_groups_mut(&mut self) -> &mut [ParamGroup] {
        (**self).param_groups_mut()
    }

    fn state_dict(&self) -> Value {
        (**self).state_dict()
    }

    fn load_state_dict(&mut self, state_dict: &Value) -> Result<()> {
        (**self).load_state_dict(state_dict)
    }

    fn save_state(&self) -> StateSnapshot {
        (**self).save_state()
    }

    fn restore_state(&mut self, snapshot: StateSnapshot) {
        (**self).restore_state(snapshot)
    }
}

/// Parameters that share hyper-parameters, as an entry of PyTorch's `param_groups`.
#[derive(Debug, Clone)]
pub struct ParamGroup {
    pub params: Vec<Tensor>,
    pub options: GroupOptions,
    /// The lr when the first scheduler attached (PyTorch's `initial_lr`).
    pub initial_lr: Option<f64>,
}

/// The hyper-parameters of a group, by optimizer kind.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupOptions {
    Sgd(SgdOptions),
    /// Adam and AdamW (AdamW sets `decoupled_weight_decay`).
    Adam(AdamOptions),
    RmsProp(RmsPropOptions),
}

impl ParamGroup {
    pub fn new(params: Vec<Tensor>, options: GroupOptions) -> Self {
        ParamGroup {
            params,
            options,
            initial_lr: None,
        }
    }

    /// The group's learning rate.
    pub fn lr(&self) -> f64 {
        match &self.options {
            GroupOptions::Sgd(o) => o.lr,
            GroupOptions::Adam(o) => o.lr,
            GroupOptions::RmsProp(o) => o.lr,
        }
    }

    pub fn set_lr(&mut self, lr: f64) {
        match &mut self.options {
            GroupOptions::Sgd(o) => o.lr = lr,
            GroupOptions::Adam(o) => o.lr = lr,
            GroupOptions::RmsProp(o) => o.lr = lr,
        }
    }
}

impl GroupOptions {
    /// The optimizer these options belong to, for messages.
    pub fn kind(&self) -> &'static str {
        match self {
            GroupOptions::Sgd(_) => "SGD",
            GroupOptions::Adam(_) => "Adam",
            GroupOptions::RmsProp(_) => "RMSprop",
        }
    }
}
