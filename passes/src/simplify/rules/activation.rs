//! Activation identities: idempotent activations and merges of clamps. Each holds for NaN
//! inputs too (which is why `relu(|x|) = |x|` is absent: `relu(NaN)` is 0).

use super::{Rule, bound, fill, num, rule, rule_fn, with_scalar};
use crate::Result;
use crate::simplify::analysis::TensorGraph;
use crate::simplify::language::TensorLang;
use egg::{Id, Subst};

/// `clamp(x, merge(a, b))` with the bounds `?a` and `?b` of two nested one-sided clamps.
fn merge_bounds(
    egraph: &mut TensorGraph,
    subst: &Subst,
    merge: fn(f64, f64) -> f64,
    node: fn([Id; 2]) -> TensorLang,
) -> Option<Id> {
    let (a, b) = (fill(egraph, subst, "?a")?, fill(egraph, subst, "?b")?);
    with_scalar(egraph, subst, node, merge(a, b))
}

pub fn rules() -> Result<Vec<Rule>> {
    Ok(vec![
        // relu(relu(x)) = relu(x)
        rule("relu-relu", "(relu (relu ?x))", "(relu ?x)")?,
        // |(|x|)| = |x|
        rule("abs-abs", "(abs (abs ?x))", "(abs ?x)")?,
        // |-x| = |x|
        rule("abs-neg", "(abs (neg ?x))", "(abs ?x)")?,
        // clamp(clamp(x, min=a), min=b) = clamp(x, min=max(a, b))
        rule_fn(
            "clamp-min-min",
            "(clamp_min (clamp_min ?x ?a) ?b)",
            |egraph, subst| merge_bounds(egraph, subst, f64::max, TensorLang::ClampMin),
        )?,
        // clamp(clamp(x, max=a), max=b) = clamp(x, max=min(a, b))
        rule_fn(
            "clamp-max-max",
            "(clamp_max (clamp_max ?x ?a) ?b)",
            |egraph, subst| merge_bounds(egraph, subst, f64::min, TensorLang::ClampMax),
        )?,
        // clamp(clamp(x, min=a), max=b) = clamp(x, a, b), when a <= b
        rule_fn(
            "clamp-min-max",
            "(clamp_max (clamp_min ?x ?a) ?b)",
            |egraph, subst| {
                let (a, b) = (fill(egraph, subst, "?a")?, fill(egraph, subst, "?b")?);
                if a.is_nan() || b.is_nan() || a > b {
                    return None;
                }
                let x = bound(subst, "?x")?;
                let (lo, hi) = (num(egraph, a), num(egraph, b));
                Some(egraph.add(TensorLang::Clamp([x, lo, hi])))
            },
        )?,
    ])
}
