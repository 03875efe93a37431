//! The generated GEMM and implicit-GEMM convolution kernels, run in the PTX emulator, against
//! the CPU: lowered programs (linear and matmul with fused epilogues, convolutions with bias
//! and activation) against the kernel-IR interpreter, and the standalone entry points (products,
//! convolutions and both convolution gradients) in f32, f64, tf32, f16 and bf16 against results
//! computed in f64. Shapes are small and odd
//! (1, 7, 16, 33, 69) so every tile edge, the k tail and multi-tile grid-stride loops run.

use crate::emulated;
use crate::emulator;

use emulated::EmulatedPtx;
use emulator::{GlobalMemory, LaunchConfig, Module, ParamValue};
use tessera_cuda::{
    ConvBackwardSpec, ConvGradient, ConvSpec, GemmOptions, GemmSpec, MathPath, PtxTarget,
    RenderedGemm, StridedOperand, render_conv, render_conv_backward, render_gemm,
};
use tessera_fx::Graph;
use tessera_kernel::{Interpreter, NoEnvironment, lower, run_program};
use tessera_tensor::op::{BinaryOp, ConvOp, ConvParams, UnaryOp, ViewOp};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Values in [-1, 1], deterministic per `seed`.
fn values(len: usize, seed: usize) -> Vec<f64> {
    (0..len)
        .map(|i| {
            let k = (i * 7919 + seed * 104_729 + 13) % 2003;
            k as f64 / 1001.5 - 1.0
        })
        .collect()
}

fn tensor(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let v = values(shape.iter().product(), seed);
    match dtype {
        DType::F64 => Tensor::from_vec(v, shape).unwrap(),
        _ => Tensor::from_vec(v.iter().map(|x| *x as f32).collect::<Vec<f32>>(), shape).unwrap(),
    }
}

/// Lowers `graph` (which must give a GEMM or convolution kernel and no fallback), runs it with
/// the interpreter and in the emulator, and compares within `tolerance` of max(1, |value|).
fn check(what: &str, graph: &Graph, inputs: &[Tensor]) {
    let program = lower(graph, &[]).unwrap();
    assert!(
        program.fallbacks.is_empty(),
        "{what}: fell back:\n{program}"
    );
    assert!(
        program
            .kernels()
            .any(|k| k.gemm.is_some() || k.conv.is_some()),
        "{what}: no GEMM or convolution kernel:\n{program}"
    );
    let want = run_program(&program, &NoEnvironment, &Interpreter, inputs).unwrap();
    let emulated = EmulatedPtx {
        max_grid: 3,
        elementwise_block: 32,
    };
    let got = run_program(&program, &NoEnvironment, &emulated, inputs).unwrap();
    for (g, w) in got.iter().zip(&want) {
        let tolerance = if w.dtype() == DType::F64 { 1e-12 } else { 2e-5 };
        let (g, w) = (g.to_vec_f64().unwrap(), w.to_vec_f64().unwrap());
        assert_eq!(g.len(), w.len(), "{what}");
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(
                (a - b).abs() <= tolerance * b.abs().max(1.0),
                "{what}: element {i}: emulated PTX gives {a:e}, the interpreter {b:e}"
            );
        }
    }
}

/// `relu(x @ w^T + b)` for `x: [rows.., k]`, `w: [n, k]`.
fn linear_graph(dtype: DType, x_shape: &[usize], n: usize) -> (Graph, Vec<Tensor>) {
    let k = *x_shape.last().unwrap();
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new(x_shape.to_vec(), dtype));
    let w = g.placeholder("w", TensorMeta::new([n, k], dtype));
    let b = g.placeholder("b", TensorMeta::new([n], dtype));
    let y = g
        .call_function(Op::Linear { bias: true }, &[&x, &w, &b])
        .unwrap();
    let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&y]).unwrap();
    g.output(&[&r]).unwrap();
    let inputs = vec![
        tensor(dtype, x_shape, 0),
        tensor(dtype, &[n, k], 1),
        tensor(dtype, &[n], 2),
    ];
    (g, inputs)
}

