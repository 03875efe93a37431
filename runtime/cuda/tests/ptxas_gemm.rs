//! Every GEMM and convolution variant the renderer emits, assembled by `ptxas` for sm_80 and
//! sm_90: the lowered kernels (linear, transposed matmul, convolutions; f32 and f64, FMA and
//! tf32 tensor cores) and the standalone entry points (products, convolutions and both
//! convolution gradients) in f16, bf16, f32 (FMA and tf32) and
//! f64, with and without a bias, including 64-bit index arithmetic. Skipped (with a printed
//! line) when `TESSERA_PTXAS` is unset, unless `TESSERA_REQUIRE_PTXAS=1`.

use crate::common;

use common::{assemble, gemm_graphs, kernels, ptxas};
use tessera_cuda::{
    ConvBackwardSpec, ConvGradient, ConvSpec, GemmOptions, GemmSpec, PtxTarget, StridedOperand,
    render_conv, render_conv_backward, render_gemm, render_with,
};
use tessera_tensor::DType;
use tessera_tensor::op::ConvParams;

const ARCHS: [u32; 2] = [80, 90];

/// Every dtype with the options that choose its paths.
fn variants() -> Vec<(DType, GemmOptions)> {
    let exact = GemmOptions::default();
    vec![
        (DType::F32, exact),
        (DType::F32, GemmOptions { allow_tf32: true }),
        (DType::F64, exact),
        (DType::F16, exact),
        (DType::BF16, exact),
    ]
}

#[test]
fn lowered_gemm_and_convolution_kernels_assemble_on_both_paths() {
    let Some(ptxas) = ptxas() else { return };
    for dtype in [DType::F32, DType::F64] {
        for (what, g) in gemm_graphs(dtype) {
            for k in kernels(&g)
                .iter()
                .filter(|k| k.gemm.is_some() || k.conv.is_some())
            {
                for allow_tf32 in [false, true] {
                    let r = render_with(k, &PtxTarget::SM80, GemmOptions { allow_tf32 })
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assemble(&ptxas, &r.name, &r.ptx, &ARCHS);
                }
            }
        }
    }
}

#[test]
fn standalone_gemms_and_convolutions_assemble_in_every_dtype() {
    let Some(ptxas) = ptxas() else { return };
    for (dtype, options) in variants() {
        for bias in [None, Some((0, 1))] {
            let spec = GemmSpec {
                name: format!("gemm_{dtype:?}_{}", options.allow_tf32),
                dtype,
                batch: 3,
                m: 33,
                n: 17,
                k: 9,
                a: StridedOperand::row_major(33, 9),
                b: StridedOperand {
                    batch_stride: 0,
                    row_stride: 1,
                    col_stride: 9,
                    offset: 0,
                },
                c: StridedOperand::row_major(33, 17),
                bias,
                options,
            };
            let r = render_gemm(&spec, &PtxTarget::SM80).unwrap();
            assemble(&ptxas, &r.name, &r.ptx, &ARCHS);
        }
        let spec = ConvSpec {
            name: format!("conv_{dtype:?}_{}", options.allow_tf32),
            dtype,
            input_shape: [2, 4, 9, 8],
            weight_shape: [6, 2, 3, 3],
            params: ConvParams::conv2d([2, 1], [1, 1], [1, 2], 2),
            bias: true,
            options,
        };
        let r = render_conv(&spec, &PtxTarget::SM80).unwrap();
        assemble(&ptxas, &r.name, &r.ptx, &ARCHS);
        // Both gradients, with strides of 2 (the input gradient's divisibility test) and 1.
        for (gradient, stride) in [ConvGradient::Input, ConvGradient::Weight]
            .into_iter()
            .flat_map(|g| [(g, 2), (g, 1)])
        {
            let params = ConvParams::conv2d([stride, 1], [1, 1], [1, 2], 2);
            let (rows, k) = match gradient {
                ConvGradient::Input => (2, 3 * 9),
                ConvGradient::Weight => (3, 2 * 9 * 8),
            };
            let spec = ConvBackwardSpec {
                name: format!(
                    "conv_{gradient:?}_{stride}_{dtype:?}_{}",
                    options.allow_tf32
                ),
                dtype,
                gradient,
                input_shape: [2, 4, 9, 8],
                weight_shape: [6, 2, 3, 3],
                params,
                a: StridedOperand::row_major(rows, k),
                options,
            };
            let r = render_conv_backward(&spec, &PtxTarget::SM80).unwrap();
            assemble(&ptxas, &r.name, &r.ptx, &ARCHS);
        }
    }
}

#[test]
fn gemms_past_2_pow_31_elements_use_64_bit_indices_and_assemble() {
    let Some(ptxas) = ptxas() else { return };
    for (dtype, options) in variants() {
        let (m, n) = (50_000, 50_000);
        let spec = GemmSpec {
            name: "big_gemm".into(),
            dtype,
            batch: 1,
            m,
            n,
            k: 8,
            a: StridedOperand::row_major(m, 8),
            b: StridedOperand::row_major(8, n),
            c: StridedOperand::row_major(m, n),
            bias: None,
            options,
        };
        let r = render_gemm(&spec, &PtxTarget::SM80).unwrap();
        assert!(r.ptx.contains("mul.lo.u64"), "{}", r.ptx);
        assemble(&ptxas, &r.name, &r.ptx, &ARCHS);
    }
}
