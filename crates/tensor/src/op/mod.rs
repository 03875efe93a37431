//! The op table: every tensor operation is one variant of [`Op`], defined once with its meta
//! function (output shapes and dtypes, errors naming the op and shapes), its CPU kernel and its
//! backward formula. Eager calls, autograd, and later the tracer and compilers all speak `Op`.

#[macro_use]
mod identity;
mod batch_norm_update;
mod binary;
mod cast;
mod conv;
mod custom;
mod dropout;
mod embedding;
mod facts;
mod fake_quant;
mod index;
mod loss;
mod matmul;
mod norm;
mod optim;
mod pool;
pub mod quant;
mod reduce;
mod softmax;
mod softmax_rows;
mod text;
mod unary;
mod view;

pub use batch_norm_update::BatchNormUpdateOp;
pub use binary::{BinaryOp, CompareOp, ScalarOp};
pub use conv::{
    ConvOp, ConvParams, ConvStage, WinogradTile, conv2d_images_into, conv2d_output_shape,
    conv2d_winograd_images_into, winograd_applies, winograd_weight_shape, winograd_weights,
    winograd_weights_into,
};
pub use custom::{CustomFunction, CustomOp, register_custom};
pub use dropout::DropoutOp;
pub use embedding::{EmbeddingBackwardOp, EmbeddingOp};
pub use facts::{Effects, FusionRole, OpKind, Producer};
pub use fake_quant::{
    FakeQuantOp, fake_quantize_learnable_per_channel_affine,
    fake_quantize_learnable_per_tensor_affine, fake_quantize_per_channel_affine,
    fake_quantize_per_tensor_affine,
};
pub use index::IndexOp;
pub use loss::{LossOp, Reduction};
pub use norm::NormOp;
pub use optim::OptimOp;
pub use optim::formula as optim_formula;
pub use pool::{Pool2dParams, PoolOp};
pub use quant::QuantOp;
pub use reduce::{ReduceKind, ReduceOp};
pub use unary::UnaryOp;
pub use view::ViewOp;
pub(crate) use view::copy_contiguous;
pub use view::view_strides;

use crate::autograd::{is_grad_enabled, record};
use crate::{DType, Result, Tensor, TensorError, TensorMeta};

/// One tensor operation with its attributes.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum Op {
    /// Elementwise function of one tensor.
    Unary(UnaryOp),
    /// The derivative of a unary op: `grad * f'(v)`; inputs `grad, v` (`v` is the unary op's
    /// input or output, whichever its derivative reads).
    UnaryBackward(UnaryOp),
    /// Elementwise function of two broadcast tensors.
    Binary(BinaryOp),
    /// Elementwise function of a tensor and a scalar attribute.
    Scalar(ScalarOp),
    /// Elementwise comparison giving bool.
    Compare(CompareOp),
    /// `where(cond, a, b)` with broadcasting.
    Where,
    /// Clamp to optional scalar bounds.
    Clamp { min: Option<f64>, max: Option<f64> },
    /// Reductions over dimensions.
    Reduce(ReduceOp),
    /// Softmax (or log-softmax) along one dimension.
    Softmax { dim: usize, log: bool },
    /// `matmul` with PyTorch's batching and broadcasting rules.
    Matmul,
    /// `x @ w^T (+ b)`; inputs `x, w` or `x, w, b`.
    Linear { bias: bool },
    /// Views that share storage, and the copy that makes a view contiguous.
    View(ViewOp),
    /// Conversion to another dtype.
    ToDType(DType),
    /// Convolutions.
    Conv(ConvOp),
    /// Pooling.
    Pool(PoolOp),
    /// Normalisation layers.
    Norm(NormOp),
    /// The running-statistics update of a training batch norm (new buffer values).
    BatchNormUpdate(BatchNormUpdateOp),
    /// Dropout.
    Dropout(DropoutOp),
    /// Embedding lookup.
    Embedding(EmbeddingOp),
    /// The gradient of an embedding lookup with respect to its weight.
    EmbeddingBackward(EmbeddingBackwardOp),
    /// Indexing, joining and splitting.
    Index(IndexOp),
    /// Loss functions.
    Loss(LossOp),
    /// Quantize, dequantize and the int8 inference ops.
    Quant(QuantOp),
    /// Fake quantization for quantization-aware training (differentiable).
    FakeQuant(FakeQuantOp),
    /// The gradients of a fake-quantize op; inputs `grad, x, scale, zero_point`.
    FakeQuantBackward(FakeQuantOp),
    /// Optimizer updates (SGD, Adam, AdamW) in functional form.
    Optim(OptimOp),
    /// A user-defined op with its own backward.
    #[serde(skip)]
    Custom(CustomOp),
}

