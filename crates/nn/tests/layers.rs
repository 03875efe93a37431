//! The built-in layers against PyTorch: reprs (the conformance `leaf_reprs` and SmallCNN),
//! parameter and buffer names, state-dict keys and versions, default initialisation, and
//! forward values against the functional ops they wrap (ConvTranspose2d against a direct
//! loop and gradcheck).

use crate::common;

use common::{Case, assert_close};
use tessera_nn::layers::{
    AvgPool2dOptions, BatchNormOptions, Conv1dOptions, Conv2dOptions, ConvTranspose2dOptions,
    EmbeddingOptions, LayerNormOptions, LinearOptions, MaxPool2dOptions,
};
use tessera_nn::*;
use tessera_tensor::functional::{self, CrossEntropyOptions, Reduction};
use tessera_tensor::{DType, Device, Generator, GradcheckOptions, Tensor, TensorError, gradcheck};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

fn randn64(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F64, &mut Generator::new(seed)).unwrap()
}

fn close(actual: &Tensor, expected: &Tensor, what: &str) {
    assert_eq!(actual.shape(), expected.shape(), "{what}: shape");
    assert_close(actual, expected, 1e-5, 1e-6, what);
}

fn names<T>(items: Vec<(String, T)>) -> Vec<String> {
    items.into_iter().map(|(n, _)| n).collect()
}

fn json_strings(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|s| s.as_str().unwrap().to_string())
        .collect()
}

// ---------------------------------------------------------------- reprs

#[test]
fn leaf_reprs_match_the_conformance_case() -> Result<()> {
    let case = Case::load("h_module_api");
    let expected = &case.json["expectations"]["leaf_reprs"];
    let ours: Vec<(&str, String)> = vec![
        ("nn.Linear(2, 3)", Linear::new(2, 3)?.repr()),
        (
            "nn.Linear(2, 3, bias=False)",
            Linear::with_options(2, 3, LinearOptions::default().bias(false))?.repr(),
        ),
        ("nn.Conv2d(3, 16, 3, padding=1)", {
            Conv2d::with_options(3, 16, 3, Conv2dOptions::default().padding(1))?.repr()
        }),
        ("nn.Conv2d(16, 32, 3, stride=2, padding=1)", {
            let o = Conv2dOptions::default().stride(2).padding(1);
            Conv2d::with_options(16, 32, 3, o)?.repr()
        }),
        ("nn.BatchNorm2d(16)", BatchNorm2d::new(16)?.repr()),
        ("nn.ReLU()", ReLU::new().repr()),
        ("nn.ReLU(inplace=True)", ReLU::with_inplace(true).repr()),
        ("nn.LeakyReLU()", LeakyReLU::default().repr()),
        ("nn.MaxPool2d(2)", MaxPool2d::new(2).repr()),
        ("nn.AdaptiveAvgPool2d(1)", AdaptiveAvgPool2d::new(1).repr()),
        ("nn.Flatten()", Flatten::new().repr()),
        ("nn.Dropout(0.5)", Dropout::new(0.5)?.repr()),
        ("nn.Identity()", Identity::new().repr()),
    ];
    for (torch, repr) in ours {
        assert_eq!(repr, expected[torch].as_str().unwrap(), "{torch}");
    }
    Ok(())
}

