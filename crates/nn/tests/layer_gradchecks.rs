//! Finite-difference gradchecks (f64, small sizes) of the attention and transformer layers
//! with their masks, PReLU, Dropout2d (eval, and train with the mask fixed by reseeding) and
//! ZeroPad2d: the gradients autograd gives every input and parameter are the central
//! differences of the forward.

mod common;

use common::{joined, leaf, leaves, tensor_result};
use std::sync::{Mutex, MutexGuard};
use tessera_nn::layers::{
    Activation, AttentionInput, DecoderInput, Dropout2d, EncoderInput, LayerNorm, LayerNormOptions,
    MultiheadAttention, MultiheadAttentionOptions, PReLU, PReLUOptions, Transformer,
    TransformerDecoder, TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer,
    TransformerInput, TransformerOptions, ZeroPad2d,
};
use tessera_nn::{Call, Module, ModuleExt};
use tessera_tensor::{DType, GradcheckOptions, Tensor, gradcheck, manual_seed};

/// Building a layer draws from the global generator, and the Dropout2d check reseeds it
/// inside its forward, so the tests run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static RANDOM: Mutex<()> = Mutex::new(());
    RANDOM.lock().unwrap_or_else(|e| e.into_inner())
}

/// Checks `run` over `inputs` followed by `module`'s parameters.
fn check(
    module: &dyn Module,
    inputs: &[Tensor],
    run: impl Fn(&[Tensor]) -> tessera_nn::Result<Tensor>,
) {
    gradcheck(
        |xs| tensor_result(run(xs)),
        &leaves(inputs, module),
        GradcheckOptions::default(),
    )
    .unwrap();
}

/// Bool `[n, n]`, true above the diagonal: the causal mask of the nn layers (true = masked).
fn causal(n: usize) -> Tensor {
    let masked: Vec<bool> = (0..n * n).map(|i| i % n > i / n).collect();
    Tensor::from_vec(masked, &[n, n]).unwrap()
}

/// Bool `[2, s]` key padding mask hiding the last key of the second sample.
fn last_key_padded(s: usize) -> Tensor {
    let padded: Vec<bool> = (0..2 * s).map(|i| i == 2 * s - 1).collect();
    Tensor::from_vec(padded, &[2, s]).unwrap()
}

fn tiny(norm_first: bool, activation: Activation) -> TransformerOptions {
    TransformerOptions::default()
        .dim_feedforward(6)
        .dropout(0.0)
        .batch_first(true)
        .norm_first(norm_first)
        .activation(activation)
        .dtype(DType::F64)
}

fn f64_norm() -> LayerNorm {
    LayerNorm::with_options(&[4], LayerNormOptions::default().dtype(DType::F64)).unwrap()
}

#[test]
fn multihead_attention_with_masks_passes_gradcheck() {
    let _serial = serial();
    let options = MultiheadAttentionOptions::default()
        .batch_first(true)
        .dtype(DType::F64);
    let packed = MultiheadAttention::with_options(4, 2, options.clone()).unwrap();
    let (q, k, v) = (
        leaf(&[2, 3, 4], 1),
        leaf(&[2, 3, 4], 2),
        leaf(&[2, 3, 4], 3),
    );
    check(&packed, &[q, k, v], |xs| {
        let input = AttentionInput::new(xs[0].clone(), xs[1].clone(), xs[2].clone())
            .attn_mask(causal(3))
            .key_padding_mask(last_key_padded(3));
        let (output, weights) = packed.call(input)?;
        joined(&[&output, &weights.unwrap()])
    });
    let separate = MultiheadAttention::with_options(4, 2, options.kdim(3).vdim(5)).unwrap();
    let (q, k, v) = (
        leaf(&[2, 3, 4], 4),
        leaf(&[2, 2, 3], 5),
        leaf(&[2, 2, 5], 6),
    );
    check(&separate, &[q, k, v], |xs| {
        let input = AttentionInput::new(xs[0].clone(), xs[1].clone(), xs[2].clone())
            .average_attn_weights(false);
        let (output, weights) = separate.call(input)?;
        joined(&[&output, &weights.unwrap()])
    });
}

