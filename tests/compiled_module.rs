//! A compiled module is a module: it has the source module's state under the same keys,
//! loading a state dict into it (or changing the source's weights) changes what it runs
//! without compiling again, an unchanged state is never prepared again, and hooks are refused
//! with an error naming the module.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::models::SmallCnn;
use tessera::nn::{Call, ModuleExt, load_pt_state_dict};
use tessera::tensor::{DType, Tensor};
use tessera::{CompileError, CompileOptions, CompiledModule, compile};
use tessera_testkit::{Case, assert_close, conformance_dir};

/// A SmallCnn in eval mode with its own random weights, its graph module and the
/// conformance input.
fn random_cnn() -> (Arc<SmallCnn>, GraphModule, Tensor) {
    let model = Arc::new(SmallCnn::new().unwrap());
    model.train(false);
    let x = Case::load("d_cnn_eval")
        .io("input")
        .to_dtype(DType::F32)
        .unwrap();
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, &x, LeafPolicy::default()).unwrap(),
    );
    (model, gm, x)
}

/// `compiled` and the eager `model` give the same output for `x`.
fn runs_like_eager(compiled: &CompiledModule, model: &SmallCnn, x: &Tensor, what: &str) {
    let (got, eager) = (compiled.call(x.clone()), model.call(x.clone()));
    assert_close(&got.unwrap(), &eager.unwrap(), 1e-5, 1e-5, what);
}

fn compiled(gm: &GraphModule, x: &Tensor) -> CompiledModule {
    compile(gm, std::slice::from_ref(x), CompileOptions::default()).unwrap()
}

fn pytorch_state_dict() -> tessera::nn::StateDict {
    load_pt_state_dict(conformance_dir().join("d_cnn_eval").join("state_dict.pt")).unwrap()
}

#[test]
fn compiled_module_has_the_source_modules_state_dict_keys() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let keys = |sd: tessera::nn::StateDict| sd.entries.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        keys(compiled.state_dict().unwrap()),
        keys(model.state_dict().unwrap())
    );
    assert_eq!(
        compiled.named_parameters().len(),
        model.named_parameters().len()
    );
}

#[test]
fn loading_a_state_dict_into_the_compiled_module_updates_what_it_runs() {
    let (_, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let before = compiled.call(x.clone()).unwrap();
    compiled
        .load_state_dict(&pytorch_state_dict(), true, false)
        .unwrap();
    let after = compiled.call(x.clone()).unwrap();
    // PyTorch's output for these weights: the batch norms folded into the convolutions were
    // folded again from the loaded statistics.
    Case::load("d_cnn_eval").check("output", &after);
    assert_ne!(before.to_vec_f64().unwrap(), after.to_vec_f64().unwrap());
    // The graph was prepared again (batch norms folded from the new statistics), but it
    // prints the same, so the code compiled for it is reused: it reads the weights as it runs.
    assert_eq!(compiled.report().compiles, 1, "{}", compiled.report());
}

#[test]
fn weights_changed_through_the_source_module_are_seen_by_the_compiled_module() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    model
        .load_state_dict(&pytorch_state_dict(), true, false)
        .unwrap();
    runs_like_eager(&compiled, &model, &x, "after the source's weights changed");
}

#[test]
fn unchanged_state_runs_without_compiling_again() {
    let (_, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    for _ in 0..3 {
        compiled.call(x.clone()).unwrap();
    }
    let _ = compiled.state_dict().unwrap();
    compiled.call(x.clone()).unwrap();
    assert_eq!(compiled.report().compiles, 1);
}

#[test]
fn hook_on_the_compiled_module_is_refused_until_removed() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let handle = compiled.register_forward_hook(|_, _, _| Ok(None));
    let error = compiled.call(x.clone()).unwrap_err().to_string();
    assert!(
        error.contains("CompiledModule has 1 forward or backward hook(s)"),
        "{error}"
    );
    handle.remove();
    runs_like_eager(&compiled, &model, &x, "vs eager once the hook is gone");
}

#[test]
fn compiling_a_module_whose_submodule_has_a_hook_is_refused_naming_it() {
    let (model, gm, x) = random_cnn();
    let _handle = model.conv2.register_forward_pre_hook(|_, _| Ok(None));
    let error = compile(&gm, std::slice::from_ref(&x), CompileOptions::default())
        .err()
        .expect("compiling with a hook must fail");
    assert!(
        matches!(&error, CompileError::Hooks { module, hooks: 1 } if module == "conv2 (Conv2d)"),
        "{error}"
    );
}

