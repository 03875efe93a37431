//! The recurrent layers beyond the PyTorch vectors: layouts (sequence first, unbatched),
//! dropout between layers, reprs of every option, parameter names and init bounds, and the
//! errors for wrong ranks, feature sizes and initial-state shapes, naming the module path.

use crate::common;

use tessera_nn::layers::{
    GRU, GRUCell, LSTM, LSTMCell, Nonlinearity, RNN, RNNCell, RecurrentCellOptions,
    RecurrentOptions,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, Result, StateDict};
use tessera_tensor::{DType, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    let mut g = tessera_tensor::Generator::new(seed);
    Tensor::randn_with(shape, DType::F32, &mut g).unwrap()
}

fn close(a: &Tensor, b: &Tensor, what: &str) {
    common::assert_close(a, b, 1e-5, 1e-6, what);
}

#[test]
fn reprs_print_the_options_that_differ_from_pytorchs_defaults() -> Result<()> {
    let all = RecurrentOptions::default()
        .num_layers(2)
        .bias(false)
        .batch_first(true)
        .dropout(0.5)
        .bidirectional(true);
    assert_eq!(
        LSTM::with_options(10, 20, all.clone())?.repr(),
        "LSTM(10, 20, num_layers=2, bias=False, batch_first=True, dropout=0.5, bidirectional=True)"
    );
    assert_eq!(GRU::new(3, 4)?.repr(), "GRU(3, 4)");
    // PyTorch's RNN repr leaves the nonlinearity out; the cell's prints it.
    let relu = RecurrentOptions::default().nonlinearity(Nonlinearity::Relu);
    assert_eq!(RNN::with_options(3, 4, relu)?.repr(), "RNN(3, 4)");
    let relu_cell = RecurrentCellOptions::default()
        .bias(false)
        .nonlinearity(Nonlinearity::Relu);
    assert_eq!(
        RNNCell::with_options(3, 4, relu_cell)?.repr(),
        "RNNCell(3, 4, bias=False, nonlinearity=relu)"
    );
    assert_eq!(LSTMCell::new(3, 4)?.repr(), "LSTMCell(3, 4)");
    Ok(())
}

#[test]
fn parameters_are_named_layer_by_layer_and_drawn_within_one_over_sqrt_hidden() -> Result<()> {
    let options = RecurrentOptions::default()
        .num_layers(2)
        .bidirectional(true)
        .bias(false);
    let gru = GRU::with_options(3, 4, options)?;
    let shapes: Vec<(String, Vec<usize>)> = gru
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.shape()))
        .collect();
    let expected = [
        ("weight_ih_l0", vec![12, 3]),
        ("weight_hh_l0", vec![12, 4]),
        ("weight_ih_l0_reverse", vec![12, 3]),
        ("weight_hh_l0_reverse", vec![12, 4]),
        ("weight_ih_l1", vec![12, 8]),
        ("weight_hh_l1", vec![12, 4]),
        ("weight_ih_l1_reverse", vec![12, 8]),
        ("weight_hh_l1_reverse", vec![12, 4]),
    ];
    let expected: Vec<(String, Vec<usize>)> = expected
        .into_iter()
        .map(|(n, s)| (n.to_string(), s))
        .collect();
    assert_eq!(shapes, expected);
    for p in gru.parameters() {
        assert!(p.to_vec_f64()?.iter().all(|v| v.abs() <= 0.5));
    }
    assert!(gru.get_parameter("weight_hh_l1_reverse").is_ok());
    Ok(())
}

#[test]
fn sequence_first_input_gives_the_batch_first_result_transposed() -> Result<()> {
    let first = LSTM::with_options(3, 4, RecurrentOptions::default().bidirectional(true))?;
    let batch_first = LSTM::with_options(
        3,
        4,
        RecurrentOptions::default()
            .bidirectional(true)
            .batch_first(true),
    )?;
    batch_first.load_state_dict(&first.state_dict()?, true, false)?;
    let x = randn(&[5, 2, 3], 1);
    let (out, (h, c)) = first.call(x.clone())?;
    let (out_bf, (h_bf, c_bf)) = batch_first.call(x.transpose(0, 1)?)?;
    assert_eq!(out.shape(), [5, 2, 8]);
    close(&out_bf.transpose(0, 1)?, &out, "output");
    close(&h_bf, &h, "h_n");
    close(&c_bf, &c, "c_n");
    Ok(())
}

#[test]
fn unbatched_inputs_give_unbatched_outputs_equal_to_a_batch_of_one() -> Result<()> {
    let gru = GRU::with_options(3, 4, RecurrentOptions::default().num_layers(2))?;
    let (x, h0) = (randn(&[5, 3], 2), randn(&[2, 4], 3));
    let (out, h_n) = gru.call((x.clone(), h0.clone()))?;
    let (out1, h_n1) = gru.call((x.unsqueeze(1)?, h0.unsqueeze(1)?))?;
    assert_eq!((out.shape(), h_n.shape()), (vec![5, 4], vec![2, 4]));
    close(&out, &out1.squeeze_dim(1)?, "output");
    close(&h_n, &h_n1.squeeze_dim(1)?, "h_n");

    let cell = LSTMCell::new(3, 4)?;
    let (h, c) = cell.call(randn(&[3], 4))?;
    assert_eq!((h.shape(), c.shape()), (vec![4], vec![4]));
    Ok(())
}

