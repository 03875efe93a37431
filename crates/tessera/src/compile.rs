//! `tessera::compile`, PyTorch's `torch.compile` for inference: a graph module's module calls
//! are inlined, the inference passes run, fusion groups are lowered to kernels
//! (`tessera-kernel`) and the kernels JIT-compiled (`tessera-cpu`). What the lowering does not
//! cover runs its eager kernel inside the compiled program, so compiling never fails on an
//! op; [`CompiledModule::report`] lists every node that fell back and why.
//!
//! The batch (the leading size every input shares) is an argument of the compiled code where
//! the kernels allow it: a call at a new batch lowers the graph again for it (cheap) and runs
//! the code already compiled; other shape changes compile once, through an in-memory cache
//! keyed by graph, input layouts and dtypes, and options ([`CompiledModule::compile_count`]).

mod batch;
mod cache;
mod cuda;
mod dump;
mod module;
mod state_stamp;

pub use dump::DUMP_KERNELS_ENV;

use batch::{batch_of, reshaped_graph, with_batch};
use cache::{Code, CodeCache, CodeKey, Signature};
use state_stamp::StateStamp;

use crate::fx::trace::{TracedGraph, inline, trace};
use crate::fx::{FxError, GraphModule};
use crate::nn::{Layer, Module, ModuleCore, ModuleExt, Sequential};
use crate::passes::{Pass, PassError};
use indexmap::IndexMap;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tessera_cpu::{CpuError, JitProgram};
use tessera_cuda::{CudaProgram, HostStep};
use tessera_kernel::{
    BoxError, ConvChoice, Environment, Fallback, Interpreter, KernelError, KernelExecutor,
    LowerOptions, MemoryPlan, Program, StepTimer, WinogradPolicy, Workspace, lower_with,
    run_planned, run_planned_into, run_planned_updating,
};
use tessera_tensor::{Device, Layout, Tensor};

/// How a compiled program runs its kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Backend {
    /// Native code from cranelift (the default).
    #[default]
    Jit,
    /// The kernel-IR interpreter: slow, the executable specification.
    Interpreter,
}

/// What [`compile`] does.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CompileOptions {
    /// Run the inference passes (batch-norm folding, clean-up, simplification) before lowering.
    pub optimize: bool,
    /// How host code runs: every kernel on the CPU, or, on a CUDA device, the steps the
    /// device does not run (external GEMM/convolution calls without a device GEMM).
    pub backend: Backend,
    /// Where the program runs: `Device::Cpu` (the default), or `Device::Cuda(i)`: kernels
    /// rendered to PTX and run on that device, inputs and outputs CUDA tensors there.
    pub device: Device,
    /// On a CUDA device, capture each run of launches into a CUDA graph on the first call
    /// for an input signature and replay it on later calls (on by default).
    pub cuda_graphs: bool,
    /// Whether 3x3 stride-1 convolutions run as Winograd convolutions on the CPU: `Auto`
    /// (the default) where a cost rule estimates it faster, per convolution
    /// ([`CompileReport::convolutions`] says which and why); `Off`; or `Always(tile)`.
    /// Device programs run none.
    pub winograd: WinogradPolicy,
}

