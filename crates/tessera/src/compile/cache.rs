//! A compiled module's in-memory cache of compiled code, keyed by the printed graph, the
//! inputs' layouts and dtypes, and the options. Code whose kernels take the batch at run
//! time is filed under its inputs with the batch left out, so every batch finds it; code
//! specialised to a batch under its exact inputs. A program found in the cache runs only when
//! its kernels are those the code was compiled for ([`Program::code_difference`]).

use super::CompileOptions;
use std::collections::HashMap;
use std::sync::Arc;
use tessera_cpu::JitProgram;
use tessera_kernel::Program;
use tessera_tensor::{DType, Layout};

/// The inputs of a call: each one's layout and dtype.
pub(super) type Signature = Vec<(Layout, DType)>;

/// What compiled code was made for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct CodeKey {
    graph: Arc<str>,
    /// With `any_batch`, the leading size and stride of every input are cleared.
    inputs: Signature,
    any_batch: bool,
    options: CompileOptions,
}

impl CodeKey {
    /// The key of code compiled for exactly `inputs`.
    pub(super) fn exact(graph: &Arc<str>, inputs: &Signature, options: &CompileOptions) -> Self {
        CodeKey {
            graph: graph.clone(),
            inputs: inputs.clone(),
            any_batch: false,
            options: options.clone(),
        }
    }

    /// The key of code that runs `inputs` at any batch (their leading size).
    pub(super) fn any_batch(
        graph: &Arc<str>,
        inputs: &Signature,
        options: &CompileOptions,
    ) -> Self {
        let inputs = inputs
            .iter()
            .map(|(layout, dtype)| {
                let mut layout = layout.clone();
                if let (Some(size), Some(stride)) =
                    (layout.shape.first_mut(), layout.strides.first_mut())
                {
                    *size = 0;
                    *stride = 0;
                }
                (layout, *dtype)
            })
            .collect();
        CodeKey {
            graph: graph.clone(),
            inputs,
            any_batch: true,
            options: options.clone(),
        }
    }
}

/// Compiled code and the program it was compiled from.
pub(super) struct Code {
    pub(super) program: Program,
    /// `None` with the interpreter backend, which runs the kernel IR itself.
    pub(super) jit: Option<Arc<JitProgram>>,
}

/// Every piece of code a compiled module has compiled.
#[derive(Default)]
pub(super) struct CodeCache(HashMap<CodeKey, Arc<Code>>);

impl CodeCache {
    /// The code filed under one of `keys` (in order) that runs `program`.
    pub(super) fn find(&self, keys: &[&CodeKey], program: &Program) -> Option<Arc<Code>> {
        keys.iter().find_map(|k| {
            self.0
                .get(*k)
                .filter(|code| code.program.code_difference(program).is_none())
                .cloned()
        })
    }

    pub(super) fn insert(&mut self, key: CodeKey, code: Arc<Code>) {
        self.0.insert(key, code);
    }
}
