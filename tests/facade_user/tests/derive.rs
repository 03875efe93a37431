//! `#[derive(Module)]` in a crate that depends on `tessera` alone: every path the derive
//! generates (the trait, fields, buffers, extra state, the layer probe) resolves through
//! `tessera::nn`.

use std::sync::atomic::{AtomicI64, Ordering};
use tessera::nn::layers::Linear;
use tessera::nn::{
    Call, Forward, Module, ModuleCore, ModuleExt, NnError, Parameter, Result, StateDict, Value,
};
use tessera::{DType, Tensor};

/// A user's module with each kind of field the derive handles.
#[derive(Module)]
#[module(name = "Scaled", extra_repr = "describe", version = 2)]
#[module(get_extra_state = "extra", set_extra_state = "restore")]
struct ScaledLinear {
    core: ModuleCore,
    linear: Linear,
    scale: Parameter,
    shift: Option<Parameter>,
    #[module(buffer)]
    running: Tensor,
    #[module(buffer, persistent = false)]
    scratch: Tensor,
    #[module(skip)]
    calls: AtomicI64,
}

impl ScaledLinear {
    fn new() -> Result<Self> {
        Ok(ScaledLinear {
            core: ModuleCore::default(),
            linear: Linear::new(4, 2)?,
            scale: Parameter::new(Tensor::ones(&[2], DType::F32)?),
            shift: None,
            running: Tensor::zeros(&[2], DType::F32)?,
            scratch: Tensor::zeros(&[2], DType::F32)?,
            calls: AtomicI64::new(0),
        })
    }

    fn describe(&self) -> String {
        "scale=learnt".to_string()
    }

    fn extra(&self) -> Value {
        Value::Int(self.calls.load(Ordering::SeqCst))
    }

    fn restore(&self, state: &Value) -> Result<()> {
        let calls = state
            .as_i64()
            .ok_or_else(|| NnError::Invalid("calls must be an int".into()))?;
        self.calls.store(calls, Ordering::SeqCst);
        Ok(())
    }
}

impl Forward for ScaledLinear {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Ok(self.linear.call(x)?.mul(&self.scale)?)
    }
}

#[test]
fn derived_module_registers_its_fields_through_the_facade() -> Result<()> {
    let m = ScaledLinear::new()?;
    let state = m.state_dict()?;
    // As PyTorch: own parameters, then own persistent buffers, then children.
    assert_eq!(
        state.keys().collect::<Vec<_>>(),
        ["scale", "running", "linear.weight", "linear.bias"]
    );
    assert_eq!(state.extra.keys().collect::<Vec<_>>(), ["_extra_state"]);
    assert_eq!(m.version(), 2);
    assert!(
        m.repr()
            .starts_with("Scaled(\n  scale=learnt\n  (linear): Linear(")
    );
    Ok(())
}

#[test]
fn derived_module_runs_as_a_layer_and_restores_its_extra_state() -> Result<()> {
    let m = ScaledLinear::new()?;
    let y = m.call(Tensor::ones(&[3, 4], DType::F32)?)?;
    assert_eq!(y.shape(), vec![3, 2]);
    assert!(
        m.as_layer().is_some(),
        "a Forward<Tensor> module is a layer"
    );
    let fresh = ScaledLinear::new()?;
    fresh.load_state_dict(&m.state_dict()?, true, false)?;
    assert_eq!(fresh.calls.load(Ordering::SeqCst), 1);
    let missing = fresh.load_state_dict(&StateDict::new(), false, false)?;
    assert!(missing.missing_keys.iter().any(|k| k == "_extra_state"));
    Ok(())
}