#[test]
fn linear_with_bias_and_relu_agrees_for_odd_shapes() {
    let shapes = [
        (1, 1, 1),
        (7, 16, 33),
        (16, 7, 1),
        (33, 69, 16),
        (69, 33, 7),
        (1, 69, 69),
        (69, 1, 33),
    ];
    for (m, k, n) in shapes {
        let (g, inputs) = linear_graph(DType::F32, &[m, k], n);
        check(&format!("linear f32 m={m} k={k} n={n}"), &g, &inputs);
    }
    for (m, k, n) in [(7, 33, 16), (33, 7, 69)] {
        let (g, inputs) = linear_graph(DType::F64, &[m, k], n);
        check(&format!("linear f64 m={m} k={k} n={n}"), &g, &inputs);
    }
}

#[test]
fn batched_linear_flattens_leading_dims_into_rows() {
    let (g, inputs) = linear_graph(DType::F32, &[2, 3, 33], 7);
    check("linear over [2, 3, 33]", &g, &inputs);
    let (g, inputs) = linear_graph(DType::F64, &[3, 5, 7], 16);
    check("linear over [3, 5, 7] f64", &g, &inputs);
}

/// `x^T @ w (+ residual)` with `x` given as `[k, m]` (transposed in the product) and,
/// where `w_transposed`, `w` given as `[n, k]`.
fn transposed_matmul(
    dtype: DType,
    m: usize,
    k: usize,
    n: usize,
    w_transposed: bool,
) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::new();
    let xt = g.placeholder("xt", TensorMeta::new([k, m], dtype));
    let w_shape = if w_transposed { [n, k] } else { [k, n] };
    let w = g.placeholder("w", TensorMeta::new(w_shape, dtype));
    let r = g.placeholder("r", TensorMeta::new([m, n], dtype));
    let t = |g: &mut Graph, v| {
        g.call_function(Op::View(ViewOp::Permute(vec![1, 0])), &[&v])
            .unwrap()
    };
    let x = t(&mut g, xt);
    let w = if w_transposed { t(&mut g, w) } else { w };
    let y = g.call_function(Op::Matmul, &[&x, &w]).unwrap();
    let s = g
        .call_function(Op::Binary(BinaryOp::Add), &[&y, &r])
        .unwrap();
    g.output(&[&s]).unwrap();
    let inputs = vec![
        tensor(dtype, &[k, m], 3),
        tensor(dtype, &w_shape, 4),
        tensor(dtype, &[m, n], 5),
    ];
    (g, inputs)
}

#[test]
fn matmul_of_transposed_operands_with_a_residual_add_agrees() {
    for (m, k, n, wt) in [
        (7, 33, 16, false),
        (33, 16, 7, true),
        (69, 7, 33, true),
        (1, 16, 69, false),
    ] {
        let (g, inputs) = transposed_matmul(DType::F32, m, k, n, wt);
        check(
            &format!(
                "x^T @ w{} + r, m={m} k={k} n={n}",
                if wt { "^T" } else { "" }
            ),
            &g,
            &inputs,
        );
    }
    let (g, inputs) = transposed_matmul(DType::F64, 16, 33, 7, true);
    check("x^T @ w^T + r f64", &g, &inputs);
}

/// `relu(conv2d(x, w) + b)`.
#[test]
fn updates_fused_into_the_gemm_of_their_gradient_agree() {
    for dtype in [DType::F32, DType::F64] {
        for (what, graph, inputs) in crate::common::fused_update_graphs(dtype) {
            let program = lower(&graph, &[]).unwrap();
            let fused = program.kernels().filter(|k| k.gemm.is_some()).count();
            assert_eq!(
                program.kernels().count(),
                fused,
                "{what}: one GEMM kernel\n{program}"
            );
            check(&format!("{what} {dtype:?}"), &graph, &inputs);
        }
    }
}

