//! Layout identities: chains of reshapes and permutes collapse (`transpose(transpose(x)) = x`
//! is a permute chain composing to the identity), views to a tensor's own shape vanish, and
//! elementwise ops move below views so that the ops on both sides of a view can meet.

use super::{Rule, bound, dims, dims_node, rule, rule_fn, rule_if};
use crate::Result;
use crate::simplify::language::TensorLang;

/// Unary elementwise ops that commute with every view.
const UNARY: [&str; 7] = ["neg", "relu", "abs", "exp", "sigmoid", "tanh", "sqrt"];
/// Scalar elementwise ops that commute with every view.
const SCALAR: [&str; 2] = ["mul_s", "add_s"];
/// Views that elementwise ops commute with.
const VIEWS: [&str; 3] = ["reshape", "permute", "expand"];

pub fn rules() -> Result<Vec<Rule>> {
    let mut rules = vec![
        // reshape(reshape(x, s), t) = reshape(x, t)
        rule(
            "reshape-reshape",
            "(reshape (reshape ?x ?s) ?t)",
            "(reshape ?x ?t)",
        )?,
        // reshape(x, shape(x)) = x (the shape guard admits only that case)
        rule("reshape-same-shape", "(reshape ?x ?s)", "?x")?,
        // expand(x, shape(x)) = x (the shape guard admits only that case)
        rule("expand-same-shape", "(expand ?x ?s)", "?x")?,
        // narrow(x, d, 0, size(x, d)) = x (a narrow keeping the shape starts at 0)
        rule("narrow-whole", "(narrow ?x ?n)", "?x")?,
        // permute(permute(x, p), q) = permute(x, [p[q[0]], p[q[1]], ...])
        rule_fn(
            "permute-permute",
            "(permute (permute ?x ?p) ?q)",
            |egraph, subst| {
                let (p, q) = (dims(egraph, subst, "?p")?, dims(egraph, subst, "?q")?);
                let composed: Vec<usize> = q
                    .iter()
                    .map(|&i| p.get(i).copied())
                    .collect::<Option<_>>()?;
                let x = bound(subst, "?x")?;
                let d = dims_node(egraph, composed);
                Some(egraph.add(TensorLang::Permute([x, d])))
            },
        )?,
        // permute(x, [0, 1, ..., n-1]) = x
        rule_if(
            "permute-identity",
            "(permute ?x ?p)",
            "?x",
            |egraph, _, subst| {
                dims(egraph, subst, "?p")
                    .is_some_and(|p| p.iter().enumerate().all(|(i, &d)| i == d))
            },
        )?,
        // contiguous(contiguous(x)) = contiguous(x)
        rule(
            "contiguous-contiguous",
            "(contiguous (contiguous ?x))",
            "(contiguous ?x)",
        )?,
    ];
    for view in VIEWS {
        for op in UNARY {
            // f(view(x)) = view(f(x)), for elementwise f
            rules.push(rule(
                &format!("{op}-below-{view}"),
                &format!("({op} ({view} ?x ?s))"),
                &format!("({view} ({op} ?x) ?s)"),
            )?);
        }
        for op in SCALAR {
            // view(x) op c = view(x op c)
            rules.push(rule(
                &format!("{op}-below-{view}"),
                &format!("({op} ({view} ?x ?s) ?c)"),
                &format!("({view} ({op} ?x ?c) ?s)"),
            )?);
        }
    }
    Ok(rules)
}
