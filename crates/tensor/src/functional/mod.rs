//! PyTorch's `torch.nn.functional`: free functions over tensors for the neural-network ops
//! (convolution, pooling, normalisation, dropout, embedding, losses, attention).

mod attention;
mod conv;
mod dropout;
mod embedding;
mod loss;
mod norm;
mod pool;

pub use attention::*;
pub use conv::*;
pub use dropout::*;
pub use embedding::*;
pub use loss::*;
pub use norm::*;
pub use pool::*;
