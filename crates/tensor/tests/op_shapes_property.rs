//! Every op of the op table, fed random shapes (0, 1, small, huge and overflowing
//! dimensions), attributes and dtypes: its meta function and its eager kernel give an error or
//! a correct result (outputs shaped as the meta says, and equal to a simple reference where
//! one is cheap), never a panic. The generators are `tessera_testkit::op_cases`.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::BTreeSet;
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};
use tessera_testkit::op_cases::{
    VARIANTS, input_dtypes, numel, op_strategies, real_input, shapes, variant,
};

/// Largest input or output (in elements) the eager kernel is run on.
const EAGER_LIMIT: usize = 4096;

/// The meta function never panics; when it accepts small inputs, the eager kernel gives an
/// error or outputs of exactly the promised shapes and dtypes.
fn check(op: &Op, metas: &[TensorMeta]) -> Result<(), TestCaseError> {
    let Ok(promised) = op.meta(metas) else {
        return Ok(());
    };
    let small = |m: &TensorMeta| numel(&m.shape).is_some_and(|n| n <= EAGER_LIMIT);
    if !metas.iter().all(small) || !promised.iter().all(small) {
        return Ok(());
    }
    let inputs: Vec<Tensor> = metas.iter().map(real_input).collect();
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let Ok(outputs) = op.apply(&refs) else {
        return Ok(());
    };
    let actual: Vec<TensorMeta> = outputs.iter().map(Tensor::meta).collect();
    prop_assert_eq!(&actual, &promised, "{} on {:?}", op.name(), metas);
    check_reference(op, &inputs, &outputs)
}

/// Elementwise ops against a one-line reference on each element.
fn check_reference(op: &Op, inputs: &[Tensor], outputs: &[Tensor]) -> Result<(), TestCaseError> {
    let unary: Option<fn(f32) -> f32> = match op {
        Op::Unary(UnaryOp::Neg) => Some(|x| -x),
        Op::Unary(UnaryOp::Abs) => Some(f32::abs),
        Op::Unary(UnaryOp::Relu) => Some(|x| x.max(0.0)),
        _ => None,
    };
    let binary: Option<fn(f32, f32) -> f32> = match op {
        Op::Binary(BinaryOp::Add) => Some(|a, b| a + b),
        Op::Binary(BinaryOp::Sub) => Some(|a, b| a - b),
        Op::Binary(BinaryOp::Mul) => Some(|a, b| a * b),
        Op::Binary(BinaryOp::Maximum) => Some(f32::max),
        _ => None,
    };
    // The references compute in f32: other outputs (comparisons give bool) are not checked here.
    if outputs[0].dtype() != DType::F32 || inputs.iter().any(|t| t.dtype() != DType::F32) {
        return Ok(());
    }
    if let Some(f) = unary {
        let out = outputs[0].to_vec::<f32>().unwrap();
        let x = inputs[0].to_vec::<f32>().unwrap();
        let expected: Vec<f32> = x.into_iter().map(f).collect();
        prop_assert_eq!(out, expected, "{}", op.name());
    } else if let Some(f) = binary
        && inputs[0].shape() == inputs[1].shape()
    {
        let out = outputs[0].to_vec::<f32>().unwrap();
        let a = inputs[0].to_vec::<f32>().unwrap();
        let b = inputs[1].to_vec::<f32>().unwrap();
        let expected: Vec<f32> = a.into_iter().zip(b).map(|(a, b)| f(a, b)).collect();
        prop_assert_eq!(out, expected, "{}", op.name());
    }
    Ok(())
}

#[test]
fn every_variant_of_the_op_table_is_generated() {
    let mut runner = TestRunner::deterministic();
    let mut seen = BTreeSet::new();
    for strategy in op_strategies() {
        for _ in 0..4 {
            let op = strategy.new_tree(&mut runner).unwrap().current();
            seen.insert(variant(&op));
        }
    }
    let expected: BTreeSet<&str> = VARIANTS.iter().copied().collect();
    assert_eq!(seen, expected);
}

#[test]
fn every_op_errors_or_matches_its_meta_on_random_shapes() {
    for strategy in op_strategies() {
        let case = strategy.prop_flat_map(|op| {
            let dtypes = input_dtypes(&op);
            (Just(op), shapes(dtypes.len()), Just(dtypes))
        });
        let mut runner = TestRunner::new(Config {
            cases: 24,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&case, |(op, shapes, dtypes)| {
                let metas: Vec<TensorMeta> = shapes
                    .iter()
                    .zip(&dtypes)
                    .map(|(s, &d)| TensorMeta::new(s.as_slice(), d))
                    .collect();
                check(&op, &metas)
            })
            .unwrap();
    }
}
