//! The e-graph simplify pass: one hand-built graph per rule topic (printed before and after,
//! with the explanation of which rules fired), the broadcasting case it must not touch, the
//! limits stopping a run, a traced model, and random elementwise and layout chains; the
//! interpreter gives the same results before and after every time.

use crate::common::{assert_same, f32s, module_of, outputs, run_pass, snapshots};
use proptest::prelude::*;
use std::sync::Arc;
use std::time::Duration;
use tessera_fx::trace::{LeafPolicy, inline, trace};
use tessera_fx::{Graph, GraphModule, NodeId, NodeKind};
use tessera_nn::ModuleExt;
use tessera_nn::models::SmallCnn;
use tessera_passes::registry::by_name;
use tessera_passes::simplify::Stop;
use tessera_passes::{Changed, Simplify, SimplifyReport};
use tessera_tensor::op::{BinaryOp, ReduceKind, ReduceOp, ScalarOp, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor};

fn scalar(op: BinaryOp, value: f64) -> Op {
    Op::Scalar(ScalarOp {
        op,
        value,
        reversed: false,
    })
}

fn unary(op: UnaryOp) -> Op {
    Op::Unary(op)
}

fn reshape(shape: &[usize]) -> Op {
    Op::View(ViewOp::Reshape(shape.to_vec()))
}

fn permute(dims: &[usize]) -> Op {
    Op::View(ViewOp::Permute(dims.to_vec()))
}

fn call(g: &mut Graph, op: Op, operands: &[&NodeId]) -> NodeId {
    g.call_function(op, operands).unwrap()
}

/// Runs simplify with default limits, verifies the graph, and returns the printed graph
/// before and after with the report.
fn simplify(gm: &mut GraphModule) -> (String, SimplifyReport) {
    let before = gm.graph.to_string();
    let report = Simplify::default().run_with_report(gm).unwrap();
    gm.graph.verify().unwrap();
    (format!("before:\n{before}\nafter:\n{}", gm.graph), report)
}

/// Simplifies `gm`, snapshots graph and explanation under `name`, and checks results on
/// random inputs of the placeholders' shapes.
fn check_topic(name: &str, mut gm: GraphModule) -> SimplifyReport {
    let inputs: Vec<Tensor> = gm
        .graph
        .placeholders()
        .iter()
        .map(|p| Tensor::randn(&gm.graph.node(p).unwrap().meta[0].shape, DType::F32).unwrap())
        .collect();
    let expected = outputs(&gm, &inputs);
    let (text, report) = simplify(&mut gm);
    snapshots().bind(|| {
        insta::assert_snapshot!(format!("{name}_graph"), text);
        insta::assert_snapshot!(format!("{name}_explain"), report.to_string());
    });
    assert_same(&outputs(&gm, &inputs), &expected, name);
    report
}

#[test]
fn simplify_arithmetic_removes_neutral_elements_and_folds_scalars() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 3]));
    let a = call(&mut g, scalar(BinaryOp::Mul, 1.0), &[&x]);
    let b = call(&mut g, scalar(BinaryOp::Add, 0.0), &[&a]);
    let c = call(&mut g, scalar(BinaryOp::Mul, 2.0), &[&b]);
    let d = call(&mut g, scalar(BinaryOp::Mul, 3.0), &[&c]);
    let e = call(&mut g, scalar(BinaryOp::Sub, 1.0), &[&d]);
    let f = call(&mut g, scalar(BinaryOp::Add, 0.5), &[&e]);
    let n1 = call(&mut g, unary(UnaryOp::Neg), &[&f]);
    let n2 = call(&mut g, unary(UnaryOp::Neg), &[&n1]);
    let h = call(&mut g, scalar(BinaryOp::Div, 4.0), &[&n2]);
    g.output(&[&h]).unwrap();
    let report = check_topic("simplify_arithmetic", module_of(g));
    assert!(report.changed());
    for rule in [
        "mul-one",
        "add-zero",
        "mul-mul-fold",
        "add-add-fold",
        "neg-neg",
    ] {
        assert!(report.rules.contains_key(rule), "{rule} did not fire");
    }
}

