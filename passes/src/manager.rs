//! [`PassManager`]: runs an ordered list of passes, verifying the IR after each (in tests and
//! debug builds, naming the pass on failure), timing each, and dumping the graph before and
//! after each pass when asked (`TESSERA_DUMP_PASSES=1` or [`PassManager::dump`]).

use crate::{Changed, Pass, PassError, Result};
use std::fmt;
use std::time::{Duration, Instant};
use tessera_fx::GraphModule;

/// The environment variable that turns on before/after dumps.
pub const DUMP_ENV: &str = "TESSERA_DUMP_PASSES";

/// An ordered pipeline of passes and how to run it.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
    /// Verify the IR after every pass (default: in debug builds, which includes tests).
    pub verify: bool,
    /// Record the printed graph before and after every pass (default: `TESSERA_DUMP_PASSES=1`).
    pub dump: bool,
}

/// What one pass did and how long it took.
#[derive(Debug, Clone)]
pub struct PassTiming {
    pub pass: &'static str,
    pub changed: Changed,
    pub time: Duration,
    pub nodes_before: usize,
    pub nodes_after: usize,
}

/// The record of one pipeline run: a timing per pass, and the dumps when requested.
#[derive(Debug, Clone, Default)]
pub struct PassReport {
    pub timings: Vec<PassTiming>,
    /// `(pass, graph before, graph after)`, when dumping was on.
    pub dumps: Vec<(&'static str, String, String)>,
}

impl PassReport {
    /// Whether any pass changed the graph.
    pub fn changed(&self) -> bool {
        self.timings.iter().any(|t| t.changed.is_changed())
    }

    /// The total time over all passes.
    pub fn total(&self) -> Duration {
        self.timings.iter().map(|t| t.time).sum()
    }
}

/// A table: one row per pass with its time, whether it changed the graph and node counts.
impl fmt::Display for PassReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let width = self
            .timings
            .iter()
            .map(|t| t.pass.len())
            .chain([4])
            .max()
            .unwrap_or(4);
        writeln!(
            f,
            "{:<width$}  {:>12}  {:>7}  {:>6}  {:>6}",
            "pass", "time", "changed", "before", "after"
        )?;
        for t in &self.timings {
            writeln!(
                f,
                "{:<width$}  {:>12}  {:>7}  {:>6}  {:>6}",
                t.pass,
                format!("{:.3?}", t.time),
                if t.changed.is_changed() { "yes" } else { "no" },
                t.nodes_before,
                t.nodes_after
            )?;
        }
        writeln!(
            f,
            "{:<width$}  {:>12}",
            "total",
            format!("{:.3?}", self.total())
        )
    }
}

impl Default for PassManager {
    fn default() -> Self {
        Self::new()
    }
}

impl PassManager {
    /// An empty pipeline; verification follows `debug_assertions`, dumping the environment.
    pub fn new() -> Self {
        PassManager {
            passes: Vec::new(),
            verify: cfg!(debug_assertions),
            dump: std::env::var(DUMP_ENV).is_ok_and(|v| v == "1"),
        }
    }

    /// Appends `pass` to the pipeline.
    pub fn add(&mut self, pass: Box<dyn Pass>) -> &mut Self {
        self.passes.push(pass);
        self
    }

    /// Turns before/after dumps on or off.
    pub fn dump(&mut self, on: bool) -> &mut Self {
        self.dump = on;
        self
    }

    /// The passes' names, in order.
    pub fn pass_names(&self) -> Vec<&'static str> {
        self.passes.iter().map(|p| p.name()).collect()
    }

    /// Runs every pass in order on `gm`; the first failure stops the pipeline and names the
    /// pass (its own error, or the verifier's report of the IR it left).
    pub fn run(&self, gm: &mut GraphModule) -> Result<PassReport> {
        let mut report = PassReport::default();
        for pass in &self.passes {
            let before = self.dump.then(|| gm.graph.to_string());
            let nodes_before = gm.graph.len();
            let start = Instant::now();
            let changed = pass.run(gm).map_err(|e| PassError::InPass {
                pass: pass.name().into(),
                source: Box::new(e),
            })?;
            let time = start.elapsed();
            if self.verify {
                gm.graph.verify().map_err(|source| PassError::Verify {
                    pass: pass.name().into(),
                    source,
                })?;
            }
            if let Some(before) = before {
                let after = gm.graph.to_string();
                eprintln!(
                    "=== before {} ===\n{before}=== after {} ===\n{after}",
                    pass.name(),
                    pass.name()
                );
                report.dumps.push((pass.name(), before, after));
            }
            report.timings.push(PassTiming {
                pass: pass.name(),
                changed,
                time,
                nodes_before,
                nodes_after: gm.graph.len(),
            });
        }
        Ok(report)
    }
}