fn conv_graph(
    dtype: DType,
    x_shape: [usize; 4],
    w_shape: [usize; 4],
    params: ConvParams,
) -> (Graph, Vec<Tensor>) {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new(x_shape, dtype));
    let w = g.placeholder("w", TensorMeta::new(w_shape, dtype));
    let b = g.placeholder("b", TensorMeta::new([w_shape[0]], dtype));
    let c = g
        .call_function(
            Op::Conv(ConvOp::Forward { params, bias: true }),
            &[&x, &w, &b],
        )
        .unwrap();
    let r = g.call_function(Op::Unary(UnaryOp::Relu), &[&c]).unwrap();
    g.output(&[&r]).unwrap();
    let inputs = vec![
        tensor(dtype, &x_shape, 6),
        tensor(dtype, &w_shape, 7),
        tensor(dtype, &[w_shape[0]], 8),
    ];
    (g, inputs)
}

/// Convolutions the tests cover: (what, input, weight, params).
fn conv_cases() -> Vec<(&'static str, [usize; 4], [usize; 4], ConvParams)> {
    vec![
        (
            "3x3 padded",
            [2, 3, 7, 6],
            [5, 3, 3, 3],
            ConvParams::conv2d([1, 1], [1, 1], [1, 1], 1),
        ),
        (
            "1x1",
            [1, 8, 5, 5],
            [7, 8, 1, 1],
            ConvParams::conv2d([1, 1], [0, 0], [1, 1], 1),
        ),
        (
            "stride 2",
            [2, 3, 9, 8],
            [4, 3, 3, 3],
            ConvParams::conv2d([2, 2], [1, 1], [1, 1], 1),
        ),
        (
            "7x7 stride 2 pad 3",
            [1, 3, 11, 10],
            [6, 3, 7, 7],
            ConvParams::conv2d([2, 2], [3, 3], [1, 1], 1),
        ),
        (
            "dilation 2",
            [1, 4, 9, 9],
            [3, 4, 3, 3],
            ConvParams::conv2d([1, 1], [2, 2], [2, 2], 1),
        ),
        (
            "groups 2",
            [2, 4, 6, 5],
            [6, 2, 3, 3],
            ConvParams::conv2d([1, 1], [1, 1], [1, 1], 2),
        ),
        (
            "depthwise",
            [1, 6, 7, 7],
            [6, 1, 3, 3],
            ConvParams::conv2d([2, 1], [1, 0], [1, 1], 6),
        ),
    ]
}

#[test]
fn convolutions_with_bias_and_relu_agree() {
    for (what, x, w, p) in conv_cases() {
        let (g, inputs) = conv_graph(DType::F32, x, w, p);
        check(&format!("conv {what}"), &g, &inputs);
    }
    let (g, inputs) = conv_graph(
        DType::F64,
        [1, 3, 6, 7],
        [4, 3, 3, 3],
        ConvParams::conv2d([2, 1], [1, 2], [1, 1], 1),
    );
    check("conv f64", &g, &inputs);
}

/// Rounds `x` as the elements of `dtype` hold it (f16/bf16 to nearest even; tf32 when `tf32`).
fn round_as(dtype: DType, x: f64, tf32: bool) -> f64 {
    match dtype {
        DType::F16 => half::f16::from_f64(x).to_f64(),
        DType::BF16 => half::bf16::from_f64(x).to_f64(),
        DType::F32 if tf32 => {
            let bits = (x as f32).to_bits();
            f32::from_bits(bits.wrapping_add(0x1000) & !0x1fff) as f64
        }
        DType::F32 => x as f32 as f64,
        _ => x,
    }
}

fn bytes_of(dtype: DType, v: &[f64]) -> Vec<u8> {
    match dtype {
        DType::F16 => v
            .iter()
            .flat_map(|x| half::f16::from_f64(*x).to_le_bytes())
            .collect(),
        DType::BF16 => v
            .iter()
            .flat_map(|x| half::bf16::from_f64(*x).to_le_bytes())
            .collect(),
        DType::F32 => v.iter().flat_map(|x| (*x as f32).to_le_bytes()).collect(),
        _ => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
    }
}

fn from_bytes(dtype: DType, b: &[u8]) -> Vec<f64> {
    match dtype {
        DType::F16 => b
            .chunks(2)
            .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::BF16 => b
            .chunks(2)
            .map(|c| half::bf16::from_le_bytes([c[0], c[1]]).to_f64())
            .collect(),
        DType::F32 => b
            .chunks(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64)
            .collect(),
        _ => b
            .chunks(8)
            .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
            .collect(),
    }
}

