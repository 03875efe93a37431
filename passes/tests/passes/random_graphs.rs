//! Property tests: on randomly generated graphs (elementwise ops over inputs and constants,
//! with duplicated expressions, dead nodes, constant-only subgraphs and eval dropout), every
//! registered pass and the clean-up pipeline keep the IR valid and the interpreter's outputs
//! unchanged.

use crate::common::{f32s, module_of, outputs};
use proptest::prelude::*;
use tessera_fx::{Graph, GraphModule, NodeId};
use tessera_passes::{PassManager, pipelines, registry};
use tessera_tensor::op::{BinaryOp, DropoutOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};
use tessera_testkit::assert_close;

const SHAPE: [usize; 2] = [3, 4];

/// One step of a random graph: an op kind and two operand picks (taken modulo the values
/// built so far).
type Step = (u8, usize, usize);

fn constant(seed: u64) -> Tensor {
    tessera_testkit::leaf(&SHAPE, seed)
        .detach()
        .to_dtype(DType::F32)
        .unwrap()
}

/// The graph `steps` describe, over inputs `x`, `y` and constants `c0`, `c1`, returning the
/// last value and the value `extra` picks.
fn random_graph(steps: &[Step], extra: usize) -> GraphModule {
    let mut g = Graph::new();
    let mut values: Vec<NodeId> = vec![
        g.placeholder("x", f32s(&SHAPE)),
        g.placeholder("y", f32s(&SHAPE)),
        g.get_attr("c0", f32s(&SHAPE)).unwrap(),
        g.get_attr("c1", f32s(&SHAPE)).unwrap(),
    ];
    for &(kind, a, b) in steps {
        let (a, b) = (values[a % values.len()], values[b % values.len()]);
        let unary = |op| Op::Unary(op);
        let binary = |op| Op::Binary(op);
        let node = match kind % 9 {
            0 => g.call_function(unary(UnaryOp::Relu), &[&a]),
            1 => g.call_function(unary(UnaryOp::Neg), &[&a]),
            2 => g.call_function(unary(UnaryOp::Tanh), &[&a]),
            3 => g.call_function(binary(BinaryOp::Add), &[&a, &b]),
            4 => g.call_function(binary(BinaryOp::Mul), &[&a, &b]),
            5 => g.call_function(binary(BinaryOp::Sub), &[&a, &b]),
            6 => g.call_function(
                Op::Scalar(ScalarOp {
                    op: BinaryOp::Mul,
                    value: 0.5,
                    reversed: false,
                }),
                &[&a],
            ),
            7 => g
                .call_function(
                    Op::Dropout(DropoutOp {
                        p: 0.5,
                        training: false,
                    }),
                    &[&a],
                )
                .and_then(|d| g.getitem(&d, 0)),
            // The same expression again, for CSE.
            _ => g.call_function(binary(BinaryOp::Add), &[&a, &b]),
        }
        .unwrap();
        values.push(node);
    }
    let last = *values.last().unwrap();
    let picked = values[extra % values.len()];
    g.output(&[&last, &picked]).unwrap();
    let mut gm = module_of(g);
    gm.constants.insert("c0".into(), constant(1));
    gm.constants.insert("c1".into(), constant(2));
    gm
}

fn check_pass(steps: &[Step], extra: usize, pm: PassManager, what: &str) {
    let mut gm = random_graph(steps, extra);
    let inputs = [constant(3), constant(4)];
    let before = outputs(&gm, &inputs);
    let report = pm.run(&mut gm);
    let report = report.unwrap_or_else(|e| panic!("{what}: {e}\n{}", gm.graph));
    gm.graph.verify().unwrap();
    let after = outputs(&gm, &inputs);
    for (a, e) in after.iter().zip(&before) {
        assert_close(a, e, 1e-5, 1e-6, &format!("{what} ({report})"));
    }
}

