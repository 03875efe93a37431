//! The multi-layer recurrent layers `RNN`, `LSTM` and `GRU` (PyTorch's `nn.RNN`, `nn.LSTM`,
//! `nn.GRU`): stacked layers, optional reverse direction, `batch_first`, dropout between
//! layers, optional initial states, with PyTorch's parameter names (`weight_ih_l0`,
//! `bias_hh_l1_reverse`), init, reprs and input checks.

use super::options::{options, zeros};
use super::python::{py_bool, py_float, py_tuple};
use super::recurrent_module::recurrent_module;
use super::recurrent_step::{Nonlinearity, Recurrence, State, recurrent_error};
use super::recurrent_weights::{RecurrentWeights, Slot};
use super::rnn_cell::hidden_and_cell;
use crate::{Forward, ModuleExt, NnError, Result};
use tessera_tensor::{DType, Device, Tensor, functional};

options! {
    /// Options of [`RNN`], [`LSTM`] and [`GRU`] (PyTorch's defaults).
    RecurrentOptions {
        /// Stacked layers; layer `k > 0` reads the outputs of layer `k - 1`.
        num_layers: usize = 1,
        /// `RNN` only: `tanh` or `relu` (LSTM and GRU refuse `Relu`).
        nonlinearity: Nonlinearity = Nonlinearity::Tanh,
        /// Whether each layer learns `bias_ih` and `bias_hh`.
        bias: bool = true,
        /// Inputs and outputs are `[N, T, features]` rather than `[T, N, features]` (the
        /// states stay `[layers * directions, N, hidden]`).
        batch_first: bool = false,
        /// Dropout on the outputs of every layer but the last, in training.
        dropout: f64 = 0.0,
        /// A second, reverse-time direction per layer; outputs concatenate both.
        bidirectional: bool = false,
        dtype: DType = DType::F32,
        device: Device = Device::Cpu,
    }
}

impl RecurrentOptions {
    fn directions(&self) -> usize {
        if self.bidirectional { 2 } else { 1 }
    }
}

/// PyTorch's `RNNBase.__init__` checks.
fn check_options(
    type_name: &str,
    _input_size: usize,
    hidden_size: usize,
    options: &RecurrentOptions,
) -> Result<()> {
    let fail = |message: &str| Err(recurrent_error(type_name, message.into()));
    if !(0.0..=1.0).contains(&options.dropout) {
        return fail(
            "dropout should be a number in range [0, 1] representing the probability of an element being zeroed",
        );
    }
    if hidden_size == 0 {
        return fail("hidden_size must be greater than zero");
    }
    if options.num_layers == 0 {
        return fail("num_layers must be greater than zero");
    }
    Ok(())
}

/// The slots (layer and direction) in PyTorch's order `l0`, `l0_reverse`, `l1`, ...; layer
/// `k > 0` reads `directions * hidden_size` features.
fn slots(input_size: usize, hidden_size: usize, options: &RecurrentOptions) -> Vec<Slot> {
    let directions = options.directions();
    (0..options.num_layers)
        .flat_map(|layer| {
            (0..directions).map(move |direction| Slot {
                suffix: format!("_l{layer}{}", if direction == 1 { "_reverse" } else { "" }),
                input_size: if layer == 0 {
                    input_size
                } else {
                    directions * hidden_size
                },
            })
        })
        .collect()
}

/// The initial states a layer was called with (each optional; an LSTM takes both or none).
struct Initial<'a> {
    hx: Option<&'a Tensor>,
    cx: Option<&'a Tensor>,
}

/// What the shared forward needs of a layer.
struct SequenceRun<'a> {
    type_name: &'static str,
    recurrence: Recurrence,
    input_size: usize,
    hidden_size: usize,
    options: &'a RecurrentOptions,
    weights: &'a RecurrentWeights,
    training: bool,
}

