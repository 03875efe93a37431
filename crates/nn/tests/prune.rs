//! Pruning (PyTorch's `torch.nn.utils.prune`): the state it leaves (key lists and order),
//! masks recomputed here from each rule, amounts and rounding, iterative and global pruning,
//! `remove`, the forward value, gradients and the errors.

use tessera_nn::prune::{
    Amount, global_unstructured, is_pruned, l1_unstructured, ln_structured, random_structured,
    random_unstructured, remove,
};
use tessera_nn::{Call, Conv2d, Linear, Module, ModuleCore, ModuleExt, NnError, Result};
use tessera_tensor::{DType, Tensor, manual_seed, no_grad};

// ----- fixtures -----

/// Twelve weights with distinct absolute values, so the L1 order is unambiguous.
const W12: [f32; 12] = [
    0.3, -1.2, 0.05, 2.0, -0.7, 0.9, -0.1, 1.5, -2.2, 0.6, 0.4, -1.0,
];

/// `Linear(3, 4)` with weight `W12` (shape `[4, 3]`) and bias `[0.1, 0.2, 0.3, 0.4]`.
fn linear() -> Result<Linear> {
    let lin = Linear::new(3, 4)?;
    lin.weight.set_data(&Tensor::from_slice(&W12, &[4, 3])?);
    let bias = lin.bias.as_ref().expect("Linear has a bias");
    bias.set_data(&Tensor::from_slice(&[0.1f32, 0.2, 0.3, 0.4], &[4])?);
    Ok(lin)
}

/// A `Linear(n, 1)` with weights `1, 2, ..., n`.
fn row(n: usize) -> Result<Linear> {
    let lin = Linear::new(n, 1)?;
    let w: Vec<f32> = (1..=n).map(|i| i as f32).collect();
    lin.weight.set_data(&Tensor::from_vec(w, &[1, n])?);
    Ok(lin)
}

/// Two layers in one module, to check paths and `is_pruned` on a tree.
#[derive(Module)]
struct Net {
    core: ModuleCore,
    l0: Linear,
    l1: Linear,
}

fn keys(m: &dyn Module) -> Result<Vec<String>> {
    Ok(m.state_dict()?.keys().map(String::from).collect())
}