/// Runs a standalone kernel with `inputs` (one per parameter but the output), the output
/// poisoned first; returns the output's elements.
fn run(rendered: &RenderedGemm, dtype: DType, inputs: &[Vec<f64>], grid: u32) -> Vec<f64> {
    let module = Module::parse(&rendered.ptx)
        .unwrap_or_else(|e| panic!("parsing {}: {e}\n{}", rendered.name, rendered.ptx));
    let mut memory = GlobalMemory::default();
    let mut params = Vec::new();
    let mut inputs = inputs.iter();
    for (i, p) in rendered.params.iter().enumerate() {
        let name = format!("buf{i}");
        let size = match dtype {
            DType::F16 | DType::BF16 => 2,
            DType::F32 => 4,
            _ => 8,
        };
        let address = if p.role == tessera_cuda::gemm::GemmParamRole::C {
            memory.alloc(&name, p.len * size)
        } else {
            let v = inputs.next().unwrap();
            assert!(v.len() >= p.len, "{name} needs {} elements", p.len);
            memory.upload_bytes(&name, &bytes_of(dtype, v))
        };
        params.push(ParamValue::Ptr(address));
    }
    let out = rendered
        .params
        .iter()
        .position(|p| p.role == tessera_cuda::gemm::GemmParamRole::C)
        .unwrap();
    let config = LaunchConfig::new(rendered.blocks_needed.clamp(1, grid), rendered.block);
    module
        .launch(&rendered.name, config, &params, &mut memory)
        .unwrap_or_else(|e| panic!("running {}: {e}", rendered.name));
    from_bytes(dtype, memory.read_bytes(&format!("buf{out}")).unwrap())
}

struct Problem {
    batch: usize,
    m: usize,
    n: usize,
    k: usize,
    a: StridedOperand,
    b: StridedOperand,
    bias: bool,
}

/// Element `(batch, row, col)` of a strided operand in `v`.
fn at(v: &[f64], s: &StridedOperand, b: usize, r: usize, c: usize) -> f64 {
    v[s.offset + b * s.batch_stride + r * s.row_stride + c * s.col_stride]
}

fn check_gemm(what: &str, dtype: DType, options: GemmOptions, p: &Problem) {
    let c = StridedOperand::row_major(p.m, p.n);
    let spec = GemmSpec {
        name: "gemm_test".into(),
        dtype,
        batch: p.batch,
        m: p.m,
        n: p.n,
        k: p.k,
        a: p.a,
        b: p.b,
        c,
        bias: p.bias.then_some((1, 2)),
        options,
    };
    let rendered = render_gemm(&spec, &PtxTarget::SM80).unwrap();
    let tf32 = rendered.path == MathPath::MmaTf32;
    let a_len = p.a.reach(p.batch, p.m, p.k);
    let b_len = p.b.reach(p.batch, p.k, p.n);
    let round = |v: Vec<f64>| {
        v.into_iter()
            .map(|x| round_as(dtype, x, false))
            .collect::<Vec<_>>()
    };
    let (a, b, bias) = (
        round(values(a_len, 11)),
        round(values(b_len, 12)),
        round(values(2 * p.n + 1, 13)),
    );
    let mut inputs = vec![a.clone(), b.clone()];
    if p.bias {
        inputs.push(bias.clone());
    }
    let got = run(&rendered, dtype, &inputs, 3);
    let unit = match dtype {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F32 if tf32 => 2f64.powi(-10),
        DType::F32 => 2f64.powi(-23),
        _ => 2f64.powi(-52),
    };
    for bi in 0..p.batch {
        for i in 0..p.m {
            for j in 0..p.n {
                let (mut sum, mut scale) = (0.0, 0.0);
                for kk in 0..p.k {
                    let x = round_as(dtype, at(&a, &p.a, bi, i, kk), tf32);
                    let y = round_as(dtype, at(&b, &p.b, bi, kk, j), tf32);
                    sum += x * y;
                    scale += (x * y).abs();
                }
                if p.bias {
                    sum += bias[1 + 2 * j];
                    scale += bias[1 + 2 * j].abs();
                }
                let g = got[bi * p.m * p.n + i * p.n + j];
                // Accumulation rounding (f32, or f64 for f64) plus one rounding of the output.
                let acc_unit = if dtype == DType::F64 {
                    unit
                } else {
                    2f64.powi(-23)
                };
                let allowed = 2.0 * p.k as f64 * acc_unit * scale + unit * sum.abs() + 1e-300;
                assert!(
                    (g - sum).abs() <= allowed,
                    "{what}: [{bi}, {i}, {j}] is {g:e}, the product {sum:e} (allowed {allowed:e})"
                );
            }
        }
    }
}

