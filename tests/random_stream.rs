//! Folding batch norm and pruning channels copy weights into new layers without drawing a
//! default initialisation first, so they leave the global random stream where it was (as
//! PyTorch's `fuse` and pruning do). In a test binary of its own: it reseeds the global
//! generator, which parallel tests drawing from it would disturb.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::ModuleExt;
use tessera::nn::models::SmallCnn;
use tessera::passes::{FoldBatchNorm, Pass, StructuredPrune};
use tessera::tensor::{DType, Tensor, TensorMeta, manual_seed};

#[test]
fn folding_and_pruning_leave_the_global_random_stream_alone() {
    let model = Arc::new(SmallCnn::new().unwrap());
    model.eval();
    let graph = trace(
        &*model,
        TensorMeta::new([2, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    let mut gm = GraphModule::new(model, graph);

    manual_seed(11);
    let expected = Tensor::randn(&[16], DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    manual_seed(11);
    assert!(FoldBatchNorm.run(&mut gm).unwrap().is_changed());
    let report = StructuredPrune::new(0.5).run_with_report(&mut gm).unwrap();
    assert!(
        report.after.parameters < report.before.parameters,
        "{report:?}"
    );
    let drawn = Tensor::randn(&[16], DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(drawn, expected);
}
