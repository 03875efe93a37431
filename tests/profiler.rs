//! The profiler: eager module calls nest with self time inside total time and come from the
//! profiling thread only, graph runs record one event per executed op with its FLOPs, views
//! allocate nothing while ops allocate their outputs, compiled kernels carry the FLOPs and
//! module of the nodes they fuse, and the Chrome trace parses back.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use tessera::fx::Graph;
use tessera::fx::trace::{LeafPolicy, TracedGraph, trace};
use tessera::nn::hooks::global_hook_counts;
use tessera::nn::layers::{Identity, Linear, ReLU, Tanh};
use tessera::nn::models::{ResNet18, SmallCnn};
use tessera::nn::{Call, ModuleExt, Sequential};
use tessera::profiler::{EventKind, Profiler};
use tessera::{DType, Tensor, no_grad};

/// Eager profiles install process-wide hooks; tests that count them run one at a time.
static GLOBAL_HOOKS: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    GLOBAL_HOOKS.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn eager_module_calls_nest_by_path() {
    let _serial = serial();
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
    assert!(
        convs
            .iter()
            .all(|e| e.flops > 0 && e.allocated_bytes > 0 && e.output_bytes > 0)
    );
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
    let compiled =
        tessera::compile_layer(net.clone(), &x, tessera::CompileOptions::default()).unwrap();
    let profiler = Profiler::new();
    let out = profiler
        .profile_compiled(&compiled, std::slice::from_ref(&x))
        .unwrap();
    assert_eq!(
        out[0].to_vec::<f32>().unwrap(),
        compiled.run(&[x]).unwrap()[0].to_vec::<f32>().unwrap()
    );
    let events = profiler.events();
    let kernels: Vec<_> = events.iter().filter(|e| e.name.starts_with('k')).collect();
    assert_eq!(kernels.len(), compiled.report().kernels, "{events:?}");
    // Each kernel writes its outputs and names the graph nodes it computes; those only
    // kernels read live in the compiled module's arena, so their steps allocate no storage.
    assert!(
        kernels
            .iter()
            .all(|e| e.output_bytes > 0 && e.path.starts_with('%')),
        "{kernels:?}"
    );
    assert!(
        kernels.iter().any(|e| e.allocated_bytes == 0),
        "{kernels:?}"
    );
    // A convolution with an elementwise epilogue (ReLU, residual add) is a generated kernel
    // calling the eager convolution; the others run their eager kernels. Each is an event
    // with its module and FLOPs, 20 in all.
    let fused = events
        .iter()
        .filter(|e| e.name.ends_with("conv2d_epilogue"));
    assert!(fused.clone().all(|e| e.flops > 0), "{events:?}");
    let convs: Vec<_> = events.iter().filter(|e| e.name == "conv2d").collect();
    assert!(!convs.is_empty() && fused.clone().count() > 0, "{events:?}");
    assert_eq!(convs.len() + fused.count(), 20);
    assert!(
        convs
            .iter()
            .all(|e| e.flops > 0 && e.allocated_bytes > 0 && e.output_bytes > 0)
    );
    assert!(profiler.table().contains("conv2d"));
    let trace_json: serde_json::Value = serde_json::from_str(&profiler.chrome_trace()).unwrap();
    assert_eq!(
        trace_json["traceEvents"].as_array().unwrap().len(),
        events.len()
    );
}