fn param_names(m: &dyn Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

fn buffer_names(m: &dyn Module) -> Vec<String> {
    m.named_buffers().into_iter().map(|(n, _)| n).collect()
}

fn vals(t: &Tensor) -> Result<Vec<f64>> {
    Ok(t.detach().to_vec_f64()?)
}

fn mask(m: &dyn Module, name: &str) -> Result<Vec<f64>> {
    vals(&m.get_buffer(&format!("{name}_mask"))?)
}

fn zeros(mask: &[f64]) -> usize {
    mask.iter().filter(|&&m| m == 0.0).count()
}

/// The rule of `l1_unstructured`: zero the `k` smallest `|w|` among entries still 1.
fn l1_rule(w: &[f64], old: &[f64], k: usize) -> Vec<f64> {
    let mut alive: Vec<usize> = (0..w.len()).filter(|&i| old[i] == 1.0).collect();
    alive.sort_by(|&a, &b| w[a].abs().total_cmp(&w[b].abs()));
    let mut out = old.to_vec();
    for &i in &alive[..k] {
        out[i] = 0.0;
    }
    out
}

/// A mask of shape `[channels, per_channel]` (row-major) zeroing the given channels.
fn channel_mask(channels: usize, per_channel: usize, pruned: &[usize]) -> Vec<f64> {
    (0..channels * per_channel)
        .map(|i| f64::from(!pruned.contains(&(i / per_channel))))
        .collect()
}

fn w12() -> Vec<f64> {
    W12.iter().map(|&w| f64::from(w)).collect()
}

// ----- state: key lists and order -----

#[test]
fn l1_unstructured_linear_replaces_weight_by_orig_and_mask() -> Result<()> {
    let mut lin = linear()?;
    assert_eq!(keys(&lin)?, ["weight", "bias"]);
    assert!(!is_pruned(&lin));
    l1_unstructured(&mut lin, "weight", 0.25)?;
    assert_eq!(keys(&lin)?, ["bias", "weight_orig", "weight_mask"]);
    assert_eq!(param_names(&lin), ["bias", "weight_orig"]);
    assert_eq!(buffer_names(&lin), ["weight_mask"]);
    assert!(is_pruned(&lin));
    let expected = l1_rule(&w12(), &[1.0; 12], 3);
    assert_eq!(mask(&lin, "weight")?, expected);
    let orig = lin.get_parameter("weight_orig")?;
    assert_eq!(vals(&orig)?, w12());
    let masked: Vec<f64> = w12().iter().zip(&expected).map(|(w, m)| w * m).collect();
    assert_eq!(vals(&lin.weight)?, masked);
    Ok(())
}

#[test]
fn remove_makes_weight_a_parameter_again_registered_last() -> Result<()> {
    let mut lin = linear()?;
    l1_unstructured(&mut lin, "weight", Amount::Count(5))?;
    let pruned = vals(&lin.weight)?;
    remove(&mut lin, "weight")?;
    assert_eq!(keys(&lin)?, ["bias", "weight"]);
    assert_eq!(param_names(&lin), ["bias", "weight"]);
    assert!(buffer_names(&lin).is_empty());
    assert!(!is_pruned(&lin));
    let weight = lin.get_parameter("weight")?;
    assert_eq!(vals(&weight)?, pruned);
    assert_eq!(zeros(&pruned), 5);
    assert!(lin.weight.is_leaf() && lin.weight.requires_grad());
    Ok(())
}

#[test]
fn remove_of_an_unpruned_parameter_is_an_error() -> Result<()> {
    let mut lin = linear()?;
    let err = remove(&mut lin, "weight").unwrap_err();
    assert!(err.to_string().contains("has to be pruned before"), "{err}");
    Ok(())
}

#[test]
fn ln_structured_conv2d_prunes_the_output_channels_with_smallest_norm() -> Result<()> {
    let mut conv = Conv2d::new(2, 4, 3)?;
    let per = 2 * 3 * 3;
    // Channel c holds scale[c] everywhere, so its L2 norm is |scale[c]| * sqrt(18).
    let scale = [0.5f32, -3.0, 0.2, 1.0];
    let w: Vec<f32> = (0..4 * per).map(|i| scale[i / per]).collect();
    conv.weight.set_data(&Tensor::from_vec(w, &[4, 2, 3, 3])?);
    assert_eq!(keys(&conv)?, ["weight", "bias"]);
    ln_structured(&mut conv, "weight", 0.5, 2.0, 0)?;
    assert_eq!(keys(&conv)?, ["bias", "weight_orig", "weight_mask"]);
    assert_eq!(param_names(&conv), ["bias", "weight_orig"]);
    assert_eq!(buffer_names(&conv), ["weight_mask"]);
    assert_eq!(mask(&conv, "weight")?, channel_mask(4, per, &[0, 2]));
    remove(&mut conv, "weight")?;
    assert_eq!(keys(&conv)?, ["bias", "weight"]);
    assert_eq!(zeros(&vals(&conv.weight)?), 2 * per);
    Ok(())
}

#[test]
fn ln_structured_linear_rows_and_columns() -> Result<()> {
    // Rows of W12: L1 norms 1.55, 3.6, 3.8, 2.0; columns: 3.0, 3.8, 4.15.
    let mut lin = linear()?;
    ln_structured(&mut lin, "weight", Amount::Count(1), 1.0, 0)?;
    assert_eq!(mask(&lin, "weight")?, channel_mask(4, 3, &[0]));
    let mut lin = linear()?;
    ln_structured(&mut lin, "weight", Amount::Count(1), 1.0, -1)?;
    let expected: Vec<f64> = (0..12).map(|i| f64::from(i % 3 != 0)).collect();
    assert_eq!(mask(&lin, "weight")?, expected);
    // L-inf: row maxima 1.2, 2.0, 2.2, 1.0: rows 3 and 0 go.
    let mut lin = linear()?;
    ln_structured(&mut lin, "weight", 0.5, f64::INFINITY, 0)?;
    assert_eq!(mask(&lin, "weight")?, channel_mask(4, 3, &[0, 3]));
    Ok(())
}

// ----- amounts -----

#[test]
fn fraction_rounds_half_to_even_as_python() -> Result<()> {
    // 0.5 * 5 = 2.5 -> 2; 0.3 * 5 = 1.5 -> 2; 0.1 * 5 = 0.5 -> 0; 0.7 * 5 = 3.5 -> 4.
    for (fraction, pruned) in [(0.5, 2), (0.3, 2), (0.1, 0), (0.7, 4), (0.0, 0), (1.0, 5)] {
        let mut lin = row(5)?;
        l1_unstructured(&mut lin, "weight", fraction)?;
        let m = mask(&lin, "weight")?;
        assert_eq!(zeros(&m), pruned, "fraction {fraction}");
        assert_eq!(m, l1_rule(&[1.0, 2.0, 3.0, 4.0, 5.0], &[1.0; 5], pruned));
    }
    Ok(())
}

#[test]
fn count_prunes_exactly_that_many() -> Result<()> {
    let mut lin = linear()?;
    l1_unstructured(&mut lin, "weight", 7usize)?;
    assert_eq!(mask(&lin, "weight")?, l1_rule(&w12(), &[1.0; 12], 7));
    Ok(())
}

// ----- iterative pruning -----

#[test]
fn pruning_half_twice_leaves_a_quarter() -> Result<()> {
    let mut lin = Linear::new(4, 4)?;
    l1_unstructured(&mut lin, "weight", 0.5)?;
    assert_eq!(zeros(&mask(&lin, "weight")?), 8);
    l1_unstructured(&mut lin, "weight", 0.5)?;
    assert_eq!(zeros(&mask(&lin, "weight")?), 12);
    assert_eq!(keys(&lin)?, ["bias", "weight_orig", "weight_mask"]);
    Ok(())
}

#[test]
fn a_second_pruning_only_considers_unpruned_entries() -> Result<()> {
    manual_seed(7);
    let mut lin = linear()?;
    random_unstructured(&mut lin, "weight", 0.5)?;
    let first = mask(&lin, "weight")?;
    assert_eq!(zeros(&first), 6);
    // A third of the 6 survivors: the 2 smallest |w| among them.
    l1_unstructured(&mut lin, "weight", 1.0 / 3.0)?;
    assert_eq!(mask(&lin, "weight")?, l1_rule(&w12(), &first, 2));
    // A count counts survivors: 4 are left, so 5 is too many.
    let err = l1_unstructured(&mut lin, "weight", 5usize).unwrap_err();
    assert!(err.to_string().contains("amount=5"), "{err}");
    Ok(())
}

#[test]
fn structured_pruning_again_chooses_among_remaining_channels() -> Result<()> {
    let mut lin = linear()?;
    ln_structured(&mut lin, "weight", Amount::Count(1), 1.0, 0)?;
    // Remaining rows 1, 2, 3 with L1 norms 3.6, 3.8, 2.0: a half of 3 rounds to 2.
    ln_structured(&mut lin, "weight", 0.5, 1.0, 0)?;
    assert_eq!(mask(&lin, "weight")?, channel_mask(4, 3, &[0, 1, 3]));
    Ok(())
}

#[test]
fn unstructured_after_structured_keeps_the_pruned_channel() -> Result<()> {
    let mut lin = linear()?;
    ln_structured(&mut lin, "weight", Amount::Count(1), 1.0, 0)?;
    let first = mask(&lin, "weight")?;
    l1_unstructured(&mut lin, "weight", Amount::Count(2))?;
    assert_eq!(mask(&lin, "weight")?, l1_rule(&w12(), &first, 2));
    Ok(())
}

// ----- global pruning -----

#[test]
fn global_unstructured_uses_one_threshold_across_layers() -> Result<()> {
    let mut a = linear()?;
    let mut b = row(5)?;
    global_unstructured(
        &mut [
            (&mut a as &mut dyn Module, "weight"),
            (&mut b as &mut dyn Module, "weight"),
        ],
        0.5,
    )?;
    // 17 entries, round(8.5) = 8 pruned: the 8 smallest |w| of both together.
    let all: Vec<f64> = w12().into_iter().chain([1.0, 2.0, 3.0, 4.0, 5.0]).collect();
    let expected = l1_rule(&all, &[1.0; 17], 8);
    assert_eq!(mask(&a, "weight")?, expected[..12]);
    assert_eq!(mask(&b, "weight")?, expected[12..]);
    assert_eq!(keys(&b)?, ["bias", "weight_orig", "weight_mask"]);
    Ok(())
}

#[test]
fn global_unstructured_on_a_tree_combines_with_earlier_masks() -> Result<()> {
    let mut net = Net {
        core: ModuleCore::default(),
        l0: linear()?,
        l1: linear()?,
    };
    l1_unstructured(&mut net.l0, "weight", Amount::Count(6))?;
    global_unstructured(&mut [(&mut net.l0, "weight"), (&mut net.l1, "weight")], 0.5)?;
    // 18 survivors, 9 more pruned: where the first layer's survivors tie with the second's,
    // the first layer (earlier) is pruned first.
    let both: Vec<f64> = w12().into_iter().chain(w12()).collect();
    let old: Vec<f64> = l1_rule(&w12(), &[1.0; 12], 6)
        .into_iter()
        .chain([1.0; 12])
        .collect();
    let expected = l1_rule(&both, &old, 9);
    assert_eq!(mask(&net.l0, "weight")?, expected[..12]);
    assert_eq!(mask(&net.l1, "weight")?, expected[12..]);
    assert_eq!(
        keys(&net)?,
        [
            "l0.bias",
            "l0.weight_orig",
            "l0.weight_mask",
            "l1.bias",
            "l1.weight_orig",
            "l1.weight_mask"
        ]
    );
    assert!(is_pruned(&net));
    remove(&mut net.l0, "weight")?;
    assert!(is_pruned(&net));
    remove(&mut net.l1, "weight")?;
    assert!(!is_pruned(&net));
    Ok(())
}

// ----- forward and gradients -----

#[test]
fn forward_uses_the_masked_weight_recomputed_before_each_call() -> Result<()> {
    let mut lin = linear()?;
    l1_unstructured(&mut lin, "weight", 0.5)?;
    let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0], &[1, 3])?;
    let m = mask(&lin, "weight")?;
    let expect = |w: &[f64]| -> Vec<f64> {
        (0..4)
            .map(|o| {
                (0..3)
                    .map(|i| w[o * 3 + i] * m[o * 3 + i] * (i + 1) as f64)
                    .sum::<f64>()
                    + 0.1 * (o + 1) as f64
            })
            .collect()
    };
    let close = |a: &[f64], b: &[f64]| a.iter().zip(b).all(|(a, b)| (a - b).abs() < 1e-5);
    assert!(close(&vals(&lin.call(x.clone())?)?, &expect(&w12())));
    // Changing weight_orig in place (an optimizer step) is seen by the next call.
    let orig = lin.get_parameter("weight_orig")?;
    {
        let _guard = no_grad();
        orig.mul_scalar_(2.0)?;
    }
    let doubled: Vec<f64> = w12().iter().map(|w| w * 2.0).collect();
    assert!(close(&vals(&lin.call(x)?)?, &expect(&doubled)));
    Ok(())
}

