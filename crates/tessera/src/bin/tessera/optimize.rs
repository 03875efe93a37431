//! `tessera optimize FILE --passes fold_batch_norm,structured_prune=0.3,... -o OUT`: runs the
//! passes through the pass manager (verifying after each), prints each pass's time and how
//! the graph changed, and writes the new artifact.

use crate::failure::{Failure, Result};
use crate::model_file::{graph_module, open_graph};
use std::collections::BTreeMap;
use std::path::PathBuf;
use tessera::fx::GraphModule;
use tessera::passes::{Pass, PassManager, StructuredPrune, registry};

/// Run passes on a graph artifact and save the result.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    #[arg(required_unless_present = "list")]
    file: Option<PathBuf>,
    /// Comma-separated pass names in order; `structured_prune=0.3` sets the pruned fraction.
    /// `tessera optimize --list` prints the names.
    #[arg(long, value_delimiter = ',', required_unless_present = "list")]
    passes: Vec<String>,
    /// Where to write the optimised artifact (a folder).
    #[arg(short, long, required_unless_present = "list")]
    output: Option<PathBuf>,
    /// Print the graph before and after every pass.
    #[arg(long)]
    dump: bool,
    /// List the pass names and exit.
    #[arg(long)]
    list: bool,
}

/// The pass a `name` or `name=value` spec asks for.
pub fn pass_of(spec: &str) -> Result<Box<dyn Pass>> {
    let (name, value) = match spec.split_once('=') {
        Some((n, v)) => (n.trim(), Some(v.trim())),
        None => (spec.trim(), None),
    };
    match (name, value) {
        ("structured_prune", Some(v)) => {
            let amount: f64 = v
                .parse()
                .ok()
                .filter(|a| (0.0..1.0).contains(a))
                .ok_or_else(|| {
                    Failure::usage(format!(
                        "structured_prune={v}: the amount must be in [0, 1)"
                    ))
                })?;
            Ok(Box::new(StructuredPrune::new(amount)))
        }
        (name, Some(v)) => Err(Failure::usage(format!(
            "pass `{name}` takes no value (got `{v}`)"
        ))),
        (name, None) => registry::by_name(name).map_err(|e| Failure::input("--passes", e)),
    }
}

/// The passes of `specs` in a manager that verifies after each.
pub fn manager_of(specs: &[String]) -> Result<PassManager> {
    let mut manager = PassManager::new();
    for spec in specs {
        manager.add(pass_of(spec)?);
    }
    Ok(manager)
}

/// Counts of each op and module kind, for showing what a pass changed.
pub fn op_counts(gm: &GraphModule) -> BTreeMap<String, i64> {
    let mut counts = BTreeMap::new();
    for id in gm.graph.nodes() {
        if let Ok(node) = gm.graph.node(&id) {
            let key = match &node.kind {
                tessera::fx::NodeKind::CallFunction { op } => op.name().to_string(),
                tessera::fx::NodeKind::CallModule { kind, .. } => kind.to_string(),
                tessera::fx::NodeKind::GetAttr { .. } => "get_attr".into(),
                _ => continue,
            };
            *counts.entry(key).or_insert(0) += 1;
        }
    }
    counts
}

/// `conv2d -1, batch_norm -2`: what differs between two op counts.
pub fn count_diff(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> String {
    let keys: std::collections::BTreeSet<&String> = before.keys().chain(after.keys()).collect();
    let changes: Vec<String> = keys
        .into_iter()
        .filter_map(|k| {
            let d = after.get(k).unwrap_or(&0) - before.get(k).unwrap_or(&0);
            (d != 0).then(|| format!("{k} {d:+}"))
        })
        .collect();
    if changes.is_empty() {
        "no change".into()
    } else {
        changes.join(", ")
    }
}

/// The weights the graph reads (`get_attr` targets).
fn read_targets(gm: &GraphModule) -> std::collections::BTreeSet<String> {
    gm.graph
        .nodes()
        .filter_map(|id| match &gm.graph.node(&id).ok()?.kind {
            tessera::fx::NodeKind::GetAttr { target } => Some(target.clone()),
            _ => None,
        })
        .collect()
}

/// Elements of the weights the graph reads.
fn parameter_count(gm: &GraphModule) -> usize {
    read_targets(gm)
        .iter()
        .filter_map(|t| gm.constants.get(t))
        .map(|t| t.numel())
        .sum()
}

/// What a pass changed: ops added or removed, and the weights' size when it changed.
fn changes(before: &BTreeMap<String, i64>, params_before: usize, gm: &GraphModule) -> String {
    let ops = count_diff(before, &op_counts(gm));
    let params = parameter_count(gm);
    match (params == params_before, ops.as_str()) {
        (true, _) => ops,
        (false, "no change") => format!("weights {params_before} -> {params}"),
        (false, _) => format!("{ops}; weights {params_before} -> {params}"),
    }
}

pub fn run(args: &Args) -> Result<()> {
    if args.list {
        for name in registry::names() {
            println!("{name}");
        }
        return Ok(());
    }
    let (Some(file), Some(output)) = (&args.file, &args.output) else {
        return Err(Failure::usage("FILE and --output are required"));
    };
    let mut gm = graph_module(open_graph(file)?);
    let mut total = std::time::Duration::ZERO;
    println!(
        "{:<24} {:>10}  {:>7}  changes",
        "pass", "time (ms)", "nodes"
    );
    for spec in &args.passes {
        let mut manager = manager_of(std::slice::from_ref(spec))?;
        manager.dump(args.dump);
        let before = op_counts(&gm);
        let params_before = parameter_count(&gm);
        let report = manager
            .run(&mut gm)
            .map_err(|e| Failure::failed(format!("pass {spec}"), e))?;
        for (pass, b, a) in &report.dumps {
            println!("--- before {pass}\n{b}\n--- after {pass}\n{a}");
        }
        for t in &report.timings {
            total += t.time;
            println!(
                "{:<24} {:>10.3}  {:>7}  {}",
                spec,
                t.time.as_secs_f64() * 1e3,
                format!("{}->{}", t.nodes_before, t.nodes_after),
                changes(&before, params_before, &gm)
            );
        }
    }
    println!("{:<24} {:>10.3}", "total", total.as_secs_f64() * 1e3);
    // Weights that passes replaced (the unfolded convolution's) are not saved.
    let read = read_targets(&gm);
    gm.constants.retain(|name, _| read.contains(name));
    gm.save(output)
        .map_err(|e| Failure::failed(format!("writing {}", output.display()), e))?;
    println!("wrote {}", output.display());
    Ok(())
}
