//! Outputs written in place over the tensors they update (`run_planned_updating`, what a
//! compiled training step does with its new parameters): the updated tensor holds exactly
//! what the copying run returns, through the JIT and the interpreter; an output whose update
//! is not safe in place (its tensor read after the update, or by an eager call) comes back
//! for the caller to copy, with the tensor untouched (so is one another kernel of its launch
//! group reads: they run at once); a run that fails writes nothing.

use crate::common;

use common::{Builder, lowered};
use tessera_cpu::JitProgram;
use tessera_kernel::{
    Interpreter, KernelExecutor, MemoryPlan, NoEnvironment, Program, Workspace, run_planned,
    run_planned_updating,
};
use tessera_tensor::op::{BinaryOp, DropoutOp, ReduceKind, ReduceOp};
use tessera_tensor::{DType, Op, Tensor};

fn sum_all(b: &mut Builder, x: &tessera_fx::NodeId) -> tessera_fx::NodeId {
    let op = Op::Reduce(ReduceOp {
        kind: ReduceKind::Sum,
        dims: vec![0],
        keepdim: false,
    });
    b.call(op, &[x])
}

/// `loss = sum(p * g)`, `p_new = p - g * g`, and `m_new = m * g + g` over `[n]` vectors: the
/// loss reads `p` before its update, as a training step's forward reads the weights. With
/// `eager_reader`, an eval-mode `dropout(p)` (an eager call reading `p`) is a fourth output.
fn update_step(n: usize, eager_reader: bool) -> Builder {
    let mut b = Builder::new(DType::F32, false);
    let p = b.input(&[n], false);
    let g = b.input(&[n], false);
    let m = b.input(&[n], false);
    let pg = b.call(Op::Binary(BinaryOp::Mul), &[&p, &g]);
    let loss = sum_all(&mut b, &pg);
    let gg = b.call(Op::Binary(BinaryOp::Mul), &[&g, &g]);
    let p_new = b.call(Op::Binary(BinaryOp::Sub), &[&p, &gg]);
    let mg = b.call(Op::Binary(BinaryOp::Mul), &[&m, &g]);
    let m_new = b.call(Op::Binary(BinaryOp::Add), &[&mg, &g]);
    if eager_reader {
        let dropout = DropoutOp {
            p: 0.5,
            training: false,
        };
        let arg = b.call(Op::Dropout(dropout), &[&p]);
        b.graph.output(&[&loss, &p_new, &m_new, &arg]).unwrap();
    } else {
        b.graph.output(&[&loss, &p_new, &m_new]).unwrap();
    }
    b
}

/// A copy of the f32 or f64 tensor `t` with storage of its own.
fn copy_of(t: &Tensor) -> Tensor {
    match t.dtype() {
        DType::F64 => Tensor::from_vec(t.to_vec::<f64>().unwrap(), &t.shape()).unwrap(),
        _ => Tensor::from_vec(t.to_vec::<f32>().unwrap(), &t.shape()).unwrap(),
    }
}

pub(crate) fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Runs `program` updating `targets` (given as positions of inputs, per output), on fresh
/// copies of `inputs`: the outputs and the inputs after the run.
pub(crate) fn run_updating(
    program: &Program,
    executor: &dyn KernelExecutor,
    inputs: &[Tensor],
    targets: &[Option<usize>],
) -> (tessera_kernel::Result<Vec<Option<Tensor>>>, Vec<Tensor>) {
    let inputs: Vec<Tensor> = inputs.iter().map(copy_of).collect();
    let targets: Vec<Option<Tensor>> = targets
        .iter()
        .map(|t| t.map(|i| inputs[i].clone()))
        .collect();
    let plan = MemoryPlan::new(program);
    let mut ws = Workspace::new(program, &plan);
    let out = run_planned_updating(
        program,
        &plan,
        &mut ws,
        &NoEnvironment,
        executor,
        &inputs,
        &targets,
    );
    (out, inputs)
}

