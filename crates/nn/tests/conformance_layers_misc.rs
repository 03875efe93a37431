//! The layers of issue 14 against PyTorch (`q_layers_misc`, every sub-case but the RMSNorm
//! ones, which `conformance_norm_layers` checks): reprs as PyTorch prints them, state dicts
//! loaded strictly from `state_dict.pt`, outputs and the gradients of inputs and parameters.

use crate::common;

use common::Case;
use tessera_nn::layers::{
    AdaptiveMaxPool2d, AvgPool1d, AvgPool1dOptions, BCELoss, Conv3d, Conv3dOptions,
    ConvTranspose1d, ConvTranspose1dOptions, ELU, EmbeddingBag, EmbeddingBagOptions, Hardsigmoid,
    Hardswish, HuberLoss, KLDivLoss, MaxPool1d, MaxPool1dOptions, Mish, PReLU, PixelShuffle,
    RMSNorm, RMSNormOptions, ReLU6, SmoothL1Loss, Softplus, Upsample,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt};
use tessera_tensor::Tensor;
use tessera_tensor::functional::InterpolateMode;
use tessera_tensor::functional::{EmbeddingBagMode, KlDivReduction, Reduction};

/// Every stateful module of the case, children in PyTorch's order (the holder module whose
/// `state_dict.pt` the case stores).
#[derive(Module)]
struct Holder {
    core: ModuleCore,
    conv3d: Conv3d,
    conv_transpose1d: ConvTranspose1d,
    conv_transpose1d_groups: ConvTranspose1d,
    prelu: PReLU,
    embedding_bag_sum: EmbeddingBag,
    embedding_bag_mean: EmbeddingBag,
    rmsnorm: RMSNorm,
    rmsnorm_2d: RMSNorm,
}

/// A fresh holder with the case's stored state, loaded strictly (every sub-case starts from
/// it).
fn holder() -> Holder {
    let bag = |mode| EmbeddingBag::with_options(10, 4, EmbeddingBagOptions::default().mode(mode));
    let model = Holder {
        core: ModuleCore::default(),
        conv3d: Conv3d::with_options(
            2,
            3,
            [2, 3, 3],
            Conv3dOptions::default()
                .stride([1, 2, 1])
                .padding([1, 1, 0]),
        )
        .unwrap(),
        conv_transpose1d: ConvTranspose1d::with_options(
            3,
            4,
            3,
            ConvTranspose1dOptions::default()
                .stride(2)
                .padding(1)
                .output_padding(1),
        )
        .unwrap(),
        conv_transpose1d_groups: ConvTranspose1d::with_options(
            4,
            6,
            3,
            ConvTranspose1dOptions::default().dilation(2).groups(2),
        )
        .unwrap(),
        prelu: PReLU::new(3).unwrap(),
        embedding_bag_sum: bag(EmbeddingBagMode::Sum).unwrap(),
        embedding_bag_mean: bag(EmbeddingBagMode::Mean).unwrap(),
        rmsnorm: RMSNorm::new(&[6]).unwrap(),
        rmsnorm_2d: RMSNorm::with_options(&[3, 6], RMSNormOptions::default().eps(1e-5)).unwrap(),
    };
    common::load_strict(&Case::load("q_layers_misc"), &model);
    model
}

#[test]
fn the_holder_loads_the_whole_state_dict_strictly_with_pytorchs_keys() {
    let case = Case::load("q_layers_misc");
    let model = holder();
    common::check_state_dict_keys(&case, &model);
    for (name, child) in model.named_children() {
        check_repr(&case, &name, child);
    }
}

/// Asserts `layer` prints as PyTorch printed module `name`.
fn check_repr(case: &Case, name: &str, layer: &dyn Module) {
    let expected = case.json["modules"][name]["repr"].as_str().unwrap();
    assert_eq!(layer.repr(), expected, "{name}");
}

/// Runs the one-input sub-case `name` on `layer`: repr, state, output and gradients.
fn run_unary<M: Forward<Output = Tensor>>(case: &Case, name: &str, layer: &M) {
    check_repr(case, name, layer);
    let input = case.input(name, "input");
    let output = layer.call(input.clone()).unwrap();
    let params = common::params_of(layer);
    case.check_subcase(name, &[("output", output)], &[("input", input)], &params);
}

#[test]
fn activations_match_pytorch_at_their_kinks() {
    let case = Case::load("q_layers_misc");
    run_unary(&case, "relu6", &ReLU6::new());
    run_unary(&case, "hardswish", &Hardswish::new());
    run_unary(&case, "hardsigmoid", &Hardsigmoid::new());
    run_unary(&case, "elu", &ELU::default());
    run_unary(&case, "elu_alpha05", &ELU::new(0.5));
    run_unary(&case, "prelu", &holder().prelu);
    run_unary(&case, "softplus", &Softplus::default());
    run_unary(&case, "softplus_beta2", &Softplus::new(2.0, 5.0));
    run_unary(&case, "mish", &Mish::new());
}

/// Runs loss sub-case `name`: `loss` with the layer's reduction, `loss_none` with none, and
/// the gradient of the input through `loss`.
fn run_loss<M, F>(case: &Case, name: &str, layer: &M, unreduced: F)
where
    M: Forward<(Tensor, Tensor), Output = Tensor>,
    F: Fn(&Tensor, &Tensor) -> Tensor,
{
    check_repr(case, name, layer);
    let input = case.input(name, "input");
    let target = case.io(&format!("{name}/target"));
    case.check_key(&format!("{name}/loss_none"), &unreduced(&input, &target));
    let loss = layer.call((input.clone(), target)).unwrap();
    case.check_key(&format!("{name}/loss"), &loss);
    loss.backward().unwrap();
    case.check_key(&format!("{name}/grad/input"), &input.grad().unwrap());
}

