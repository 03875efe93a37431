//! Launch groups on the PTX backend: the optimizer updates of several parameters (sizes not
//! multiples of the vector width, one smaller than a block, one needing more blocks than the
//! part is given) render as one `.entry` over the parts' blocks laid end to end, run in the
//! emulator with the kernel-IR interpreter's bits, and assemble with ptxas for sm_80 and
//! sm_90 in f32 and f64.

use crate::common;
use crate::emulated;

use common::{assemble, ptxas};
use emulated::EmulatedPtx;
use tessera_cuda::{PtxTarget, render_group};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, Kernel, NoEnvironment, Program, Step, lower, run_program};
use tessera_tensor::op::OptimOp;
use tessera_tensor::{DType, Op, TensorMeta};
use tessera_testkit::update_cases::{sgd_momentum, updates};

/// The kernels of `program`'s one launch group.
fn group_kernels(program: &Program) -> Vec<&Kernel> {
    assert_eq!(program.launch_groups.len(), 1, "{program}");
    program.steps[program.launch_groups[0].clone()]
        .iter()
        .map(|s| match s {
            Step::Kernel { kernel, .. } => kernel,
            Step::External { node, .. } => panic!("external %{node} in a group\n{program}"),
        })
        .collect()
}

#[test]
fn a_group_of_updates_runs_as_one_emulated_kernel_with_the_interpreters_bits() {
    // 3 points are fewer than a block's threads; 1031 and 33 x 17 are not multiples of four
    // (scalar tails after the vector loop); 2000 points on two blocks of 32 threads loop.
    let shapes: [&[usize]; 4] = [&[3], &[33, 17], &[1031], &[2000]];
    let (graph, inputs) = updates(&sgd_momentum(), &shapes, 2);
    let program = lower(&graph, &[]).unwrap();
    assert!(program.fallbacks.is_empty(), "{program}");
    assert_eq!(group_kernels(&program).len(), 4, "{program}");
    let want = run_program(&program, &NoEnvironment, &Interpreter, &inputs).unwrap();
    let emulated = EmulatedPtx::default();
    let got = run_program(&program, &NoEnvironment, &emulated, &inputs).unwrap();
    let bits = tessera_testkit::exact_bits;
    for (i, (w, g)) in want.iter().zip(&got).enumerate() {
        assert_eq!(bits(w), bits(g), "output {i}\n{program}");
    }
}

#[test]
fn a_group_kernel_dispatches_each_block_to_its_part_with_its_own_grid() {
    let shapes: [&[usize]; 3] = [&[5], &[4096], &[300]];
    let (graph, _) = updates(&sgd_momentum(), &shapes, 2);
    let program = lower(&graph, &[]).unwrap();
    let kernels = group_kernels(&program);
    let rendered = render_group(&kernels, &PtxTarget::SM80, &|r| r.blocks_needed.min(3)).unwrap();
    // The f64 learning rate keeps the kernels scalar: 5 points need 1 block of 256 threads,
    // 4096 points 16 (capped at 3), 300 points 2.
    let blocks: Vec<(u32, u32)> = rendered
        .parts
        .iter()
        .map(|p| (p.first_block, p.blocks))
        .collect();
    assert_eq!(blocks, [(0, 1), (1, 3), (4, 2)]);
    assert_eq!(rendered.grid, 6);
    let ptx = &rendered.ptx;
    assert_eq!(ptx.matches(".entry").count(), 1, "{ptx}");
    let params: usize = kernels.iter().map(|k| k.buffers.len()).sum();
    assert_eq!(ptx.matches(".param .u64").count(), params, "{ptx}");
    // Each part reads its block index and grid size rebased to its own blocks.
    for (first, count) in [(0, 1), (1, 3), (4, 2)] {
        assert!(
            ptx.lines()
                .any(|l| l.contains("sub.u32") && l.ends_with(&format!(", {first};"))),
            "part at {first}: {ptx}"
        );
        assert!(
            ptx.lines()
                .any(|l| l.contains("mov.u32") && l.ends_with(&format!(", {count};"))),
            "part at {first}: {ptx}"
        );
    }
}

#[test]
fn group_kernels_of_f32_and_f64_updates_assemble_for_sm80_and_sm90() {
    let Some(ptxas) = ptxas() else { return };
    let shapes: [&[usize]; 3] = [&[7], &[33, 17], &[1031]];
    let (sgd, _) = updates(&sgd_momentum(), &shapes, 2);
    let nesterov_free = OptimOp::SgdUpdate {
        momentum: 0.0,
        dampening: 0.0,
        weight_decay: 0.0,
        nesterov: false,
        maximize: true,
    };
    let mut plain = Graph::new();
    let lr = plain.placeholder("lr", TensorMeta::new([], DType::F64));
    let mut outs = Vec::new();
    for (i, shape) in shapes.iter().enumerate() {
        let meta = TensorMeta::new(shape.to_vec(), DType::F64);
        let p = plain.placeholder(&format!("p{i}"), meta.clone());
        let g = plain.placeholder(&format!("g{i}"), meta);
        let op = Op::Optim(nesterov_free.clone());
        outs.push(plain.call_function(op, &[&p, &g, &lr]).unwrap());
    }
    plain.output(&outs.iter().collect::<Vec<_>>()).unwrap();
    for (what, graph) in [("sgd momentum f32", sgd), ("sgd f64", plain)] {
        let program = lower(&graph, &[]).unwrap();
        let kernels = group_kernels(&program);
        assert_eq!(kernels.len(), 3, "{what}\n{program}");
        // sm_90 needs PTX 7.8 at least: what a CUDA 12.4 driver loads.
        let sm90 = PtxTarget::SM80
            .with_compute_capability(9, 0)
            .for_driver(12040);
        for (target, archs) in [(PtxTarget::SM80, &[80, 90][..]), (sm90, &[90][..])] {
            let rendered = render_group(&kernels, &target, &|r| r.grid_for(132)).unwrap();
            assert!(rendered.ptx.contains(&format!(".target sm_{}", target.sm)));
            assemble(&ptxas, &rendered.name, &rendered.ptx, archs);
        }
    }
}
