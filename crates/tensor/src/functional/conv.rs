//! Convolution functions (conv1d, conv2d).