#[test]
fn simplify_activation_collapses_idempotent_chains_and_clamps() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 5]));
    let r1 = call(&mut g, unary(UnaryOp::Relu), &[&x]);
    let r2 = call(&mut g, unary(UnaryOp::Relu), &[&r1]);
    let r3 = call(&mut g, unary(UnaryOp::Relu), &[&r2]);
    let n = call(&mut g, unary(UnaryOp::Neg), &[&x]);
    let a = call(&mut g, unary(UnaryOp::Abs), &[&n]);
    let lo = Op::Clamp {
        min: Some(-1.0),
        max: None,
    };
    let hi = Op::Clamp {
        min: None,
        max: Some(2.0),
    };
    let c1 = call(&mut g, lo, &[&x]);
    let c2 = call(
        &mut g,
        Op::Clamp {
            min: Some(-0.5),
            max: None,
        },
        &[&c1],
    );
    let c3 = call(&mut g, hi, &[&c2]);
    g.output(&[&r3, &a, &c3]).unwrap();
    let report = check_topic("simplify_activation", module_of(g));
    for rule in ["relu-relu", "abs-neg", "clamp-min-min", "clamp-min-max"] {
        assert!(report.rules.contains_key(rule), "{rule} did not fire");
    }
}

#[test]
fn simplify_layout_collapses_transposes_and_reshape_chains() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 3, 4]));
    let t1 = call(&mut g, permute(&[0, 2, 1]), &[&x]);
    let t2 = call(&mut g, permute(&[0, 2, 1]), &[&t1]);
    let r1 = call(&mut g, reshape(&[6, 4]), &[&t2]);
    let r2 = call(&mut g, reshape(&[24]), &[&r1]);
    let r3 = call(&mut g, reshape(&[2, 3, 4]), &[&r2]);
    let relu1 = call(&mut g, unary(UnaryOp::Relu), &[&r3]);
    let flat = call(&mut g, reshape(&[4, 6]), &[&relu1]);
    let relu2 = call(&mut g, unary(UnaryOp::Relu), &[&flat]);
    g.output(&[&relu2]).unwrap();
    let report = check_topic("simplify_layout", module_of(g));
    for rule in ["permute-permute", "permute-identity", "reshape-reshape"] {
        assert!(report.rules.contains_key(rule), "{rule} did not fire");
    }
}

#[test]
fn simplify_rebuilds_regions_with_several_roots() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3, 2]));
    let a = call(&mut g, scalar(BinaryOp::Mul, 1.0), &[&x]);
    let r1 = call(&mut g, unary(UnaryOp::Relu), &[&a]);
    let r2 = call(&mut g, unary(UnaryOp::Relu), &[&r1]);
    let s = call(&mut g, Op::Binary(BinaryOp::Add), &[&r2, &a]);
    g.output(&[&r1, &s]).unwrap();
    check_topic("simplify_several_roots", module_of(g));
}

#[test]
fn simplify_handles_regions_that_leave_and_reenter() {
    // The sum leaves the region of relus and the add, and its value comes back into the add:
    // each root is rebuilt at its own place, after the values it reads.
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3, 4]));
    let a = call(&mut g, unary(UnaryOp::Relu), &[&x]);
    let b = call(&mut g, unary(UnaryOp::Relu), &[&a]);
    let sum = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![1],
        keepdim: true,
    });
    let s = call(&mut g, sum, &[&b]);
    let c = call(&mut g, scalar(BinaryOp::Mul, 1.0), &[&b]);
    let d = call(&mut g, Op::Binary(BinaryOp::Add), &[&c, &s]);
    g.output(&[&d]).unwrap();
    let report = check_topic("simplify_leave_and_reenter", module_of(g));
    assert!(report.changed());
}

#[test]
fn simplify_leaves_a_region_untouched_when_its_new_terms_cost_more() {
    // `(x * 2) * 3` folds to `x * 6`, but `x * 2` is still needed by the add: the region would
    // gain a node, so it stays exactly as it was, without even taking a fresh name.
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[4, 4]));
    let a = call(&mut g, scalar(BinaryOp::Mul, 2.0), &[&x]);
    let b = call(&mut g, scalar(BinaryOp::Mul, 3.0), &[&a]);
    let c = call(&mut g, scalar(BinaryOp::Add, 1.0), &[&a]);
    g.output(&[&b, &c]).unwrap();
    let mut gm = module_of(g);
    let mut untouched = gm.graph.clone();
    let report = Simplify::default().run_with_report(&mut gm).unwrap();
    assert!(report.fired().contains(&"mul-mul-fold"), "{report}");
    assert!(!report.changed(), "{report}");
    assert_eq!(gm.graph, untouched);
    let fresh = call(&mut gm.graph, scalar(BinaryOp::Mul, 6.0), &[&x]);
    let expected = call(&mut untouched, scalar(BinaryOp::Mul, 6.0), &[&x]);
    assert_eq!(
        gm.graph.name(&fresh).unwrap(),
        untouched.name(&expected).unwrap()
    );
}

