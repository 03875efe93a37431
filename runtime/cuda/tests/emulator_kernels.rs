//! The PTX emulator on hand-written kernels of the renderer's subset (each also accepted by
//! `ptxas -arch=sm_80`): grid-stride loops, a block reduction with shuffles, shared memory and
//! barriers, float predicates with NaN, vector accesses, conversions and f64 arithmetic.

use crate::emulator;

use emulator::{GlobalMemory, LaunchConfig, Module, ParamValue};

fn module(text: &str) -> Module {
    Module::parse(text).expect("hand-written PTX parses")
}

/// Inputs with the values float semantics hide behind: NaN, signed zeros, infinities, subnormals.
fn awkward_f32() -> Vec<f32> {
    vec![
        1.5,
        -2.25,
        f32::NAN,
        0.0,
        -0.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        1e-40,
        -3.0,
        7.0,
        f32::MAX,
        0.1,
    ]
}

#[test]
fn vadd_grid_stride_loop_covers_more_elements_than_threads() {
    let m = module(include_str!("ptx/vadd.ptx"));
    let n = 301;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
    let b: Vec<f32> = (0..n).map(|i| 1.0 / (i as f32 + 1.0)).collect();
    let mut mem = GlobalMemory::default();
    let (pa, pb, out) = (
        mem.upload_f32("a", &a),
        mem.upload_f32("b", &b),
        mem.alloc("out", n * 4),
    );
    let params = [
        ParamValue::Ptr(pa),
        ParamValue::Ptr(pb),
        ParamValue::Ptr(out),
        ParamValue::U32(n as u32),
    ];
    m.launch("vadd", LaunchConfig::new(2, 64), &params, &mut mem)
        .unwrap();
    let got = mem.read_f32("out").unwrap();
    let want: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
    assert_eq!(got, want);
}

#[test]
fn row_sum_reduces_with_shuffles_shared_memory_and_barriers() {
    let m = module(include_str!("ptx/row_sum.ptx"));
    let (rows, cols) = (5usize, 203usize);
    // Integers, so the sum is exact whatever the reduction order.
    let x: Vec<f32> = (0..rows * cols)
        .map(|i| ((i * 7) % 13) as f32 - 6.0)
        .collect();
    for (grid, block) in [(2, 64), (3, 96), (1, 1024), (5, 32)] {
        let mut mem = GlobalMemory::default();
        let (px, out) = (mem.upload_f32("x", &x), mem.alloc("out", rows * 4));
        let params = [
            ParamValue::Ptr(px),
            ParamValue::Ptr(out),
            ParamValue::U32(rows as u32),
            ParamValue::U32(cols as u32),
        ];
        m.launch("row_sum", LaunchConfig::new(grid, block), &params, &mut mem)
            .unwrap();
        let want: Vec<f32> = x.chunks(cols).map(|row| row.iter().sum()).collect();
        assert_eq!(
            mem.read_f32("out").unwrap(),
            want,
            "grid {grid} x block {block}"
        );
    }
}

#[test]
fn row_sum_without_the_barrier_before_reusing_shared_memory_is_a_race() {
    let text = include_str!("ptx/row_sum.ptx").replace(
        "    bar.sync 0;                         // partial is reused",
        "    // (barrier removed)",
    );
    let m = module(&text);
    let (rows, cols) = (4usize, 64usize);
    let mut mem = GlobalMemory::default();
    let (px, out) = (
        mem.upload_f32("x", &vec![1.0; rows * cols]),
        mem.alloc("out", rows * 4),
    );
    let params = [
        ParamValue::Ptr(px),
        ParamValue::Ptr(out),
        ParamValue::U32(rows as u32),
        ParamValue::U32(cols as u32),
    ];
    let err = m
        .launch("row_sum", LaunchConfig::new(2, 64), &params, &mut mem)
        .unwrap_err();
    assert!(err.to_string().contains("shared memory race"), "{err}");
}

