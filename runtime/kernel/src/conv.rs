//! The external convolution call a kernel may start with: `scratch = conv2d(x, w)` for the
//! images of the outermost loop's current block, so that the kernel's epilogue (bias,
//! activation, residual add) reads each block right after it is computed. The call runs the
//! eager path's kernels (direct or im2col + GEMM) or a Winograd convolution on weights the
//! program transformed once ([`ConvAlgorithm`], chosen by [`crate::conv_choice`]). An eager
//! path call may also add the bias, apply a ReLU and max-pool its rows before it writes them
//! ([`ConvStage`]: the activation between a convolution and its pooling is then never written
//! out). The kernel's domain is the staged output's `[N, C, oH, oW]`; its input, weight and
//! bias buffers are packed. Both the interpreter and the CPU backend's runner call
//! [`run_conv`].

use crate::{BufferId, BufferPtr, Kernel, KernelError, Result, ScalarType};
use std::fmt;
use tessera_tensor::op::{
    ConvParams, ConvStage, WinogradTile, conv2d_images_into, conv2d_winograd_images_into,
    winograd_weight_shape,
};

/// How a convolution call computes its products.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConvAlgorithm {
    /// The eager kernel: direct for short patches, else im2col + GEMM; the weight buffer holds
    /// the `[C_out, C_in/groups, kH, kW]` weight.
    Gemm,
    /// Winograd with this output tile; the weight buffer holds the transformed weights
    /// (`[points, blocks, C_in, 64]`, a derived slot of the program).
    Winograd(WinogradTile),
}

impl fmt::Display for ConvAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConvAlgorithm::Gemm => f.write_str("gemm"),
            ConvAlgorithm::Winograd(t) => write!(f, "winograd {t}"),
        }
    }
}

/// `out = conv2d(input, weight)` with `params`, the convolution packed in the scratch `out`.
#[derive(Debug, Clone, PartialEq)]
pub struct ConvCall {
    pub input: BufferId,
    /// The weight, or its Winograd transform ([`ConvAlgorithm`]).
    pub weight: BufferId,
    pub out: BufferId,
    pub params: ConvParams,
    pub input_shape: [usize; 4],
    /// The convolution's weight shape, `[C_out, C_in/groups, kH, kW]` for both algorithms.
    pub weight_shape: [usize; 4],
    pub algorithm: ConvAlgorithm,
    /// One value per output channel the call adds (`[C_out]`), for the eager path only.
    pub bias: Option<BufferId>,
    /// What the call does to its rows before it writes them, for the eager path only.
    pub stage: ConvStage,
}

impl ConvCall {
    /// Elements of the weight buffer: the weight's, or its Winograd transform's (`None` when
    /// the count overflows).
    pub fn weight_len(&self) -> Option<usize> {
        let numel = |s: &[usize]| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        match self.algorithm {
            ConvAlgorithm::Gemm => numel(&self.weight_shape),
            ConvAlgorithm::Winograd(tile) => {
                numel(&winograd_weight_shape(tile, &self.weight_shape))
            }
        }
    }

    /// Elements of one output image.
    pub fn image_len(&self, kernel: &Kernel) -> usize {
        kernel.domain.iter().skip(1).product()
    }
}

/// Runs `kernel`'s convolution call for the images `begin..end` (iterations of the outermost
/// loop), if it has one.
///
/// # Safety
/// As [`crate::KernelExecutor::execute`]; the kernel must pass [`Kernel::verify`], which
/// checked the buffers' lengths against the shapes.
pub unsafe fn run_conv(
    kernel: &Kernel,
    buffers: &[BufferPtr],
    begin: usize,
    end: usize,
) -> Result<()> {
    let Some(c) = &kernel.conv else {
        return Ok(());
    };
    let image = c.image_len(kernel);
    let (x, w, out) = (
        buffers[c.input.index()],
        buffers[c.weight.index()],
        buffers[c.out.index()],
    );
    let bias = c.bias.map(|b| buffers[b.index()]);
    // SAFETY: `verify` checked that the input, weight and scratch buffers hold the shapes'
    // elements of their type; the caller guarantees they are live and the scratch writable
    // and unaliased; `begin..end` lies within the domain's first extent.
    unsafe {
        match out.ty {
            ScalarType::F64 => convolve::<f64>(c, (x, w, bias, out), begin..end, image),
            _ => convolve::<f32>(c, (x, w, bias, out), begin..end, image),
        }
    }
    .map_err(|source| KernelError::Backend {
        kernel: kernel.name.clone(),
        message: format!("the convolution call failed: {source}"),
    })
}

