//! Constant folding: subgraphs of frozen attributes become one `_folded_N` constant, only the
//! frozen ones fold, and results do not change.

use crate::common::{assert_pass_rewrites, f32s, run_pass};
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::{Forward, Module, ModuleCore, Parameter, Result};
use tessera_passes::{Changed, ConstantFold};
use tessera_tensor::{DType, Tensor};

/// `x + relu(w) * b`: the right-hand side depends on parameters only.
#[derive(Module)]
struct Scaled {
    core: ModuleCore,
    w: Parameter,
    b: Parameter,
}

impl Forward for Scaled {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        Ok(x.add(&self.w.relu()?.mul(&self.b)?)?)
    }
}

fn scaled() -> GraphModule {
    let net = Arc::new(Scaled {
        core: ModuleCore::default(),
        w: Parameter::new(Tensor::randn(&[3], DType::F32).unwrap()),
        b: Parameter::new(Tensor::randn(&[3], DType::F32).unwrap()),
    });
    let traced = trace(&*net, f32s(&[2, 3]), LeafPolicy::default()).unwrap();
    GraphModule::new(net, traced)
}

#[test]
fn constant_fold_of_all_attributes_leaves_one_get_attr() {
    let mut gm = scaled();
    let inputs = [Tensor::randn(&[2, 3], DType::F32).unwrap()];
    assert_pass_rewrites(
        Box::new(ConstantFold::freeze_all()),
        &mut gm,
        &inputs,
        "constant_fold_freeze_all",
    );
    assert!(gm.constants.contains_key("_folded_0"));
}

#[test]
fn constant_fold_folds_only_frozen_attributes() {
    let mut gm = scaled();
    let inputs = [Tensor::randn(&[2, 3], DType::F32).unwrap()];
    assert_pass_rewrites(
        Box::new(ConstantFold::frozen(["w"])),
        &mut gm,
        &inputs,
        "constant_fold_frozen_w",
    );
}

#[test]
fn constant_fold_without_frozen_attributes_changes_nothing() {
    let mut gm = scaled();
    let (changed, _) = run_pass(Box::new(ConstantFold::default()), &mut gm);
    assert_eq!(changed, Changed::No);
}