fn compare_flags(x: f32, y: f32) -> f32 {
    let nan = x.is_nan() || y.is_nan();
    let bits = [
        x < y,
        nan || x < y,
        !nan,
        nan,
        x.is_finite(),
        x.is_infinite(),
        x != y,
        !nan && x != y,
        nan || x >= y,
        nan || x == y,
        x != y,
    ];
    bits.iter()
        .enumerate()
        .map(|(i, b)| (*b as u32) << i)
        .sum::<u32>() as f32
}

#[test]
fn predicates_select_and_min_max_follow_ptx_nan_rules() {
    let m = module(include_str!("ptx/compare_nan.ptx"));
    let values = awkward_f32();
    let (x, y): (Vec<f32>, Vec<f32>) = values
        .iter()
        .flat_map(|a| values.iter().map(move |b| (*a, *b)))
        .unzip();
    let n = x.len();
    let mut mem = GlobalMemory::default();
    let (px, py) = (mem.upload_f32("x", &x), mem.upload_f32("y", &y));
    let outs: Vec<u64> = ["flags", "mins", "maxs", "signs"]
        .iter()
        .map(|name| mem.alloc(name, n * 4))
        .collect();
    let mut params = vec![ParamValue::Ptr(px), ParamValue::Ptr(py)];
    params.extend(outs.iter().map(|p| ParamValue::Ptr(*p)));
    params.push(ParamValue::U32(n as u32));
    m.launch("compare_nan", LaunchConfig::new(3, 64), &params, &mut mem)
        .unwrap();
    let (flags, mins, maxs, signs) = (
        mem.read_f32("flags").unwrap(),
        mem.read_f32("mins").unwrap(),
        mem.read_f32("maxs").unwrap(),
        mem.read_f32("signs").unwrap(),
    );
    for i in 0..n {
        let (a, b) = (x[i], y[i]);
        assert_eq!(flags[i], compare_flags(a, b), "flags of ({a}, {b})");
        // PTX min/max ignore a NaN operand and order -0 below +0.
        let (want_min, want_max) = match (a.is_nan(), b.is_nan()) {
            (true, true) => (f32::NAN, f32::NAN),
            (true, false) => (b, b),
            (false, true) => (a, a),
            _ if a == 0.0 && b == 0.0 => (
                if a.is_sign_negative() { a } else { b },
                if a.is_sign_negative() { b } else { a },
            ),
            _ => (a.min(b), a.max(b)),
        };
        assert_eq!(mins[i].to_bits(), canonical(want_min), "min({a}, {b})");
        assert_eq!(maxs[i].to_bits(), canonical(want_max), "max({a}, {b})");
        // copysign.f32 d, a, b: the sign of a on the magnitude of b.
        assert_eq!(
            signs[i].to_bits(),
            b.copysign(a).to_bits(),
            "copysign({a}, {b})"
        );
    }
}

fn canonical(x: f32) -> u32 {
    if x.is_nan() { 0x7fff_ffff } else { x.to_bits() }
}

#[test]
fn vector_loads_and_stores_move_four_floats() {
    let m = module(include_str!("ptx/scale_v4.ptx"));
    let x: Vec<f32> = (0..4 * 77).map(|i| i as f32 - 100.5).collect();
    let mut mem = GlobalMemory::default();
    let (px, out) = (mem.upload_f32("x", &x), mem.alloc("out", x.len() * 4));
    let params = [
        ParamValue::Ptr(px),
        ParamValue::Ptr(out),
        ParamValue::U32(77),
    ];
    m.launch("scale_v4", LaunchConfig::new(2, 32), &params, &mut mem)
        .unwrap();
    let want: Vec<f32> = x.iter().map(|v| v.mul_add(2.0, 1.0)).collect();
    assert_eq!(mem.read_f32("out").unwrap(), want);
}

