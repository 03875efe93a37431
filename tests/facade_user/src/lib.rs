//! A crate that depends on `tessera` alone, as a user's crate does. The README's Rust code
//! blocks are its doctests, and its tests derive modules through `tessera::nn`, so a path
//! that only works inside the workspace (`tessera_nn::...`) fails here.

/// The README's code blocks, each compiled and run as a doctest against the facade alone.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;
