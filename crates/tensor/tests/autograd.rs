//! The autograd engine's behaviour: accumulation, shared subgraphs, retain_graph, no_grad,
//! detach, explicit gradients, and the errors PyTorch gives for misuse.

use crate::common;
use common::f32_leaf;
use tessera_tensor::{DType, Result, Tensor, no_grad};

#[test]
fn gradients_accumulate_across_backward_calls() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0]);
    x.mul_scalar(3.0)?.sum_all()?.backward()?;
    x.mul_scalar(3.0)?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![6.0, 6.0]);
    Ok(())
}

#[test]
fn a_value_used_twice_gets_both_gradients() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0]);
    let y = x.mul(&x)?.add(&x)?; // x^2 + x
    y.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0, 5.0]);
    Ok(())
}

#[test]
fn second_backward_without_retain_graph_is_an_error() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0]);
    let y = x.exp()?.sum_all()?;
    y.backward()?;
    let err = y.backward().unwrap_err().to_string();
    assert!(
        err.contains("backward through the graph a second time"),
        "{err}"
    );
    Ok(())
}

#[test]
fn retain_graph_allows_a_second_backward() -> Result<()> {
    let x = f32_leaf(&[0.0]);
    let y = x.exp()?.sum_all()?;
    y.backward_with(None, true)?;
    y.backward_with(None, false)?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0]);
    Ok(())
}

#[test]
fn no_grad_records_nothing() -> Result<()> {
    let x = f32_leaf(&[1.0]);
    let y = {
        let _guard = no_grad();
        x.mul_scalar(2.0)?
    };
    assert!(!y.requires_grad());
    assert!(
        x.mul_scalar(2.0)?.requires_grad(),
        "grad mode is restored when the guard drops"
    );
    Ok(())
}

#[test]
fn detach_cuts_the_graph_but_shares_storage() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0]);
    let d = x.detach();
    assert!(!d.requires_grad());
    assert!(d.shares_storage(&x));
    Ok(())
}

#[test]
fn backward_with_an_explicit_gradient() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0, 3.0]);
    let y = x.mul_scalar(2.0)?;
    y.backward_with(
        Some(&Tensor::from_vec(vec![1.0f32, 0.5, -1.0], &[3])?),
        false,
    )?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![2.0, 1.0, -2.0]);
    Ok(())
}

#[test]
fn non_scalar_backward_needs_a_gradient() {
    let x = f32_leaf(&[1.0, 2.0]);
    let err = x
        .mul_scalar(2.0)
        .unwrap()
        .backward()
        .unwrap_err()
        .to_string();
    assert!(err.contains("scalar outputs"), "{err}");
}

#[test]
fn backward_of_a_tensor_without_grad_is_an_error() {
    let x = Tensor::ones(&[1], DType::F32).unwrap();
    assert!(
        x.backward()
            .unwrap_err()
            .to_string()
            .contains("does not require grad")
    );
}

#[test]
fn in_place_on_a_leaf_requiring_grad_is_refused() {
    let x = f32_leaf(&[1.0]);
    let err = x.add_scalar_(1.0).unwrap_err().to_string();
    assert!(err.contains("leaf tensor that requires grad"), "{err}");
    let _guard = no_grad();
    x.add_scalar_(1.0).unwrap();
    assert_eq!(x.to_vec::<f32>().unwrap(), vec![2.0]);
}

#[test]
fn modifying_a_saved_value_in_place_fails_backward() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0]);
    let w = Tensor::from_vec(vec![3.0f32, 4.0], &[2])?;
    let y = x.mul(&w)?.sum_all()?;
    w.add_scalar_(1.0)?;
    let err = y.backward().unwrap_err().to_string();
    assert!(err.contains("modified by an in-place operation"), "{err}");
    Ok(())
}

#[test]
fn integer_tensors_cannot_require_grad() {
    let x = Tensor::from_vec(vec![1i64], &[1]).unwrap();
    assert!(x.requires_grad_(true).is_err());
}

#[test]
fn gradient_of_a_shared_view_chain() -> Result<()> {
    let x = Tensor::from_vec((0..6).map(|v| v as f32).collect(), &[2, 3])?.requires_grad_(true)?;
    let y = x.t()?.narrow(0, 1, 2)?.mul_scalar(2.0)?.sum_all()?;
    y.backward()?;
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>()?,
        vec![0.0, 2.0, 2.0, 0.0, 2.0, 2.0]
    );
    Ok(())
}

#[test]
fn grad_fn_names_the_op() -> Result<()> {
    let x = f32_leaf(&[1.0]);
    assert_eq!(
        x.mul_scalar(2.0)?.grad_fn_name().as_deref(),
        Some("mulBackward")
    );
    assert!(x.grad_fn_name().is_none());
    Ok(())
}

#[test]
fn abs_gradient_at_zero_is_zero() -> Result<()> {
    let x = f32_leaf(&[0.0, -2.0, 3.0]);
    x.abs()?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![0.0, -1.0, 1.0]);
    Ok(())
}

/// `y = x^3` with a hand-written backward, as a PyTorch `autograd.Function` would be.
struct Cube;

impl tessera_tensor::op::CustomFunction for Cube {
    fn name(&self) -> String {
        "cube".into()
    }
    fn meta(
        &self,
        inputs: &[tessera_tensor::TensorMeta],
    ) -> Result<Vec<tessera_tensor::TensorMeta>> {
        Ok(vec![inputs[0].clone()])
    }
    fn forward(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        Ok(vec![inputs[0].pow_scalar(3.0)?])
    }
    fn backward(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let g = grads[0].clone().expect("one output");
        Ok(vec![Some(
            g.mul(&inputs[0].pow_scalar(2.0)?)?.mul_scalar(3.0)?,
        )])
    }
}

#[test]
fn custom_functions_record_their_own_backward() -> Result<()> {
    let op = tessera_tensor::Op::Custom(tessera_tensor::op::CustomOp::new(Cube));
    let x = Tensor::from_vec(vec![1.0f64, -2.0, 0.5], &[3])?.requires_grad_(true)?;
    let y = op.apply1(&[&x])?;
    assert_eq!(y.grad_fn_name().as_deref(), Some("cubeBackward"));
    tessera_tensor::gradcheck(|i| op.apply1(&[&i[0]]), &[x], Default::default())
}
