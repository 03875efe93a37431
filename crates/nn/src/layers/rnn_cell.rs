//! The single-step recurrent cells `RNNCell`, `LSTMCell` and `GRUCell`: one time step on a
//! `[N, input_size]` (or unbatched `[input_size]`) input, with PyTorch's parameter names
//! (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`), init, reprs and input checks.

use super::options::{initialized, options, zeros};
use super::python::py_bool;
use super::recurrent_step::{Nonlinearity, Recurrence, State, recurrent_error};
use super::recurrent_weights::{RecurrentWeights, Slot};
use crate::{Forward, ModuleCore, Result};
use tessera_tensor::{DType, Device, Tensor};

options! {
    /// Options of [`RNNCell`], [`LSTMCell`] and [`GRUCell`] (PyTorch's defaults).
    RecurrentCellOptions {
        /// Whether the cell learns `bias_ih` and `bias_hh`.
        bias: bool = true,
        /// `RNNCell` only: `tanh` or `relu` (the LSTM and GRU cells refuse `Relu`).
        nonlinearity: Nonlinearity = Nonlinearity::Tanh,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

/// What a cell's forward needs besides its input: which recurrence, its sizes and weights.
struct CellRun<'a> {
    type_name: &'static str,
    recurrence: Recurrence,
    input_size: usize,
    hidden_size: usize,
    weights: &'a RecurrentWeights,
}

impl CellRun<'_> {
    /// One step from `input` and the optional `hx` (and `cx`), PyTorch's checks included;
    /// a missing state is zeros. Unbatched inputs give unbatched states.
    fn run(&self, input: &Tensor, hx: Option<&Tensor>, cx: Option<&Tensor>) -> Result<State> {
        let fail = |message: String| recurrent_error(self.type_name, message);
        if !matches!(input.ndim(), 1 | 2) {
            return Err(fail(format!(
                "Expected input to be 1D or 2D, got {}D instead",
                input.ndim()
            )));
        }
        let lstm = self.recurrence.has_cell();
        for (label, state) in [("hx[0]", hx), ("hx[1]", cx)] {
            let label = if lstm { label } else { "hidden" };
            if let Some(s) = state.filter(|s| !matches!(s.ndim(), 1 | 2)) {
                return Err(fail(format!(
                    "Expected {label} to be 1D or 2D, got {}D instead",
                    s.ndim()
                )));
            }
        }
        let batched = input.ndim() == 2;
        let batch = |t: &Tensor| -> Result<Tensor> {
            Ok(if batched { t.clone() } else { t.unsqueeze(0)? })
        };
        let x = batch(input)?;
        let (n, features) = (x.shape()[0], x.shape()[1]);
        if features != self.input_size {
            return Err(fail(format!(
                "input has inconsistent input_size: got {features} expected {}",
                self.input_size
            )));
        }
        let initial = |given: Option<&Tensor>, label: usize| -> Result<Tensor> {
            let Some(given) = given else {
                return zeros(&[n, self.hidden_size], x.dtype(), x.device());
            };
            let s = batch(given)?.shape();
            if s.len() != 2 || s[0] != n {
                return Err(fail(format!(
                    "Input batch size {n} doesn't match hidden{label} batch size {}",
                    s.first().copied().unwrap_or(0)
                )));
            }
            if s[1] != self.hidden_size {
                return Err(fail(format!(
                    "hidden{label} has inconsistent hidden_size: got {}, expected {}",
                    s[1], self.hidden_size
                )));
            }
            batch(given)
        };
        let state = State {
            h: initial(hx, 0)?,
            c: lstm.then(|| initial(cx, 1)).transpose()?,
        };
        let weights = self.weights.slot(0);
        let next = self
            .recurrence
            .step(&weights.input_gates(&x)?, &state, weights)?;
        let unbatch =
            |t: Tensor| -> Result<Tensor> { Ok(if batched { t } else { t.squeeze_dim(0)? }) };
        Ok(State {
            h: unbatch(next.h)?,
            c: next.c.map(unbatch).transpose()?,
        })
    }
}

