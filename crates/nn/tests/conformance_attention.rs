//! MultiheadAttention (`n_attention`) and the transformer layers (`o_transformer`) against
//! PyTorch: the cases' holder modules built from `tessera-nn` layers and loaded strictly from
//! `state_dict.pt`, reprs, outputs, attention weights and the gradients of every input and
//! parameter.

use crate::common;

use common::{Case, check_reprs, check_state_dict_keys, load_strict, params_of};
use tessera_nn::layers::{
    Activation, AttentionInput, DecoderInput, EncoderInput, LayerNorm, MultiheadAttention,
    MultiheadAttentionOptions, TransformerDecoderLayer, TransformerEncoder,
    TransformerEncoderLayer, TransformerOptions,
};
use tessera_nn::{Call, Module, ModuleCore, ModuleExt};
use tessera_tensor::Tensor;

// ----- n_attention -----

#[derive(Module)]
struct Attentions {
    core: ModuleCore,
    mha_bf: MultiheadAttention,
    mha_sf: MultiheadAttention,
    mha_kvdim: MultiheadAttention,
}

fn attentions(case: &Case) -> Attentions {
    let options = MultiheadAttentionOptions::default();
    let model = Attentions {
        core: ModuleCore::default(),
        mha_bf: MultiheadAttention::with_options(16, 4, options.clone().batch_first(true)).unwrap(),
        mha_sf: MultiheadAttention::new(16, 4).unwrap(),
        mha_kvdim: MultiheadAttention::with_options(
            16,
            4,
            options.batch_first(true).kdim(10).vdim(12),
        )
        .unwrap(),
    };
    load_strict(case, &model);
    model
}

/// Runs one MultiheadAttention sub-case: `input` is `(name, tensor)` pairs of the call.
fn run_attention(
    case: &Case,
    id: &str,
    mha: &MultiheadAttention,
    call: AttentionInput,
    inputs: &[(&str, Tensor)],
) {
    let (output, weights) = mha.call(call).unwrap();
    let mut outputs = vec![("output", output)];
    outputs.extend(weights.map(|w| ("attn_weights", w)));
    case.check_subcase(id, &outputs, inputs, &params_of(mha));
}

#[test]
fn multihead_attention_reprs_and_keys_match_pytorch() {
    let case = Case::load("n_attention");
    let model = attentions(&case);
    check_reprs(&case, &model);
    check_state_dict_keys(&case, &model);
}

#[test]
fn multihead_attention_with_key_padding_mask_averages_weights_like_pytorch() {
    let case = Case::load("n_attention");
    let model = attentions(&case);
    let id = "mha_bf/kpm";
    let (q, k, v) = (
        case.input(id, "query"),
        case.input(id, "key"),
        case.input(id, "value"),
    );
    let call = AttentionInput::new(q.clone(), k.clone(), v.clone())
        .key_padding_mask(case.input(id, "key_padding_mask"));
    run_attention(
        &case,
        id,
        &model.mha_bf,
        call,
        &[("query", q), ("key", k), ("value", v)],
    );
}

#[test]
fn multihead_attention_with_a_3d_float_mask_returns_per_head_weights_like_pytorch() {
    let case = Case::load("n_attention");
    let model = attentions(&case);
    let id = "mha_bf/mask3d_per_head";
    let (q, k, v) = (
        case.input(id, "query"),
        case.input(id, "key"),
        case.input(id, "value"),
    );
    let call = AttentionInput::new(q.clone(), k.clone(), v.clone())
        .attn_mask(case.io(&format!("{id}/attn_mask")))
        .average_attn_weights(false);
    run_attention(
        &case,
        id,
        &model.mha_bf,
        call,
        &[("query", q), ("key", k), ("value", v)],
    );
}

