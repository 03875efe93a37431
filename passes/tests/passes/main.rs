//! The pass tests, one module per pass plus the manager, linked as one test binary (one link
//! instead of one per file).

mod common;
mod constant_fold;
mod cse;
mod dce;
mod fold_batch_norm;
mod fusion_groups;
mod fx_quantized_state_dict;
mod fx_state_dict;
mod manager;
mod models;
mod qat;
mod quantize;
mod quantize_residual;
mod quantize_x86;
mod random_graphs;
mod remat;
mod remove_dropout_identity;
mod simplify;
mod structured_prune;
