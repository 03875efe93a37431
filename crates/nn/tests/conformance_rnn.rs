//! The recurrent layers (`p_rnn`) against PyTorch: `RNN`, `LSTM`, `GRU` (two layers,
//! bidirectional, batch first) and the three cells, loaded strictly from `state_dict.pt` into
//! the case's holder module; outputs, final states and the gradients of inputs, initial states
//! and every parameter; reprs and keys; load errors; finite-difference gradchecks; input checks.

use crate::common;

use common::{
    Case, check_reprs, check_state_dict_keys, checkpoint, joined, leaves, load_strict, params_of,
    tensor_result,
};
use tessera_nn::layers::{
    GRU, GRUCell, LSTM, LSTMCell, Nonlinearity, RNN, RNNCell, RecurrentCellOptions,
    RecurrentOptions,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, StateDict};
use tessera_tensor::{DType, GradcheckOptions, Tensor, gradcheck};

/// The case's holder module: its children in the order of `case.json`'s `modules`.
#[derive(Module)]
struct Recurrents {
    core: ModuleCore,
    rnn: RNN,
    lstm: LSTM,
    gru: GRU,
    lstm_cell: LSTMCell,
    gru_cell: GRUCell,
    rnn_cell: RNNCell,
}

fn stacked() -> RecurrentOptions {
    RecurrentOptions::default()
        .num_layers(2)
        .batch_first(true)
        .bidirectional(true)
}

fn holder() -> Recurrents {
    Recurrents {
        core: ModuleCore::default(),
        rnn: RNN::with_options(5, 7, stacked()).unwrap(),
        lstm: LSTM::with_options(5, 7, stacked()).unwrap(),
        gru: GRU::with_options(5, 7, stacked()).unwrap(),
        lstm_cell: LSTMCell::new(5, 7).unwrap(),
        gru_cell: GRUCell::new(5, 7).unwrap(),
        rnn_cell: RNNCell::new(5, 7).unwrap(),
    }
}

/// The holder with the case's state loaded strictly (every sub-case starts from it).
fn loaded(case: &Case) -> Recurrents {
    let model = holder();
    load_strict(case, &model);
    model
}

#[test]
fn recurrent_reprs_and_state_dict_keys_match_pytorch() {
    let case = Case::load("p_rnn");
    let model = loaded(&case);
    check_reprs(&case, &model);
    check_state_dict_keys(&case, &model);
}

/// Sub-cases `<name>/h0` and `<name>/no_h0` of a layer whose state is `h` alone (RNN, GRU),
/// each on a freshly loaded holder.
fn check_hidden_only_layer<M>(name: &str, pick: fn(&Recurrents) -> &M)
where
    M: Module
        + Forward<Tensor, Output = (Tensor, Tensor)>
        + Forward<(Tensor, Tensor), Output = (Tensor, Tensor)>,
{
    let case = Case::load("p_rnn");
    let model = loaded(&case);
    let id = format!("{name}/h0");
    let (input, h0) = (case.input(&id, "input"), case.input(&id, "h0"));
    let (output, h_n) = pick(&model).call((input.clone(), h0.clone())).unwrap();
    case.check_subcase(
        &id,
        &[("output", output), ("h_n", h_n)],
        &[("input", input), ("h0", h0)],
        &params_of(pick(&model)),
    );

    let model = loaded(&case);
    let id = format!("{name}/no_h0");
    let input = case.input(&id, "input");
    let (output, h_n) = pick(&model).call(input.clone()).unwrap();
    case.check_subcase(
        &id,
        &[("output", output), ("h_n", h_n)],
        &[("input", input)],
        &params_of(pick(&model)),
    );
}

#[test]
fn rnn_with_and_without_h0_matches_pytorch() {
    check_hidden_only_layer("rnn", |m| &m.rnn);
}

#[test]
fn gru_with_and_without_h0_matches_pytorch() {
    check_hidden_only_layer("gru", |m| &m.gru);
}

