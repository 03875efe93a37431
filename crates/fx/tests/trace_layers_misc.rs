//! Issue 14's layers under tracing: by default each is one `call_module` node printing its
//! repr; traced through (no leaves) they become ordinary ops of the table, and the graph run
//! by the interpreter equals eager execution.

use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::layers::{
    AvgPool1d, ELU, Hardswish, Mish, PReLU, PixelShuffle, ReLU6, Softplus, Upsample, ZeroPad2d,
};
use tessera_nn::{Call, Forward, Module, ModuleCore, Result};
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
