//! The lowering table of the optimizer update ops: their update rules, written once in the
//! op table over [`UpdateArith`], emitted as kernel IR expressions through the elementwise
//! table's primitives. The generated kernel therefore performs the eager kernel's operations
//! in the eager kernel's order and rounds as it does (f64 scalars stay f64 and are rounded to
//! the parameter's type where the eager kernel rounds them).

use crate::table::Emit;
use crate::{BinaryFn, KernelBuilder, ScalarType, UnaryFn, ValueId};
use tessera_tensor::op::optim_formula::{
    AdamElem, AdamScalars, UpdateArith, adam_step_scalars, adam_update, sgd_update,
};
use tessera_tensor::op::{BinaryOp, OptimOp, UnaryOp};

/// [`UpdateArith`] as kernel IR: elements of type `ty`, scalars f64, the step f32.
struct Lowered<'a, 'b> {
    e: &'a mut Emit<'b>,
    ty: ScalarType,
}

impl UpdateArith for Lowered<'_, '_> {
    type Elem = ValueId;
    type Scalar = ValueId;
    type Step = ValueId;

    fn constant(&mut self, value: f64) -> ValueId {
        self.e.c(value, self.ty)
    }

    fn binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        self.e.binary(op, a, b)
    }

    fn unary(&mut self, op: UnaryOp, x: ValueId) -> ValueId {
        match op {
            UnaryOp::Neg => self.e.un(UnaryFn::Neg, x),
            UnaryOp::Sqrt => self.e.un(UnaryFn::Sqrt, x),
            other => self.e.unary(other, x),
        }
    }

    fn scalar_elem(&mut self, s: ValueId) -> ValueId {
        self.e.cast(s, self.ty)
    }

    fn scalar_constant(&mut self, value: f64) -> ValueId {
        self.e.c(value, ScalarType::F64)
    }

    fn scalar_binary(&mut self, op: BinaryOp, a: ValueId, b: ValueId) -> ValueId {
        self.e.binary(op, a, b)
    }

    fn scalar_unary(&mut self, op: UnaryOp, x: ValueId) -> ValueId {
        self.unary(op, x)
    }

    fn step_increment(&mut self, step: ValueId) -> ValueId {
        let one = self.e.c(1.0, ScalarType::F32);
        self.e.bin(BinaryFn::Add, step, one)
    }

    fn step_scalar(&mut self, step: ValueId) -> ValueId {
        self.e.cast(step, ScalarType::F64)
    }
}

/// The outputs of the update `op` on the elements `operands` (in the op's input order), the
/// parameter computing in `ty`; or why the op cannot be generated at these types.
pub fn lower_update(
    op: &OptimOp,
    b: &mut KernelBuilder,
    operands: &[ValueId],
    ty: ScalarType,
) -> Result<Vec<ValueId>, String> {
    let types: Vec<ScalarType> = operands.iter().map(|v| b.ty(*v)).collect();
    let mut e = Emit { b };
    let mut a = Lowered { e: &mut e, ty };
    let expect = |want: &[ScalarType]| -> Result<(), String> {
        if types == want {
            Ok(())
        } else {
            Err(format!(
                "{}: operands of types {types:?}, expected {want:?}",
                tessera_tensor::Op::Optim(op.clone()).name()
            ))
        }
    };
    let f64_ = ScalarType::F64;
    match op {
        OptimOp::AdamStepScalars { beta1, beta2 } => {
            expect(&[ScalarType::F32, f64_])?;
            let (step, step_size, bc2) =
                adam_step_scalars(&mut a, (*beta1, *beta2), operands[0], operands[1]);
            Ok(vec![step, step_size, bc2])
        }
        _ if !ty.is_float() => Err(format!("the parameter computes in {ty}, not a float")),
        OptimOp::SgdUpdate { .. } => {
            let h = op.sgd_hyper().ok_or("not an SGD update")?;
            let (new_param, new_buffer) = match *operands {
                [p, g, lr] => {
                    expect(&[ty, ty, f64_])?;
                    sgd_update(&mut a, &h, p, g, None, lr)
                }
                [p, g, buf, lr] => {
                    expect(&[ty, ty, ty, f64_])?;
                    sgd_update(&mut a, &h, p, g, Some(buf), lr)
                }
                _ => return Err(format!("sgd_update: {} operands", operands.len())),
            };
            Ok([Some(new_param), new_buffer]
                .into_iter()
                .flatten()
                .collect())
        }
        OptimOp::AdamUpdate { .. } => {
            let h = op.adam_hyper().ok_or("not an Adam update")?;
            let (x, rest) = match *operands {
                [p, g, m, v, lr, ss, bc] => {
                    expect(&[ty, ty, ty, ty, f64_, f64_, f64_])?;
                    ((p, g, m, v, None), [lr, ss, bc])
                }
                [p, g, m, v, mx, lr, ss, bc] => {
                    expect(&[ty, ty, ty, ty, ty, f64_, f64_, f64_])?;
                    ((p, g, m, v, Some(mx)), [lr, ss, bc])
                }
                _ => return Err(format!("adam_update: {} operands", operands.len())),
            };
            let (param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq) = x;
            let state = AdamElem {
                param,
                exp_avg,
                exp_avg_sq,
                max_exp_avg_sq,
            };
            let scalars = AdamScalars {
                lr: rest[0],
                step_size: rest[1],
                bias_correction2_sqrt: rest[2],
            };
            let y = adam_update(&mut a, &h, state, grad, scalars);
            Ok([y.param, y.exp_avg, y.exp_avg_sq]
                .into_iter()
                .chain(y.max_exp_avg_sq)
                .collect())
        }
    }
}