/// `x * ones` with constant ones read by get_attr.
fn times_ones(x_shape: &[usize], ones_shape: &[usize]) -> GraphModule {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(x_shape));
    let ones = g.get_attr("ones", f32s(ones_shape)).unwrap();
    let y = call(&mut g, Op::Binary(BinaryOp::Mul), &[&x, &ones]);
    let z = call(&mut g, unary(UnaryOp::Neg), &[&y]);
    g.output(&[&z]).unwrap();
    let mut gm = module_of(g);
    gm.constants
        .insert("ones".into(), Tensor::ones(ones_shape, DType::F32).unwrap());
    gm
}

#[test]
fn simplify_removes_multiplying_by_ones_that_broadcast_into_x() {
    let report = check_topic("simplify_times_ones", times_ones(&[2, 3], &[3]));
    assert!(report.changed());
}

#[test]
fn simplify_keeps_multiplying_by_ones_that_broadcast_x_to_a_larger_shape() {
    let mut gm = times_ones(&[3], &[2, 3]);
    let before = gm.graph.to_string();
    let x = Tensor::randn(&[3], DType::F32).unwrap();
    let expected = outputs(&gm, std::slice::from_ref(&x));
    let (_, report) = simplify(&mut gm);
    assert!(!report.changed(), "{report}");
    assert_eq!(gm.graph.to_string(), before);
    let out = outputs(&gm, &[x]);
    assert_eq!(out[0].shape(), vec![2, 3]);
    assert_same(&out, &expected, "broadcast ones");
}

/// relu -> *2 -> +1 -> neg -> transpose, `n` times, on a [4, 4] input.
fn long_chain(n: usize) -> GraphModule {
    let mut g = Graph::new();
    let mut v = g.placeholder("x", f32s(&[4, 4]));
    for _ in 0..n {
        v = call(&mut g, unary(UnaryOp::Relu), &[&v]);
        v = call(&mut g, scalar(BinaryOp::Mul, 2.0), &[&v]);
        v = call(&mut g, scalar(BinaryOp::Add, 1.0), &[&v]);
        v = call(&mut g, unary(UnaryOp::Neg), &[&v]);
        v = call(&mut g, permute(&[1, 0]), &[&v]);
    }
    g.output(&[&v]).unwrap();
    module_of(g)
}

#[test]
fn simplify_stops_at_the_node_limit_and_says_so() {
    let mut gm = long_chain(20);
    let x = Tensor::randn(&[4, 4], DType::F32).unwrap();
    let expected = outputs(&gm, std::slice::from_ref(&x));
    let pass = Simplify {
        node_limit: 120,
        ..Simplify::default()
    };
    let report = pass.run_with_report(&mut gm).unwrap();
    gm.graph.verify().unwrap();
    assert!(
        matches!(report.regions[0].stop, Stop::NodeLimit(_)),
        "{report}"
    );
    snapshots().bind(|| insta::assert_snapshot!("simplify_node_limit_explain", report.to_string()));
    assert_same(&outputs(&gm, &[x]), &expected, "node limit");
}

#[test]
fn simplify_stops_at_the_time_limit_and_says_so() {
    let mut gm = long_chain(20);
    let x = Tensor::randn(&[4, 4], DType::F32).unwrap();
    let expected = outputs(&gm, std::slice::from_ref(&x));
    let pass = Simplify {
        time_limit: Duration::ZERO,
        ..Simplify::default()
    };
    let report = pass.run_with_report(&mut gm).unwrap();
    gm.graph.verify().unwrap();
    assert_eq!(report.regions[0].stop, Stop::TimeLimit, "{report}");
    assert!(report.to_string().contains("stopped: time limit"));
    assert_same(&outputs(&gm, &[x]), &expected, "time limit");
}

#[test]
fn simplify_is_registered_and_verified_by_the_manager() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3]));
    let a = call(&mut g, unary(UnaryOp::Relu), &[&x]);
    let b = call(&mut g, unary(UnaryOp::Relu), &[&a]);
    g.output(&[&b]).unwrap();
    let mut gm = module_of(g);
    let (changed, _) = run_pass(by_name("simplify").unwrap(), &mut gm);
    assert_eq!(changed, Changed::Yes);
    let (changed, _) = run_pass(by_name("simplify").unwrap(), &mut gm);
    assert_eq!(changed, Changed::No, "a second run finds nothing");
}