#[test]
fn reprs_match_pytorch() -> Result<()> {
    let cases: Vec<(String, &str)> = vec![
        (GELU::new().repr(), "GELU(approximate='none')"),
        (
            GELU::with_approximate("tanh")?.repr(),
            "GELU(approximate='tanh')",
        ),
        (SiLU::new().repr(), "SiLU()"),
        (Sigmoid::new().repr(), "Sigmoid()"),
        (Tanh::new().repr(), "Tanh()"),
        (Softmax::new(1).repr(), "Softmax(dim=1)"),
        (LogSoftmax::new(-1).repr(), "LogSoftmax(dim=-1)"),
        (
            LeakyReLU::with_inplace(0.2, true).repr(),
            "LeakyReLU(negative_slope=0.2, inplace=True)",
        ),
        (
            LayerNorm::new(&[4])?.repr(),
            "LayerNorm((4,), eps=1e-05, elementwise_affine=True, bias=True)",
        ),
        (
            LayerNorm::with_options(&[2, 3], LayerNormOptions::default().eps(1e-6))?.repr(),
            "LayerNorm((2, 3), eps=1e-06, elementwise_affine=True, bias=True)",
        ),
        (
            GroupNorm::new(2, 4)?.repr(),
            "GroupNorm(2, 4, eps=1e-05, affine=True)",
        ),
        (Embedding::new(10, 3)?.repr(), "Embedding(10, 3)"),
        (
            Embedding::with_options(10, 3, EmbeddingOptions::default().padding_idx(-1))?.repr(),
            "Embedding(10, 3, padding_idx=9)",
        ),
        (
            Bilinear::new(2, 3, 4)?.repr(),
            "Bilinear(in1_features=2, in2_features=3, out_features=4, bias=True)",
        ),
        (
            BatchNorm1d::with_options(
                8,
                BatchNormOptions::default()
                    .momentum(None)
                    .affine(false)
                    .track_running_stats(false),
            )?
            .repr(),
            "BatchNorm1d(8, eps=1e-05, momentum=None, affine=False, bias=True, track_running_stats=False)",
        ),
        (
            Conv1d::new(4, 8, 3)?.repr(),
            "Conv1d(4, 8, kernel_size=(3,), stride=(1,))",
        ),
        (
            Conv1d::with_options(
                4,
                8,
                3,
                Conv1dOptions::default().dilation(2).groups(2).bias(false),
            )?
            .repr(),
            "Conv1d(4, 8, kernel_size=(3,), stride=(1,), dilation=(2,), groups=2, bias=False)",
        ),
        (
            Conv2d::with_options(4, 8, (3, 5), Conv2dOptions::default().dilation([2, 1]))?.repr(),
            "Conv2d(4, 8, kernel_size=(3, 5), stride=(1, 1), dilation=(2, 1))",
        ),
        (
            ConvTranspose2d::new(16, 8, 3)?.repr(),
            "ConvTranspose2d(16, 8, kernel_size=(3, 3), stride=(1, 1))",
        ),
        (
            ConvTranspose2d::with_options(
                16,
                8,
                3,
                ConvTranspose2dOptions::default()
                    .stride(2)
                    .padding(1)
                    .output_padding(1),
            )?
            .repr(),
            "ConvTranspose2d(16, 8, kernel_size=(3, 3), stride=(2, 2), padding=(1, 1), output_padding=(1, 1))",
        ),
        (
            MaxPool2d::with_options((2, 3), MaxPool2dOptions::default().stride(1).padding(1))
                .repr(),
            "MaxPool2d(kernel_size=(2, 3), stride=1, padding=1, dilation=1, ceil_mode=False)",
        ),
        (
            AvgPool2d::new(2).repr(),
            "AvgPool2d(kernel_size=2, stride=2, padding=0)",
        ),
        (
            AdaptiveAvgPool2d::new((2, 3)).repr(),
            "AdaptiveAvgPool2d(output_size=(2, 3))",
        ),
        (
            Flatten::with_dims(0, 2).repr(),
            "Flatten(start_dim=0, end_dim=2)",
        ),
        (
            Dropout::with_inplace(0.1, true)?.repr(),
            "Dropout(p=0.1, inplace=True)",
        ),
        (MSELoss::new().repr(), "MSELoss()"),
        (L1Loss::new().repr(), "L1Loss()"),
        (CrossEntropyLoss::new().repr(), "CrossEntropyLoss()"),
        (NLLLoss::new().repr(), "NLLLoss()"),
        (BCEWithLogitsLoss::new().repr(), "BCEWithLogitsLoss()"),
    ];
    for (ours, torch) in cases {
        assert_eq!(ours, torch);
    }
    Ok(())
}

// ---------------------------------------------------------------- SmallCNN

use tessera_nn::models::SmallCnn as SmallCNN;

