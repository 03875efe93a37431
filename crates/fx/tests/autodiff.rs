//! The joint forward+backward graph of small models: its printed form (snapshots of the
//! backward graphs of Linear+ReLU, Conv2d+BatchNorm2d(train)+ReLU, softmax cross-entropy and
//! LayerNorm), that it parses back, that running it gives eager autograd's gradients, and the
//! errors for what cannot be differentiated.

use crate::autodiff_common;

use autodiff_common::{assert_joint_matches_eager, run_joint, traced_loss};
use tessera_fx::autodiff::joint_graph;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_fx::{AutodiffError, FxError, Graph, GraphModule};
use tessera_nn::layers::{BatchNorm2d, Conv2d, Conv2dOptions, LayerNorm, Linear, ReLU, Size2};
use tessera_nn::{Call, Forward, ModuleExt, Sequential};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Generator, Tensor, TensorMeta};
use tessera_testkit::{f32s, snapshots};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn_with(shape, DType::F32, &mut Generator::new(seed)).unwrap()
}

/// Asserts that `text` parses back to a graph of the same structure.
fn assert_round_trips(graph: &Graph) {
    let text = graph.to_string();
    let parsed = Graph::parse(&text).unwrap();
    assert!(parsed.same_structure(graph), "{text}");
    assert_eq!(parsed.to_string(), text);
}

fn linear_relu() -> Sequential {
    Sequential::new()
        .add(Linear::new(4, 3).unwrap())
        .add(ReLU::new())
}

#[test]
fn linear_relu_backward_graph() {
    let model = linear_relu();
    let traced = traced_loss(&model, &[("x", f32s(&[2, 4]))], |t| {
        Ok(vec![model.call(t[0].clone())?.sum_all()?])
    });
    let wrt = ["0.weight", "0.bias", "x"];
    let joint = joint_graph(&traced, &wrt).unwrap();
    snapshots().bind(|| insta::assert_snapshot!("autodiff_linear_relu", joint.graph().to_string()));
    assert_round_trips(joint.graph());
    assert_joint_matches_eager(
        &model,
        &traced,
        &wrt,
        &["x"],
        &[randn(&[2, 4], 1)],
        |t| model.call(t[0].clone()).unwrap().sum_all().unwrap(),
        (1e-6, 1e-7),
    );
}

fn conv_bn_relu() -> Sequential {
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
    let model = Sequential::new()
        .add(conv)
        .add(BatchNorm2d::new(4).unwrap())
        .add(ReLU::new());
    model.train(true);
    model
}

#[test]
fn conv_batch_norm_relu_in_training_backward_graph() {
    let model = conv_bn_relu();
    let traced = traced_loss(&model, &[("x", f32s(&[2, 3, 5, 5]))], |t| {
        Ok(vec![model.call(t[0].clone())?.sum_all()?])
    });
    let wrt = ["0.weight", "0.bias", "1.weight", "1.bias", "x"];
    let joint = joint_graph(&traced, &wrt).unwrap();
    snapshots()
        .bind(|| insta::assert_snapshot!("autodiff_conv_bn_relu_train", joint.graph().to_string()));
    assert_round_trips(joint.graph());
    // The loss is a sum of a batch-normalised output: weight the elements so that the
    // gradients are not all (nearly) zero.
    let weights = randn(&[2, 4, 5, 5], 7);
    let traced = traced_loss(&model, &[("x", f32s(&[2, 3, 5, 5]))], |t| {
        Ok(vec![model.call(t[0].clone())?.mul(&weights)?.sum_all()?])
    });
    assert_joint_matches_eager(
        &model,
        &traced,
        &wrt,
        &["x"],
        &[randn(&[2, 3, 5, 5], 2)],
        |t| {
            model
                .call(t[0].clone())
                .unwrap()
                .mul(&weights)
                .unwrap()
                .sum_all()
                .unwrap()
        },
        (1e-5, 1e-6),
    );
}

#[test]
fn softmax_cross_entropy_backward_graph() {
    let model = tessera_nn::layers::Identity::new();
    let inputs = [
        ("logits", f32s(&[4, 5])),
        ("target", TensorMeta::new([4], DType::I64)),
    ];
    let loss = |t: &[Tensor]| F::cross_entropy(&t[0], &t[1], Default::default());
    let traced = traced_loss(&model, &inputs, |t| Ok(vec![loss(t)?]));
    let joint = joint_graph(&traced, &["logits"]).unwrap();
    snapshots().bind(|| {
        insta::assert_snapshot!("autodiff_softmax_cross_entropy", joint.graph().to_string())
    });
    assert_round_trips(joint.graph());
    let target = Tensor::from_vec(vec![0i64, 4, 2, 2], &[4]).unwrap();
    assert_joint_matches_eager(
        &model,
        &traced,
        &["logits"],
        &["logits", "target"],
        &[randn(&[4, 5], 3), target],
        |t| loss(t).unwrap(),
        (1e-6, 1e-7),
    );
}

