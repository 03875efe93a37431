//! Tessera's backend-neutral kernel IR, the lowering of op-level graphs into it, and its
//! interpreter, the executable specification every backend (cranelift on the CPU, PTX on the
//! GPU) is tested against. No lowering logic lives in a backend: a backend renders
//! [`Kernel`]s, one primitive at a time.
//!
//! # The IR
//!
//! A [`Program`] is a list of [`Step`]s over tensor slots ([`SlotId`]): the graph's inputs,
//! attributes read by name when the program runs, and the steps' results. A step is either a
//! generated [`Kernel`] or an external call of an op's eager kernel (the fallback for what
//! the lowering does not cover yet; [`Program::fallbacks`] says which nodes and why).
//!
//! A [`Kernel`] has typed buffer parameters ([`BufferId`], f32, f64, or f16/bf16 whose
//! elements are converted to f32 for arithmetic: [`ScalarType`]), a loop nest over the
//! output index space (its `domain`), a scalar expression DAG ([`ValueId`], [`Expr`])
//! evaluated once per point, and stores. Loads and stores index buffers with affine
//! [`IndexExpr`]s of the loop indices: broadcasting is a zero stride, and narrow, permute,
//! transpose, expand and reshape (where strides can express it) are folded into the offset
//! and strides, so views never move data. The DAG's primitives ([`UnaryFn`], [`BinaryFn`],
//! [`CompareFn`], select, cast) are few; every elementwise op of the op table is written in
//! them once, in the lowering table ([`lower_elementwise`]), following its eager kernel
//! operation for operation so that generated code rounds as eager code does (f32 `exp`, an
//! inline polynomial within 2 ulp of eager `exp`, is the one exception: [`exp_poly`]).
//!
//! ```
//! use tessera_fx::Graph;
//! use tessera_kernel::{Interpreter, lower, run_program};
//! use tessera_tensor::{DType, Op, Tensor, TensorMeta, op::{BinaryOp, UnaryOp}};
//!
//! let mut g = Graph::new();
//! let x = g.placeholder("x", TensorMeta::new([2, 3], DType::F32));
//! let b = g.placeholder("b", TensorMeta::new([3], DType::F32));
//! let sum = g.call_function(Op::Binary(BinaryOp::Add), &[&x, &b])?;
//! let relu = g.call_function(Op::Unary(UnaryOp::Relu), &[&sum])?;
//! g.output(&[&relu])?;
//!
//! let program = lower(&g, &[])?;
//! assert!(program.fallbacks.is_empty());
//! assert_eq!(program.kernels().count(), 1);
//!
//! let x = Tensor::from_vec(vec![-1.0f32, 0.5, 2.0, -3.0, 1.0, 0.0], &[2, 3])?;
//! let b = Tensor::from_vec(vec![0.5f32, 0.5, -1.0], &[3])?;
//! let out = run_program(&program, &tessera_kernel::NoEnvironment, &Interpreter, &[x, b])?;
//! assert_eq!(out[0].to_vec::<f32>()?, vec![0.0, 1.0, 1.0, 0.0, 1.5, 0.0]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Reductions and external GEMM calls
//!
//! A kernel may have reduction loops ([`Kernel::reduce`]) inside its output loops and
//! accumulations ([`Expr::Reduce`]) over them; [`Stages`] says when each value is computed
//! (once per output point, or in which sweep over the reduction loops), so softmax and norms
//! are one kernel of several sweeps, with the elementwise prologue and epilogue fused
//! ([`lower_reduction`] is their table). A kernel may also start with a [`GemmCall`] of the
//! `gemm` crate into a scratch buffer for the current block of its outermost loop, which its
//! elementwise epilogue (bias, activation, residual) then reads while it is in cache.
//!
//! # Memory
//!
//! A [`MemoryPlan`], computed once per program from the steps' liveness, gives every
//! intermediate kernel buffer (outputs only kernels read, GEMM and convolution scratch) an
//! offset in one arena, reusing the bytes of buffers no longer live; a [`Workspace`] holds
//! the arena and the run's tables, so a warm [`run_planned`] allocates only its output tensors
//! and [`run_planned_into`] writes them into the caller's.
//!
//! # Launch groups
//!
//! The elementwise kernels that write only program outputs (a training step's parameter
//! updates) are moved together at the end of the lowering and recorded as one launch group
//! ([`Program::launch_groups`], [`launch_group`]): they write no arena byte and read none
//! another writes, so the runner hands them to the executor in one call
//! ([`KernelExecutor::execute_group`]), which a backend launches once.
//!
//! # Plan: what fits in later without redesign
//!
//! - **Convolution**: an external call like [`GemmCall`] (im2col + GEMM, or the eager conv
//!   kernel per block of output rows) with the same epilogue machinery.
//! - **Schedules**: [`Schedule`] holds the vector width, unroll and the loop that may run in
//!   parallel; backends follow it, the lowering's [`schedule`] pass chooses it. Kernels
//!   compiled by the CPU backend already take the outer loop's range as arguments, so a
//!   parallel split is a change of the caller only.
//!
//! # Dynamic batch
//!
//! The outermost loop's range is an argument of every compiled kernel, so code compiled for
//! one leading (batch) extent runs a program lowered for another whenever their kernels
//! differ only there, in buffer lengths and in the runner's choices
//! ([`Kernel::code_difference`], [`Program::code_difference`]). The schedule keeps an
//! outermost loop of extent 1 for this reason: a batch of one has the same loops as any other.

