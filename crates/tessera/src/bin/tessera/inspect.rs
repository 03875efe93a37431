//! `tessera inspect FILE`: what a file holds. For a graph artifact: the printed graph, its
//! weights (parameters, trainable parameters, buffers), size and FLOPs per node; for a state
//! dict: the key/shape/dtype table and the same totals.

use crate::failure::{Failure, Result};
use crate::model_file::{ModelFile, open};
use crate::table::{Table, shape_text, thousands};
use crate::weights::{Totals, totals};
use serde_json::json;
use std::path::PathBuf;
use tessera::fx::NodeKind;
use tessera::fx::trace::TracedGraph;

/// Print a model file's graph or keys, parameters (total and trainable), buffers, size and
/// FLOPs.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder, a .pt/.pth state dict or a .safetensors file.
    file: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    json: bool,
}

pub fn run(args: &Args) -> Result<()> {
    match open(&args.file)? {
        ModelFile::Artifact(traced) => artifact(args, &traced),
        ModelFile::StateDict(dict, format) => {
            let t = totals(dict.iter());
            if args.json {
                let keys: Vec<_> = dict
                    .iter()
                    .map(|(k, v)| json!({"key": k, "shape": v.shape(), "dtype": format!("{:?}", v.dtype())}))
                    .collect();
                let doc = json!({
                    "kind": format.name(),
                    "keys": keys,
                    "parameters": t.parameters,
                    "trainable_parameters": t.trainable,
                    "buffers": t.buffers,
                    "bytes": t.bytes,
                });
                println!("{doc:#}");
                return Ok(());
            }
            let mut table = Table::new(&["Key", "Shape", "DType", "Elements"]);
            for (key, v) in dict.iter() {
                table.row(vec![
                    key.to_string(),
                    shape_text(&v.shape()),
                    format!("{:?}", v.dtype()),
                    thousands(v.numel() as u64),
                ]);
            }
            println!(
                "{}: {}, {} entries\n",
                args.file.display(),
                format.name(),
                dict.len()
            );
            print!("{}", table.render());
            print_totals(&t, None);
            Ok(())
        }
    }
}

fn print_totals(t: &Totals, flops: Option<u64>) {
    println!();
    println!("Parameters: {}", thousands(t.parameters));
    println!("Trainable:  {}", thousands(t.trainable));
    println!("Buffers:    {}", thousands(t.buffers));
    println!("Size:       {:.3} MB", t.bytes as f64 / 1e6);
    if let Some(flops) = flops {
        println!(
            "FLOPs:      {} ({:.2} MFLOPs)",
            thousands(flops),
            flops as f64 / 1e6
        );
    }
}

fn artifact(args: &Args, traced: &TracedGraph) -> Result<()> {
    let graph = &traced.graph;
    let t = totals(traced.attributes.iter().map(|(k, v)| (k.as_str(), v)));
    let mut per_node = Vec::new();
    for id in graph.nodes() {
        let node = graph
            .node(&id)
            .map_err(|e| Failure::failed("reading the graph", e))?;
        if let NodeKind::CallFunction { op } = &node.kind {
            let flops = tessera::passes::cost::op_flops(graph, &id)
                .map_err(|e| Failure::failed(format!("counting the FLOPs of %{}", node.name), e))?;
            per_node.push((node.name.clone(), op.name().to_string(), flops));
        }
    }
    let flops: u64 = per_node.iter().map(|(_, _, f)| f).sum();
    if args.json {
        let nodes: Vec<_> = per_node
            .iter()
            .map(|(name, op, flops)| json!({"node": name, "op": op, "flops": flops}))
            .collect();
        let doc = json!({
            "kind": "graph artifact",
            "graph": graph.to_string(),
            "nodes": nodes,
            "parameters": t.parameters,
            "trainable_parameters": t.trainable,
            "buffers": t.buffers,
            "bytes": t.bytes,
            "flops": flops,
        });
        println!("{doc:#}");
        return Ok(());
    }
    println!(
        "{}: graph artifact, {} nodes\n",
        args.file.display(),
        graph.len()
    );
    println!("{graph}");
    let mut table = Table::new(&["Node", "Op", "FLOPs"]);
    for (name, op, flops) in per_node.iter().filter(|(_, _, f)| *f > 0) {
        table.row(vec![format!("%{name}"), op.clone(), thousands(*flops)]);
    }
    if !table_is_empty(&per_node) {
        print!("{}", table.render());
    }
    print_totals(&t, Some(flops));
    Ok(())
}

fn table_is_empty(per_node: &[(String, String, u64)]) -> bool {
    per_node.iter().all(|(_, _, f)| *f == 0)
}
