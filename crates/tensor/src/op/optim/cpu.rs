//! The eager kernels of the optimizer ops: [`UpdateArith`] on blocks of [`LANES`] numbers
//! (f32, f64, and f16/bf16 computed in f32 with every operation's result rounded to the half
//! type, as the eager ops round each of their outputs), and one parallel pass over the
//! elements, block by block, that reads every input and writes every output. Each operation
//! of the formula runs over a whole block (a short loop the compiler vectorises), so the
//! option tests of the formula run once per block, not once per element.

use super::formula::UpdateArith;
use crate::cpu::{PAR_CHUNK, try_uninit_buffer};
use crate::op::{BinaryOp, UnaryOp};
use crate::storage::StorageElement;
use crate::{Float, Result, Tensor};
use rayon::prelude::*;
use std::marker::PhantomData;

/// Elements per block.
pub(super) const LANES: usize = 64;

/// A block of `L` elements.
pub(super) type Block<T, const L: usize> = [T; L];

/// Arithmetic on blocks of `L` numbers of type `T`, each operation rounded by `R` (the
/// identity, or a half type). Scalars are single f64 numbers.
pub(super) struct Numbers<T, R, const L: usize = LANES>(PhantomData<(T, R)>);

impl<T, R, const L: usize> Numbers<T, R, L> {
    pub(super) fn new() -> Self {
        Numbers(PhantomData)
    }
}

/// How results are rounded after each operation.
pub(super) trait Rounding<T> {
    fn round(x: T) -> T;
}

/// No rounding beyond the compute type's own.
pub(super) struct Exact;

impl<T> Rounding<T> for Exact {
    #[inline(always)]
    fn round(x: T) -> T {
        x
    }
}

/// f32 results rounded to the half type `H` (f16 or bf16) and widened back.
pub(super) struct ToHalf<H>(PhantomData<H>);

impl Rounding<f32> for ToHalf<half::f16> {
    #[inline(always)]
    fn round(x: f32) -> f32 {
        half::f16::from_f32(x).to_f32()
    }
}

impl Rounding<f32> for ToHalf<half::bf16> {
    #[inline(always)]
    fn round(x: f32) -> f32 {
        half::bf16::from_f32(x).to_f32()
    }
}

impl<T: Float, R: Rounding<T>, const L: usize> UpdateArith for Numbers<T, R, L> {
    type Elem = Block<T, L>;
    type Scalar = f64;
    type Step = f32;

    #[inline(always)]
    fn constant(&mut self, value: f64) -> Block<T, L> {
        [T::from_f64(value); L]
    }

    #[inline(always)]
    fn binary(&mut self, op: BinaryOp, a: Block<T, L>, b: Block<T, L>) -> Block<T, L> {
        let mut out = a;
        for (o, y) in out.iter_mut().zip(b) {
            *o = R::round(op.eval(*o, y));
        }
        out
    }

    #[inline(always)]
    fn unary(&mut self, op: UnaryOp, x: Block<T, L>) -> Block<T, L> {
        let mut out = x;
        for o in &mut out {
            *o = R::round(op.eval(*o));
        }
        out
    }

    #[inline(always)]
    fn scalar_elem(&mut self, s: f64) -> Block<T, L> {
        [T::from_f64(s); L]
    }

    #[inline(always)]
    fn scalar_constant(&mut self, value: f64) -> f64 {
        value
    }

    #[inline(always)]
    fn scalar_binary(&mut self, op: BinaryOp, a: f64, b: f64) -> f64 {
        op.eval(a, b)
    }

    #[inline(always)]
    fn scalar_unary(&mut self, op: UnaryOp, x: f64) -> f64 {
        op.eval(x)
    }

    #[inline(always)]
    fn step_increment(&mut self, step: f32) -> f32 {
        step + 1.0
    }

    #[inline(always)]
    fn step_scalar(&mut self, step: f32) -> f64 {
        f64::from(step)
    }
}

/// Calls `f` with the contiguous elements of every tensor in `tensors` (all of dtype `T`).
pub(super) fn with_slices<T: StorageElement, R>(
    tensors: &[&Tensor],
    f: impl FnOnce(&[&[T]]) -> R,
) -> Result<R> {
    fn go<T: StorageElement, R, F: FnOnce(&[&[T]]) -> R>(
        rest: &[&Tensor],
        held: &[&[T]],
        f: F,
    ) -> Result<R> {
        match rest.split_first() {
            None => Ok(f(held)),
            Some((first, rest)) => first.with_slice(|s: &[T]| {
                let mut next = held.to_vec();
                next.push(s);
                go(rest, &next, f)
            })?,
        }
    }
    go(tensors, &[], f)
}

/// Evaluates `f` on every block of [`LANES`] elements of the inputs (the last one padded
/// with zeros, its padding dropped), in parallel chunks, giving `O` outputs of the inputs'
/// length.
pub(super) fn elementwise<T, const I: usize, const O: usize>(
    op: &str,
    inputs: [&[T]; I],
    f: impl Fn([Block<T, LANES>; I]) -> [Block<T, LANES>; O] + Sync + Send,
) -> Result<[Vec<T>; O]>
where
    T: crate::Element + Send + Sync,
{
    let n = inputs.first().map_or(0, |s| s.len());
    if inputs.iter().any(|s| s.len() != n) {
        return Err(crate::TensorError::invalid(
            op,
            "the parameter, gradient and state differ in length",
        ));
    }
    let mut outputs: [Vec<T>; O] = std::array::from_fn(|_| Vec::new());
    for out in &mut outputs {
        *out = try_uninit_buffer::<T>(op, n)?;
    }
    if n < PAR_CHUNK {
        fill_chunk(&f, inputs, 0, outputs.each_mut().map(|v| v.as_mut_slice()));
    } else {
        let mut chunked = outputs.each_mut().map(|v| v.chunks_mut(PAR_CHUNK));
        let rows: Vec<[&mut [T]; O]> = (0..n.div_ceil(PAR_CHUNK))
            .map(|_| chunked.each_mut().map(|c| c.next().unwrap_or_default()))
            .collect();
        rows.into_par_iter()
            .enumerate()
            .for_each(|(c, row)| fill_chunk(&f, inputs, c * PAR_CHUNK, row));
    }
    Ok(outputs)
}

/// Fills the output slices `chunk` (each as long as the first, all within the inputs) from
/// the inputs' elements from `start` on, block by block. The one place `f` is called, so that
/// it is inlined into this loop.
fn fill_chunk<T, F, const I: usize, const O: usize>(
    f: &F,
    inputs: [&[T]; I],
    start: usize,
    mut chunk: [&mut [T]; O],
) where
    T: crate::Element,
    F: Fn([Block<T, LANES>; I]) -> [Block<T, LANES>; O],
{
    let len = chunk.first().map_or(0, |c| c.len());
    let mut at = 0;
    while at < len {
        let m = (len - at).min(LANES);
        let (from, to) = (start + at, start + at + m);
        // Explicit loops, not `array::map`, which the compiler leaves as calls and copies;
        // whole blocks copy a constant length (inline moves, not `memcpy` calls).
        let mut blocks = [[T::default(); LANES]; I];
        for (block, s) in blocks.iter_mut().zip(&inputs) {
            if m == LANES {
                block.copy_from_slice(&s[from..to]);
            } else {
                block[..m].copy_from_slice(&s[from..to]);
            }
        }
        for (out, result) in chunk.iter_mut().zip(f(blocks)) {
            if m == LANES {
                out[at..at + LANES].copy_from_slice(&result);
            } else {
                out[at..at + m].copy_from_slice(&result[..m]);
            }
        }
        at += m;
    }
}
