//! `tessera::compile_train_step`, PyTorch's `torch.compile` of a training step: the loss of a
//! module on a batch is traced at op level, its backward derived as a graph
//! (`tessera_fx::autodiff`), the optimizer's update recorded as ops after it, and the whole
//! step (forward, loss, backward, update) compiled as one program by [`crate::compile`].
//!
//! Parameters, buffers and optimizer state are the graph's inputs, read live on every call;
//! the program returns the loss, and its update kernels (the last steps) write the new values
//! over those tensors in place where that is safe (`tessera_kernel::run_planned_updating`; on a
//! CUDA device `tessera_cuda::CudaProgram::run_updating`, in the tensors' device memory);
//! any other new value is returned and copied into its tensor after the call. So the module, the optimizer and its `state_dict` are the caller's own, and eager
//! and compiled steps can be mixed on them. Learning rates are run-time inputs (schedulers
//! work); a step whose update differs (SGD's first step with momentum, which has no buffer
//! yet) compiles its own program, cached, as does a batch of another shape.
//!
//! Before the update is appended, the joint graph is rematerialised
//! ([`crate::passes::Rematerialize`], on by default, [`TrainStepOptions::rematerialize`]):
//! cheap elementwise forward values the backward reads are computed again there rather than
//! kept alive across the step; [`TrainStepReport::remat`] says how many bytes that saves.

mod graph;
mod record;

use crate::compile::{CompileError, CompileOptions, CompileReport, CompiledModule, compile};
use crate::nn::optim::Optimizer;
use crate::nn::{Layer, ModuleExt};
use crate::passes::RematReport;
use graph::{Feed, JointStep, joint_step};
use record::{RecordedUpdate, UpdateRecord, UpdateShape};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tessera_tensor::{Device, Tensor, TensorId, TensorMeta, no_grad};

/// The loss of a training step: `loss(output, target)`.
pub type LossFn = dyn Fn(&Tensor, &Tensor) -> crate::nn::Result<Tensor>;

/// A compiled training step over `module` (forward, `loss`, backward, `optimizer` update):
/// [`CompiledTrainStep::step`] takes a batch and returns the loss. It owns the optimizer,
/// which stays reachable ([`CompiledTrainStep::optimizer_mut`]) for schedulers, eager steps and
/// its `state_dict`.
pub struct CompiledTrainStep<M: Layer, O: Optimizer> {
    module: Arc<M>,
    loss: Box<LossFn>,
    optimizer: O,
    options: TrainStepOptions,
    /// One per batch shape (and training mode) met.
    joints: Vec<TracedBatch>,
    report: TrainStepReport,
}

/// The joint graph of one batch shape and the programs compiled from it per update shape.
struct TracedBatch {
    input: TensorMeta,
    target: TensorMeta,
    training: bool,
    joint: JointStep,
    programs: Vec<(UpdateShape, StepProgram)>,
}

/// A compiled step, what feeds its inputs, and its arguments, kept between calls: module
/// state is bound once, the batch and optimizer state are rebound per call (handle clones;
/// a copy on the step's device of optimizer state kept elsewhere, as Adam's step counts on
/// the CPU), and each learning rate is a 0-d tensor on that device, refilled only when its
/// value changes.
struct StepProgram {
    compiled: CompiledModule,
    feeds: Vec<Feed>,
    args: Vec<Tensor>,
    /// The learning rates `args` hold, by run-time scalar.
    scalars: Vec<f64>,
    /// The device the program runs on.
    device: Device,
}

/// `t` on `device`: itself when it is there, else a copy (`what` names it in the error).
fn on_device(
    t: &Tensor,
    device: Device,
    what: &dyn Fn() -> String,
) -> Result<Tensor, CompileError> {
    if t.device() == device {
        return Ok(t.clone());
    }
    t.to_device(device)
        .map_err(|source| CompileError::ArgumentDevice {
            what: what(),
            device,
            source: Box::new(source),
        })
}

