//! Runs one block: each thread runs alone until it reaches `bar.sync`, `shfl.sync`, `mma.sync`
//! or its exit; then the warps whose 32 lanes all wait at the same shuffle exchange values (or
//! compute their `mma`), and once every
//! thread that has not exited waits at the same barrier, the barrier opens.

use super::error::{EmuError, Fault, Result};
use super::execute::{Flow, execute};
use super::program::{Op, ShflMode, Ty};
use super::thread::{BlockEnv, State, Thread};

pub const WARP_SIZE: usize = 32;

pub fn run_block(env: &mut BlockEnv, step_limit: u64) -> Result<()> {
    let mut threads: Vec<Thread> = (0..env.ntid)
        .map(|tid| Thread::new(tid, env.entry.registers.len()))
        .collect();
    loop {
        for thread in threads.iter_mut().filter(|t| t.state == State::Running) {
            run_thread(env, thread, step_limit)?;
        }
        if resolve_shuffles(env, &mut threads)? {
            continue;
        }
        if threads.iter().all(|t| t.state == State::Exited) {
            return Ok(());
        }
        release_barrier(env, &mut threads)?;
    }
}

fn run_thread(env: &mut BlockEnv, thread: &mut Thread, step_limit: u64) -> Result<()> {
    let entry = env.entry;
    loop {
        let Some(instr) = entry.instrs.get(thread.pc) else {
            thread.state = State::Exited;
            return Ok(());
        };
        thread.steps += 1;
        if thread.steps > step_limit {
            return Err(EmuError::StepLimit {
                block: env.ctaid,
                thread: thread.tid,
                limit: step_limit,
            });
        }
        let flow = execute(env, thread, instr).map_err(|fault| EmuError::Fault {
            line: instr.line,
            block: env.ctaid,
            thread: thread.tid,
            fault,
        })?;
        match flow {
            Flow::Next => thread.pc += 1,
            Flow::Jump(target) => thread.pc = target,
            Flow::Barrier | Flow::Shuffle | Flow::Exit => {
                thread.state = match flow {
                    Flow::Barrier => State::AtBarrier,
                    Flow::Shuffle => State::AtShuffle,
                    _ => State::Exited,
                };
                return Ok(());
            }
        }
    }
}

fn describe_state(env: &BlockEnv, thread: &Thread) -> String {
    let line = env.entry.instrs.get(thread.pc).map_or(0, |i| i.line);
    match thread.state {
        State::Running => "is running".to_string(),
        State::AtBarrier => format!("waits at bar.sync on line {line}"),
        State::AtShuffle => format!("waits at shfl.sync on line {line}"),
        State::Exited => "has exited".to_string(),
    }
}

