//! Convolutions (conv1d, conv2d) and their two backward ops, checked here and lowered to GEMMs
//! in [`lowering`]; conv1d is a conv2d whose input and kernel have one row.

mod direct;
mod direct_pad;
mod direct_tile;
mod lowering;
mod patches;
mod stage;
mod winograd;

use super::{BackwardCtx, Op, OpDef, OpKind, expect_float};
use crate::cpu::{float_dispatch, tensor_from};
use crate::{Result, Tensor, TensorError, TensorMeta};
pub use stage::ConvStage;
pub use winograd::{
    WinogradTile, conv2d_winograd_images_into, winograd_applies, winograd_weight_shape,
    winograd_weights, winograd_weights_into,
};

/// Stride, padding, dilation and groups of a convolution, as `[height, width]` pairs.
///
/// A 1-D convolution (`spatial_dims == 1`) sees its `[N, C, L]` tensors as `[N, C, 1, L]`;
/// its height entries must be the identity (stride 1, padding 0, dilation 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ConvParams {
    pub spatial_dims: usize,
    pub stride: [usize; 2],
    pub padding: [usize; 2],
    pub dilation: [usize; 2],
    pub groups: usize,
}

impl ConvParams {
    /// Parameters of a conv1d over `[N, C, L]`.
    pub fn conv1d(stride: usize, padding: usize, dilation: usize, groups: usize) -> Self {
        ConvParams {
            spatial_dims: 1,
            stride: [1, stride],
            padding: [0, padding],
            dilation: [1, dilation],
            groups,
        }
    }

    /// Parameters of a conv2d over `[N, C, H, W]`.
    pub fn conv2d(
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
    ) -> Self {
        ConvParams {
            spatial_dims: 2,
            stride,
            padding,
            dilation,
            groups,
        }
    }

    fn name(&self) -> &'static str {
        if self.spatial_dims == 1 {
            "conv1d"
        } else {
            "conv2d"
        }
    }

    /// `[N, C, L]` as `[N, C, 1, L]` for conv1d; other shapes unchanged.
    fn shape_4d(&self, shape: &[usize]) -> Vec<usize> {
        let mut s = shape.to_vec();
        if self.spatial_dims == 1 && s.len() == 3 {
            s.insert(2, 1);
        }
        s
    }

    /// The inverse of [`ConvParams::shape_4d`]: drops conv1d's height.
    fn shape_nd(&self, mut shape: Vec<usize>) -> Vec<usize> {
        if self.spatial_dims == 1 {
            shape.remove(2);
        }
        shape
    }

    /// The spatial dimensions of an input, output or kernel shape, as `[height, width]`.
    fn spatial(&self, shape: &[usize]) -> [usize; 2] {
        let s = self.shape_4d(shape);
        [s[2], s[3]]
    }
}

/// A convolution or one of its gradients.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum ConvOp {
    /// `conv(x, w) (+ b)`; inputs `x, w` or `x, w, b`, weight `[C_out, C_in/groups, kH, kW]`.
    Forward { params: ConvParams, bias: bool },
    /// The gradient of the input; inputs `grad_out, w`; `input_size` is the input's `[H, W]`.
    BackwardInput {
        params: ConvParams,
        input_size: [usize; 2],
    },
    /// The gradient of the weight; inputs `x, grad_out`; `kernel_size` is `[kH, kW]`.
    BackwardWeight {
        params: ConvParams,
        kernel_size: [usize; 2],
    },
}

/// Every size of one convolution, in 4-D (`N, C, H, W`) terms.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Geometry {
    pub(crate) params: ConvParams,
    pub(crate) n: usize,
    pub(crate) c_in: usize,
    pub(crate) h: usize,
    pub(crate) w: usize,
    pub(crate) c_out: usize,
    pub(crate) kh: usize,
    pub(crate) kw: usize,
    pub(crate) oh: usize,
    pub(crate) ow: usize,
}