#[test]
fn layer_norm_backward_graph() {
    let model = LayerNorm::new(&[8]).unwrap();
    let weights = randn(&[2, 3, 8], 8);
    let traced = traced_loss(&model, &[("x", f32s(&[2, 3, 8]))], |t| {
        Ok(vec![model.call(t[0].clone())?.mul(&weights)?.sum_all()?])
    });
    let wrt = ["weight", "bias", "x"];
    let joint = joint_graph(&traced, &wrt).unwrap();
    snapshots().bind(|| insta::assert_snapshot!("autodiff_layer_norm", joint.graph().to_string()));
    assert_round_trips(joint.graph());
    assert_joint_matches_eager(
        &model,
        &traced,
        &wrt,
        &["x"],
        &[randn(&[2, 3, 8], 4)],
        |t| {
            model
                .call(t[0].clone())
                .unwrap()
                .mul(&weights)
                .unwrap()
                .sum_all()
                .unwrap()
        },
        (1e-5, 1e-6),
    );
}

#[test]
fn gradients_are_named_after_their_values_and_follow_the_forward_outputs() {
    let model = linear_relu();
    let traced = traced_loss(&model, &[("x", f32s(&[2, 4]))], |t| {
        Ok(vec![model.call(t[0].clone())?.sum_all()?])
    });
    let joint = joint_graph(&traced, &["0.weight", "x"]).unwrap();
    assert_eq!(joint.forward_outputs, 1);
    assert_eq!(joint.gradients_of, ["0.weight", "x"]);
    assert!(joint.tangents.is_empty());
    let text = joint.graph().to_string();
    let ret = text.lines().last().unwrap();
    assert!(
        ret.contains("%grad_0_weight") && ret.contains("%grad_x"),
        "{ret}"
    );
}

#[test]
fn a_value_used_twice_gets_the_sum_of_its_gradients() {
    let model = tessera_nn::layers::Identity::new();
    let traced = traced_loss(&model, &[("x", f32s(&[3]))], |t| {
        Ok(vec![t[0].mul(&t[0])?.add(&t[0].sin()?)?.sum_all()?])
    });
    let x = randn(&[3], 5);
    let (_, outputs) = run_joint(&model, &traced, &["x"], std::slice::from_ref(&x));
    // d/dx (x^2 + sin x) = 2x + cos x.
    let expected = x.mul_scalar(2.0).unwrap().add(&x.cos().unwrap()).unwrap();
    tessera_testkit::assert_close(&outputs[1], &expected, 1e-6, 1e-7, "grad x");
}

#[test]
fn a_non_scalar_output_takes_its_upstream_gradient_as_a_tangent_input() {
    let model = tessera_nn::layers::Identity::new();
    let traced = traced_loss(&model, &[("x", f32s(&[2, 3]))], |t| Ok(vec![t[0].tanh()?]));
    let joint = joint_graph(&traced, &["x"]).unwrap();
    assert_eq!(joint.tangents, ["tangent_tanh"]);
    let (x, tangent) = (randn(&[2, 3], 6), randn(&[2, 3], 7));
    let outputs = joint
        .traced
        .interpret(&model, &[x.clone(), tangent.clone()])
        .unwrap();
    let y = x.tanh().unwrap();
    let expected = tangent
        .mul(&y.mul(&y).unwrap().rsub_scalar(1.0).unwrap())
        .unwrap();
    tessera_testkit::assert_close(&outputs[1], &expected, 1e-6, 1e-7, "grad x");
}

#[test]
fn a_value_the_outputs_do_not_use_gets_zeros() {
    let model = tessera_nn::layers::Identity::new();
    let traced = traced_loss(&model, &[("x", f32s(&[2])), ("y", f32s(&[2]))], |t| {
        Ok(vec![t[0].exp()?.sum_all()?])
    });
    let (_, outputs) = run_joint(&model, &traced, &["y"], &[randn(&[2], 1), randn(&[2], 2)]);
    assert_eq!(outputs[1].to_vec::<f32>().unwrap(), [0.0, 0.0]);
}

#[test]
fn a_graph_module_derives_a_joint_module_sharing_its_parameters() {
    let model = std::sync::Arc::new(linear_relu());
    let traced = trace(&*model, f32s(&[2, 4]), LeafPolicy::none()).unwrap();
    let gm = GraphModule::new(model.clone(), traced);
    let (joint, signature) = gm.joint(&["0.weight", "0.bias"]).unwrap();
    assert_eq!(signature.tangents, ["tangent_relu"]);
    let x = randn(&[2, 4], 9);
    let ones = Tensor::ones(&[2, 3], DType::F32).unwrap();
    let outputs = Forward::<Vec<Tensor>>::forward(&joint, vec![x.clone(), ones]).unwrap();
    let bias_grad = model.call(x).unwrap().gt_scalar(0.0).unwrap();
    let expected = bias_grad
        .to_dtype(DType::F32)
        .unwrap()
        .sum_dims(&[0], false)
        .unwrap();
    tessera_testkit::assert_close(&outputs[2], &expected, 0.0, 0.0, "grad 0.bias");
}

