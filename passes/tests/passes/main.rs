//! The pass tests, one module per pass plus the manager, linked as one test binary (one link
//! instead of one per file).

mod common;
mod constant_fold;
mod cse;
mod dce;
mod fusion_groups;
mod manager;
mod remove_dropout_identity;
mod simplify;
