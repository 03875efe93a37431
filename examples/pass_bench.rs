//! Times every registered pass on ResNet-18's traced graphs (module-level and op-level) and on
//! synthetic graphs of growing size, to show each pass's cost grows linearly with the graph.

use clap::Parser;
use std::sync::Arc;
use std::time::Instant;
use tessera::fx::trace::{LeafPolicy, TracedGraph, trace};
use tessera::fx::{Graph, GraphModule, NodeId};
use tessera::nn::layers::{BatchNorm2d, Conv2d, ReLU};
use tessera::nn::models::ResNet18;
use tessera::nn::{Module, ModuleExt, Sequential, repr};
use tessera::passes::registry;
use tessera::tensor::op::{BinaryOp, DropoutOp, ScalarOp, UnaryOp};
use tessera::tensor::{Op, TensorMeta};
use tessera::{DType, manual_seed};

type Error = Box<dyn std::error::Error>;

/// Builds a fresh graph module for each timed run.
type GraphBuilder = dyn Fn() -> Result<GraphModule, Error>;

#[derive(Parser)]
#[command(
    about = "Time every registered pass on ResNet-18 and on synthetic graphs of growing size"
)]
struct Args {
    /// Synthetic graph sizes, in nodes (approximate: whole blocks of 10 nodes).
    #[arg(long, value_delimiter = ',', default_value = "1250,2500,5000,10000")]
    sizes: Vec<usize>,
    /// Runs per measurement; the median is reported.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// A synthetic module-level graph of `blocks` blocks of ten nodes: conv, batch norm and ReLU
/// modules, a residual add, an eval dropout, a scalar multiply, a duplicated expression (for
/// CSE) and a dead node (for DCE).
fn synthetic(blocks: usize) -> Result<GraphModule, Error> {
    let mut root = Sequential::new();
    for _ in 0..blocks {
        root = root
            .add(Conv2d::new(8, 8, 1)?)
            .add(BatchNorm2d::new(8)?)
            .add(ReLU::new());
    }
    root.eval();
    let meta = TensorMeta::new([1, 8, 4, 4], DType::F32);
    let mut g = Graph::new();
    let mut x: NodeId = g.placeholder("x", meta.clone());
    for b in 0..blocks {
        let call = |g: &mut Graph, i: usize, input: &NodeId| -> Result<NodeId, Error> {
            let m = root.get_submodule(&(3 * b + i).to_string())?;
            Ok(g.call_module(
                &(3 * b + i).to_string(),
                m.kind(),
                &repr(m),
                &[input],
                vec![meta.clone()],
            )?)
        };
        let conv = call(&mut g, 0, &x)?;
        let bn = call(&mut g, 1, &conv)?;
        let relu = call(&mut g, 2, &bn)?;
        let sum = g.call_function(Op::Binary(BinaryOp::Add), &[&relu, &x])?;
        let drop = g.call_function(
            Op::Dropout(DropoutOp {
                p: 0.1,
                training: false,
            }),
            &[&sum],
        )?;
        let kept = g.getitem(&drop, 0)?;
        let half = Op::Scalar(ScalarOp {
            op: BinaryOp::Mul,
            value: 0.5,
            reversed: false,
        });
        let scaled = g.call_function(half.clone(), &[&kept])?;
        let again = g.call_function(half, &[&kept])?;
        let _dead = g.call_function(Op::Unary(UnaryOp::Tanh), &[&scaled])?;
        x = g.call_function(Op::Binary(BinaryOp::Add), &[&scaled, &again])?;
    }
    g.output(&[&x])?;
    let root: Arc<dyn Module> = Arc::new(root);
    Ok(GraphModule::new(root, TracedGraph::from(g)))
}

fn resnet18(policy: LeafPolicy) -> Result<GraphModule, Error> {
    let model = Arc::new(ResNet18::new(1000)?);
    model.eval();
    let graph = trace(
        &*model,
        TensorMeta::new([1, 3, 224, 224], DType::F32),
        policy,
    )?;
    Ok(GraphModule::new(model, graph))
}

/// The median time in milliseconds of running the registered pass `name` on fresh graphs.
fn time_pass(
    name: &str,
    runs: usize,
    build: &dyn Fn() -> Result<GraphModule, Error>,
) -> Result<f64, Error> {
    let mut times = Vec::new();
    for _ in 0..runs {
        let mut gm = build()?;
        let pass = registry::by_name(name)?;
        let start = Instant::now();
        pass.run(&mut gm)?;
        times.push(start.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn main() -> std::process::ExitCode {
    tessera::exit_code("pass_bench", run(&Args::parse()))
}

fn run(args: &Args) -> Result<(), Error> {
    if args.runs == 0 || args.sizes.is_empty() {
        return Err("--runs and --sizes must not be empty".into());
    }
    manual_seed(0);
    let names = registry::names();
    let mut graphs: Vec<(String, Box<GraphBuilder>)> = vec![
        (
            "ResNet-18 modules".into(),
            Box::new(|| resnet18(LeafPolicy::default())),
        ),
        (
            "ResNet-18 ops".into(),
            Box::new(|| resnet18(LeafPolicy::none())),
        ),
    ];
    for &size in &args.sizes {
        let blocks = size.div_ceil(10);
        graphs.push((
            format!("synthetic {}", 10 * blocks + 2),
            Box::new(move || synthetic(blocks)),
        ));
    }
    print!("| graph | nodes |");
    for name in &names {
        print!(" {name} ms |");
    }
    println!();
    println!("|---|---:|{}", "---:|".repeat(names.len()));
    for (label, build) in &graphs {
        let nodes = build()?.graph.len();
        print!("| {label} | {nodes} |");
        for name in &names {
            print!(" {:.2} |", time_pass(name, args.runs, build.as_ref())?);
        }
        println!();
    }
    Ok(())
}