#[test]
fn small_cnn_matches_pytorch_structure() -> Result<()> {
    let case = Case::load("h_module_api");
    let e = &case.json["expectations"]["SmallCNN"];
    let net = SmallCNN::new()?;
    assert_eq!(net.repr(), e["repr"].as_str().unwrap());
    assert_eq!(
        names(net.named_modules()),
        json_strings(&e["named_modules"])
    );
    assert_eq!(
        names(net.named_parameters()),
        json_strings(&e["named_parameters"])
    );
    assert_eq!(
        names(net.named_buffers()),
        json_strings(&e["named_buffers"])
    );
    let sd = net.state_dict()?;
    let keys: Vec<String> = sd.keys().map(String::from).collect();
    assert_eq!(keys, json_strings(&e["state_dict_keys"]));
    for (key, shape) in e["state_dict_shapes"].as_object().unwrap() {
        let expected: Vec<usize> = shape
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(
            net.state_dict()?.get(key).unwrap().shape(),
            expected,
            "{key}"
        );
    }
    let metadata = &case.json["expectations"]["state_dict_metadata"]["SmallCNN"];
    let expected: Vec<(String, i64)> = metadata
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v["version"].as_i64().unwrap()))
        .collect();
    // serde_json sorts object keys, so compare as sorted lists.
    let mut ours: Vec<(String, i64)> = sd.metadata.iter().map(|(k, v)| (k.clone(), *v)).collect();
    ours.sort();
    assert_eq!(ours, expected);

    let y = net.call(randn(&[2, 3, 8, 8], 1))?;
    assert_eq!(y.shape(), [2, 10]);
    assert_eq!(
        net.bn1
            .num_batches_tracked
            .as_ref()
            .unwrap()
            .item::<i64>()?,
        1
    );
    Ok(())
}

/// The same SmallCNN with Rust's field layout, which puts `conv1` at the struct's address.
#[derive(Module)]
struct SmallCNNReordered {
    core: ModuleCore,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    fc: Linear,
}

/// Rust may lay a struct out with its first child at the struct's own address; module
/// identity includes the type, so the child is still a child.
#[test]
fn a_child_at_its_parents_address_is_still_a_child() -> Result<()> {
    let net = SmallCNNReordered {
        core: ModuleCore::default(),
        conv1: Conv2d::new(3, 16, 3)?,
        bn1: BatchNorm2d::new(16)?,
        fc: Linear::new(32, 10)?,
    };
    assert_eq!(names(net.named_modules()), ["", "conv1", "bn1", "fc"]);
    assert_eq!(net.state_dict()?.keys().next(), Some("conv1.weight"));
    Ok(())
}

#[test]
fn layers_chain_in_a_sequential() -> Result<()> {
    let net = Sequential::new()
        .add(Linear::new(4, 3)?)
        .add(ReLU::new())
        .add(Dropout::new(0.5)?);
    assert_eq!(
        net.repr(),
        "Sequential(\n  (0): Linear(in_features=4, out_features=3, bias=True)\n  (1): ReLU()\n  (2): Dropout(p=0.5, inplace=False)\n)"
    );
    net.eval();
    assert_eq!(net.call(randn(&[2, 4], 24))?.shape(), [2, 3]);
    Ok(())
}

// ---------------------------------------------------------------- parameters and init

#[test]
fn linear_parameters_and_default_init() -> Result<()> {
    let layer = Linear::new(64, 300)?;
    assert_eq!(names(layer.named_parameters()), ["weight", "bias"]);
    assert_eq!(layer.weight.shape(), [300, 64]);
    assert!(layer.weight.requires_grad());
    // kaiming_uniform_(a = sqrt(5)) on fan_in 64 gives the bound 1/sqrt(64), like the bias.
    let bound = 1.0 / 8.0;
    for t in [&*layer.weight, layer.bias.as_deref().unwrap()] {
        let v = t.to_vec_f64()?;
        assert!(v.iter().all(|x| x.abs() <= bound));
        assert!(v.iter().any(|x| x.abs() > 0.9 * bound));
    }
    let no_bias = Linear::with_options(2, 3, LinearOptions::default().bias(false))?;
    assert_eq!(names(no_bias.named_parameters()), ["weight"]);
    Ok(())
}

#[test]
fn layers_build_in_the_requested_dtype_and_refuse_cuda() -> Result<()> {
    let layer = Linear::with_options(2, 3, LinearOptions::default().dtype(DType::F64))?;
    assert_eq!(layer.weight.dtype(), DType::F64);
    let bn = BatchNorm2d::with_options(4, BatchNormOptions::default().dtype(DType::F64))?;
    assert_eq!(bn.running_mean.as_ref().unwrap().dtype(), DType::F64);
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().dtype(), DType::I64);
    let err = Conv2d::with_options(1, 1, 1, Conv2dOptions::default().device(Device::Cuda(0)));
    assert!(matches!(
        err,
        Err(NnError::Op(TensorError::DeviceUnavailable { .. }))
    ));
    Ok(())
}

