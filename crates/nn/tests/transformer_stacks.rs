//! `Transformer`, the `TransformerDecoder` stack and the pre-norm gelu decoder layer: a
//! Transformer whose layers hold `o_transformer`'s PyTorch weights prints PyTorch's repr (made
//! of the case's printed children), lists PyTorch's key order and computes what its encoder,
//! decoder layers and final norm compute when called one by one; the pre-norm gelu decoder
//! layer computes its definition, composed from its own sublayers.

use crate::common;

use common::{Case, checkpoint, json_strings, state_dict_keys};
use tessera_nn::layers::{
    Activation, AttentionInput, DecoderInput, EncoderInput, LayerNorm, MultiheadAttention,
    Transformer, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
    TransformerInput, TransformerOptions,
};
use tessera_nn::{Call, Module, ModuleExt, StateDict};
use tessera_tensor::Tensor;

fn small() -> TransformerOptions {
    TransformerOptions::default()
        .dim_feedforward(32)
        .dropout(0.0)
        .batch_first(true)
}

/// The second decoder layer's key for the first one's: attention blocks and the first and
/// last norms swapped, so that the two layers of the stack differ (same shapes).
fn swapped(key: &str) -> String {
    let swaps = [
        ("self_attn.", "multihead_attn."),
        ("multihead_attn.", "self_attn."),
        ("norm1.", "norm3."),
        ("norm3.", "norm1."),
    ];
    swaps
        .iter()
        .find_map(|(from, to)| key.strip_prefix(from).map(|rest| format!("{to}{rest}")))
        .unwrap_or_else(|| key.to_string())
}

/// `checkpoint`'s entries under `from` (a module prefix with its dot), keyed `to` + the rest
/// renamed by `rename`.
fn moved(
    checkpoint: &StateDict,
    from: &str,
    to: &str,
    rename: fn(&str) -> String,
) -> Vec<(String, Tensor)> {
    checkpoint
        .iter()
        .filter_map(|(key, t)| {
            let rest = key.strip_prefix(from)?;
            Some((format!("{to}{}", rename(rest)), t.deep_clone().unwrap()))
        })
        .collect()
}

/// The state of the o_transformer-based Transformer: `encoder.*` is `encoder2.*`, decoder
/// layer 0 is `decoder.*`, layer 1 the same with [`swapped`] keys, and the decoder's final
/// norm is `encoder2.norm.*`.
fn transformer_state(case: &Case) -> StateDict {
    let pt = checkpoint(case);
    let same = |k: &str| k.to_string();
    let mut state = StateDict::new();
    for (key, t) in moved(&pt, "encoder2.", "encoder.", same)
        .into_iter()
        .chain(moved(&pt, "decoder.", "decoder.layers.0.", same))
        .chain(moved(&pt, "decoder.", "decoder.layers.1.", swapped))
        .chain(moved(&pt, "encoder2.norm.", "decoder.norm.", same))
    {
        state.insert(key, t);
    }
    state
}

/// The pieces of [`transformer_state`] as separate modules, to call one by one.
struct Pieces {
    encoder: TransformerEncoder,
    decoder0: TransformerDecoderLayer,
    decoder1: TransformerDecoderLayer,
    norm: LayerNorm,
}

fn load(module: &dyn Module, entries: Vec<(String, Tensor)>) {
    let state: StateDict = entries.into_iter().collect();
    assert!(
        module
            .load_state_dict(&state, true, false)
            .unwrap()
            .is_empty()
    );
}

fn pieces(case: &Case) -> Pieces {
    let pt = checkpoint(case);
    let same = |k: &str| k.to_string();
    let layer = TransformerEncoderLayer::with_options(16, 4, small()).unwrap();
    let p = Pieces {
        encoder: TransformerEncoder::new(layer, 2, Some(LayerNorm::new(&[16]).unwrap())).unwrap(),
        decoder0: TransformerDecoderLayer::with_options(16, 4, small()).unwrap(),
        decoder1: TransformerDecoderLayer::with_options(16, 4, small()).unwrap(),
        norm: LayerNorm::new(&[16]).unwrap(),
    };
    load(&p.encoder, moved(&pt, "encoder2.", "", same));
    load(&p.decoder0, moved(&pt, "decoder.", "", same));
    load(&p.decoder1, moved(&pt, "decoder.", "", swapped));
    load(&p.norm, moved(&pt, "encoder2.norm.", "", same));
    p
}

