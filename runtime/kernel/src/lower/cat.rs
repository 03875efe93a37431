//! Lowering of `cat` into one kernel over the output: along the joined dim, input `i` covers
//! the outputs from its start `s_i` for its size `n_i`, so each input is a guarded load
//! ([`crate::guard`]) whose coordinate along that dim is `out - s_i`, in range for exactly one
//! input at each point. The loads of the other inputs read no memory and give the identity of
//! addition, -0.0 for floats and 0 for integers, so the sum of the loads is the one element
//! read, exactly (`x + -0.0 == x` for every float, signed zeros, infinities and NaN included).
//! Each input is read through its own layout (views in place) in its storage type and widened
//! exactly to the sum's type: f32 and f64 results sum in their own type, half ones in f32,
//! integer and bool ones in i64; the sum is converted back to the result's type, exactly (it is
//! one input's element, converted to the result's dtype as the eager kernel converts it). An
//! integer or bool input of a float result runs the eager kernel.

use super::Lowering;
use super::frame::{Frame, Local};
use crate::table::Emit;
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
        let Some(ty) = ScalarType::of_buffer(out.dtype) else {
            return Ok(Err(format!(
                "{:?} tensors are not joined by kernels",
                out.dtype
            )));
        };
        // The sum's type, which every input's type widens to exactly.
        let sum_ty = match ty {
            t if t.is_arithmetic() => t,
            t if t.is_half() => ScalarType::F32,
            _ => ScalarType::I64,
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
            let Some(in_ty) = ScalarType::of_buffer(dtype) else {
                return Ok(Err(format!("{dtype:?} inputs are not joined by kernels")));
            };
            // Its fill would convert to +0.0, which would lose the sign of a -0.0 read from a
            // float input at the same point.
            if sum_ty.is_arithmetic() && !dtype.is_float() {
                return Ok(Err(format!(
                    "a {dtype:?} input of a {:?} result",
                    out.dtype
                )));
            }
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
            // Converted as the eager kernel converts the input to the result's dtype, then
            // widened to the sum's type: both exact for the one element in range, and the
            // fill stays the identity of addition.
            let mut e = Emit { b: &mut k.b };
            v = match e.convert(v, ty).and_then(|v| e.convert(v, sum_ty)) {
                Ok(v) => v,
                Err(why) => return Ok(Err(why)),
            };
            total = Some(match total {
                None => v,
                Some(t) => k.b.push(sum_ty, Expr::Binary(BinaryFn::Add, t, v)),
            });
            start += len;
        }
        let value = match total {
            Some(t) => match (Emit { b: &mut k.b }).convert(t, ty) {
                Ok(v) => v,
                Err(why) => return Ok(Err(why)),
            },
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