#[test]
fn conv_and_embedding_parameters() -> Result<()> {
    let conv = Conv2d::with_options(4, 6, (3, 2), Conv2dOptions::default().groups(2))?;
    assert_eq!(conv.weight.shape(), [6, 2, 3, 2]);
    let bound = 1.0 / (2.0f64 * 3.0 * 2.0).sqrt();
    assert!(conv.weight.to_vec_f64()?.iter().all(|x| x.abs() <= bound));
    let t = ConvTranspose2d::with_options(4, 6, 3, ConvTranspose2dOptions::default().groups(2))?;
    assert_eq!(t.weight.shape(), [4, 3, 3, 3]);
    assert_eq!(Conv1d::new(2, 5, 3)?.weight.shape(), [5, 2, 3]);

    let emb = Embedding::with_options(5, 3, EmbeddingOptions::default().padding_idx(1))?;
    assert_eq!(emb.weight.select(0, 1)?.to_vec::<f32>()?, [0.0; 3]);
    assert!(
        emb.weight
            .select(0, 0)?
            .to_vec::<f32>()?
            .iter()
            .any(|&x| x != 0.0)
    );
    Ok(())
}

#[test]
fn invalid_configurations_are_errors_naming_the_layer() {
    let msg = |r: Result<String>| r.unwrap_err().to_string();
    let conv = Conv2d::with_options(3, 4, 3, Conv2dOptions::default().groups(2));
    assert!(msg(conv.map(|c| c.repr())).starts_with("Conv2d: in_channels (3)"));
    let gn = GroupNorm::new(3, 4).map(|m| m.repr());
    assert!(msg(gn).starts_with("GroupNorm: num_channels (4)"));
    assert!(msg(Dropout::new(1.5).map(|m| m.repr())).contains("but got 1.5"));
    let ct =
        ConvTranspose2d::with_options(2, 2, 3, ConvTranspose2dOptions::default().output_padding(1));
    assert!(msg(ct.map(|m| m.repr())).starts_with("ConvTranspose2d: output_padding"));
}

#[test]
fn skip_init_leaves_parameters_zero_until_reset() -> Result<()> {
    let layer = init::skip_init(|| Linear::new(4, 3))?;
    assert!(layer.weight.to_vec::<f32>()?.iter().all(|&x| x == 0.0));
    assert!(!init::is_init_skipped());
    layer.reset_parameters()?;
    assert!(layer.weight.to_vec::<f32>()?.iter().any(|&x| x != 0.0));
    Ok(())
}

// ---------------------------------------------------------------- forward values

#[test]
fn linear_conv_and_pools_match_their_functional_ops() -> Result<()> {
    let linear = Linear::new(4, 3)?;
    let x = randn(&[2, 5, 4], 2);
    close(
        &linear.call(x.clone())?,
        &x.linear(&linear.weight, linear.bias.as_deref())?,
        "Linear",
    );

    let conv1 = Conv1d::with_options(
        4,
        6,
        3,
        Conv1dOptions::default().stride(2).padding(1).groups(2),
    )?;
    let x = randn(&[2, 4, 9], 3);
    let expected = functional::conv1d(&x, &conv1.weight, conv1.bias.as_deref(), 2, 1, 1, 2)?;
    close(&conv1.call(x.clone())?, &expected, "Conv1d");
    close(
        &conv1.call(x.select(0, 1)?)?,
        &expected.select(0, 1)?,
        "Conv1d unbatched",
    );

    let conv2 = Conv2d::with_options(
        3,
        4,
        (3, 2),
        Conv2dOptions::default().stride([2, 1]).dilation(2),
    )?;
    let x = randn(&[2, 3, 9, 7], 4);
    let expected = functional::conv2d(
        &x,
        &conv2.weight,
        conv2.bias.as_deref(),
        [2, 1],
        [0, 0],
        [2, 2],
        1,
    )?;
    close(&conv2.call(x.clone())?, &expected, "Conv2d");

    let x = randn(&[2, 3, 7, 6], 5);
    let max = MaxPool2d::with_options(
        3,
        MaxPool2dOptions::default()
            .stride(2)
            .padding(1)
            .ceil_mode(true),
    );
    close(
        &max.call(x.clone())?,
        &functional::max_pool2d(&x, [3, 3], [2, 2], [1, 1], [1, 1], true)?,
        "MaxPool2d",
    );
    let avg = AvgPool2d::with_options(
        2,
        AvgPool2dOptions::default()
            .padding(1)
            .count_include_pad(false),
    );
    close(
        &avg.call(x.clone())?,
        &functional::avg_pool2d(&x, [2, 2], [2, 2], [1, 1], false, false)?,
        "AvgPool2d",
    );
    close(
        &AdaptiveAvgPool2d::new((2, 3)).call(x.clone())?,
        &functional::adaptive_avg_pool2d(&x, [2, 3])?,
        "AdaptiveAvgPool2d",
    );
    assert_eq!(Flatten::new().call(x.clone())?.shape(), [2, 126]);
    assert_eq!(Flatten::with_dims(0, -2).call(x)?.shape(), [42, 6]);
    Ok(())
}

