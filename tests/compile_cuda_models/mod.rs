//! The PyTorch conformance models compiled for a CUDA device against the same models run
//! eagerly on the CPU: each model (the list of `runtime/cuda/tests/conformance_models`) built,
//! loaded from its case's `state_dict.pt`, put in eval mode (compiling is for inference),
//! traced, compiled for the device and run twice on the case's input moved there; both calls
//! must give the CPU's output (and PyTorch's recorded one, for the cases recorded in eval
//! mode), and the second call must replay the CUDA graphs the first one captured.

#[path = "../../runtime/cuda/tests/conformance_models/mod.rs"]
mod conformance_models;

pub use conformance_models::{ModelCase, every_model};
use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::{Layer, ModuleExt, load_pt_state_dict};
use tessera::tensor::{DType, Device, Tensor};
use tessera::{CompileOptions, CompileReport, compile};
use tessera_testkit::{Case, assert_close, conformance_dir};

/// What compiling one model for the device gave.
pub struct Compiled {
    pub case: &'static str,
    pub report: CompileReport,
}

/// The case's input as the model takes it: floats as f32, ids as they are.
fn input(case: &Case) -> Tensor {
    let x = case.io("input");
    if x.dtype().is_float() {
        x.to_dtype(DType::F32).unwrap()
    } else {
        x
    }
}

/// Compiles `m` for `device`, runs it twice and compares with the CPU within `rtol`/`atol`
/// (at least the case's own); panics on a mismatch or any error.
pub fn check_compiled(m: &ModelCase, device: Device, rtol: f64, atol: f64) -> Compiled {
    let case = Case::load(m.case);
    let (rtol, atol) = (case.rtol.max(rtol), case.atol.max(atol));
    let model: Arc<Box<dyn Layer>> = Arc::new((m.build)());
    let path = conformance_dir().join(m.case).join("state_dict.pt");
    if path.exists() {
        model
            .load_state_dict(&load_pt_state_dict(path).unwrap(), true, false)
            .unwrap();
    }
    model.train(false);
    let x = input(&case);
    let want = model.forward(x.clone()).unwrap();
    if !m.training {
        case.check("output", &want);
    }
    // Traced through every module (no leaf calls): inlining the leaf calls of a boxed root
    // (`Box<dyn Layer>` holding a `Sequential`) looks its children up under the wrong path.
    let traced = trace(&*model, &x, LeafPolicy::none())
        .unwrap_or_else(|e| panic!("{}: tracing: {e}", m.case));
    let gm = GraphModule::new(model.clone(), traced);
    let on_device = x.to_device(device).unwrap();
    let options = CompileOptions {
        device,
        ..CompileOptions::default()
    };
    let compiled = compile(&gm, std::slice::from_ref(&on_device), options)
        .unwrap_or_else(|e| panic!("{}: compiling for {device}: {e}", m.case));
    let report = compiled.report();
    for call in 1..=2u64 {
        let got = compiled
            .run(std::slice::from_ref(&on_device))
            .unwrap_or_else(|e| panic!("{}: call {call} on {device}: {e}", m.case));
        assert_eq!(got[0].device(), device, "{}", m.case);
        let got = got[0].to_device(Device::Cpu).unwrap();
        assert_close(
            &got,
            &want,
            rtol,
            atol,
            &format!("{} compiled on {device}, call {call}", m.case),
        );
        if !m.training {
            case.check("output", &got);
        }
    }
    let stats = compiled.cuda_stats();
    assert_eq!(stats.calls, 2, "{}", m.case);
    assert_eq!(
        stats.graph_launches,
        2 * stats.graphs_captured,
        "{}: every graph captured on the first call is replayed on the second\n{report}",
        m.case
    );
    assert_eq!(
        stats.host_steps,
        2 * report.host_steps.len() as u64,
        "{}",
        m.case
    );
    Compiled {
        case: m.case,
        report,
    }
}
