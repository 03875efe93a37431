//! The random pruning rules draw from the global generator, so `manual_seed` reproduces them.
//! One test in its own process: other tests draw from the same global generator in parallel
//! (creating a layer initialises its weights from it), which would shift the sequence.

use tessera_nn::prune::{Amount, random_structured, random_unstructured};
use tessera_nn::{Linear, Module, ModuleExt, Result};
use tessera_tensor::manual_seed;

fn mask(m: &dyn Module, name: &str) -> Result<Vec<f64>> {
    Ok(m.get_buffer(&format!("{name}_mask"))?
        .detach()
        .to_vec_f64()?)
}

fn zeros(mask: &[f64]) -> usize {
    mask.iter().filter(|&&m| m == 0.0).count()
}

#[test]
fn random_variants_prune_the_amount_and_follow_the_seed() -> Result<()> {
    let run = || -> Result<(Vec<f64>, Vec<f64>)> {
        manual_seed(3);
        let mut a = Linear::new(5, 4)?;
        random_unstructured(&mut a, "weight", 0.4)?;
        let mut b = Linear::new(5, 4)?;
        random_structured(&mut b, "weight", Amount::Count(2), 1)?;
        Ok((mask(&a, "weight")?, mask(&b, "weight")?))
    };
    let (unstructured, structured) = run()?;
    assert_eq!(zeros(&unstructured), 8);
    // Two of five columns are zero, wholly.
    let dead: Vec<usize> = (0..5)
        .filter(|c| (0..4).all(|r| structured[r * 5 + c] == 0.0))
        .collect();
    assert_eq!(dead.len(), 2);
    assert_eq!(zeros(&structured), 8);
    assert_eq!(run()?, (unstructured, structured));
    Ok(())
}