#[test]
fn activations_match_their_tensor_methods() -> Result<()> {
    let x = randn(&[3, 4], 6);
    let cases: Vec<(Box<dyn Layer>, Tensor)> = vec![
        (Box::new(ReLU::new()), x.relu()?),
        (Box::new(LeakyReLU::new(0.2)), x.leaky_relu(0.2)?),
        (Box::new(GELU::new()), x.gelu()?),
        (Box::new(GELU::with_approximate("tanh")?), x.gelu_tanh()?),
        (Box::new(SiLU::new()), x.silu()?),
        (Box::new(Sigmoid::new()), x.sigmoid()?),
        (Box::new(Tanh::new()), x.tanh()?),
        (Box::new(Softmax::new(1)), x.softmax(1)?),
        (Box::new(LogSoftmax::new(0)), x.log_softmax(0)?),
        (Box::new(Identity::new()), x.clone()),
    ];
    for (layer, expected) in cases {
        close(&layer.call(x.clone())?, &expected, &layer.repr());
    }
    Ok(())
}

#[test]
fn inplace_relu_writes_into_its_input_when_autograd_allows() -> Result<()> {
    let x = randn(&[5], 7);
    let y = ReLU::with_inplace(true).call(x.clone())?;
    assert!(y.shares_storage(&x));
    assert!(x.to_vec::<f32>()?.iter().all(|&v| v >= 0.0));
    let leaf = randn(&[5], 7).requires_grad_(true)?;
    let y = ReLU::with_inplace(true).call(leaf.clone())?;
    assert!(!y.shares_storage(&leaf));
    Ok(())
}

#[test]
fn batch_norm_trains_with_batch_statistics_and_evaluates_with_running_ones() -> Result<()> {
    let bn = BatchNorm2d::new(3)?;
    assert_eq!(
        names(bn.named_buffers()),
        ["running_mean", "running_var", "num_batches_tracked"]
    );
    assert_eq!(bn.version(), 2);
    let x = randn(&[4, 3, 2, 2], 8);
    let (m, v) = (
        Tensor::zeros(&[3], DType::F32)?,
        Tensor::ones(&[3], DType::F32)?,
    );
    let expected = functional::batch_norm(&x, Some(&m), Some(&v), None, None, true, 0.1, 1e-5)?;
    close(&bn.call(x.clone())?, &expected, "BatchNorm2d train");
    close(bn.running_mean.as_ref().unwrap(), &m, "running_mean");
    close(bn.running_var.as_ref().unwrap(), &v, "running_var");
    bn.call(x.clone())?;
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().item::<i64>()?, 2);

    bn.eval();
    let expected = functional::batch_norm(
        &x,
        bn.running_mean.as_ref(),
        bn.running_var.as_ref(),
        bn.weight.as_deref(),
        bn.bias.as_deref(),
        false,
        0.1,
        1e-5,
    )?;
    close(&bn.call(x.clone())?, &expected, "BatchNorm2d eval");
    assert_eq!(bn.num_batches_tracked.as_ref().unwrap().item::<i64>()?, 2);
    Ok(())
}