/// Declares a cell module `$name` running `$recurrence` (with the options' nonlinearity).
macro_rules! recurrent_cell {
    ($(#[$doc:meta])* $name:ident, $recurrence:expr) => {
        $(#[$doc])*
        #[derive(crate::Module)]
        #[module(extra_repr = "repr_args")]
        pub struct $name {
            core: ModuleCore,
            pub input_size: usize,
            pub hidden_size: usize,
            #[module(skip)]
            pub options: RecurrentCellOptions,
            pub weights: RecurrentWeights,
        }

        impl $name {
            pub fn new(input_size: usize, hidden_size: usize) -> Result<Self> {
                Self::with_options(input_size, hidden_size, RecurrentCellOptions::default())
            }

            pub fn with_options(
                input_size: usize,
                hidden_size: usize,
                options: RecurrentCellOptions,
            ) -> Result<Self> {
                let recurrence = $recurrence.with_nonlinearity(stringify!($name), options.nonlinearity)?;
                let slot = Slot {
                    suffix: String::new(),
                    input_size,
                };
                let weights = RecurrentWeights::new(
                    &[slot],
                    recurrence.gates(),
                    hidden_size,
                    options.bias,
                    options.dtype,
                    options.device,
                )?;
                let cell = $name {
                    core: ModuleCore::default(),
                    input_size,
                    hidden_size,
                    options,
                    weights,
                };
                initialized(cell, $name::reset_parameters)
            }

            /// Re-draws every weight and bias from U(-1/sqrt(hidden_size), 1/sqrt(hidden_size)).
            pub fn reset_parameters(&self) -> Result<()> {
                self.weights.reset(self.hidden_size)
            }

            fn run(&self, input: &Tensor, hx: Option<&Tensor>, cx: Option<&Tensor>) -> Result<State> {
                CellRun {
                    type_name: stringify!($name),
                    recurrence: $recurrence
                        .with_nonlinearity(stringify!($name), self.options.nonlinearity)?,
                    input_size: self.input_size,
                    hidden_size: self.hidden_size,
                    weights: &self.weights,
                }
                .run(input, hx, cx)
            }

            fn repr_args(&self) -> String {
                let mut s = format!("{}, {}", self.input_size, self.hidden_size);
                if !self.options.bias {
                    s += &format!(", bias={}", py_bool(false));
                }
                if self.options.nonlinearity != Nonlinearity::Tanh {
                    s += &format!(", nonlinearity={}", self.options.nonlinearity);
                }
                s
            }
        }
    };
}

recurrent_cell! {
    /// `h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)` with `act` tanh or relu
    /// (PyTorch's `nn.RNNCell`); called with `x` or `(x, hx)`.
    RNNCell, Recurrence::Rnn(Nonlinearity::Tanh)
}

recurrent_cell! {
    /// One LSTM step (PyTorch's `nn.LSTMCell`), gates i, f, g, o; called with `x` or
    /// `(x, (hx, cx))`, it returns `(h, c)`.
    LSTMCell, Recurrence::Lstm
}

recurrent_cell! {
    /// One GRU step (PyTorch's `nn.GRUCell`), gates r, z, n with `b_hn` inside `r * (...)`;
    /// called with `x` or `(x, hx)`.
    GRUCell, Recurrence::Gru
}

/// The forwards of the cells whose state is `h` alone.
macro_rules! hidden_only_forward {
    ($($name:ident),*) => {
        $(
            impl Forward for $name {
                type Output = Tensor;
                fn forward(&self, input: Tensor) -> Result<Tensor> {
                    Ok(self.run(&input, None, None)?.h)
                }
            }

            impl Forward<(Tensor, Tensor)> for $name {
                type Output = Tensor;
                fn forward(&self, (input, hx): (Tensor, Tensor)) -> Result<Tensor> {
                    Ok(self.run(&input, Some(&hx), None)?.h)
                }
            }
        )*
    };
}

hidden_only_forward!(RNNCell, GRUCell);

/// The `(h, c)` of an LSTM state (both present by construction).
pub(crate) fn hidden_and_cell(state: State) -> Result<(Tensor, Tensor)> {
    let c = state
        .c
        .ok_or_else(|| crate::NnError::Invalid("an LSTM state has a cell".into()))?;
    Ok((state.h, c))
}

impl Forward for LSTMCell {
    type Output = (Tensor, Tensor);
    fn forward(&self, input: Tensor) -> Result<(Tensor, Tensor)> {
        hidden_and_cell(self.run(&input, None, None)?)
    }
}

impl Forward<(Tensor, (Tensor, Tensor))> for LSTMCell {
    type Output = (Tensor, Tensor);
    fn forward(&self, (input, (hx, cx)): (Tensor, (Tensor, Tensor))) -> Result<(Tensor, Tensor)> {
        hidden_and_cell(self.run(&input, Some(&hx), Some(&cx))?)
    }
}
