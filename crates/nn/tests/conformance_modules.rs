//! Every PyTorch conformance case through the public module API: models built from
//! `tessera-nn` modules, weights loaded from both `weights.safetensors` and `state_dict.pt`
//! through `load_state_dict`, outputs, activations (captured by forward hooks), gradients,
//! optimizer trajectories, key orders, reprs and error texts.

use crate::common;

use common::{Case, assert_close};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tessera_nn::layers::{Dropout, Linear, ReLU};
use tessera_nn::optim::{Adam, AdamOptions, AdamW, AdamWOptions, Optimizer, SGD, SgdOptions};
use tessera_nn::{
    Call, Module, ModuleExt, Result, StateDict, load_pt_state_dict, load_safetensors,
};
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Tensor};

use tessera_nn::models::SmallCnn;
use tessera_nn::models::note::{BigNet, DynamicNet, MyLinear, Net, StatefulModule};

// ----- helpers -----

/// Loads the case's weights into `model` from both files, checking both give the same state.
fn load_both(case_name: &str, model: &dyn Module) {
    let dir = common::conformance_dir().join(case_name);
    let from_pt = load_pt_state_dict(dir.join("state_dict.pt")).unwrap();
    let from_safetensors = load_safetensors(dir.join("weights.safetensors")).unwrap();
    for key in from_pt.keys() {
        assert_eq!(
            from_pt.get(key).unwrap().to_vec_f64().unwrap(),
            from_safetensors.get(key).unwrap().to_vec_f64().unwrap(),
            "{key}"
        );
    }
    assert!(
        model
            .load_state_dict(&from_safetensors, true, false)
            .unwrap()
            .is_empty()
    );
    assert!(
        model
            .load_state_dict(&from_pt, true, false)
            .unwrap()
            .is_empty()
    );
}

/// Records each named child's output when it is called.
fn capture_activations(model: &dyn Module) -> Arc<Mutex<HashMap<String, Tensor>>> {
    let captured = Arc::new(Mutex::new(HashMap::new()));
    for (name, child) in model.named_children() {
        let sink = captured.clone();
        child.register_forward_hook(move |_, _, outputs| {
            sink.lock()
                .unwrap()
                .insert(name.clone(), outputs[0].clone());
            Ok(None)
        });
    }
    captured
}

fn strings(value: &serde_json::Value) -> Vec<String> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

fn names<T>(items: Vec<(String, T)>) -> Vec<String> {
    items.into_iter().map(|(n, _)| n).collect()
}

// ----- numeric cases -----

#[test]
fn a_mylinear() -> Result<()> {
    let case = Case::load("a_mylinear");
    let m = MyLinear::new(4, 3).unwrap();
    load_both("a_mylinear", &m);
    let x = case.io("input").requires_grad_(true)?;
    let out = m.call(x.clone())?;
    case.check("output", &out);
    case.check("output_batch", &m.call(case.io("input_batch"))?);
    out.sum_all()?.backward()?;
    case.check("grad/input", &x.grad().unwrap());
    case.check("grad/weight", &m.weight.grad().unwrap());
    case.check("grad/bias", &m.bias.grad().unwrap());
    Ok(())
}

#[test]
fn b_sequential() -> Result<()> {
    let case = Case::load("b_sequential");
    let seq = tessera_nn::Sequential::new()
        .add(Linear::new(4, 3)?)
        .add(ReLU::new())
        .add(Linear::new(3, 1)?);
    load_both("b_sequential", &seq);
    let acts = capture_activations(&seq);
    let x = case.io("input").requires_grad_(true)?;
    let out = seq.call(x.clone())?;
    case.check("output", &out);
    case.check("act/0", &acts.lock().unwrap()["0"]);
    case.check("act/1", &acts.lock().unwrap()["1"]);
    out.sum_all()?.backward()?;
    case.check("grad/input", &x.grad().unwrap());
    for (key, p) in seq.named_parameters() {
        case.check(&format!("grad/{key}"), &p.grad().unwrap());
    }
    Ok(())
}