/// Completes the shuffles of every warp whose lanes all wait at one; returns whether any did.
fn resolve_shuffles(env: &BlockEnv, threads: &mut [Thread]) -> Result<bool> {
    let mut progressed = false;
    for (warp, lanes) in threads.chunks_mut(WARP_SIZE).enumerate() {
        let Some(first) = lanes.iter().find(|t| t.state == State::AtShuffle) else {
            continue;
        };
        let pc = first.pc;
        let instr = &env.entry.instrs[pc];
        let divergence = |detail: String| EmuError::ShuffleDivergence {
            line: instr.line,
            block: env.ctaid,
            warp: warp as u32,
            detail,
        };
        if lanes.len() < WARP_SIZE {
            return Err(divergence(format!(
                "the warp has {} threads (block size {} is not a multiple of 32) and the member mask names 32",
                lanes.len(),
                env.ntid
            )));
        }
        if let Some(other) = lanes
            .iter()
            .find(|t| t.state != State::AtShuffle || t.pc != pc)
        {
            return Err(divergence(format!(
                "lane {} {} while lane {} waits at the shuffle",
                other.tid as usize % WARP_SIZE,
                describe_state(env, other),
                first.tid as usize % WARP_SIZE
            )));
        }
        if let Op::TensorCore(super::tensor_core::TensorCoreOp::Mma(kind)) = instr.op {
            super::tensor_core::complete_mma(env, lanes, instr, kind, warp)?;
            progressed = true;
            continue;
        }
        let Op::Shfl(mode) = instr.op else {
            return Err(divergence(
                "a thread waits at a shuffle that is not shfl.sync".to_string(),
            ));
        };
        let fault = |lane: usize, fault: Fault| EmuError::Fault {
            line: instr.line,
            block: env.ctaid,
            thread: lanes_tid(warp, lane),
            fault,
        };
        let mut sources = Vec::with_capacity(WARP_SIZE);
        let mut values = Vec::with_capacity(WARP_SIZE);
        for (lane, thread) in lanes.iter().enumerate() {
            let read = |i: usize, ty: Ty| {
                env.read(thread, &instr.operands[i], ty)
                    .map_err(|f| fault(lane, f))
            };
            values.push(read(1, Ty::B32)?);
            let b = read(2, Ty::U32)? as usize;
            let c = read(3, Ty::U32)? as usize;
            let member_mask = read(4, Ty::U32)?;
            if member_mask != 0xffff_ffff {
                return Err(fault(
                    lane,
                    Fault::BadOperand(format!("member mask {member_mask:#x} (only 0xffffffff)")),
                ));
            }
            sources.push(source_lane(mode, lane, b, c));
        }
        for (lane, thread) in lanes.iter_mut().enumerate() {
            env.write(thread, &instr.operands[0], Ty::B32, values[sources[lane]])
                .map_err(|f| fault(lane, f))?;
            thread.pc += 1;
            thread.state = State::Running;
        }
        progressed = true;
    }
    Ok(progressed)
}

fn lanes_tid(warp: usize, lane: usize) -> u32 {
    (warp * WARP_SIZE + lane) as u32
}

/// The lane `lane` reads from, as PTX defines it for `c` = clamp | (segment mask << 8).
fn source_lane(mode: ShflMode, lane: usize, b: usize, c: usize) -> usize {
    let segment_mask = (c >> 8) & 0x1f;
    let clamp = c & 0x1f;
    let max_lane = (lane & segment_mask) | (clamp & !segment_mask);
    let (j, in_range) = match mode {
        ShflMode::Bfly => (lane ^ (b & 0x1f), (lane ^ (b & 0x1f)) <= max_lane),
        ShflMode::Down => (lane + (b & 0x1f), lane + (b & 0x1f) <= max_lane),
    };
    if in_range { j } else { lane }
}

/// Opens the barrier every waiting thread waits at; waiting at different ones is a deadlock.
fn release_barrier(env: &mut BlockEnv, threads: &mut [Thread]) -> Result<()> {
    let mut groups: Vec<(usize, Vec<u32>)> = Vec::new();
    for thread in threads.iter().filter(|t| t.state == State::AtBarrier) {
        match groups.iter_mut().find(|(pc, _)| *pc == thread.pc) {
            Some((_, tids)) => tids.push(thread.tid),
            None => groups.push((thread.pc, vec![thread.tid])),
        }
    }
    if groups.len() != 1 {
        let detail = if groups.is_empty() {
            "no thread can make progress".to_string()
        } else {
            let parts: Vec<String> = groups
                .iter()
                .map(|(pc, tids)| {
                    format!(
                        "{} threads (first {}) wait at bar.sync on line {}",
                        tids.len(),
                        tids[0],
                        env.entry.instrs[*pc].line
                    )
                })
                .collect();
            format!("threads wait at different barriers: {}", parts.join("; "))
        };
        return Err(EmuError::BarrierDeadlock {
            block: env.ctaid,
            detail,
        });
    }
    for thread in threads.iter_mut().filter(|t| t.state == State::AtBarrier) {
        thread.pc += 1;
        thread.state = State::Running;
    }
    env.shared.barrier();
    Ok(())
}