impl SequenceRun<'_> {
    fn fail(&self, message: String) -> NnError {
        recurrent_error(self.type_name, message)
    }

    /// PyTorch's rank checks of the input and the initial states.
    fn check_ranks(&self, input: &Tensor, initial: &Initial<'_>) -> Result<()> {
        let rank = input.ndim();
        if !matches!(rank, 2 | 3) {
            let tensor = if self.recurrence.has_cell() || self.recurrence == Recurrence::Gru {
                ""
            } else {
                " tensor"
            };
            return Err(self.fail(format!(
                "Expected input to be 2D or 3D, got {rank}D{tensor} instead"
            )));
        }
        let (kind, state_rank) = if rank == 3 {
            ("batched 3-D", 3)
        } else {
            ("unbatched 2-D", 2)
        };
        match (initial.hx, initial.cx) {
            (Some(h), Some(c)) if h.ndim() != state_rank || c.ndim() != state_rank => {
                Err(self.fail(format!(
                    "For {kind} input, hx and cx should also be {state_rank}-D but got ({}-D, {}-D) tensors",
                    h.ndim(),
                    c.ndim()
                )))
            }
            (Some(h), None) if h.ndim() != state_rank => Err(self.fail(format!(
                "For {kind} input, hx should also be {state_rank}-D but got {}-D tensor",
                h.ndim()
            ))),
            _ => Ok(()),
        }
    }

    /// The initial state `[layers * directions, N, hidden]`: `given` (checked against that
    /// shape, `label` naming it in the error as PyTorch does) or zeros.
    fn initial_state(
        &self,
        given: Option<&Tensor>,
        label: &str,
        batched: bool,
        like: &Tensor,
        n: usize,
    ) -> Result<Tensor> {
        let expected = [
            self.options.num_layers * self.options.directions(),
            n,
            self.hidden_size,
        ];
        let Some(given) = given else {
            return zeros(&expected, like.dtype(), like.device());
        };
        let given = if batched {
            given.clone()
        } else {
            given.unsqueeze(1)?
        };
        if given.shape() != expected {
            return Err(self.fail(format!(
                "Expected hidden{label} size {}, got {:?}",
                py_tuple(&expected),
                given.shape()
            )));
        }
        Ok(given)
    }

    /// The output `[T, N, directions * hidden]` (batch first or unbatched as the input was)
    /// and the final states `[layers * directions, N, hidden]`.
    fn run(&self, input: &Tensor, initial: Initial<'_>) -> Result<(Tensor, State)> {
        self.check_ranks(input, &initial)?;
        let batched = input.ndim() == 3;
        // Time-major `[T, N, features]` from here on.
        let x = if !batched {
            input.unsqueeze(1)?
        } else if self.options.batch_first {
            input.transpose(0, 1)?
        } else {
            input.clone()
        };
        let shape = x.shape();
        let (steps, n, features) = (shape[0], shape[1], shape[2]);
        if features != self.input_size {
            return Err(self.fail(format!(
                "input.size(-1) must be equal to input_size. Expected {}, got {features}",
                self.input_size
            )));
        }
        if steps == 0 {
            return Err(self.fail(format!(
                "Expected sequence length to be larger than 0 in {}",
                self.type_name
            )));
        }
        let lstm = self.recurrence.has_cell();
        let (h_label, c_label) = if lstm { ("[0]", "[1]") } else { ("", "") };
        let h0 = self.initial_state(initial.hx, h_label, batched, &x, n)?;
        let c0 = lstm
            .then(|| self.initial_state(initial.cx, c_label, batched, &x, n))
            .transpose()?;

        let directions = self.options.directions();
        let mut layer_input = x;
        let mut finals = Vec::with_capacity(self.options.num_layers * directions);
        for layer in 0..self.options.num_layers {
            let mut outputs = Vec::with_capacity(directions);
            for direction in 0..directions {
                let slot = layer * directions + direction;
                let start = State {
                    h: h0.select(0, slot)?,
                    c: c0.as_ref().map(|c| c.select(0, slot)).transpose()?,
                };
                let (output, last) = self.direction(&layer_input, slot, direction == 1, start)?;
                outputs.push(output);
                finals.push(last);
            }
            let output = Tensor::cat(&outputs.iter().collect::<Vec<_>>(), -1)?;
            let between_layers = layer + 1 < self.options.num_layers;
            layer_input = if between_layers && self.training && self.options.dropout > 0.0 {
                functional::dropout(&output, self.options.dropout, true)?
            } else {
                output
            };
        }

        let stacked = |part: &dyn Fn(&State) -> Option<&Tensor>| -> Result<Option<Tensor>> {
            let parts: Option<Vec<&Tensor>> = finals.iter().map(part).collect();
            parts
                .map(|p| Tensor::stack(&p, 0))
                .transpose()
                .map_err(Into::into)
        };
        let h_n = stacked(&|s| Some(&s.h))?
            .ok_or_else(|| NnError::Invalid("a recurrent layer has final states".into()))?;
        let c_n = stacked(&|s| s.c.as_ref())?;
        let output = layer_input;
        if !batched {
            let unbatch = |t: Tensor| t.squeeze_dim(1);
            let c_n = c_n.map(unbatch).transpose()?;
            return Ok((
                output.squeeze_dim(1)?,
                State {
                    h: unbatch(h_n)?,
                    c: c_n,
                },
            ));
        }
        let output = if self.options.batch_first {
            output.transpose(0, 1)?
        } else {
            output
        };
        Ok((output, State { h: h_n, c: c_n }))
    }

    /// One direction of one layer over the whole sequence: the input projection for every
    /// step at once, then the recurrence step by step (from the end when `reverse`). Returns
    /// the hidden state at each time `[T, N, hidden]` and the final state.
    fn direction(
        &self,
        input: &Tensor,
        slot: usize,
        reverse: bool,
        start: State,
    ) -> Result<(Tensor, State)> {
        let weights = self.weights.slot(slot);
        let input_gates = weights.input_gates(input)?;
        let steps = input.size(0)?;
        let order: Box<dyn Iterator<Item = usize>> = if reverse {
            Box::new((0..steps).rev())
        } else {
            Box::new(0..steps)
        };
        let mut state = start;
        let mut hidden = Vec::with_capacity(steps);
        for t in order {
            state = self
                .recurrence
                .step(&input_gates.select(0, t)?, &state, weights)?;
            hidden.push(state.h.clone());
        }
        if reverse {
            hidden.reverse();
        }
        let output = Tensor::stack(&hidden.iter().collect::<Vec<_>>(), 0)?;
        Ok((output, state))
    }
}

