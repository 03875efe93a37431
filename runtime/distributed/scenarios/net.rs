//! The small network and data the scenarios train: a convolution and two linear layers (no
//! batch norm, whose per-shard statistics would differ from the whole batch's).

use tessera_nn::layers::{Conv2d, Conv2dOptions, Flatten, Linear, ReLU};
use tessera_nn::{Call, Forward, Module, ModuleCore};
use tessera_tensor::functional as F;
use tessera_tensor::{Generator, Tensor, manual_seed};

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Rows in a whole batch; each of two ranks takes half.
pub const BATCH: usize = 8;

#[derive(Module)]
pub struct Net {
    core: ModuleCore,
    conv: Conv2d,
    relu1: ReLU,
    flatten: Flatten,
    fc1: Linear,
    relu2: ReLU,
    fc2: Linear,
}

impl Net {
    /// The network initialised from `seed`.
    pub fn seeded(seed: u64) -> Result<Net, Error> {
        manual_seed(seed);
        Ok(Net {
            core: ModuleCore::default(),
            conv: Conv2d::with_options(1, 4, 3, Conv2dOptions::default().padding(1))?,
            relu1: ReLU::new(),
            flatten: Flatten::new(),
            fc1: Linear::new(4 * 8 * 8, 16)?,
            relu2: ReLU::new(),
            fc2: Linear::new(16, 3)?,
        })
    }
}

impl Forward for Net {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera_nn::Result<Tensor> {
        let x = self.flatten.call(self.relu1.call(self.conv.call(x)?)?)?;
        self.fc2.call(self.relu2.call(self.fc1.call(x)?)?)
    }
}

/// Batch `step` of images `[BATCH, 1, 8, 8]` and labels `[BATCH]`, the same on every rank.
pub fn batch(step: u64) -> Result<(Tensor, Tensor), Error> {
    let mut g = Generator::new(1000 + step);
    let pixels: Vec<f32> = (0..BATCH * 64).map(|_| g.normal() as f32).collect();
    let labels: Vec<i64> = (0..BATCH).map(|_| g.integer(0, 3)).collect();
    Ok((
        Tensor::from_vec(pixels, &[BATCH, 1, 8, 8])?,
        Tensor::from_vec(labels, &[BATCH])?,
    ))
}

/// Rows `start..start + len` of a batch.
pub fn rows(batch: &(Tensor, Tensor), start: usize, len: usize) -> Result<(Tensor, Tensor), Error> {
    Ok((
        batch.0.narrow(0, start, len)?,
        batch.1.narrow(0, start, len)?,
    ))
}

/// The mean cross entropy of `model` on `(x, y)`.
pub fn loss(
    model: &impl Call<Tensor, Output = Tensor>,
    data: &(Tensor, Tensor),
) -> Result<Tensor, Error> {
    let logits = model.call(data.0.clone())?;
    Ok(F::cross_entropy(
        &logits,
        &data.1,
        F::CrossEntropyOptions::default(),
    )?)
}

/// The largest absolute difference between two modules' parameters, by name.
pub fn max_difference(
    a: &[(String, tessera_nn::Parameter)],
    b: &[(String, tessera_nn::Parameter)],
) -> Result<f64, Error> {
    let mut worst = 0.0f64;
    for ((name_a, pa), (name_b, pb)) in a.iter().zip(b) {
        if name_a != name_b {
            return Err(format!("parameters differ in order: {name_a} vs {name_b}").into());
        }
        let (va, vb) = (pa.tensor().to_vec_f64()?, pb.tensor().to_vec_f64()?);
        for (x, y) in va.iter().zip(&vb) {
            worst = worst.max((x - y).abs());
        }
    }
    Ok(worst)
}
