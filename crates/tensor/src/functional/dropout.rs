//! Dropout.