impl Geometry {
    /// Checks an input and a weight shape (3-D for conv1d, 4-D for conv2d) against `params`.
    pub(crate) fn new(params: ConvParams, x: &[usize], w: &[usize]) -> Result<Geometry> {
        let op = params.name();
        let rank = params.spatial_dims + 2;
        let layout = if rank == 3 {
            "[N, C, L]"
        } else {
            "[N, C, H, W]"
        };
        if params.spatial_dims != 1 && params.spatial_dims != 2 {
            return Err(TensorError::invalid(
                "conv",
                format!("spatial_dims must be 1 or 2, got {}", params.spatial_dims),
            ));
        }
        if x.len() != rank || w.len() != rank {
            return Err(TensorError::shapes(
                op,
                x,
                w,
                format!("expected a {rank}-D input {layout} and a {rank}-D weight"),
            ));
        }
        if params.groups == 0
            || params.stride.contains(&0)
            || params.dilation.contains(&0)
            || (rank == 3 && (params.stride[0], params.padding[0], params.dilation[0]) != (1, 0, 1))
        {
            return Err(TensorError::invalid(
                op,
                format!(
                    "stride, dilation and groups must be positive, got stride {:?}, dilation {:?}, groups {}",
                    params.stride, params.dilation, params.groups
                ),
            ));
        }
        let (x4, w4) = (params.shape_4d(x), params.shape_4d(w));
        let groups = params.groups;
        if w4[0] % groups != 0 {
            return Err(TensorError::shapes(
                op,
                x,
                w,
                format!(
                    "out_channels (weight's dim 0, {}) must be divisible by groups ({groups})",
                    w4[0]
                ),
            ));
        }
        // Sizes are checked: hostile weights and parameters may overflow them.
        let overflow =
            |what: &str| TensorError::shapes(op, x, w, format!("{what} overflows with {params:?}"));
        let in_channels = w4[1]
            .checked_mul(groups)
            .ok_or_else(|| overflow("the input channel count"))?;
        if x4[1] != in_channels {
            return Err(TensorError::shapes(
                op,
                x,
                w,
                format!(
                    "given groups={groups} and weight of size {w:?}, expected input to have {} channels, but got {} channels",
                    in_channels, x4[1]
                ),
            ));
        }
        let [(s0, s1), (p0, p1), (d0, d1)] = [
            (params.stride[0], params.stride[1]),
            (params.padding[0], params.padding[1]),
            (params.dilation[0], params.dilation[1]),
        ];
        let padded = |size: usize, pad: usize| {
            pad.checked_mul(2)
                .and_then(|p| p.checked_add(size))
                .ok_or_else(|| overflow("the padded input size"))
        };
        let span = |dilation: usize, kernel: usize| {
            dilation
                .checked_mul(kernel.max(1) - 1)
                .and_then(|s| s.checked_add(1))
                .ok_or_else(|| overflow("the dilated kernel size"))
        };
        let (padded_h, padded_w) = (padded(x4[2], p0)?, padded(x4[3], p1)?);
        let (span_h, span_w) = (span(d0, w4[2])?, span(d1, w4[3])?);
        if w4[2] == 0 || w4[3] == 0 || span_h > padded_h || span_w > padded_w {
            return Err(TensorError::shapes(
                op,
                x,
                w,
                format!(
                    "padded input size per channel ({padded_h} x {padded_w}) is smaller than the dilated kernel ({span_h} x {span_w})"
                ),
            ));
        }
        Ok(Geometry {
            params,
            n: x4[0],
            c_in: x4[1],
            h: x4[2],
            w: x4[3],
            c_out: w4[0],
            kh: w4[2],
            kw: w4[3],
            oh: (padded_h - span_h) / s0 + 1,
            ow: (padded_w - span_w) / s1 + 1,
        })
    }

    fn input_shape(&self) -> Vec<usize> {
        self.params
            .shape_nd(vec![self.n, self.c_in, self.h, self.w])
    }

    fn weight_shape(&self) -> Vec<usize> {
        self.params
            .shape_nd(vec![self.c_out, self.cin_g(), self.kh, self.kw])
    }

    pub(crate) fn output_shape(&self) -> Vec<usize> {
        self.params
            .shape_nd(vec![self.n, self.c_out, self.oh, self.ow])
    }

    fn cin_g(&self) -> usize {
        self.c_in / self.params.groups
    }

    fn cout_g(&self) -> usize {
        self.c_out / self.params.groups
    }

