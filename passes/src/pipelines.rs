//! Pass pipelines, written once, with the reason for each ordering constraint.

use crate::registry::by_name;
use crate::{PassManager, Result};

/// The clean-up pipeline for eval graphs.
pub fn cleanup() -> Result<PassManager> {
    let mut pm = PassManager::new();
    // Dropout and Identity go first: removing them makes `f(dropout(x))` and `f(x)` the same
    // expression, which CSE can only see afterwards.
    pm.add(by_name("remove_dropout_identity")?);
    // Folding before CSE: folded subgraphs become get_attr nodes CSE does not merge, so CSE
    // after it only looks at the remaining runtime computation.
    pm.add(by_name("constant_fold")?);
    pm.add(by_name("common_subexpression_elimination")?);
    // DCE last: every pass above can leave unused nodes behind (CSE's replaced operands,
    // folded attributes that are read nowhere else).
    pm.add(by_name("dead_code_elimination")?);
    Ok(pm)
}