#[test]
fn encoder_layers_post_and_pre_norm_pass_gradcheck() {
    let _serial = serial();
    for (norm_first, activation) in [(false, Activation::Relu), (true, Activation::Gelu)] {
        let layer =
            TransformerEncoderLayer::with_options(4, 2, tiny(norm_first, activation)).unwrap();
        check(&layer, &[leaf(&[2, 3, 4], 7)], |xs| {
            layer.call(
                EncoderInput::new(xs[0].clone())
                    .src_mask(causal(3))
                    .src_key_padding_mask(last_key_padded(3)),
            )
        });
    }
}

#[test]
fn decoder_layers_post_and_pre_norm_pass_gradcheck() {
    let _serial = serial();
    for (norm_first, activation) in [(false, Activation::Gelu), (true, Activation::Relu)] {
        let layer =
            TransformerDecoderLayer::with_options(4, 2, tiny(norm_first, activation)).unwrap();
        let inputs = [leaf(&[2, 3, 4], 8), leaf(&[2, 2, 4], 9)];
        check(&layer, &inputs, |xs| {
            layer.call(
                DecoderInput::new(xs[0].clone(), xs[1].clone())
                    .tgt_mask(causal(3))
                    .memory_key_padding_mask(last_key_padded(2)),
            )
        });
    }
}

#[test]
fn encoder_and_decoder_stacks_pass_gradcheck() {
    let _serial = serial();
    let options = tiny(false, Activation::Gelu);
    let encoder_layer = TransformerEncoderLayer::with_options(4, 2, options.clone()).unwrap();
    let encoder = TransformerEncoder::new(encoder_layer, 2, Some(f64_norm())).unwrap();
    check(&encoder, &[leaf(&[2, 3, 4], 10)], |xs| {
        encoder.call(EncoderInput::new(xs[0].clone()).src_mask(causal(3)))
    });
    let decoder_layer = TransformerDecoderLayer::with_options(4, 2, options).unwrap();
    let decoder = TransformerDecoder::new(decoder_layer, 2, Some(f64_norm())).unwrap();
    let inputs = [leaf(&[2, 3, 4], 11), leaf(&[2, 2, 4], 12)];
    check(&decoder, &inputs, |xs| {
        decoder.call(DecoderInput::new(xs[0].clone(), xs[1].clone()).tgt_mask(causal(3)))
    });
}

#[test]
fn transformer_passes_gradcheck() {
    let _serial = serial();
    let model = Transformer::with_options(4, 2, 1, 1, tiny(true, Activation::Gelu)).unwrap();
    let inputs = [leaf(&[2, 2, 4], 13), leaf(&[2, 3, 4], 14)];
    check(&model, &inputs, |xs| {
        model.call(
            TransformerInput::new(xs[0].clone(), xs[1].clone())
                .tgt_mask(causal(3))
                .src_key_padding_mask(last_key_padded(2)),
        )
    });
}

#[test]
fn prelu_per_channel_passes_gradcheck() {
    let _serial = serial();
    let options = PReLUOptions::default().dtype(DType::F64);
    let prelu = PReLU::with_options(3, options).unwrap();
    check(&prelu, &[leaf(&[2, 3, 4], 15)], |xs| {
        prelu.call(xs[0].clone())
    });
}

#[test]
fn dropout2d_passes_gradcheck_in_eval_and_in_train_with_a_fixed_mask() {
    let _serial = serial();
    let dropout = Dropout2d::new(0.5).unwrap();
    let x = leaf(&[2, 3, 2, 2], 16);
    dropout.eval();
    check(&dropout, std::slice::from_ref(&x), |xs| {
        dropout.call(xs[0].clone())
    });
    dropout.train(true);
    let seeded = |x: &Tensor| {
        manual_seed(17);
        dropout.call(x.clone())
    };
    let kept = seeded(&x).unwrap().to_vec_f64().unwrap();
    assert!(
        kept.contains(&0.0) && kept.iter().any(|&v| v != 0.0),
        "{kept:?}"
    );
    check(&dropout, &[x], |xs| seeded(&xs[0]));
}

#[test]
fn zero_pad2d_padding_and_cropping_passes_gradcheck() {
    let _serial = serial();
    let pad = ZeroPad2d::with_sides([1, -1, 2, 0]);
    check(&pad, &[leaf(&[1, 2, 3, 3], 18)], |xs| {
        pad.call(xs[0].clone())
    });
}