#[test]
fn batch_norm_without_momentum_keeps_the_cumulative_average() -> Result<()> {
    let bn = BatchNorm1d::with_options(2, BatchNormOptions::default().momentum(None))?;
    let (a, b) = (randn(&[6, 2], 9), randn(&[6, 2], 10).add_scalar(3.0)?);
    bn.call(a.clone())?;
    bn.call(b.clone())?;
    let mean = a
        .mean(&[0], false)?
        .add(&b.mean(&[0], false)?)?
        .mul_scalar(0.5)?;
    close(
        bn.running_mean.as_ref().unwrap(),
        &mean,
        "cumulative running_mean",
    );
    Ok(())
}

#[test]
fn batch_norm_without_running_stats_normalises_with_the_batch_in_eval() -> Result<()> {
    let options = BatchNormOptions::default().track_running_stats(false);
    let bn = BatchNorm1d::with_options(3, options)?;
    assert!(bn.named_buffers().is_empty());
    assert!(
        bn.state_dict()?
            .keys()
            .all(|k| k == "weight" || k == "bias")
    );
    bn.eval();
    let x = randn(&[5, 3, 4], 11);
    let expected = functional::batch_norm(&x, None, None, None, None, true, 0.1, 1e-5)?;
    close(&bn.call(x)?, &expected, "BatchNorm1d eval without stats");
    Ok(())
}

#[test]
fn batch_norm_rejects_wrong_ranks_naming_layer_and_shape() -> Result<()> {
    let err = BatchNorm2d::new(3)?
        .call(randn(&[2, 3, 4], 12))
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "BatchNorm2d: expected 4D input (got 3D input of shape [2, 3, 4])"
    );
    let err = BatchNorm1d::new(3)?.call(randn(&[3], 12)).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("BatchNorm1d: expected 2D or 3D input")
    );
    Ok(())
}

#[test]
fn layer_and_group_norm_match_their_functional_ops() -> Result<()> {
    let ln = LayerNorm::new(&[3, 4])?;
    let x = randn(&[2, 3, 4], 13);
    let expected =
        functional::layer_norm(&x, &[3, 4], ln.weight.as_deref(), ln.bias.as_deref(), 1e-5)?;
    close(&ln.call(x.clone())?, &expected, "LayerNorm");
    assert_eq!(ln.weight.as_ref().unwrap().shape(), [3, 4]);
    let gn = GroupNorm::new(2, 4)?;
    let x = randn(&[2, 4, 3], 14);
    let expected = functional::group_norm(&x, 2, gn.weight.as_deref(), gn.bias.as_deref(), 1e-5)?;
    close(&gn.call(x)?, &expected, "GroupNorm");
    let err = gn.call(randn(&[2, 3, 3], 14)).unwrap_err().to_string();
    assert!(
        err.starts_with("GroupNorm: expected input of shape [N, 4, *]"),
        "{err}"
    );
    Ok(())
}

#[test]
fn dropout_is_the_identity_in_eval_and_drops_in_training() -> Result<()> {
    let drop = Dropout::new(0.5)?;
    let x = Tensor::ones(&[1000], DType::F32)?;
    let y = drop.call(x.clone())?.to_vec::<f32>()?;
    let zeros = y.iter().filter(|&&v| v == 0.0).count();
    assert!((400..600).contains(&zeros), "{zeros} zeros");
    assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    drop.eval();
    close(&drop.call(x.clone())?, &x, "Dropout eval");
    Ok(())
}

#[test]
fn embedding_looks_up_rows() -> Result<()> {
    let emb = Embedding::new(6, 3)?;
    let idx = Tensor::from_vec(vec![5i64, 0, 2, 2], &[2, 2])?;
    let y = emb.call(idx.clone())?;
    close(
        &y,
        &functional::embedding(&idx, &emb.weight, None)?,
        "Embedding",
    );
    close(
        &y.select(0, 0)?.select(0, 0)?,
        &emb.weight.select(0, 5)?,
        "row 5",
    );
    let table = randn(&[4, 2], 15);
    let frozen = Embedding::from_pretrained(&table, true, None)?;
    assert!(!frozen.weight.requires_grad());
    Ok(())
}

