//! Launch groups on the CPU: a program's optimizer updates (kernels writing program outputs
//! only) are one launch group, Adam's updates moved past the kernels of its per-parameter
//! step scalars; the JIT runs a group in one call (one parallel region once its work is
//! large enough, the kernels one after the other when it is not), with the bits of the
//! kernel-IR interpreter, of eager kernels and of the same program run kernel by kernel; and
//! a run refuses groups its kernels may not form.

use crate::common;

use common::{eager, lowered};
use std::cell::Cell;
use tessera_cpu::JitProgram;
use tessera_fx::{Graph, NodeId};
use tessera_kernel::{
    BufferPtr, GroupPart, Interpreter, Kernel, KernelExecutor, NoEnvironment, Program, Step,
    run_program,
};
use tessera_tensor::op::OptimOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};
use tessera_testkit::update_cases::{sgd_momentum, updates, values};

/// The JIT, counting the calls the runner makes: kernels alone, and launch groups.
struct Counting<'a> {
    jit: &'a JitProgram,
    kernels: Cell<usize>,
    groups: Cell<usize>,
}

impl KernelExecutor for Counting<'_> {
    unsafe fn execute(
        &self,
        step: usize,
        kernel: &Kernel,
        buffers: &[BufferPtr],
    ) -> tessera_kernel::Result<()> {
        self.kernels.set(self.kernels.get() + 1);
        // SAFETY: forwarded from the runner.
        unsafe { self.jit.execute(step, kernel, buffers) }
    }

    unsafe fn execute_group(&self, parts: &[GroupPart<'_>]) -> tessera_kernel::Result<()> {
        self.groups.set(self.groups.get() + 1);
        // SAFETY: forwarded from the runner.
        unsafe { self.jit.execute_group(parts) }
    }
}

/// Adam over one parameter per shape of `shapes`, each with its own step counter, as
/// `Adam::step` records it: per parameter the step scalars, then the update.
fn adam_step(shapes: &[&[usize]]) -> (Graph, Vec<Tensor>) {
    let (beta1, beta2) = (0.9, 0.999);
    let op = OptimOp::AdamUpdate {
        beta1,
        beta2,
        eps: 1e-8,
        weight_decay: 0.01,
        amsgrad: false,
        maximize: false,
        decoupled_weight_decay: true,
    };
    let mut g = Graph::new();
    let mut inputs = Vec::new();
    let mut outs = Vec::new();
    let lr = g.placeholder("lr", TensorMeta::new([], DType::F64));
    inputs.push(Tensor::scalar(0.0123f64));
    for (i, shape) in shapes.iter().enumerate() {
        let meta = TensorMeta::new(shape.to_vec(), DType::F32);
        let state: Vec<NodeId> = ["param", "grad", "exp_avg", "exp_avg_sq"]
            .iter()
            .map(|n| g.placeholder(&format!("{n}{i}"), meta.clone()))
            .collect();
        let step = g.placeholder(&format!("step{i}"), TensorMeta::new([], DType::F32));
        for k in 0..4 {
            let v = values(shape, (4 * i + k) as u64);
            inputs.push(if k == 3 { v.mul(&v).unwrap() } else { v });
        }
        inputs.push(Tensor::scalar(3.0f32 + i as f32));
        let scalars = g
            .call_function(
                Op::Optim(OptimOp::AdamStepScalars { beta1, beta2 }),
                &[&step, &lr],
            )
            .unwrap();
        let items: Vec<NodeId> = (0..3).map(|k| g.getitem(&scalars, k).unwrap()).collect();
        let mut args: Vec<&NodeId> = state.iter().collect();
        args.extend([&lr, &items[1], &items[2]]);
        let update = g.call_function(Op::Optim(op.clone()), &args).unwrap();
        outs.push(items[0]);
        for k in 0..3 {
            outs.push(g.getitem(&update, k).unwrap());
        }
    }
    g.output(&outs.iter().collect::<Vec<_>>()).unwrap();
    (g, inputs)
}

/// The names of the kernels of `program`'s last launch group (the updates').
fn grouped_kernels(program: &Program) -> Vec<String> {
    let Some(group) = program.launch_groups.last() else {
        panic!("no launch group\n{program}")
    };
    program.steps[group.clone()]
        .iter()
        .map(|s| match s {
            Step::Kernel { kernel, .. } => kernel.name.clone(),
            Step::External { node, .. } => panic!("external %{node} in a group\n{program}"),
        })
        .collect()
}