fn cnn_case(name: &str, training: bool) -> Result<(Case, SmallCnn)> {
    let case = Case::load(name);
    let model = SmallCnn::new()?;
    load_both(name, &model);
    model.train(training);
    let acts = capture_activations(&model);
    let x = case
        .io("input")
        .to_dtype(DType::F32)?
        .requires_grad_(true)?;
    let out = model.call(x.clone())?;
    case.check("output", &out);
    for (module, act) in acts.lock().unwrap().iter() {
        case.check(&format!("act/{module}"), act);
    }
    let loss = F::cross_entropy(&out, &case.io("target"), F::CrossEntropyOptions::default())?;
    case.check("loss", &loss);
    loss.backward()?;
    case.check("grad/input", &x.grad().unwrap());
    for (key, p) in model.named_parameters() {
        case.check(&format!("grad/{key}"), &p.grad().unwrap());
    }
    Ok((case, model))
}

#[test]
fn d_cnn_eval() -> Result<()> {
    let (_, model) = cnn_case("d_cnn_eval", false)?;
    assert_eq!(
        model
            .bn1
            .num_batches_tracked
            .as_ref()
            .unwrap()
            .item::<i64>()?,
        3,
        "eval mode leaves the counter alone"
    );
    Ok(())
}

#[test]
fn d_cnn_train() -> Result<()> {
    let (case, model) = cnn_case("d_cnn_train", true)?;
    for (key, buffer) in model.named_buffers() {
        case.check(&format!("after/{key}"), &buffer);
    }
    Ok(())
}

fn train_net(case_name: &str, make: impl FnOnce(Vec<Tensor>) -> Box<dyn Optimizer>) -> Result<()> {
    let case = Case::load(case_name);
    let net = Net::new().unwrap();
    load_both(case_name, &net);
    let mut opt = make(net.parameter_tensors());
    let inputs = case.io("inputs");
    let losses = case.io("losses").to_vec_f64()?;
    for step in 1..=20 {
        let loss = net.call(inputs.select(0, step - 1)?)?.abs()?.sum_all()?;
        assert!(
            (loss.item::<f64>()? - losses[step - 1]).abs()
                <= case.atol + case.rtol * losses[step - 1].abs(),
            "{case_name} loss {step}"
        );
        opt.zero_grad(true);
        loss.backward()?;
        opt.step()?;
        if [1, 5, 20].contains(&step) {
            for (key, p) in net.named_parameters() {
                case.check(&format!("after_step_{step}/{key}"), &p);
            }
        }
    }
    Ok(())
}