#[test]
fn lstm_with_and_without_initial_states_matches_pytorch() {
    let case = Case::load("p_rnn");
    let model = loaded(&case);
    let id = "lstm/h0";
    let (input, h0, c0) = (
        case.input(id, "input"),
        case.input(id, "h0"),
        case.input(id, "c0"),
    );
    let (output, (h_n, c_n)) = model
        .lstm
        .call((input.clone(), (h0.clone(), c0.clone())))
        .unwrap();
    case.check_subcase(
        id,
        &[("output", output), ("h_n", h_n), ("c_n", c_n)],
        &[("input", input), ("h0", h0), ("c0", c0)],
        &params_of(&model.lstm),
    );

    let model = loaded(&case);
    let input = case.input("lstm/no_h0", "input");
    let (output, (h_n, c_n)) = model.lstm.call(input.clone()).unwrap();
    case.check_subcase(
        "lstm/no_h0",
        &[("output", output), ("h_n", h_n), ("c_n", c_n)],
        &[("input", input)],
        &params_of(&model.lstm),
    );
}

#[test]
fn lstm_cell_with_and_without_hx_matches_pytorch() {
    let case = Case::load("p_rnn");
    let model = loaded(&case);
    let id = "lstm_cell/hx";
    let (input, hx, cx) = (
        case.input(id, "input"),
        case.input(id, "hx"),
        case.input(id, "cx"),
    );
    let (h, c) = model
        .lstm_cell
        .call((input.clone(), (hx.clone(), cx.clone())))
        .unwrap();
    case.check_subcase(
        id,
        &[("h", h), ("c", c)],
        &[("input", input), ("hx", hx), ("cx", cx)],
        &params_of(&model.lstm_cell),
    );

    let model = loaded(&case);
    let input = case.input("lstm_cell/no_hx", "input");
    let (h, c) = model.lstm_cell.call(input.clone()).unwrap();
    case.check_subcase(
        "lstm_cell/no_hx",
        &[("h", h), ("c", c)],
        &[("input", input)],
        &params_of(&model.lstm_cell),
    );
    // From a zero state the hidden weights get an exactly zero gradient, as in PyTorch.
    let grad = model
        .lstm_cell
        .weights
        .get("weight_hh")
        .unwrap()
        .grad()
        .unwrap();
    assert!(grad.to_vec_f64().unwrap().iter().all(|g| *g == 0.0));
}

/// Sub-cases `<name>/hx` and, when `no_hx`, `<name>/no_hx` of a cell whose state is `h`
/// alone (RNNCell, GRUCell), each on a freshly loaded holder.
fn check_hidden_only_cell<M>(name: &str, no_hx: bool, pick: fn(&Recurrents) -> &M)
where
    M: Module + Forward<Tensor, Output = Tensor> + Forward<(Tensor, Tensor), Output = Tensor>,
{
    let case = Case::load("p_rnn");
    let model = loaded(&case);
    let id = format!("{name}/hx");
    let (input, hx) = (case.input(&id, "input"), case.input(&id, "hx"));
    let h = pick(&model).call((input.clone(), hx.clone())).unwrap();
    case.check_subcase(
        &id,
        &[("h", h)],
        &[("input", input), ("hx", hx)],
        &params_of(pick(&model)),
    );
    if no_hx {
        let model = loaded(&case);
        let id = format!("{name}/no_hx");
        let input = case.input(&id, "input");
        let h = pick(&model).call(input.clone()).unwrap();
        case.check_subcase(
            &id,
            &[("h", h)],
            &[("input", input)],
            &params_of(pick(&model)),
        );
    }
}

#[test]
fn gru_cell_with_and_without_hx_matches_pytorch() {
    check_hidden_only_cell("gru_cell", true, |m| &m.gru_cell);
}

#[test]
fn rnn_cell_with_hx_matches_pytorch() {
    check_hidden_only_cell("rnn_cell", false, |m| &m.rnn_cell);
}

#[test]
fn loading_a_checkpoint_with_missing_extra_and_misshaped_lstm_keys_gives_pytorchs_errors() {
    let case = Case::load("p_rnn");
    let mut edited = StateDict::new();
    for (key, tensor) in checkpoint(&case).iter() {
        match key {
            "lstm.weight_hh_l1_reverse" => {}
            "lstm.bias_ih_l0" => edited.insert(key, Tensor::zeros(&[21], DType::F32).unwrap()),
            _ => edited.insert(key, tensor.clone()),
        }
    }
    edited.insert(
        "lstm.weight_hr_l0",
        Tensor::zeros(&[7, 7], DType::F32).unwrap(),
    );
    let err = holder().load_state_dict(&edited, true, false).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Error(s) in loading state_dict for Recurrents:\n\t\
         Missing key(s) in state_dict: \"lstm.weight_hh_l1_reverse\". \n\t\
         Unexpected key(s) in state_dict: \"lstm.weight_hr_l0\". \n\t\
         size mismatch for lstm.bias_ih_l0: copying a param with shape torch.Size([21]) from checkpoint, \
         the shape in current model is torch.Size([28])."
    );
}