/// What a backward formula sees: the op's saved inputs and outputs, the gradient of each
/// output (`None` where nothing flowed), and which inputs need a gradient.
pub struct BackwardCtx<'a> {
    pub inputs: &'a [Tensor],
    pub outputs: &'a [Tensor],
    pub grads: &'a [Option<Tensor>],
    pub needs: &'a [bool],
    pub output_metas: &'a [TensorMeta],
}

impl BackwardCtx<'_> {
    /// The gradient of output `i`, zeros where none flowed.
    pub fn grad(&self, i: usize) -> Result<Tensor> {
        match &self.grads[i] {
            Some(g) => Ok(g.clone()),
            None => zeros(&self.output_metas[i].shape, self.output_metas[i].dtype),
        }
    }
}

/// Zeros of `shape` made with ops (a 0-d zero expanded), so that a backward formula that
/// needs them is recorded when it runs on meta tensors, and costs no memory eagerly.
pub(crate) fn zeros(shape: &[usize], dtype: DType) -> Result<Tensor> {
    Tensor::zeros(&[], dtype)?.expand(shape)
}

/// Everything an op family defines, in one place: its name and attributes as printed, its
/// kind, effects and fusion role, its meta function, its CPU kernel and its backward formula.
/// Every consumer (eager dispatch, autograd, the printer and parser, the interpreter, the
/// passes) reads these and nothing else.
pub(crate) trait OpDef {
    /// The op's name as printed in graphs and errors (`add`, `conv2d`).
    fn name(&self) -> String;
    /// The attributes printed after the name (`{dim: 1}`), as JSON text with fields in
    /// declaration order; `None` when the name says everything.
    fn attributes(&self) -> Option<String>;
    /// The family of computation, which decides how a backend lowers the op.
    fn kind(&self) -> OpKind;
    /// What running the op does besides computing its outputs.
    fn effects(&self) -> Effects {
        Effects::PURE
    }
    /// The op's place in a fusion group.
    fn fusion_role(&self) -> FusionRole {
        FusionRole::of(self.kind(), self.effects())
    }
    /// Whether the backward formula reads the op's outputs (so they must be kept, or
    /// recomputed, for the backward pass).
    fn backward_reads_output(&self) -> bool {
        false
    }
    /// Output shapes and dtypes, or an error naming the op and the offending shapes.
    fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>>;
    /// The CPU kernel; inputs have passed `meta`.
    fn cpu(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>>;
    /// Gradients of the inputs (`None` for those not needed or not differentiable).
    fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>>;
    /// Whether output `i` carries gradients (indices and masks do not).
    fn output_is_differentiable(&self, _index: usize) -> bool {
        true
    }
    /// Whether f16/bf16 inputs are computed in f32 and cast back (false for views and casts).
    fn computes_half_in_f32(&self) -> bool {
        true
    }
}

macro_rules! delegate {
    ($self:ident, $def:ident => $body:expr) => {
        match $self {
            Op::Unary($def) => $body,
            Op::UnaryBackward(op) => {
                let $def = &unary::UnaryBackwardOp(*op);
                $body
            }
            Op::Binary($def) => $body,
            Op::Scalar($def) => $body,
            Op::Compare($def) => $body,
            Op::Where => {
                let $def = &binary::WhereOp;
                $body
            }
            Op::Clamp { min, max } => {
                let $def = &binary::ClampOp {
                    min: *min,
                    max: *max,
                };
                $body
            }
            Op::Reduce($def) => $body,
            Op::Softmax { dim, log } => {
                let $def = &softmax::SoftmaxOp {
                    dim: *dim,
                    log: *log,
                };
                $body
            }
            Op::Matmul => {
                let $def = &matmul::MatmulOp;
                $body
            }
            Op::Linear { bias } => {
                let $def = &matmul::LinearOp { bias: *bias };
                $body
            }
            Op::View($def) => $body,
            Op::ToDType(dtype) => {
                let $def = &cast::CastOp(*dtype);
                $body
            }
            Op::Conv($def) => $body,
            Op::Pool($def) => $body,
            Op::Norm($def) => $body,
            Op::BatchNormUpdate($def) => $body,
            Op::Dropout($def) => $body,
            Op::Embedding($def) => $body,
            Op::EmbeddingBackward($def) => $body,
            Op::Index($def) => $body,
            Op::Loss($def) => $body,
            Op::Quant($def) => $body,
            Op::FakeQuant($def) => $body,
            Op::FakeQuantBackward(op) => {
                let $def = &fake_quant::FakeQuantBackwardOp(op.clone());
                $body
            }
            Op::Optim($def) => $body,
            Op::Custom($def) => $body,
        }
    };
}

impl Op {
    pub fn name(&self) -> String {
        delegate!(self, d => d.name())
    }