impl Default for CompileOptions {
    fn default() -> Self {
        CompileOptions {
            optimize: true,
            backend: Backend::Jit,
            device: Device::Cpu,
            cuda_graphs: true,
            winograd: WinogradPolicy::Auto,
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
    /// A module of the compiled tree has hooks, which compiled code would not run.
    #[error(
        "{module} has {hooks} forward or backward hook(s): compiled code does not run hooks; \
         remove them before compiling, or run the module eagerly"
    )]
    Hooks { module: String, hooks: usize },
    /// The CUDA device failed, or there is none ([`tessera_cuda::CudaError::DeviceUnavailable`]).
    #[error(transparent)]
    Cuda(#[from] tessera_cuda::CudaError),
    /// An input is not on the device the module was compiled for.
    #[error(
        "input {input} is on {found}, but the module was compiled for {expected}: move it with \
         to_device({expected})"
    )]
    InputDevice {
        input: String,
        expected: Device,
        found: Device,
    },
    /// `run_into` writes CPU outputs; a module compiled for a device returns its outputs.
    #[error("run_into is for modules compiled for the cpu; this one runs on {device}: use run")]
    RunIntoOnDevice { device: Device },
    /// A pass over the training step's joint graph failed.
    #[error("training step: pass {pass}: {source}")]
    TrainPass {
        pass: &'static str,
        #[source]
        source: Box<PassError>,
    },
    /// Tracing the loss or deriving the training step's joint graph failed.
    #[error("building the training step's graph: {source}")]
    TrainGraph {
        #[source]
        source: Box<FxError>,
    },
    /// The optimizer could not describe its step as update ops.
    #[error("recording the optimizer's step: {source}")]
    Optimizer {
        #[source]
        source: Box<crate::nn::NnError>,
    },
    /// A training step's graph is not what compiling a training step expects.
    #[error("training step: {reason}")]
    TrainStep { reason: String },
    /// Writing a compiled training step's new value into the tensor it updates (a parameter,
    /// a buffer, or an optimizer state tensor, named by `target`) failed.
    #[error("training step: writing the new value of {target}: {source}")]
    WriteBack {
        target: String,
        #[source]
        source: Box<tessera_tensor::TensorError>,
    },
    /// Moving an argument of a compiled training step (a learning rate, an optimizer state
    /// tensor kept on the CPU, such as Adam's step count) to the device the step runs on failed.
    #[error("training step: moving {what} to {device}: {source}")]
    ArgumentDevice {
        what: String,
        device: Device,
        #[source]
        source: Box<tessera_tensor::TensorError>,
    },
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
    /// The algorithm each convolution fused into a kernel runs, and why
    /// ([`CompileOptions::winograd`]).
    pub convolutions: Vec<ConvChoice>,
    pub compile_time: Duration,
    /// How many times code was compiled: once per input layouts and dtypes, but a new batch
    /// compiles nothing when [`CompileReport::batch`] is [`BatchMode::Dynamic`].
    pub compiles: usize,
    /// Whether the code last compiled runs any batch, or why not.
    pub batch: BatchMode,
    /// On a CUDA device: the steps of the last compiled program that run on the host, each
    /// with why (the op-level [`CompileReport::fallbacks`] run there too, as eager CUDA ops
    /// where the backend has them).
    pub host_steps: Vec<HostStep>,
    /// On a CUDA device: kernels launched on the device per call, and of those the GEMM or
    /// convolution tile kernels (epilogue fused).
    pub device_kernels: usize,
    pub device_products: usize,
    /// The bytes of the arena the intermediate values of the program compiled last share
    /// (its memory plan's; on a CUDA device, the device arena's).
    pub arena_bytes: usize,
    /// Kernel launches per call of the program compiled last: one per launch group (kernels
    /// writing only the program's outputs, such as a training step's parameter updates, run
    /// as one: [`tessera_kernel::launch_group`]), one per other kernel.
    pub launches: usize,
    /// The kernels of each launch group of that program.
    pub launch_groups: Vec<usize>,
}

/// Whether compiled code takes the batch (the leading size every input shares) at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchMode {
    /// Any batch runs the same code: its kernels take the batch as their outermost loop's
    /// range, an argument of the compiled code.
    Dynamic,
    /// Each batch compiles its own code, for the reason given.
    Specialised(String),
}

impl Default for BatchMode {
    fn default() -> Self {
        BatchMode::Specialised("nothing compiled yet".into())
    }
}

