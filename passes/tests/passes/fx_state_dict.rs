//! torch.fx's state-dict layout after batch norm folding, against PyTorch 2.15's
//! `torch.fx.experimental.optimization.fuse` on the same model (`FuseNet`: a conv-bn-ReLU
//! stem, a basic block at `layer1.0`, a linear-BatchNorm1d head, a linear classifier). The
//! fixtures were written by `scripts/fuse_fixtures.py`: the float model's weights, the fused
//! model's state dict, its keys and shapes in order, and an input with the fused model's
//! output. `fuse`'s checkpoint loads strictly into the folded graph module and gives PyTorch's
//! output; the folded graph module's own torch.fx state dict has `fuse`'s keys, shapes and
//! order, and written as `.pt` it loads strictly into PyTorch's fused model with the same
//! output (checked with `python scripts/fuse_fixtures.py --check target/tmp/fuse_tessera.pt`
//! after this file's tests ran: `<All keys matched successfully>`, outputs 3e-8 apart).
//! Statically quantized, each quantized module sits at the path of the layer it replaced.

use crate::common::traced;
use std::path::PathBuf;
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::LeafPolicy;
use tessera_nn::layers::{
    AdaptiveAvgPool2d, BatchNorm1d, BatchNorm2d, Conv2d, Conv2dOptions, Flatten, Linear, ReLU,
};
use tessera_nn::models::BasicBlock;
use tessera_nn::{
    Call, Forward, Module, ModuleCore, ModuleExt, Result, Sequential, StateDict,
    load_pt_state_dict, load_safetensors, save_pt_state_dict,
};
use tessera_passes::{FoldBatchNorm, Pass};
use tessera_tensor::{DType, Tensor, no_grad};
use tessera_testkit::assert_close;

/// `FuseNet` of `scripts/fuse_fixtures.py`.
#[derive(Module)]
struct FuseNet {
    core: ModuleCore,
    conv1: Conv2d,
    bn1: BatchNorm2d,
    relu: ReLU,
    layer1: Sequential,
    pool: AdaptiveAvgPool2d,
    flatten: Flatten,
    head: Linear,
    head_bn: BatchNorm1d,
    fc: Linear,
}

impl FuseNet {
    fn new() -> Result<Self> {
        Ok(FuseNet {
            core: ModuleCore::default(),
            conv1: Conv2d::with_options(3, 4, 3, Conv2dOptions::default().padding(1))?,
            bn1: BatchNorm2d::new(4)?,
            relu: ReLU::new(),
            layer1: Sequential::new().add(BasicBlock::new(4, 4, 1)?),
            pool: AdaptiveAvgPool2d::new(1),
            flatten: Flatten::new(),
            head: Linear::new(4, 6)?,
            head_bn: BatchNorm1d::new(6)?,
            fc: Linear::new(6, 5)?,
        })
    }
}

impl Forward for FuseNet {
    type Output = Tensor;

    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.relu.call(self.bn1.call(self.conv1.call(x)?)?)?;
        let x = self.flatten.call(self.pool.call(self.layer1.call(x)?)?)?;
        self.fc.call(self.head_bn.call(self.head.call(x)?)?)
    }
}

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The fixture's input and PyTorch's fused output for it.
fn input_and_output() -> (Tensor, Tensor) {
    let io = load_safetensors(fixture("fuse_io.safetensors")).unwrap();
    (
        io.get("input").unwrap().clone(),
        io.get("output").unwrap().clone(),
    )
}

/// `FuseNet` in eval mode (with default weights unless `weights` is given), traced for the
/// fixture's input and batch norm folded.
fn folded(weights: Option<&StateDict>) -> GraphModule {
    let model = Arc::new(FuseNet::new().unwrap());
    if let Some(weights) = weights {
        model.load_state_dict(weights, true, false).unwrap();
    }
    model.eval();
    let (input, _) = input_and_output();
    let meta = tessera_tensor::TensorMeta::new(input.shape(), input.dtype());
    let mut gm = traced(model, meta, LeafPolicy::default());
    FoldBatchNorm.run(&mut gm).unwrap();
    gm
}

fn run(gm: &GraphModule, input: &Tensor) -> Tensor {
    let _guard = no_grad();
    gm.forward(input.clone()).unwrap()
}

/// `key [d0, d1, ...]` lines, as `fuse_keys.txt` holds them.
fn keys_and_shapes(state: &StateDict) -> Vec<String> {
    state
        .iter()
        .map(|(k, t)| {
            let dims: Vec<String> = t.shape().iter().map(|d| d.to_string()).collect();
            format!("{k} [{}]", dims.join(", "))
        })
        .collect()
}

#[test]
fn fuse_checkpoint_loads_strictly_into_the_folded_graph_module_and_gives_torch_outputs() {
    let gm = folded(None);
    let torch_fused = load_pt_state_dict(fixture("fuse_fused.pt")).unwrap();
    let keys = gm.load_fx_state_dict(&torch_fused, true).unwrap();
    assert!(keys.is_empty(), "{keys}");
    let (input, expected) = input_and_output();
    assert_close(&run(&gm, &input), &expected, 0.0, 1e-5, "fused output");
}

