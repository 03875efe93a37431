//! Training-mode state in graphs: a traced training batch norm returns its new running
//! statistics and batch counter as buffer mutations (printed, parsed, written back by the
//! graph's runners), so graph training reproduces eager training bit for bit; the joint graph
//! keeps them, undifferentiated, after the gradients.

use crate::common;

use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, TracedGraph, inline, trace, trace_with};
use tessera_fx::{FxError, Graph, GraphModule, RunError};
use tessera_nn::layers::{
    BatchNorm2d, BatchNormOptions, Conv2d, Conv2dOptions, InstanceNorm2d, InstanceNormOptions,
    ReLU, Size2,
};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, Forward, Module, ModuleExt, Sequential};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Generator, Tensor, TensorMeta};
use tessera_testkit::{f32s, snapshots};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

/// Conv2d(3, 4, 3, padding 1) + BatchNorm2d(4) + ReLU in training.
fn conv_bn_relu(momentum: Option<f64>) -> Sequential {
    let conv = Conv2d::with_options(
        3,
        4,
        3,
        Conv2dOptions {
            padding: Size2::Int(1),
            ..Default::default()
        },
    )
    .unwrap();
    let bn = BatchNorm2d::with_options(
        4,
        BatchNormOptions {
            momentum,
            ..Default::default()
        },
    )
    .unwrap();
    let model = Sequential::new().add(conv).add(bn).add(ReLU::new());
    model.train(true);
    model
}

/// Two copies of [`conv_bn_relu`] with the same state (the second loads the first's).
fn twins(momentum: Option<f64>) -> (Sequential, Sequential) {
    let (a, b) = (conv_bn_relu(momentum), conv_bn_relu(momentum));
    b.load_state_dict(&a.state_dict().unwrap(), true, false)
        .unwrap();
    (a, b)
}

fn buffers(module: &dyn Module) -> Vec<(String, Vec<f64>)> {
    module
        .named_buffers()
        .into_iter()
        .map(|(k, b)| (k, b.to_vec_f64().unwrap()))
        .collect()
}

fn assert_round_trips(graph: &Graph) {
    let text = graph.to_string();
    let parsed = Graph::parse(&text).unwrap();
    assert!(parsed.same_structure(graph), "{text}");
    assert_eq!(parsed.buffer_mutations(), graph.buffer_mutations());
    assert_eq!(parsed.to_string(), text);
}

#[test]
fn a_training_batch_norm_returns_its_running_statistics_as_buffer_mutations() {
    let model = conv_bn_relu(Some(0.1));
    let traced = trace(&model, f32s(&[2, 3, 5, 5]), LeafPolicy::none()).unwrap();
    snapshots()
        .bind(|| insta::assert_snapshot!("train_graph_conv_bn_relu", traced.graph.to_string()));
    assert_eq!(
        traced.graph.buffer_mutations(),
        ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    );
    assert_eq!(traced.graph.results().unwrap().len(), 1);
    assert_round_trips(&traced.graph);
    struct Copy;
    impl tessera_fx::transformer::Transformer for Copy {}
    let copied = tessera_fx::transformer::transform(&traced.graph, &mut Copy).unwrap();
    copied.verify().unwrap();
    assert_eq!(
        copied.to_string(),
        traced.graph.to_string(),
        "a transform keeps them"
    );
    let json = serde_json::to_string(&traced.graph).unwrap();
    let loaded: Graph = serde_json::from_str(&json).unwrap();
    assert_eq!(loaded.buffer_mutations(), traced.graph.buffer_mutations());
}

#[test]
fn graph_training_steps_update_the_buffers_as_eager_bit_for_bit() {
    for momentum in [Some(0.1), None] {
        let (eager, graphed) = twins(momentum);
        let graphed = Arc::new(graphed);
        let traced = trace(&*graphed, f32s(&[2, 3, 5, 5]), LeafPolicy::none()).unwrap();
        let gm = GraphModule::new(graphed.clone(), traced);
        for step in 0..4 {
            let x = randn(&[2, 3, 5, 5], 10 + step);
            let expected = eager.call(x.clone()).unwrap();
            let got = gm.call(x).unwrap();
            assert_eq!(
                got.to_vec::<f32>().unwrap(),
                expected.to_vec::<f32>().unwrap(),
                "output of step {step}, momentum {momentum:?}"
            );
            assert_eq!(
                buffers(&*graphed),
                buffers(&eager),
                "buffers after step {step}"
            );
        }
        let count = graphed.get_buffer("1.num_batches_tracked").unwrap();
        assert_eq!(count.item::<i64>().unwrap(), 4);
    }
}

