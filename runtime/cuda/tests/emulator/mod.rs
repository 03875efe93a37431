//! A PTX emulator for the subset Tessera's renderer emits, used by the tests to run generated
//! kernels on the CPU and compare them with the kernel-IR interpreter where no GPU exists.
//!
//! It models: 1-D grids of 1-D blocks; warps of 32 threads; `shfl.sync` (all 32 lanes must
//! reach the same shuffle: divergence is an error); `bar.sync 0` (a thread that exited counts
//! as arrived; threads waiting at different barriers are a deadlock error); per-block shared
//! memory filled with a NaN poison pattern, with a race check between barriers; global memory
//! as named buffers, poison-filled when allocated, with out-of-bounds, misaligned and
//! conflicting (two threads, one byte) accesses reported as errors; registers that must be
//! written before they are read; bit-exact IEEE round-to-nearest f32/f64 arithmetic, PTX's
//! NaN-ignoring min/max, `cvt` rounding modes and saturation, unordered `setp`, `testp`; f16 and
//! bf16 elements in `.b16` registers (`ld/st.global.b16`, their `.v4` forms, and the `cvt`s
//! between them and f32, rounding to nearest even).
//!
//! It does not model: the approximation error of `.approx` instructions (`ex2.approx.ftz.f32`
//! and `lg2.approx.ftz.f32` are computed exactly, 2^x and log2 x, only flushing subnormals),
//! timing, memory ordering between blocks (blocks run one after another), warp divergence
//! beyond the check at shuffles, or NaN payloads (every NaN result is the canonical NaN).

#![allow(dead_code, unused_imports)]

mod decode;
mod error;
mod execute;
mod float;
mod global;
mod half;
mod launch;
mod lexer;
mod parse;
mod program;
mod scheduler;
mod shared;
mod tensor_core;
mod thread;

pub use error::{EmuError, Fault, Result};
pub use global::GlobalMemory;
pub use launch::{LaunchConfig, ParamValue};
pub use program::Module;