impl fmt::Display for BatchMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BatchMode::Dynamic => write!(f, "dynamic batch: any batch runs the same code"),
            BatchMode::Specialised(why) => write!(f, "batch specialised: {why}"),
        }
    }
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
        writeln!(f, "{}", self.batch)?;
        writeln!(f, "passes: {}", self.passes.join(", "))?;
        for (pass, error) in &self.skipped_passes {
            writeln!(f, "skipped pass {pass}: {error}")?;
        }
        if !self.launch_groups.is_empty() {
            let sizes: Vec<String> = self.launch_groups.iter().map(|n| n.to_string()).collect();
            writeln!(
                f,
                "{} launches per call (launch groups of {} kernels)",
                self.launches,
                sizes.join(", ")
            )?;
        }
        for fb in &self.fallbacks {
            writeln!(f, "fallback {fb}")?;
        }
        for c in &self.convolutions {
            writeln!(f, "convolution {c}")?;
        }
        if self.device_kernels > 0 || !self.host_steps.is_empty() {
            writeln!(
                f,
                "device: {} kernels ({} GEMM/convolution), arena of {} bytes",
                self.device_kernels, self.device_products, self.arena_bytes
            )?;
        }
        for h in &self.host_steps {
            writeln!(f, "host step {}: {}", h.step, h.reason)?;
        }
        Ok(())
    }
}

/// A program, its memory plan, its compiled code (compiled for this program, or for one
/// whose kernels differ only in what the code takes at run time), and the workspaces of its
/// runs (one per concurrent call, kept between calls so that warm calls allocate no arena).
pub(crate) struct Compiled {
    pub(crate) program: Program,
    plan: MemoryPlan,
    jit: Option<Arc<JitProgram>>,
    workspaces: Mutex<Vec<Workspace>>,
    /// The program prepared on the CUDA device (compiled for one).
    pub(crate) cuda: Option<CudaProgram>,
}

impl Compiled {
    fn new(program: Program, jit: Option<Arc<JitProgram>>) -> Compiled {
        Compiled {
            plan: MemoryPlan::new(&program),
            program,
            jit,
            workspaces: Mutex::new(Vec::new()),
            cuda: None,
        }
    }

    /// Runs `f` with a workspace of its own: a kept one, or a new one (its arena allocated)
    /// when every kept one is in use by another call; kept again afterwards.
    fn with_workspace<R>(&self, f: impl FnOnce(&mut Workspace) -> R) -> R {
        let kept = self
            .workspaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop();
        let mut ws = kept.unwrap_or_else(|| Workspace::new(&self.program, &self.plan));
        let r = f(&mut ws);
        self.workspaces
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ws);
        r
    }

    fn executor(&self) -> &dyn KernelExecutor {
        match &self.jit {
            Some(jit) => &**jit,
            None => &Interpreter,
        }
    }
}

/// A graph module compiled for inference, itself a module: its parameters, buffers and
/// `state_dict` keys are those of the module it was compiled from (shared, not copied), and
/// calling it runs the compiled program. A new batch runs the same code where the kernels
/// allow it ([`CompileReport::batch`]); inputs of other shapes or strides compile again
/// (cached); a parameter or buffer changed since compiling (`load_state_dict`, an optimizer
/// step, `set_data`) makes the next call prepare the graph again (folded weights), so the
/// program always runs the current weights; its code is compiled again only if the prepared
/// graph prints differently. Hooks are refused ([`CompileError::Hooks`]): compiled code runs none.
pub struct CompiledModule {
    core: ModuleCore,
    /// The module compiled, sharing its state with the caller's graph module.
    source: GraphModule,
    options: CompileOptions,
    prepared: Mutex<Prepared>,
    /// Compiled code, kept across state changes (it reads the weights when it runs).
    code: Mutex<CodeCache>,
    report: Mutex<CompileReport>,
}

