//! The eager kernels of the optimizer ops: [`UpdateArith`] on plain numbers (f32, f64, and
//! f16/bf16 computed in f32 with every operation's result rounded to the half type, as the
//! eager ops round each of their outputs), and one parallel pass over the elements that reads
//! every input and writes every output.

use super::formula::UpdateArith;
use crate::cpu::{PAR_CHUNK, try_uninit_buffer};
use crate::op::{BinaryOp, UnaryOp};
use crate::storage::StorageElement;
use crate::{Float, Result, Tensor};
use rayon::prelude::*;
use std::marker::PhantomData;

/// Plain arithmetic in `T`, each operation rounded by `R` (the identity, or a half type).
pub(super) struct Numbers<T, R>(PhantomData<(T, R)>);

impl<T, R> Numbers<T, R> {
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

impl<T: Float, R: Rounding<T>> UpdateArith for Numbers<T, R> {
    type Elem = T;
    type Scalar = f64;
    type Step = f32;

    #[inline(always)]
    fn constant(&mut self, value: f64) -> T {
        T::from_f64(value)
    }

    #[inline(always)]
    fn binary(&mut self, op: BinaryOp, a: T, b: T) -> T {
        R::round(op.eval(a, b))
    }

    #[inline(always)]
    fn unary(&mut self, op: UnaryOp, x: T) -> T {
        R::round(op.eval(x))
    }

    #[inline(always)]
    fn scalar_elem(&mut self, s: f64) -> T {
        T::from_f64(s)
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

/// Evaluates `f` on element `i` of every input for every `i`, in parallel chunks, giving
/// `O` outputs of the inputs' length.
pub(super) fn elementwise<T, const I: usize, const O: usize>(
    op: &str,
    inputs: [&[T]; I],
    f: impl Fn([T; I]) -> [T; O] + Sync + Send,
) -> Result<[Vec<T>; O]>
where
    T: crate::Element + Send + Sync,
{
    let n = inputs.first().map_or(0, |s| s.len());
    let mut outputs: [Vec<T>; O] = std::array::from_fn(|_| Vec::new());
    for out in &mut outputs {
        *out = try_uninit_buffer::<T>(op, n)?;
    }
    let fill = |start: usize, chunk: [&mut [T]; O]| {
        let len = chunk.first().map_or(0, |c| c.len());
        let mut chunk = chunk;
        for i in 0..len {
            let results = f(inputs.map(|s| s[start + i]));
            for (out, v) in chunk.iter_mut().zip(results) {
                out[i] = v;
            }
        }
    };
    if n < PAR_CHUNK {
        fill(0, outputs.each_mut().map(|v| v.as_mut_slice()));
    } else {
        let mut chunked = outputs.each_mut().map(|v| v.chunks_mut(PAR_CHUNK));
        let rows: Vec<[&mut [T]; O]> = (0..n.div_ceil(PAR_CHUNK))
            .map(|_| chunked.each_mut().map(|c| c.next().unwrap_or_default()))
            .collect();
        rows.into_par_iter()
            .enumerate()
            .for_each(|(c, row)| fill(c * PAR_CHUNK, row));
    }
    Ok(outputs)
}