    /// The attributes printed after the name, as JSON text in declaration order (`None` when
    /// the name says everything).
    pub fn attributes(&self) -> Option<String> {
        delegate!(self, d => d.attributes())
    }

    /// Whether the op can be written as text and read back: every op but a user-defined one
    /// that is not registered (see [`register_custom`]).
    pub fn has_text(&self) -> bool {
        match self {
            Op::Custom(c) => custom::is_registered(c),
            _ => true,
        }
    }

    /// The op that prints as `name` with attributes `attrs` (in serde form), if there is one.
    pub fn from_text(name: &str, attrs: Option<&serde_json::Value>) -> Option<Op> {
        use text::{decode_fixed, decode_struct, decode_variant};
        decode_variant(name, attrs)
            .map(Op::Unary)
            .or_else(|| unary::decode_backward(name, attrs).map(|b| Op::UnaryBackward(b.0)))
            .or_else(|| decode_variant(name, attrs).map(Op::Binary))
            .or_else(|| decode_struct(name, attrs).map(Op::Scalar))
            .or_else(|| decode_variant(name, attrs).map(Op::Compare))
            .or_else(|| decode_fixed(Op::Where, name, attrs))
            .or_else(|| {
                decode_struct(name, attrs).map(|c: binary::ClampOp| Op::Clamp {
                    min: c.min,
                    max: c.max,
                })
            })
            .or_else(|| decode_struct(name, attrs).map(Op::Reduce))
            .or_else(|| {
                decode_struct(name, attrs).map(|s: softmax::SoftmaxOp| Op::Softmax {
                    dim: s.dim,
                    log: s.log,
                })
            })
            .or_else(|| decode_fixed(Op::Matmul, name, attrs))
            .or_else(|| {
                decode_struct(name, attrs).map(|l: matmul::LinearOp| Op::Linear { bias: l.bias })
            })
            .or_else(|| decode_variant(name, attrs).map(Op::View))
            .or_else(|| decode_struct(name, attrs).map(|c: cast::CastOp| Op::ToDType(c.0)))
            .or_else(|| decode_variant(name, attrs).map(Op::Conv))
            .or_else(|| decode_variant(name, attrs).map(Op::Pool))
            .or_else(|| decode_variant(name, attrs).map(Op::Norm))
            .or_else(|| decode_struct(name, attrs).map(Op::BatchNormUpdate))
            .or_else(|| decode_struct(name, attrs).map(Op::Dropout))
            .or_else(|| decode_struct(name, attrs).map(Op::Embedding))
            .or_else(|| decode_struct(name, attrs).map(Op::EmbeddingBackward))
            .or_else(|| decode_variant(name, attrs).map(Op::Index))
            .or_else(|| decode_variant(name, attrs).map(Op::Loss))
            .or_else(|| decode_variant(name, attrs).map(Op::Quant))
            .or_else(|| decode_variant(name, attrs).map(Op::FakeQuant))
            .or_else(|| fake_quant::decode_backward(name, attrs).map(Op::FakeQuantBackward))
            .or_else(|| decode_variant(name, attrs).map(Op::Optim))
            .or_else(|| custom::decode(name, attrs).map(Op::Custom))
    }

    /// The family of computation (elementwise, reduction, GEMM, ...).
    pub fn kind(&self) -> OpKind {
        delegate!(self, d => d.kind())
    }

    /// What running the op does besides computing its outputs.
    pub fn effects(&self) -> Effects {
        delegate!(self, d => d.effects())
    }

    /// Whether the op may be erased when unused, merged with an equal op, or folded.
    pub fn is_pure(&self) -> bool {
        self.effects().is_pure()
    }

    /// The op's place in a fusion group.
    pub fn fusion_role(&self) -> FusionRole {
        delegate!(self, d => d.fusion_role())
    }

    /// Whether the backward formula reads the op's outputs.
    pub fn backward_reads_output(&self) -> bool {
        delegate!(self, d => d.backward_reads_output())
    }

    /// Output shapes and dtypes for inputs of these shapes and dtypes.
    /// Every output's byte size is checked to fit in memory's address range, so a huge or
    /// overflowing shape is an error here, never a wrapped count in a kernel.
    pub fn meta(&self, inputs: &[TensorMeta]) -> Result<Vec<TensorMeta>> {
        let outputs = delegate!(self, d => d.meta(inputs))?;
        for out in &outputs {
            crate::size::checked_len(&self.name(), &out.shape, out.dtype)?;
        }
        Ok(outputs)
    }

