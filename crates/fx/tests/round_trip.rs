//! Round trips: print -> parse -> print is the identity, the parsed graph equals the original,
//! every op of the table survives its text form, and serde keeps the whole graph.

use crate::common;

use common::{cnn_chain, f32s, multi_io, residual_block};
use tessera_fx::{Graph, Result};
use tessera_nn::ModuleKind;
use tessera_tensor::op::*;
use tessera_tensor::{DType, Op};
use tessera_testkit::every_reduce_kind;

fn assert_text_round_trip(g: &Graph) -> Result<()> {
    let text = g.to_text()?;
    let parsed = Graph::parse(&text)?;
    assert_eq!(parsed.to_string(), text);
    assert!(parsed.same_structure(g), "parsed graph differs:\n{parsed}");
    Ok(())
}

#[test]
fn cnn_chain_prints_parses_and_prints_the_same() -> Result<()> {
    assert_text_round_trip(&cnn_chain()?)
}

#[test]
fn residual_block_prints_parses_and_prints_the_same() -> Result<()> {
    assert_text_round_trip(&residual_block()?)
}

#[test]
fn multi_io_prints_parses_and_prints_the_same() -> Result<()> {
    assert_text_round_trip(&multi_io()?)
}

#[test]
fn parsed_graph_verifies_like_the_original() -> Result<()> {
    let parsed = Graph::parse(&residual_block()?.to_string())?;
    parsed.verify()?;
    Ok(())
}

#[test]
fn output_name_survives_a_node_named_output() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2]));
    let y = g.call_function_named("output", common::relu(), &[&x])?;
    g.output(&[&y])?;
    assert_text_round_trip(&g)
}

