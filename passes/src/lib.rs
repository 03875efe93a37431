//! Rewrite passes over Tessera's graph IR: the [`Pass`] trait, one pass per file, a single
//! [`registry`], a [`PassManager`] that verifies, times and optionally dumps around every
//! pass, and the [`pipelines`] written once with the reason for each ordering.

mod attributes;
mod constant_fold;
pub mod cost;
mod cse;
mod dce;
mod error;
pub mod fold_batch_norm;
pub mod fusion_groups;
mod lookup;
mod manager;
mod pass;
pub mod pipelines;
pub mod quantize;
pub mod registry;
pub mod remat;
mod remove_dropout_identity;
pub mod simplify;
pub mod structured_prune;

pub use constant_fold::ConstantFold;
pub use cse::CommonSubexpressionElimination;
pub use dce::DeadCodeElimination;
pub use error::{PassError, Result};
pub use fold_batch_norm::FoldBatchNorm;
pub use fusion_groups::{FuseGroups, FusionGroup, FusionGrouping, fusion_groups};
pub use manager::{PassManager, PassReport, PassTiming};
pub use pass::{Changed, Pass};
pub use quantize::{ConvertStatic, InsertObservers, PrepareQat, QuantizeDynamic, calibrate};
pub use remat::{RematReport, Rematerialize, SavedValue, rematerialize};
pub use remove_dropout_identity::RemoveDropoutIdentity;
pub use simplify::{Simplify, SimplifyReport};
pub use structured_prune::StructuredPrune;
