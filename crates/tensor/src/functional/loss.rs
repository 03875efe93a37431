//! Loss functions.
