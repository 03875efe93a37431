//! The single-step recurrent cells `RNNCell`, `LSTMCell` and `GRUCell`: one time step on a
//! `[N, input_size]` (or unbatched `[input_size]`) input, with PyTorch's parameter names
//! (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`), init, reprs and input checks.

use super::options::{options, zeros};
use super::python::py_bool;
use super::recurrent_module::recurrent_module;
use super::recurrent_step::{Nonlinearity, Recurrence, State, recurrent_error};
use super::recurrent_weights::{RecurrentWeights, Slot};
use crate::{Forward, Result};
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

/// A cell has one slot, whose names have no suffix (`weight_ih`).
fn cell_slot(input_size: usize, _hidden_size: usize, _: &RecurrentCellOptions) -> Vec<Slot> {
    vec![Slot {
        suffix: String::new(),
        input_size,
    }]
}

/// PyTorch's cells check nothing at construction.
fn no_checks(_: &str, _: usize, _: usize, _: &RecurrentCellOptions) -> Result<()> {
    Ok(())
}

/// PyTorch's `RNNCellBase.extra_repr`: the sizes, then `bias` and `nonlinearity` when they
/// differ from their defaults.
fn cell_repr(input_size: usize, hidden_size: usize, options: &RecurrentCellOptions) -> String {
    let mut s = format!("{input_size}, {hidden_size}");
    if !options.bias {
        s += &format!(", bias={}", py_bool(false));
    }
    if options.nonlinearity != Nonlinearity::Tanh {
        s += &format!(", nonlinearity={}", options.nonlinearity);
    }
    s
}

/// Declares a cell module: [`recurrent_module!`] with the cells' slot, checks and repr, and
/// its one-step run.
macro_rules! recurrent_cell {
    ($(#[$doc:meta])* $name:ident, $recurrence:expr) => {
        recurrent_module! {
            $(#[$doc])* $name, $recurrence, RecurrentCellOptions,
            slots: cell_slot, check: no_checks, repr: cell_repr,
        }

        impl $name {
            fn run(&self, input: &Tensor, hx: Option<&Tensor>, cx: Option<&Tensor>) -> Result<State> {
                CellRun {
                    type_name: stringify!($name),
                    recurrence: self.recurrence()?,
                    input_size: self.input_size,
                    hidden_size: self.hidden_size,
                    weights: &self.weights,
                }
                .run(input, hx, cx)
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
