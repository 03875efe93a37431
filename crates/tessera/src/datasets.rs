//! Built-in data for examples and demos: images of generated shapes (bars and hollow squares
//! with noise) with their labels, shuffling, and classification accuracy.

use crate::{DType, Generator, Result, Tensor};

/// Images are `SIDE x SIDE` pixels, one channel.
pub const SIDE: usize = 16;
/// The class names, by label.
pub const CLASSES: [&str; 3] = ["horizontal bar", "vertical bar", "square"];

/// One 16x16 image of class `class` (0: horizontal bar, 1: vertical bar, 2: hollow square)
/// at a random place and size, plus Gaussian noise.
pub fn draw(class: usize, g: &mut Generator) -> Vec<f32> {
    let mut image = vec![0f32; SIDE * SIDE];
    let mut set = |r: usize, c: usize| image[r * SIDE + c] = 1.0;
    match class {
        0 | 1 => {
            let at = g.integer(1, SIDE as i64 - 1) as usize;
            let length = g.integer(7, SIDE as i64 + 1) as usize;
            let start = g.integer(0, (SIDE - length) as i64 + 1) as usize;
            for i in start..start + length {
                if class == 0 { set(at, i) } else { set(i, at) }
            }
        }
        _ => {
            let side = g.integer(5, 11) as usize;
            let r0 = g.integer(0, (SIDE - side) as i64 + 1) as usize;
            let c0 = g.integer(0, (SIDE - side) as i64 + 1) as usize;
            for i in 0..side {
                set(r0, c0 + i);
                set(r0 + side - 1, c0 + i);
                set(r0 + i, c0);
                set(r0 + i, c0 + side - 1);
            }
        }
    }
    image
        .iter()
        .map(|&v| v + (0.3 * g.normal()) as f32)
        .collect()
}

/// `n` images `[n, 1, 16, 16]` with labels `[n]`, the classes in turn.
pub fn shapes(n: usize, g: &mut Generator) -> Result<(Tensor, Tensor)> {
    let mut pixels = Vec::with_capacity(n * SIDE * SIDE);
    let mut labels = Vec::with_capacity(n);
    for i in 0..n {
        pixels.extend(draw(i % CLASSES.len(), g));
        labels.push((i % CLASSES.len()) as i64);
    }
    Ok((
        Tensor::from_vec(pixels, &[n, 1, SIDE, SIDE])?,
        Tensor::from_vec(labels, &[n])?,
    ))
}

/// A random permutation of `0..n` (Fisher-Yates) as an index tensor.
pub fn permutation(n: usize, g: &mut Generator) -> Result<Tensor> {
    let mut order: Vec<i64> = (0..n as i64).collect();
    for i in (1..n).rev() {
        order.swap(i, g.integer(0, i as i64 + 1) as usize);
    }
    Tensor::from_vec(order, &[n])
}

/// The fraction of rows of `logits` whose argmax is the label.
pub fn accuracy(logits: &Tensor, labels: &Tensor) -> Result<f64> {
    logits
        .argmax(Some(1), false)?
        .eq_(labels)?
        .to_dtype(DType::F32)?
        .mean_all()?
        .item::<f64>()
}
