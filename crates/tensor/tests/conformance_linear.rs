//! PyTorch conformance of matmul, linear and relu with their gradients (cases `a_mylinear`
//! and `b_sequential` from `../shared/conformance`).

use crate::common;

use common::Case;
use tessera_tensor::{Result, Tensor};

fn param(case: &Case, key: &str) -> Tensor {
    case.weight(key).requires_grad_(true).unwrap()
}

#[test]
fn mylinear_forward_and_gradients_match_pytorch() -> Result<()> {
    let case = Case::load("a_mylinear");
    let (w, b) = (param(&case, "weight"), param(&case, "bias"));
    let x = case.io("input").requires_grad_(true)?;
    let out = x.matmul(&w)?.add(&b)?;
    case.check("output", &out);
    case.check("output_batch", &case.io("input_batch").matmul(&w)?.add(&b)?);
    out.sum_all()?.backward()?;
    case.check("grad/input", &x.grad().unwrap());
    case.check("grad/weight", &w.grad().unwrap());
    case.check("grad/bias", &b.grad().unwrap());
    Ok(())
}

#[test]
fn sequential_linear_relu_linear_matches_pytorch() -> Result<()> {
    let case = Case::load("b_sequential");
    let params: Vec<Tensor> = ["0.weight", "0.bias", "2.weight", "2.bias"]
        .iter()
        .map(|k| param(&case, k))
        .collect();
    let x = case.io("input").requires_grad_(true)?;
    let act0 = x.linear(&params[0], Some(&params[1]))?;
    case.check("act/0", &act0);
    let act1 = act0.relu()?;
    case.check("act/1", &act1);
    let out = act1.linear(&params[2], Some(&params[3]))?;
    case.check("output", &out);
    out.sum_all()?.backward()?;
    case.check("grad/input", &x.grad().unwrap());
    for (key, p) in ["0.weight", "0.bias", "2.weight", "2.bias"]
        .iter()
        .zip(&params)
    {
        case.check(&format!("grad/{key}"), &p.grad().unwrap());
    }
    Ok(())
}