/// Runs `program` grouped through the JIT (one group call, no kernel alone but those
/// outside the group), through the interpreter, and through the JIT kernel by kernel (the
/// group removed), and checks every output's bits against eager execution of `graph`.
fn grouped_runs_agree(graph: &Graph, program: &Program, inputs: &[Tensor]) {
    let jit = JitProgram::compile(program).unwrap();
    let counting = Counting {
        jit: &jit,
        kernels: Cell::new(0),
        groups: Cell::new(0),
    };
    let grouped = run_program(program, &NoEnvironment, &counting, inputs).unwrap();
    let members: usize = program.launch_groups.iter().map(|g| g.len()).sum();
    assert_eq!(
        counting.groups.get(),
        program.launch_groups.len(),
        "{program}"
    );
    assert_eq!(
        counting.kernels.get(),
        program.kernels().count() - members,
        "{program}"
    );
    let interpreted = run_program(program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let mut ungrouped = program.clone();
    ungrouped.launch_groups.clear();
    let one_by_one = run_program(&ungrouped, &NoEnvironment, &jit, inputs).unwrap();
    let bits = tessera_testkit::exact_bits;
    for (i, want) in eager(graph, inputs).iter().enumerate() {
        for (how, got) in [
            ("grouped JIT", &grouped[i]),
            ("interpreter", &interpreted[i]),
            ("JIT kernel by kernel", &one_by_one[i]),
        ] {
            assert_eq!(bits(want), bits(got), "{how}, output {i}\n{program}");
        }
    }
}

/// Runs `f` on a pool of three threads, so that a large group is split whatever the
/// machine's core count.
fn on_three_threads(f: impl FnOnce() + Send) {
    rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap()
        .install(f);
}

#[test]
fn sgd_updates_of_several_sizes_are_one_group_split_across_threads_with_the_interpreters_bits() {
    // 5 and 1031 elements are not multiples of the 16-element vector step; 613 x 517 has work
    // enough for threads alone, the others have not.
    let shapes: [&[usize]; 4] = [&[5], &[33, 17], &[1031], &[613, 517]];
    let (graph, inputs) = updates(&sgd_momentum(), &shapes, 2);
    let program = lowered(&graph, &inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(grouped_kernels(&program).len(), 4, "{program}");
    let text = program.to_string();
    assert!(text.contains("; one launch for steps 0..4: k0_"), "{text}");
    let big = program.kernels().last().unwrap();
    assert!(big.schedule.parallel.is_some(), "{program}");
    assert!(
        program
            .kernels()
            .next()
            .unwrap()
            .schedule
            .parallel
            .is_none()
    );
    on_three_threads(|| grouped_runs_agree(&graph, &program, &inputs));
    grouped_runs_agree(&graph, &program, &inputs);
}

#[test]
fn a_group_of_small_updates_runs_its_kernels_one_after_the_other_in_one_call() {
    let shapes: [&[usize]; 3] = [&[1], &[7, 3], &[100]];
    let (graph, inputs) = updates(&sgd_momentum(), &shapes, 2);
    let program = lowered(&graph, &inputs);
    assert_eq!(grouped_kernels(&program).len(), 3, "{program}");
    on_three_threads(|| grouped_runs_agree(&graph, &program, &inputs));
}

#[test]
fn adam_updates_move_past_the_step_scalars_of_later_parameters_into_one_group() {
    let shapes: [&[usize]; 3] = [&[19], &[40, 9], &[700, 400]];
    let (graph, inputs) = adam_step(&shapes);
    let program = lowered(&graph, &inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    let group = grouped_kernels(&program);
    assert_eq!(group.len(), 3, "{program}");
    assert!(
        group.iter().all(|k| k.ends_with("adam_update")),
        "{program}"
    );
    // The step scalars come first, the updates last, together.
    let names: Vec<&str> = program.kernels().map(|k| k.name.as_str()).collect();
    assert!(
        names[..3].iter().all(|k| k.ends_with("adam_step_scalars")),
        "{program}"
    );
    // The step scalars, side by side once the updates moved, are a launch group of their own.
    assert_eq!(program.launch_groups, [0..3, 3..6], "{program}");
    assert_eq!(program.launches(0..program.steps.len()), 2, "{program}");
    on_three_threads(|| grouped_runs_agree(&graph, &program, &inputs));
}

#[test]
fn a_run_refuses_a_launch_group_whose_kernels_may_not_run_at_once() {
    let (graph, inputs) = adam_step(&[&[19], &[40, 9]]);
    let program = lowered(&graph, &inputs);
    // A group of one; a step scalar and the update reading it; a group past the end.
    for group in [0..1, 1..4, 2..9] {
        let mut bad = program.clone();
        bad.launch_groups = vec![group.clone()];
        let err = run_program(&bad, &NoEnvironment, &Interpreter, &inputs).unwrap_err();
        assert!(
            err.to_string().contains("launch groups"),
            "{group:?}: {err}\n{bad}"
        );
    }
}
