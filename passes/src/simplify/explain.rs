//! The explanation of a simplify run: per region, its size, why the e-graph run stopped and
//! how large the e-graph grew; over all regions, how often each rule fired (sorted by name,
//! so the printed form is stable enough to snapshot).

use egg::StopReason;
use std::collections::BTreeMap;
use std::fmt;

/// Why the e-graph run of one region stopped.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// No rule could add anything new.
    Saturated,
    /// The iteration limit was reached.
    IterationLimit(usize),
    /// The e-graph grew past the node limit.
    NodeLimit(usize),
    /// The time limit ran out (the elapsed time is left out: it differs between runs).
    TimeLimit,
    /// Anything else egg reports.
    Other(String),
}

impl From<&StopReason> for Stop {
    fn from(reason: &StopReason) -> Self {
        match reason {
            StopReason::Saturated => Stop::Saturated,
            StopReason::IterationLimit(n) => Stop::IterationLimit(*n),
            StopReason::NodeLimit(n) => Stop::NodeLimit(*n),
            StopReason::TimeLimit(_) => Stop::TimeLimit,
            StopReason::Other(s) => Stop::Other(s.clone()),
        }
    }
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Saturated => write!(f, "saturated"),
            Stop::IterationLimit(n) => write!(f, "iteration limit ({n} iterations)"),
            Stop::NodeLimit(n) => write!(f, "node limit (e-graph reached {n} nodes)"),
            Stop::TimeLimit => write!(f, "time limit"),
            Stop::Other(s) => write!(f, "{s}"),
        }
    }
}

/// What happened to one region.
#[derive(Debug, Clone)]
pub struct RegionReport {
    /// The region's first node, naming it.
    pub first: String,
    pub nodes: usize,
    pub leaves: usize,
    pub roots: usize,
    pub stop: Stop,
    pub iterations: usize,
    pub egraph_nodes: usize,
    pub egraph_classes: usize,
    /// Whether the extracted terms replaced the region's nodes.
    pub rewritten: bool,
}

/// The explanation of one run of the simplify pass.
#[derive(Debug, Clone, Default)]
pub struct SimplifyReport {
    pub regions: Vec<RegionReport>,
    /// How many times each rule added a new equality, over all regions.
    pub rules: BTreeMap<String, usize>,
    pub nodes_before: usize,
    pub nodes_after: usize,
}

impl SimplifyReport {
    /// Whether any region was rewritten.
    pub fn changed(&self) -> bool {
        self.regions.iter().any(|r| r.rewritten)
    }

    /// The names of the rules that fired, sorted.
    pub fn fired(&self) -> Vec<&str> {
        self.rules.keys().map(String::as_str).collect()
    }
}

impl fmt::Display for SimplifyReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "nodes: {} -> {}", self.nodes_before, self.nodes_after)?;
        writeln!(f, "regions: {}", self.regions.len())?;
        for r in &self.regions {
            writeln!(
                f,
                "  region at %{}: {} nodes, {} leaves, {} roots; stopped: {} after {} \
                 iteration(s); e-graph {} nodes in {} classes; {}",
                r.first,
                r.nodes,
                r.leaves,
                r.roots,
                r.stop,
                r.iterations,
                r.egraph_nodes,
                r.egraph_classes,
                if r.rewritten {
                    "rewritten"
                } else {
                    "unchanged"
                }
            )?;
        }
        writeln!(f, "rules fired:")?;
        if self.rules.is_empty() {
            writeln!(f, "  (none)")?;
        }
        for (rule, count) in &self.rules {
            writeln!(f, "  {rule}: {count}")?;
        }
        Ok(())
    }
}
