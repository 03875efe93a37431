//! `tessera convert model.pt -o model.safetensors` (and back): a state dict from one format
//! to the other, chosen by the output's extension.

use crate::failure::{Failure, Result};
use crate::model_file::{Format, ModelFile, open};
use std::path::PathBuf;
use tessera::nn::{save_pt_state_dict, save_safetensors};

/// Convert a state dict between PyTorch's .pt and safetensors.
#[derive(clap::Args)]
pub struct Args {
    /// A .pt/.pth state dict or a .safetensors file.
    file: PathBuf,
    /// The converted file: `.safetensors`, or `.pt`/`.pth`.
    #[arg(short, long)]
    output: PathBuf,
}

pub fn run(args: &Args) -> Result<()> {
    let dict = match open(&args.file)? {
        ModelFile::StateDict(dict, _) => dict,
        ModelFile::Artifact(traced) => traced.attributes.into_iter().collect(),
    };
    let format = Format::of(&args.output).ok_or_else(|| {
        Failure::usage(format!(
            "{}: name the output .safetensors, .pt or .pth",
            args.output.display()
        ))
    })?;
    match format {
        Format::Pt => save_pt_state_dict(&dict, &args.output),
        Format::Safetensors => save_safetensors(&dict, &args.output),
    }
    .map_err(|e| Failure::failed(format!("writing {}", args.output.display()), e))?;
    println!(
        "wrote {} tensors to {} ({})",
        dict.len(),
        args.output.display(),
        format.name()
    );
    Ok(())
}