/// One op of every variant of the op table, with non-default attributes where it has some.
fn every_op() -> Vec<Op> {
    let pool = Pool2dParams {
        kernel: [2, 2],
        stride: [2, 2],
        padding: [0, 1],
        dilation: [1, 1],
        ceil_mode: true,
    };
    let conv = ConvParams::conv1d(2, 1, 1, 1);
    let mut ops: Vec<Op> = UnaryOp::EVERY.into_iter().map(Op::Unary).collect();
    ops.extend(UnaryOp::EVERY.into_iter().map(Op::UnaryBackward));
    for b in BinaryOp::EVERY {
        ops.push(Op::Binary(b));
        ops.push(Op::Scalar(ScalarOp {
            op: b,
            value: -2.5,
            reversed: true,
        }));
    }
    for c in CompareOp::EVERY {
        ops.push(Op::Compare(c));
    }
    for kind in every_reduce_kind() {
        ops.push(Op::Reduce(ReduceOp {
            kind,
            dims: vec![0, 2],
            keepdim: true,
        }));
    }
    ops.extend([
        Op::Where,
        Op::Clamp {
            min: Some(0.0),
            max: None,
        },
        Op::Softmax { dim: 1, log: true },
        Op::Matmul,
        Op::Linear { bias: false },
        Op::View(ViewOp::Reshape(vec![2, 3])),
        Op::View(ViewOp::Permute(vec![1, 0])),
        Op::View(ViewOp::Narrow {
            dim: 1,
            start: 2,
            len: 3,
        }),
        Op::View(ViewOp::Expand(vec![4, 3])),
        Op::View(ViewOp::Contiguous),
        Op::ToDType(DType::BF16),
        Op::Conv(ConvOp::Forward {
            params: conv,
            bias: false,
        }),
        Op::Conv(ConvOp::BackwardInput {
            params: conv,
            input_size: [1, 9],
        }),
        Op::Conv(ConvOp::BackwardWeight {
            params: conv,
            kernel_size: [1, 3],
        }),
        Op::Pool(PoolOp::MaxPool2d(pool)),
        Op::Pool(PoolOp::MaxPool2dValues(pool)),
        Op::Pool(PoolOp::MaxPool2dBackward {
            input_size: [8, 8],
            window: None,
        }),
        Op::Pool(PoolOp::MaxPool2dBackward {
            input_size: [8, 8],
            window: Some(pool),
        }),
        Op::Pool(PoolOp::AvgPool2d {
            params: pool,
            count_include_pad: false,
        }),
        Op::Pool(PoolOp::AvgPool2dBackward {
            params: pool,
            count_include_pad: true,
            input_size: [8, 8],
        }),
        Op::Pool(PoolOp::AdaptiveAvgPool2d {
            output_size: [1, 1],
        }),
        Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size: [7, 7] }),
        Op::Norm(NormOp::BatchNorm {
            training: true,
            eps: 1e-3,
            weight: false,
            bias: true,
        }),
        Op::Norm(NormOp::LayerNorm {
            normalized_ndim: 2,
            eps: 1e-5,
            weight: true,
            bias: false,
        }),
        Op::Norm(NormOp::GroupNorm {
            num_groups: 4,
            eps: 1e-5,
            weight: true,
            bias: true,
        }),
        Op::Dropout(DropoutOp {
            p: 0.25,
            training: true,
        }),
        Op::Embedding(EmbeddingOp {
            padding_idx: Some(0),
        }),
        Op::Embedding(EmbeddingOp { padding_idx: None }),
        Op::EmbeddingBackward(EmbeddingBackwardOp {
            num_weights: 10,
            padding_idx: Some(2),
        }),
        Op::Index(IndexOp::Cat { dim: 1 }),
        Op::Index(IndexOp::IndexSelect { dim: 0 }),
        Op::Index(IndexOp::IndexAdd { dim: 0 }),
        Op::Index(IndexOp::Gather { dim: 1 }),
        Op::Index(IndexOp::ScatterAdd { dim: 1 }),
        Op::Index(IndexOp::OneHot { num_classes: 10 }),
        Op::Loss(LossOp::Mse {
            reduction: Reduction::Sum,
        }),
        Op::Loss(LossOp::L1 {
            reduction: Reduction::None,
        }),
        Op::Loss(LossOp::Nll {
            reduction: Reduction::Mean,
            ignore_index: -100,
            label_smoothing: 0.1,
        }),
        Op::Loss(LossOp::BceWithLogits {
            reduction: Reduction::Mean,
            pos_weight: true,
        }),
        Op::Loss(LossOp::NllBackward {
            reduction: Reduction::None,
            ignore_index: 3,
            label_smoothing: 0.0,
        }),
        Op::Quant(QuantOp::QuantizePerTensor {
            scale: 0.0123,
            zero_point: 7,
            dtype: DType::U8,
        }),
        Op::Quant(QuantOp::QuantizePerChannel {
            axis: 0,
            dtype: DType::I8,
        }),
        Op::Quant(QuantOp::DequantizePerTensor {
            scale: 0.5,
            zero_point: 0,
        }),
        Op::Quant(QuantOp::DequantizePerChannel { axis: 1 }),
        Op::Quant(QuantOp::LinearDynamic {
            bias: true,
            reduce_range: false,
        }),
        Op::Quant(QuantOp::Linear {
            x_scale: 0.1,
            x_zero_point: 3,
            out_scale: 0.2,
            out_zero_point: 0,
            relu: true,
            bias: false,
        }),
        Op::Quant(QuantOp::Conv2d {
            params: ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1),
            x_scale: 0.1,
            x_zero_point: 3,
            out_scale: 0.2,
            out_zero_point: 9,
            relu: false,
            bias: true,
        }),
        Op::FakeQuant(FakeQuantOp::PerTensor {
            quant_min: 0,
            quant_max: 255,
        }),
        Op::FakeQuant(FakeQuantOp::PerChannel {
            axis: 0,
            quant_min: -128,
            quant_max: 127,
        }),
        Op::FakeQuant(FakeQuantOp::LearnablePerTensor {
            quant_min: 0,
            quant_max: 255,
            grad_factor: 0.25,
        }),
        Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
            axis: 1,
            quant_min: -128,
            quant_max: 127,
            grad_factor: 1.0,
        }),
        Op::FakeQuantBackward(FakeQuantOp::PerTensor {
            quant_min: 0,
            quant_max: 255,
        }),
        Op::FakeQuantBackward(FakeQuantOp::LearnablePerChannel {
            axis: 1,
            quant_min: -128,
            quant_max: 127,
            grad_factor: 1.0,
        }),
        Op::Optim(OptimOp::SgdUpdate {
            momentum: 0.9,
            dampening: 0.1,
            weight_decay: 1e-4,
            nesterov: false,
            maximize: true,
        }),
        Op::Optim(OptimOp::AdamStepScalars {
            beta1: 0.9,
            beta2: 0.999,
        }),
        Op::Optim(OptimOp::AdamUpdate {
            beta1: 0.8,
            beta2: 0.99,
            eps: 1e-6,
            weight_decay: 0.01,
            amsgrad: true,
            maximize: false,
            decoupled_weight_decay: true,
        }),
    ]);
    ops
}

#[test]
fn every_op_of_the_table_reads_back_from_its_text() -> Result<()> {
    for op in every_op() {
        let text = tessera_fx::op_to_text(&op)?;
        assert_eq!(tessera_fx::parse_op(&text)?, op, "{text}");
    }
    Ok(())
}