#[test]
fn gradients_reach_weight_orig_and_are_zero_where_masked() -> Result<()> {
    let mut lin = linear()?;
    l1_unstructured(&mut lin, "weight", 0.5)?;
    let x = Tensor::ones(&[2, 3], DType::F32)?;
    lin.call(x)?.sum_all()?.backward()?;
    let grad = lin
        .get_parameter("weight_orig")?
        .grad()
        .expect("weight_orig has a gradient");
    let m = mask(&lin, "weight")?;
    // d(sum(x @ (w * m)^T))/dw = 2 * m (two rows of ones).
    let expected: Vec<f64> = m.iter().map(|m| 2.0 * m).collect();
    assert_eq!(vals(&grad)?, expected);
    assert!(lin.get_buffer("weight_mask")?.grad().is_none());
    Ok(())
}

// ----- errors -----

#[test]
fn bad_amounts_are_errors_and_leave_the_module_unchanged() -> Result<()> {
    let mut lin = linear()?;
    for amount in [
        Amount::Fraction(1.5),
        Amount::Fraction(-0.1),
        Amount::Fraction(f64::NAN),
    ] {
        let err = l1_unstructured(&mut lin, "weight", amount).unwrap_err();
        assert!(matches!(err, NnError::Invalid(_)), "{err}");
        assert!(
            err.to_string()
                .contains("should either be a float in the range [0, 1]"),
            "{err}"
        );
    }
    let err = l1_unstructured(&mut lin, "weight", 13usize).unwrap_err();
    assert_eq!(
        err.to_string(),
        "amount=13 should be smaller than the number of parameters to prune=12"
    );
    let err = ln_structured(&mut lin, "weight", 5usize, 2.0, 0).unwrap_err();
    assert!(err.to_string().contains("prune=4"), "{err}");
    assert_eq!(keys(&lin)?, ["weight", "bias"]);
    assert!(!is_pruned(&lin));
    Ok(())
}

