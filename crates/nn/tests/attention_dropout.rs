//! Dropout on attention probabilities, in `functional::scaled_dot_product_attention` and in
//! `MultiheadAttention` in train mode, checked against the definition of PyTorch's inverted
//! dropout: p = 0 is the identity, p = 1 zeroes every weight (so the output), each kept weight
//! is the plain one times `1 / (1 - p)`, and the same seed draws the same mask. PyTorch's MHA
//! returns the weights after dropout, as these tests expect.

use std::sync::{Mutex, MutexGuard};
use tessera_nn::layers::{AttentionInput, MultiheadAttention, MultiheadAttentionOptions};
use tessera_nn::{Call, ModuleExt};
use tessera_tensor::functional::{AttentionOptions, attention_with_weights};
use tessera_tensor::{DType, Generator, Tensor, manual_seed};

/// The tests seed and draw from the global generator (as does building a layer), so they
/// run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static RANDOM: Mutex<()> = Mutex::new(());
    RANDOM.lock().unwrap_or_else(|e| e.into_inner())
}

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F64, &mut Generator::new(seed)).unwrap()
}

/// Query `[2, 2, 3, 4]`, key `[2, 2, 5, 4]`, value `[2, 2, 5, 6]`.
fn qkv() -> (Tensor, Tensor, Tensor) {
    (
        randn(&[2, 2, 3, 4], 1),
        randn(&[2, 2, 5, 4], 2),
        randn(&[2, 2, 5, 6], 3),
    )
}

fn sdpa(p: f64) -> (Tensor, Tensor) {
    let (q, k, v) = qkv();
    let options = AttentionOptions {
        dropout_p: p,
        ..Default::default()
    };
    attention_with_weights(&q, &k, &v, &options).unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec_f64().unwrap()
}

/// Asserts each of `dropped` is 0 or `plain / (1 - p)`, and that both occur.
fn assert_inverted_dropout(dropped: &Tensor, plain: &Tensor, p: f64) {
    let (d, w) = (values(dropped), values(plain));
    assert_eq!(d.len(), w.len());
    let mut zeros = 0;
    for (i, (&d, &w)) in d.iter().zip(&w).enumerate() {
        if d == 0.0 {
            zeros += 1;
        } else {
            let kept = w / (1.0 - p);
            assert!(
                (d - kept).abs() <= 1e-12 * kept.abs(),
                "weight {i}: {d} vs {kept}"
            );
        }
    }
    assert!(
        0 < zeros && zeros < d.len(),
        "{zeros} of {} dropped",
        d.len()
    );
}

#[test]
fn sdpa_with_dropout_zero_is_plain_attention() {
    let _serial = serial();
    let (q, k, v) = qkv();
    let plain = attention_with_weights(&q, &k, &v, &AttentionOptions::default()).unwrap();
    let (output, weights) = sdpa(0.0);
    assert_eq!(values(&output), values(&plain.0));
    assert_eq!(values(&weights), values(&plain.1));
}

#[test]
fn sdpa_with_dropout_one_gives_zero_weights_and_output() {
    let _serial = serial();
    let (output, weights) = sdpa(1.0);
    assert!(values(&weights).iter().all(|&w| w == 0.0));
    assert!(values(&output).iter().all(|&o| o == 0.0));
}

#[test]
fn sdpa_dropout_keeps_weights_scaled_by_one_over_one_minus_p_and_attends_with_them() {
    let _serial = serial();
    let (plain, p) = (sdpa(0.0).1, 0.4);
    manual_seed(11);
    let (output, weights) = sdpa(p);
    assert_inverted_dropout(&weights, &plain, p);
    let expected = weights.matmul(&qkv().2).unwrap();
    tessera_testkit::assert_close(&output, &expected, 1e-12, 1e-12, "dropped weights @ v");
}

#[test]
fn sdpa_dropout_is_the_same_for_the_same_seed() {
    let _serial = serial();
    manual_seed(5);
    let first = sdpa(0.5).0;
    manual_seed(5);
    let again = sdpa(0.5).0;
    manual_seed(6);
    let other = sdpa(0.5).0;
    assert_eq!(values(&first), values(&again));
    assert_ne!(values(&first), values(&other));
}

/// A batch-first `MultiheadAttention(8, 2, dropout=p)` in f64, with its query and key/value.
fn mha(p: f64) -> (MultiheadAttention, Tensor, Tensor) {
    let options = MultiheadAttentionOptions::default()
        .dropout(p)
        .batch_first(true)
        .dtype(DType::F64);
    let layer = MultiheadAttention::with_options(8, 2, options).unwrap();
    (layer, randn(&[2, 3, 8], 4), randn(&[2, 5, 8], 5))
}

/// Output and per-head weights `[N, heads, L, S]`.
fn attend(layer: &MultiheadAttention, q: &Tensor, kv: &Tensor) -> (Tensor, Tensor) {
    let input = AttentionInput::new(q.clone(), kv.clone(), kv.clone()).average_attn_weights(false);
    let (output, weights) = layer.call(input).unwrap();
    (output, weights.unwrap())
}

#[test]
fn multihead_attention_drops_weights_only_in_train_mode() {
    let _serial = serial();
    let (layer, q, kv) = mha(0.5);
    layer.eval();
    let plain = attend(&layer, &q, &kv);
    let again = attend(&layer, &q, &kv);
    assert_eq!(values(&plain.0), values(&again.0), "eval is deterministic");
    layer.train(true);
    manual_seed(3);
    let (output, weights) = attend(&layer, &q, &kv);
    assert_inverted_dropout(&weights, &plain.1, 0.5);
    assert_ne!(values(&output), values(&plain.0));
    manual_seed(3);
    assert_eq!(
        values(&attend(&layer, &q, &kv).0),
        values(&output),
        "same seed"
    );
}

/// With every weight dropped the heads give zeros, so the output is `out_proj`'s bias.
#[test]
fn multihead_attention_with_dropout_one_outputs_the_projection_bias() {
    let _serial = serial();
    let (layer, q, kv) = mha(1.0);
    {
        let _guard = tessera_tensor::no_grad();
        layer.out_proj.bias.as_ref().unwrap().fill_(0.25).unwrap();
    }
    let (output, weights) = attend(&layer, &q, &kv);
    assert!(values(&weights).iter().all(|&w| w == 0.0));
    assert!(values(&output).iter().all(|&o| o == 0.25));
}