/// [`run_conv`] at element type `T`.
///
/// # Safety
/// As [`run_conv`]: the buffers hold `T`s, as many as their lengths say.
unsafe fn convolve<T: tessera_tensor::Float>(
    c: &ConvCall,
    (x, w, bias, out): (BufferPtr, BufferPtr, Option<BufferPtr>, BufferPtr),
    images: std::ops::Range<usize>,
    image: usize,
) -> tessera_tensor::Result<()> {
    let (at, count) = (images.start * image, images.len() * image);
    // SAFETY: forwarded from the caller; the images' outputs lie inside the scratch.
    let (x, w, bias, out) = unsafe {
        (
            std::slice::from_raw_parts(x.ptr as *const T, x.len),
            std::slice::from_raw_parts(w.ptr as *const T, w.len),
            bias.map(|b| std::slice::from_raw_parts(b.ptr as *const T, b.len)),
            std::slice::from_raw_parts_mut((out.ptr as *mut T).add(at), count),
        )
    };
    match c.algorithm {
        ConvAlgorithm::Gemm => conv2d_images_into(
            c.params,
            &c.input_shape,
            &c.weight_shape,
            x,
            w,
            bias,
            c.stage,
            images,
            out,
        ),
        ConvAlgorithm::Winograd(tile) => conv2d_winograd_images_into(
            tile,
            c.params,
            &c.input_shape,
            &c.weight_shape,
            x,
            w,
            images,
            out,
        ),
    }
}

impl Kernel {
    /// The convolution call's buffers have the types and lengths its shapes need.
    pub(crate) fn verify_conv(&self, c: &ConvCall) -> std::result::Result<(), String> {
        if self.domain.len() != 4 || !self.reduce.is_empty() || self.gemm.is_some() {
            return Err("a convolution kernel is a 4-D nest with no other call".into());
        }
        let numel = |s: &[usize]| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
        if let ConvAlgorithm::Winograd(tile) = c.algorithm
            && !tessera_tensor::op::winograd_applies(&c.params, &c.weight_shape)
        {
            return Err(format!(
                "{tile} takes 3x3 kernels, stride 1, dilation 1 and one group, not {:?} with {:?}",
                c.weight_shape, c.params
            ));
        }
        if matches!(c.algorithm, ConvAlgorithm::Winograd(_))
            && (c.bias.is_some() || !c.stage.is_identity())
        {
            return Err("a Winograd convolution call adds no bias and has no stage".into());
        }
        c.stage.check().map_err(|e| e.to_string())?;
        let output =
            tessera_tensor::op::conv2d_output_shape(c.params, &c.input_shape, &c.weight_shape)
                .map_err(|e| e.to_string())?;
        let [ph, pw] = c.stage.plane([output[2], output[3]]);
        let staged = [output[0], output[1], ph, pw];
        if self.domain != staged {
            return Err(format!(
                "a convolution into {:?} with stage {:?} writes {staged:?}, not the domain {:?}",
                output, c.stage, self.domain
            ));
        }
        let weight = c.weight_len();
        let mut needs = vec![
            (c.input, numel(&c.input_shape)),
            (c.weight, weight),
            (c.out, numel(&self.domain)),
        ];
        needs.extend(c.bias.map(|b| (b, Some(c.weight_shape[0]))));
        let ty = self.buffer(c.out).ty;
        for (b, n) in needs {
            let n = n.ok_or("the convolution's sizes overflow")?;
            let p = self
                .buffers
                .get(b.index())
                .ok_or_else(|| format!("the convolution names a missing {b}"))?;
            if p.len < n || p.ty != ty {
                return Err(format!(
                    "the convolution's {b} needs {n} {ty} elements, has {} {}",
                    p.len, p.ty
                ));
            }
        }
        Ok(())
    }
}
