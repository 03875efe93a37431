//! Lowering of `cat` into one kernel over the output: along the joined dim, input `i` covers
//! the outputs from its start `s_i` for its size `n_i`, so each input is a guarded load
//! ([`crate::guard`]) whose coordinate along that dim is `out - s_i`, in range for exactly one
//! input at each point. The loads of the other inputs read no memory and give the identity of
//! addition, -0.0, so the sum of the loads is the one element read, exactly (`x + -0.0 == x`
//! for every float, signed zeros, infinities and NaN included). Each input is read through its
//! own layout (views in place); f32 inputs of an f64 result are widened (exactly). Guarded
//! loads read f32 and f64 only: a `cat` with half, integer or bool inputs runs the eager
//! kernel.

use super::Lowering;
use super::frame::{Frame, Local};
use crate::{BinaryFn, Bound, Expr, IndexExpr, KernelBuilder, Result, ScalarType};
use std::collections::HashSet;
use tessera_fx::NodeId;
use tessera_tensor::Op;

impl Lowering<'_> {
    /// Lowers `cat` node `id` along `dim` to one kernel, or runs its eager kernel (reported as
    /// a fallback) when the kernel IR cannot express it.
    pub(super) fn cat(&mut self, id: &NodeId, op: &Op, dim: usize) -> Result<()> {
        if let Err(why) = self.cat_kernel(id, op, dim)? {
            self.not_generated(id, op, &why)?;
        }
        Ok(())
    }

    fn cat_kernel(
        &mut self,
        id: &NodeId,
        op: &Op,
        dim: usize,
    ) -> Result<std::result::Result<(), String>> {
        let Some(out) = self.meta(id)?.first().cloned() else {
            return Ok(Err("the node has no value".into()));
        };
        let shape = out.shape.clone();
        let nd = shape.len();
        if dim >= nd {
            return Ok(Err(format!("dim {dim} of a {nd}-D result")));
        }
        // Guarded loads read f32 and f64.
        let Some(ty) = ScalarType::of_buffer(out.dtype).filter(|t| t.is_arithmetic()) else {
            return Ok(Err(format!(
                "{:?} tensors are not joined by kernels",
                out.dtype
            )));
        };
        let name = format!("k{}_{}", self.kernel_count(), op.name());
        let mut k = Frame::new(KernelBuilder::new(name, shape.clone()));
        let mut start = 0usize;
        let mut total = None;
        for o in self.operands(id)? {
            let val = self.value(&o)?;
            let layout = val.layout.clone();
            // Inputs that are not the reference's rank (legacy empty `[0]` tensors) add nothing.
            let fits = layout.shape.len() == nd
                && (0..nd).all(|d| d == dim || layout.shape[d] == shape[d]);
            if !fits {
                if layout.shape.iter().product::<usize>() == 0 {
                    continue;
                }
                return Ok(Err(format!(
                    "an input of shape {:?} for a result of {shape:?}",
                    layout.shape
                )));
            }
            let len = layout.shape[dim];
            if len == 0 {
                continue;
            }
            let dtype = self.program.slot(val.slot).meta.dtype;
            let Some(in_ty) = ScalarType::of_buffer(dtype).filter(|t| t.is_arithmetic()) else {
                return Ok(Err(format!("{dtype:?} inputs are not joined by kernels")));
            };
            let buffer = Self::input_buffer(&mut k, val.slot, in_ty);
            let mut strides = layout.strides.clone();
            strides[dim] = 0;
            let mut coord = IndexExpr {
                offset: 0,
                strides: vec![0; nd],
            };
            coord.strides[dim] = 1;
            let mut v = k.b.push(
                in_ty,
                Expr::LoadIf {
                    buffer,
                    index: IndexExpr {
                        offset: layout.offset,
                        strides,
                    },
                    bounds: vec![Bound {
                        coord,
                        pad: start,
                        len,
                        stride: layout.strides[dim],
                    }],
                    fill: -0.0,
                },
            );
            // An f32 input of an f64 result: the conversion is exact, -0.0 included.
            if in_ty != ty {
                v = k.b.push(ty, Expr::Cast(v));
            }
            total = Some(match total {
                None => v,
                Some(t) => k.b.push(ty, Expr::Binary(BinaryFn::Add, t, v)),
            });
            start += len;
        }
        let value = match total {
            Some(t) => t,
            // Nothing is joined: the result is empty.
            None => k.b.push(ty, Expr::Const(0.0)),
        };
        k.locals.insert(
            *id,
            vec![Local {
                value,
                shape: shape.clone(),
                map: Some((0..nd).map(Some).collect()),
            }],
        );
        self.emit_frame(k, &[*id], &HashSet::from([*id]))
    }
}