fn transformer(case: &Case) -> Transformer {
    let model = Transformer::with_options(16, 4, 2, 2, small()).unwrap();
    let missing = model
        .load_state_dict(&transformer_state(case), true, false)
        .unwrap();
    assert!(missing.is_empty());
    model
}

/// `text` with every line after the first indented by `spaces` (PyTorch's `_addindent`).
fn indented(text: &str, spaces: usize) -> String {
    text.replace('\n', &format!("\n{}", " ".repeat(spaces)))
}

/// Expected from PyTorch's printed `encoder2` and `decoder` (`case.json`) nested as
/// `nn.Transformer.__repr__` nests its children.
#[test]
fn transformer_repr_nests_pytorchs_printed_encoder_and_decoder_layers() {
    let case = Case::load("o_transformer");
    let repr_of = |name: &str| case.json["modules"][name]["repr"].as_str().unwrap();
    let norm = "LayerNorm((16,), eps=1e-05, elementwise_affine=True, bias=True)";
    let expected = format!(
        "Transformer(\n  (encoder): {}\n  (decoder): TransformerDecoder(\n    (layers): ModuleList(\n      (0-1): 2 x {}\n    )\n    (norm): {norm}\n  )\n)",
        indented(repr_of("encoder2"), 2),
        indented(repr_of("decoder"), 6),
    );
    assert_eq!(transformer(&case).repr(), expected);
}

/// Expected: PyTorch's key lists of `encoder2` and `decoder` (`case.json`) in
/// `nn.Transformer`'s registration order (encoder, then decoder layers, then its norm).
#[test]
fn transformer_state_dict_keys_follow_pytorchs_order() {
    let case = Case::load("o_transformer");
    let keys_of = |name: &str| json_strings(&case.json["modules"][name]["state_dict_keys"]);
    let mut expected: Vec<String> = keys_of("encoder2")
        .iter()
        .map(|k| format!("encoder.{k}"))
        .collect();
    for layer in 0..2 {
        expected.extend(
            keys_of("decoder")
                .iter()
                .map(|k| format!("decoder.layers.{layer}.{k}")),
        );
    }
    expected.extend(["decoder.norm.weight".into(), "decoder.norm.bias".into()]);
    assert_eq!(state_dict_keys(&transformer(&case)), expected);
}

/// Expected: the definition `norm(dec1(dec0(tgt, memory), memory))` with
/// `memory = encoder(src)`, the pieces called one by one; the encoder's part also against
/// PyTorch's `encoder2/padded/output`.
#[test]
fn transformer_forward_and_gradients_equal_its_encoder_and_decoder_stack_called_by_hand() {
    let case = Case::load("o_transformer");
    let model = transformer(&case);
    let by_hand = pieces(&case);
    let padding = case.io("encoder2/padded/src_key_padding_mask");
    let tgt_mask = case.io("decoder/causal/tgt_mask");
    let leaves = || {
        (
            case.input("encoder2/padded", "src"),
            case.input("decoder/causal", "tgt"),
        )
    };

    let (src, tgt) = leaves();
    let output = model
        .call(
            TransformerInput::new(src.clone(), tgt.clone())
                .src_key_padding_mask(padding.clone())
                .tgt_mask(tgt_mask.clone())
                .memory_key_padding_mask(padding.clone()),
        )
        .unwrap();
    output.sum_all().unwrap().backward().unwrap();

    let (src2, tgt2) = leaves();
    let memory = by_hand
        .encoder
        .call(EncoderInput::new(src2.clone()).src_key_padding_mask(padding.clone()))
        .unwrap();
    case.check_key("encoder2/padded/output", &memory);
    let step = |layer: &TransformerDecoderLayer, x: Tensor| {
        layer
            .call(
                DecoderInput::new(x, memory.clone())
                    .tgt_mask(tgt_mask.clone())
                    .memory_key_padding_mask(padding.clone()),
            )
            .unwrap()
    };
    let x = step(&by_hand.decoder0, tgt2.clone());
    let expected = by_hand.norm.call(step(&by_hand.decoder1, x)).unwrap();
    expected.sum_all().unwrap().backward().unwrap();

    let close = |a: &Tensor, e: &Tensor, what: &str| common::assert_close(a, e, 1e-6, 1e-6, what);
    close(&output, &expected, "output");
    close(&src.grad().unwrap(), &src2.grad().unwrap(), "grad src");
    close(&tgt.grad().unwrap(), &tgt2.grad().unwrap(), "grad tgt");
}

