//! Removing Dropout and Identity: eval-mode Dropout modules, Identity modules and eval
//! `dropout` ops disappear from a traced model with the same results; training mode stays.

use crate::common::{assert_pass_rewrites, f32s, run_pass, snapshots};
use std::sync::Arc;
use tessera_fx::GraphModule;
use tessera_fx::trace::{LeafPolicy, trace};
use tessera_nn::layers::{Dropout, Identity, Linear};
use tessera_nn::{Call, Forward, Module, ModuleCore, ModuleExt, Result};
use tessera_passes::RemoveDropoutIdentity;
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Tensor};

/// A small MLP with a Dropout module, an Identity module and a functional dropout.
#[derive(Module)]
struct DropNet {
    core: ModuleCore,
    fc1: Linear,
    drop: Dropout,
    id: Identity,
    fc2: Linear,
}

impl DropNet {
    fn new() -> DropNet {
        DropNet {
            core: ModuleCore::default(),
            fc1: Linear::new(8, 16).unwrap(),
            drop: Dropout::new(0.5).unwrap(),
            id: Identity::new(),
            fc2: Linear::new(16, 4).unwrap(),
        }
    }
}

impl Forward for DropNet {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        let x = self.id.call(self.drop.call(self.fc1.call(x)?)?)?;
        let x = F::dropout(&x.relu()?, 0.3, self.is_training())?;
        self.fc2.call(x)
    }
}

/// `DropNet` traced in the given mode.
pub fn drop_net(training: bool) -> GraphModule {
    let net = Arc::new(DropNet::new());
    net.train(training);
    let traced = trace(&*net, f32s(&[4, 8]), LeafPolicy::default()).unwrap();
    GraphModule::new(net, traced)
}

#[test]
fn eval_dropout_and_identity_are_removed_with_the_same_results() {
    let mut gm = drop_net(false);
    let inputs = [Tensor::randn(&[4, 8], DType::F32).unwrap()];
    assert_pass_rewrites(
        Box::new(RemoveDropoutIdentity),
        &mut gm,
        &inputs,
        "remove_dropout_identity_eval",
    );
}

#[test]
fn training_dropout_stays_and_identity_goes() {
    let mut gm = drop_net(true);
    let (_, text) = run_pass(Box::new(RemoveDropoutIdentity), &mut gm);
    snapshots().bind(|| insta::assert_snapshot!("remove_dropout_identity_training", text));
    let printed = gm.graph.to_string();
    assert!(printed.contains("Dropout(") && printed.contains("dropout"));
    assert!(!printed.contains("Identity"));
}
