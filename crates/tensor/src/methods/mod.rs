//! The `Tensor` methods users call; each builds an [`Op`](crate::Op) and applies it.

mod elementwise;
mod index;
mod inplace;
mod linalg;
mod reduce;
mod shape;
