//! The pass manager: verification after each pass names a broken pass, a failing pass is
//! named, the timing table lists every pass, dumps are recorded on request, and the clean-up
//! pipeline keeps the results of traced models.

use crate::common::{assert_same, f32s, module_of, one_op_graph, outputs, snapshots};
use crate::remove_dropout_identity::drop_net;
use std::sync::Arc;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_fx::{Graph, GraphModule};
use tessera_nn::ModuleExt;
use tessera_nn::models::SmallCnn;
use tessera_passes::{Changed, Pass, PassError, PassManager, pipelines, registry};
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::{DType, Op, Tensor};

/// Gives the node after the first input a wrong shape: its op's meta function disagrees, so
/// the IR no longer verifies.
struct BreakShapes;

impl Pass for BreakShapes {
    fn name(&self) -> &'static str {
        "break_shapes"
    }

    fn run(&self, gm: &mut GraphModule) -> tessera_passes::Result<Changed> {
        let node = gm.graph.nodes().nth(1).expect("a node after the input");
        gm.graph.set_meta(&node, vec![f32s(&[7, 7])])?;
        Ok(Changed::Yes)
    }
}

/// Always fails.
struct Refuse;

impl Pass for Refuse {
    fn name(&self) -> &'static str {
        "refuse"
    }

    fn run(&self, _gm: &mut GraphModule) -> tessera_passes::Result<Changed> {
        Err(PassError::Unsupported("this graph is not for me".into()))
    }
}

fn small_cnn(policy: LeafPolicy) -> GraphModule {
    let cnn = Arc::new(SmallCnn::new().unwrap());
    cnn.eval();
    let traced = trace(&*cnn, f32s(&[2, 3, 16, 16]), policy).unwrap();
    GraphModule::new(cnn, traced)
}

#[test]
fn verify_failure_names_the_pass() {
    let mut gm = module_of(one_op_graph(Op::Unary(UnaryOp::Relu), &[2]));
    let mut pm = PassManager::new();
    pm.verify = true;
    pm.add(Box::new(BreakShapes));
    let err = pm.run(&mut gm).unwrap_err();
    assert!(matches!(&err, PassError::Verify { pass, .. } if pass == "break_shapes"));
    assert!(
        err.to_string().contains("after pass `break_shapes`"),
        "{err}"
    );
}

#[test]
fn pass_failure_names_the_pass() {
    let mut gm = small_cnn(LeafPolicy::default());
    let mut pm = PassManager::new();
    pm.add(Box::new(Refuse));
    let err = pm.run(&mut gm).unwrap_err().to_string();
    assert_eq!(err, "pass `refuse` failed: this graph is not for me");
}

#[test]
fn unknown_pass_name_lists_the_registered_ones() {
    let err = registry::by_name("fuse_everything")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("dead_code_elimination"), "{err}");
}

#[test]
fn timing_report_lists_every_pass() {
    let mut gm = drop_net(false);
    let pm = pipelines::cleanup().unwrap();
    let report = pm.run(&mut gm).unwrap();
    let table = report.to_string();
    for name in pm.pass_names() {
        assert!(table.contains(name), "{name} missing from\n{table}");
    }
    assert_eq!(report.timings.len(), pm.pass_names().len());
    assert!(report.changed());
}

#[test]
fn dump_option_records_before_and_after_each_pass() {
    let mut gm = drop_net(false);
    let mut pm = pipelines::cleanup().unwrap();
    pm.dump(true);
    let report = pm.run(&mut gm).unwrap();
    assert_eq!(report.dumps.len(), pm.pass_names().len());
    let (pass, before, after) = &report.dumps[0];
    assert_eq!(*pass, "remove_dropout_identity");
    assert!(before.contains("Dropout(") && !after.contains("Dropout("));
}

#[test]
fn cleanup_pipeline_keeps_small_cnn_results_at_module_and_op_level() {
    for policy in [LeafPolicy::default(), LeafPolicy::none()] {
        let mut gm = small_cnn(policy);
        let inputs = [Tensor::randn(&[2, 3, 16, 16], DType::F32).unwrap()];
        let expected = outputs(&gm, &inputs);
        pipelines::cleanup().unwrap().run(&mut gm).unwrap();
        assert_same(
            &outputs(&gm, &inputs),
            &expected,
            "small cnn after clean-up",
        );
    }
}

#[test]
fn cleanup_pipeline_keeps_drop_net_results() {
    let mut gm = drop_net(false);
    let inputs = [Tensor::randn(&[4, 8], DType::F32).unwrap()];
    let expected = outputs(&gm, &inputs);
    pipelines::cleanup().unwrap().run(&mut gm).unwrap();
    assert_same(&outputs(&gm, &inputs), &expected, "drop net after clean-up");
}

#[test]
fn registry_names_are_unique() {
    let mut names = registry::names();
    let count = names.len();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), count);
}

#[test]
fn cleanup_pipeline_on_duplicates_dead_code_and_folding() {
    let mut g = Graph::new();
    let x = g.placeholder("x", f32s(&[2, 3]));
    let c = g.get_attr("_tensor_constant0", f32s(&[3])).unwrap();
    let c_exp = g.call_function(Op::Unary(UnaryOp::Exp), &[&c]).unwrap();
    let a = g.call_function(Op::Unary(UnaryOp::Relu), &[&x]).unwrap();
    let b = g.call_function(Op::Unary(UnaryOp::Relu), &[&x]).unwrap();
    let _dead = g.call_function(Op::Unary(UnaryOp::Neg), &[&b]).unwrap();
    let sum = g
        .call_function(Op::Binary(BinaryOp::Add), &[&a, &b])
        .unwrap();
    let out = g
        .call_function(Op::Binary(BinaryOp::Mul), &[&sum, &c_exp])
        .unwrap();
    g.output(&[&out]).unwrap();
    let mut gm = module_of(g);
    gm.constants.insert(
        "_tensor_constant0".into(),
        Tensor::randn(&[3], DType::F32).unwrap(),
    );
    let inputs = [Tensor::randn(&[2, 3], DType::F32).unwrap()];
    let expected = outputs(&gm, &inputs);
    let before = gm.graph.to_string();
    let report = pipelines::cleanup().unwrap().run(&mut gm).unwrap();
    let text = format!("before:\n{before}\nafter:\n{}", gm.graph);
    snapshots().bind(|| insta::assert_snapshot!("cleanup_pipeline_hand_built", text));
    assert_eq!(
        report
            .timings
            .iter()
            .filter(|t| t.changed.is_changed())
            .count(),
        3
    );
    assert_same(&outputs(&gm, &inputs), &expected, "after clean-up");
}