#[test]
fn a_training_instance_norm_with_running_statistics_updates_them_as_eager_through_its_graph() {
    let tracked = InstanceNormOptions::default().track_running_stats(true);
    let (eager, graphed) = (
        InstanceNorm2d::with_options(3, tracked.clone()).unwrap(),
        Arc::new(InstanceNorm2d::with_options(3, tracked).unwrap()),
    );
    eager.train(true);
    graphed.train(true);
    let traced = trace(&*graphed, f32s(&[2, 3, 4, 5]), LeafPolicy::none()).unwrap();
    assert_eq!(
        traced.graph.buffer_mutations(),
        ["running_mean", "running_var"]
    );
    assert_round_trips(&traced.graph);
    let gm = GraphModule::new(graphed.clone(), traced);
    for step in 0..3 {
        let x = randn(&[2, 3, 4, 5], 30 + step)
            .mul_scalar(1.0 + step as f64)
            .unwrap();
        let expected = eager.call(x.clone()).unwrap();
        let got = gm.call(x).unwrap();
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            expected.to_vec::<f32>().unwrap(),
            "output of step {step}"
        );
        assert_eq!(
            buffers(&*graphed),
            buffers(&eager),
            "buffers after step {step}"
        );
    }
    let mean = graphed
        .running_mean
        .as_ref()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(
        mean.iter().any(|&m| m != 0.0),
        "the running mean never moved: {mean:?}"
    );
}

#[test]
fn inlining_a_training_batch_norm_moves_its_mutations_under_its_path() {
    let (model, eager) = twins(Some(0.1));
    let mut traced = trace(&model, f32s(&[2, 3, 5, 5]), LeafPolicy::default()).unwrap();
    assert!(
        traced.graph.buffer_mutations().is_empty(),
        "a leaf call updates itself"
    );
    inline(&mut traced, &model, |_| true).unwrap();
    traced.graph.verify().unwrap();
    assert_eq!(
        traced.graph.buffer_mutations(),
        ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    );
    let op_level = trace(&model, f32s(&[2, 3, 5, 5]), LeafPolicy::none()).unwrap();
    let x = randn(&[2, 3, 5, 5], 4);
    let out = traced.interpret(&model, std::slice::from_ref(&x)).unwrap();
    assert_eq!(out.len(), 1, "interpret returns the results only");
    let expected = eager.call(x).unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        expected.to_vec::<f32>().unwrap()
    );
    assert_eq!(buffers(&model), buffers(&eager));
    assert_eq!(
        op_level.graph.buffer_mutations(),
        traced.graph.buffer_mutations()
    );
}

#[test]
fn the_joint_graph_returns_the_mutations_after_the_gradients_and_writes_them_back() {
    let (eager, graphed) = twins(Some(0.1));
    let graphed = Arc::new(graphed);
    let traced = trace_with(
        &*graphed,
        &[("x", f32s(&[2, 3, 5, 5]))],
        LeafPolicy::none(),
        |t| Ok(vec![graphed.call(t[0].clone())?.sum_all()?]),
    )
    .unwrap();
    let gm = GraphModule::new(graphed.clone(), traced);
    let wrt = ["0.weight", "1.weight", "1.bias"];
    let (joint_module, joint) = gm.joint(&wrt).unwrap();
    assert_eq!(joint.forward_outputs, 1);
    assert_eq!(
        joint.graph().buffer_mutations(),
        ["1.running_mean", "1.running_var", "1.num_batches_tracked"]
    );
    let outputs = joint.graph().output_node().unwrap();
    let operands = joint.graph().operands(&outputs).unwrap();
    assert_eq!(operands.len(), 1 + wrt.len() + 3);
    let grad_names: Vec<&str> = operands[1..1 + wrt.len()]
        .iter()
        .map(|o| joint.graph().name(o).unwrap())
        .collect();
    assert_eq!(
        grad_names,
        ["grad_0_weight", "grad_1_weight", "grad_1_bias"]
    );
    let text = joint.graph().to_string();
    assert!(
        text.contains(" -> 1.running_mean, ")
            && text.trim_end().ends_with("-> 1.num_batches_tracked)"),
        "{text}"
    );
    let parsed = Graph::parse(&text).unwrap();
    assert_eq!(parsed.buffer_mutations(), joint.graph().buffer_mutations());

    for step in 0..3 {
        let x = randn(&[2, 3, 5, 5], 20 + step);
        let got: Vec<Tensor> = joint_module.forward(vec![x.clone()]).unwrap();
        assert_eq!(got.len(), 1 + wrt.len(), "the runner keeps the mutations");
        for (_, p) in eager.named_parameters() {
            p.tensor().set_grad(None);
        }
        let loss = eager.call(x).unwrap().sum_all().unwrap();
        loss.backward().unwrap();
        assert_eq!(
            got[0].to_vec::<f32>().unwrap(),
            loss.to_vec::<f32>().unwrap()
        );
        for (name, grad) in wrt.iter().zip(&got[1..]) {
            let expected = eager.get_parameter(name).unwrap().tensor().grad().unwrap();
            assert_eq!(
                grad.to_vec::<f32>().unwrap(),
                expected.to_vec::<f32>().unwrap(),
                "gradient of {name}, step {step}"
            );
        }
        assert_eq!(
            buffers(&*graphed),
            buffers(&eager),
            "buffers after step {step}"
        );
    }
}