#[test]
fn transformer_rejects_src_and_tgt_of_different_batch_sizes() {
    let model = Transformer::with_options(8, 2, 1, 1, small()).unwrap();
    let src = Tensor::zeros(&[2, 3, 8], tessera_tensor::DType::F32).unwrap();
    let tgt = Tensor::zeros(&[3, 3, 8], tessera_tensor::DType::F32).unwrap();
    assert!(model.call((src, tgt)).is_err());
}

/// `attn(x, kv)` without weights, with the given masks.
fn attend(
    attn: &MultiheadAttention,
    x: &Tensor,
    kv: &Tensor,
    attn_mask: Option<&Tensor>,
    key_padding_mask: Option<&Tensor>,
) -> Tensor {
    let mut input = AttentionInput::new(x.clone(), kv.clone(), kv.clone()).need_weights(false);
    input.attn_mask = attn_mask.cloned();
    input.key_padding_mask = key_padding_mask.cloned();
    attn.call(input).unwrap().0
}

/// Expected from the definition of PyTorch's pre-norm decoder layer, composed from the
/// layer's own sublayers: `x = tgt + sa(norm1(tgt))`, `x = x + mha(norm2(x), memory)`,
/// `x = x + linear2(gelu(linear1(norm3(x))))` (dropout 0). Weights: `o_transformer`'s
/// perturbed `decoder.*`, so no norm or bias is trivial.
#[test]
fn pre_norm_gelu_decoder_layer_computes_its_definition() {
    let case = Case::load("o_transformer");
    let options = small().norm_first(true).activation(Activation::Gelu);
    let layer = TransformerDecoderLayer::with_options(16, 4, options).unwrap();
    load(
        &layer,
        moved(&checkpoint(&case), "decoder.", "", |k| k.to_string()),
    );
    let id = "decoder/causal";
    let (tgt, memory) = (
        case.io(&format!("{id}/tgt")),
        case.io(&format!("{id}/memory")),
    );
    let tgt_mask = case.io(&format!("{id}/tgt_mask"));
    let memory_padding = case.io(&format!("{id}/memory_key_padding_mask"));

    let run = |layer: &TransformerDecoderLayer| {
        layer
            .call(
                DecoderInput::new(tgt.clone(), memory.clone())
                    .tgt_mask(tgt_mask.clone())
                    .memory_key_padding_mask(memory_padding.clone()),
            )
            .unwrap()
    };
    let output = run(&layer);

    let norm = |n: &LayerNorm, x: &Tensor| n.call(x.clone()).unwrap();
    let n1 = norm(&layer.norm1, &tgt);
    let x = tgt
        .add(&attend(&layer.self_attn, &n1, &n1, Some(&tgt_mask), None))
        .unwrap();
    let n2 = norm(&layer.norm2, &x);
    let x = x
        .add(&attend(
            &layer.multihead_attn,
            &n2,
            &memory,
            None,
            Some(&memory_padding),
        ))
        .unwrap();
    let hidden = layer
        .linear1
        .call(norm(&layer.norm3, &x))
        .unwrap()
        .gelu()
        .unwrap();
    let expected = x.add(&layer.linear2.call(hidden).unwrap()).unwrap();
    common::assert_close(&output, &expected, 1e-6, 1e-6, "pre-norm gelu decoder");

    let post_relu = TransformerDecoderLayer::with_options(16, 4, small()).unwrap();
    load(
        &post_relu,
        moved(&checkpoint(&case), "decoder.", "", |k| k.to_string()),
    );
    let other = run(&post_relu);
    assert_ne!(
        other.to_vec_f64().unwrap(),
        output.to_vec_f64().unwrap(),
        "norm_first and activation change the result"
    );
}