#[test]
fn f_train_sgd() -> Result<()> {
    train_net("f_train_sgd", |params| {
        Box::new(
            SGD::new(
                params,
                SgdOptions {
                    lr: 1e-2,
                    momentum: 0.9,
                    weight_decay: 1e-2,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    })
}

#[test]
fn f_train_adam() -> Result<()> {
    train_net("f_train_adam", |params| {
        Box::new(
            Adam::new(
                params,
                AdamOptions {
                    lr: 1e-3,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    })
}

#[test]
fn f_train_adamw() -> Result<()> {
    train_net("f_train_adamw", |params| {
        Box::new(
            AdamW::new(
                params,
                AdamWOptions {
                    lr: 1e-3,
                    weight_decay: 1e-2,
                    ..Default::default()
                },
            )
            .unwrap(),
        )
    })
}

#[test]
fn g_dropout() -> Result<()> {
    let case = Case::load("g_dropout");
    let dropout = Dropout::new(0.5)?;
    let x = case.io("input");
    dropout.eval();
    assert_eq!(
        dropout.call(x.clone())?.to_vec::<f32>()?,
        case.io("output_eval").to_vec::<f32>()?
    );
    dropout.train(true);
    let y = dropout.call(x.clone())?.to_vec::<f32>()?;
    let xs = x.to_vec::<f32>()?;
    assert!(y.iter().zip(&xs).all(|(&o, &i)| o == 0.0 || o == 2.0 * i));
    assert_eq!(
        dropout.repr(),
        case.json["expectations"]["repr"].as_str().unwrap()
    );
    Ok(())
}

#[test]
fn l_hooks() -> Result<()> {
    let case = Case::load("l_hooks");
    let linear = Linear::new(3, 3)?;
    load_both("l_hooks", &linear);
    let x = case.io("input");
    case.check("output_no_hooks", &linear.call(x.clone())?);
    let pre =
        linear.register_forward_pre_hook(|_, inputs| Ok(Some(vec![inputs[0].add_scalar(1.0)?])));
    case.check("output_pre_hook", &linear.call(x.clone())?);
    let post = linear
        .register_forward_hook(|_, inputs, output| Ok(Some(vec![output[0].add(&inputs[0])?])));
    case.check("output_both_hooks", &linear.call(x.clone())?);
    pre.remove();
    post.remove();
    case.check("output_after_remove", &linear.call(x.clone())?);

    let xg = x.detach().requires_grad_(true)?;
    linear.call(xg.clone())?.sum_all()?.backward()?;
    case.check("input_grad_no_hook", &xg.grad().unwrap());
    linear.zero_grad(true)?;
    let xg = x.detach().requires_grad_(true)?;
    linear.register_full_backward_hook(|grad_inputs, _| {
        Ok(Some(
            grad_inputs
                .iter()
                .map(|g| g.as_ref().map(|g| Tensor::full_like(g, 42.0).unwrap()))
                .collect(),
        ))
    });
    linear.call(xg.clone())?.sum_all()?.backward()?;
    case.check("input_grad_backward_hook", &xg.grad().unwrap());
    case.check(
        "weight_grad_with_backward_hook",
        &linear.weight.grad().unwrap(),
    );
    Ok(())
}

// ----- module API expectations -----

fn check_expectations(name: &str, model: &dyn Module) {
    let case = Case::load("h_module_api");
    let e = &case.json["expectations"][name];
    assert_eq!(model.repr(), e["repr"].as_str().unwrap(), "{name} repr");
    assert_eq!(
        names(model.named_modules()),
        strings(&e["named_modules"]),
        "{name} named_modules"
    );
    assert_eq!(
        names(model.named_children()),
        strings(&e["named_children"]),
        "{name} named_children"
    );
    assert_eq!(
        names(model.named_parameters()),
        strings(&e["named_parameters"]),
        "{name} named_parameters"
    );
    assert_eq!(
        names(model.named_parameters_with(false)),
        strings(&e["named_parameters_recurse_false"]),
        "{name} recurse=false"
    );
    assert_eq!(
        names(model.named_buffers()),
        strings(&e["named_buffers"]),
        "{name} named_buffers"
    );
    let sd = model.state_dict().unwrap();
    assert_eq!(
        sd.keys().map(String::from).collect::<Vec<_>>(),
        strings(&e["state_dict_keys"]),
        "{name} state_dict keys"
    );
    for (key, t) in sd.iter() {
        let shape: Vec<usize> = e["state_dict_shapes"][key]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(t.shape(), shape, "{name} {key}");
    }
    assert_eq!(
        model.parameters().len() as u64,
        e["num_parameters"].as_u64().unwrap(),
        "{name} num_parameters"
    );
}

#[test]
fn h_module_api_models() -> Result<()> {
    check_expectations("StatefulModule", &StatefulModule::new()?);
    check_expectations("Net", &Net::new().unwrap());
    check_expectations("BigNet", &BigNet::new().unwrap());
    check_expectations("DynamicNet(3)", &DynamicNet::new(3).unwrap());
    check_expectations("SmallCNN", &SmallCnn::new()?);
    let seq = tessera_nn::Sequential::new()
        .add(MyLinear::new(4, 3).unwrap())
        .add(ReLU::new())
        .add(MyLinear::new(3, 1).unwrap());
    check_expectations("Sequential(MyLinear(4,3), ReLU(), MyLinear(3,1))", &seq);
    let dynamic = DynamicNet::new(3).unwrap();
    let x = Tensor::randn(&[2, 4], DType::F32)?;
    assert_eq!(dynamic.call((x.clone(), "relu"))?.shape(), vec![2, 1]);
    assert_eq!(dynamic.call((x, "lrelu"))?.shape(), vec![2, 1]);
    Ok(())
}

#[test]
fn h_module_api_state_dict_files_load_into_stateful_module() -> Result<()> {
    let m = StatefulModule::new()?;
    load_both("h_module_api", &m);
    let case = Case::load("h_module_api");
    assert_close(
        &m.param_dict["foo"],
        &case.weight("param_dict.foo"),
        0.0,
        0.0,
        "param_dict.foo",
    );
    Ok(())
}

#[test]
fn h_module_api_train_eval_propagation() {
    let case = Case::load("h_module_api");
    let e = &case.json["expectations"]["train_eval"];
    let big = BigNet::new().unwrap();
    let modes = |m: &BigNet| -> Vec<(String, bool)> {
        m.named_modules()
            .into_iter()
            .map(|(n, x)| {
                (
                    if n.is_empty() { "<root>".into() } else { n },
                    x.is_training(),
                )
            })
            .collect()
    };
    let expected = |key: &str| -> Vec<(String, bool)> {
        e[key]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v.as_bool().unwrap()))
            .collect()
    };
    big.eval();
    assert_eq!(modes(&big), expected("after_eval"));
    big.train(true);
    assert_eq!(modes(&big), expected("after_train"));
    big.net.eval();
    assert_eq!(
        modes(&big),
        expected("after_big.train()_then_big.net.eval()")
    );
}

#[test]
fn h_module_api_load_state_dict_reports() -> Result<()> {
    let case = Case::load("h_module_api");
    let e = &case.json["expectations"]["load_state_dict"];
    let mismatched =
        load_safetensors(common::conformance_dir().join("h_module_api/mismatched.safetensors"))?;
    let given: Vec<String> = strings(&e["given_keys_in_order"]);
    // safetensors written by PyTorch keep no order: restore the one the case gives.
    let ordered: StateDict = given
        .iter()
        .map(|k| (k.clone(), mismatched.get(k).unwrap().clone()))
        .collect();
    let net = Net::new().unwrap();
    let err = net
        .load_state_dict(&ordered, true, false)
        .unwrap_err()
        .to_string();
    assert_eq!(err, e["strict_true_message"].as_str().unwrap());

    let keys = net.load_state_dict(&ordered, false, false)?;
    assert_eq!(
        keys.missing_keys,
        strings(&e["strict_false"]["missing_keys"])
    );
    assert_eq!(
        keys.unexpected_keys,
        strings(&e["strict_false"]["unexpected_keys"])
    );
    assert_eq!(
        keys.to_string(),
        e["strict_false"]["repr"].as_str().unwrap()
    );
    assert_eq!(
        net.l0.weight.to_vec::<f32>()?,
        ordered.get("l0.weight").unwrap().to_vec::<f32>()?,
        "matching keys are loaded"
    );
    let full = net.load_state_dict(&net.state_dict()?, true, false)?;
    assert_eq!(full.to_string(), e["full_match_repr"].as_str().unwrap());

    // A transposed weight is refused even with strict=false, with PyTorch's text.
    let mut transposed = net.state_dict()?;
    transposed.insert("l0.weight", Tensor::zeros(&[3, 4], DType::F32)?);
    let size_err = net
        .load_state_dict(&transposed, false, false)
        .unwrap_err()
        .to_string();
    assert_eq!(size_err, e["size_mismatch_message"].as_str().unwrap());
    Ok(())
}

#[test]
fn h_module_api_state_dict_metadata_versions() -> Result<()> {
    let case = Case::load("h_module_api");
    let e = &case.json["expectations"]["state_dict_metadata"];
    for (name, model) in [
        ("Net", Box::new(Net::new().unwrap()) as Box<dyn Module>),
        ("SmallCNN", Box::new(SmallCnn::new()?)),
    ] {
        // The case's JSON object does not keep order: compare as maps.
        let metadata: HashMap<String, i64> = model.state_dict()?.metadata.into_iter().collect();
        let expected: HashMap<String, i64> = e[name]
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.clone(), v["version"].as_i64().unwrap()))
            .collect();
        assert_eq!(metadata, expected, "{name}");
    }
    Ok(())
}
