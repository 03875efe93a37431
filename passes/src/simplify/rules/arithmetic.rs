//! Arithmetic identities: neutral elements, double negation, reassociating scalar constants so
//! they fold into one, and turning a uniform constant tensor operand into a scalar attribute.
//! Floating-point folds (`(x * a) * b = x * (a * b)`) are exact up to rounding; the others are
//! exact, except `x + 0 = x`, which may differ in the sign of a zero.

use super::{Rule, fill, rule, rule_fn, rule_if, with_scalar};
use crate::Result;
use crate::simplify::analysis::TensorGraph;
use crate::simplify::language::TensorLang;
use egg::{Id, Subst};

fn is_uniform(egraph: &TensorGraph, subst: &Subst, var: &str, value: f64) -> bool {
    fill(egraph, subst, var) == Some(value)
}

/// Whether the constant tensor `?y` is all ones.
fn y_is_ones(egraph: &TensorGraph, _: Id, subst: &Subst) -> bool {
    is_uniform(egraph, subst, "?y", 1.0)
}

/// Whether the constant tensor `?y` is all zeros.
fn y_is_zeros(egraph: &TensorGraph, _: Id, subst: &Subst) -> bool {
    is_uniform(egraph, subst, "?y", 0.0)
}

/// `x op' folded`, where `folded` is computed from the match; declines non-finite results.
fn fold(
    egraph: &mut TensorGraph,
    subst: &Subst,
    value: impl Fn(f64, f64) -> f64,
    node: fn([Id; 2]) -> TensorLang,
) -> Option<Id> {
    let (a, b) = (fill(egraph, subst, "?a")?, fill(egraph, subst, "?b")?);
    let folded = value(a, b);
    if !folded.is_finite() {
        return None;
    }
    with_scalar(egraph, subst, node, folded)
}

/// `x op c`, where `c` is the uniform value of the constant tensor `?y`.
fn scalar_of_uniform(
    egraph: &mut TensorGraph,
    subst: &Subst,
    node: fn([Id; 2]) -> TensorLang,
) -> Option<Id> {
    let value = fill(egraph, subst, "?y")?;
    with_scalar(egraph, subst, node, value)
}

pub fn rules() -> Result<Vec<Rule>> {
    Ok(vec![
        // x * 1 = x
        rule("mul-one", "(mul_s ?x 1)", "?x")?,
        // x / 1 = x
        rule("div-one", "(div_s ?x 1)", "?x")?,
        // x + 0 = x (a zero result may change sign: -0 + 0 = +0)
        rule("add-zero", "(add_s ?x 0)", "?x")?,
        // x - 0 = x
        rule("sub-zero", "(sub_s ?x 0)", "?x")?,
        // x ** 1 = x
        rule("pow-one", "(pow_s ?x 1)", "?x")?,
        // x * -1 = -x
        rule("mul-minus-one", "(mul_s ?x -1)", "(neg ?x)")?,
        // -(-x) = x
        rule("neg-neg", "(neg (neg ?x))", "?x")?,
        // x - a = x + (-a), so subtraction chains fold like addition chains
        rule_fn("sub-to-add", "(sub_s ?x ?a)", |egraph, subst| {
            let a = fill(egraph, subst, "?a")?;
            with_scalar(egraph, subst, TensorLang::AddS, -a)
        })?,
        // (x * a) * b = x * (a * b), for scalars a and b
        rule_fn(
            "mul-mul-fold",
            "(mul_s (mul_s ?x ?a) ?b)",
            |egraph, subst| fold(egraph, subst, |a, b| a * b, TensorLang::MulS),
        )?,
        // (x + a) + b = x + (a + b), for scalars a and b
        rule_fn(
            "add-add-fold",
            "(add_s (add_s ?x ?a) ?b)",
            |egraph, subst| fold(egraph, subst, |a, b| a + b, TensorLang::AddS),
        )?,
        // (-x) * a = x * (-a)
        rule_fn("neg-mul-fold", "(mul_s (neg ?x) ?a)", |egraph, subst| {
            let a = fill(egraph, subst, "?a")?;
            with_scalar(egraph, subst, TensorLang::MulS, -a)
        })?,
        // x / a = x * (1 / a), when a is a power of two (so 1 / a is exact)
        rule_fn("div-pow2-to-mul", "(div_s ?x ?a)", |egraph, subst| {
            let a = fill(egraph, subst, "?a")?;
            let inverse = 1.0 / a;
            let exact = a.is_finite() && a != 0.0 && inverse.is_finite() && inverse * a == 1.0;
            let power_of_two = a.abs().log2().fract() == 0.0;
            if !(exact && power_of_two) {
                return None;
            }
            with_scalar(egraph, subst, TensorLang::MulS, inverse)
        })?,
        // x * y = x, when y is all ones (and broadcasting leaves x's shape, as every rule checks)
        rule_if("mul-ones", "(mul ?x ?y)", "?x", y_is_ones)?,
        // y * x = x, when y is all ones
        rule_if("ones-mul", "(mul ?y ?x)", "?x", y_is_ones)?,
        // x + y = x, when y is all zeros
        rule_if("add-zeros", "(add ?x ?y)", "?x", y_is_zeros)?,
        // y + x = x, when y is all zeros
        rule_if("zeros-add", "(add ?y ?x)", "?x", y_is_zeros)?,
        // x - y = x, when y is all zeros
        rule_if("sub-zeros", "(sub ?x ?y)", "?x", y_is_zeros)?,
        // x / y = x, when y is all ones
        rule_if("div-ones", "(div ?x ?y)", "?x", y_is_ones)?,
        // x * y = x * c, when every element of the constant tensor y is c
        rule_fn("mul-uniform", "(mul ?x ?y)", |egraph, subst| {
            scalar_of_uniform(egraph, subst, TensorLang::MulS)
        })?,
        // x + y = x + c, when every element of the constant tensor y is c
        rule_fn("add-uniform", "(add ?x ?y)", |egraph, subst| {
            scalar_of_uniform(egraph, subst, TensorLang::AddS)
        })?,
    ])
}
