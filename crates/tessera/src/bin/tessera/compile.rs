//! `tessera compile FILE`: compiles a graph artifact as `tessera::compile` does and reports
//! the compile time, the kernels generated and every node that fell back to its eager kernel.

use crate::failure::{Failure, Result};
use crate::inputs::parse_shape;
use crate::model_file::graph_module;
use crate::run::{NoCudaBackend, Runner, prepare};
use std::path::{Path, PathBuf};
use tessera::{CompileOptions, CompiledModule, Tensor, compile};

/// Compile a graph artifact and report what compiling did.
#[derive(clap::Args)]
pub struct Args {
    /// A graph artifact folder.
    file: PathBuf,
    /// The input's shape (`1,3,224,224`), once per input; default: the saved shapes.
    #[arg(long = "input-shape", value_parser = parse_shape)]
    input_shape: Vec<Vec<usize>>,
    /// The device to generate code for.
    #[arg(long, value_enum, default_value_t = Device::Cpu)]
    device: Device,
    /// Write the optimised graph, the kernel IR and the generated code of every kernel into
    /// this folder.
    #[arg(long = "dump-kernels", value_name = "DIR")]
    dump_kernels: Option<PathBuf>,
    /// Lower the graph as saved, without the inference passes.
    #[arg(long = "no-optimize")]
    no_optimize: bool,
}

/// What code is generated for.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Device {
    /// This machine's CPU (cranelift).
    Cpu,
    /// An NVIDIA GPU (PTX): refused, this build has no GPU code generator yet.
    Cuda,
}

pub fn run(args: &Args) -> Result<()> {
    let (traced, inputs) = prepare(&args.file, None, &args.input_shape, 0)?;
    if args.device == Device::Cuda {
        return Err(Failure::input(
            "device cuda",
            NoCudaBackend {
                instead: "--device cpu",
            },
        ));
    }
    let options = CompileOptions {
        optimize: !args.no_optimize,
        ..CompileOptions::default()
    };
    let compiled = compile(&graph_module(traced.clone()), &inputs, options)
        .map_err(|e| Failure::failed("compiling the graph", e))?;
    print!("{}", compiled.report());
    let expected = Runner::Interp(Box::new(traced)).run(&inputs)?;
    let got = compiled
        .run(&inputs)
        .map_err(|e| Failure::failed("running the compiled graph", e))?;
    println!(
        "largest difference from the interpreter: {:.3e}",
        largest_difference(&expected, &got)?
    );
    if let Some(dir) = &args.dump_kernels {
        dump(&compiled, dir)?;
    }
    Ok(())
}

/// The largest absolute difference between corresponding elements of two output lists.
fn largest_difference(expected: &[Tensor], got: &[Tensor]) -> Result<f64> {
    let mut largest = 0.0f64;
    for (e, g) in expected.iter().zip(got) {
        let difference = e
            .sub(g)
            .and_then(|d| d.abs())
            .and_then(|d| d.to_dtype(tessera::DType::F64))
            .and_then(|d| d.max_all())
            .and_then(|d| d.item::<f64>())
            .map_err(|err| Failure::failed("comparing with the interpreter", err))?;
        largest = largest.max(difference);
    }
    Ok(largest)
}

/// Writes `graph.txt` (the optimised graph that was lowered) and `kernels.txt` (the program,
/// each kernel's IR and its CLIF) into `dir`.
fn dump(compiled: &CompiledModule, dir: &Path) -> Result<()> {
    let write = |name: &str, text: String| {
        let path = dir.join(name);
        std::fs::write(&path, text)
            .map_err(|e| Failure::failed(format!("writing {}", path.display()), e))
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| Failure::failed(format!("creating {}", dir.display()), e))?;
    write("graph.txt", compiled.graph().to_string())?;
    write("kernels.txt", compiled.kernels())?;
    println!("wrote graph.txt and kernels.txt to {}", dir.display());
    Ok(())
}
