//! Random number generators: explicit [`Generator`]s and the seeded global one (`manual_seed`).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::sync::Mutex;

/// PyTorch's default seed, used until `manual_seed` is called.
const DEFAULT_SEED: u64 = 67_280_421_310_721;

/// A seeded source of random numbers; the same seed gives the same tensors.
#[derive(Debug, Clone)]
pub struct Generator {
    rng: StdRng,
    seed: u64,
}

impl Generator {
    pub fn new(seed: u64) -> Self {
        Generator {
            rng: StdRng::seed_from_u64(seed),
            seed,
        }
    }

    /// Restarts the sequence from `seed`.
    pub fn manual_seed(&mut self, seed: u64) {
        *self = Generator::new(seed);
    }

    pub fn initial_seed(&self) -> u64 {
        self.seed
    }

    /// A uniform sample from `[0, 1)`.
    pub fn uniform(&mut self) -> f64 {
        self.rng.random::<f64>()
    }

    /// A standard normal sample (Box-Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform();
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }

    /// A uniform integer from `[low, high)`.
    pub fn integer(&mut self, low: i64, high: i64) -> i64 {
        self.rng.random_range(low..high)
    }
}

static GLOBAL: Mutex<Option<Generator>> = Mutex::new(None);

/// Seeds the global generator used by `rand`, `randn`, `randint`, dropout and init.
pub fn manual_seed(seed: u64) {
    *GLOBAL.lock().unwrap_or_else(|e| e.into_inner()) = Some(Generator::new(seed));
}

/// Runs `f` with the global generator.
pub fn with_global_generator<R>(f: impl FnOnce(&mut Generator) -> R) -> R {
    let mut guard = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    f(guard.get_or_insert_with(|| Generator::new(DEFAULT_SEED)))
}
