//! Post-accumulate-grad hooks: when they run, how often, and what their errors become.

use std::sync::{Arc, Mutex};
use tessera_tensor::{Result, Tensor, TensorError};

fn leaf(values: &[f32]) -> Result<Tensor> {
    Tensor::from_slice(values, &[values.len()])?.requires_grad_(true)
}

#[test]
fn post_accumulate_grad_hook_sees_the_complete_gradient_once_per_backward() -> Result<()> {
    let w = leaf(&[1.0, 2.0])?;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&seen);
    let _handle = w.register_post_accumulate_grad_hook(move |t| {
        let grad = t.grad().ok_or("no grad")?.to_vec::<f32>()?;
        log.lock().map_err(|e| e.to_string())?.push(grad);
        Ok(())
    })?;
    // Three uses of `w`: the hook must see the sum of all three contributions, once.
    let y = w.mul_scalar(2.0)?.add(&w)?.add(&w.mul(&w)?)?.sum_all()?;
    y.backward()?;
    let calls = seen
        .lock()
        .map_err(|e| TensorError::Autograd(e.to_string()))?
        .clone();
    assert_eq!(calls, vec![vec![2.0 + 1.0 + 2.0, 2.0 + 1.0 + 4.0]]);
    Ok(())
}

#[test]
fn post_accumulate_grad_hooks_fire_in_backward_order_of_the_leaves() -> Result<()> {
    let first = leaf(&[1.0])?;
    let second = leaf(&[1.0])?;
    let order = Arc::new(Mutex::new(Vec::new()));
    for (name, t) in [("first", &first), ("second", &second)] {
        let order = Arc::clone(&order);
        t.register_post_accumulate_grad_hook(move |_| {
            order.lock().map_err(|e| e.to_string())?.push(name);
            Ok(())
        })?;
    }
    // `second` is used last in forward, so backward reaches it first.
    let h = first.mul_scalar(3.0)?.exp()?;
    h.mul(&second)?.sum_all()?.backward()?;
    let order = order
        .lock()
        .map_err(|e| TensorError::Autograd(e.to_string()))?
        .clone();
    assert_eq!(order, ["second", "first"]);
    Ok(())
}

#[test]
fn removed_post_accumulate_grad_hook_is_not_called() -> Result<()> {
    let w = leaf(&[1.0])?;
    let calls = Arc::new(Mutex::new(0));
    let counter = Arc::clone(&calls);
    let handle = w.register_post_accumulate_grad_hook(move |_| {
        *counter.lock().map_err(|e| e.to_string())? += 1;
        Ok(())
    })?;
    w.sum_all()?.backward()?;
    handle.remove();
    w.sum_all()?.backward()?;
    assert_eq!(
        *calls
            .lock()
            .map_err(|e| TensorError::Autograd(e.to_string()))?,
        1
    );
    Ok(())
}

#[test]
fn post_accumulate_grad_hook_error_ends_backward_with_its_cause() -> Result<()> {
    let w = leaf(&[1.0])?;
    w.register_post_accumulate_grad_hook(|_| Err("the network is down".into()))?;
    let err = w.mul_scalar(2.0)?.sum_all()?.backward().unwrap_err();
    assert!(matches!(err, TensorError::GradHook(_)), "{err}");
    let cause = std::error::Error::source(&err).map(|c| c.to_string());
    assert_eq!(cause.as_deref(), Some("the network is down"));
    Ok(())
}

#[test]
fn post_accumulate_grad_hook_is_refused_on_non_leaves_and_leaves_without_grad() -> Result<()> {
    let w = leaf(&[1.0])?;
    let not_leaf = w.mul_scalar(2.0)?;
    assert!(
        not_leaf
            .register_post_accumulate_grad_hook(|_| Ok(()))
            .is_err()
    );
    let frozen = Tensor::from_slice(&[1.0f32], &[1])?;
    assert!(
        frozen
            .register_post_accumulate_grad_hook(|_| Ok(()))
            .is_err()
    );
    Ok(())
}