#[test]
fn ops_print_only_the_attributes_their_name_does_not_say() -> Result<()> {
    let cases = [
        (Op::Unary(UnaryOp::Relu), "relu"),
        (Op::Binary(BinaryOp::Add), "add"),
        (Op::ToDType(DType::F16), "to{F16}"),
        (
            Op::Scalar(ScalarOp {
                op: BinaryOp::Mul,
                value: 2.0,
                reversed: false,
            }),
            "mul{op: Mul, value: 2.0, reversed: false}",
        ),
        (
            Op::Clamp {
                min: Some(-1.0),
                max: None,
            },
            "clamp{min: -1.0, max: null}",
        ),
        (Op::Index(IndexOp::Cat { dim: 1 }), "cat{dim: 1}"),
    ];
    for (op, expected) in cases {
        assert_eq!(tessera_fx::op_to_text(&op)?, expected);
    }
    Ok(())
}

#[test]
fn serde_json_keeps_the_whole_graph_with_metadata() -> Result<()> {
    let mut g = residual_block()?;
    let relu = g.find("relu").expect("relu node");
    g.metadata_mut(&relu)?
        .insert("source".into(), "layer1.0.relu".into());
    let json = serde_json::to_string(&g).expect("serializes");
    let back: Graph = serde_json::from_str(&json).expect("deserializes");
    assert_eq!(back, g);
    assert_eq!(back.to_string(), g.to_string());
    Ok(())
}

#[test]
fn serde_refuses_a_graph_with_a_custom_op() -> Result<()> {
    use std::sync::Arc;
    use tessera_tensor::{Tensor, TensorMeta};
    struct Twice;
    impl CustomFunction for Twice {
        fn name(&self) -> String {
            "twice".into()
        }
        fn meta(&self, inputs: &[TensorMeta]) -> tessera_tensor::Result<Vec<TensorMeta>> {
            Ok(inputs.to_vec())
        }
        fn forward(&self, inputs: &[&Tensor]) -> tessera_tensor::Result<Vec<Tensor>> {
            Ok(vec![inputs[0].mul_scalar(2.0)?])
        }
        fn backward(
            &self,
            _: &[Tensor],
            _: &[Tensor],
            grads: &[Option<Tensor>],
        ) -> tessera_tensor::Result<Vec<Option<Tensor>>> {
            Ok(grads.to_vec())
        }
    }
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2]));
    let y = g.call_function(Op::Custom(CustomOp(Arc::new(Twice))), &[&x])?;
    g.output(&[&y])?;
    assert!(serde_json::to_string(&g).is_err());
    let err = g.to_text().expect_err("a custom op has no text");
    assert!(
        matches!(&err, tessera_fx::FxError::Unserializable { op } if op == "twice"),
        "{err:?}"
    );
    assert!(g.to_string().contains("call_function[twice]{custom}"));
    Ok(())
}

#[test]
fn attributes_read_back_in_any_field_order_and_quoting() -> Result<()> {
    let op = tessera_fx::parse_op(r#"mul{"reversed": false, value: 2.0, op: "Mul"}"#)?;
    assert_eq!(
        op,
        Op::Scalar(ScalarOp {
            op: BinaryOp::Mul,
            value: 2.0,
            reversed: false,
        })
    );
    assert_eq!(
        tessera_fx::op_to_text(&op)?,
        "mul{op: Mul, value: 2.0, reversed: false}"
    );
    Ok(())
}

#[test]
fn an_op_named_differently_from_its_attributes_is_refused() {
    let err = tessera_fx::parse_op("add{op: Mul, value: 2.0, reversed: false}")
        .expect_err("the name says add, the attributes say mul");
    assert_eq!(err.column, 1);
}

#[test]
fn module_reprs_with_quotes_and_brackets_round_trip() -> Result<()> {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 4]));
    let m = g.call_module(
        "blocks.0.act",
        ModuleKind::from_name("Lambda"),
        r#"Lambda(name="a]b", dims=[1, (2, 3)], opts={'k': ']'})"#,
        &[&x],
        vec![f32s(&[2, 4])],
    )?;
    g.output(&[&m])?;
    assert_text_round_trip(&g)?;
    assert!(g.to_dot().contains(r#"Lambda(name=\"a]b\""#));
    Ok(())
}

#[test]
fn module_reprs_that_cannot_print_on_one_line_are_refused() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2]));
    for repr in [
        "Sequential(\n  (0): ReLU()\n)",
        "Linear(2, 2",
        "Odd)(",
        "(no type)",
    ] {
        let err = g.call_module("m", ModuleKind::Linear, repr, &[&x], vec![f32s(&[2])]);
        assert!(
            matches!(err, Err(tessera_fx::FxError::InvalidModuleRepr { .. })),
            "{repr:?}"
        );
    }
}

#[test]
fn windows_line_endings_parse() -> Result<()> {
    let text = cnn_chain()?.to_string();
    let parsed = Graph::parse(&text.replace('\n', "\r\n"))?;
    assert_eq!(parsed.to_string(), text);
    Ok(())
}