#[test]
fn bilinear_matches_a_direct_sum() -> Result<()> {
    let layer = Bilinear::new(2, 3, 4)?;
    let (x1, x2) = (randn(&[5, 2], 16), randn(&[5, 3], 17));
    let y = layer.call((x1.clone(), x2.clone()))?;
    let (a, b, w, bias) = (
        x1.to_vec_f64()?,
        x2.to_vec_f64()?,
        layer.weight.to_vec_f64()?,
        layer.bias.as_ref().unwrap().to_vec_f64()?,
    );
    let mut expected = vec![0.0; 20];
    for n in 0..5 {
        for o in 0..4 {
            expected[n * 4 + o] = bias[o];
            for i in 0..2 {
                for j in 0..3 {
                    expected[n * 4 + o] += a[n * 2 + i] * w[o * 6 + i * 3 + j] * b[n * 3 + j];
                }
            }
        }
    }
    close(
        &y,
        &Tensor::from_vec(expected, &[5, 4])?.to_dtype(DType::F32)?,
        "Bilinear",
    );
    let err = layer.call((x1, randn(&[4, 3], 1))).unwrap_err().to_string();
    assert!(
        err.starts_with("Bilinear: inputs of shapes [5, 2] and [4, 3]"),
        "{err}"
    );
    Ok(())
}

#[test]
fn losses_match_their_functional_ops() -> Result<()> {
    let (input, target) = (randn(&[4, 3], 18), randn(&[4, 3], 19));
    close(
        &MSELoss::new().call((input.clone(), target.clone()))?,
        &functional::mse_loss(&input, &target, Reduction::Mean)?,
        "MSELoss",
    );
    close(
        &L1Loss::with_reduction(Reduction::Sum).call((input.clone(), target.clone()))?,
        &functional::l1_loss(&input, &target, Reduction::Sum)?,
        "L1Loss",
    );
    let classes = Tensor::from_vec(vec![0i64, 2, 1, 2], &[4])?;
    let options = CrossEntropyOptions {
        label_smoothing: 0.1,
        ..Default::default()
    };
    close(
        &CrossEntropyLoss::with_options(options).call((input.clone(), classes.clone()))?,
        &functional::cross_entropy(&input, &classes, options)?,
        "CrossEntropyLoss",
    );
    let logp = input.log_softmax(1)?;
    close(
        &NLLLoss::new().call((logp.clone(), classes.clone()))?,
        &functional::nll_loss(&logp, &classes, CrossEntropyOptions::default())?,
        "NLLLoss",
    );
    let probs = target.sigmoid()?;
    let pos = Tensor::from_vec(vec![1.0f32, 2.0, 3.0], &[3])?;
    let bce = BCEWithLogitsLoss::with_options(None, Some(pos.clone()), Reduction::Mean);
    assert_eq!(names(bce.named_buffers()), ["pos_weight"]);
    close(
        &bce.call((input.clone(), probs.clone()))?,
        &functional::binary_cross_entropy_with_logits(&input, &probs, Some(&pos), Reduction::Mean)?,
        "BCEWithLogitsLoss",
    );
    let weighted = BCEWithLogitsLoss::with_options(Some(pos.clone()), None, Reduction::Sum);
    let each = functional::binary_cross_entropy_with_logits(&input, &probs, None, Reduction::None)?;
    close(
        &weighted.call((input, probs))?,
        &each.mul(&pos)?.sum_all()?,
        "BCEWithLogitsLoss weight",
    );
    Ok(())
}

// ---------------------------------------------------------------- ConvTranspose2d