impl StepProgram {
    /// Points the arguments at this call's batch and optimizer state and learning rates.
    fn bind(&mut self, batch: [&Tensor; 2], update: &UpdateRecord) -> Result<(), CompileError> {
        for (arg, feed) in self.args.iter_mut().zip(&self.feeds) {
            match *feed {
                Feed::Batch(i) => *arg = batch[i].clone(),
                Feed::State(_) => {}
                Feed::Live(i) => {
                    let what = || format!("optimizer state {i}");
                    *arg = on_device(&update.live[i], self.device, &what)?;
                }
                Feed::Scalar(i) => {
                    let value = update.scalars[i];
                    if self.scalars[i].to_bits() != value.to_bits() {
                        arg.fill_(value).map_err(|source| CompileError::WriteBack {
                            target: format!("learning rate {i}"),
                            source: Box::new(source),
                        })?;
                        self.scalars[i] = value;
                    }
                }
            }
        }
        Ok(())
    }
}

/// How an error names a tensor the step writes: a parameter or buffer by its qualified name,
/// an optimizer state tensor by the parameter it belongs to.
fn written_name(joint: &JointStep, target: &Tensor, owner: Option<TensorId>) -> String {
    let shape = target.shape();
    match owner.and_then(|o| Some((o, joint.state_name(o)?))) {
        Some((o, name)) if o == target.id() => name.to_string(),
        Some((_, name)) => format!("the optimizer state of {name} (shape {shape:?})"),
        None => format!("a tensor of shape {shape:?}"),
    }
}

/// How a training step is compiled: the program's [`CompileOptions`] and the passes over the
/// training graph. A [`CompileOptions`] converts into it (rematerialisation on).
#[derive(Debug, Clone, PartialEq)]
pub struct TrainStepOptions {
    /// How the step's program is compiled (`optimize` is ignored: the inference passes do not
    /// hold for training graphs).
    pub compile: CompileOptions,
    /// Recompute cheap elementwise forward values in the backward instead of keeping them
    /// alive from forward to backward, where that keeps fewer bytes (on by default).
    pub rematerialize: bool,
}

impl Default for TrainStepOptions {
    fn default() -> Self {
        CompileOptions::default().into()
    }
}

impl From<CompileOptions> for TrainStepOptions {
    fn from(compile: CompileOptions) -> Self {
        TrainStepOptions {
            compile,
            rematerialize: true,
        }
    }
}

/// What compiling the step did.
#[derive(Debug, Clone, Default)]
pub struct TrainStepReport {
    /// Tracing the loss and deriving the joint graph, over every batch shape met.
    pub trace_time: Duration,
    /// Building and compiling the step programs, over every program compiled.
    pub compile_time: Duration,
    /// Step programs compiled (one per batch shape and update shape).
    pub programs: usize,
    /// The compile report of the program compiled last (its `arena_bytes`: the bytes of the
    /// arena its intermediate values share).
    pub last: CompileReport,
    /// What rematerialisation did to the joint graph traced last (`None` when it is off):
    /// the forward values kept for the backward before and after, and the bytes saved.
    pub remat: Option<RematReport>,
    /// Of the new values (parameters, optimizer state, written buffers) of the step run
    /// last, how many its kernels wrote in place; the others were copied in after the call.
    pub in_place: usize,
    /// Kernel launches that apply the optimizer's updates (new parameters and their state)
    /// in the program compiled last: 1 for the launch group of the update kernels, as
    /// PyTorch's fused optimizers launch once, plus 1 for each GEMM kernel whose epilogue is
    /// an update (a weight's, fused into the GEMM computing its gradient). Adam's
    /// per-parameter step counters are 0-d kernels of their own, not counted; an update that
    /// runs its eager kernel (a half parameter) launches nothing here.
    pub update_launches: usize,
}

