//! The PTX emulator reports renderer bugs as errors that name the line: out-of-bounds and
//! misaligned accesses, diverged shuffles, barrier deadlocks, uninitialised registers, endless
//! loops, conflicting writes, and any instruction outside the subset.

use crate::emulator;

use emulator::{EmuError, Fault, GlobalMemory, LaunchConfig, Module, ParamValue};

fn module(text: &str) -> Module {
    Module::parse(text).expect("hand-written PTX parses")
}

/// The line of `text` (1-based) holding `needle`.
fn line_of(text: &str, needle: &str) -> usize {
    text.lines()
        .position(|l| l.contains(needle))
        .expect("needle is in the text")
        + 1
}

#[test]
fn store_past_the_end_of_a_buffer_is_out_of_bounds() {
    let text = include_str!("ptx/oob_store.ptx");
    let mut mem = GlobalMemory::default();
    let out = mem.alloc("out", 100 * 4);
    let err = module(text)
        .launch(
            "oob_store",
            LaunchConfig::new(2, 64),
            &[ParamValue::Ptr(out), ParamValue::U32(100)],
            &mut mem,
        )
        .unwrap_err();
    match err {
        EmuError::Fault {
            line,
            block,
            thread,
            fault:
                Fault::OutOfBounds {
                    access: "store",
                    space: "global",
                    address,
                    bytes: 4,
                },
        } => {
            assert_eq!(line, line_of(text, "st.global.f32"));
            assert_eq!(
                (block, thread),
                (1, 36),
                "global id 100 is the first past the end"
            );
            assert_eq!(address, out + 400);
        }
        other => panic!("expected an out-of-bounds store, got {other}"),
    }
}

#[test]
fn shuffle_reached_by_part_of_a_warp_is_divergence() {
    let text = include_str!("ptx/diverged_shuffle.ptx");
    let mut mem = GlobalMemory::default();
    let out = mem.alloc("out", 32 * 4);
    let err = module(text)
        .launch(
            "diverged_shuffle",
            LaunchConfig::new(1, 32),
            &[ParamValue::Ptr(out)],
            &mut mem,
        )
        .unwrap_err();
    match &err {
        EmuError::ShuffleDivergence {
            line,
            block: 0,
            warp: 0,
            detail,
        } => {
            assert_eq!(*line, line_of(text, "shfl.sync"));
            assert!(detail.contains("lane 0 has exited"), "{err}");
        }
        other => panic!("expected shuffle divergence, got {other}"),
    }
}

#[test]
fn shuffle_in_a_partial_warp_is_divergence() {
    let m = module(include_str!("ptx/row_sum.ptx"));
    let mut mem = GlobalMemory::default();
    let (x, out) = (mem.upload_f32("x", &[1.0; 48]), mem.alloc("out", 4));
    let params = [
        ParamValue::Ptr(x),
        ParamValue::Ptr(out),
        ParamValue::U32(1),
        ParamValue::U32(48),
    ];
    let err = m
        .launch("row_sum", LaunchConfig::new(1, 48), &params, &mut mem)
        .unwrap_err();
    assert!(
        matches!(&err, EmuError::ShuffleDivergence { warp: 1, detail, .. } if detail.contains("not a multiple of 32")),
        "{err}"
    );
}

#[test]
fn threads_waiting_at_different_barriers_deadlock() {
    let text = include_str!("ptx/split_barrier.ptx");
    let mut mem = GlobalMemory::default();
    let out = mem.alloc("out", 4);
    let err = module(text)
        .launch(
            "split_barrier",
            LaunchConfig::new(1, 64),
            &[ParamValue::Ptr(out)],
            &mut mem,
        )
        .unwrap_err();
    let EmuError::BarrierDeadlock { block: 0, detail } = &err else {
        panic!("expected a deadlock, got {err}")
    };
    let first = line_of(text, "    bar.sync 0;");
    let second = first
        + text
            .lines()
            .skip(first)
            .position(|l| l.contains("    bar.sync 0;"))
            .unwrap()
        + 1;
    assert!(
        detail.contains(&format!(
            "32 threads (first 32) wait at bar.sync on line {first}"
        )),
        "{err}"
    );
    assert!(
        detail.contains(&format!(
            "32 threads (first 0) wait at bar.sync on line {second}"
        )),
        "{err}"
    );
}

#[test]
fn exited_threads_count_as_arrived_at_a_barrier() {
    let m = module(include_str!("ptx/exit_then_barrier.ptx"));
    let n = 40;
    let mut mem = GlobalMemory::default();
    let out = mem.alloc("out", n * 4);
    m.launch(
        "exit_then_barrier",
        LaunchConfig::new(1, 64),
        &[ParamValue::Ptr(out), ParamValue::U32(n as u32)],
        &mut mem,
    )
    .unwrap();
    let want: Vec<f32> = (0..n).map(|i| ((i + 1) % n) as f32).collect();
    assert_eq!(mem.read_f32("out").unwrap(), want);
}

