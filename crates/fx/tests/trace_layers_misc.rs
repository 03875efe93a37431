//! Issue 14's layers under tracing: by default each is one `call_module` node printing its
//! repr (also MultiheadAttention, the new norms, Conv3d, EmbeddingBag and MaxPool1d); traced
//! through (no leaves) they become ordinary ops of the table, and the graph run
//! by the interpreter equals eager execution.

use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, trace, trace_with};
use tessera_fx::{GraphModule, NodeKind};
use tessera_nn::layers::{
    AttentionInput, AvgPool1d, Conv3d, ELU, EmbeddingBag, Hardswish, InstanceNorm2d, MaxPool1d,
    Mish, MultiheadAttention, MultiheadAttentionOptions, PReLU, PixelShuffle, RMSNorm, ReLU6,
    Softplus, Upsample, ZeroPad2d,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleKind, Result};
use tessera_tensor::functional::InterpolateMode;
use tessera_tensor::{DType, Tensor, TensorMeta};

#[derive(Module)]
struct Block {
    core: ModuleCore,
    relu6: ReLU6,
    hardswish: Hardswish,
    prelu: PReLU,
    shuffle: PixelShuffle,
    up: Upsample,
    pad: ZeroPad2d,
    softplus: Softplus,
    elu: ELU,
    mish: Mish,
    pool: AvgPool1d,
}

impl Forward for Block {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.relu6.call(x)?;
        let x = self.hardswish.call(x)?;
        let x = self.prelu.call(x)?;
        let x = self.shuffle.call(x)?;
        let x = self.up.call(x)?;
        let x = self.pad.call(x)?;
        let x = self.elu.call(self.softplus.call(x)?)?;
        let x = self.mish.call(x)?;
        self.pool.call(x.flatten(2, -1)?)
    }
}

fn block() -> Block {
    Block {
        core: ModuleCore::default(),
        relu6: ReLU6::new(),
        hardswish: Hardswish::new(),
        prelu: PReLU::new(8).unwrap(),
        shuffle: PixelShuffle::new(2),
        up: Upsample::with_scale_factor(2.0, InterpolateMode::Bilinear),
        pad: ZeroPad2d::new(1),
        softplus: Softplus::new(2.0, 5.0),
        elu: ELU::new(0.5),
        mish: Mish::new(),
        pool: AvgPool1d::new(2),
    }
}

#[test]
fn the_new_layers_trace_as_leaves_printing_their_reprs() -> tessera_fx::Result<()> {
    let traced = trace(
        &block(),
        TensorMeta::new([1, 8, 3, 3], DType::F32),
        LeafPolicy::default(),
    )?;
    traced.graph.verify()?;
    let text = traced.graph.to_string();
    for node in [
        "call_module[relu6: ReLU6()]",
        "call_module[hardswish: Hardswish()]",
        "call_module[prelu: PReLU(num_parameters=8)]",
        "call_module[shuffle: PixelShuffle(upscale_factor=2)]",
        "call_module[up: Upsample(scale_factor=2.0, mode='bilinear')]",
        "call_module[pad: ZeroPad2d((1, 1, 1, 1))]",
        "call_module[softplus: Softplus(beta=2.0, threshold=5.0)]",
        "call_module[elu: ELU(alpha=0.5)]",
        "call_module[mish: Mish()]",
        "call_module[pool: AvgPool1d(kernel_size=(2,), stride=(2,), padding=(0,))]",
    ] {
        assert!(text.contains(node), "{node} in\n{text}");
    }
    Ok(())
}

