//! Normalisation functions (batch_norm, layer_norm, group_norm).