#[test]
fn folded_graph_module_writes_fuse_keys_shapes_and_order_as_pt() {
    let weights = load_pt_state_dict(fixture("fuse_model.pt")).unwrap();
    let gm = folded(Some(&weights));
    let (input, expected) = input_and_output();
    assert_close(&run(&gm, &input), &expected, 0.0, 1e-5, "folded output");

    let path = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("fuse_tessera.pt");
    save_pt_state_dict(&gm.fx_state_dict().unwrap(), &path).unwrap();
    let written = load_pt_state_dict(&path).unwrap();
    let expected_keys = std::fs::read_to_string(fixture("fuse_keys.txt")).unwrap();
    assert_eq!(
        keys_and_shapes(&written),
        expected_keys.lines().collect::<Vec<_>>()
    );
}

#[test]
fn ordinary_state_dict_keeps_the_traced_model_keys_after_folding() {
    let weights = load_pt_state_dict(fixture("fuse_model.pt")).unwrap();
    let gm = folded(Some(&weights));
    let state = gm.state_dict().unwrap();
    assert!(state.get("bn1.running_var").is_some());
    assert!(state.get("conv1_bn1.weight").is_some());
    gm.load_state_dict(&weights, false, false).unwrap();
}

#[test]
fn fx_layout_load_reports_missing_and_unexpected_keys() {
    let gm = folded(None);
    let mut state = gm.fx_state_dict().unwrap();
    let bias = state.entries.shift_remove("layer1.0.conv2.bias").unwrap();
    state.insert("layer1.0.bn2.bias", bias);
    let keys = gm.load_fx_state_dict(&state, false).unwrap();
    assert_eq!(keys.missing_keys, ["layer1.0.conv2.bias"]);
    assert_eq!(keys.unexpected_keys, ["layer1.0.bn2.bias"]);
    let strict = gm.load_fx_state_dict(&state, true).unwrap_err().to_string();
    assert!(strict.contains("layer1.0.conv2.bias"), "{strict}");
}

/// A conv whose output is also read elsewhere keeps its module (PyTorch's `fuse` leaves such
/// a pair alone), so the folded copy keeps its own name in the torch.fx layout.
#[test]
fn a_conv_still_called_keeps_its_key_and_the_folded_copy_its_own_name() {
    #[derive(Module)]
    struct TwoUses {
        core: ModuleCore,
        conv: Conv2d,
        bn: BatchNorm2d,
    }
    impl Forward for TwoUses {
        type Output = Tensor;
        fn forward(&self, x: Tensor) -> Result<Tensor> {
            let y = self.conv.call(x)?;
            Ok(self.bn.call(y.clone())?.add(&y)?)
        }
    }
    let model = Arc::new(TwoUses {
        core: ModuleCore::default(),
        conv: Conv2d::new(2, 2, 1).unwrap(),
        bn: BatchNorm2d::new(2).unwrap(),
    });
    model.eval();
    let meta = tessera_tensor::TensorMeta::new(vec![1, 2, 3, 3], DType::F32);
    let mut gm = traced(model, meta, LeafPolicy::default());
    FoldBatchNorm.run(&mut gm).unwrap();
    let state = gm.fx_state_dict().unwrap();
    let keys: Vec<&str> = state.keys().collect();
    assert_eq!(
        keys,
        ["conv.weight", "conv.bias", "conv_bn.weight", "conv_bn.bias"]
    );
}

/// After static quantization each quantized module sits at the path of the layer it replaced,
/// as after PyTorch's `convert_fx`; its leaf keys are Tessera's own (`fx_quantized_state_dict`
/// gives PyTorch's: see `fx_quantized_state_dict.rs`).
#[test]
fn quantized_modules_sit_at_the_converted_layers_paths() {
    let gm = {
        let weights = load_pt_state_dict(fixture("fuse_model.pt")).unwrap();
        let mut gm = folded(Some(&weights));
        tessera_passes::InsertObservers.run(&mut gm).unwrap();
        let (input, _) = input_and_output();
        tessera_passes::calibrate(&gm, &[vec![input]]).unwrap();
        tessera_passes::ConvertStatic { per_channel: true }
            .run(&mut gm)
            .unwrap();
        gm
    };
    let state = gm.fx_state_dict().unwrap();
    let paths = ["conv1", "layer1.0.conv1", "layer1.0.conv2", "head", "fc"];
    let leaves = ["weight", "weight_scale", "weight_zero_point", "bias"];
    let expected: Vec<String> = paths
        .iter()
        .flat_map(|p| leaves.iter().map(move |l| format!("{p}.{l}")))
        .collect();
    assert_eq!(state.keys().collect::<Vec<_>>(), expected);
    assert_eq!(state.get("conv1.weight").unwrap().dtype(), DType::I8);
}