#[test]
fn regression_losses_match_pytorch() {
    use tessera_tensor::functional::{huber_loss, smooth_l1_loss};
    let case = Case::load("q_layers_misc");
    for (name, beta) in [("smooth_l1", 1.0), ("smooth_l1_beta05", 0.5)] {
        let layer = SmoothL1Loss::new(Reduction::Mean, beta);
        run_loss(&case, name, &layer, |x, t| {
            smooth_l1_loss(x, t, Reduction::None, beta).unwrap()
        });
    }
    for (name, delta) in [("huber", 1.0), ("huber_delta05", 0.5)] {
        let layer = HuberLoss::new(Reduction::Mean, delta);
        run_loss(&case, name, &layer, |x, t| {
            huber_loss(x, t, Reduction::None, delta).unwrap()
        });
    }
}

#[test]
fn kl_div_with_a_zero_target_and_batchmean_matches_pytorch() {
    let case = Case::load("q_layers_misc");
    let layer = KLDivLoss::new(KlDivReduction::BatchMean, false);
    run_loss(&case, "kl_div", &layer, |x, t| {
        tessera_tensor::functional::kl_div(x, t, KlDivReduction::None, false).unwrap()
    });
}

#[test]
fn bce_matches_pytorch_including_its_clamped_edges() {
    let case = Case::load("q_layers_misc");
    for name in ["bce", "bce_edge"] {
        run_loss(&case, name, &BCELoss::new(), |x, t| {
            tessera_tensor::functional::binary_cross_entropy(x, t, Reduction::None).unwrap()
        });
    }
}

#[test]
fn pooling_1d_matches_pytorch_with_ties_padding_and_ceil_mode() {
    let case = Case::load("q_layers_misc");
    let max = MaxPool1d::with_options(3, MaxPool1dOptions::default().stride(2).padding(1));
    run_unary(&case, "maxpool1d", &max);
    let (_, indices) = max
        .forward_with_indices(&case.io("maxpool1d/input"))
        .unwrap();
    case.check_key("maxpool1d/indices", &indices);
    let ceil = MaxPool1d::with_options(2, MaxPool1dOptions::default().ceil_mode(true));
    run_unary(&case, "maxpool1d_ceil", &ceil);
    let avg = AvgPool1dOptions::default().stride(2).padding(1);
    run_unary(&case, "avgpool1d", &AvgPool1d::with_options(3, avg.clone()));
    let exclude = AvgPool1d::with_options(3, avg.count_include_pad(false));
    run_unary(&case, "avgpool1d_exclude_pad", &exclude);
}

#[test]
fn adaptive_max_pool2d_with_overlapping_bins_matches_pytorch() {
    let case = Case::load("q_layers_misc");
    let pool = AdaptiveMaxPool2d::new((3, 4));
    run_unary(&case, "adaptive_maxpool2d", &pool);
    let (_, indices) = pool
        .forward_with_indices(&case.io("adaptive_maxpool2d/input"))
        .unwrap();
    case.check_key("adaptive_maxpool2d/indices", &indices);
}

#[test]
fn upsample_and_pixel_shuffle_match_pytorch() {
    let case = Case::load("q_layers_misc");
    use InterpolateMode::{Bilinear, Nearest};
    let upsamples = [
        (
            "upsample_nearest",
            Upsample::with_scale_factor(2.0, Nearest),
        ),
        (
            "upsample_nearest_size",
            Upsample::with_size((5, 7), Nearest),
        ),
        (
            "upsample_nearest_sf1p7",
            Upsample::with_scale_factor(1.7, Nearest),
        ),
        (
            "upsample_bilinear",
            Upsample::with_scale_factor(2.0, Bilinear),
        ),
        (
            "upsample_bilinear_ac",
            Upsample::with_scale_factor(2.0, Bilinear).align_corners(true),
        ),
        (
            "upsample_bilinear_size",
            Upsample::with_size((5, 7), Bilinear),
        ),
        (
            "upsample_bilinear_sf1p7",
            Upsample::with_scale_factor(1.7, Bilinear),
        ),
    ];
    for (name, upsample) in &upsamples {
        run_unary(&case, name, upsample);
    }
    run_unary(&case, "pixel_shuffle", &PixelShuffle::new(2));
}

#[test]
fn conv3d_and_conv_transpose1d_match_pytorch() {
    let case = Case::load("q_layers_misc");
    let model = holder();
    run_unary(&case, "conv3d", &model.conv3d);
    run_unary(&case, "conv_transpose1d", &model.conv_transpose1d);
    run_unary(
        &case,
        "conv_transpose1d_groups",
        &model.conv_transpose1d_groups,
    );
}

#[test]
fn embedding_bag_with_an_empty_bag_and_repeated_indices_matches_pytorch() {
    let case = Case::load("q_layers_misc");
    let model = holder();
    for (name, layer) in [
        ("embedding_bag_sum", &model.embedding_bag_sum),
        ("embedding_bag_mean", &model.embedding_bag_mean),
    ] {
        let input = case.io(&format!("{name}/input"));
        let offsets = case.io(&format!("{name}/offsets"));
        let output = layer.call((input, offsets)).unwrap();
        let weight = layer.weight.tensor().clone();
        case.check_subcase(
            name,
            &[("output", output)],
            &[],
            &[("weight".into(), weight)],
        );
    }
}