#[test]
fn updates_in_place_equal_the_copying_run_bit_for_bit() {
    // Long enough that the JIT splits the update across threads.
    let b = update_step(300_001, false);
    let program = lowered(&b.graph, &b.inputs);
    let jit = JitProgram::compile(&program).unwrap();
    for executor in [&jit as &dyn KernelExecutor, &Interpreter] {
        let plan = MemoryPlan::new(&program);
        let mut ws = Workspace::new(&program, &plan);
        let copied = run_planned(
            &program,
            &plan,
            &mut ws,
            &NoEnvironment,
            executor,
            &b.inputs,
            None,
        )
        .unwrap();
        let (out, after) = run_updating(&program, executor, &b.inputs, &[None, Some(0), Some(2)]);
        let out = out.unwrap();
        assert!(
            out[1].is_none() && out[2].is_none(),
            "both updates in place:\n{program}"
        );
        assert_eq!(
            values(out[0].as_ref().unwrap()),
            values(&copied[0]),
            "the loss reads the old p"
        );
        assert_eq!(values(&after[0]), values(&copied[1]));
        assert_eq!(values(&after[2]), values(&copied[2]));
        assert_eq!(values(&after[1]), values(&b.inputs[1]), "g is only read");
    }
}

#[test]
fn an_update_whose_tensor_an_eager_call_reads_is_returned_and_the_tensor_untouched() {
    // `dropout(p)` runs its eager kernel, which reads `p`'s storage itself.
    let b = update_step(64, true);
    let program = lowered(&b.graph, &b.inputs);
    let jit = JitProgram::compile(&program).unwrap();
    let (out, after) = run_updating(&program, &jit, &b.inputs, &[None, Some(0), Some(2), None]);
    let out = out.unwrap();
    assert!(out[1].is_some(), "p's update is returned:\n{program}");
    // The eager call runs after the updates: nothing after an in-place write may fail, so
    // no update is written in place.
    assert!(out[2].is_some(), "{program}");
    assert_eq!(values(&after[2]), values(&b.inputs[2]), "m is untouched");
    assert_eq!(values(&after[0]), values(&b.inputs[0]), "p is untouched");
}

#[test]
fn a_run_that_fails_writes_no_target() {
    let b = update_step(64, false);
    let program = lowered(&b.graph, &b.inputs);
    let jit = JitProgram::compile(&program).unwrap();
    // A gradient of the wrong shape: the run fails before any step.
    let mut inputs = b.inputs.clone();
    inputs[1] = Tensor::zeros(&[63], DType::F32).unwrap();
    let (out, after) = run_updating(&program, &jit, &inputs, &[None, Some(0), Some(2)]);
    assert!(out.is_err());
    assert_eq!(values(&after[0]), values(&b.inputs[0]));
    assert_eq!(values(&after[2]), values(&b.inputs[2]));
}

#[test]
fn an_update_another_kernel_of_its_launch_group_reads_is_returned_and_the_tensor_untouched() {
    // `q = relu(p)` and `p_new = p - g * g` write program outputs only: one launch group,
    // whose kernels run at once. `q`'s kernel reads `p` as `p_new`'s writes it, so `p_new` is
    // not written over `p` even though its own kernel reads `p` last and elementwise.
    let n = 300_001;
    let mut b = Builder::new(DType::F32, false);
    let p = b.input(&[n], false);
    let g = b.input(&[n], false);
    let q = b.call(Op::Unary(tessera_tensor::op::UnaryOp::Relu), &[&p]);
    let gg = b.call(Op::Binary(BinaryOp::Mul), &[&g, &g]);
    let p_new = b.call(Op::Binary(BinaryOp::Sub), &[&p, &gg]);
    b.graph.output(&[&q, &p_new]).unwrap();
    let program = lowered(&b.graph, &b.inputs);
    assert_eq!(program.launch_groups.len(), 1, "{program}");
    assert_eq!(program.launch_groups[0], 0..2, "{program}");
    let jit = JitProgram::compile(&program).unwrap();
    let copied = tessera_kernel::run_program(&program, &NoEnvironment, &jit, &b.inputs).unwrap();
    let (out, after) = run_updating(&program, &jit, &b.inputs, &[None, Some(0)]);
    let out = out.unwrap();
    assert!(out[1].is_some(), "p's update is returned:\n{program}");
    assert_eq!(values(out[0].as_ref().unwrap()), values(&copied[0]));
    assert_eq!(values(out[1].as_ref().unwrap()), values(&copied[1]));
    assert_eq!(values(&after[0]), values(&b.inputs[0]), "p is untouched");
}
