//! `tessera draw FILE -o graph.svg`: the graph drawn by Graphviz, nodes coloured by fusion
//! group; with `--passes`, one drawing before and after each pass.

use crate::failure::{Failure, Result};
use crate::model_file::{graph_module, open_graph};
use crate::optimize::manager_of;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use tessera::fx::Graph;

/// Draw a graph artifact as SVG, PNG or DOT.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    file: PathBuf,
    /// The drawing: `.svg` or `.png` (rendered by Graphviz `dot`) or `.dot`.
    #[arg(short, long)]
    output: PathBuf,
    /// Also draw the graph after each of these passes (`name.1-PASS.svg`, ...).
    #[arg(long, value_delimiter = ',')]
    passes: Vec<String>,
}

/// Fill colours for fusion groups (ColorBrewer's Paired, light tones first).
const PALETTE: [&str; 8] = [
    "#a6cee3", "#b2df8a", "#fb9a99", "#fdbf6f", "#cab2d6", "#ffff99", "#1f78b4", "#33a02c",
];

/// The graph in DOT with each fusion group's members filled in the group's colour.
pub fn coloured_dot(graph: &Graph) -> Result<String> {
    let grouping = tessera::passes::fusion_groups(graph)
        .map_err(|e| Failure::failed("grouping the graph for fusion", e))?;
    Ok(graph.to_dot_styled(&|name| {
        let id = graph.find(name)?;
        let group = grouping.group_of(&id)?;
        let colour = PALETTE[group.0 % PALETTE.len()];
        Some(format!("style=filled, fillcolor=\"{colour}\""))
    }))
}

pub fn run(args: &Args) -> Result<()> {
    let mut gm = graph_module(open_graph(&args.file)?);
    if args.passes.is_empty() {
        return render(&coloured_dot(&gm.graph)?, &args.output);
    }
    render(
        &coloured_dot(&gm.graph)?,
        &numbered(&args.output, 0, "input"),
    )?;
    for (i, spec) in args.passes.iter().enumerate() {
        manager_of(std::slice::from_ref(spec))?
            .run(&mut gm)
            .map_err(|e| Failure::failed(format!("pass {spec}"), e))?;
        let name = spec.split('=').next().unwrap_or(spec);
        render(
            &coloured_dot(&gm.graph)?,
            &numbered(&args.output, i + 1, name),
        )?;
    }
    Ok(())
}

/// `graph.svg` -> `graph.2-simplify.svg`.
fn numbered(path: &Path, index: usize, pass: &str) -> PathBuf {
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("graph");
    let ext = path.extension().and_then(|s| s.to_str()).unwrap_or("svg");
    path.with_file_name(format!("{stem}.{index}-{pass}.{ext}"))
}

/// Writes DOT text, or has Graphviz render it; without Graphviz the DOT text is written next
/// to the requested file with a hint.
fn render(dot: &str, output: &Path) -> Result<()> {
    let format = output.extension().and_then(|e| e.to_str()).unwrap_or("");
    let write = |path: &Path, bytes: &[u8]| {
        std::fs::write(path, bytes)
            .map_err(|e| Failure::failed(format!("writing {}", path.display()), e))
    };
    match format {
        "dot" | "gv" => write(output, dot.as_bytes())?,
        "svg" | "png" => match graphviz(dot, format) {
            Ok(image) => write(output, &image)?,
            Err(e) => {
                let fallback = output.with_extension("dot");
                write(&fallback, dot.as_bytes())?;
                eprintln!(
                    "tessera: Graphviz could not render {} ({e}); wrote the DOT text to {} \
                     instead. Install Graphviz (`apt-get install graphviz`) to draw SVG or PNG.",
                    output.display(),
                    fallback.display()
                );
                return Ok(());
            }
        },
        other => {
            return Err(Failure::usage(format!(
                "{}: cannot draw a `.{other}` file; use .svg, .png or .dot",
                output.display()
            )));
        }
    }
    println!("wrote {}", output.display());
    Ok(())
}

/// `dot -T<format>` on `dot`'s text.
fn graphviz(dot: &str, format: &str) -> std::io::Result<Vec<u8>> {
    let mut child = Command::new("dot")
        .arg(format!("-T{format}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?
        .write_all(dot.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&out.stderr).trim().to_string(),
        ));
    }
    Ok(out.stdout)
}
