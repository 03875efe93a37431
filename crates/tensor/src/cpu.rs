//! Shared machinery of the CPU kernels: dtype dispatch, parallel elementwise maps over
//! broadcast operands, and gathering strided views into contiguous buffers.

pub(crate) use crate::buffer_cache::try_uninit_buffer;
use crate::layout::{Layout, broadcast_layout};
use crate::storage::StorageElement;
use crate::{Result, Tensor};
use rayon::prelude::*;

/// Elements per parallel task; below this a map runs on the calling thread.
pub(crate) const PAR_CHUNK: usize = 1 << 15;

/// A `match` on `$dtype` with one arm per listed `DType` variant, each running `$body` with
/// `$T` bound to that variant's Rust type; any further arms follow the list.
macro_rules! dtype_match {
    ($dtype:expr, $T:ident => $body:expr, [$($variant:ident => $ty:ty),+ $(,)?] $($rest:tt)*) => {
        match $dtype {
            $($crate::DType::$variant => {
                type $T = $ty;
                $body
            })+
            $($rest)*
        }
    };
}
pub(crate) use dtype_match;

/// Runs `$body` with `$T` bound to the Rust type of a float dtype (f32 or f64); other dtypes
/// give an unsupported-dtype error naming `$op`. f16/bf16 are widened by dispatch before this.
macro_rules! float_dispatch {
    ($dtype:expr, $op:expr, $T:ident => $body:expr) => {
        $crate::cpu::dtype_match!($dtype, $T => $body, [F32 => f32, F64 => f64]
            other => return Err($crate::TensorError::dtype($op, other)),
        )
    };
}
pub(crate) use float_dispatch;

/// Runs `$body` with `$T` bound to the Rust type of any dtype.
macro_rules! any_dispatch {
    ($dtype:expr, $T:ident => $body:expr) => {
        $crate::cpu::dtype_match!($dtype, $T => $body, [
            Bool => bool,
            U8 => u8,
            I8 => i8,
            I32 => i32,
            I64 => i64,
            F16 => half::f16,
            BF16 => half::bf16,
            F32 => f32,
            F64 => f64,
        ])
    };
}
pub(crate) use any_dispatch;

/// Applies `f` to every element of `x` into a new contiguous tensor.
pub(crate) fn map<A, O>(x: &Tensor, f: impl Fn(A) -> O + Sync + Send) -> Result<Tensor>
where
    A: StorageElement,
    O: StorageElement,
{
    let shape = x.shape();
    let out = x.with_slice(|a: &[A]| {
        let mut out = try_uninit_buffer::<O>("elementwise", a.len())?;
        if a.len() < PAR_CHUNK {
            out.iter_mut().zip(a).for_each(|(o, &v)| *o = f(v));
        } else {
            out.par_chunks_mut(PAR_CHUNK)
                .zip(a.par_chunks(PAR_CHUNK))
                .for_each(|(oc, ac)| {
                    oc.iter_mut().zip(ac).for_each(|(o, &v)| *o = f(v));
                });
        }
        Ok(out)
    })??;
    Ok(Tensor::from_cpu(O::wrap(out), &shape))
}

