//! `tessera`: inspect, summarise, draw, optimise, compile, run, benchmark, profile and convert saved
//! models from the command line.

mod bench;
mod compile;
mod convert;
mod draw;
mod failure;
mod inputs;
mod inspect;
mod model_file;
mod optimize;
mod profile;
mod run;
mod summary;
mod table;
mod weights;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Look at, transform and run models saved by Tessera or PyTorch.
///
/// FILE is a graph artifact (the folder `GraphModule::save` or `artifact::save` writes), a
/// PyTorch `.pt`/`.pth` state dict or a `.safetensors` file.
#[derive(Parser)]
#[command(name = "tessera", version, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    Inspect(inspect::Args),
    Summary(summary::Args),
    Draw(draw::Args),
    Optimize(optimize::Args),
    Compile(compile::Args),
    Run(run::Args),
    Bench(bench::Args),
    Profile(profile::Args),
    Convert(convert::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Inspect(args) => inspect::run(args),
        Command::Summary(args) => summary::run(args),
        Command::Draw(args) => draw::run(args),
        Command::Optimize(args) => optimize::run(args),
        Command::Compile(args) => compile::run(args),
        Command::Run(args) => run::run(args),
        Command::Bench(args) => bench::run(args),
        Command::Profile(args) => profile::run(args),
        Command::Convert(args) => convert::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            eprintln!("{}", failure.report());
            ExitCode::from(failure.exit_code())
        }
    }
}
