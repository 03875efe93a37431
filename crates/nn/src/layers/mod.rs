//! PyTorch's built-in layers, one file per family; each is a `#[derive(Module)]` struct with
//! PyTorch's parameter names, default initialisation and repr, and an options struct (with
//! PyTorch's defaults and chainable setters) for everything past the required sizes.

mod activation;
mod activation_more;
mod attention;
mod conv;
mod conv_layer;
mod conv_more;
mod distance;
mod dropout;
mod embedding;
mod embedding_bag;
mod instance_norm;
mod linear;
mod loss;
mod loss_more;
mod norm;
mod options;
mod padding;
mod pool;
mod pool_more;
mod python;
mod recurrent_module;
mod recurrent_step;
mod recurrent_weights;
mod resample;
mod rms_norm;
mod rnn;
mod rnn_cell;
mod shape;
mod transformer;

pub use activation::{GELU, LeakyReLU, LogSoftmax, ReLU, SiLU, Sigmoid, Softmax, Tanh};
pub use activation_more::{
    ELU, Hardsigmoid, Hardswish, Mish, PReLU, PReLUOptions, ReLU6, Softplus,
};
pub use attention::{
    AttentionInput, AttentionOutput, MultiheadAttention, MultiheadAttentionOptions,
};
pub use conv::{
    Conv1d, Conv1dOptions, Conv2d, Conv2dOptions, ConvTranspose2d, ConvTranspose2dOptions,
};
pub use conv_more::{Conv3d, Conv3dOptions, ConvTranspose1d, ConvTranspose1dOptions};
pub use distance::CosineSimilarity;
pub use dropout::{Dropout, Dropout2d};
pub use embedding::{Embedding, EmbeddingOptions};
pub use embedding_bag::{EmbeddingBag, EmbeddingBagOptions};
pub use instance_norm::{InstanceNorm1d, InstanceNorm2d, InstanceNormOptions};
pub use linear::{Bilinear, Identity, Linear, LinearOptions, NonDynamicallyQuantizableLinear};
pub use loss::{BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, L1Loss, MSELoss, NLLLoss};
pub use loss_more::{HuberLoss, KLDivLoss, MarginRankingLoss, SmoothL1Loss};
pub use norm::{
    BatchNorm1d, BatchNorm2d, BatchNormOptions, GroupNorm, GroupNormOptions, LayerNorm,
    LayerNormOptions,
};
pub use options::{Setting, Size2};
pub use padding::ZeroPad2d;
pub use pool::{AdaptiveAvgPool2d, AvgPool2d, AvgPool2dOptions, MaxPool2d, MaxPool2dOptions};
pub use pool_more::{AdaptiveMaxPool2d, AvgPool1d, AvgPool1dOptions, MaxPool1d, MaxPool1dOptions};
pub use python::{py_bool, py_float, py_opt_float, py_tuple};
pub use recurrent_step::Nonlinearity;
pub use recurrent_weights::RecurrentWeights;
pub use resample::{PixelShuffle, Upsample};
pub use rms_norm::{RMSNorm, RMSNormOptions};
pub use rnn::{GRU, LSTM, RNN, RecurrentOptions};
pub use rnn_cell::{GRUCell, LSTMCell, RNNCell, RecurrentCellOptions};
pub use shape::{Flatten, Unflatten};
pub use transformer::{
    Activation, DecoderInput, EncoderInput, Transformer, TransformerDecoder,
    TransformerDecoderLayer, TransformerEncoder, TransformerEncoderLayer, TransformerInput,
    TransformerOptions,
};
