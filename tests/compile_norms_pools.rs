//! `tessera::compile` of normalisation and pooling layers that used to run their eager kernels
//! inside the compiled program: a batch norm with no convolution to fold into, group and
//! instance norm, and padded (ceil-mode) max and average pooling compile to kernels only, with
//! and without the inference passes, and give the graph interpreter's result.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{
    AvgPool2d, AvgPool2dOptions, BatchNorm2d, GroupNorm, InstanceNorm2d, MaxPool2d,
    MaxPool2dOptions, ReLU,
};
use tessera::nn::{Call, ModuleExt};
use tessera::tensor::{DType, Tensor};
use tessera::{Backend, CompileOptions, compile};
use tessera_testkit::assert_close;

#[test]
fn unfolded_norms_and_padded_pools_compile_to_kernels_only() {
    tessera::manual_seed(0);
    let net = Arc::new(
        tessera::nn::Sequential::new()
            .add(BatchNorm2d::new(4).unwrap())
            .add(ReLU::new())
            .add(GroupNorm::new(2, 4).unwrap())
            .add(MaxPool2d::with_options(
                3,
                MaxPool2dOptions {
                    stride: Some(2.into()),
                    padding: 1.into(),
                    ..Default::default()
                },
            ))
            .add(InstanceNorm2d::new(4).unwrap())
            .add(AvgPool2d::with_options(
                3,
                AvgPool2dOptions {
                    stride: Some(2.into()),
                    padding: 1.into(),
                    ceil_mode: true,
                    count_include_pad: false,
                },
            )),
    );
    net.train(false);
    let x = Tensor::randn(&[2, 4, 11, 9], DType::F32).unwrap();
    let gm = GraphModule::new(
        net.clone(),
        trace(&*net, &x, LeafPolicy::default()).unwrap(),
    );
    let expected = gm.call(x.clone()).unwrap();
    for optimize in [true, false] {
        for backend in [Backend::Jit, Backend::Interpreter] {
            let options = CompileOptions {
                optimize,
                backend,
                ..CompileOptions::default()
            };
            let compiled = compile(&gm, std::slice::from_ref(&x), options).unwrap();
            let report = compiled.report();
            assert!(report.fallbacks.is_empty(), "{report}");
            let out = compiled.run(std::slice::from_ref(&x)).unwrap().remove(0);
            assert_close(&out, &expected, 1e-5, 1e-5, "compiled norms and pools");
        }
    }
}