    /// Rows of one group's im2col matrix: `C_in/groups * kH * kW`.
    fn patch_len(&self) -> usize {
        self.cin_g() * self.kh * self.kw
    }

    /// A 1x1 kernel with unit stride and no padding reads the input as its own im2col matrix.
    fn is_pointwise(&self) -> bool {
        let p = &self.params;
        self.kh == 1 && self.kw == 1 && p.stride == [1, 1] && p.padding == [0, 0]
    }
}

impl ConvOp {
    /// A conv1d over `[N, C, L]`, with a bias input when `bias`.
    pub fn conv1d(
        stride: usize,
        padding: usize,
        dilation: usize,
        groups: usize,
        bias: bool,
    ) -> Self {
        let params = ConvParams::conv1d(stride, padding, dilation, groups);
        ConvOp::Forward { params, bias }
    }

    /// A conv2d over `[N, C, H, W]`, with a bias input when `bias`.
    pub fn conv2d(
        stride: [usize; 2],
        padding: [usize; 2],
        dilation: [usize; 2],
        groups: usize,
        bias: bool,
    ) -> Self {
        let params = ConvParams::conv2d(stride, padding, dilation, groups);
        ConvOp::Forward { params, bias }
    }

    fn params(&self) -> ConvParams {
        match self {
            ConvOp::Forward { params, .. }
            | ConvOp::BackwardInput { params, .. }
            | ConvOp::BackwardWeight { params, .. } => *params,
        }
    }

    /// The geometry these inputs describe, with every shape checked.
    fn geometry(&self, inputs: &[TensorMeta]) -> Result<Geometry> {
        let params = self.params();
        let op = self.name();
        let count = match self {
            ConvOp::Forward { bias: true, .. } => 3,
            _ => 2,
        };
        if inputs.len() != count {
            return Err(TensorError::invalid(
                &op,
                format!("expected {count} inputs, got {}", inputs.len()),
            ));
        }
        expect_float(&op, &inputs[0])?;
        if let Some(other) = inputs.iter().find(|m| m.dtype != inputs[0].dtype) {
            return Err(TensorError::DTypeMismatch {
                op,
                expected: inputs[0].dtype,
                got: other.dtype,
            });
        }
        let (a, b) = (&inputs[0].shape, &inputs[1].shape);
        let rank = params.spatial_dims + 2;
        match self {
            ConvOp::Forward { bias, .. } => {
                let g = Geometry::new(params, a, b)?;
                if *bias && inputs[2].shape != [g.c_out] {
                    return Err(TensorError::shapes(
                        op,
                        &inputs[2].shape,
                        b,
                        format!("bias must be [out_channels] = [{}]", g.c_out),
                    ));
                }
                Ok(g)
            }
            ConvOp::BackwardInput { input_size, .. } => {
                if a.len() != rank || b.len() != rank {
                    return Err(TensorError::shapes(
                        op,
                        a,
                        b,
                        format!("expected a {rank}-D grad_output and a {rank}-D weight"),
                    ));
                }
                let channels = b[1].checked_mul(params.groups).ok_or_else(|| {
                    TensorError::shapes(&op, a, b, "input channels overflow".to_string())
                })?;
                let x = params.shape_nd(vec![a[0], channels, input_size[0], input_size[1]]);
                let g = Geometry::new(params, &x, b)?;
                expect_output_shape(&op, &g, a)?;
                Ok(g)
            }
            ConvOp::BackwardWeight { kernel_size, .. } => {
                if a.len() != rank || b.len() != rank || params.groups == 0 {
                    return Err(TensorError::shapes(
                        op,
                        a,
                        b,
                        format!("expected a {rank}-D input and a {rank}-D grad_output"),
                    ));
                }
                let w = params.shape_nd(vec![
                    b[1],
                    a[1] / params.groups,
                    kernel_size[0],
                    kernel_size[1],
                ]);
                let g = Geometry::new(params, a, &w)?;
                expect_output_shape(&op, &g, b)?;
                Ok(g)
            }
        }
    }
}