#[test]
fn conversions_round_as_their_modifiers_say() {
    let m = module(include_str!("ptx/cvt_modes.ptx"));
    let third = 1.0f64 / 3.0;
    let x = vec![
        third,
        -third,
        2.5,
        -2.5,
        3.5,
        1e39,
        -1e39,
        1e-50,
        -1e-50,
        f64::NAN,
        4e9,
        -7.75,
        0.5 + f64::EPSILON,
    ];
    let n = x.len();
    let mut mem = GlobalMemory::default();
    let (px, out, wide) = (
        mem.upload_f64("x", &x),
        mem.alloc("out", n * 32),
        mem.alloc("wide", n * 16),
    );
    let params = [
        ParamValue::Ptr(px),
        ParamValue::Ptr(out),
        ParamValue::Ptr(wide),
        ParamValue::U32(n as u32),
    ];
    m.launch("cvt_modes", LaunchConfig::new(1, 64), &params, &mut mem)
        .unwrap();
    let (out, wide) = (mem.read_f32("out").unwrap(), mem.read_f64("wide").unwrap());
    let third_f32 = 0.333_333_34f32; // nearest; it lies above 1/3
    let below = f32::from_bits(third_f32.to_bits() - 1);
    let expectations: [(usize, [f32; 4]); 8] = [
        (0, [third_f32, below, below, third_f32]),
        (1, [-third_f32, -below, -third_f32, -below]),
        (5, [f32::INFINITY, f32::MAX, f32::MAX, f32::INFINITY]),
        (
            6,
            [f32::NEG_INFINITY, -f32::MAX, f32::NEG_INFINITY, -f32::MAX],
        ),
        (7, [0.0, 0.0, 0.0, f32::from_bits(1)]),
        (8, [-0.0, -0.0, -f32::from_bits(1), -0.0]),
        (2, [2.5, 2.5, 2.5, 2.5]),
        (10, [4e9, 4e9, 4e9, 4e9]),
    ];
    for (i, want) in expectations {
        let got = &out[8 * i..8 * i + 4];
        assert_eq!(
            got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            want.map(f32::to_bits).to_vec(),
            "rn/rz/rm/rp of {}",
            x[i]
        );
    }
    assert_eq!(
        out[8 * 9].to_bits(),
        0x7fff_ffff,
        "NaN narrows to the canonical NaN"
    );
    // Round to integral (rni, rzi, rmi, rpi) of the rn value.
    let integral = |i: usize| out[8 * i + 4..8 * i + 8].to_vec();
    assert_eq!(integral(2), [2.0, 2.0, 2.0, 3.0]);
    assert_eq!(integral(3), [-2.0, -2.0, -3.0, -2.0]);
    assert_eq!(integral(4), [4.0, 3.0, 3.0, 4.0]);
    assert_eq!(integral(11), [-8.0, -7.0, -8.0, -7.0]);
    // To s32 and u32 with truncation, saturating, NaN to 0.
    let ints = |i: usize| [wide[2 * i], wide[2 * i + 1]];
    assert_eq!(ints(11), [-7.0, 0.0]);
    assert_eq!(ints(10), [i32::MAX as f64, 4e9]);
    assert_eq!(ints(5), [i32::MAX as f64, u32::MAX as f64]);
    assert_eq!(ints(6), [i32::MIN as f64, 0.0]);
    assert_eq!(ints(9), [0.0, 0.0]);
}

#[test]
fn f64_fma_and_halves_shuffled_through_b32_registers() {
    let m = module(include_str!("ptx/f64_math.ptx"));
    let n = 100;
    let a: Vec<f64> = (0..n).map(|i| (i as f64 - 40.0) / 7.0).collect();
    let b: Vec<f64> = (0..n).map(|i| 1.0 + i as f64 / 3.0).collect();
    let c: Vec<f64> = (0..n).map(|i| 0.1 * i as f64).collect();
    let mut mem = GlobalMemory::default();
    let (pa, pb, pc, out) = (
        mem.upload_f64("a", &a),
        mem.upload_f64("b", &b),
        mem.upload_f64("c", &c),
        mem.alloc("out", n * 8),
    );
    let params = [
        ParamValue::Ptr(pa),
        ParamValue::Ptr(pb),
        ParamValue::Ptr(pc),
        ParamValue::Ptr(out),
        ParamValue::U32(n as u32),
    ];
    m.launch("f64_math", LaunchConfig::new(2, 64), &params, &mut mem)
        .unwrap();
    let v = |i: usize| {
        if i < n {
            a[i].mul_add(b[i], c[i]) + a[i].abs().sqrt() / b[i]
        } else {
            0.0
        }
    };
    let want: Vec<f64> = (0..n)
        .map(|i| v(i).min(v(i ^ 1)) - v(i).max(-v(i ^ 1)) * 0.5)
        .collect();
    assert_eq!(mem.read_f64("out").unwrap(), want);
}