mod code_identity;
pub mod conv;
pub mod conv_choice;
pub mod derived;
mod error;
pub use tessera_tensor::exp_poly;
pub mod gather;
pub mod gemm;
pub mod guard;
mod hoist;
mod ids;
pub mod in_place;
pub mod interior;
mod interpret;
mod kernel;
pub mod launch_group;
mod lower;
pub mod math;
pub mod memory_plan;
mod print;
mod program;
pub mod read_back;
pub(crate) mod reduce_table;
mod run;
mod run_in_place;
mod run_into;
mod scalar;
pub mod schedule;
mod stages;
mod table;
mod unary_backward_table;
mod update_table;
mod workspace;

pub use conv::{ConvAlgorithm, ConvCall, run_conv};
pub use conv_choice::{ConvChoice, WinogradPolicy};
pub use derived::Derivation;
pub use error::{KernelError, Result};
pub use gemm::{GemmCall, MatrixIndex};
pub use guard::Bound;
pub use hoist::hoisted_values;
pub use ids::{BufferId, LoopId, SlotId, ValueId};
pub use in_place::{InPlaceOutput, UpdateTarget, in_place_outputs};
pub use interior::{RowBound, Unguarded, unguarded_index};
pub use interpret::{Interpreter, interpret};
pub use kernel::{
    BufferParam, BufferRole, IndexExpr, Kernel, KernelBuilder, Schedule, Store, operands,
};
pub use launch_group::{check_launch_groups, group_launches};
pub use lower::{LowerOptions, lower, lower_with};
pub use memory_plan::{ArenaBuffer, MemoryPlan, SlotHome};
pub use program::{ExternalCall, Fallback, Program, Slot, SlotSource, SlotView, Step};
pub use reduce_table::lower_reduction;
pub use run::{
    BoxError, BufferPtr, Environment, GroupPart, KernelExecutor, NoEnvironment, StepCost,
    StepTimer, run_planned, run_program, run_program_timed,
};
pub use run_in_place::run_planned_updating;
pub use run_into::run_planned_into;
pub use scalar::{ARG_NONE, BinaryFn, CompareFn, Expr, ReduceFn, ScalarType, UnaryFn, Value};
pub use schedule::schedule;
pub use stages::Stages;
pub use table::lower_elementwise;
pub use update_table::lower_update;
pub use workspace::Workspace;
