//! `GraphModule`: the traced module's state under the same keys, hooks, train/eval, and
//! training through the graph with the same gradients as eager.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_fx::GraphModule;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::models::SmallCnn;
use tessera_nn::optim::{Optimizer, SGD, SgdOptions};
use tessera_nn::{Call, Module, ModuleExt};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Tensor, TensorMeta};

fn graph_module(cnn: Arc<SmallCnn>, policy: LeafPolicy) -> GraphModule {
    let traced = trace(&*cnn, TensorMeta::new([4, 3, 16, 16], DType::F32), policy).unwrap();
    GraphModule::new(cnn, traced)
}

#[test]
fn state_dict_keys_and_repr_are_the_traced_modules() {
    let cnn = Arc::new(SmallCnn::new().unwrap());
    let gm = graph_module(cnn.clone(), LeafPolicy::default());
    let keys = |m: &dyn Module| {
        m.state_dict()
            .unwrap()
            .keys()
            .map(String::from)
            .collect::<Vec<_>>()
    };
    assert_eq!(keys(&gm), keys(&*cnn));
    assert!(
        gm.repr()
            .starts_with("GraphModule(\n  (conv1): Conv2d(3, 16"),
        "{}",
        gm.repr()
    );
    gm.eval();
    assert!(
        !cnn.bn1.is_training(),
        "eval reaches the traced module's layers"
    );
}

#[test]
fn training_through_the_graph_gives_eager_gradients_and_updates_the_module() {
    let case = common::Case::load("d_cnn_train");
    for policy in [LeafPolicy::default(), LeafPolicy::none()] {
        let cnn = Arc::new(SmallCnn::new().unwrap());
        let sd = tessera_nn::load_safetensors(
            common::conformance_dir().join("d_cnn_train/weights.safetensors"),
        )
        .unwrap();
        cnn.load_state_dict(&sd, true, false).unwrap();
        let gm = graph_module(cnn.clone(), policy);
        gm.train(true);
        let x = case.io("input").to_dtype(DType::F32).unwrap();
        let out = gm.call(x).unwrap();
        case.check("output", &out);
        let loss =
            F::cross_entropy(&out, &case.io("target"), F::CrossEntropyOptions::default()).unwrap();
        loss.backward().unwrap();
        for (key, p) in gm.named_parameters() {
            case.check(&format!("grad/{key}"), &p.grad().unwrap());
        }
        let before = cnn.fc.weight.to_vec::<f32>().unwrap();
        let params = gm.parameter_tensors();
        SGD::new(
            params,
            SgdOptions {
                lr: 0.1,
                ..Default::default()
            },
        )
        .unwrap()
        .step()
        .unwrap();
        assert_ne!(
            cnn.fc.weight.to_vec::<f32>().unwrap(),
            before,
            "the optimizer updated the traced module's parameters"
        );
    }
}

#[test]
fn hooks_on_the_graph_module_run() {
    let cnn = Arc::new(SmallCnn::new().unwrap());
    let gm = graph_module(cnn, LeafPolicy::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    gm.register_forward_hook(move |_, _, _| {
        counter.fetch_add(1, Ordering::SeqCst);
        Ok(None)
    });
    gm.call(Tensor::zeros(&[4, 3, 16, 16], DType::F32).unwrap())
        .unwrap();
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let many = gm
        .call(vec![Tensor::zeros(&[4, 3, 16, 16], DType::F32).unwrap()])
        .unwrap();
    assert_eq!(many[0].shape(), vec![4, 10]);
}

#[test]
fn a_saved_graph_module_runs_after_loading_without_the_model() {
    let cnn = Arc::new(SmallCnn::new().unwrap());
    cnn.eval();
    let gm = graph_module(cnn.clone(), LeafPolicy::default());
    let dir = tempfile::tempdir().unwrap();
    gm.save(dir.path()).unwrap();
    drop(gm);
    let loaded = tessera_fx::artifact::load(dir.path()).unwrap();
    let x = Tensor::randn(&[4, 3, 16, 16], DType::F32).unwrap();
    let out = tessera_fx::artifact::run_standalone(&loaded, std::slice::from_ref(&x))
        .unwrap()
        .remove(0);
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        cnn.call(x).unwrap().to_vec::<f32>().unwrap()
    );
}