#[test]
fn module_calls_must_be_inlined_first() {
    let model = linear_relu();
    let traced = trace(&model, f32s(&[2, 4]), LeafPolicy::default()).unwrap();
    let err = joint_graph(&traced, &["0.weight"]).err().unwrap();
    assert!(
        matches!(
            err,
            FxError::Autodiff {
                source: AutodiffError::ModuleCall { .. }
            }
        ),
        "{err}"
    );
}

#[test]
fn unknown_and_integer_values_are_refused_by_name() {
    let model = tessera_nn::layers::Identity::new();
    let inputs = [
        ("logits", f32s(&[4, 5])),
        ("target", TensorMeta::new([4], DType::I64)),
    ];
    let traced = traced_loss(&model, &inputs, |t| {
        Ok(vec![F::cross_entropy(&t[0], &t[1], Default::default())?])
    });
    let err = joint_graph(&traced, &["nope"]).err().unwrap();
    assert_eq!(
        err.to_string(),
        "autodiff: no graph input or get_attr target is called `nope`"
    );
    let err = joint_graph(&traced, &["target"]).err().unwrap();
    assert_eq!(
        err.to_string(),
        "autodiff: `target` is i64: only float values have gradients"
    );
}

#[test]
fn learnable_fake_quantization_differentiates_as_eager() {
    let model = tessera_nn::layers::Identity::new();
    let fake_quant = |t: &[Tensor]| {
        tessera_tensor::op::fake_quantize_learnable_per_channel_affine(
            &t[0], &t[1], &t[2], 1, 0, 255, 0.5,
        )?
        .mul(&t[0])?
        .sum_all()
    };
    let inputs = [
        ("x", f32s(&[2, 3, 4])),
        ("scale", f32s(&[3])),
        ("zero_point", f32s(&[3])),
    ];
    let traced = traced_loss(&model, &inputs, |t| Ok(vec![fake_quant(t)?]));
    let scale = Tensor::from_vec(vec![0.05f32, 0.1, 0.02], &[3]).unwrap();
    let zero_point = Tensor::from_vec(vec![100.0f32, 128.0, 3.0], &[3]).unwrap();
    let names = ["x", "scale", "zero_point"];
    assert_joint_matches_eager(
        &model,
        &traced,
        &names,
        &names,
        &[randn(&[2, 3, 4], 10), scale, zero_point],
        |t| fake_quant(t).unwrap(),
        (1e-6, 1e-7),
    );
}

#[test]
fn training_dropout_sends_gradients_through_the_mask_of_the_same_run() {
    let model = tessera_nn::layers::Dropout::new(0.5).unwrap();
    model.train(true);
    let traced = traced_loss(&model, &[("x", f32s(&[4, 8]))], |t| {
        Ok(vec![model.call(t[0].clone())?])
    });
    let joint = joint_graph(&traced, &["x"]).unwrap();
    let x = randn(&[4, 8], 11).abs().unwrap().add_scalar(0.1).unwrap();
    let ones = Tensor::ones(&[4, 8], DType::F32).unwrap();
    let outputs = joint.traced.interpret(&model, &[x, ones]).unwrap();
    // Kept elements pass twice their gradient, dropped ones none.
    let kept = outputs[0]
        .gt_scalar(0.0)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    let expected = kept.mul_scalar(2.0).unwrap();
    assert_eq!(
        outputs[1].to_vec::<f32>().unwrap(),
        expected.to_vec::<f32>().unwrap()
    );
}

#[test]
fn an_undefined_second_derivative_is_a_typed_error_naming_the_node() {
    let mut g = Graph::new();
    let grad = g.placeholder("grad", f32s(&[3]));
    let v = g.placeholder("v", f32s(&[3]));
    let op = tessera_tensor::Op::UnaryBackward(tessera_tensor::op::UnaryOp::Tanh);
    let y = g.call_function(op, &[&grad, &v]).unwrap();
    g.output(&[&y]).unwrap();
    let traced = tessera_fx::trace::TracedGraph::from(g);
    let err = joint_graph(&traced, &["v"]).err().unwrap();
    let FxError::Autodiff {
        source: AutodiffError::Formula { node, source },
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(node, "%tanh_backward");
    assert_eq!(
        **source,
        tessera_tensor::TensorError::NoDoubleBackward {
            op: "tanh_backward".into(),
            input: 1
        }
    );
    // With respect to the gradient it is linear, and differentiable.
    assert!(joint_graph(&traced, &["grad"]).is_ok());
}