/// Problems covering the edge cases: sizes 1, odd and past one tile, transposed operands
/// (swapped strides), a batch with a broadcast operand, an offset, and a bias.
fn problems() -> Vec<(&'static str, Problem)> {
    let rm = StridedOperand::row_major;
    let transposed = |rows: usize, cols: usize| StridedOperand {
        offset: 0,
        batch_stride: rows * cols,
        row_stride: 1,
        col_stride: rows,
    };
    vec![
        (
            "1x1x1",
            Problem {
                batch: 1,
                m: 1,
                n: 1,
                k: 1,
                a: rm(1, 1),
                b: rm(1, 1),
                bias: false,
            },
        ),
        (
            "7x33x16 bias",
            Problem {
                batch: 1,
                m: 7,
                n: 16,
                k: 33,
                a: rm(7, 33),
                b: rm(33, 16),
                bias: true,
            },
        ),
        (
            "69x16x33 a^T",
            Problem {
                batch: 1,
                m: 69,
                n: 33,
                k: 16,
                a: transposed(69, 16),
                b: rm(16, 33),
                bias: false,
            },
        ),
        (
            "33x69x7 b^T",
            Problem {
                batch: 1,
                m: 33,
                n: 7,
                k: 69,
                a: rm(33, 69),
                b: transposed(69, 7),
                bias: true,
            },
        ),
        (
            "batch 3, broadcast b, offset a",
            Problem {
                batch: 3,
                m: 16,
                n: 7,
                k: 33,
                a: StridedOperand {
                    offset: 5,
                    ..rm(16, 33)
                },
                b: StridedOperand {
                    batch_stride: 0,
                    ..rm(33, 7)
                },
                bias: false,
            },
        ),
    ]
}

#[test]
fn standalone_fma_gemms_agree_in_f32_and_f64() {
    for dtype in [DType::F32, DType::F64] {
        for (what, p) in problems() {
            check_gemm(
                &format!("{what} {dtype:?}"),
                dtype,
                GemmOptions::default(),
                &p,
            );
        }
    }
}

#[test]
fn tensor_core_gemms_agree_in_tf32_f16_and_bf16() {
    let tf32 = GemmOptions { allow_tf32: true };
    for (what, p) in problems() {
        check_gemm(&format!("{what} tf32"), DType::F32, tf32, &p);
        check_gemm(
            &format!("{what} f16"),
            DType::F16,
            GemmOptions::default(),
            &p,
        );
        check_gemm(
            &format!("{what} bf16"),
            DType::BF16,
            GemmOptions::default(),
            &p,
        );
    }
}

/// The convolution `spec` computed here in f64 from the rounded inputs.
fn conv_reference(
    spec: &ConvSpec,
    x: &[f64],
    w: &[f64],
    bias: &[f64],
    tf32: bool,
) -> (Vec<f64>, Vec<f64>) {
    let [n, c_out, oh, ow] = tessera_cuda::gemm::conv_output_shape(spec).unwrap();
    let [_, c_in, h, wd] = spec.input_shape;
    let [_, gi, kh, kw] = spec.weight_shape;
    let p = spec.params;
    let go = c_out / p.groups;
    let r = |v: f64| round_as(spec.dtype, v, tf32);
    let mut out = vec![0.0; n * c_out * oh * ow];
    let mut scale = vec![0.0; out.len()];
    for img in 0..n {
        for co in 0..c_out {
            let g = co / go;
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut s, mut a) = (0.0, 0.0);
                    for ci in 0..gi {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let iy = (oy * p.stride[0] + ky * p.dilation[0]) as isize
                                    - p.padding[0] as isize;
                                let ix = (ox * p.stride[1] + kx * p.dilation[1]) as isize
                                    - p.padding[1] as isize;
                                if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                    continue;
                                }
                                let xv = x[((img * c_in + g * gi + ci) * h + iy as usize) * wd
                                    + ix as usize];
                                let wv = w[((co * gi + ci) * kh + ky) * kw + kx];
                                s += r(xv) * r(wv);
                                a += (r(xv) * r(wv)).abs();
                            }
                        }
                    }
                    if spec.bias {
                        s += bias[co];
                        a += bias[co].abs();
                    }
                    let i = ((img * c_out + co) * oh + oy) * ow + ox;
                    out[i] = s;
                    scale[i] = a;
                }
            }
        }
    }
    (out, scale)
}