    /// The gradients of the op's inputs from its backward formula: the one definition of the
    /// op's derivative, which eager autograd runs on real tensors and `tessera_fx::autodiff`
    /// runs on meta tensors to record it as graph nodes. Formulas only apply ops.
    pub fn backward(&self, cx: &BackwardCtx) -> Result<Vec<Option<Tensor>>> {
        delegate!(self, d => d.backward(cx))
    }

    /// Whether output `index` carries gradients (indices and masks do not).
    pub fn output_is_differentiable(&self, index: usize) -> bool {
        delegate!(self, d => d.output_is_differentiable(index))
    }

    /// Runs the op eagerly: checks shapes with the meta function, runs the kernel, and records
    /// an autograd node when grad mode is on and an input requires a gradient.
    pub fn apply(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        // Meta tensors mix with real ones (a traced input meets real parameters); real
        // tensors must share one device.
        let mut device = None;
        for t in inputs
            .iter()
            .map(|t| t.device())
            .filter(|d| *d != crate::Device::Meta)
        {
            match device {
                None => device = Some(t),
                Some(d) if d != t => {
                    return Err(TensorError::DeviceMismatch {
                        op: self.name(),
                        lhs: d,
                        rhs: t,
                    });
                }
                _ => {}
            }
        }
        if inputs.iter().any(|t| t.is_meta()) {
            let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
            let outputs: Vec<Tensor> = self
                .meta(&metas)?
                .iter()
                .map(|m| Tensor::new_meta(&m.shape, m.dtype))
                .collect();
            crate::trace::record(self, inputs, &outputs)?;
            return Ok(outputs);
        }
        if let Some(device) = device.filter(|d| *d != crate::Device::Cpu) {
            return crate::backend::dispatch::apply_on_device(self, device, inputs);
        }
        let metas: Vec<TensorMeta> = inputs.iter().map(|t| t.meta()).collect();
        let expected = self.meta(&metas)?;
        let half = metas
            .iter()
            .map(|m| m.dtype)
            .find(|d| matches!(d, DType::F16 | DType::BF16));
        let outputs = match half {
            Some(half) if delegate!(self, d => d.computes_half_in_f32()) => {
                let _guard = crate::no_grad();
                let widened: Vec<Tensor> = inputs
                    .iter()
                    .map(|t| {
                        if t.dtype() == half {
                            t.to_dtype(DType::F32)
                        } else {
                            Ok((*t).clone())
                        }
                    })
                    .collect::<Result<_>>()?;
                let refs: Vec<&Tensor> = widened.iter().collect();
                let outs = delegate!(self, d => d.cpu(&refs))?;
                outs.into_iter()
                    .zip(&expected)
                    .map(|(o, m)| {
                        if o.dtype() != m.dtype {
                            o.to_dtype(m.dtype)
                        } else {
                            Ok(o)
                        }
                    })
                    .collect::<Result<Vec<_>>>()?
            }
            _ => delegate!(self, d => d.cpu(inputs))?,
        };
        debug_assert_eq!(
            outputs.len(),
            expected.len(),
            "{}: kernel output count",
            self.name()
        );
        for (o, m) in outputs.iter().zip(&expected) {
            debug_assert_eq!(
                &o.meta(),
                m,
                "{}: kernel output disagrees with meta",
                self.name()
            );
        }
        if is_grad_enabled() && inputs.iter().any(|t| t.requires_grad()) {
            record(self, inputs, &outputs);
        }
        Ok(outputs)
    }

    /// [`Op::apply`] for ops with exactly one output.
    pub fn apply1(&self, inputs: &[&Tensor]) -> Result<Tensor> {
        let mut outs = self.apply(inputs)?;
        Ok(outs.swap_remove(0))
    }
}

/// Checks the number of inputs an op was given.
pub(crate) fn expect_inputs(op: &str, inputs: &[TensorMeta], n: usize) -> Result<()> {
    if inputs.len() != n {
        return Err(TensorError::invalid(
            op,
            format!("expected {n} inputs, got {}", inputs.len()),
        ));
    }
    Ok(())
}

/// Requires a float dtype.
pub(crate) fn expect_float(op: &str, meta: &TensorMeta) -> Result<()> {
    if !meta.dtype.is_float() {
        return Err(TensorError::dtype(op, meta.dtype));
    }
    Ok(())
}
