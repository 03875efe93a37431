//! The memory plan: intermediate kernel buffers share one arena, reusing the bytes of buffers
//! that are no longer live, without two live buffers ever overlapping; program outputs stay
//! out of it; runs reusing one workspace, and runs into caller buffers, agree with eager ops.

use tessera_fx::Graph;
use tessera_kernel::memory_plan::ARENA_ALIGN;
use tessera_kernel::{
    Interpreter, KernelError, MemoryPlan, NoEnvironment, Program, SlotHome, SlotId, Workspace,
    lower, run_planned, run_planned_into,
};
use tessera_tensor::op::UnaryOp;
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// `softmax` applied `count` times along the last dimension of an `[rows, cols]` input, then
/// `tanh`: each softmax is a kernel of its own, its result read only by the next.
fn softmax_chain(count: usize, rows: usize, cols: usize) -> Graph {
    let mut g = Graph::new();
    let mut y = g.placeholder("x", TensorMeta::new([rows, cols], DType::F32));
    for _ in 0..count {
        y = g
            .call_function(Op::Softmax { dim: 1, log: false }, &[&y])
            .unwrap();
        y = g.call_function(Op::Unary(UnaryOp::Neg), &[&y]).unwrap();
    }
    g.output(&[&y]).unwrap();
    g
}

fn eager_softmax_chain(count: usize, x: &Tensor) -> Tensor {
    let mut y = x.clone();
    for _ in 0..count {
        y = Op::Softmax { dim: 1, log: false }.apply1(&[&y]).unwrap();
        y = Op::Unary(UnaryOp::Neg).apply1(&[&y]).unwrap();
    }
    y
}

/// Every arena buffer lies inside the arena at an aligned offset, and no two buffers live at
/// the same step share a byte.
fn assert_sound(plan: &MemoryPlan) {
    let buffers: Vec<_> = plan.arena_buffers().map(|(_, b)| *b).collect();
    for (i, a) in buffers.iter().enumerate() {
        assert_eq!(a.offset % ARENA_ALIGN, 0, "{plan}");
        assert!(a.offset + a.bytes() <= plan.arena_bytes(), "{plan}");
        for b in &buffers[i + 1..] {
            let together = a.first_step <= b.last_step && b.first_step <= a.last_step;
            let apart = a.offset + a.bytes() <= b.offset || b.offset + b.bytes() <= a.offset;
            assert!(
                !together || apart || a.bytes() == 0 || b.bytes() == 0,
                "{plan}"
            );
        }
    }
}

fn program(count: usize) -> Program {
    let program = lower(&softmax_chain(count, 16, 256), &[]).unwrap();
    assert_eq!(program.kernels().count(), count, "{program}");
    program
}

#[test]
fn a_chain_of_kernels_reuses_the_buffers_of_dead_values() {
    let program = program(4);
    let plan = MemoryPlan::new(&program);
    assert_sound(&plan);
    // Three intermediates of 16 KiB; each is dead once the next kernel has read it, so two
    // places are enough where three would be needed without reuse.
    let bytes = 16 * 256 * 4;
    assert_eq!(plan.arena_buffers().count(), 3, "{plan}");
    assert_eq!(plan.unshared_bytes(), 3 * bytes, "{plan}");
    assert_eq!(plan.arena_bytes(), 2 * bytes, "{plan}");
    let text = plan.to_string();
    assert!(
        text.starts_with("arena: 32768 bytes (49152 without reuse), 3 buffers"),
        "{text}"
    );
}

#[test]
fn program_outputs_never_live_in_the_arena() {
    let program = program(3);
    let plan = MemoryPlan::new(&program);
    let out = program.outputs[0].slot;
    assert_eq!(plan.home(out), SlotHome::Fresh);
    assert_eq!(plan.direct(), [true]);
    let input = program.slots.iter().position(|s| s.name == "x").unwrap();
    assert_eq!(plan.home(SlotId::from_index(input)), SlotHome::Tensor);
}