#[test]
fn standalone_convolutions_agree_in_every_dtype() {
    for (what, x_shape, w_shape, params) in conv_cases() {
        for (dtype, options) in [
            (DType::F32, GemmOptions::default()),
            (DType::F32, GemmOptions { allow_tf32: true }),
            (DType::F16, GemmOptions::default()),
            (DType::BF16, GemmOptions::default()),
            (DType::F64, GemmOptions::default()),
        ] {
            let spec = ConvSpec {
                name: "conv_test".into(),
                dtype,
                input_shape: x_shape,
                weight_shape: w_shape,
                params,
                bias: true,
                options,
            };
            let rendered = render_conv(&spec, &PtxTarget::SM80).unwrap();
            let tf32 = rendered.path == MathPath::MmaTf32;
            let round = |v: Vec<f64>| {
                v.into_iter()
                    .map(|x| round_as(dtype, x, false))
                    .collect::<Vec<_>>()
            };
            let x = round(values(x_shape.iter().product(), 21));
            let w = round(values(w_shape.iter().product(), 22));
            let b = round(values(w_shape[0], 23));
            let got = run(&rendered, dtype, &[x.clone(), w.clone(), b.clone()], 3);
            let (want, scale) = conv_reference(&spec, &x, &w, &b, tf32);
            let unit = match dtype {
                DType::F16 => 2f64.powi(-10),
                DType::BF16 => 2f64.powi(-7),
                DType::F64 => 2f64.powi(-52),
                _ if tf32 => 2f64.powi(-10),
                _ => 2f64.powi(-23),
            };
            let acc_unit = if dtype == DType::F64 {
                unit
            } else {
                2f64.powi(-23)
            };
            let k = (w_shape[1] * w_shape[2] * w_shape[3]) as f64;
            for (i, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
                let allowed = 2.0 * k * acc_unit * s + unit * w.abs() + 1e-300;
                assert!(
                    (g - w).abs() <= allowed,
                    "conv {what} {dtype:?} tf32={tf32}: element {i} is {g:e}, want {w:e}"
                );
            }
        }
    }
}

/// `v` (`[d0, d1, d2, rest]` row-major) with its dims 1 and 2 swapped.
fn swap_middle(v: &[f64], [d0, d1, d2, rest]: [usize; 4]) -> Vec<f64> {
    let mut out = Vec::with_capacity(v.len());
    for a in 0..d0 {
        for c in 0..d2 {
            for b in 0..d1 {
                let at = ((a * d1 + b) * d2 + c) * rest;
                out.extend_from_slice(&v[at..at + rest]);
            }
        }
    }
    out
}