#[test]
fn bad_names_and_dims_are_errors() -> Result<()> {
    let mut lin = linear()?;
    let err = l1_unstructured(&mut lin, "wieght", 0.5).unwrap_err();
    assert!(matches!(err, NnError::NotFound(_)), "{err}");
    let err = ln_structured(&mut lin, "weight", 0.5, 2.0, 2).unwrap_err();
    assert!(err.to_string().contains("Dimension out of range"), "{err}");
    let err = ln_structured(&mut lin, "weight", 0.5, 2.0, -3).unwrap_err();
    assert!(err.to_string().contains("Dimension out of range"), "{err}");
    let err = random_structured(&mut lin, "bias", 0.5, 0).unwrap_err();
    assert!(err.to_string().contains("multidimensional"), "{err}");
    // Pruning is per parameter: the bias can be pruned too, then removed on its own.
    l1_unstructured(&mut lin, "bias", 1usize)?;
    l1_unstructured(&mut lin, "weight", 1usize)?;
    assert_eq!(
        keys(&lin)?,
        ["bias_orig", "weight_orig", "bias_mask", "weight_mask"]
    );
    remove(&mut lin, "bias")?;
    assert_eq!(keys(&lin)?, ["weight_orig", "bias", "weight_mask"]);
    let err = remove(&mut lin, "bias").unwrap_err();
    assert!(err.to_string().contains("has to be pruned"), "{err}");
    Ok(())
}

