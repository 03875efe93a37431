//! The pass tests, one module per pass plus the manager, linked as one test binary (one link
//! instead of one per file).

mod common;
mod cse;
mod dce;
mod remove_dropout_identity;