#[test]
fn compiled_kernels_carry_the_flops_and_module_of_the_nodes_they_fuse() {
    let mlp = std::sync::Arc::new(
        Sequential::new()
            .add(Linear::new(8, 16).unwrap())
            .add(ReLU::new())
            .add(Linear::new(16, 4).unwrap()),
    );
    let x = Tensor::randn(&[3, 8], DType::F32).unwrap();
    let compiled =
        tessera::compile_layer(mlp.clone(), &x, tessera::CompileOptions::default()).unwrap();
    let profiler = Profiler::new();
    profiler
        .profile_compiled(&compiled, std::slice::from_ref(&x))
        .unwrap();
    let events = profiler.events();
    assert_eq!(events.len(), 2, "{events:?}");
    // The first linear layer and its ReLU are one kernel: 3x16 outputs of 8 multiply-adds,
    // under the module whose weights it reads; then the second layer, 3x4 of 16.
    let (first, second) = (&events[0], &events[1]);
    assert_eq!(first.path, "%linear, %relu (0)", "{first:?}");
    assert_eq!(first.flops, 2 * 3 * 16 * 8);
    assert_eq!(first.allocated_bytes, 3 * 16 * 4);
    assert_eq!(second.path, "%linear_1 (2)", "{second:?}");
    assert_eq!(second.flops, 2 * 3 * 4 * 16);
    let trace_json: serde_json::Value = serde_json::from_str(&profiler.chrome_trace()).unwrap();
    assert_eq!(
        trace_json["traceEvents"][0]["args"]["flops"],
        2 * 3 * 16 * 8
    );
}

const RELU_THEN_RESHAPE: &str = "\
graph(x: f32[4, 8]):
    %relu : f32[4, 8] = call_function[relu](%x)
    %reshape : f32[32] = call_function[reshape]{[32]}(%relu)
    return %reshape
";