// ----- gradcheck (f64, small sizes) -----

fn f64_stacked() -> RecurrentOptions {
    RecurrentOptions::default()
        .num_layers(2)
        .bidirectional(true)
        .dtype(DType::F64)
}

#[test]
fn rnn_relu_and_gru_pass_gradcheck() {
    let relu = RNN::with_options(3, 4, f64_stacked().nonlinearity(Nonlinearity::Relu)).unwrap();
    let gru = GRU::with_options(3, 4, f64_stacked()).unwrap();
    let (x, h0) = (common::leaf(&[3, 2, 3], 1), common::leaf(&[4, 2, 4], 2));
    let run_rnn = |xs: &[Tensor]| {
        tensor_result(
            relu.call((xs[0].clone(), xs[1].clone()))
                .and_then(|(out, h_n)| joined(&[&out, &h_n])),
        )
    };
    gradcheck(
        run_rnn,
        &leaves(&[x.clone(), h0.clone()], &relu),
        GradcheckOptions::default(),
    )
    .unwrap();
    let run_gru = |xs: &[Tensor]| {
        tensor_result(
            gru.call((xs[0].clone(), xs[1].clone()))
                .and_then(|(out, h_n)| joined(&[&out, &h_n])),
        )
    };
    gradcheck(
        run_gru,
        &leaves(&[x, h0], &gru),
        GradcheckOptions::default(),
    )
    .unwrap();
}

#[test]
fn lstm_passes_gradcheck() {
    let lstm = LSTM::with_options(3, 4, f64_stacked().batch_first(true)).unwrap();
    let inputs = [
        common::leaf(&[2, 3, 3], 3),
        common::leaf(&[4, 2, 4], 4),
        common::leaf(&[4, 2, 4], 5),
    ];
    let run = |xs: &[Tensor]| {
        tensor_result(
            lstm.call((xs[0].clone(), (xs[1].clone(), xs[2].clone())))
                .and_then(|(out, (h_n, c_n))| joined(&[&out, &h_n, &c_n])),
        )
    };
    gradcheck(run, &leaves(&inputs, &lstm), GradcheckOptions::default()).unwrap();
}

#[test]
fn cells_pass_gradcheck() {
    let options = RecurrentCellOptions::default().dtype(DType::F64);
    let rnn = RNNCell::with_options(3, 4, options.clone()).unwrap();
    let gru = GRUCell::with_options(3, 4, options.clone()).unwrap();
    let lstm = LSTMCell::with_options(3, 4, options).unwrap();
    let (x, hx, cx) = (
        common::leaf(&[2, 3], 6),
        common::leaf(&[2, 4], 7),
        common::leaf(&[2, 4], 8),
    );
    let run_rnn = |xs: &[Tensor]| tensor_result(rnn.call((xs[0].clone(), xs[1].clone())));
    gradcheck(
        run_rnn,
        &leaves(&[x.clone(), hx.clone()], &rnn),
        GradcheckOptions::default(),
    )
    .unwrap();
    let run_gru = |xs: &[Tensor]| tensor_result(gru.call((xs[0].clone(), xs[1].clone())));
    gradcheck(
        run_gru,
        &leaves(&[x.clone(), hx.clone()], &gru),
        GradcheckOptions::default(),
    )
    .unwrap();
    let run_lstm = |xs: &[Tensor]| {
        tensor_result(
            lstm.call((xs[0].clone(), (xs[1].clone(), xs[2].clone())))
                .and_then(|(h, c)| joined(&[&h, &c])),
        )
    };
    gradcheck(
        run_lstm,
        &leaves(&[x, hx, cx], &lstm),
        GradcheckOptions::default(),
    )
    .unwrap();
}
