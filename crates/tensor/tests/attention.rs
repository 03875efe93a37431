//! Scaled dot-product attention: gradients by gradcheck, the causal mask's alignment by hand,
//! and every `sdpa_*` sub-case of the `n_attention` conformance case (outputs and gradients of
//! query, key and value).

use crate::common;

use common::{Case, leaf};
use tessera_tensor::functional::{AttentionOptions, causal_mask, scaled_dot_product_attention};
use tessera_tensor::{DType, GradcheckOptions, Tensor, gradcheck};

#[test]
fn attention_gradcheck_plain_causal_and_float_mask() {
    let (q, k, v) = (
        leaf(&[2, 3, 4], 1),
        leaf(&[2, 5, 4], 2),
        leaf(&[2, 5, 3], 3),
    );
    let mask = leaf(&[3, 5], 4).detach();
    for options in [
        AttentionOptions::default(),
        AttentionOptions {
            is_causal: true,
            ..Default::default()
        },
        AttentionOptions {
            attn_mask: Some(&mask),
            scale: Some(0.3),
            ..Default::default()
        },
    ] {
        gradcheck(
            |t| scaled_dot_product_attention(&t[0], &t[1], &t[2], &options),
            &[q.clone(), k.clone(), v.clone()],
            GradcheckOptions::default(),
        )
        .unwrap();
    }
}

#[test]
fn causal_mask_is_top_left_aligned_when_queries_are_fewer_than_keys() {
    let mask = causal_mask(2, 3).unwrap();
    assert_eq!(
        mask.to_vec::<bool>().unwrap(),
        [true, false, false, true, true, false]
    );
}

#[test]
fn attention_key_and_query_widths_must_agree() {
    let q = Tensor::zeros(&[2, 3, 4], DType::F32).unwrap();
    let k = Tensor::zeros(&[2, 5, 6], DType::F32).unwrap();
    let err = scaled_dot_product_attention(&q, &k, &k, &AttentionOptions::default()).unwrap_err();
    assert!(
        err.to_string().contains("scaled_dot_product_attention")
            && err.to_string().contains("[2, 5, 6]"),
        "{err}"
    );
}

#[test]
fn attention_matches_pytorch_for_every_sdpa_subcase() {
    let case = Case::load("n_attention");
    type Options = fn(&Tensor) -> AttentionOptions;
    let cases: [(&str, Options); 6] = [
        ("sdpa_plain", |_| AttentionOptions::default()),
        ("sdpa_causal", |_| AttentionOptions {
            is_causal: true,
            ..Default::default()
        }),
        ("sdpa_causal_rect", |_| AttentionOptions {
            is_causal: true,
            ..Default::default()
        }),
        ("sdpa_bool_mask", |m| AttentionOptions {
            attn_mask: Some(m),
            ..Default::default()
        }),
        ("sdpa_float_mask", |m| AttentionOptions {
            attn_mask: Some(m),
            ..Default::default()
        }),
        ("sdpa_scale", |_| AttentionOptions {
            scale: Some(0.3),
            ..Default::default()
        }),
    ];
    for (id, options) in cases {
        let (q, k, v) = (
            case.input(id, "query"),
            case.input(id, "key"),
            case.input(id, "value"),
        );
        let mask = case
            .io
            .get(&format!("{id}/attn_mask"))
            .cloned()
            .unwrap_or_else(|| Tensor::zeros(&[], DType::F32).unwrap());
        let output = scaled_dot_product_attention(&q, &k, &v, &options(&mask)).unwrap();
        case.check_subcase(
            id,
            &[("output", output)],
            &[("query", q), ("key", k), ("value", v)],
            &[],
        );
    }
}
