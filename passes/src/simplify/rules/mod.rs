//! The rewrite rules, one file per topic, each rule preceded by the identity it encodes, and
//! the applier every rule goes through: it checks the rule's condition, builds the right-hand
//! side, and unions it with the matched class only if both have the same shape and dtype.
//! That last check makes every rule safe under broadcasting and type promotion: `x * ones`
//! becomes `x` only where the product has `x`'s shape and dtype.

mod activation;
mod arithmetic;
mod layout;

use super::analysis::{ShapeAnalysis, TensorGraph};
use super::language::{Dims, Scalar, TensorLang};
use crate::{PassError, Result};
use egg::{Applier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

/// A rule of this crate's e-graph.
pub type Rule = Rewrite<TensorLang, ShapeAnalysis>;

/// Every rule, by topic.
pub fn all() -> Result<Vec<Rule>> {
    let mut rules = arithmetic::rules()?;
    rules.extend(activation::rules()?);
    rules.extend(layout::rules()?);
    Ok(rules)
}

/// A condition on a match: the e-graph, the matched class and the substitution.
pub type Condition = fn(&TensorGraph, Id, &Subst) -> bool;
/// A right-hand side computed from the match (e.g. a folded constant); `None` declines.
pub type Build = fn(&mut TensorGraph, &Subst) -> Option<Id>;

/// How a rule's right-hand side is made.
enum Rhs {
    Pattern(PatternAst<TensorLang>),
    Build(Build),
}

/// The applier of every rule: condition, right-hand side, then the shape and dtype guard.
struct Checked {
    rhs: Rhs,
    condition: Option<Condition>,
    /// The variables the right-hand side reads, which egg checks the left-hand side binds.
    vars: Vec<Var>,
}

impl Applier<TensorLang, ShapeAnalysis> for Checked {
    fn apply_one(
        &self,
        egraph: &mut TensorGraph,
        eclass: Id,
        subst: &Subst,
        _searcher_ast: Option<&PatternAst<TensorLang>>,
        _rule_name: Symbol,
    ) -> Vec<Id> {
        if let Some(condition) = self.condition
            && !condition(egraph, eclass, subst)
        {
            return Vec::new();
        }
        let new = match &self.rhs {
            Rhs::Pattern(ast) => egraph.add_instantiation(ast, subst),
            Rhs::Build(build) => match build(egraph, subst) {
                Some(id) => id,
                None => return Vec::new(),
            },
        };
        let (matched, built) = (&egraph[eclass].data.meta, &egraph[new].data.meta);
        if matched.is_none() || matched != built {
            return Vec::new();
        }
        if egraph.union(eclass, new) {
            vec![eclass]
        } else {
            Vec::new()
        }
    }

    fn vars(&self) -> Vec<Var> {
        self.vars.clone()
    }
}

fn pattern(name: &str, text: &str) -> Result<Pattern<TensorLang>> {
    text.parse()
        .map_err(|e| PassError::Unsupported(format!("simplify rule `{name}`: `{text}`: {e}")))
}

fn rewrite(name: &str, lhs: &str, rhs: Rhs, condition: Option<Condition>) -> Result<Rule> {
    let vars = match &rhs {
        Rhs::Pattern(ast) => Pattern::new(ast.clone()).vars(),
        Rhs::Build(_) => Vec::new(),
    };
    let applier = Checked {
        rhs,
        condition,
        vars,
    };
    Rewrite::new(name, pattern(name, lhs)?, applier)
        .map_err(|e| PassError::Unsupported(format!("simplify rule `{name}`: {e}")))
}

/// `lhs => rhs`, both patterns.
pub fn rule(name: &str, lhs: &str, rhs: &str) -> Result<Rule> {
    let rhs = Rhs::Pattern(pattern(name, rhs)?.ast);
    rewrite(name, lhs, rhs, None)
}

/// `lhs => rhs if condition`.
pub fn rule_if(name: &str, lhs: &str, rhs: &str, condition: Condition) -> Result<Rule> {
    let rhs = Rhs::Pattern(pattern(name, rhs)?.ast);
    rewrite(name, lhs, rhs, Some(condition))
}

/// `lhs => build(match)`.
pub fn rule_fn(name: &str, lhs: &str, build: Build) -> Result<Rule> {
    rewrite(name, lhs, Rhs::Build(build), None)
}

/// The class a pattern variable is bound to (`"?x"`); `None` if the pattern lacks it.
pub fn bound(subst: &Subst, var: &str) -> Option<Id> {
    subst.get(var.parse::<Var>().ok()?).copied()
}

/// The uniform value of the class bound to `var` (a scalar attribute or a constant tensor).
pub fn fill(egraph: &TensorGraph, subst: &Subst, var: &str) -> Option<f64> {
    egraph[bound(subst, var)?].data.fill
}

/// The dims attribute bound to `var`.
pub fn dims(egraph: &TensorGraph, subst: &Subst, var: &str) -> Option<Vec<usize>> {
    egraph[bound(subst, var)?].data.dims.clone()
}

/// Adds a scalar attribute.
pub fn num(egraph: &mut TensorGraph, value: f64) -> Id {
    egraph.add(TensorLang::Num(Scalar::new(value)))
}

/// Adds `node([x, c])`: the class bound to `?x` with the scalar attribute `c`.
pub fn with_scalar(
    egraph: &mut TensorGraph,
    subst: &Subst,
    node: fn([Id; 2]) -> TensorLang,
    c: f64,
) -> Option<Id> {
    let x = bound(subst, "?x")?;
    let c = num(egraph, c);
    Some(egraph.add(node([x, c])))
}

/// Adds a dims attribute.
pub fn dims_node(egraph: &mut TensorGraph, dims: Vec<usize>) -> Id {
    egraph.add(TensorLang::Dims(Dims(dims)))
}
