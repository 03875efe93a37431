//! `tessera run FILE --input x.safetensors -o y.safetensors`: runs a graph artifact on given
//! (or random) inputs and writes or prints its outputs.

use crate::failure::{Failure, Result};
use crate::inputs::{parse_shape, random_inputs, read_inputs, reshape};
use crate::model_file::{graph_module, open_graph};
use std::path::PathBuf;
use tessera::Tensor;
use tessera::fx::artifact::run_standalone;
use tessera::fx::trace::TracedGraph;
use tessera::nn::{StateDict, save_safetensors};
use tessera::{CompileOptions, CompiledModule, compile};

/// How a graph is executed.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The reference interpreter: node by node, each through its eager kernel (a saved graph
    /// has no module code, so this is the nearest thing to an eager run).
    Interp,
    /// Compiled for this CPU by `tessera::compile` (kernels JIT-compiled with cranelift).
    Cpu,
    /// An NVIDIA GPU: refused, this build has no CUDA backend yet.
    Cuda,
}

impl Backend {
    pub fn name(self) -> &'static str {
        match self {
            Backend::Interp => "interp",
            Backend::Cpu => "cpu",
            Backend::Cuda => "cuda",
        }
    }
}

/// A graph ready to run on one backend: the graph itself for the interpreter, or its
/// compiled module.
pub enum Runner {
    Interp(Box<TracedGraph>),
    Compiled(Box<CompiledModule>),
}

impl Runner {
    /// Prepares `traced` to run on `backend` with inputs like `inputs` (compiling it for the
    /// CPU backend).
    pub fn new(traced: &TracedGraph, inputs: &[Tensor], backend: Backend) -> Result<Runner> {
        match backend {
            Backend::Interp => Ok(Runner::Interp(Box::new(traced.clone()))),
            Backend::Cpu => {
                let gm = graph_module(traced.clone());
                let compiled = compile(&gm, inputs, CompileOptions::default())
                    .map_err(|e| Failure::failed("compiling the graph", e))?;
                Ok(Runner::Compiled(Box::new(compiled)))
            }
            Backend::Cuda => Err(Failure::input(
                "backend cuda",
                NoCudaBackend {
                    instead: "--backend cpu or interp",
                },
            )),
        }
    }

    /// One run on `inputs`.
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>> {
        match self {
            Runner::Interp(traced) => {
                run_standalone(traced, inputs).map_err(|e| Failure::failed("running the graph", e))
            }
            Runner::Compiled(compiled) => compiled
                .run(inputs)
                .map_err(|e| Failure::failed("running the compiled graph", e)),
        }
    }
}

/// Why `--backend cuda` (or `compile --device cuda`) cannot run here.
#[derive(Debug, thiserror::Error)]
#[error(
    "this build of tessera has no CUDA backend (the GPU code generator is not part of it yet); use {instead}"
)]
pub struct NoCudaBackend {
    /// The option to use instead (`--backend cpu or interp`, `--device cpu`).
    pub instead: &'static str,
}

/// Run a graph artifact.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    file: PathBuf,
    /// A safetensors file of inputs, by placeholder name (or in order); default: random.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Random inputs of this shape (`1,3,32,32`), once per input, when --input is not given.
    #[arg(long = "input-shape", value_parser = parse_shape)]
    input_shape: Vec<Vec<usize>>,
    /// What runs the graph.
    #[arg(long, value_enum, default_value_t = Backend::Interp)]
    backend: Backend,
    /// Write the outputs (`output0`, `output1`, ...) to this safetensors file.
    #[arg(short, long)]
    output: Option<PathBuf>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
}

/// The graph (re-shaped to the requested inputs) and the inputs to run it on.
pub fn prepare(
    file: &std::path::Path,
    input: Option<&std::path::Path>,
    shapes: &[Vec<usize>],
    seed: u64,
) -> Result<(TracedGraph, Vec<Tensor>)> {
    let mut traced = open_graph(file)?;
    let inputs = match input {
        Some(path) => {
            let inputs = read_inputs(&traced.graph, path)?;
            let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape()).collect();
            reshape(&mut traced, &shapes)?;
            inputs
        }
        None => {
            reshape(&mut traced, shapes)?;
            random_inputs(&traced.graph, seed)?
        }
    };
    Ok((traced, inputs))
}

pub fn run(args: &Args) -> Result<()> {
    let (traced, inputs) = prepare(
        &args.file,
        args.input.as_deref(),
        &args.input_shape,
        args.seed,
    )?;
    let outputs = Runner::new(&traced, &inputs, args.backend)?.run(&inputs)?;
    match &args.output {
        Some(path) => {
            let mut dict = StateDict::new();
            for (i, t) in outputs.iter().enumerate() {
                dict.insert(format!("output{i}"), t.clone());
            }
            save_safetensors(&dict, path)
                .map_err(|e| Failure::failed(format!("writing {}", path.display()), e))?;
            println!("wrote {} outputs to {}", outputs.len(), path.display());
        }
        None => {
            for (i, t) in outputs.iter().enumerate() {
                println!("output{i}: {:?} {:?}\n{t}", t.dtype(), t.shape());
            }
        }
    }
    Ok(())
}
