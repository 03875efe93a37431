//! `Display` for tensors, printed as PyTorch prints them.
