//! Helpers for the multi-module conformance cases, whose modules are children of one holder
//! module: strict loading of `state_dict.pt`, reprs and key order against `case.json`, and a
//! module's parameters by name for `Case::check_subcase`.
#![allow(dead_code)]

use tessera_nn::{Module, ModuleExt, StateDict, load_pt_state_dict};
use tessera_tensor::Tensor;
use tessera_testkit::{Case, conformance_dir};

/// The case's `state_dict.pt`.
pub fn checkpoint(case: &Case) -> StateDict {
    load_pt_state_dict(conformance_dir().join(&case.name).join("state_dict.pt")).unwrap()
}

/// Loads the case's `state_dict.pt` strictly into `model`.
pub fn load_strict(case: &Case, model: &dyn Module) {
    let missing = model
        .load_state_dict(&checkpoint(case), true, false)
        .unwrap();
    assert!(missing.is_empty());
}

/// `module`'s parameters by their names relative to it.
pub fn params_of(module: &dyn Module) -> Vec<(String, Tensor)> {
    module
        .named_parameters()
        .into_iter()
        .map(|(n, p)| (n, p.tensor().clone()))
        .collect()
}

/// Each child named in `case.json`'s `modules` prints the repr PyTorch printed.
pub fn check_reprs(case: &Case, model: &dyn Module) {
    for (name, spec) in case.json["modules"].as_object().unwrap() {
        let module = model.get_submodule(name).unwrap();
        assert_eq!(module.repr(), spec["repr"].as_str().unwrap(), "{name}");
    }
}

/// The holder's state_dict keys are `case.json`'s `state_dict_keys`, in order.
pub fn check_state_dict_keys(case: &Case, model: &dyn Module) {
    assert_eq!(
        state_dict_keys(model),
        json_strings(&case.json["state_dict_keys"])
    );
}

/// `module`'s state-dict keys, in order.
pub fn state_dict_keys(module: &dyn Module) -> Vec<String> {
    module
        .state_dict()
        .unwrap()
        .keys()
        .map(String::from)
        .collect()
}

/// The strings of a JSON array of strings (a case's `state_dict_keys`).
pub fn json_strings(array: &serde_json::Value) -> Vec<String> {
    array
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k.as_str().unwrap().to_string())
        .collect()
}
