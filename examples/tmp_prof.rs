use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, TracedGraph, trace};
use tessera::nn::models::{ResNet18, SmallCnn};
use tessera::nn::{Call, ModuleExt, load_pt_state_dict};
use tessera::{DType, Generator, Tensor, no_grad};
use tessera_passes::{ConvertStatic, FoldBatchNorm, InsertObservers, Pass, calibrate};
fn main() {
    tessera::tensor::set_num_threads(2).unwrap();
    let _g = no_grad();
    let g = &mut Generator::new(0);
    let which = std::env::args().nth(1).unwrap_or("cnn".into());
    let (mut gm, x) = if which == "cnn" {
        let m = Arc::new(SmallCnn::new().unwrap());
        m.load_state_dict(&load_pt_state_dict("../shared/conformance/d_cnn_eval/state_dict.pt").unwrap(), true, false).unwrap();
        m.eval();
        let x = Tensor::randn_with(&[64, 3, 32, 32], DType::F32, g).unwrap();
        (GraphModule::new(m.clone(), trace(&*m, x.meta(), LeafPolicy::default()).unwrap()), x)
    } else {
        let m = Arc::new(ResNet18::new(1000).unwrap());
        m.eval();
        let x = Tensor::randn_with(&[8, 3, 224, 224], DType::F32, g).unwrap();
        (GraphModule::new(m.clone(), trace(&*m, x.meta(), LeafPolicy::default()).unwrap()), x)
    };
    FoldBatchNorm.run(&mut gm).unwrap();
    InsertObservers.run(&mut gm).unwrap();
    calibrate(&gm, &[vec![x.clone()]]).unwrap();
    ConvertStatic { per_channel: true }.run(&mut gm).unwrap();
    let traced = TracedGraph::from(gm.graph.clone());
    for _ in 0..5 { gm.call(x.clone()).unwrap(); }
    let p = tessera::profiler::Profiler::new();
    for _ in 0..20 { p.profile_graph(&traced, &gm, &[x.clone()]).unwrap(); }
    println!("{}", p.table());
}