/// Traces `loss(module(input), target)` for batches shaped like `example` (input, target),
/// derives its backward and prepares a step that also applies `optimizer`'s update; programs
/// are compiled on the first call of each batch and update shape (the update's shape depends
/// on the optimizer state the first step creates). `options` is a [`CompileOptions`] or a
/// [`TrainStepOptions`]; `optimize` is ignored: the inference passes (batch-norm folding,
/// constant folding) do not hold for training graphs.
pub fn compile_train_step<M, O>(
    module: Arc<M>,
    loss: impl Fn(&Tensor, &Tensor) -> crate::nn::Result<Tensor> + 'static,
    optimizer: O,
    example: (&Tensor, &Tensor),
    options: impl Into<TrainStepOptions>,
) -> Result<CompiledTrainStep<M, O>, CompileError>
where
    M: Layer + 'static,
    O: Optimizer,
{
    let options = options.into();
    let mut step = CompiledTrainStep {
        module,
        loss: Box::new(loss),
        optimizer,
        options: TrainStepOptions {
            compile: CompileOptions {
                optimize: false,
                ..options.compile
            },
            ..options
        },
        joints: Vec::new(),
        report: TrainStepReport::default(),
    };
    step.joint_for(&example.0.meta(), &example.1.meta())?;
    Ok(step)
}