/// The inlined, optimised graph module made from the source's current state, and the
/// programs compiled from it per input signature.
struct Prepared {
    /// Its constants hold every attribute (folded weights included).
    gm: Arc<GraphModule>,
    /// The source's parameters and buffers as they were when `gm` was made.
    stamp: StateStamp,
    /// `gm`'s printed graph, part of the code cache's keys.
    graph_text: Arc<str>,
    programs: HashMap<Signature, Arc<Compiled>>,
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

/// Compiles `gm` for inputs like `example_inputs` (their shapes, dtypes and strides). The
/// compiled module shares `gm`'s parameters and buffers.
pub fn compile(
    gm: &GraphModule,
    example_inputs: &[Tensor],
    options: CompileOptions,
) -> Result<CompiledModule, CompileError> {
    let start = Instant::now();
    // The graph module's tree and the traced module's own hooks (its tree's root is not a
    // child of the graph module).
    refuse_hooks(gm)?;
    refuse_hooks(gm.root())?;
    let source = gm.share();
    let mut report = CompileReport::default();
    let prepared = prepare(&source, &options, &mut report)?;
    let compiled = CompiledModule {
        core: ModuleCore::default(),
        source,
        options,
        prepared: Mutex::new(prepared),
        code: Mutex::new(CodeCache::default()),
        report: Mutex::new(report),
    };
    compiled.program_for(example_inputs)?;
    if let Ok(mut r) = compiled.report.lock() {
        r.compile_time = start.elapsed();
    }
    Ok(compiled)
}

/// How many forward and backward hooks `module` has (the hooks a call would run).
fn call_hooks(module: &dyn Module) -> usize {
    let c = module.hook_counts();
    c.forward_pre + c.forward + c.full_backward + c.backward_pre
}

/// Fails when a module of `module`'s tree (itself included) has forward or backward hooks.
fn refuse_hooks(module: &dyn Module) -> Result<(), CompileError> {
    for (path, m) in module.named_modules() {
        let hooks = call_hooks(m);
        if hooks > 0 {
            let module = match path.as_str() {
                "" => m.type_name(),
                path => format!("{path} ({})", m.type_name()),
            };
            return Err(CompileError::Hooks { module, hooks });
        }
    }
    Ok(())
}

/// Inlines `source`'s module calls and runs the inference passes (recording them in
/// `report`): the graph module the programs are lowered from, stamped with the state it read.
fn prepare(
    source: &GraphModule,
    options: &CompileOptions,
    report: &mut CompileReport,
) -> Result<Prepared, CompileError> {
    let stamp = StateStamp::of(source);
    let mut traced = TracedGraph {
        graph: source.graph.clone(),
        attributes: attributes(source),
    };
    inline(&mut traced, source.as_module(), |_| true).map_err(|e| CompileError::Inline {
        source: Box::new(e),
    })?;
    let root: Arc<dyn Module> = Arc::new(Sequential::new());
    let attributes = std::mem::take(&mut traced.attributes);
    let mut inlined = GraphModule::new(root, traced);
    inlined.constants = attributes;
    report.passes.clear();
    report.skipped_passes.clear();
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
    Ok(Prepared {
        graph_text: inlined.graph.to_string().into(),
        gm: Arc::new(inlined),
        stamp,
        programs: HashMap::new(),
    })
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
    /// The compiled program for inputs like `inputs` and the graph module it was lowered
    /// from, preparing again when the source's state changed and compiling on first use.
    fn program_for(
        &self,
        inputs: &[Tensor],
    ) -> Result<(Arc<Compiled>, Arc<GraphModule>), CompileError> {
        let mut prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        if !prepared.stamp.is_current(&self.source) {
            let mut report = self.report.lock().unwrap_or_else(|e| e.into_inner());
            *prepared = prepare(&self.source, &self.options, &mut report)?;
        }
        let gm = prepared.gm.clone();
        // The inputs' signature compared in place (a warm call builds no key).
        let cached = prepared.programs.iter().find(|(key, _)| {
            key.len() == inputs.len()
                && key
                    .iter()
                    .zip(inputs)
                    .all(|((l, d), t)| t.with_layout(|tl, td| tl == l && td == *d))
        });
        if let Some((_, p)) = cached {
            return Ok((p.clone(), gm));
        }
        let key: Signature = inputs.iter().map(|t| (t.layout(), t.dtype())).collect();
        let metas: Vec<tessera_tensor::TensorMeta> = inputs.iter().map(Tensor::meta).collect();
        let layouts: Vec<Layout> = match self.options.device {
            // Inputs are copied packed into fixed places on the device.
            Device::Cuda(_) => metas.iter().map(|m| Layout::contiguous(&m.shape)).collect(),
            _ => key.iter().map(|(l, _)| l.clone()).collect(),
        };
        let program = lower_with(
            &reshaped_graph(&gm, &metas)?,
            &layouts,
            lower_options(&self.options),
        )?;
        let code = self.code_for(&gm, &prepared.graph_text, &key, &metas, program)?;
        let mut compiled = Compiled::new(code.0, code.1);
        self.report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .arena_bytes = compiled.plan.arena_bytes();
        if let Device::Cuda(ordinal) = self.options.device {
            let program = cuda::prepare(&compiled, &gm, ordinal, self.options.cuda_graphs)?;
            let mut report = self.report.lock().unwrap_or_else(|e| e.into_inner());
            report.host_steps = program.host_steps().to_vec();
            report.device_kernels = program.device_kernels();
            report.device_products = program.device_products();
            report.arena_bytes = program.arena_bytes();
            compiled.cuda = Some(program);
        }
        let compiled = Arc::new(compiled);
        prepared.programs.insert(key, compiled.clone());
        Ok((compiled, gm))
    }

    /// The code that runs `program` (lowered from `gm` for inputs `key` of `metas`), from the
    /// cache or compiled now; with the program to run.
    fn code_for(
        &self,
        gm: &GraphModule,
        graph_text: &Arc<str>,
        key: &Signature,
        metas: &[tessera_tensor::TensorMeta],
        program: Program,
    ) -> Result<(Program, Option<Arc<JitProgram>>), CompileError> {
        let batch = batch_of(metas);
        let exact = CodeKey::exact(graph_text, key, &self.options);
        let any_batch = CodeKey::any_batch(graph_text, key, &self.options);
        let keys: Vec<&CodeKey> = match batch {
            Some(_) => vec![&any_batch, &exact],
            None => vec![&exact],
        };
        let mut cache = self.code.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(code) = cache.find(&keys, &program) {
            return Ok((program, code.jit.clone()));
        }
        let jit = match self.options.backend {
            Backend::Jit => Some(Arc::new(JitProgram::compile(&program)?)),
            Backend::Interpreter => None,
        };
        let mode = match batch {
            Some(b) => batch_mode(&self.options, gm, key, metas, b, &program),
            None => BatchMode::Specialised(
                "the inputs share no leading size (or one is a scalar)".into(),
            ),
        };
        let code = Arc::new(Code {
            program: program.clone(),
            jit: jit.clone(),
        });
        cache.insert(
            if mode == BatchMode::Dynamic {
                any_batch
            } else {
                exact
            },
            code.clone(),
        );
        let mut report = self.report.lock().unwrap_or_else(|e| e.into_inner());
        report.kernels = program.kernels().count();
        report.launches = program.launches(0..program.steps.len());
        report.launch_groups = program.launch_groups.iter().map(|g| g.len()).collect();
        report.fallbacks = program.fallbacks.clone();
        report.convolutions = program.convolutions.clone();
        report.compiles += 1;
        report.batch = mode;
        if let Some(dir) = std::env::var_os(DUMP_KERNELS_ENV) {
            dump_program(std::path::Path::new(&dir), &program, jit.as_deref())?;
        }
        Ok((program, jit))
    }

    /// How many times this module compiled code ([`CompileReport::compiles`]).
    pub fn compile_count(&self) -> usize {
        self.report
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .compiles
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
        self.check_hooks()?;
        cuda::check_devices(self.options.device, inputs)?;
        let (compiled, gm) = self.program_for(inputs)?;
        if let Some(device_program) = &compiled.cuda {
            let outputs = device_program.run(inputs, compiled.executor())?;
            return Ok((outputs, compiled));
        }
        let env = Attributes(&gm);
        let (program, plan) = (&compiled.program, &compiled.plan);
        let outputs = compiled.with_workspace(|ws| {
            run_planned(program, plan, ws, &env, compiled.executor(), inputs, timer)
        })?;
        Ok((outputs, compiled))
    }

    /// Runs the compiled program on `inputs`, writing its outputs into `outputs` (PyTorch's
    /// `out=`): one tensor per program output, of its shape and dtype, contiguous, on the
    /// CPU, sharing storage with no input, weight or other output (a typed error names the
    /// output and both shapes). Kernels write straight into them; once warm, a call whose
    /// outputs are all computed by kernels allocates nothing.
    pub fn run_into(&self, inputs: &[Tensor], outputs: &[Tensor]) -> Result<(), CompileError> {
        self.check_hooks()?;
        if self.options.device != Device::Cpu {
            return Err(CompileError::RunIntoOnDevice {
                device: self.options.device,
            });
        }
        let (compiled, gm) = self.program_for(inputs)?;
        let env = Attributes(&gm);
        let (program, plan) = (&compiled.program, &compiled.plan);
        compiled.with_workspace(|ws| {
            run_planned_into(
                program,
                plan,
                ws,
                &env,
                compiled.executor(),
                inputs,
                outputs,
            )
        })?;
        Ok(())
    }

    /// Runs the compiled program on `inputs`; output `k` updates `targets[k]` where given (a
    /// training step's new parameters and optimizer state): a kernel writes it over that
    /// tensor in place when it is safe ([`tessera_kernel::run_planned_updating`]: the kernel
    /// reads the tensor last, elementwise at the index it writes, and nothing that could fail
    /// runs after the first such write), and it is then `None` in the result; every other
    /// output is returned for the caller to copy. On a CUDA device the same rule binds the
    /// updating kernels' outputs to the targets' device memory
    /// ([`tessera_cuda::CudaProgram::run_updating`]).
    pub(crate) fn run_updating(
        &self,
        inputs: &[Tensor],
        targets: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>, CompileError> {
        self.check_hooks()?;
        cuda::check_devices(self.options.device, inputs)?;
        let (compiled, gm) = self.program_for(inputs)?;
        if let Some(device_program) = &compiled.cuda {
            return Ok(device_program.run_updating(inputs, targets, compiled.executor())?);
        }
        let env = Attributes(&gm);
        let (program, plan) = (&compiled.program, &compiled.plan);
        let outputs = compiled.with_workspace(|ws| {
            run_planned_updating(
                program,
                plan,
                ws,
                &env,
                compiled.executor(),
                inputs,
                targets,
            )
        })?;
        Ok(outputs)
    }

    /// Fails when this module or any module of the source's tree has hooks (added after
    /// compiling: compiled code would not run them). Allocates nothing when there are none.
    fn check_hooks(&self) -> Result<(), CompileError> {
        let hooks = call_hooks(self);
        if hooks > 0 {
            return Err(CompileError::Hooks {
                module: self.type_name(),
                hooks,
            });
        }
        let mut any = false;
        state_stamp::visit_state(self.source.root(), &mut |item| {
            if let state_stamp::StateItem::Module(m) = item {
                any = any || call_hooks(m) > 0;
            }
        });
        if any {
            refuse_hooks(self.source.root())?;
        }
        Ok(())
    }

    /// On a CUDA device, the counters of the calls so far, summed over the programs compiled
    /// for each input signature (kernel launches, CUDA graphs captured and replayed, host
    /// steps); all zero on the CPU.
    pub fn cuda_stats(&self) -> tessera_cuda::CudaRunStats {
        let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        cuda::sum_stats(prepared.programs.values().filter_map(|c| c.cuda.as_ref()))
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
        let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        let mut text = String::new();
        for compiled in prepared.programs.values() {
            text.push_str(&compiled.program.to_string());
            text.push_str(&format!("\n; memory plan\n{}", compiled.plan));
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
        let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        for compiled in prepared.programs.values() {
            dump_compiled(dir.as_ref(), compiled)?;
        }
        Ok(())
    }

    /// Kernel launches per call of the programs compiled so far (the most of any) for the
    /// steps computing a node whose op `computes` picks: one per launch group, one per other
    /// kernel ([`Program::launches`]).
    pub(crate) fn launches_of(&self, computes: &dyn Fn(&tessera_tensor::Op) -> bool) -> usize {
        let prepared = self.prepared.lock().unwrap_or_else(|e| e.into_inner());
        let graph = &prepared.gm.graph;
        let picked = |nodes: &[String]| {
            nodes.iter().any(|n| {
                graph.find(n).is_some_and(|id| {
                    matches!(graph.node(&id).map(|node| &node.kind),
                        Ok(tessera_fx::NodeKind::CallFunction { op }) if computes(op))
                })
            })
        };
        prepared
            .programs
            .values()
            .map(|c| {
                let program = &c.program;
                let steps = program.steps.iter().enumerate().filter(|(_, s)| match s {
                    tessera_kernel::Step::Kernel { nodes, .. } => picked(nodes),
                    tessera_kernel::Step::External { node, .. } => {
                        picked(std::slice::from_ref(node))
                    }
                });
                program.launches(steps.map(|(i, _)| i))
            })
            .max()
            .unwrap_or(0)
    }

    /// The optimised op-level graph that is lowered (made from the current state).
    pub fn graph(&self) -> tessera_fx::Graph {
        self.prepared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .gm
            .graph
            .clone()
    }
}

/// How programs are lowered for `options`' device: on a CUDA device a GEMM or convolution with
/// nothing to fuse is a kernel of its own (generated PTX), not an eager call on the host, and
/// no convolution is a Winograd one (the device renders the call itself).
fn lower_options(options: &CompileOptions) -> LowerOptions {
    let device = matches!(options.device, Device::Cuda(_));
    LowerOptions {
        product_kernels: device,
        winograd: if device {
            WinogradPolicy::Off
        } else {
            options.winograd
        },
        weights_as_stored: device,
        plain_conv_calls: device,
    }
}

/// Whether the code compiled for `program` (lowered for `metas`, of batch `batch`) runs any
/// batch: the kernels lowered for the next batch must differ only in what the code takes at
/// run time.
fn batch_mode(
    options: &CompileOptions,
    gm: &GraphModule,
    key: &Signature,
    metas: &[tessera_tensor::TensorMeta],
    batch: usize,
    program: &Program,
) -> BatchMode {
    let next = batch + 1;
    // The same strides: those of the batch dimension do not depend on its size.
    let layouts: Vec<Layout> = key
        .iter()
        .map(|(l, _)| {
            let mut l = l.clone();
            if let Some(first) = l.shape.first_mut() {
                *first = next;
            }
            l
        })
        .collect();
    let other = reshaped_graph(gm, &with_batch(metas, next))
        .and_then(|g| lower_with(&g, &layouts, lower_options(options)).map_err(CompileError::from));
    match other {
        Err(e) => BatchMode::Specialised(format!("at batch {next}: {e}")),
        Ok(other) => match program.code_difference(&other) {
            None => BatchMode::Dynamic,
            Some(why) => BatchMode::Specialised(format!("at batch {next}, {why}")),
        },
    }
}

fn dump_compiled(dir: &std::path::Path, compiled: &Compiled) -> Result<(), CompileError> {
    dump_program(dir, &compiled.program, compiled.jit.as_deref())
}

fn dump_program(
    dir: &std::path::Path,
    program: &Program,
    jit: Option<&JitProgram>,
) -> Result<(), CompileError> {
    dump::dump_program(dir, program, jit).map_err(|source| CompileError::Dump {
        dir: dir.display().to_string(),
        source,
    })
}

/// The attributes of the graph module a program was lowered from.
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