#[test]
fn dropout_acts_between_layers_in_training_only() -> Result<()> {
    let options = RecurrentOptions::default().num_layers(2).dropout(1.0);
    let rnn = RNN::with_options(3, 4, options)?;
    let x = randn(&[5, 2, 3], 5);
    // With p = 1 the second layer reads zeros: it is a one-layer RNN over a zero input.
    let second = RNN::new(4, 4)?;
    let mut renamed = StateDict::new();
    for (key, tensor) in rnn.state_dict()?.iter() {
        if let Some(rest) = key.strip_suffix("_l1") {
            renamed.insert(format!("{rest}_l0"), tensor.clone());
        }
    }
    second.load_state_dict(&renamed, true, false)?;
    let (dropped, _) = rnn.call(x.clone())?;
    let (on_zeros, _) = second.call(Tensor::zeros(&[5, 2, 4], DType::F32)?)?;
    close(&dropped, &on_zeros, "training output");
    rnn.eval();
    let (kept, _) = rnn.call(x)?;
    assert_ne!(kept.to_vec_f64()?, dropped.to_vec_f64()?);
    Ok(())
}

#[test]
fn constructors_refuse_pytorchs_invalid_arguments() {
    let err = |r: Result<LSTM>| r.err().map(|e| e.to_string()).unwrap_or_default();
    assert_eq!(
        err(LSTM::with_options(
            3,
            4,
            RecurrentOptions::default().dropout(1.5)
        )),
        "LSTM: dropout should be a number in range [0, 1] representing the probability of an element being zeroed"
    );
    assert_eq!(
        err(LSTM::with_options(
            3,
            4,
            RecurrentOptions::default().num_layers(0)
        )),
        "LSTM: num_layers must be greater than zero"
    );
    assert_eq!(
        err(LSTM::new(3, 0)),
        "LSTM: hidden_size must be greater than zero"
    );
    assert_eq!(
        err(LSTM::with_options(
            3,
            4,
            RecurrentOptions::default().nonlinearity(Nonlinearity::Relu)
        )),
        "LSTM: only RNN and RNNCell take a nonlinearity (got relu)"
    );
    let relu_cell = RecurrentCellOptions::default().nonlinearity(Nonlinearity::Relu);
    assert!(GRUCell::with_options(3, 4, relu_cell).is_err());
}

/// Asserts that `result` is an error whose message is `expected`.
fn assert_error<T: std::fmt::Debug>(result: Result<T>, expected: &str) {
    assert_eq!(result.unwrap_err().to_string(), expected);
}

/// A model holding recurrent layers, so errors name their paths.
#[derive(Module)]
struct Encoder {
    core: ModuleCore,
    rnn: RNN,
    lstm: LSTM,
    cell: GRUCell,
}

impl Forward for Encoder {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let (out, _) = self.rnn.call(x)?;
        Ok(self.lstm.call(out)?.0)
    }
}

fn encoder() -> Encoder {
    Encoder {
        core: ModuleCore::default(),
        rnn: RNN::with_options(3, 4, RecurrentOptions::default().num_layers(2)).unwrap(),
        lstm: LSTM::new(4, 5).unwrap(),
        cell: GRUCell::new(3, 4).unwrap(),
    }
}

#[test]
fn wrong_input_rank_and_feature_size_are_errors_naming_the_module_path() {
    let model = encoder();
    assert_error(
        model.call(randn(&[2, 5, 2, 3], 6)),
        "rnn (RNN): Expected input to be 2D or 3D, got 4D tensor instead",
    );
    assert_error(
        model.call(randn(&[5, 2, 6], 6)),
        "rnn (RNN): input.size(-1) must be equal to input_size. Expected 3, got 6",
    );
    assert_error(
        model.lstm.call(randn(&[5, 2, 4, 1], 6)),
        "LSTM: Expected input to be 2D or 3D, got 4D instead",
    );
    assert_error(
        model.cell.call(randn(&[2, 4], 6)),
        "GRUCell: input has inconsistent input_size: got 4 expected 3",
    );
    assert_error(
        model.cell.call(randn(&[1, 2, 3], 6)),
        "GRUCell: Expected input to be 1D or 2D, got 3D instead",
    );
}

#[test]
fn wrong_initial_state_shapes_are_errors_with_pytorchs_text() {
    let model = encoder();
    let x = randn(&[5, 2, 3], 7);
    assert_error(
        model.rnn.call((x.clone(), randn(&[2, 3, 4], 7))),
        "RNN: Expected hidden size (2, 2, 4), got [2, 3, 4]",
    );
    assert_error(
        model.rnn.call((x.clone(), randn(&[2, 4], 7))),
        "RNN: For batched 3-D input, hx should also be 3-D but got 2-D tensor",
    );
    let x4 = randn(&[5, 2, 4], 7);
    let (h0, c0) = (randn(&[1, 2, 5], 8), randn(&[1, 3, 5], 9));
    assert_error(
        model.lstm.call((x4.clone(), (h0.clone(), c0))),
        "LSTM: Expected hidden[1] size (1, 2, 5), got [1, 3, 5]",
    );
    assert_error(
        model.lstm.call((x4, (h0, randn(&[2, 5], 9)))),
        "LSTM: For batched 3-D input, hx and cx should also be 3-D but got (3-D, 2-D) tensors",
    );
    assert_error(
        model.cell.call((randn(&[2, 3], 10), randn(&[3, 4], 10))),
        "GRUCell: Input batch size 2 doesn't match hidden0 batch size 3",
    );
    assert_error(
        model.cell.call((randn(&[2, 3], 10), randn(&[2, 5], 10))),
        "GRUCell: hidden0 has inconsistent hidden_size: got 5, expected 4",
    );
}
