//! Containers (Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict), run-time
//! registration, hooks and their handles, apply with downcasting, train/eval and dtype moves.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tessera_nn::models::note::MyLinear;
use tessera_nn::{
    Call, Forward, Layer, Module, ModuleCore, ModuleDict, ModuleExt, ModuleList, Parameter,
    ParameterDict, ParameterList, Result, Sequential,
};
use tessera_tensor::{DType, Tensor};

/// The note's MyLinear (`x @ w + b`, `w` of shape `[in, out]`) with standard-normal state.
fn my_linear(i: usize, o: usize) -> MyLinear {
    MyLinear::new(i, o).expect("a small MyLinear")
}

#[derive(Module)]
struct Relu {
    core: ModuleCore,
}

impl Forward for Relu {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        Ok(x.relu()?)
    }
}

fn relu() -> Relu {
    Relu {
        core: ModuleCore::default(),
    }
}

fn names<T>(items: Vec<(String, T)>) -> Vec<String> {
    items.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn sequential_chains_layers_and_names_children_by_index() -> Result<()> {
    let mut seq = Sequential::new().add(my_linear(4, 3)).add(relu());
    seq.append(my_linear(3, 1));
    assert_eq!(seq.len(), 3);
    assert_eq!(
        names(seq.named_parameters()),
        ["0.weight", "0.bias", "2.weight", "2.bias"]
    );
    assert_eq!(
        seq.repr(),
        "Sequential(\n  (0): MyLinear()\n  (1): Relu()\n  (2): MyLinear()\n)"
    );
    let x = Tensor::randn(&[5, 4], DType::F32)?;
    let manual = seq[2].call(seq[1].call(seq[0].call(x.clone())?)?)?;
    assert_eq!(seq.call(x)?.to_vec::<f32>()?, manual.to_vec::<f32>()?);
    assert_eq!(seq.get(-1).map(|l| l.type_name()), Some("MyLinear".into()));
    assert_eq!(seq.iter().count(), 3);
    assert_eq!(Sequential::new().repr(), "Sequential()");
    Ok(())
}

#[test]
fn module_list_folds_repeated_reprs_and_module_dict_keeps_insertion_order() -> Result<()> {
    let list: ModuleList<MyLinear> = (0..3).map(|_| my_linear(4, 4)).collect();
    let mut acts: ModuleDict<Box<dyn Layer>> = ModuleDict::new();
    acts.insert("relu", Box::new(relu()))?;
    acts.insert("id", Box::new(my_linear(4, 4)))?;
    assert_eq!(list.repr(), "ModuleList(\n  (0-2): 3 x MyLinear()\n)");
    assert_eq!(acts.keys().collect::<Vec<_>>(), ["relu", "id"]);
    assert_eq!(
        acts.repr(),
        "ModuleDict(\n  (relu): Relu()\n  (id): MyLinear()\n)"
    );
    let y = acts["relu"].call(Tensor::from_vec(vec![-1.0f32, 2.0], &[2])?)?;
    assert_eq!(y.to_vec::<f32>()?, vec![0.0, 2.0]);
    assert_eq!(ModuleList::<MyLinear>::new().repr(), "ModuleList()");
    Ok(())
}

#[test]
fn parameter_containers_register_under_their_keys_with_pytorch_reprs() -> Result<()> {
    let list: ParameterList = (0..2)
        .map(|_| Parameter::new(Tensor::zeros(&[2], DType::F32).unwrap()))
        .collect();
    let mut dict = ParameterDict::new();
    dict.insert("bar", Parameter::new(Tensor::zeros(&[4], DType::F32)?))?;
    dict.insert("foo", Parameter::new(Tensor::zeros(&[3], DType::F32)?))?;
    assert_eq!(names(list.named_parameters()), ["0", "1"]);
    assert_eq!(names(dict.named_parameters()), ["bar", "foo"]);
    assert_eq!(
        list.repr(),
        "ParameterList(\n    (0): Parameter containing: [torch.float32 of size 2]\n    (1): Parameter containing: [torch.float32 of size 2]\n)"
    );
    assert_eq!(
        dict.repr(),
        "ParameterDict(\n    (bar): Parameter containing: [torch.FloatTensor of size 4]\n    (foo): Parameter containing: [torch.FloatTensor of size 3]\n)"
    );
    Ok(())
}

#[derive(Module)]
struct Dynamic {
    core: ModuleCore,
    fixed: MyLinear,
}

#[test]
fn run_time_registration_follows_fields_and_refuses_taken_names() -> Result<()> {
    let mut m = Dynamic {
        core: ModuleCore::default(),
        fixed: my_linear(2, 2),
    };
    m.register_parameter(
        "scale",
        Some(Parameter::new(Tensor::ones(&[1], DType::F32)?)),
    )?;
    m.register_parameter("unused", None)?;
    m.register_buffer("steps", Some(Tensor::zeros(&[], DType::I64)?), true)?;
    m.register_buffer("cache", Some(Tensor::zeros(&[2], DType::F32)?), false)?;
    m.add_module("extra", my_linear(2, 1))?;
    assert_eq!(
        names(m.named_parameters()),
        [
            "scale",
            "fixed.weight",
            "fixed.bias",
            "extra.weight",
            "extra.bias"
        ]
    );
    assert_eq!(
        m.state_dict()?.keys().collect::<Vec<_>>(),
        [
            "scale",
            "steps",
            "fixed.weight",
            "fixed.bias",
            "extra.weight",
            "extra.bias"
        ]
    );
    let err = m.register_parameter("fixed", None).unwrap_err().to_string();
    assert!(err.contains("attribute 'fixed' already exists"), "{err}");
    assert!(m.add_module("a.b", relu()).is_err());
    Ok(())
}

#[test]
fn shared_submodules_are_yielded_once() -> Result<()> {
    #[derive(Module)]
    struct Twice {
        core: ModuleCore,
        a: Arc<MyLinear>,
        b: Arc<MyLinear>,
    }
    let shared = Arc::new(my_linear(2, 2));
    let m = Twice {
        core: ModuleCore::default(),
        a: shared.clone(),
        b: shared,
    };
    assert_eq!(names(m.named_modules()), ["", "a"]);
    assert_eq!(names(m.named_modules_with("", false)), ["", "a", "b"]);
    assert_eq!(names(m.named_parameters()), ["a.weight", "a.bias"]);
    assert_eq!(
        m.state_dict()?.keys().collect::<Vec<_>>(),
        ["a.weight", "a.bias", "b.weight", "b.bias"],
        "state_dict keeps both names"
    );
    Ok(())
}

#[derive(Module)]
struct Pair {
    core: ModuleCore,
    l0: MyLinear,
    net: Sequential,
}

#[test]
fn paths_lookup_apply_and_modes() -> Result<()> {
    let m = Pair {
        core: ModuleCore::default(),
        l0: my_linear(2, 2),
        net: Sequential::new().add(my_linear(2, 2)).add(relu()),
    };
    assert_eq!(m.get_submodule("net.0")?.type_name(), "MyLinear");
    assert_eq!(
        m.get_submodule("net.5").unwrap_err().to_string(),
        "Sequential has no attribute `5`"
    );
    assert_eq!(m.get_parameter("net.0.bias")?.shape(), vec![2]);
    assert!(
        m.get_parameter("l0.nothing")
            .unwrap_err()
            .to_string()
            .contains("MyLinear has no attribute `nothing`")
    );
    let mut visited = Vec::new();
    m.apply(&mut |module| {
        if let Some(linear) = module.as_any().downcast_ref::<MyLinear>() {
            linear.weight.fill_(0.5).map(drop).unwrap_or_default();
        }
        visited.push(module.type_name());
    });
    // `fill_` on a leaf that requires grad is refused outside no_grad; apply still visits.
    assert_eq!(
        visited,
        ["MyLinear", "MyLinear", "Relu", "Sequential", "Pair"]
    );
    m.eval();
    assert!(m.modules().iter().all(|x| !x.is_training()));
    m.net.train(true);
    assert!(!m.is_training() && m.net.is_training() && m.net[0].is_training());
    m.double()?;
    assert!(m.parameters().iter().all(|p| p.dtype() == DType::F64));
    let before = m.l0.weight.clone();
    m.float()?;
    assert_eq!(
        before.dtype(),
        DType::F32,
        "handles stay valid across dtype moves"
    );
    assert!(m.cuda().is_err(), "no CUDA driver here: a typed error");
    Ok(())
}

#[test]
fn forward_hooks_replace_inputs_and_outputs_and_remove() -> Result<()> {
    let m = my_linear(3, 3);
    let x = Tensor::randn(&[2, 3], DType::F32)?;
    let plain = m.call(x.clone())?.to_vec::<f32>()?;
    let pre = m.register_forward_pre_hook(|_, inputs| Ok(Some(vec![inputs[0].add_scalar(1.0)?])));
    let post =
        m.register_forward_hook(|_, inputs, outputs| Ok(Some(vec![outputs[0].add(&inputs[0])?])));
    let hooked = m.call(x.clone())?;
    let expected = m.forward(x.add_scalar(1.0)?)?.add(&x.add_scalar(1.0)?)?;
    assert_eq!(hooked.to_vec::<f32>()?, expected.to_vec::<f32>()?);
    pre.remove();
    post.remove();
    assert_eq!(m.call(x)?.to_vec::<f32>()?, plain);
    Ok(())
}

#[test]
fn full_backward_hook_sees_and_replaces_input_gradients_only() -> Result<()> {
    let m = my_linear(3, 2);
    let x = Tensor::randn(&[4, 3], DType::F32)?.requires_grad_(true)?;
    m.call(x.clone())?.sum_all()?.backward()?;
    let weight_grad = m.weight.grad().unwrap().to_vec::<f32>()?;
    m.zero_grad(true)?;
    x.set_grad(None);
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let handle = m.register_full_backward_hook(move |grad_inputs, grad_outputs| {
        counter.fetch_add(1, Ordering::SeqCst);
        assert_eq!(grad_outputs[0].as_ref().unwrap().shape(), vec![4, 2]);
        let g = grad_inputs[0].as_ref().unwrap();
        Ok(Some(vec![Some(Tensor::full_like(g, 42.0)?)]))
    });
    m.call(x.clone())?.sum_all()?.backward()?;
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    assert!(
        x.grad()
            .unwrap()
            .to_vec::<f32>()?
            .iter()
            .all(|&v| v == 42.0)
    );
    assert_eq!(
        m.weight.grad().unwrap().to_vec::<f32>()?,
        weight_grad,
        "parameter gradients are untouched"
    );
    handle.remove();
    x.set_grad(None);
    m.call(x.clone())?.sum_all()?.backward()?;
    assert!(
        x.grad()
            .unwrap()
            .to_vec::<f32>()?
            .iter()
            .all(|&v| v != 42.0)
    );
    Ok(())
}

#[test]
fn global_hooks_run_for_every_module_call() -> Result<()> {
    let seq = Sequential::new().add(relu()).add(relu());
    // Other tests call modules on other threads meanwhile: count only this test's modules.
    let ours: Vec<usize> = seq
        .iter()
        .map(|l| l.as_module() as *const dyn Module as *const () as usize)
        .collect();
    let calls = Arc::new(AtomicUsize::new(0));
    let counter = calls.clone();
    let handle = tessera_nn::hooks::register_module_forward_hook(move |m, _, _| {
        if ours.contains(&(m as *const dyn Module as *const () as usize)) {
            counter.fetch_add(1, Ordering::SeqCst);
        }
        Ok(None)
    });
    seq.call(Tensor::ones(&[2], DType::F32)?)?;
    handle.remove();
    seq.call(Tensor::ones(&[2], DType::F32)?)?;
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    Ok(())
}

#[test]
fn state_dict_hooks_and_load_hooks_run() -> Result<()> {
    let m = my_linear(2, 2);
    let h = m.register_state_dict_post_hook(|_, sd, prefix| {
        let w = sd.get(&format!("{prefix}weight")).cloned().unwrap();
        sd.insert(format!("{prefix}weight_copy"), w);
        Ok(())
    });
    assert_eq!(
        m.state_dict()?.keys().collect::<Vec<_>>(),
        ["weight", "bias", "weight_copy"]
    );
    h.remove();
    let renamed = Arc::new(AtomicUsize::new(0));
    let r = renamed.clone();
    m.register_load_state_dict_pre_hook(move |sd, prefix| {
        if let Some(t) = sd.entries.shift_remove(&format!("{prefix}w")) {
            sd.insert(format!("{prefix}weight"), t);
            r.fetch_add(1, Ordering::SeqCst);
        }
        Ok(())
    });
    let mut old = tessera_nn::StateDict::new();
    old.insert("w", Tensor::ones(&[2, 2], DType::F32)?);
    old.insert("bias", Tensor::zeros(&[2], DType::F32)?);
    let keys = m.load_state_dict(&old, true, false)?;
    assert!(keys.is_empty() && renamed.load(Ordering::SeqCst) == 1);
    assert_eq!(m.weight.to_vec::<f32>()?, vec![1.0; 4]);
    Ok(())
}

/// A module with extra state, as PyTorch's `get_extra_state`/`set_extra_state`.
#[derive(Module)]
#[module(get_extra_state = "extra", set_extra_state = "restore")]
struct Counter {
    core: ModuleCore,
    #[module(skip)]
    count: std::sync::atomic::AtomicI64,
}

impl Counter {
    fn extra(&self) -> tessera_nn::Value {
        tessera_nn::Value::Int(self.count.load(Ordering::SeqCst))
    }

    fn restore(&self, state: &tessera_nn::Value) -> Result<()> {
        let v = state
            .as_i64()
            .ok_or_else(|| tessera_nn::NnError::Invalid("count must be an int".into()))?;
        self.count.store(v, Ordering::SeqCst);
        Ok(())
    }
}

#[test]
fn extra_state_is_saved_under_its_key_and_restored() -> Result<()> {
    let a = Counter {
        core: ModuleCore::default(),
        count: 7.into(),
    };
    let sd = a.state_dict()?;
    assert_eq!(sd.extra.keys().collect::<Vec<_>>(), ["_extra_state"]);
    let b = Counter {
        core: ModuleCore::default(),
        count: 0.into(),
    };
    assert!(b.load_state_dict(&sd, true, false)?.is_empty());
    assert_eq!(b.count.load(Ordering::SeqCst), 7);
    let missing = b.load_state_dict(&tessera_nn::StateDict::new(), false, false)?;
    assert_eq!(missing.missing_keys, ["_extra_state"]);
    Ok(())
}

#[test]
fn backward_pre_hook_replaces_output_gradients() -> Result<()> {
    let m = my_linear(2, 2);
    let x = Tensor::ones(&[1, 2], DType::F32)?.requires_grad_(true)?;
    m.register_full_backward_pre_hook(|grad_outputs| {
        Ok(Some(
            grad_outputs
                .iter()
                .map(|g| g.as_ref().map(|g| g.mul_scalar(0.0).unwrap()))
                .collect(),
        ))
    });
    m.call(x.clone())?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![0.0, 0.0]);
    assert_eq!(
        m.weight.grad().unwrap().to_vec::<f32>()?,
        vec![0.0; 4],
        "the module's own backward sees the replaced gradient"
    );
    Ok(())
}