/// PyTorch's `RNNBase.extra_repr`: the sizes, then each option that differs from its default.
fn layer_repr(input_size: usize, hidden_size: usize, o: &RecurrentOptions) -> String {
    let mut s = format!("{input_size}, {hidden_size}");
    if o.num_layers != 1 {
        s += &format!(", num_layers={}", o.num_layers);
    }
    if !o.bias {
        s += &format!(", bias={}", py_bool(o.bias));
    }
    if o.batch_first {
        s += &format!(", batch_first={}", py_bool(o.batch_first));
    }
    if o.dropout != 0.0 {
        s += &format!(", dropout={}", py_float(o.dropout));
    }
    if o.bidirectional {
        s += &format!(", bidirectional={}", py_bool(o.bidirectional));
    }
    s
}

/// Declares a multi-layer module: [`recurrent_module!`] with the layers' slots, checks and
/// repr, and its run over a sequence.
macro_rules! recurrent_layer {
    ($(#[$doc:meta])* $name:ident, $recurrence:expr) => {
        recurrent_module! {
            $(#[$doc])* $name, $recurrence, RecurrentOptions,
            slots: slots, check: check_options, repr: layer_repr,
        }

        impl $name {
            fn run(&self, input: &Tensor, initial: Initial<'_>) -> Result<(Tensor, State)> {
                SequenceRun {
                    type_name: stringify!($name),
                    recurrence: self.recurrence()?,
                    input_size: self.input_size,
                    hidden_size: self.hidden_size,
                    options: &self.options,
                    weights: &self.weights,
                    training: self.is_training(),
                }
                .run(input, initial)
            }
        }
    };
}

recurrent_layer! {
    /// A multi-layer Elman RNN, `h_t = act(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)` with
    /// `act` tanh or relu (PyTorch's `nn.RNN`). Called with `x` or `(x, h0)`, it returns
    /// `(output, h_n)`.
    RNN, Recurrence::Rnn(Nonlinearity::Tanh)
}

recurrent_layer! {
    /// A multi-layer LSTM, gates i, f, g, o (PyTorch's `nn.LSTM`). Called with `x` or
    /// `(x, (h0, c0))`, it returns `(output, (h_n, c_n))`.
    LSTM, Recurrence::Lstm
}

recurrent_layer! {
    /// A multi-layer GRU, gates r, z, n with `b_hn` inside `r * (...)` (PyTorch's `nn.GRU`).
    /// Called with `x` or `(x, h0)`, it returns `(output, h_n)`.
    GRU, Recurrence::Gru
}

/// The forwards of the layers whose state is `h` alone.
macro_rules! hidden_only_forward {
    ($($name:ident),*) => {
        $(
            impl Forward for $name {
                type Output = (Tensor, Tensor);
                fn forward(&self, input: Tensor) -> Result<(Tensor, Tensor)> {
                    let (output, last) = self.run(&input, Initial { hx: None, cx: None })?;
                    Ok((output, last.h))
                }
            }

            impl Forward<(Tensor, Tensor)> for $name {
                type Output = (Tensor, Tensor);
                fn forward(&self, (input, h0): (Tensor, Tensor)) -> Result<(Tensor, Tensor)> {
                    let (output, last) = self.run(&input, Initial { hx: Some(&h0), cx: None })?;
                    Ok((output, last.h))
                }
            }
        )*
    };
}

hidden_only_forward!(RNN, GRU);

impl Forward for LSTM {
    type Output = (Tensor, (Tensor, Tensor));
    fn forward(&self, input: Tensor) -> Result<(Tensor, (Tensor, Tensor))> {
        let (output, last) = self.run(&input, Initial { hx: None, cx: None })?;
        Ok((output, hidden_and_cell(last)?))
    }
}

impl Forward<(Tensor, (Tensor, Tensor))> for LSTM {
    type Output = (Tensor, (Tensor, Tensor));
    fn forward(
        &self,
        (input, (h0, c0)): (Tensor, (Tensor, Tensor)),
    ) -> Result<(Tensor, (Tensor, Tensor))> {
        let initial = Initial {
            hx: Some(&h0),
            cx: Some(&c0),
        };
        let (output, last) = self.run(&input, initial)?;
        Ok((output, hidden_and_cell(last)?))
    }
}
