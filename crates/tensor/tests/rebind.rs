//! `Tensor::rebind` and `Tensor::detach_`: a handle that takes another tensor's data and
//! autograd identity, as rebinding a Python attribute does.

use crate::common;
use common::f32_leaf;
use tessera_tensor::{Result, no_grad};

#[test]
fn rebind_to_a_computed_value_passes_gradients_to_its_leaf() -> Result<()> {
    let w = f32_leaf(&[5.0, 5.0]);
    let holder = w.clone();
    let x = f32_leaf(&[1.0, 2.0]);
    w.rebind(&x.mul_scalar(2.0)?);
    assert_eq!(holder.to_vec::<f32>()?, vec![2.0, 4.0]);
    assert!(!holder.is_leaf());
    assert_eq!(holder.grad_fn_name().as_deref(), Some("mulBackward"));
    holder.mul(&holder)?.sum_all()?.backward()?;
    // d/dx sum((2x)^2) = 8x
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![8.0, 16.0]);
    assert!(w.grad().is_none());
    Ok(())
}

#[test]
fn rebind_to_a_leaf_aliases_it_for_gradients() -> Result<()> {
    let w = f32_leaf(&[0.0, 0.0]);
    let x = f32_leaf(&[1.0, 2.0]);
    w.rebind(&x);
    assert!(w.shares_storage(&x));
    assert!(w.requires_grad() && !w.is_leaf());
    w.mul_scalar(3.0)?.sum_all()?.backward()?;
    assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![3.0, 3.0]);
    Ok(())
}

#[test]
fn rebind_under_no_grad_gives_a_leaf_without_grad() -> Result<()> {
    let w = f32_leaf(&[0.0]);
    let x = f32_leaf(&[1.0]);
    {
        let _guard = no_grad();
        w.rebind(&x.mul_scalar(2.0)?);
    }
    assert!(w.is_leaf() && !w.requires_grad());
    assert_eq!(w.to_vec::<f32>()?, vec![2.0]);
    Ok(())
}

#[test]
fn rebind_to_itself_changes_nothing() -> Result<()> {
    let w = f32_leaf(&[1.0]);
    w.rebind(&w.clone());
    assert!(w.is_leaf() && w.requires_grad());
    Ok(())
}

#[test]
fn detach_in_place_makes_a_leaf_keeping_the_data() -> Result<()> {
    let x = f32_leaf(&[1.0, 2.0]);
    let y = x.mul_scalar(2.0)?;
    y.detach_();
    assert!(y.is_leaf() && !y.requires_grad());
    assert_eq!(y.to_vec::<f32>()?, vec![2.0, 4.0]);
    Ok(())
}
