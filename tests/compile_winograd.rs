//! Compiled modules run wide 3x3 stride-1 convolutions as Winograd convolutions on weights
//! transformed once: the report names each convolution's algorithm and why, the output equals
//! eager within the f32 Winograd bound, and a state dict loaded afterwards (new weights) is
//! transformed again before the next call, without compiling again.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{Conv2d, Conv2dOptions, ReLU};
use tessera::nn::{Call, ModuleExt, Sequential};
use tessera::tensor::{DType, Tensor};
use tessera::{CompileOptions, ConvAlgorithm, WinogradPolicy, WinogradTile, compile};
use tessera_testkit::assert_close;

/// `Conv2d(64, 64, 3, padding 1) -> ReLU -> Conv2d(64, 64, 3, padding 1)`, and its graph.
fn wide_convs() -> (Arc<Sequential>, GraphModule, Tensor) {
    tessera::manual_seed(3);
    let conv = || Conv2d::with_options(64, 64, 3, Conv2dOptions::default().padding(1)).unwrap();
    let model = Arc::new(
        Sequential::new()
            .add(conv())
            .add(ReLU::new())
            .add(conv())
            .add(ReLU::new()),
    );
    model.train(false);
    let x = Tensor::randn(&[2, 64, 20, 20], DType::F32).unwrap();
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, &x, LeafPolicy::default()).unwrap(),
    );
    (model, gm, x)
}

#[test]
fn wide_convolutions_run_winograd_and_say_so_in_the_report() {
    let (model, gm, x) = wide_convs();
    let compiled = compile(&gm, std::slice::from_ref(&x), CompileOptions::default()).unwrap();
    let report = compiled.report();
    assert_eq!(report.convolutions.len(), 2, "{report}");
    for c in &report.convolutions {
        assert_eq!(
            c.algorithm,
            ConvAlgorithm::Winograd(WinogradTile::F4x4),
            "{report}"
        );
    }
    assert!(
        report.to_string().contains("winograd F(4x4,3x3)"),
        "{report}"
    );
    assert!(compiled.kernels().contains("by winograd F(4x4,3x3)"));
    let expected = model.call(x.clone()).unwrap();
    let got = compiled.call(x.clone()).unwrap();
    assert_close(&got, &expected, 1e-4, 1e-4, "Winograd against eager");
}

#[test]
fn a_loaded_state_dict_is_transformed_again_without_compiling() {
    let (model, gm, x) = wide_convs();
    let compiled = compile(&gm, std::slice::from_ref(&x), CompileOptions::default()).unwrap();
    let before = compiled.call(x.clone()).unwrap();
    crate::compiled_reload::new_weights_are_run_without_compiling(
        &compiled, &*model, &x, &before, 1e-4,
    );
}

#[test]
fn winograd_off_runs_the_eager_kernels() {
    let (model, gm, x) = wide_convs();
    let options = CompileOptions {
        winograd: WinogradPolicy::Off,
        ..CompileOptions::default()
    };
    let compiled = compile(&gm, std::slice::from_ref(&x), options).unwrap();
    assert!(
        compiled
            .report()
            .convolutions
            .iter()
            .all(|c| c.algorithm == ConvAlgorithm::Gemm)
    );
    let expected = model.call(x.clone()).unwrap();
    assert_close(
        &compiled.call(x.clone()).unwrap(),
        &expected,
        1e-5,
        1e-5,
        "off",
    );
}
