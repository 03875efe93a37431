//! A made-up elementwise op, `cube`, defined in one place (this file: its name, kind, effects,
//! meta, kernel and backward) and registered by name, goes through everything that reads the
//! op table: it prints, parses back, runs in the interpreter and eagerly with autograd, is
//! removed by dead code elimination when unused, is hash-consed by the e-graph simplifier and
//! joins an elementwise fusion group.

use tessera_fx::{Graph, GraphModule, NodeId, NodeKind};
use tessera_nn::Forward;
use tessera_passes::{DeadCodeElimination, Pass, Simplify, fusion_groups};
use tessera_tensor::op::{CustomFunction, CustomOp, Effects, OpKind, UnaryOp, register_custom};
use tessera_tensor::{DType, Op, Result, Tensor, TensorError, TensorMeta};

/// `x * x * x`, pure and elementwise.
struct Cube;

impl CustomFunction for Cube {
    fn name(&self) -> String {
        "cube".into()
    }

    fn kind(&self) -> OpKind {
        OpKind::ElementwiseUnary
    }

    fn effects(&self) -> Effects {
        Effects::PURE
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        match inputs {
            [x] if x.dtype.is_float() => Ok(vec![x.clone()]),
            _ => Err(TensorError::InvalidArgument {
                op: "cube".into(),
                msg: "expected one float tensor".into(),
            }),
        }
    }

    fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let x = inputs[0];
        Ok(vec![x.mul(x)?.mul(x)?])
    }

    fn backward(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = &grads[0] else {
            return Ok(vec![None]);
        };
        let x = &inputs[0];
        Ok(vec![Some(x.mul(x)?.mul_scalar(3.0)?.mul(g)?)])
    }
}

fn cube() -> Op {
    register_custom("cube", |attrs| attrs.is_none().then(|| CustomOp::new(Cube)));
    Op::Custom(CustomOp::new(Cube))
}

fn count(graph: &Graph, name: &str) -> usize {
    graph
        .nodes()
        .filter(|id| {
            matches!(&graph.node(id).unwrap().kind, NodeKind::CallFunction { op } if op.name() == name)
        })
        .count()
}

fn call(g: &mut Graph, op: Op, operands: &[&NodeId]) -> NodeId {
    g.call_function(op, operands).unwrap()
}

/// `relu(cube(x)) + cube(x)`, with a dead `cube(x)` beside it.
fn graph() -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([2, 3], DType::F32));
    let a = call(&mut g, cube(), &[&x]);
    let r = call(&mut g, Op::Unary(UnaryOp::Relu), &[&a]);
    let b = call(&mut g, cube(), &[&x]);
    let s = call(
        &mut g,
        Op::Binary(tessera_tensor::op::BinaryOp::Add),
        &[&r, &b],
    );
    let _dead = call(&mut g, cube(), &[&x]);
    g.output(&[&s]).unwrap();
    g
}

fn expected(x: &Tensor) -> Tensor {
    let c = x.mul(x).unwrap().mul(x).unwrap();
    c.relu().unwrap().add(&c).unwrap()
}

#[test]
fn a_new_op_prints_and_parses_back() {
    let g = graph();
    let text = g.to_string();
    assert!(text.contains("call_function[cube](%x)"), "{text}");
    let parsed = Graph::parse(&text).unwrap();
    assert_eq!(parsed.to_string(), text);
    assert_eq!(count(&parsed, "cube"), 3);
    parsed.verify().unwrap();
}

#[test]
fn a_new_op_runs_in_the_interpreter_and_eagerly_with_gradients() {
    let gm = GraphModule::from_graph(graph());
    let x = Tensor::randn(&[2, 3], DType::F32).unwrap();
    let out = gm.forward(vec![x.clone()]).unwrap();
    assert_eq!(
        out[0].to_vec_f64().unwrap(),
        expected(&x).to_vec_f64().unwrap()
    );

    let x = Tensor::randn(&[4], DType::F64)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let y = cube().apply1(&[&x]).unwrap();
    y.sum_all().unwrap().backward().unwrap();
    let want: Vec<f64> = x
        .to_vec_f64()
        .unwrap()
        .iter()
        .map(|v| 3.0 * v * v)
        .collect();
    let got = x.grad().unwrap().to_vec_f64().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
}

#[test]
fn a_dead_new_op_is_removed_and_a_duplicate_merged_by_simplify() {
    let mut gm = GraphModule::from_graph(graph());
    let x = Tensor::randn(&[2, 3], DType::F32).unwrap();
    DeadCodeElimination.run(&mut gm).unwrap();
    assert_eq!(count(&gm.graph, "cube"), 2, "{}", gm.graph);
    // Both remaining `cube(x)` are one e-class: the simplifier keeps one.
    Simplify::default().run(&mut gm).unwrap();
    gm.graph.verify().unwrap();
    assert_eq!(count(&gm.graph, "cube"), 1, "{}", gm.graph);
    let out = gm.forward(vec![x.clone()]).unwrap();
    assert_eq!(
        out[0].to_vec_f64().unwrap(),
        expected(&x).to_vec_f64().unwrap()
    );
}

#[test]
fn a_new_op_joins_an_elementwise_fusion_group() {
    let g = graph();
    let grouping = fusion_groups(&g).unwrap();
    let relu = g
        .nodes()
        .find(|id| g.node(id).unwrap().name == "relu")
        .unwrap();
    let cube = g
        .nodes()
        .find(|id| g.node(id).unwrap().name == "cube")
        .unwrap();
    let group = grouping.group_of(&relu).expect("relu is grouped");
    assert_eq!(grouping.group_of(&cube), Some(group), "{grouping}");
}

#[test]
fn an_op_with_unknown_effects_is_kept_and_not_grouped() {
    struct Opaque;
    impl CustomFunction for Opaque {
        fn name(&self) -> String {
            "opaque_op".into()
        }
        fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
            Ok(vec![inputs[0].clone()])
        }
        fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
            Ok(vec![inputs[0].clone()])
        }
        fn backward(
            &self,
            _: &[Tensor],
            _: &[Tensor],
            grads: &[Option<Tensor>],
        ) -> Result<Vec<Option<Tensor>>> {
            Ok(grads.to_vec())
        }
    }
    let op = Op::Custom(CustomOp::new(Opaque));
    assert_eq!(op.kind(), OpKind::Opaque);
    assert!(!op.is_pure());
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([2], DType::F32));
    let _dead = call(&mut g, op, &[&x]);
    g.output(&[&x]).unwrap();
    let mut gm = GraphModule::from_graph(g);
    DeadCodeElimination.run(&mut gm).unwrap();
    assert_eq!(count(&gm.graph, "opaque_op"), 1);
    assert!(
        gm.graph
            .to_string()
            .contains("call_function[opaque_op]{custom}")
    );
}
