//! The interpreter runs traced graphs on real tensors: the conformance CNN reproduces
//! PyTorch's outputs and gradients at module level and at op level, and errors name the
//! node being executed.

use crate::common;

use common::{Case, small_cnn};
use tessera_fx::interpreter::{GraphInterpreter, run};
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::models::SmallCnn;
use tessera_nn::{Call, ModuleExt, load_safetensors};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Tensor};

fn loaded_cnn(case: &str) -> SmallCnn {
    let cnn = SmallCnn::new().unwrap();
    let sd = load_safetensors(
        common::conformance_dir()
            .join(case)
            .join("weights.safetensors"),
    )
    .unwrap();
    cnn.load_state_dict(&sd, true, false).unwrap();
    cnn
}

fn check_case(policy: LeafPolicy) {
    let case = Case::load("d_cnn_eval");
    let cnn = loaded_cnn("d_cnn_eval");
    cnn.eval();
    let input = case.io("input");
    let traced = trace(&cnn, input.meta(), policy).unwrap();
    let x = input.requires_grad_(true).unwrap();
    let out = traced
        .interpret(&cnn, std::slice::from_ref(&x))
        .unwrap()
        .remove(0);
    case.check("output", &out);
    let eager = cnn.call(x.detach()).unwrap();
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        eager.to_vec::<f32>().unwrap(),
        "interpreter equals eager exactly"
    );
    let loss =
        F::cross_entropy(&out, &case.io("target"), F::CrossEntropyOptions::default()).unwrap();
    loss.backward().unwrap();
    case.check("grad/input", &x.grad().unwrap());
    for (key, p) in cnn.named_parameters() {
        case.check(&format!("grad/{key}"), &p.grad().unwrap());
    }
}

#[test]
fn module_level_graph_reproduces_pytorch_outputs_and_gradients() {
    check_case(LeafPolicy::default());
}

#[test]
fn op_level_graph_reproduces_pytorch_outputs_and_gradients() {
    check_case(LeafPolicy::none());
}

#[test]
fn errors_name_the_node_being_executed() {
    let cnn = small_cnn();
    let traced = trace(
        &cnn,
        tessera_tensor::TensorMeta::new([1, 3, 16, 16], DType::F32),
        LeafPolicy::default(),
    )
    .unwrap();
    let mut interpreter = GraphInterpreter {
        root: &cnn,
        constants: None,
    };
    let wrong = Tensor::zeros(&[1, 4, 16, 16], DType::F32).unwrap();
    let err = run(&mut interpreter, &traced.graph, &[wrong])
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("while executing %conv1 = call_module[conv1](%x)"),
        "{err}"
    );
    assert!(run(&mut interpreter, &traced.graph, &[]).is_err());
}