#[test]
fn weights_given_new_storage_by_set_data_are_seen_by_the_compiled_module() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let weight = &model.fc.weight;
    // Each replacement is fresh storage at version 0, as the one before: only the storage's
    // identity tells them apart.
    for value in [0.5, -0.25] {
        let fresh = Tensor::ones(&weight.shape(), DType::F32)
            .unwrap()
            .mul_scalar(value)
            .unwrap();
        weight.set_data(&fresh);
        runs_like_eager(&compiled, &model, &x, "after set_data");
    }
    // Each new weight is read by the code compiled first (the cache is keyed by the graph).
    assert_eq!(compiled.report().compiles, 1);
}

#[test]
fn two_assigning_loads_in_a_row_are_both_seen() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let other = SmallCnn::new().unwrap();
    for state in [pytorch_state_dict(), other.state_dict().unwrap()] {
        compiled.load_state_dict(&state, true, true).unwrap();
        runs_like_eager(&compiled, &model, &x, "after an assigning load");
    }
}

#[test]
fn hook_added_to_a_submodule_after_compiling_is_refused() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let handle = model.bn1.register_forward_hook(|_, _, _| Ok(None));
    let error = compiled.call(x.clone()).unwrap_err().to_string();
    assert!(error.contains("bn1 (BatchNorm2d) has 1 forward"), "{error}");
    handle.remove();
    compiled.call(x.clone()).unwrap();
}

#[test]
fn run_into_writes_what_run_returns_into_the_callers_tensor() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let eager = model.call(x.clone()).unwrap();
    let out = Tensor::zeros(&eager.shape(), DType::F32).unwrap();
    compiled
        .run_into(std::slice::from_ref(&x), std::slice::from_ref(&out))
        .unwrap();
    assert_close(&out, &eager, 1e-5, 1e-5, "run_into");
    // A second call into the same tensor overwrites it with the same values.
    compiled
        .run_into(std::slice::from_ref(&x), std::slice::from_ref(&out))
        .unwrap();
    assert_close(&out, &eager, 1e-5, 1e-5, "run_into again");
}

#[test]
fn run_into_an_output_of_another_shape_names_the_output_and_both_shapes() {
    let (model, gm, x) = random_cnn();
    let compiled = compiled(&gm, &x);
    let shape = model.call(x.clone()).unwrap().shape();
    let mut wrong = shape.clone();
    wrong[1] += 1;
    let out = Tensor::zeros(&wrong, DType::F32).unwrap();
    let e = compiled
        .run_into(std::slice::from_ref(&x), std::slice::from_ref(&out))
        .unwrap_err();
    let text = e.to_string();
    assert!(
        text.contains("output 0")
            && text.contains(&format!("{wrong:?}"))
            && text.contains(&format!("{shape:?}")),
        "{text}"
    );
    let e = compiled
        .run_into(std::slice::from_ref(&x), std::slice::from_ref(&x))
        .unwrap_err();
    assert!(e.to_string().contains("output 0"), "{e}");
}

#[test]
fn two_threads_calling_one_compiled_module_get_their_own_results() {
    let (model, gm, x) = random_cnn();
    let compiled = Arc::new(compiled(&gm, &x));
    let inputs: Vec<Tensor> = (0..2)
        .map(|i| x.mul_scalar(1.0 + i as f64).unwrap())
        .collect();
    let wanted: Vec<Tensor> = inputs
        .iter()
        .map(|x| model.call(x.clone()).unwrap())
        .collect();
    std::thread::scope(|scope| {
        for (x, want) in inputs.iter().zip(&wanted) {
            let compiled = compiled.clone();
            scope.spawn(move || {
                let out = Tensor::zeros(&want.shape(), DType::F32).unwrap();
                for _ in 0..20 {
                    assert_close(&compiled.call(x.clone()).unwrap(), want, 1e-5, 1e-5, "call");
                    compiled
                        .run_into(std::slice::from_ref(x), std::slice::from_ref(&out))
                        .unwrap();
                    assert_close(&out, want, 1e-5, 1e-5, "run_into");
                }
            });
        }
    });
}

#[test]
fn kernels_print_the_arena_and_each_buffers_offset() {
    let (_, gm, x) = random_cnn();
    let text = compiled(&gm, &x).kernels();
    let plan = text
        .split("; memory plan\n")
        .nth(1)
        .unwrap_or_else(|| panic!("{text}"));
    assert!(plan.starts_with("arena: "), "{plan}");
    assert!(plan.contains(" at 0.."), "{plan}");
}