#[test]
fn multihead_attention_sequence_first_causal_self_attention_matches_pytorch() {
    let case = Case::load("n_attention");
    for (id, need_weights) in [("mha_sf/causal", true), ("mha_sf/causal_no_weights", false)] {
        let model = attentions(&case);
        let x = case.input(id, "input");
        let call = AttentionInput::new(x.clone(), x.clone(), x.clone())
            .attn_mask(case.io(&format!("{id}/attn_mask")))
            .need_weights(need_weights);
        run_attention(&case, id, &model.mha_sf, call, &[("input", x)]);
    }
}

#[test]
fn multihead_attention_with_other_key_and_value_widths_uses_separate_projections() {
    let case = Case::load("n_attention");
    let model = attentions(&case);
    let id = "mha_kvdim/plain";
    let (q, k, v) = (
        case.input(id, "query"),
        case.input(id, "key"),
        case.input(id, "value"),
    );
    let call = AttentionInput::new(q.clone(), k.clone(), v.clone());
    run_attention(
        &case,
        id,
        &model.mha_kvdim,
        call,
        &[("query", q), ("key", k), ("value", v)],
    );
}

// ----- o_transformer -----

#[derive(Module)]
struct Transformers {
    core: ModuleCore,
    enc_post_relu: TransformerEncoderLayer,
    enc_post_gelu: TransformerEncoderLayer,
    enc_pre_relu: TransformerEncoderLayer,
    enc_pre_gelu: TransformerEncoderLayer,
    encoder2: TransformerEncoder,
    decoder: TransformerDecoderLayer,
}

fn small() -> TransformerOptions {
    TransformerOptions::default()
        .dim_feedforward(32)
        .dropout(0.0)
        .batch_first(true)
}

fn transformers(case: &Case) -> Transformers {
    let layer = |norm_first: bool, activation: Activation| {
        TransformerEncoderLayer::with_options(
            16,
            4,
            small().norm_first(norm_first).activation(activation),
        )
        .unwrap()
    };
    let model = Transformers {
        core: ModuleCore::default(),
        enc_post_relu: layer(false, Activation::Relu),
        enc_post_gelu: layer(false, Activation::Gelu),
        enc_pre_relu: layer(true, Activation::Relu),
        enc_pre_gelu: layer(true, Activation::Gelu),
        encoder2: TransformerEncoder::new(
            layer(false, Activation::Relu),
            2,
            Some(LayerNorm::new(&[16]).unwrap()),
        )
        .unwrap(),
        decoder: TransformerDecoderLayer::with_options(16, 4, small()).unwrap(),
    };
    load_strict(case, &model);
    model
}

#[test]
fn transformer_reprs_and_state_dict_key_order_match_pytorch() {
    let case = Case::load("o_transformer");
    let model = transformers(&case);
    check_reprs(&case, &model);
    check_state_dict_keys(&case, &model);
}

#[test]
fn encoder_layers_post_and_pre_norm_relu_and_gelu_match_pytorch() {
    let case = Case::load("o_transformer");
    let model = transformers(&case);
    for (name, layer) in [
        ("enc_post_relu", &model.enc_post_relu),
        ("enc_post_gelu", &model.enc_post_gelu),
        ("enc_pre_relu", &model.enc_pre_relu),
        ("enc_pre_gelu", &model.enc_pre_gelu),
    ] {
        let id = format!("{name}/plain");
        let src = case.input(&id, "src");
        let output = layer.call(src.clone()).unwrap();
        case.check_subcase(
            &id,
            &[("output", output)],
            &[("src", src)],
            &params_of(layer),
        );
    }
}

#[test]
fn encoder_layer_with_causal_and_key_padding_masks_matches_pytorch() {
    let case = Case::load("o_transformer");
    let model = transformers(&case);
    let id = "enc_post_relu/masked";
    let src = case.input(id, "src");
    let call = EncoderInput::new(src.clone())
        .src_mask(case.io(&format!("{id}/src_mask")))
        .src_key_padding_mask(case.io(&format!("{id}/src_key_padding_mask")));
    let output = model.enc_post_relu.call(call).unwrap();
    case.check_subcase(
        id,
        &[("output", output)],
        &[("src", src)],
        &params_of(&model.enc_post_relu),
    );
}

