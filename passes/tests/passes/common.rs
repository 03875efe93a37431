//! Fixtures shared by the pass tests: snapshot settings, wrapping graphs as modules, running
//! a pass with its before/after text, and comparing interpreter results.
#![allow(dead_code)]

use tessera_fx::{Graph, GraphModule};
use tessera_nn::Forward;
use tessera_passes::{Changed, Pass, PassManager};
use tessera_tensor::{DType, Tensor};
use tessera_testkit::assert_close;
pub use tessera_testkit::{Case, conformance_dir};

#[allow(unused_imports)]
pub use tessera_testkit::{f32s, snapshots};

/// A hand-built graph as a module; its root has no state, so it may only read constants.
pub fn module_of(graph: Graph) -> GraphModule {
    GraphModule::from_graph(graph)
}

/// The graph's outputs for `inputs`.
pub fn outputs(gm: &GraphModule, inputs: &[Tensor]) -> Vec<Tensor> {
    gm.forward(inputs.to_vec()).unwrap()
}

/// Runs `pass` alone (verified by the manager) and returns whether it changed the graph and
/// the printed graph before and after.
pub fn run_pass(pass: Box<dyn Pass>, gm: &mut GraphModule) -> (Changed, String) {
    let before = gm.graph.to_string();
    let mut pm = PassManager::new();
    pm.verify = true;
    pm.add(pass);
    let report = pm.run(gm).unwrap();
    let after = gm.graph.to_string();
    (
        report.timings[0].changed,
        format!("before:\n{before}\nafter:\n{after}"),
    )
}

/// Asserts that the interpreter gives the same outputs as `expected` (within f32 rounding).
pub fn assert_same(actual: &[Tensor], expected: &[Tensor], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: output count");
    for (a, e) in actual.iter().zip(expected) {
        assert_close(a, e, 1e-5, 1e-6, what);
    }
}

/// A random f32 tensor (standard normal, from `seed`).
pub fn random(shape: &[usize], seed: u64) -> Tensor {
    tessera_testkit::leaf(shape, seed)
        .detach()
        .to_dtype(DType::F32)
        .unwrap()
}
