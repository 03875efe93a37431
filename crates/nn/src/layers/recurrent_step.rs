//! One time step of the three recurrences (Elman RNN, LSTM, GRU) with PyTorch's gate layouts,
//! composed from differentiable tensor ops so that autograd gives the backward; the cells and
//! the stacked layers both run it.

use crate::{NnError, Result, current_module_path};
use tessera_tensor::Tensor;

/// The non-linearity of an Elman RNN (PyTorch's `nonlinearity='tanh'` or `'relu'`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nonlinearity {
    Tanh,
    Relu,
}

impl Nonlinearity {
    fn apply(self, x: &Tensor) -> Result<Tensor> {
        Ok(match self {
            Nonlinearity::Tanh => x.tanh()?,
            Nonlinearity::Relu => x.relu()?,
        })
    }
}

impl std::fmt::Display for Nonlinearity {
    /// PyTorch's spelling (`tanh`, `relu`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Nonlinearity::Tanh => "tanh",
            Nonlinearity::Relu => "relu",
        })
    }
}

/// Which recurrence a layer runs; it fixes how many gate blocks the weights stack along dim 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recurrence {
    /// `h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh)`: one block.
    Rnn(Nonlinearity),
    /// Blocks i, f, g, o: `c' = σ(f) c + σ(i) tanh(g)`, `h' = σ(o) tanh(c')`.
    Lstm,
    /// Blocks r, z, n: `n = tanh(x_n + r (W_hn h + b_hn))`, `h' = (1 - z) n + z h`.
    Gru,
}

impl Recurrence {
    /// The number of gate blocks stacked in `weight_ih`, `weight_hh` and the biases.
    pub(crate) fn gates(self) -> usize {
        match self {
            Recurrence::Rnn(_) => 1,
            Recurrence::Lstm => 4,
            Recurrence::Gru => 3,
        }
    }

    /// This recurrence with `nonlinearity`: an Elman RNN takes either, the gated ones (whose
    /// activations are fixed) only the default `Tanh`; `type_name` names the refusing module.
    pub(crate) fn with_nonlinearity(
        self,
        type_name: &str,
        nonlinearity: Nonlinearity,
    ) -> Result<Recurrence> {
        match self {
            Recurrence::Rnn(_) => Ok(Recurrence::Rnn(nonlinearity)),
            gated if nonlinearity == Nonlinearity::Tanh => Ok(gated),
            _ => Err(recurrent_error(
                type_name,
                format!("only RNN and RNNCell take a nonlinearity (got {nonlinearity})"),
            )),
        }
    }

    /// Whether the state carries a cell `c` beside `h`.
    pub(crate) fn has_cell(self) -> bool {
        self == Recurrence::Lstm
    }
}

/// The weights of one layer and direction (or of one cell).
#[derive(Clone, Copy)]
pub(crate) struct StepWeights<'a> {
    pub weight_ih: &'a Tensor,
    pub weight_hh: &'a Tensor,
    pub bias_ih: Option<&'a Tensor>,
    pub bias_hh: Option<&'a Tensor>,
}

impl StepWeights<'_> {
    /// `x W_ih^T + b_ih`: the input's share of every gate (for a whole sequence at once).
    pub(crate) fn input_gates(&self, x: &Tensor) -> Result<Tensor> {
        Ok(x.linear(self.weight_ih, self.bias_ih)?)
    }
}

/// A recurrent state: `h`, and `c` for an LSTM.
#[derive(Clone)]
pub(crate) struct State {
    pub h: Tensor,
    pub c: Option<Tensor>,
}

/// Gate block `k` of `hidden` features along the last dimension.
fn block(gates: &Tensor, k: usize, hidden: usize) -> Result<Tensor> {
    Ok(gates.narrow(-1, k * hidden, hidden)?)
}

impl Recurrence {
    /// The state after one step, from `input_gates` (`x W_ih^T + b_ih`, see
    /// [`StepWeights::input_gates`]) and the previous `state`. The hidden projection always
    /// runs, so `weight_hh` gets a (zero) gradient even from a zero initial state, as in PyTorch.
    pub(crate) fn step(
        self,
        input_gates: &Tensor,
        state: &State,
        weights: StepWeights<'_>,
    ) -> Result<State> {
        let hidden_gates = state.h.linear(weights.weight_hh, weights.bias_hh)?;
        let hidden = state.h.size(-1)?;
        match self {
            Recurrence::Rnn(act) => Ok(State {
                h: act.apply(&input_gates.add(&hidden_gates)?)?,
                c: None,
            }),
            Recurrence::Lstm => {
                let c = state
                    .c
                    .as_ref()
                    .ok_or_else(|| NnError::Invalid("an LSTM step needs a cell state".into()))?;
                let gates = input_gates.add(&hidden_gates)?;
                let input = block(&gates, 0, hidden)?.sigmoid()?;
                let forget = block(&gates, 1, hidden)?.sigmoid()?;
                let candidate = block(&gates, 2, hidden)?.tanh()?;
                let output = block(&gates, 3, hidden)?.sigmoid()?;
                let c = forget.mul(c)?.add(&input.mul(&candidate)?)?;
                let h = output.mul(&c.tanh()?)?;
                Ok(State { h, c: Some(c) })
            }
            Recurrence::Gru => {
                let gate = |k: usize| -> Result<Tensor> {
                    Ok(block(input_gates, k, hidden)?
                        .add(&block(&hidden_gates, k, hidden)?)?
                        .sigmoid()?)
                };
                let (reset, update) = (gate(0)?, gate(1)?);
                let new = block(input_gates, 2, hidden)?
                    .add(&reset.mul(&block(&hidden_gates, 2, hidden)?)?)?
                    .tanh()?;
                // (1 - z) n + z h, written n + z (h - n).
                let h = new.add(&update.mul(&state.h.sub(&new)?)?)?;
                Ok(State { h, c: None })
            }
        }
    }
}

/// An invalid-argument error of a recurrent layer, naming the module path being called
/// (`encoder.lstm (LSTM): ...`) or, outside a registered call, the type (`LSTM: ...`).
pub(crate) fn recurrent_error(type_name: &str, message: String) -> NnError {
    let context = match current_module_path() {
        Some(path) if !path.is_empty() => format!("{path} ({type_name})"),
        _ => type_name.to_string(),
    };
    NnError::Invalid(format!("{context}: {message}"))
}