#[test]
fn simplify_keeps_the_results_of_a_traced_small_cnn() {
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let mut traced = trace(&cnn, f32s(&[2, 3, 16, 16]), LeafPolicy::default()).unwrap();
    inline(&mut traced, &cnn, |_| true).unwrap();
    let mut gm = GraphModule::new(Arc::new(cnn), traced);
    let x = Tensor::randn(&[2, 3, 16, 16], DType::F32).unwrap();
    let expected = outputs(&gm, std::slice::from_ref(&x));
    let (_, report) = simplify(&mut gm);
    snapshots().bind(|| insta::assert_snapshot!("simplify_small_cnn_explain", report.to_string()));
    assert_same(&outputs(&gm, &[x]), &expected, "small cnn");
}

/// One step of a random chain.
#[derive(Debug, Clone)]
enum Step {
    Relu,
    Neg,
    Abs,
    MulScalar(f64),
    AddScalar(f64),
    SubScalar(f64),
    Transpose,
    Reshape(usize),
    AddEarlier(usize),
}

/// The shapes of 12 elements the chains move between.
const SHAPES: [&[usize]; 4] = [&[3, 4], &[4, 3], &[12], &[2, 6]];

fn step() -> impl Strategy<Value = Step> {
    let value = prop::sample::select(vec![-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0]);
    prop_oneof![
        Just(Step::Relu),
        Just(Step::Neg),
        Just(Step::Abs),
        value.clone().prop_map(Step::MulScalar),
        value.clone().prop_map(Step::AddScalar),
        value.prop_map(Step::SubScalar),
        Just(Step::Transpose),
        (0..SHAPES.len()).prop_map(Step::Reshape),
        (0usize..8).prop_map(Step::AddEarlier),
    ]
}

/// The chain as a graph on a [3, 4] input; it returns the last value and one earlier value.
fn chain_graph(steps: &[Step], extra_output: usize) -> Graph {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[3, 4]));
    let mut values = vec![x];
    for s in steps {
        let v = *values.last().unwrap();
        let shape = g.node(&v).unwrap().meta[0].shape.clone();
        let op = match s {
            Step::Relu => unary(UnaryOp::Relu),
            Step::Neg => unary(UnaryOp::Neg),
            Step::Abs => unary(UnaryOp::Abs),
            Step::MulScalar(c) => scalar(BinaryOp::Mul, *c),
            Step::AddScalar(c) => scalar(BinaryOp::Add, *c),
            Step::SubScalar(c) => scalar(BinaryOp::Sub, *c),
            Step::Transpose if shape.len() == 2 => permute(&[1, 0]),
            Step::Transpose => continue,
            Step::Reshape(i) => reshape(SHAPES[*i]),
            Step::AddEarlier(i) => {
                let earlier = values[i % values.len()];
                if g.node(&earlier).unwrap().meta[0].shape != shape {
                    continue;
                }
                let sum = call(&mut g, Op::Binary(BinaryOp::Add), &[&v, &earlier]);
                values.push(sum);
                continue;
            }
        };
        let next = call(&mut g, op, &[&v]);
        values.push(next);
    }
    let last = *values.last().unwrap();
    let extra = values[extra_output % values.len()];
    g.output(&[&last, &extra]).unwrap();
    g
}

/// The number of call_function nodes that launch a kernel (everything but views).
fn kernels(g: &Graph) -> usize {
    g.nodes()
        .filter(|id| match &g.node(id).unwrap().kind {
            NodeKind::CallFunction { op: Op::View(v) } => matches!(v, ViewOp::Contiguous),
            NodeKind::CallFunction { .. } => true,
            _ => false,
        })
        .count()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn simplify_keeps_results_of_random_elementwise_and_layout_chains(
        steps in prop::collection::vec(step(), 1..12),
        extra in 0usize..12,
    ) {
        let mut gm = module_of(chain_graph(&steps, extra));
        let x = Tensor::randn(&[3, 4], DType::F32).unwrap();
        let expected = outputs(&gm, std::slice::from_ref(&x));
        let before = gm.graph.to_string();
        let kernels_before = kernels(&gm.graph);
        let report = Simplify::default().run_with_report(&mut gm).unwrap();
        gm.graph.verify().unwrap();
        // Views are nearly free, so simplify may add one to save a kernel, never a kernel.
        prop_assert!(
            kernels(&gm.graph) <= kernels_before,
            "{report}\n{before}\n{}",
            gm.graph
        );
        assert_same(&outputs(&gm, &[x]), &expected, "random chain");
    }
}