#[test]
fn integer_instructions_wrap_clamp_and_extend_as_ptx_says() {
    let m = module(include_str!("ptx/int_ops.ptx"));
    let keys: Vec<u32> = vec![0, 1, 2, 99, 100, 101, 250, 4_000_000_000, u32::MAX, 7];
    let n = keys.len();
    let mut mem = GlobalMemory::default();
    let (pk, out) = (mem.upload_u32("keys", &keys), mem.alloc("out", n * 96));
    m.launch(
        "int_ops",
        LaunchConfig::new(1, 32),
        &[
            ParamValue::Ptr(pk),
            ParamValue::Ptr(out),
            ParamValue::U32(n as u32),
        ],
        &mut mem,
    )
    .unwrap();
    let got = mem.read_f64("out").unwrap();
    for (i, &k) in keys.iter().enumerate() {
        let s = k.wrapping_sub(100) as i32;
        let want = [
            (k / 3) as f64,
            (k % 3) as f64,
            k.wrapping_shl(3) as f64,
            (s >> 2) as f64,
            0.0,
            s.min(-5) as f64,
            k.max(50) as f64,
            (s as i64 * -7) as f64,
            s.wrapping_mul(3).wrapping_add(1) as f64,
            (!k) as f64,
            s as f64,
            (k as u64 ^ 0xff00) as f64,
        ];
        assert_eq!(got[12 * i..12 * i + 12], want, "key {k}");
    }
}

#[test]
fn f32_unary_instructions_round_once_and_flush_subnormals_for_ftz() {
    let m = module(include_str!("ptx/f32_unary.ptx"));
    let mut x = awkward_f32();
    x.extend([-150.0, 128.0, 0.5, 3.0]);
    let n = x.len();
    let mut mem = GlobalMemory::default();
    let (px, out) = (mem.upload_f32("x", &x), mem.alloc("out", n * 24));
    m.launch(
        "f32_unary",
        LaunchConfig::new(1, 32),
        &[
            ParamValue::Ptr(px),
            ParamValue::Ptr(out),
            ParamValue::U32(n as u32),
        ],
        &mut mem,
    )
    .unwrap();
    let got = mem.read_f32("out").unwrap();
    let ftz = |v: f32| {
        if v.is_subnormal() {
            0.0f32.copysign(v)
        } else {
            v
        }
    };
    for (i, &v) in x.iter().enumerate() {
        let want = [
            ftz(((ftz(v) as f64).exp2()) as f32),
            ((ftz(v) as f64).log2()) as f32,
            v.sqrt(),
            1.0 / v,
            v / 3.0,
            v.abs(),
        ];
        let got: Vec<u32> = got[6 * i..6 * i + 6].iter().map(|g| g.to_bits()).collect();
        let want: Vec<u32> = want.iter().map(|w| canonical(*w)).collect();
        assert_eq!(got[..5], want[..5], "ex2, lg2, sqrt, rcp, div of {v}");
        assert_eq!(
            got[5],
            v.abs().to_bits(),
            "abs(neg({v})) keeps NaN bits but the sign"
        );
    }
    // ex2 of -150 is 2^-150, below the smallest normal: flushed to +0; lg2 of a subnormal is -inf.
    assert_eq!(got[6 * 12], 0.0);
    assert_eq!(got[6 * 7 + 1], f32::NEG_INFINITY);
}