#[test]
fn traced_through_they_are_ops_of_the_table_and_the_interpreter_matches_eager() {
    let model = Arc::new(block());
    let traced = trace(
        &*model,
        TensorMeta::new([1, 8, 3, 3], DType::F32),
        LeafPolicy::none(),
    )
    .unwrap();
    traced.graph.verify().unwrap();
    let text = traced.graph.to_string();
    for op in [
        "relu6",
        "hardswish",
        "softplus",
        "elu",
        "index_select",
        "avg_pool2d",
    ] {
        assert!(text.contains(op), "{op} in\n{text}");
    }
    let x = Tensor::randn(&[1, 8, 3, 3], DType::F32).unwrap();
    let eager = model.call(x.clone()).unwrap();
    let graph = GraphModule::new(model, traced).call(x).unwrap();
    assert_eq!(graph.to_vec_f64().unwrap(), eager.to_vec_f64().unwrap());
}

/// One of each layer whose call is not `Tensor -> Tensor` or that `Block` leaves out.
#[derive(Module)]
struct Leaves {
    core: ModuleCore,
    attention: MultiheadAttention,
    instance_norm: InstanceNorm2d,
    rms_norm: RMSNorm,
    conv3d: Conv3d,
    bag: EmbeddingBag,
    max_pool: MaxPool1d,
}

#[test]
fn attention_norms_conv3d_embedding_bag_and_max_pool1d_trace_as_leaves() -> tessera_fx::Result<()> {
    let options = MultiheadAttentionOptions::default().batch_first(true);
    let model = Leaves {
        core: ModuleCore::default(),
        attention: MultiheadAttention::with_options(8, 2, options).unwrap(),
        instance_norm: InstanceNorm2d::new(2).unwrap(),
        rms_norm: RMSNorm::new(&[6]).unwrap(),
        conv3d: Conv3d::new(1, 2, [2, 2, 2]).unwrap(),
        bag: EmbeddingBag::new(10, 3).unwrap(),
        max_pool: MaxPool1d::new(2),
    };
    let f32s = |shape: &[usize]| TensorMeta::new(shape, DType::F32);
    let inputs = [
        ("seq", f32s(&[2, 3, 8])),
        ("img", f32s(&[1, 2, 4, 5])),
        ("feat", f32s(&[2, 6])),
        ("vol", f32s(&[1, 1, 3, 4, 4])),
        ("ids", TensorMeta::new([5], DType::I64)),
        ("offsets", TensorMeta::new([2], DType::I64)),
        ("signal", f32s(&[1, 2, 7])),
    ];
    let traced = trace_with(&model, &inputs, LeafPolicy::default(), |t| {
        let seq = AttentionInput::new(t[0].clone(), t[0].clone(), t[0].clone());
        let (attended, weights) = model.attention.call(seq)?;
        Ok(vec![
            attended,
            weights.expect("weights by default"),
            model.instance_norm.call(t[1].clone())?,
            model.rms_norm.call(t[2].clone())?,
            model.conv3d.call(t[3].clone())?,
            model.bag.call((t[4].clone(), t[5].clone()))?,
            model.max_pool.call(t[6].clone())?,
        ])
    })?;
    traced.graph.verify()?;
    let graph = &traced.graph;
    let nodes: Vec<&NodeKind> = graph
        .nodes()
        .map(|id| &graph.node(&id).unwrap().kind)
        .collect();
    let leaves: Vec<(&str, &ModuleKind)> = nodes
        .iter()
        .filter_map(|kind| match kind {
            NodeKind::CallModule { target, kind, .. } => Some((target.as_str(), kind)),
            _ => None,
        })
        .collect();
    assert_eq!(
        leaves,
        [
            ("attention", &ModuleKind::MultiheadAttention),
            ("instance_norm", &ModuleKind::InstanceNorm2d),
            ("rms_norm", &ModuleKind::RMSNorm),
            ("conv3d", &ModuleKind::Conv3d),
            ("bag", &ModuleKind::EmbeddingBag),
            ("max_pool", &ModuleKind::MaxPool1d),
        ]
    );
    assert!(
        !nodes
            .iter()
            .any(|kind| matches!(kind, NodeKind::CallFunction { .. })),
        "nothing is traced through:\n{graph}"
    );
    Ok(())
}