impl<M: Layer + 'static, O: Optimizer> CompiledTrainStep<M, O> {
    /// One training step on `(input, target)`: runs the compiled forward, loss, backward and
    /// update, writes the new parameters and optimizer state in place, and returns the loss
    /// (computed before the update, as an eager loop's `loss` is). When recording, compiling or
    /// running the step fails, the optimizer is left as it was (a first step's new state is
    /// dropped again) and no tensor is written.
    pub fn step(&mut self, input: &Tensor, target: &Tensor) -> Result<Tensor, CompileError> {
        let j = self.joint_for(&input.meta(), &target.meta())?;
        let state = self.optimizer.save_state();
        let (update, outputs) = match self.record_and_run(j, [input, target]) {
            Ok(ran) => ran,
            Err(e) => {
                self.optimizer.restore_state(state);
                return Err(e);
            }
        };
        self.write_back(&self.joints[j].joint, &update, &outputs)?;
        self.report.in_place = outputs[1..].iter().filter(|o| o.is_none()).count();
        outputs[0].clone().ok_or_else(|| CompileError::TrainStep {
            reason: "the step's program wrote its loss in place".into(),
        })
    }

    /// Records the optimizer's step, compiles a program for its shape if none is cached, and
    /// runs it: the loss, then the new values in [`JointStep::with_update`]'s output order.
    fn record_and_run(
        &mut self,
        j: usize,
        batch: [&Tensor; 2],
    ) -> Result<(UpdateRecord, Vec<Option<Tensor>>), CompileError> {
        let traced = &mut self.joints[j];
        let mut recorder = RecordedUpdate::new(&traced.joint.grad_index);
        self.optimizer
            .step_with(&mut recorder)
            .map_err(|source| CompileError::Optimizer {
                source: Box::new(source),
            })?;
        let update = recorder.finish();
        let fresh = !traced.programs.iter().any(|(s, _)| *s == update.shape);
        let p = match traced.programs.iter().position(|(s, _)| *s == update.shape) {
            Some(p) => p,
            None => {
                let start = Instant::now();
                let (gm, feeds) = traced.joint.with_update(&update)?;
                let state: Vec<&Tensor> = traced.joint.state().collect();
                let device = self.options.compile.device;
                let args: Vec<Tensor> = feeds
                    .iter()
                    .map(|f| match *f {
                        Feed::Batch(i) => Ok(batch[i].clone()),
                        Feed::State(i) => Ok(state[i].clone()),
                        Feed::Live(i) => {
                            on_device(&update.live[i], device, &|| format!("optimizer state {i}"))
                        }
                        Feed::Scalar(i) => {
                            on_device(&Tensor::scalar(update.scalars[i]), device, &|| {
                                format!("learning rate {i}")
                            })
                        }
                    })
                    .collect::<Result<_, _>>()?;
                let compiled = compile(&gm, &args, self.options.compile.clone())?;
                self.report.compile_time += start.elapsed();
                self.report.programs += 1;
                self.report.last = compiled.report();

                let program = StepProgram {
                    compiled,
                    feeds,
                    args,
                    scalars: update.scalars.clone(),
                    device,
                };
                traced.programs.push((update.shape.clone(), program));
                traced.programs.len() - 1
            }
        };
        let program = &mut traced.programs[p].1;
        program.bind(batch, &update)?;
        // The loss is returned; each new value is written over the tensor it updates, in
        // place where the program allows it, else returned and copied by `write_back`.
        let targets: Vec<Option<Tensor>> = std::iter::once(None)
            .chain(update.assigns.iter().map(|a| Some(a.target.clone())))
            .chain(traced.joint.mutated_buffers().map(|b| Some(b.clone())))
            .collect();
        let outputs = program.compiled.run_updating(&program.args, &targets)?;
        if fresh {
            // Counted once the call has compiled the program's code.
            self.report.update_launches = program.compiled.launches_of(&|op| {
                matches!(op, tessera_tensor::Op::Optim(o)
                    if !matches!(o, tessera_tensor::op::OptimOp::AdamStepScalars { .. }))
            });
        }
        let expected = 1 + update.assigns.len() + traced.joint.mutated_buffers().count();
        if outputs.len() != expected {
            return Err(CompileError::TrainStep {
                reason: format!(
                    "the step's program returned {} values, {expected} expected (the loss, each \
                     updated tensor, each written buffer)",
                    outputs.len()
                ),
            });
        }
        Ok((update, outputs))
    }

    /// Writes the step's new values (`outputs` after the loss) into the tensors they update:
    /// the optimizer's targets in record order, then the written buffers; a value the
    /// program wrote in place (`None`) is there already.
    fn write_back(
        &self,
        joint: &JointStep,
        update: &UpdateRecord,
        outputs: &[Option<Tensor>],
    ) -> Result<(), CompileError> {
        let _guard = no_grad();
        let targets = update
            .assigns
            .iter()
            .map(|a| (&a.target, a.owner))
            .chain(joint.mutated_buffers().map(|b| (b, Some(b.id()))));
        for ((target, owner), value) in targets.zip(&outputs[1..]) {
            let Some(value) = value else { continue };
            target
                .copy_(value)
                .map_err(|source| CompileError::WriteBack {
                    target: written_name(joint, target, owner),
                    source: Box::new(source),
                })?;
        }
        Ok(())
    }

    /// The index of the joint graph for batches of these shapes in the module's current
    /// mode, traced now if new.
    fn joint_for(
        &mut self,
        input: &TensorMeta,
        target: &TensorMeta,
    ) -> Result<usize, CompileError> {
        let training = self.module.is_training();
        if let Some(i) = self
            .joints
            .iter()
            .position(|j| j.input == *input && j.target == *target && j.training == training)
        {
            return Ok(i);
        }
        let start = Instant::now();
        let (joint, remat) = joint_step(
            &*self.module,
            &*self.loss,
            input,
            target,
            self.options.rematerialize,
        )?;
        self.report.trace_time += start.elapsed();
        self.report.remat = remat;
        self.joints.push(TracedBatch {
            input: input.clone(),
            target: target.clone(),
            training,
            joint,
            programs: Vec::new(),
        });
        Ok(self.joints.len() - 1)
    }

    /// The optimizer (for its `state_dict`, param groups, eager steps).
    pub fn optimizer(&self) -> &O {
        &self.optimizer
    }

    /// The optimizer, mutably (a scheduler's `step`, `load_state_dict`, an eager step).
    pub fn optimizer_mut(&mut self) -> &mut O {
        &mut self.optimizer
    }

    /// Gives the optimizer back.
    pub fn into_optimizer(self) -> O {
        self.optimizer
    }

    /// The module trained.
    pub fn module(&self) -> &Arc<M> {
        &self.module
    }

    /// What tracing and compiling did so far.
    pub fn report(&self) -> &TrainStepReport {
        &self.report
    }

    /// On a CUDA device, the counters of the step programs' calls so far, summed (outputs
    /// written in place and copied out, CUDA graphs captured, recaptured and replayed); all
    /// zero on the CPU.
    pub fn cuda_stats(&self) -> tessera_cuda::CudaRunStats {
        let mut sum = tessera_cuda::CudaRunStats::default();
        for (_, p) in self.joints.iter().flat_map(|j| &j.programs) {
            sum += p.compiled.cuda_stats();
        }
        sum
    }

    /// The compiled step programs, as the op-level graphs they were lowered from.
    pub fn graphs(&self) -> Vec<crate::fx::Graph> {
        self.joints
            .iter()
            .flat_map(|j| j.programs.iter().map(|(_, p)| p.compiled.graph()))
            .collect()
    }
}
