//! `manual_seed` makes the global generator reproducible (random tensors and dropout masks).
//! One test in its own process: other tests draw from the same global generator in parallel.

use tessera_tensor::functional::dropout;
use tessera_tensor::{DType, Generator, Result, Tensor, manual_seed};

#[test]
fn manual_seed_reproduces_random_tensors_and_dropout_masks() -> Result<()> {
    manual_seed(42);
    let a = Tensor::randn(&[100], DType::F64)?.to_vec::<f64>()?;
    manual_seed(42);
    let b = Tensor::randn(&[100], DType::F64)?.to_vec::<f64>()?;
    assert_eq!(a, b);
    let mean = a.iter().sum::<f64>() / 100.0;
    assert!(
        mean.abs() < 0.35,
        "normal samples have mean near 0, got {mean}"
    );

    let x = Tensor::ones(&[8, 16], DType::F32)?;
    manual_seed(5);
    let first = dropout(&x, 0.25, true)?.to_vec::<f32>()?;
    manual_seed(5);
    assert_eq!(
        dropout(&x, 0.25, true)?.to_vec::<f32>()?,
        first,
        "the same seed draws the same mask"
    );
    assert!(first.contains(&0.0) && first.iter().any(|&v| v != 0.0));

    let (mut g1, mut g2) = (Generator::new(7), Generator::new(7));
    assert_eq!(
        Tensor::rand_with(&[5], DType::F32, &mut g1)?.to_vec::<f32>()?,
        Tensor::rand_with(&[5], DType::F32, &mut g2)?.to_vec::<f32>()?
    );
    Ok(())
}
