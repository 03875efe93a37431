//! Inputs for testing conversions between dtypes: for each dtype, the values where casts
//! disagree (NaN, infinities, negative zero, floats past an integer type's range, halfway
//! cases, values that round differently once than twice), and exact comparison of results.

use tessera_tensor::{DType, Tensor};

/// Floats where the conversions disagree, as f64s (each source dtype rounds them first).
pub fn cast_float_values() -> Vec<f64> {
    let p = |e: i32| 2f64.powi(e);
    vec![
        0.0,
        -0.0,
        0.5,
        -0.5,
        0.99,
        -0.99,
        1.5,
        -1.5,
        2.5,
        -2.5,
        127.5,
        128.0,
        -128.5,
        -129.0,
        255.9,
        256.0,
        300.0,
        -300.0,
        2049.0,
        65504.0,
        65519.0,
        65520.0,
        2147483647.5,
        2147483648.0,
        -2147483649.0,
        9.3e18,
        -9.3e18,
        1e300,
        -1e300,
        f64::from(f32::MAX),
        1e-40,
        1e-310,
        5.960464477539063e-8,
        // Halfway for f16 (bf16) only after a first rounding to f32.
        1.0 + p(-10) + p(-11) - p(-30),
        1.0 + p(-11) + p(-30),
        1.0 + p(-8) + p(-40),
        1.0 + p(-7) + p(-8) - p(-30),
        // Exact in f32, just above halfway for bf16.
        1.0 + p(-8) + p(-23),
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ]
}

/// Integers where the conversions disagree: the narrow types' edges, and i64s that f64 or f32
/// round (one of them to a tie that a direct rounding would not see).
pub fn cast_int_values() -> Vec<i64> {
    vec![
        0,
        1,
        -1,
        127,
        128,
        -128,
        -129,
        255,
        256,
        257,
        300,
        -300,
        2049,
        65504,
        65520,
        (1 << 24) + 1,
        i64::from(i32::MAX),
        i64::from(i32::MAX) + 1,
        i64::from(i32::MIN),
        i64::from(i32::MIN) - 1,
        (1 << 53) + 1,
        (1 << 60) + (1 << 36) + 1,
        i64::MAX,
        i64::MIN,
    ]
}

/// An input of `dtype` covering its interesting values.
pub fn cast_input(dtype: DType) -> Tensor {
    let t = match dtype {
        DType::Bool => Tensor::from_vec(vec![true, false, false, true], &[4]),
        DType::U8 => Tensor::from_vec((0..=255u8).collect(), &[256]),
        DType::I8 => Tensor::from_vec((-128..=127i8).collect(), &[256]),
        DType::I32 => {
            let mut v: Vec<i32> = vec![0, 1, -1, 127, 128, -128, -129, 255, 256, 2049, 65520];
            v.extend([(1 << 24) + 1, i32::MAX, i32::MIN, i32::MAX - 64, -300]);
            Tensor::from_vec(v.clone(), &[v.len()])
        }
        DType::I64 => Tensor::from_vec(cast_int_values(), &[cast_int_values().len()]),
        _ => {
            let v = cast_float_values();
            Tensor::from_vec(v.clone(), &[v.len()]).and_then(|t| t.to_dtype(dtype))
        }
    };
    t.unwrap()
}

/// A tensor's elements as f64 bits (every dtype widens exactly, but i64), NaN as one pattern.
pub fn exact_bits(t: &Tensor) -> Vec<u64> {
    if t.dtype() == DType::I64 {
        return t
            .to_vec::<i64>()
            .unwrap()
            .iter()
            .map(|&v| v as u64)
            .collect();
    }
    t.to_vec_f64()
        .unwrap()
        .iter()
        .map(|x| if x.is_nan() { u64::MAX } else { x.to_bits() })
        .collect()
}
