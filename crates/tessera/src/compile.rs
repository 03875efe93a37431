//! `tessera::compile`, PyTorch's `torch.compile` for inference: a graph module's module calls
//! are inlined, the inference passes run, fusion groups are lowered to kernels
//! (`tessera-kernel`) and the kernels JIT-compiled (`tessera-cpu`). What the lowering does not
//! cover runs its eager kernel inside the compiled program, so compiling never fails on an
//! op; [`CompiledModule::report`] lists every node that fell back and why.

mod dump;

pub use dump::DUMP_KERNELS_ENV;

use crate::fx::trace::{TracedGraph, inline, trace};
use crate::fx::{FxError, GraphModule};
use crate::nn::{Layer, Module, ModuleExt, Sequential};
use crate::passes::{Pass, PassError};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_cpu::{CpuError, JitProgram};
use tessera_kernel::{
    BoxError, Environment, Fallback, Interpreter, KernelError, Program, StepTimer, lower,
    run_program_timed,
};
use tessera_tensor::{Layout, Tensor};

/// How a compiled program runs its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// Native code from cranelift (the default).
    #[default]
    Jit,
    /// The kernel-IR interpreter: slow, the executable specification.
    Interpreter,
}

/// What [`compile`] does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompileOptions {
    /// Run the inference passes (batch-norm folding, clean-up, simplification) before lowering.
    pub optimize: bool,
    pub backend: Backend,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            optimize: true,
            backend: Backend::Jit,
        }
    }
}

/// Errors of compiling or running a compiled module.
#[derive(Debug, thiserror::Error)]
pub enum CompileError {
    /// Inlining the graph module's module calls failed.
    #[error("inlining module calls: {source}")]
    Inline {
        #[source]
        source: Box<FxError>,
    },
    /// Tracing a layer failed.
    #[error("tracing: {source}")]
    Trace {
        #[source]
        source: Box<FxError>,
    },
    /// The graph does not fit inputs of these shapes.
    #[error("the graph does not fit the inputs' shapes: {source}")]
    Shapes {
        #[source]
        source: Box<FxError>,
    },
    /// Lowering or running the program failed.
    #[error(transparent)]
    Kernel(#[from] KernelError),
    /// The CPU backend failed (a cranelift verifier error is a bug of the renderer).
    #[error(transparent)]
    Cpu(#[from] CpuError),
    /// Writing the kernels into a folder failed.
    #[error("writing the kernels into {dir}: {source}")]
    Dump {
        dir: String,
        #[source]
        source: std::io::Error,
    },
}

/// What compiling did: the passes run (and those skipped because they failed), the kernels
/// generated, the nodes that fell back, and how long each stage took.
#[derive(Debug, Clone, Default)]
pub struct CompileReport {
    pub passes: Vec<&'static str>,
    /// Passes that failed on this graph, with the error; their changes were undone.
    pub skipped_passes: Vec<(&'static str, String)>,
    pub kernels: usize,
    pub fallbacks: Vec<Fallback>,
    pub compile_time: Duration,
    /// How many programs were compiled (one per distinct input shapes and layouts).
    pub compiles: usize,
}

impl fmt::Display for CompileReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} kernels, {} fallbacks, compiled in {:.2?} ({} compiles)",
            self.kernels,
            self.fallbacks.len(),
            self.compile_time,
            self.compiles
        )?;
        writeln!(f, "passes: {}", self.passes.join(", "))?;
        for (pass, error) in &self.skipped_passes {
            writeln!(f, "skipped pass {pass}: {error}")?;
        }
        for fb in &self.fallbacks {
            writeln!(f, "fallback {fb}")?;
        }
        Ok(())
    }
}

/// A program and its compiled code.
pub(crate) struct Compiled {
    pub(crate) program: Program,
    jit: Option<JitProgram>,
}

/// A graph module compiled for inference: call [`CompiledModule::run`] with inputs like the
/// examples it was compiled for; inputs of other shapes or strides compile again (cached).
/// Parameters are frozen at compile time: compile again after loading a new state dict.
pub struct CompiledModule {
    /// The inlined, optimised graph module whose constants hold every attribute.
    gm: GraphModule,
    options: CompileOptions,
    programs: Mutex<HashMap<Vec<(Layout, tessera_tensor::DType)>, Arc<Compiled>>>,
    report: Mutex<CompileReport>,
}