/// `d_cnn_train`: the shapes CNN traced at op level, in training, run for several steps
/// through the graph, gives eager's outputs and running statistics bit for bit at every step,
/// and PyTorch's after the first.
#[test]
fn d_cnn_train_as_a_graph_reproduces_eager_and_pytorch_running_statistics() {
    let case = common::Case::load("d_cnn_train");
    let weights = common::conformance_dir().join("d_cnn_train/weights.safetensors");
    let load = |cnn: &SmallCnn| {
        let sd = tessera_nn::load_safetensors(&weights).unwrap();
        cnn.load_state_dict(&sd, true, false).unwrap();
        cnn.train(true);
    };
    let eager = SmallCnn::new().unwrap();
    load(&eager);
    let graphed = Arc::new(SmallCnn::new().unwrap());
    load(&graphed);
    let traced = trace(&*graphed, f32s(&[4, 3, 16, 16]), LeafPolicy::none()).unwrap();
    assert_eq!(traced.graph.buffer_mutations().len(), 6, "two batch norms");
    let gm = GraphModule::new(graphed.clone(), traced);
    let x = case.io("input").to_dtype(DType::F32).unwrap();
    for step in 0..3 {
        let input = x.mul_scalar(1.0 + step as f64).unwrap();
        let got = gm.call(input.clone()).unwrap();
        let expected = eager.call(input).unwrap();
        assert_eq!(
            got.to_vec::<f32>().unwrap(),
            expected.to_vec::<f32>().unwrap()
        );
        if step == 0 {
            case.check("output", &got);
            for (key, buffer) in graphed.named_buffers() {
                case.check(&format!("after/{key}"), &buffer);
            }
        }
        assert_eq!(
            buffers(&*graphed),
            buffers(&eager),
            "buffers after step {step}"
        );
    }
    let count = graphed.bn2.num_batches_tracked.as_ref().unwrap();
    assert_eq!(count.item::<i64>().unwrap(), 3 + 3);
}

#[test]
fn a_result_after_a_mutation_and_a_buffer_written_twice_are_refused() {
    let text = "graph(x: f32[3]):
    %neg : f32[3] = call_function[neg](%x)
    return (%neg -> m.buf, %x)
";
    let err = Graph::parse(text).err().unwrap();
    assert!(
        err.to_string().contains("cannot follow a buffer mutation"),
        "{err}"
    );
    let twice = "graph(x: f32[3]):
    %neg : f32[3] = call_function[neg](%x)
    return (%neg, %x -> m.buf, %neg -> m.buf)
";
    let err = Graph::parse(twice).err().unwrap();
    assert!(
        err.to_string().contains("`m.buf` is written back twice"),
        "{err}"
    );
}

#[test]
fn writing_back_a_buffer_the_module_lacks_names_the_buffer() {
    let text = "graph(x: f32[3]):
    %neg : f32[3] = call_function[neg](%x)
    return (%neg, %x -> nope.running_mean)
";
    let graph = Graph::parse(text).unwrap();
    let traced = TracedGraph::from(graph);
    let root = tessera_nn::layers::Identity::new();
    let err = traced.interpret(&root, &[randn(&[3], 1)]).err().unwrap();
    assert!(
        matches!(
            &err,
            FxError::RunGraph {
                source: RunError::WriteBack { target, .. }
            } if target == "nope.running_mean"
        ),
        "{err:?}"
    );
}

#[test]
fn writing_back_a_value_of_another_shape_is_refused() {
    let model = conv_bn_relu(Some(0.1));
    let text = "graph(x: f32[3]):
    return (%x, %x -> 1.running_mean)
";
    let traced = TracedGraph::from(Graph::parse(text).unwrap());
    let err = traced.interpret(&model, &[randn(&[3], 1)]).err().unwrap();
    assert!(err.to_string().contains("1.running_mean"), "{err}");
    assert_eq!(
        model
            .get_buffer("1.running_mean")
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0.0; 4],
        "nothing was written"
    );
}

#[test]
fn a_traced_forward_writing_statistics_that_are_not_buffers_is_a_trace_error() {
    let model = tessera_nn::layers::Identity::new();
    let (mean, var) = (
        Tensor::zeros(&[4], DType::F32).unwrap(),
        Tensor::ones(&[4], DType::F32).unwrap(),
    );
    let err = trace_with(
        &model,
        &[("x", TensorMeta::new([2, 4], DType::F32))],
        LeafPolicy::none(),
        |t| {
            Ok(vec![F::batch_norm(
                &t[0],
                Some(&mean),
                Some(&var),
                None,
                None,
                true,
                0.1,
                1e-5,
            )?])
        },
    )
    .err()
    .unwrap();
    let text = format!("{err}");
    assert!(text.contains("not a buffer of the traced module"), "{text}");
}