fn steps() -> impl Strategy<Value = Vec<Step>> {
    prop::collection::vec((any::<u8>(), any::<usize>(), any::<usize>()), 1..30)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn every_registered_pass_keeps_outputs(steps in steps(), extra in any::<usize>()) {
        for name in registry::names() {
            let mut pm = PassManager::new();
            pm.verify = true;
            pm.add(registry::by_name(name).unwrap());
            check_pass(&steps, extra, pm, name);
        }
    }

    #[test]
    fn the_cleanup_pipeline_keeps_outputs(steps in steps(), extra in any::<usize>()) {
        let mut pm = pipelines::cleanup().unwrap();
        pm.verify = true;
        check_pass(&steps, extra, pm, "cleanup");
    }
}

/// A random conv stack: for each layer its output channels, kernel size and whether a batch
/// norm (with random statistics) and a ReLU follow.
fn conv_stack(layers: &[(usize, usize, bool, bool)]) -> tessera_nn::Sequential {
    use tessera_nn::layers::{BatchNorm2d, Conv2d, Conv2dOptions, ReLU};
    let mut seq = tessera_nn::Sequential::new();
    let mut channels = 3;
    for (i, &(out, kernel, bn, relu)) in layers.iter().enumerate() {
        let options = Conv2dOptions::default().padding(kernel / 2);
        seq = seq.add(Conv2d::with_options(channels, out, kernel, options).unwrap());
        if bn {
            let norm = BatchNorm2d::new(out).unwrap();
            let _guard = tessera_tensor::no_grad();
            let seed = 10 * i as u64;
            let stat = |s| {
                tessera_testkit::leaf(&[out], s)
                    .detach()
                    .to_dtype(DType::F32)
                    .unwrap()
            };
            let var = stat(seed).abs().unwrap().add_scalar(0.2).unwrap();
            norm.running_var.as_ref().unwrap().copy_(&var).unwrap();
            norm.running_mean
                .as_ref()
                .unwrap()
                .copy_(&stat(seed + 1))
                .unwrap();
            norm.weight
                .as_ref()
                .unwrap()
                .copy_(&stat(seed + 2))
                .unwrap();
            norm.bias.as_ref().unwrap().copy_(&stat(seed + 3)).unwrap();
            seq = seq.add(norm);
        }
        if relu {
            seq = seq.add(ReLU::new());
        }
        channels = out;
    }
    seq
}

fn layers() -> impl Strategy<Value = Vec<(usize, usize, bool, bool)>> {
    prop::collection::vec(
        (
            1usize..6,
            prop::sample::select(vec![1usize, 3]),
            any::<bool>(),
            any::<bool>(),
        ),
        1..5,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn folding_batch_norm_keeps_random_conv_stacks_outputs(layers in layers(), op_level in any::<bool>()) {
        use std::sync::Arc;
        use tessera_fx::trace::{LeafPolicy, trace};
        use tessera_nn::{Forward, ModuleExt};
        let model = Arc::new(conv_stack(&layers));
        model.eval();
        let policy = if op_level { LeafPolicy::none() } else { LeafPolicy::default() };
        let graph = trace(&*model, f32s(&[2, 3, 6, 6]), policy).unwrap();
        let mut gm = GraphModule::new(model, graph);
        let x = tessera_testkit::leaf(&[2, 3, 6, 6], 7).detach().to_dtype(DType::F32).unwrap();
        let before = gm.forward(x.clone()).unwrap();
        let mut pm = PassManager::new();
        pm.verify = true;
        pm.add(registry::by_name("fold_batch_norm").unwrap());
        pm.run(&mut gm).unwrap();
        let text = gm.graph.to_string();
        prop_assert!(!text.contains("BatchNorm2d(") && !text.contains("batch_norm"), "{}", text);
        let after = gm.forward(x).unwrap();
        assert_close(&after, &before, 1e-4, 1e-5, "fold_batch_norm on a random conv stack");
    }
}
