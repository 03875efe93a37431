//! Opening FILE: a graph artifact folder, a `.pt`/`.pth` state dict or a `.safetensors` file.

use crate::failure::{Failure, Result};
use std::path::Path;
use tessera::fx::GraphModule;
use tessera::fx::artifact;
use tessera::fx::trace::TracedGraph;
use tessera::nn::{StateDict, load_pt_state_dict, load_safetensors};

/// What a model file holds.
pub enum ModelFile {
    Artifact(TracedGraph),
    StateDict(StateDict, Format),
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Format {
    Pt,
    Safetensors,
}

impl Format {
    /// The format a path's extension names, if any.
    pub fn of(path: &Path) -> Option<Format> {
        match path.extension()?.to_str()? {
            "pt" | "pth" | "bin" => Some(Format::Pt),
            "safetensors" => Some(Format::Safetensors),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Pt => "PyTorch .pt state dict",
            Format::Safetensors => "safetensors file",
        }
    }
}

pub fn open(path: &Path) -> Result<ModelFile> {
    let shown = path.display().to_string();
    if path.is_dir() {
        let traced = artifact::load(path).map_err(|e| Failure::input(&shown, e))?;
        return Ok(ModelFile::Artifact(traced));
    }
    if !path.exists() {
        return Err(Failure::usage(format!("{shown}: no such file or folder")));
    }
    let format = match Format::of(path) {
        Some(format) => format,
        None => sniff(path).map_err(|e| Failure::input(&shown, e))?,
    };
    let dict = match format {
        Format::Pt => load_pt_state_dict(path),
        Format::Safetensors => load_safetensors(path),
    }
    .map_err(|e| Failure::input(format!("{shown} (read as a {})", format.name()), e))?;
    Ok(ModelFile::StateDict(dict, format))
}

/// A zip (what `torch.save` writes) is a `.pt`; anything else is read as safetensors.
fn sniff(path: &Path) -> std::io::Result<Format> {
    use std::io::Read;
    let mut magic = [0u8; 2];
    let read = std::fs::File::open(path)?.read(&mut magic)?;
    Ok(if read == 2 && &magic == b"PK" {
        Format::Pt
    } else {
        Format::Safetensors
    })
}

/// FILE as a graph; a state dict holds no graph and is refused with a hint.
pub fn open_graph(path: &Path) -> Result<TracedGraph> {
    match open(path)? {
        ModelFile::Artifact(traced) => Ok(traced),
        ModelFile::StateDict(_, format) => Err(Failure::usage(format!(
            "{}: a {} holds weights but no graph; this command needs a graph artifact \
             (the folder GraphModule::save writes)",
            path.display(),
            format.name()
        ))),
    }
}

/// A loaded graph as a module whose weights are its constants, so passes and the
/// interpreter can read them under their names (`conv1.weight`).
pub fn graph_module(traced: TracedGraph) -> GraphModule {
    let mut gm = GraphModule::from_graph(traced.graph);
    gm.constants = traced.attributes;
    gm
}