#[test]
fn graph_runs_count_allocated_bytes_apart_from_output_bytes() {
    let traced = TracedGraph::from(Graph::parse(RELU_THEN_RESHAPE).unwrap());
    let x = Tensor::randn(&[4, 8], DType::F32).unwrap();
    let profiler = Profiler::new();
    profiler
        .profile_graph(&traced, &Identity::new(), &[x])
        .unwrap();
    let events = profiler.events();
    let event = |name: &str| events.iter().find(|e| e.name == name).unwrap();
    // The relu writes a fresh f32[4, 8]; the reshape is a view of it.
    let (relu, reshape) = (event("relu"), event("reshape"));
    assert_eq!((relu.allocated_bytes, relu.output_bytes), (32 * 4, 32 * 4));
    assert_eq!((reshape.allocated_bytes, reshape.output_bytes), (0, 32 * 4));
    let trace_json: serde_json::Value = serde_json::from_str(&profiler.chrome_trace()).unwrap();
    let args: Vec<_> = trace_json["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["args"]["op"].as_str().unwrap().to_string(),
                e["args"]["allocated_bytes"].as_u64().unwrap(),
                e["args"]["output_bytes"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        args,
        [("relu".into(), 128, 128), ("reshape".into(), 0, 128)]
    );
    assert!(
        profiler.table().contains("Alloc MB"),
        "{}",
        profiler.table()
    );
}

#[test]
fn eager_profiles_give_a_chrome_trace_that_parses_back() {
    let _serial = serial();
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let x = Tensor::randn(&[2, 3, 16, 16], DType::F32).unwrap();
    let _guard = no_grad();
    let profiler = Profiler::new();
    profiler.profile_module(|| cnn.call(x.clone())).unwrap();
    let events = profiler.events();
    let trace_json: serde_json::Value = serde_json::from_str(&profiler.chrome_trace()).unwrap();
    let trace_events = trace_json["traceEvents"].as_array().unwrap();
    assert_eq!(trace_events.len(), events.len());
    let by_path = |path: &str| {
        trace_events
            .iter()
            .find(|e| e["args"]["path"] == path)
            .unwrap_or_else(|| panic!("no event for {path}: {trace_events:?}"))
    };
    let (top, conv1) = (by_path("SmallCNN"), by_path("conv1"));
    assert_eq!(top["name"], "SmallCNN (SmallCNN)");
    assert_eq!(
        (conv1["name"].as_str(), conv1["cat"].as_str()),
        (Some("conv1 (Conv2d)"), Some("module"))
    );
    assert_eq!(conv1["ph"], "X");
    // conv1's bar lies inside the model's.
    let span = |e: &serde_json::Value| {
        let ts = e["ts"].as_f64().unwrap();
        (ts, ts + e["dur"].as_f64().unwrap())
    };
    let (outer, inner) = (span(top), span(conv1));
    assert!(
        outer.0 <= inner.0 && inner.1 <= outer.1,
        "{outer:?} {inner:?}"
    );
    // 16 output channels of 3x3x3 multiply-adds at 2x16x16 positions.
    assert_eq!(
        conv1["args"]["flops"].as_u64(),
        Some(2 * 16 * 27 * 2 * 16 * 16)
    );
    // ReLU writes a fresh tensor; Flatten is a view of the pooled one.
    let (relu, flatten) = (&by_path("relu1")["args"], &by_path("flatten")["args"]);
    assert_eq!(relu["allocated_bytes"], relu["output_bytes"]);
    assert_eq!(relu["output_bytes"].as_u64(), Some(2 * 16 * 16 * 16 * 4));
    assert_eq!(flatten["allocated_bytes"].as_u64(), Some(0));
    assert_eq!(flatten["output_bytes"].as_u64(), Some(2 * 32 * 4));
}

#[test]
fn eager_profiles_record_only_the_profiling_thread() {
    let _serial = serial();
    let cnn = SmallCnn::new().unwrap();
    cnn.eval();
    let x = Tensor::randn(&[1, 3, 16, 16], DType::F32).unwrap();
    let stop = AtomicBool::new(false);
    let calls = AtomicUsize::new(0);
    let profiler = Profiler::new();
    std::thread::scope(|s| {
        s.spawn(|| {
            let tanh = Tanh::new();
            let y = Tensor::randn(&[64], DType::F32).unwrap();
            while !stop.load(Ordering::Relaxed) {
                tanh.call(y.clone()).unwrap();
                calls.fetch_add(1, Ordering::Relaxed);
            }
        });
        while calls.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        profiler.profile_module(|| {
            // Run until the other thread has called its module during the profile.
            let seen = calls.load(Ordering::Relaxed);
            for _ in 0..1000 {
                cnn.call(x.clone()).unwrap();
                if calls.load(Ordering::Relaxed) > seen + 10 {
                    break;
                }
            }
        });
        stop.store(true, Ordering::Relaxed);
    });
    let events = profiler.events();
    assert!(events.iter().all(|e| e.name != "Tanh"), "{events:?}");
    // Every SmallCnn call nests its ten layers at depth 1 under it.
    let tops = events.iter().filter(|e| e.depth == 0).count();
    assert!(tops > 0);
    assert!(
        events.iter().all(|e| e.path == "SmallCNN" || e.depth == 1),
        "{events:?}"
    );
    assert_eq!(events.len(), tops * 11, "{events:?}");
}

#[test]
fn eager_profiles_remove_their_hooks_when_the_run_panics_or_fails() {
    let _serial = serial();
    let cnn = SmallCnn::new().unwrap();
    let good = Tensor::randn(&[1, 3, 16, 16], DType::F32).unwrap();
    let bad = Tensor::randn(&[1, 5, 16, 16], DType::F32).unwrap();
    let before = global_hook_counts();
    let profiler = Profiler::new();
    let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        profiler.profile_module(|| {
            cnn.call(good.clone()).unwrap();
            panic!("the profiled run panics");
        })
    }));
    assert!(panicked.is_err());
    assert_eq!(global_hook_counts(), before);
    // A call that fails inside conv1 leaves no half-open call behind: the next one nests
    // as usual.
    let profiler = Profiler::new();
    let out = profiler.profile_module(|| {
        assert!(cnn.call(bad.clone()).is_err());
        cnn.call(good.clone())
    });
    assert!(out.is_ok());
    assert_eq!(global_hook_counts(), before);
    let events = profiler.events();
    let conv2 = events.iter().find(|e| e.path == "conv2").unwrap();
    assert_eq!(conv2.depth, 1, "{events:?}");
}