/// Requires a gradient of the convolution's output shape.
fn expect_output_shape(op: &str, g: &Geometry, grad_out: &[usize]) -> Result<()> {
    let expected = g.output_shape();
    if grad_out != expected.as_slice() {
        return Err(TensorError::shapes(
            op,
            grad_out,
            &expected,
            "grad_output must have the convolution's output shape",
        ));
    }
    Ok(())
}

/// Runs `f` on the row-major elements of two tensors (borrowed when contiguous).
fn with_slices2<T: crate::storage::StorageElement, R>(
    a: &Tensor,
    b: &Tensor,
    f: impl FnOnce(&[T], &[T]) -> R,
) -> Result<R> {
    a.with_slice(|sa: &[T]| b.with_slice(|sb: &[T]| f(sa, sb)))?
}

impl OpDef for ConvOp {
    op_identity!(attributes: variant, kind: Convolution);

    fn name(&self) -> String {
        let base = self.params().name();
        match self {
            ConvOp::Forward { .. } => base.into(),
            ConvOp::BackwardInput { .. } => format!("{base}_backward_input"),
            ConvOp::BackwardWeight { .. } => format!("{base}_backward_weight"),
        }
    }

    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let g = self.geometry(inputs)?;
        let shape = match self {
            ConvOp::Forward { .. } => g.output_shape(),
            ConvOp::BackwardInput { .. } => g.input_shape(),
            ConvOp::BackwardWeight { .. } => g.weight_shape(),
        };
        Ok(vec![TensorMeta::new(shape, inputs[0].dtype)])
    }

    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let g = self.geometry(&metas)?;
        let name = self.name();
        let (a, b) = (inputs[0], inputs[1]);
        let out = float_dispatch!(a.dtype(), &name, T => match self {
            ConvOp::Forward { .. } => {
                let bias = inputs.get(2).map(|t| t.to_vec::<T>()).transpose()?;
                let out = with_slices2(a, b, |x: &[T], w| lowering::forward(&g, x, w, bias.as_deref()))??;
                tensor_from(out, &g.output_shape())
            }
            ConvOp::BackwardInput { .. } => {
                let out = with_slices2(a, b, |go: &[T], w| lowering::backward_input(&g, go, w))?;
                tensor_from(out, &g.input_shape())
            }
            ConvOp::BackwardWeight { .. } => {
                let out = with_slices2(a, b, |x: &[T], go| lowering::backward_weight(&g, x, go))?;
                tensor_from(out, &g.weight_shape())
            }
        });
        Ok(vec![out])
    }

    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        let params = self.params();
        let (a, b) = (&cx.inputs[0], &cx.inputs[1]);
        let grad = cx.grad(0)?;
        let forward = |x: &Tensor, w: &Tensor| {
            Op::Conv(ConvOp::Forward {
                params,
                bias: false,
            })
            .apply1(&[x, w])
        };
        let input_grad = |go: &Tensor, w: &Tensor, x_shape: &[usize]| {
            Op::Conv(ConvOp::BackwardInput {
                params,
                input_size: params.spatial(x_shape),
            })
            .apply1(&[go, w])
        };
        let weight_grad = |x: &Tensor, go: &Tensor, w_shape: &[usize]| {
            Op::Conv(ConvOp::BackwardWeight {
                params,
                kernel_size: params.spatial(w_shape),
            })
            .apply1(&[x, go])
        };
        let when = |i: usize, f: &dyn Fn() -> Result<Tensor>| -> Result<Option<Tensor>> {
            if cx.needs[i] { f().map(Some) } else { Ok(None) }
        };
        match self {
            // y = conv(x, w) + b.
            ConvOp::Forward { bias, .. } => {
                let mut grads = vec![
                    when(0, &|| input_grad(&grad, b, &a.shape()))?,
                    when(1, &|| weight_grad(a, &grad, &b.shape()))?,
                ];
                if *bias {
                    let dims: Vec<usize> = (0..grad.ndim()).filter(|&d| d != 1).collect();
                    grads.push(when(2, &|| grad.sum_dims(&dims, false))?);
                }
                Ok(grads)
            }
            // gx = conv_w^T(go): linear in go (adjoint: conv) and in w.
            ConvOp::BackwardInput { .. } => Ok(vec![
                when(0, &|| forward(&grad, b))?,
                when(1, &|| weight_grad(&grad, a, &b.shape()))?,
            ]),
            // gw = sum over the batch of go * patches(x): linear in x and in go.
            ConvOp::BackwardWeight { .. } => Ok(vec![
                when(0, &|| input_grad(b, &grad, &a.shape()))?,
                when(1, &|| forward(a, &grad))?,
            ]),
        }
    }
}