#[test]
fn encoder_stack_with_final_norm_and_key_padding_matches_pytorch() {
    let case = Case::load("o_transformer");
    let model = transformers(&case);
    let id = "encoder2/padded";
    let src = case.input(id, "src");
    let call = EncoderInput::new(src.clone())
        .src_key_padding_mask(case.io(&format!("{id}/src_key_padding_mask")));
    let output = model.encoder2.call(call).unwrap();
    case.check_subcase(
        id,
        &[("output", output)],
        &[("src", src)],
        &params_of(&model.encoder2),
    );
}

/// `encoder2/padded_eval_nograd`: PyTorch's eval/no_grad fast path writes zeros into padded
/// rows before the final norm, which Tessera does not imitate; the conformance README allows
/// either there, so only the rows the key padding mask keeps are compared.
#[test]
fn encoder_stack_in_eval_without_grad_matches_pytorch_on_unpadded_rows() {
    let case = Case::load("o_transformer");
    let model = transformers(&case);
    model.encoder2.eval();
    let id = "encoder2/padded_eval_nograd";
    let padding = case.io("encoder2/padded/src_key_padding_mask");
    let output = {
        let _guard = tessera_tensor::no_grad();
        let call =
            EncoderInput::new(case.io("encoder2/padded/src")).src_key_padding_mask(padding.clone());
        model.encoder2.call(call).unwrap()
    };
    let key = format!("{id}/output");
    let expected = case.io(&key);
    let padded = padding.to_vec::<bool>().unwrap();
    assert!(padded.contains(&true) && padded.contains(&false));
    let width = output.shape()[2];
    let (actual, expected) = (
        output.reshape(&[padded.len(), width]).unwrap(),
        expected.reshape(&[padded.len(), width]).unwrap(),
    );
    let (rtol, atol) = case.tolerance_of(&key);
    for (row, _) in padded.iter().enumerate().filter(|(_, p)| !**p) {
        common::assert_close(
            &actual.select(0, row).unwrap(),
            &expected.select(0, row).unwrap(),
            rtol,
            atol,
            &format!("{key} row {row}"),
        );
    }
}

#[test]
fn decoder_layer_with_causal_mask_and_memory_padding_matches_pytorch() {
    let case = Case::load("o_transformer");
    let model = transformers(&case);
    let id = "decoder/causal";
    let (tgt, memory) = (case.input(id, "tgt"), case.input(id, "memory"));
    let call = DecoderInput::new(tgt.clone(), memory.clone())
        .tgt_mask(case.io(&format!("{id}/tgt_mask")))
        .memory_key_padding_mask(case.io(&format!("{id}/memory_key_padding_mask")));
    let output = model.decoder.call(call).unwrap();
    case.check_subcase(
        id,
        &[("output", output)],
        &[("tgt", tgt), ("memory", memory)],
        &params_of(&model.decoder),
    );
}

#[test]
fn encoder_clones_start_with_the_given_layers_parameters() {
    let layer = TransformerEncoderLayer::with_options(8, 2, small()).unwrap();
    let expected = layer.linear1.weight.to_vec_f64().unwrap();
    let encoder = TransformerEncoder::new(layer, 3, None).unwrap();
    assert_eq!(encoder.layers.len(), 3);
    for clone in encoder.layers.iter() {
        assert_eq!(clone.linear1.weight.to_vec_f64().unwrap(), expected);
    }
    // Clones own their tensors: changing one leaves the others.
    {
        let _guard = tessera_tensor::no_grad();
        encoder
            .layers
            .get(1)
            .unwrap()
            .linear1
            .weight
            .fill_(0.0)
            .unwrap();
    }
    assert_eq!(
        encoder
            .layers
            .get(0)
            .unwrap()
            .linear1
            .weight
            .to_vec_f64()
            .unwrap(),
        expected
    );
}