/// The graph module's attributes (parameters, buffers, constants) by qualified name.
fn attributes(gm: &GraphModule) -> IndexMap<String, Tensor> {
    let root = gm.as_module();
    let mut attributes: IndexMap<String, Tensor> = IndexMap::new();
    for (name, p) in root.named_parameters() {
        attributes.insert(name, p.detach());
    }
    for (name, b) in root.named_buffers() {
        attributes.insert(name, b.detach());
    }
    attributes.extend(gm.constants.iter().map(|(k, v)| (k.clone(), v.clone())));
    attributes
}

/// The inference passes, in order: batch norm folds into the convolution before it, then the
/// clean-up pipeline (dropout/identity removal, constant folding, CSE, DCE), then algebraic
/// simplification, whose rewrites the clean-up has exposed.
fn inference_passes() -> Vec<Box<dyn Pass>> {
    let mut passes: Vec<Box<dyn Pass>> = vec![Box::new(crate::passes::FoldBatchNorm)];
    for name in [
        "remove_dropout_identity",
        "constant_fold",
        "common_subexpression_elimination",
        "dead_code_elimination",
    ] {
        if let Ok(p) = crate::passes::registry::by_name(name) {
            passes.push(p);
        }
    }
    passes.push(Box::new(crate::passes::Simplify::default()));
    passes.push(Box::new(crate::passes::DeadCodeElimination));
    passes
}

/// Compiles `gm` for inputs like `example_inputs` (their shapes, dtypes and strides).
pub fn compile(
    gm: &GraphModule,
    example_inputs: &[Tensor],
    options: CompileOptions,
) -> Result<CompiledModule, CompileError> {
    let start = Instant::now();
    let mut traced = TracedGraph {
        graph: gm.graph.clone(),
        attributes: attributes(gm),
    };
    inline(&mut traced, gm.as_module(), |_| true).map_err(|e| CompileError::Inline {
        source: Box::new(e),
    })?;
    let root: Arc<dyn Module> = Arc::new(Sequential::new());
    let attributes = std::mem::take(&mut traced.attributes);
    let mut inlined = GraphModule::new(root, traced);
    inlined.constants = attributes;
    let mut report = CompileReport::default();
    if options.optimize {
        for pass in inference_passes() {
            let (graph, constants) = (inlined.graph.clone(), inlined.constants.clone());
            match pass.run(&mut inlined).and_then(|_| {
                inlined.graph.verify().map_err(|source| PassError::Verify {
                    pass: pass.name().into(),
                    source,
                })
            }) {
                Ok(()) => report.passes.push(pass.name()),
                Err(e) => {
                    inlined.graph = graph;
                    inlined.constants = constants;
                    report.skipped_passes.push((pass.name(), e.to_string()));
                }
            }
        }
    }
    let compiled = CompiledModule {
        gm: inlined,
        options,
        programs: Mutex::new(HashMap::new()),
        report: Mutex::new(report),
    };
    compiled.program_for(example_inputs)?;
    if let Ok(mut r) = compiled.report.lock() {
        r.compile_time = start.elapsed();
    }
    Ok(compiled)
}

/// Traces `layer` for inputs like `example`, then [`compile`]s the graph.
pub fn compile_layer<M: Layer + 'static>(
    layer: Arc<M>,
    example: &Tensor,
    options: CompileOptions,
) -> Result<CompiledModule, CompileError> {
    let traced = trace(&*layer, example, crate::fx::trace::LeafPolicy::default()).map_err(|e| {
        CompileError::Trace {
            source: Box::new(e),
        }
    })?;
    let gm = GraphModule::new(layer, traced);
    compile(&gm, std::slice::from_ref(example), options)
}