#[test]
fn load_state_dict_with_assign_takes_the_given_tensors() -> Result<()> {
    let m = my_linear(2, 2);
    let handle = m.weight.clone();
    let mut sd = m.state_dict()?;
    let fresh = Tensor::full(&[2, 2], 3.0, DType::F64)?;
    sd.insert("weight", fresh);
    m.load_state_dict(&sd, true, true)?;
    assert_eq!(
        handle.to_vec::<f32>()?,
        vec![3.0; 4],
        "the parameter handle stays valid and keeps its dtype"
    );
    assert!(handle.requires_grad());
    Ok(())
}

#[test]
fn hook_counts_report_each_kind_registered_and_forget_removed_hooks() -> Result<()> {
    let layer = my_linear(2, 2);
    assert_eq!(layer.hook_counts(), tessera_nn::HookCounts::default());
    let pre = layer.register_forward_pre_hook(|_, _| Ok(None));
    layer.register_forward_hook(|_, _, _| Ok(None));
    layer.register_forward_hook(|_, _, _| Ok(None));
    layer.register_full_backward_hook(|_, _| Ok(None));
    let counts = layer.hook_counts();
    assert_eq!(
        (
            counts.forward_pre,
            counts.forward,
            counts.full_backward,
            counts.total()
        ),
        (1, 2, 1, 4)
    );
    pre.remove();
    assert_eq!(layer.hook_counts().forward_pre, 0);
    Ok(())
}

#[test]
fn hook_ids_list_each_kind_in_run_order_and_forget_removed_hooks() -> Result<()> {
    let layer = my_linear(2, 2);
    let first = layer.register_forward_pre_hook(|_, _| Ok(None));
    let forward = layer.register_forward_hook(|_, _, _| Ok(None));
    let second = layer.register_forward_pre_hook(|_, _| Ok(None));
    let third = layer.register_forward_pre_hook(|_, _| Ok(None));
    let ids = layer.hook_ids();
    assert_eq!(ids.forward_pre, [first.id(), second.id(), third.id()]);
    assert_eq!(ids.forward, [forward.id()]);
    assert!(ids.full_backward.is_empty() && ids.state_dict.is_empty());
    assert_ne!(first.id(), forward.id(), "one id per hook of a module");
    second.remove();
    assert_eq!(layer.hook_ids().forward_pre, [first.id(), third.id()]);
    assert_eq!(
        layer.hook_ids().forward_pre.len(),
        layer.hook_counts().forward_pre
    );
    Ok(())
}
