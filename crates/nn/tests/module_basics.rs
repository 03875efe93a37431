//! The module API on the Modules note's custom modules: registration order, iteration,
//! paths, state dicts, train/eval, dtype moves, reprs and hooks.

use tessera_nn::models::note::{BigNet, Net};
use tessera_nn::{Call, Module, ModuleCore, ModuleExt, Parameter, Result};
use tessera_tensor::{DType, Tensor};

#[derive(Module)]
struct WithBuffers {
    core: ModuleCore,
    #[module(buffer)]
    running: Tensor,
    #[module(buffer, persistent = false)]
    scratch: Tensor,
    #[module(skip)]
    note: Tensor,
    scale: f64,
    param3: Option<Parameter>,
}

fn names<T>(items: Vec<(String, T)>) -> Vec<String> {
    items.into_iter().map(|(n, _)| n).collect()
}

#[test]
fn derive_registers_fields_in_declaration_order() -> Result<()> {
    let big = BigNet::new()?;
    assert_eq!(
        names(big.named_modules()),
        ["", "l1", "net", "net.l0", "net.l1"]
    );
    assert_eq!(names(big.named_children()), ["l1", "net"]);
    // The state dict holds exactly the parameters, under the same names and in the same order.
    let parameter_names = [
        "l1.weight",
        "l1.bias",
        "net.l0.weight",
        "net.l0.bias",
        "net.l1.weight",
        "net.l1.bias",
    ];
    assert_eq!(names(big.named_parameters()), parameter_names);
    assert_eq!(
        big.state_dict()?.keys().collect::<Vec<_>>(),
        parameter_names
    );
    assert_eq!(
        big.repr(),
        "BigNet(\n  (l1): MyLinear()\n  (net): Net(\n    (l0): MyLinear()\n    (l1): MyLinear()\n  )\n)"
    );
    Ok(())
}

#[test]
fn buffers_persistence_skip_and_none() -> Result<()> {
    let m = WithBuffers {
        core: ModuleCore::default(),
        running: Tensor::zeros(&[2], DType::F32)?,
        scratch: Tensor::ones(&[2], DType::F32)?,
        note: Tensor::ones(&[1], DType::F32)?,
        scale: 2.0,
        param3: None,
    };
    assert_eq!(names(m.named_buffers()), ["running", "scratch"]);
    assert_eq!(m.state_dict()?.keys().collect::<Vec<_>>(), ["running"]);
    assert!(m.named_parameters().is_empty());
    let _ = (&m.note, m.scale);
    Ok(())
}

#[test]
fn call_runs_forward_and_errors_name_the_module_path() -> Result<()> {
    let net = Net::new()?;
    assert_eq!(
        net.call(Tensor::ones(&[2, 4], DType::F32)?)?.shape(),
        vec![2, 1]
    );
    let err = net
        .call(Tensor::ones(&[2, 5], DType::F32)?)
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("l0 (MyLinear): matmul: shape mismatch between [2, 5] and [4, 3]"),
        "{err}"
    );
    Ok(())
}