#[test]
fn runs_reusing_one_workspace_agree_with_eager_ops() {
    let program = program(4);
    let plan = MemoryPlan::new(&program);
    let mut ws = Workspace::new(&program, &plan);
    assert!(ws.arena_bytes() >= plan.arena_bytes());
    for seed in 0..3 {
        let x = Tensor::randn(&[16, 256], DType::F32).unwrap();
        x.mul_scalar_(1.0 + seed as f64).unwrap();
        let got = run_planned(
            &program,
            &plan,
            &mut ws,
            &NoEnvironment,
            &Interpreter,
            std::slice::from_ref(&x),
            None,
        )
        .unwrap();
        let want = eager_softmax_chain(4, &x).to_vec::<f32>().unwrap();
        let got = got[0].to_vec::<f32>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
        }
    }
}

#[test]
fn a_run_into_caller_buffers_writes_them_in_place() {
    let program = program(2);
    let plan = MemoryPlan::new(&program);
    let mut ws = Workspace::new(&program, &plan);
    let x = Tensor::randn(&[16, 256], DType::F32).unwrap();
    let out = Tensor::zeros(&[16, 256], DType::F32).unwrap();
    let alias = out.clone();
    run_planned_into(
        &program,
        &plan,
        &mut ws,
        &NoEnvironment,
        &Interpreter,
        std::slice::from_ref(&x),
        &[out],
    )
    .unwrap();
    let want = eager_softmax_chain(2, &x).to_vec::<f32>().unwrap();
    let got = alias.to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
    }
}

#[test]
fn a_run_into_refuses_outputs_of_another_shape_layout_or_sharing_an_input() {
    let program = program(1);
    let plan = MemoryPlan::new(&program);
    let mut ws = Workspace::new(&program, &plan);
    let x = Tensor::randn(&[16, 256], DType::F32).unwrap();
    let mut run = |out: Tensor| {
        run_planned_into(
            &program,
            &plan,
            &mut ws,
            &NoEnvironment,
            &Interpreter,
            std::slice::from_ref(&x),
            &[out],
        )
        .unwrap_err()
    };
    let e = run(Tensor::zeros(&[16, 255], DType::F32).unwrap());
    assert!(matches!(e, KernelError::OutputMeta { index: 0, .. }), "{e}");
    assert!(
        e.to_string().contains("[16, 255]") && e.to_string().contains("[16, 256]"),
        "{e}"
    );
    let e = run(Tensor::zeros(&[16, 256], DType::F64).unwrap());
    assert!(matches!(e, KernelError::OutputMeta { .. }), "{e}");
    let transposed = Tensor::zeros(&[256, 16], DType::F32).unwrap().t().unwrap();
    let e = run(transposed);
    assert!(
        matches!(e, KernelError::OutputLayout { index: 0, .. }),
        "{e}"
    );
    let e = run(x.clone());
    assert!(
        matches!(&e, KernelError::OutputShares { index: 0, other } if other == "input 0"),
        "{e}"
    );
    let e = run_planned_into(
        &program,
        &plan,
        &mut ws,
        &NoEnvironment,
        &Interpreter,
        std::slice::from_ref(&x),
        &[],
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            KernelError::OutputCount {
                expected: 1,
                got: 0
            }
        ),
        "{e}"
    );
}

#[test]
fn a_workspace_made_for_another_plan_is_refused() {
    let (small, large) = (program(1), program(4));
    let small_plan = MemoryPlan::new(&small);
    let large_plan = MemoryPlan::new(&large);
    let mut ws = Workspace::new(&small, &small_plan);
    let x = Tensor::randn(&[16, 256], DType::F32).unwrap();
    let e = run_planned(
        &large,
        &large_plan,
        &mut ws,
        &NoEnvironment,
        &Interpreter,
        &[x],
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("workspace"), "{e}");
}