#[test]
fn pruning_after_remove_starts_again_from_the_pruned_values() -> Result<()> {
    let mut lin = linear()?;
    l1_unstructured(&mut lin, "weight", 3usize)?;
    remove(&mut lin, "weight")?;
    l1_unstructured(&mut lin, "weight", 3usize)?;
    assert_eq!(keys(&lin)?, ["bias", "weight_orig", "weight_mask"]);
    // The three zeros are the smallest now, so the mask is the first one again.
    assert_eq!(mask(&lin, "weight")?, l1_rule(&w12(), &[1.0; 12], 3));
    remove(&mut lin, "weight")?;
    assert_eq!(keys(&lin)?, ["bias", "weight"]);
    Ok(())
}

#[test]
fn the_mask_has_the_parameter_dtype() -> Result<()> {
    let mut lin = linear()?;
    lin.double()?;
    // L2 norms of the rows: 1.238, 2.319, 2.662, 1.233.
    ln_structured(&mut lin, "weight", 0.25, 2.0, 0)?;
    assert_eq!(lin.get_buffer("weight_mask")?.dtype(), DType::F64);
    assert_eq!(lin.weight.dtype(), DType::F64);
    assert_eq!(mask(&lin, "weight")?, channel_mask(4, 3, &[3]));
    Ok(())
}

#[test]
fn loading_a_state_dict_into_a_pruned_module_sets_orig_and_mask() -> Result<()> {
    let mut source = linear()?;
    l1_unstructured(&mut source, "weight", 6usize)?;
    let mut target = Linear::new(3, 4)?;
    random_unstructured(&mut target, "weight", 1usize)?;
    target.load_state_dict(&source.state_dict()?, true, false)?;
    let x = Tensor::from_slice(&[1.0f32, -2.0, 0.5], &[1, 3])?;
    assert_eq!(vals(&target.call(x.clone())?)?, vals(&source.call(x)?)?);
    Ok(())
}
