//! Elementwise cases with u8, i8 and i32 operands: arithmetic with a tensor or a scalar,
//! comparisons and `where`, each dtype alone, mixed with another narrow type (promoting to
//! i32), with i64, f32 and bool, on values near both ends of each range so that sums and
//! products leave it. Only cases the eager kernels accept are given.

use tessera_tensor::op::{BinaryOp, CompareOp, ScalarOp};
use tessera_tensor::{DType, Op, Tensor};

/// `n` values of `dtype` near both ends of its range, with small ones between.
pub fn narrow_int_values(n: usize, dtype: DType, seed: i64) -> Tensor {
    let (lo, hi): (i64, i64) = match dtype {
        DType::U8 => (0, 255),
        DType::I8 => (-128, 127),
        DType::I32 => (i32::MIN.into(), i32::MAX.into()),
        DType::Bool => (0, 1),
        _ => (-1000, 1000),
    };
    let v: Vec<i64> = (0..n as i64)
        .map(|i| match (i * 5 + seed) % 6 {
            0 => lo,
            1 => hi,
            2 => hi - 3 - i,
            3 => lo + 2 + i,
            4 => (lo + hi) / 2 + i,
            _ => 3 - i % 7,
        })
        .map(|v| v.clamp(lo, hi))
        .collect();
    Tensor::from_vec(v, &[n]).unwrap().to_dtype(dtype).unwrap()
}

/// Each case: an elementwise op and its inputs (a `[3, 12]` first operand, a broadcast `[12]`
/// second one; `where` gets the condition `a < b` first).
pub fn narrow_int_cases() -> Vec<(Op, Vec<Tensor>)> {
    let pairs = [
        (DType::U8, DType::U8),
        (DType::I8, DType::I8),
        (DType::I32, DType::I32),
        (DType::U8, DType::I8),
        (DType::I32, DType::I64),
        (DType::I8, DType::F32),
        (DType::Bool, DType::U8),
    ];
    let n = 12;
    let mut cases = Vec::new();
    for (da, db) in pairs {
        let a = narrow_int_values(n, da, 0)
            .expand(&[3, n])
            .unwrap()
            .contiguous()
            .unwrap();
        let b = narrow_int_values(n, db, 1);
        for op in BinaryOp::EVERY {
            cases.push((Op::Binary(op), vec![a.clone(), b.clone()]));
        }
        for cmp in [CompareOp::Lt, CompareOp::Eq, CompareOp::Ge] {
            cases.push((Op::Compare(cmp), vec![a.clone(), b.clone()]));
        }
        for (op, value, reversed) in [
            (BinaryOp::Add, 100.0, false),
            (BinaryOp::Mul, 3.0, true),
            (BinaryOp::Sub, 7.0, true),
            (BinaryOp::Maximum, 5.0, false),
            (BinaryOp::Mul, 2.5, false),
            (BinaryOp::Div, 4.0, false),
        ] {
            let scalar = ScalarOp {
                op,
                value,
                reversed,
            };
            cases.push((Op::Scalar(scalar), vec![a.clone()]));
        }
        if let Ok(below) = a.lt(&b) {
            cases.push((Op::Where, vec![below, a.clone(), b.clone()]));
        }
    }
    cases.retain(|(op, inputs)| op.apply(&inputs.iter().collect::<Vec<_>>()).is_ok());
    cases
}