#[test]
fn a_plan_made_for_another_program_is_refused() {
    let (one, two) = (program(2), lower(&softmax_chain(2, 16, 128), &[]).unwrap());
    let plan = MemoryPlan::new(&two);
    let mut ws = Workspace::new(&one, &MemoryPlan::new(&one));
    let x = Tensor::randn(&[16, 256], DType::F32).unwrap();
    let e = run_planned(
        &one,
        &plan,
        &mut ws,
        &NoEnvironment,
        &Interpreter,
        &[x],
        None,
    )
    .unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
}

#[test]
fn a_run_into_an_offset_view_writes_only_that_view() {
    let program = program(1);
    let plan = MemoryPlan::new(&program);
    let mut ws = Workspace::new(&program, &plan);
    let x = Tensor::randn(&[16, 256], DType::F32).unwrap();
    let whole = Tensor::zeros(&[32, 256], DType::F32).unwrap();
    let lower_half = whole.narrow(0, 16, 16).unwrap();
    let outputs = [lower_half];
    let env = &NoEnvironment;
    let inputs = std::slice::from_ref(&x);
    run_planned_into(
        &program,
        &plan,
        &mut ws,
        env,
        &Interpreter,
        inputs,
        &outputs,
    )
    .unwrap();
    let values = whole.to_vec::<f32>().unwrap();
    let want = eager_softmax_chain(1, &x).to_vec::<f32>().unwrap();
    assert!(values[..16 * 256].iter().all(|&v| v == 0.0));
    for (g, w) in values[16 * 256..].iter().zip(&want) {
        assert!((g - w).abs() <= 1e-6, "{g} vs {w}");
    }
}

#[test]
fn a_launch_group_is_one_step_for_liveness() {
    // k0: a = softmax(x); k1: p = softmax(a), a's last read; k2: b = softmax(y); k3 reads p
    // and b. Alone, b may take a's bytes (a is dead once k1 ran). Run at once as one launch
    // group, k1 may still be reading a while k2 writes b: they must not share a byte.
    let mut g = Graph::new();
    let meta = TensorMeta::new([16, 256], DType::F32);
    let x = g.placeholder("x", meta.clone());
    let y = g.placeholder("y", meta);
    let softmax = Op::Softmax { dim: 1, log: false };
    let a = g.call_function(softmax.clone(), &[&x]).unwrap();
    let p = g.call_function(softmax.clone(), &[&a]).unwrap();
    let b = g.call_function(softmax.clone(), &[&y]).unwrap();
    let sum = g.call_function(Op::Binary(tessera_tensor::op::BinaryOp::Add), &[&p, &b]);
    let out = g.call_function(softmax, &[&sum.unwrap()]).unwrap();
    g.output(&[&out]).unwrap();
    let mut program = lower(&g, &[]).unwrap();
    assert_eq!(program.kernels().count(), 4, "{program}");
    // The arena buffers of a, p and b, in slot order.
    let buffers = |plan: &MemoryPlan| -> Vec<tessera_kernel::memory_plan::ArenaBuffer> {
        let mut slots: Vec<_> = plan
            .arena_buffers()
            .filter_map(|(s, b)| Some((s?, *b)))
            .collect();
        slots.sort_by_key(|(s, _)| s.index());
        slots.into_iter().map(|(_, b)| b).collect()
    };
    let alone = MemoryPlan::new(&program);
    let [a_alone, _, b_alone] = buffers(&alone)[..] else {
        panic!("three arena buffers expected\n{alone}")
    };
    assert_eq!(
        a_alone.offset, b_alone.offset,
        "b reuses a's bytes when alone\n{alone}"
    );
    program.launch_groups = std::iter::once(1..3).collect();
    let grouped = MemoryPlan::new(&program);
    assert_sound(&grouped);
    let [a, _, b] = buffers(&grouped)[..] else {
        panic!("three arena buffers expected\n{grouped}")
    };
    let apart = a.offset + a.bytes() <= b.offset || b.offset + b.bytes() <= a.offset;
    assert!(apart, "b shares a's bytes inside the group\n{grouped}");
}
