//! The profiler: eager module calls nest with self time inside total time, graph runs record
//! one event per executed op with its FLOPs, and the Chrome trace parses back.

use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::models::ResNet18;
use tessera::nn::{Call, ModuleExt};
use tessera::profiler::{EventKind, Profiler};
use tessera::{DType, Tensor, no_grad};

#[test]
fn eager_module_calls_nest_by_path() {
    let net = ResNet18::new(10).unwrap();
    net.eval();
    let x = Tensor::randn(&[1, 3, 32, 32], DType::F32).unwrap();
    let _guard = no_grad();
    let profiler = Profiler::new();
    profiler.profile_module(|| net.call(x.clone())).unwrap();
    let events = profiler.events();
    let top = events.iter().find(|e| e.depth == 0).unwrap();
    assert_eq!((top.path.as_str(), top.name.as_str()), ("ResNet", "ResNet"));
    let conv = events.iter().find(|e| e.path == "layer1.0.conv1").unwrap();
    assert_eq!(
        (conv.name.as_str(), conv.kind),
        ("Conv2d", EventKind::Module)
    );
    // ResNet > layer1 > layer1.0 > conv1.
    assert_eq!(conv.depth, 3, "{conv:?}");
    // Every inner call lies inside the outermost one.
    for e in &events {
        assert!(e.start >= top.start && e.start + e.duration <= top.start + top.duration);
    }
    // 64 output channels of 3x3x64 multiply-adds at 8x8 positions.
    assert_eq!(conv.flops, 2 * 64 * 8 * 8 * 64 * 9);
    let table = profiler.table();
    assert!(table.contains("layer1.0.conv1 (Conv2d)"), "{table}");
    // The hooks are gone afterwards: a plain call records nothing more.
    let before = profiler.events().len();
    net.call(x).unwrap();
    assert_eq!(profiler.events().len(), before);
}

#[test]
fn graph_runs_record_each_op_with_its_module_and_flops() {
    let net = ResNet18::new(10).unwrap();
    net.eval();
    let x = Tensor::randn(&[1, 3, 32, 32], DType::F32).unwrap();
    let traced = trace(&net, x.meta(), LeafPolicy::none()).unwrap();
    let profiler = Profiler::new();
    let out = profiler
        .profile_graph(&traced, &net, std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        traced.interpret(&net, &[x]).unwrap()[0]
            .to_vec::<f32>()
            .unwrap()
    );
    let events = profiler.events();
    let convs: Vec<_> = events.iter().filter(|e| e.name == "conv2d").collect();
    assert_eq!(convs.len(), 20);
    assert!(convs.iter().all(|e| e.flops > 0 && e.bytes > 0));
    assert!(
        convs.iter().any(|e| e.path.ends_with("(layer1.0.conv1)")),
        "{convs:?}"
    );
    let trace_json: serde_json::Value = serde_json::from_str(&profiler.chrome_trace()).unwrap();
    let trace_events = trace_json["traceEvents"].as_array().unwrap();
    assert_eq!(trace_events.len(), events.len());
    assert!(
        trace_events
            .iter()
            .all(|e| e["ph"] == "X" && e["dur"].as_f64().unwrap() >= 0.0)
    );
}

#[test]
fn compiled_runs_record_each_kernel_and_each_eager_step() {
    let net = std::sync::Arc::new(ResNet18::new(10).unwrap());
    net.eval();
    let x = Tensor::randn(&[1, 3, 32, 32], DType::F32).unwrap();
    let traced = trace(&*net, x.meta(), LeafPolicy::default()).unwrap();
    let gm = tessera::fx::GraphModule::new(net.clone(), traced);
    let compiled = tessera::compile(
        &gm,
        std::slice::from_ref(&x),
        tessera::CompileOptions::default(),
    )
    .unwrap();
    let profiler = Profiler::new();
    let out = profiler
        .profile_compiled(&compiled, std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        compiled.run(&[x]).unwrap()[0].to_vec::<f32>().unwrap()
    );
    let events = profiler.events();
    let kernels = events.iter().filter(|e| e.name.starts_with('k')).count();
    assert_eq!(kernels, compiled.report().kernels, "{events:?}");
    // The convolutions run their eager kernels, each an event with its module and FLOPs.
    let convs: Vec<_> = events.iter().filter(|e| e.name == "conv2d").collect();
    assert_eq!(convs.len(), 20);
    assert!(convs.iter().all(|e| e.flops > 0 && e.bytes > 0));
    assert!(profiler.table().contains("conv2d"));
    let trace_json: serde_json::Value = serde_json::from_str(&profiler.chrome_trace()).unwrap();
    assert_eq!(
        trace_json["traceEvents"].as_array().unwrap().len(),
        events.len()
    );
}
