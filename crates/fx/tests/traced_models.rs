//! Printed graphs of traced models, as reviewed snapshots: the Modules note's Net, BigNet,
//! DynamicNet with each activation and StatefulModule, the conformance CNN at module and at
//! op level (inlined), a ResNet basic block with its residual add, and a module with several
//! inputs and outputs. Also re-shaping a traced graph for a new input size.

use crate::common;

use common::{assert_interprets_as_eager, small_cnn, snapshots};
use tessera_fx::interpreter::GraphInterpreter;
use tessera_fx::shape_prop::propagate_shapes;
use tessera_fx::trace::{LeafPolicy, trace, trace_with};
use tessera_nn::layers::Linear;
use tessera_nn::models::BasicBlock;
use tessera_nn::models::note::{BigNet, DynamicNet, Net, StatefulModule};
use tessera_nn::{Call, Layer, Module, ModuleCore, ModuleExt};
use tessera_tensor::{DType, Tensor, TensorMeta};

fn f32s(shape: &[usize]) -> TensorMeta {
    TensorMeta::new(shape, DType::F32)
}

/// Two inputs, two outputs.
#[derive(Module)]
struct TwoHeads {
    core: ModuleCore,
    shared: Linear,
    left: Linear,
    right: Linear,
}

/// The printed graph of `module` traced for `input` with `policy`.
fn printed<M: Layer>(module: &M, input: TensorMeta, policy: LeafPolicy) -> String {
    trace(module, input, policy).unwrap().graph.to_string()
}

fn snapshot(name: &str, text: String) {
    snapshots().bind(|| insta::assert_snapshot!(name, text));
}

#[test]
fn note_models_trace_to_their_snapshots() {
    snapshot(
        "fx_trace_net",
        printed(&Net::new().unwrap(), f32s(&[8, 4]), LeafPolicy::default()),
    );
    let big = BigNet::new().unwrap();
    snapshot(
        "fx_trace_bignet",
        printed(&big, f32s(&[2, 5]), LeafPolicy::default()),
    );
    let dynamic = DynamicNet::new(3).unwrap();
    for act in ["relu", "lrelu"] {
        let traced = trace_with(
            &dynamic,
            &[("x", f32s(&[2, 4]))],
            LeafPolicy::default(),
            |t| Ok(vec![dynamic.call((t[0].clone(), act))?]),
        )
        .unwrap();
        snapshot(
            &format!("fx_trace_dynamicnet_{act}"),
            traced.graph.to_string(),
        );
    }
    let stateful = StatefulModule::new().unwrap();
    snapshot(
        "fx_trace_stateful_module",
        printed(&stateful, f32s(&[4, 2]), LeafPolicy::default()),
    );
}

#[test]
fn the_cnn_at_module_and_at_op_level() {
    let cnn = small_cnn();
    snapshot(
        "fx_trace_small_cnn",
        printed(&cnn, f32s(&[4, 3, 16, 16]), LeafPolicy::default()),
    );
    snapshot(
        "fx_trace_small_cnn_inlined",
        printed(&cnn, f32s(&[4, 3, 16, 16]), LeafPolicy::none()),
    );
}

#[test]
fn a_residual_block_and_a_two_headed_module() {
    let block = BasicBlock::new(8, 8, 1).unwrap();
    block.eval();
    snapshot(
        "fx_trace_basic_block",
        printed(&block, f32s(&[1, 8, 8, 8]), LeafPolicy::default()),
    );
    let heads = TwoHeads {
        core: ModuleCore::default(),
        shared: Linear::new(4, 8).unwrap(),
        left: Linear::new(8, 2).unwrap(),
        right: Linear::new(8, 3).unwrap(),
    };
    let traced = trace_with(
        &heads,
        &[("a", f32s(&[5, 4])), ("b", f32s(&[5, 4]))],
        LeafPolicy::default(),
        |t| {
            let h = heads.shared.call(t[0].add(&t[1])?)?.relu()?;
            Ok(vec![heads.left.call(h.clone())?, heads.right.call(h)?])
        },
    )
    .unwrap();
    snapshot("fx_trace_two_heads", traced.graph.to_string());
}

#[test]
fn shape_propagation_reshapes_a_traced_graph_for_a_new_input_size() {
    let cnn = small_cnn();
    let mut traced = trace(&cnn, f32s(&[1, 3, 32, 32]), LeafPolicy::default()).unwrap();
    let mut interpreter = GraphInterpreter {
        root: &cnn,
        constants: Some(&traced.attributes),
    };
    propagate_shapes(
        &mut traced.graph,
        &mut interpreter,
        &[f32s(&[8, 3, 64, 64])],
    )
    .unwrap();
    let text = traced.graph.to_string();
    assert!(text.starts_with("graph(x: f32[8, 3, 64, 64]):"), "{text}");
    assert!(
        text.contains("%pool1 : f32[8, 16, 32, 32]") && text.contains("%fc : f32[8, 10]"),
        "{text}"
    );
    traced.graph.verify().unwrap();
    let err = propagate_shapes(
        &mut traced.graph,
        &mut interpreter,
        &[f32s(&[8, 4, 64, 64])],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("while executing %conv1"), "{err}");
}

#[test]
fn resnet18_traces_like_torch_fx_and_its_graph_computes_the_same() {
    use tessera_nn::models::ResNet18;
    let resnet = ResNet18::new(10).unwrap();
    resnet.eval();
    let traced = trace(&resnet, f32s(&[1, 3, 64, 64]), LeafPolicy::default()).unwrap();
    traced.graph.verify().unwrap();
    // torch.fx's symbolic_trace of torchvision's resnet18 has 71 nodes; ours adds nothing
    // (flatten is an op here, as there).
    assert_eq!(traced.graph.len(), 71);
    snapshot("fx_trace_resnet18", traced.graph.to_string());
    let x = Tensor::randn(&[1, 3, 64, 64], DType::F32).unwrap();
    assert_interprets_as_eager(&traced, &resnet, x);
}