#[test]
fn standalone_convolution_gradients_agree_in_every_dtype() {
    for (what, x_shape, w_shape, params) in conv_cases() {
        let forward = ConvSpec {
            name: "shape".into(),
            dtype: DType::F64,
            input_shape: x_shape,
            weight_shape: w_shape,
            params,
            bias: false,
            options: GemmOptions::default(),
        };
        let [n, c_out, oh, ow] = tessera_cuda::gemm::conv_output_shape(&forward).unwrap();
        let [_, gi, kh, kw] = w_shape;
        let (groups, taps) = (params.groups, kh * kw);
        let go = c_out / groups;
        let grad_shape = [n, c_out, oh, ow];
        for (dtype, options) in [
            (DType::F32, GemmOptions::default()),
            (DType::F32, GemmOptions { allow_tf32: true }),
            (DType::F16, GemmOptions::default()),
            (DType::BF16, GemmOptions::default()),
            (DType::F64, GemmOptions::default()),
        ] {
            for gradient in [ConvGradient::Input, ConvGradient::Weight] {
                // A packed as one row-major matrix per group, B packed NCHW.
                let (a, b_shape, k, op) = match gradient {
                    ConvGradient::Input => (
                        swap_middle(
                            &values(w_shape.iter().product(), 31),
                            [groups, go, gi, taps],
                        ),
                        grad_shape,
                        go * taps,
                        Op::Conv(ConvOp::BackwardInput {
                            params,
                            input_size: [x_shape[2], x_shape[3]],
                        }),
                    ),
                    ConvGradient::Weight => (
                        swap_middle(&values(n * c_out * oh * ow, 32), [1, n, c_out, oh * ow]),
                        x_shape,
                        n * oh * ow,
                        Op::Conv(ConvOp::BackwardWeight {
                            params,
                            kernel_size: [kh, kw],
                        }),
                    ),
                };
                let rows = if gradient == ConvGradient::Input {
                    gi
                } else {
                    go
                };
                let spec = ConvBackwardSpec {
                    name: "conv_gradient_test".into(),
                    dtype,
                    gradient,
                    input_shape: x_shape,
                    weight_shape: w_shape,
                    params,
                    a: StridedOperand::row_major(rows, k),
                    options,
                };
                let rendered = render_conv_backward(&spec, &PtxTarget::SM80).unwrap();
                let tf32 = rendered.path == MathPath::MmaTf32;
                let round =
                    |v: Vec<f64>| v.into_iter().map(|x| round_as(dtype, x, false)).collect();
                let a: Vec<f64> = round(a);
                let b: Vec<f64> = round(values(b_shape.iter().product(), 33));
                let got = run(&rendered, dtype, &[a.clone(), b.clone()], 3);
                // The reference: the CPU's op on the operands the kernel multiplies (in f64),
                // and on their magnitudes for the rounding scale (the op is bilinear).
                let r = |v: &[f64], abs: bool| {
                    v.iter()
                        .map(|&x| round_as(dtype, x, tf32))
                        .map(|x| if abs { x.abs() } else { x })
                        .collect::<Vec<f64>>()
                };
                let reference = |abs: bool| {
                    let operands = match gradient {
                        ConvGradient::Input => [
                            Tensor::from_vec(r(&b, abs), &b_shape).unwrap(),
                            Tensor::from_vec(
                                swap_middle(&r(&a, abs), [groups, gi, go, taps]),
                                &w_shape,
                            )
                            .unwrap(),
                        ],
                        ConvGradient::Weight => [
                            Tensor::from_vec(r(&b, abs), &b_shape).unwrap(),
                            Tensor::from_vec(
                                swap_middle(&r(&a, abs), [1, c_out, n, oh * ow]),
                                &grad_shape,
                            )
                            .unwrap(),
                        ],
                    };
                    op.apply1(&[&operands[0], &operands[1]])
                        .unwrap()
                        .to_vec::<f64>()
                        .unwrap()
                };
                let (want, scale) = (reference(false), reference(true));
                let unit = match dtype {
                    DType::F16 => 2f64.powi(-10),
                    DType::BF16 => 2f64.powi(-7),
                    DType::F64 => 2f64.powi(-52),
                    _ if tf32 => 2f64.powi(-10),
                    _ => 2f64.powi(-23),
                };
                let acc_unit = if dtype == DType::F64 {
                    unit
                } else {
                    2f64.powi(-23)
                };
                assert_eq!(got.len(), want.len(), "{what} {gradient:?}");
                for (i, ((g, w), s)) in got.iter().zip(&want).zip(&scale).enumerate() {
                    let allowed = 2.0 * k as f64 * acc_unit * s + unit * w.abs() + 1e-300;
                    assert!(
                        (g - w).abs() <= allowed,
                        "{gradient:?} gradient of conv {what} {dtype:?} tf32={tf32}: element {i} \
                         is {g:e}, want {w:e}"
                    );
                }
            }
        }
    }
}