#[test]
fn instruction_outside_the_subset_is_named() {
    let text = include_str!("ptx/outside_subset.ptx");
    let err = Module::parse(text).unwrap_err();
    assert_eq!(
        err,
        EmuError::UnknownInstruction {
            line: line_of(text, "tanh.approx.f32 %f2"),
            opcode: "tanh.approx.f32".into()
        }
    );
}

#[test]
fn float_add_without_rounding_modifier_is_outside_the_subset() {
    // ptxas may contract add.f32 and mul.f32 into fma; the renderer must say .rn.
    let text = include_str!("ptx/vadd.ptx").replace("add.rn.f32", "add.f32");
    let err = Module::parse(&text).unwrap_err();
    assert!(
        matches!(&err, EmuError::UnsupportedForm { opcode, line, .. } if opcode == "add.f32" && *line == line_of(&text, "add.f32")),
        "{err}"
    );
}

#[test]
fn parse_errors_name_the_line() {
    let text = include_str!("ptx/vadd.ptx")
        .replace("add.s64 %rd6, %rd2, %rd4;", "add.s64 %rd6, %rd2, %rd9;");
    let err = Module::parse(&text).unwrap_err();
    assert_eq!(
        err,
        EmuError::Syntax {
            line: line_of(&text, "%rd9"),
            message: "undeclared register %rd9".into()
        }
    );
}

fn run_fault(entry: &str, grid: u32, block: u32) -> (EmuError, usize) {
    let text = include_str!("ptx/faults.ptx");
    let mut mem = GlobalMemory::default();
    let out = mem.alloc("out", 4096);
    let mut config = LaunchConfig::new(grid, block);
    config.step_limit = 10_000;
    let err = module(text)
        .launch(entry, config, &[ParamValue::Ptr(out)], &mut mem)
        .unwrap_err();
    (err, text.lines().count())
}

#[test]
fn reading_a_register_never_written_is_an_error() {
    let (err, _) = run_fault("uninitialised", 1, 1);
    assert!(
        matches!(&err, EmuError::Fault { fault: Fault::UninitialisedRegister(r), .. } if r == "%f2"),
        "{err}"
    );
}

#[test]
fn endless_loop_hits_the_step_limit() {
    let (err, _) = run_fault("endless", 1, 32);
    assert_eq!(
        err,
        EmuError::StepLimit {
            block: 0,
            thread: 0,
            limit: 10_000
        }
    );
}

#[test]
fn two_threads_writing_one_address_conflict() {
    let (err, _) = run_fault("same_address", 1, 2);
    assert!(
        matches!(
            &err,
            EmuError::Fault {
                thread: 1,
                fault: Fault::ConflictingGlobalWrite { other: 0, .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn misaligned_vector_load_is_an_error() {
    let (err, _) = run_fault("misaligned", 1, 1);
    assert!(
        matches!(
            &err,
            EmuError::Fault {
                fault: Fault::Misaligned { align: 16, .. },
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn shared_memory_read_before_write_is_nan_poison() {
    let m = module(include_str!("ptx/faults.ptx"));
    let mut mem = GlobalMemory::default();
    let out = mem.alloc("out", 64 * 4);
    m.launch(
        "shared_poison",
        LaunchConfig::new(1, 64),
        &[ParamValue::Ptr(out)],
        &mut mem,
    )
    .unwrap();
    assert!(mem.read_f32("out").unwrap().iter().all(|v| v.is_nan()));
}

#[test]
fn launch_with_wrong_parameters_is_refused() {
    let m = module(include_str!("ptx/vadd.ptx"));
    let mut mem = GlobalMemory::default();
    let a = mem.upload_f32("a", &[1.0]);
    let err = m
        .launch(
            "vadd",
            LaunchConfig::new(1, 32),
            &[ParamValue::Ptr(a)],
            &mut mem,
        )
        .unwrap_err();
    assert!(
        matches!(&err, EmuError::InvalidLaunch { reason, .. } if reason.contains("takes 4 parameters, 1 given")),
        "{err}"
    );
    let params = [
        ParamValue::Ptr(a),
        ParamValue::Ptr(a),
        ParamValue::Ptr(a),
        ParamValue::U64(1),
    ];
    let err = m
        .launch("vadd", LaunchConfig::new(1, 32), &params, &mut mem)
        .unwrap_err();
    assert!(
        matches!(&err, EmuError::InvalidLaunch { reason, .. } if reason.contains("parameter n is .U32")),
        "{err}"
    );
}