/// The transposed convolution by its definition: every input element scatters its kernel.
fn conv_transpose_reference(layer: &ConvTranspose2d, x: &Tensor) -> Tensor {
    let (w, bias, o) = (&*layer.weight, layer.bias.as_deref(), &layer.options);
    let (stride, padding, dilation) = (o.stride.pair(), o.padding.pair(), o.dilation.pair());
    let (output_padding, groups) = (o.output_padding.pair(), o.groups);
    let (xs, ws) = (x.shape(), w.shape());
    let (n, cin, h, wd) = (xs[0], xs[1], xs[2], xs[3]);
    let (cout_g, kh, kw) = (ws[1], ws[2], ws[3]);
    let cout = cout_g * groups;
    let cin_g = cin / groups;
    let size = |i: usize, len: usize, k: usize| {
        (len - 1) * stride[i] + dilation[i] * (k - 1) + output_padding[i] + 1 - 2 * padding[i]
    };
    let (oh, ow) = (size(0, h, kh), size(1, wd, kw));
    let (xv, wv) = (x.to_vec_f64().unwrap(), w.to_vec_f64().unwrap());
    let mut y = vec![0.0; n * cout * oh * ow];
    for b in 0..n {
        for ic in 0..cin {
            let g = ic / cin_g;
            for i in 0..h {
                for j in 0..wd {
                    let xval = xv[((b * cin + ic) * h + i) * wd + j];
                    for oc in 0..cout_g {
                        for p in 0..kh {
                            for q in 0..kw {
                                let r =
                                    (i * stride[0] + p * dilation[0]) as i64 - padding[0] as i64;
                                let c =
                                    (j * stride[1] + q * dilation[1]) as i64 - padding[1] as i64;
                                if r < 0 || c < 0 || r >= oh as i64 || c >= ow as i64 {
                                    continue;
                                }
                                let co = g * cout_g + oc;
                                y[((b * cout + co) * oh + r as usize) * ow + c as usize] +=
                                    xval * wv[((ic * cout_g + oc) * kh + p) * kw + q];
                            }
                        }
                    }
                }
            }
        }
    }
    if let Some(bias) = bias {
        let bv = bias.to_vec_f64().unwrap();
        for (k, v) in y.iter_mut().enumerate() {
            *v += bv[(k / (oh * ow)) % cout];
        }
    }
    Tensor::from_vec(y, &[n, cout, oh, ow]).unwrap()
}

fn f64_transpose(
    cin: usize,
    cout: usize,
    k: (usize, usize),
    o: ConvTranspose2dOptions,
) -> ConvTranspose2d {
    ConvTranspose2d::with_options(cin, cout, k, o.dtype(DType::F64)).unwrap()
}

#[test]
fn conv_transpose2d_matches_the_direct_definition() -> Result<()> {
    let configs = [
        ConvTranspose2dOptions::default(),
        ConvTranspose2dOptions::default()
            .stride((2, 3))
            .padding((1, 0))
            .output_padding((1, 2))
            .dilation((1, 2)),
        ConvTranspose2dOptions::default()
            .stride(2)
            .groups(2)
            .bias(false),
    ];
    for options in configs {
        let layer = f64_transpose(4, 6, (3, 2), options.clone());
        let x = randn64(&[2, 4, 4, 5], 20);
        let expected = conv_transpose_reference(&layer, &x);
        let y = layer.call(x.clone())?;
        close(&y, &expected, &layer.repr());
        close(&layer.call(x.select(0, 1)?)?, &y.select(0, 1)?, "unbatched");
    }
    let layer = ConvTranspose2d::with_options(
        16,
        8,
        3,
        ConvTranspose2dOptions::default()
            .stride(2)
            .padding(1)
            .output_padding(1),
    )?;
    assert_eq!(
        layer.call(randn(&[1, 16, 5, 5], 21))?.shape(),
        [1, 8, 10, 10]
    );
    Ok(())
}

#[test]
fn conv_transpose2d_passes_gradcheck() -> Result<()> {
    let options = ConvTranspose2dOptions::default()
        .stride(2)
        .padding(1)
        .output_padding(1)
        .groups(2)
        .dilation((2, 1));
    let layer = f64_transpose(4, 2, (2, 3), options);
    let x = randn64(&[2, 4, 3, 3], 22).requires_grad_(true)?;
    let inputs = [
        x,
        layer.weight.tensor().clone(),
        layer.bias.as_ref().unwrap().tensor().clone(),
    ];
    // The layer reads its own parameters, which are the second and third inputs.
    gradcheck(
        |xs| {
            layer.forward(xs[0].clone()).map_err(|e| match e {
                NnError::Op(e) => e,
                other => panic!("{other}"),
            })
        },
        &inputs,
        GradcheckOptions::default(),
    )?;
    Ok(())
}

#[test]
fn conv_transpose2d_errors_name_the_layer_and_shape() -> Result<()> {
    let layer = ConvTranspose2d::new(4, 2, 3)?;
    let err = layer
        .call(randn(&[2, 3, 5, 5], 23))
        .unwrap_err()
        .to_string();
    assert_eq!(
        err,
        "ConvTranspose2d: expected input with 4 channels, but got input of size [2, 3, 5, 5]"
    );
    let err = layer.call(randn(&[5, 5], 23)).unwrap_err().to_string();
    assert!(err.starts_with("ConvTranspose2d: expected 3D (unbatched) or 4D (batched) input"));
    Ok(())
}
