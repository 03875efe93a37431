//! The one place every pass is registered, by name: pipelines and tools look passes up here.

use crate::{
    CommonSubexpressionElimination, ConstantFold, ConvertStatic, DeadCodeElimination,
    FoldBatchNorm, FuseGroups, InsertObservers, Pass, PassError, PrepareQat, QuantizeDynamic,
    Rematerialize, RemoveDropoutIdentity, Result, Simplify, StructuredPrune,
};

/// Every registered pass in its default configuration (constant folding freezes every
/// attribute, as an inference pipeline wants; quantization uses per-channel weights).
pub fn all() -> Vec<Box<dyn Pass>> {
    vec![
        Box::new(DeadCodeElimination),
        Box::new(CommonSubexpressionElimination),
        Box::new(RemoveDropoutIdentity),
        Box::new(ConstantFold::freeze_all()),
        Box::new(FoldBatchNorm),
        Box::new(StructuredPrune::new(0.3)),
        Box::new(Simplify::default()),
        Box::new(FuseGroups),
        Box::new(Rematerialize::default()),
        Box::new(QuantizeDynamic::new(true)),
        Box::new(InsertObservers),
        Box::new(PrepareQat::default()),
        Box::new(ConvertStatic { per_channel: true }),
    ]
}

/// The names of every registered pass.
pub fn names() -> Vec<&'static str> {
    all().iter().map(|p| p.name()).collect()
}

/// The registered pass called `name`.
pub fn by_name(name: &str) -> Result<Box<dyn Pass>> {
    all()
        .into_iter()
        .find(|p| p.name() == name)
        .ok_or_else(|| PassError::UnknownPass {
            name: name.into(),
            known: names().into_iter().map(String::from).collect(),
        })
}
