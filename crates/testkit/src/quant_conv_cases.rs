//! Cases for checking the static int8 conv2d kernel against the eager one: geometries with
//! stride, padding (on one axis, on both, and larger than the kernel's reach, so that whole
//! windows lie in the padding), dilation, 1x1 kernels (eager's pointwise path), few input
//! channels (eager's direct VNNI path, with symmetric weights), size-1 and odd sizes, an
//! empty batch, more taps per output than a device block has threads, and channels-last
//! inputs; each with the weight parameter forms, quantization
//! parameters, values and ReLU/bias of [`crate::quant_linear_cases`].

use crate::quant_linear_cases::{LinearCase, ProductShapes, static_product_cases};
use tessera_tensor::Op;
use tessera_tensor::op::{ConvParams, QuantOp};

/// One conv2d geometry: input `[N, C, H, W]`, output channels, kernel, stride, padding,
/// dilation, and whether the input is a channels-last view.
struct Geometry {
    x: [usize; 4],
    c_out: usize,
    kernel: [usize; 2],
    stride: [usize; 2],
    padding: [usize; 2],
    dilation: [usize; 2],
    channels_last: bool,
}

const GEOMETRIES: [Geometry; 9] = [
    // One pixel, one channel, a 1x1 kernel.
    Geometry {
        x: [1, 1, 1, 1],
        c_out: 1,
        kernel: [1, 1],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
        channels_last: false,
    },
    // A first layer: 3 channels, 3x3 padded by 1 (eager's direct path).
    Geometry {
        x: [2, 3, 5, 7],
        c_out: 4,
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        channels_last: false,
    },
    // Odd sizes, strides and dilation differing per axis, padding on rows only.
    Geometry {
        x: [1, 5, 9, 8],
        c_out: 6,
        kernel: [3, 2],
        stride: [2, 3],
        padding: [1, 0],
        dilation: [1, 2],
        channels_last: true,
    },
    // A strided 1x1 (a ResNet downsample).
    Geometry {
        x: [2, 6, 4, 5],
        c_out: 3,
        kernel: [1, 1],
        stride: [2, 2],
        padding: [0, 0],
        dilation: [1, 1],
        channels_last: true,
    },
    // Padding larger than the kernel's reach: the first windows lie wholly in the padding.
    Geometry {
        x: [1, 4, 3, 3],
        c_out: 5,
        kernel: [2, 2],
        stride: [2, 1],
        padding: [3, 2],
        dilation: [1, 1],
        channels_last: false,
    },
    // An empty batch.
    Geometry {
        x: [0, 3, 4, 4],
        c_out: 2,
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        channels_last: false,
    },
    // A dilated tall kernel, stride 2 along columns.
    Geometry {
        x: [1, 7, 7, 6],
        c_out: 2,
        kernel: [5, 3],
        stride: [1, 2],
        padding: [2, 1],
        dilation: [2, 1],
        channels_last: false,
    },
    // No padding, more channels than the direct path takes (eager's patches).
    Geometry {
        x: [1, 9, 6, 6],
        c_out: 7,
        kernel: [3, 3],
        stride: [1, 1],
        padding: [0, 0],
        dilation: [1, 1],
        channels_last: true,
    },
    // More taps (360) than a device reduction block has threads: each strides over several.
    Geometry {
        x: [1, 40, 5, 4],
        c_out: 3,
        kernel: [3, 3],
        stride: [1, 1],
        padding: [1, 1],
        dilation: [1, 1],
        channels_last: true,
    },
];

/// The static int8 conv2d cases: every geometry with every parameter form, quantization
/// parameters, ReLU and bias (9 geometries of 30 cases).
pub fn static_conv_cases() -> Vec<LinearCase> {
    let shapes: Vec<ProductShapes> = GEOMETRIES
        .iter()
        .map(|g| {
            let [n, c, h, w] = g.x;
            let weight = vec![g.c_out, c, g.kernel[0], g.kernel[1]];
            match g.channels_last {
                true => ProductShapes {
                    x: vec![n, h, w, c],
                    w: weight,
                    x_permutation: Some(vec![0, 3, 1, 2]),
                },
                false => ProductShapes {
                    x: g.x.to_vec(),
                    w: weight,
                    x_permutation: None,
                },
            }
        })
        .collect();
    static_product_cases(&shapes, |s, q| {
        let g = &GEOMETRIES[s];
        Op::Quant(QuantOp::Conv2d {
            params: ConvParams::conv2d(g.stride, g.padding, g.dilation, 1),
            x_scale: q.x_scale,
            x_zero_point: q.x_zero_point,
            out_scale: q.out_scale,
            out_zero_point: q.out_zero_point,
            relu: q.relu,
            bias: q.bias,
        })
    })
}