impl CompiledModule {
    /// The compiled program for inputs like `inputs`, compiling it on first use.
    fn program_for(&self, inputs: &[Tensor]) -> Result<Arc<Compiled>, CompileError> {
        let key: Vec<(Layout, tessera_tensor::DType)> =
            inputs.iter().map(|t| (t.layout(), t.dtype())).collect();
        let mut programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = programs.get(&key) {
            return Ok(p.clone());
        }
        let mut graph = self.gm.graph.clone();
        let metas: Vec<tessera_tensor::TensorMeta> = inputs.iter().map(Tensor::meta).collect();
        let traced_metas: Vec<tessera_tensor::TensorMeta> = graph
            .placeholders()
            .iter()
            .filter_map(|p| graph.node(p).ok()?.meta.first().cloned())
            .collect();
        if metas != traced_metas {
            let mut interpreter = crate::fx::interpreter::GraphInterpreter {
                root: self.gm.as_module(),
                constants: Some(&self.gm.constants),
            };
            crate::fx::shape_prop::propagate_shapes(&mut graph, &mut interpreter, &metas).map_err(
                |e| CompileError::Shapes {
                    source: Box::new(e),
                },
            )?;
        }
        let layouts: Vec<Layout> = key.iter().map(|(l, _)| l.clone()).collect();
        let program = lower(&graph, &layouts)?;
        let jit = match self.options.backend {
            Backend::Jit => Some(JitProgram::compile(&program)?),
            Backend::Interpreter => None,
        };
        let mut report = self.report.lock().unwrap_or_else(|e| e.into_inner());
        report.kernels = program.kernels().count();
        report.fallbacks = program.fallbacks.clone();
        report.compiles += 1;
        let compiled = Arc::new(Compiled { program, jit });
        if let Some(dir) = std::env::var_os(DUMP_KERNELS_ENV) {
            dump_compiled(std::path::Path::new(&dir), &compiled)?;
        }
        programs.insert(key, compiled.clone());
        Ok(compiled)
    }

    /// Runs the compiled program on `inputs` (one per graph input, in order).
    pub fn run(&self, inputs: &[Tensor]) -> Result<Vec<Tensor>, CompileError> {
        self.run_timed(inputs, None).map(|(outputs, _)| outputs)
    }

    /// [`CompiledModule::run`], calling `timer` after each step of the program, which it
    /// returns with the outputs (the profiler names the steps from it).
    pub(crate) fn run_timed(
        &self,
        inputs: &[Tensor],
        timer: Option<StepTimer<'_>>,
    ) -> Result<(Vec<Tensor>, Arc<Compiled>), CompileError> {
        let compiled = self.program_for(inputs)?;
        let env = Attributes(&self.gm);
        let program = &compiled.program;
        let outputs = match &compiled.jit {
            Some(jit) => run_program_timed(program, &env, jit, inputs, timer)?,
            None => run_program_timed(program, &env, &Interpreter, inputs, timer)?,
        };
        Ok((outputs, compiled.clone()))
    }

    /// What compiling did (for the most recently compiled input shapes).
    pub fn report(&self) -> CompileReport {
        self.report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The program, the kernel IR of each kernel and, with the JIT backend, its CLIF text,
    /// for every compiled input signature.
    pub fn kernels(&self) -> String {
        let programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::new();
        for compiled in programs.values() {
            text.push_str(&compiled.program.to_string());
            if let Some(jit) = &compiled.jit {
                for k in jit.kernels() {
                    text.push_str(&format!("\n; CLIF of {}\n{}", k.name, k.clif));
                }
            }
        }
        text
    }

    /// Writes every compiled program's kernels into `dir` (what `TESSERA_DUMP_KERNELS=DIR`
    /// does as programs are compiled): `program.txt`, and per kernel `NAME.kir` (kernel IR)
    /// and `NAME.clif` (with the JIT backend). Programs for several input signatures share the
    /// folder; the last written wins for equal names.
    pub fn dump_kernels(&self, dir: impl AsRef<std::path::Path>) -> Result<(), CompileError> {
        let programs = self.programs.lock().unwrap_or_else(|e| e.into_inner());
        for compiled in programs.values() {
            dump_compiled(dir.as_ref(), compiled)?;
        }
        Ok(())
    }

    /// The optimised op-level graph that was lowered.
    pub fn graph(&self) -> &tessera_fx::Graph {
        &self.gm.graph
    }
}

fn dump_compiled(dir: &std::path::Path, compiled: &Compiled) -> Result<(), CompileError> {
    dump::dump_program(dir, &compiled.program, compiled.jit.as_ref()).map_err(|source| {
        CompileError::Dump {
            dir: dir.display().to_string(),
            source,
        }
    })
}

/// The compiled module's attributes, frozen at compile time.
struct Attributes<'a>(&'a GraphModule);

impl Environment for Attributes<'_> {
    fn attribute(&self, target: &str) -> Result<Tensor, BoxError> {
        self.0
            .constants
            .get(target)
            .cloned()
            .ok_or_else(|| format!("no attribute {target}").into())
    }

    fn call_module(&self, target: &str, _args: Vec<Tensor>) -> Result<Vec<Tensor>, BoxError> {
        Err(format!("module {target} was not inlined").into())
    }
}
