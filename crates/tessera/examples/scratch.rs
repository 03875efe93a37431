use std::time::Instant;
use tessera::functional as F;
use tessera::{DType, Tensor, no_grad};
fn main() {
    tessera::tensor::set_num_threads(2).unwrap();
    let _g = no_grad();
    let h = Tensor::randn(&[64, 16, 32, 32], DType::F32).unwrap();
    let start = Instant::now();
    for _ in 0..500 {
        F::max_pool2d(&h, [2, 2], [2, 2], [0, 0], [1, 1], false).unwrap();
    }
    println!("{:.3} ms", start.elapsed().as_secs_f64() * 2.0);
}
