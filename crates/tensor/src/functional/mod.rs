//! PyTorch's `torch.nn.functional`: free functions over tensors for the neural-network ops
//! (convolution, pooling, normalisation, dropout, embedding, losses, attention).

mod attention;
mod composed_loss;
mod conv;
mod conv3d;
mod distance;
mod dropout;
mod embedding;
mod embedding_bag;
mod loss;
mod norm;
mod pool;
mod resample;

pub use attention::*;
pub use composed_loss::*;
pub use conv::*;
pub use conv3d::*;
pub use distance::*;
pub use dropout::*;
pub use embedding::*;
pub use embedding_bag::*;
pub use loss::*;
pub use norm::*;
pub use pool::*;
pub use resample::*;