/// Applies `f` elementwise to `a` and `b` broadcast to `shape` (both of element type `A`).
pub(crate) fn zip<A, O>(
    a: &Tensor,
    b: &Tensor,
    shape: &[usize],
    op: &str,
    f: impl Fn(A, A) -> O + Sync + Send,
) -> Result<Tensor>
where
    A: StorageElement,
    O: StorageElement,
{
    let n: usize = shape.iter().product();
    let (la, lb) = (
        broadcast_layout(op, &a.layout(), shape)?,
        broadcast_layout(op, &b.layout(), shape)?,
    );
    let mut out = try_uninit_buffer::<O>("elementwise", n)?;
    a.with_storage(|sa, _| -> Result<()> {
        b.with_storage(|sb, _| -> Result<()> {
            let (sa, sb) = (
                A::slice(sa.cpu(op)?).expect("dtype"),
                A::slice(sb.cpu(op)?).expect("dtype"),
            );
            match (la.contiguous_range(), lb.contiguous_range()) {
                (Some(ra), Some(rb)) => {
                    let (xa, xb) = (&sa[ra], &sb[rb]);
                    par_rows(&mut out, |start, chunk| {
                        for (i, o) in chunk.iter_mut().enumerate() {
                            *o = f(xa[start + i], xb[start + i]);
                        }
                    });
                }
                _ if lb.strides.iter().all(|&s| s == 0) && la.is_contiguous() => {
                    let (xa, vb) = (&sa[la.offset..la.offset + n], sb[lb.offset]);
                    par_rows(&mut out, |start, chunk| {
                        for (i, o) in chunk.iter_mut().enumerate() {
                            *o = f(xa[start + i], vb);
                        }
                    });
                }
                _ if la.strides.iter().all(|&s| s == 0) && lb.is_contiguous() => {
                    let (va, xb) = (sa[la.offset], &sb[lb.offset..lb.offset + n]);
                    par_rows(&mut out, |start, chunk| {
                        for (i, o) in chunk.iter_mut().enumerate() {
                            *o = f(va, xb[start + i]);
                        }
                    });
                }
                _ => strided_zip(&mut out, sa, &la, sb, &lb, &f),
            }
            Ok(())
        })
    })?;
    Ok(Tensor::from_cpu(O::wrap(out), shape))
}

/// Splits `out` into chunks filled in parallel; `fill(start, chunk)` gets each chunk's start.
pub(crate) fn par_rows<O: Send>(out: &mut [O], fill: impl Fn(usize, &mut [O]) + Sync + Send) {
    if out.len() < PAR_CHUNK {
        fill(0, out);
    } else {
        out.par_chunks_mut(PAR_CHUNK)
            .enumerate()
            .for_each(|(c, chunk)| fill(c * PAR_CHUNK, chunk));
    }
}

/// The storage offset of row-major element `index` of `layout`.
#[inline]
pub(crate) fn offset_of(layout: &Layout, mut index: usize) -> usize {
    let mut offset = layout.offset;
    for d in (0..layout.ndim()).rev() {
        let n = layout.shape[d];
        offset += (index % n) * layout.strides[d];
        index /= n;
    }
    offset
}

/// General broadcast zip: rows along the last dimension, each row walked with its strides.
fn strided_zip<A: Copy + Sync, O: Send>(
    out: &mut [O],
    sa: &[A],
    la: &Layout,
    sb: &[A],
    lb: &Layout,
    f: &(impl Fn(A, A) -> O + Sync),
) {
    let inner = la.shape.last().copied().unwrap_or(1).max(1);
    let (ia, ib) = (
        la.strides.last().copied().unwrap_or(0),
        lb.strides.last().copied().unwrap_or(0),
    );
    let fill_rows = |first_row: usize, rows: &mut [O]| {
        for (r, row) in rows.chunks_mut(inner).enumerate() {
            let start = (first_row + r) * inner;
            let (mut oa, mut ob) = (offset_of(la, start), offset_of(lb, start));
            for o in row.iter_mut() {
                *o = f(sa[oa], sb[ob]);
                oa += ia;
                ob += ib;
            }
        }
    };
    let rows_per_task = (PAR_CHUNK / inner).max(1);
    if out.len() < PAR_CHUNK {
        fill_rows(0, out);
    } else {
        out.par_chunks_mut(rows_per_task * inner)
            .enumerate()
            .for_each(|(t, chunk)| fill_rows(t * rows_per_task, chunk));
    }
}

/// A contiguous tensor of `shape` built from a typed buffer.
pub(crate) fn tensor_from<T: StorageElement>(data: Vec<T>, shape: &[usize]) -> Tensor {
    Tensor::from_cpu(T::wrap(data), shape)
}