/// The output shape `[N, C_out, oH, oW]` of the 2-D convolution of an input of `x_shape` by a
/// weight of `w_shape`, or why they do not fit `params`.
pub fn conv2d_output_shape(
    params: ConvParams,
    x_shape: &[usize],
    w_shape: &[usize],
) -> Result<[usize; 4]> {
    let g = Geometry::new(params, x_shape, w_shape)?;
    Ok([g.n, g.c_out, g.oh, g.ow])
}

/// The images `images` of the 2-D convolution of `x` (`[N, C, H, W]`, packed) with `w`
/// (packed), plus `bias` (one per output channel) when given, with `stage` applied
/// ([`ConvStage`]: a ReLU, a max pool), written packed into `out` (exactly those images' staged
/// outputs): what a compiled program calls for each block of images before its epilogue.
#[allow(clippy::too_many_arguments)] // the call's shapes, operands, stage and images, as given
pub fn conv2d_images_into<T: crate::Float>(
    params: ConvParams,
    x_shape: &[usize],
    w_shape: &[usize],
    x: &[T],
    w: &[T],
    bias: Option<&[T]>,
    stage: ConvStage,
    images: std::ops::Range<usize>,
    out: &mut [T],
) -> Result<()> {
    let g = Geometry::new(params, x_shape, w_shape)?;
    stage.check()?;
    let [ph, pw] = stage.plane([g.oh, g.ow]);
    let image_len = g.c_out * ph * pw;
    let fits = params.spatial_dims == 2
        && x.len() >= crate::size::saturating_numel(x_shape)
        && w.len() >= crate::size::saturating_numel(w_shape)
        && bias.is_none_or(|b| b.len() == g.c_out)
        && images.start <= images.end
        && images.end <= g.n
        && out.len() == images.len().saturating_mul(image_len);
    if !fits {
        return Err(TensorError::invalid(
            "conv2d",
            format!(
                "images {images:?} of input {x_shape:?} and weight {w_shape:?} (bias {:?}, \
                 stage {stage:?}) do not fit buffers of {}, {} and {} elements",
                bias.map(<[T]>::len),
                x.len(),
                w.len(),
                out.len()
            ),
        ));
    }
    if image_len > 0 {
        stage::forward_into(&g, x, w, bias, stage, images.start, out)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Generator, GradcheckOptions, gradcheck};

    fn leaf(shape: &[usize], seed: u64) -> Tensor {
        let mut g = Generator::new(seed);
        let t = Tensor::randn_with(shape, DType::F64, &mut g).unwrap();
        t.requires_grad_(true).unwrap()
    }

    /// The backward ops are themselves differentiable (their gradients are the other two ops).
    #[test]
    fn backward_ops_pass_gradcheck() {
        let params = ConvParams::conv2d([2, 1], [1, 1], [1, 2], 2);
        let (x, w) = (leaf(&[2, 4, 5, 6], 1), leaf(&[4, 2, 3, 2], 2));
        let go_shape = Op::Conv(ConvOp::Forward {
            params,
            bias: false,
        })
        .apply1(&[&x, &w])
        .unwrap()
        .shape();
        let go = leaf(&go_shape, 3);
        let input_grad = Op::Conv(ConvOp::BackwardInput {
            params,
            input_size: [5, 6],
        });
        let weight_grad = Op::Conv(ConvOp::BackwardWeight {
            params,
            kernel_size: [3, 2],
        });
        let opts = GradcheckOptions::default();
        gradcheck(
            |t| input_grad.apply1(&[&t[0], &t[1]]),
            &[go.clone(), w],
            opts,
        )
        .unwrap();
        gradcheck(|t| weight_grad.apply1(&[&t[0], &t[1]]), &[x, go], opts).unwrap();
    }
}
