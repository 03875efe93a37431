//! Every op of the op table as a proptest strategy with random attributes, the dtypes of
//! its inputs and random shapes for them (0, 1, small, huge and overflowing dimensions): the
//! generators behind the op-table property tests of the tensor crate and of the backends.
//! The ops are enumerated through exhaustive matches on the op table, so a new op or family
//! fails to compile here until it is generated.

use crate::every_reduce_kind;
use proptest::prelude::*;
use tessera_tensor::op::{
    BatchNormUpdateOp, BinaryOp, CompareOp, ConvOp, ConvParams, DropoutOp, EmbeddingBackwardOp,
    EmbeddingOp, FakeQuantOp, IndexOp, LossOp, NormOp, OptimOp, Pool2dParams, PoolOp, QuantOp,
    ReduceOp, Reduction, ScalarOp, UnaryOp, ViewOp,
};
use tessera_tensor::{DType, Op, Tensor, TensorMeta};

/// Dimensions drawn for shapes and size attributes: mostly small, sometimes empty, huge or
/// overflowing when multiplied.
fn dim() -> impl Strategy<Value = usize> {
    prop_oneof![
        6 => 1usize..4,
        2 => Just(0usize),
        1 => prop::sample::select(vec![1usize << 40, 1 << 62, usize::MAX / 2, usize::MAX]),
    ]
}

/// A small attribute value: an axis, a stride, a padding, a group count.
fn small() -> impl Strategy<Value = usize> {
    prop_oneof![8 => 0usize..4, 1 => Just(1usize << 40), 1 => Just(usize::MAX)]
}

fn pair() -> impl Strategy<Value = [usize; 2]> {
    [small(), small()]
}

fn reduction() -> impl Strategy<Value = Reduction> {
    prop::sample::select(vec![Reduction::None, Reduction::Mean, Reduction::Sum])
}

fn quant_dtype() -> impl Strategy<Value = DType> {
    prop::sample::select(vec![DType::U8, DType::I8, DType::I32, DType::F32])
}

fn conv_params() -> impl Strategy<Value = ConvParams> {
    (1usize..3, pair(), pair(), pair(), small()).prop_map(
        |(spatial_dims, stride, padding, dilation, groups)| ConvParams {
            spatial_dims,
            stride,
            padding,
            dilation,
            groups,
        },
    )
}

fn pool_params() -> impl Strategy<Value = Pool2dParams> {
    (pair(), pair(), pair(), pair(), any::<bool>()).prop_map(
        |(kernel, stride, padding, dilation, ceil_mode)| Pool2dParams {
            kernel,
            stride,
            padding,
            dilation,
            ceil_mode,
        },
    )
}

/// Every family's ops, one strategy per variant, with random attributes.
pub fn op_strategies() -> Vec<BoxedStrategy<Op>> {
    let unary = UnaryOp::EVERY;
    let binary = BinaryOp::EVERY;
    let compare = CompareOp::EVERY;
    let reduce_kinds = every_reduce_kind();
    let mut all: Vec<BoxedStrategy<Op>> = Vec::new();
    all.extend(unary.map(|u| Just(Op::Unary(u)).boxed()));
    all.extend(unary.map(|u| Just(Op::UnaryBackward(u)).boxed()));
    all.extend(binary.map(|b| Just(Op::Binary(b)).boxed()));
    all.extend(binary.map(|op| {
        (any::<bool>(), prop::sample::select(vec![0.0, 2.0, -1.5]))
            .prop_map(move |(reversed, value)| {
                Op::Scalar(ScalarOp {
                    op,
                    value,
                    reversed,
                })
            })
            .boxed()
    }));
    all.extend(compare.map(|c| Just(Op::Compare(c)).boxed()));
    all.push(Just(Op::Where).boxed());
    all.push(
        (
            prop::option::of(-1.0f64..1.0),
            prop::option::of(-1.0f64..1.0),
        )
            .prop_map(|(min, max)| Op::Clamp { min, max })
            .boxed(),
    );
    all.push(
        (
            prop::sample::select(reduce_kinds),
            prop::collection::vec(small(), 0..3),
            any::<bool>(),
        )
            .prop_map(|(kind, dims, keepdim)| {
                Op::Reduce(ReduceOp {
                    kind,
                    dims,
                    keepdim,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), any::<bool>())
            .prop_map(|(dim, log)| Op::Softmax { dim, log })
            .boxed(),
    );
    all.push(Just(Op::Matmul).boxed());
    all.push(any::<bool>().prop_map(|bias| Op::Linear { bias }).boxed());
    all.push(
        prop::collection::vec(dim(), 0..5)
            .prop_map(|s| Op::View(ViewOp::Reshape(s)))
            .boxed(),
    );
    all.push(
        prop::collection::vec(small(), 0..5)
            .prop_map(|p| Op::View(ViewOp::Permute(p)))
            .boxed(),
    );
    all.push(
        (small(), small(), dim())
            .prop_map(|(dim, start, len)| Op::View(ViewOp::Narrow { dim, start, len }))
            .boxed(),
    );
    all.push(
        prop::collection::vec(dim(), 0..5)
            .prop_map(|s| Op::View(ViewOp::Expand(s)))
            .boxed(),
    );
    all.push(Just(Op::View(ViewOp::Contiguous)).boxed());
    all.push(
        prop::sample::select(DTYPES.to_vec())
            .prop_map(Op::ToDType)
            .boxed(),
    );
    all.push(
        (conv_params(), any::<bool>())
            .prop_map(|(params, bias)| Op::Conv(ConvOp::Forward { params, bias }))
            .boxed(),
    );
    all.push(
        (conv_params(), [dim(), dim()])
            .prop_map(|(params, input_size)| Op::Conv(ConvOp::BackwardInput { params, input_size }))
            .boxed(),
    );
    all.push(
        (conv_params(), [dim(), dim()])
            .prop_map(|(params, kernel_size)| {
                Op::Conv(ConvOp::BackwardWeight {
                    params,
                    kernel_size,
                })
            })
            .boxed(),
    );
    all.push(
        pool_params()
            .prop_map(|p| Op::Pool(PoolOp::MaxPool2d(p)))
            .boxed(),
    );
    all.push(
        pool_params()
            .prop_map(|p| Op::Pool(PoolOp::MaxPool2dValues(p)))
            .boxed(),
    );
    all.push(
        [dim(), dim()]
            .prop_map(|input_size| {
                Op::Pool(PoolOp::MaxPool2dBackward {
                    input_size,
                    window: None,
                })
            })
            .boxed(),
    );
    all.push(
        (pool_params(), any::<bool>())
            .prop_map(|(params, count_include_pad)| {
                Op::Pool(PoolOp::AvgPool2d {
                    params,
                    count_include_pad,
                })
            })
            .boxed(),
    );
    all.push(
        (pool_params(), any::<bool>(), [dim(), dim()])
            .prop_map(|(params, count_include_pad, input_size)| {
                Op::Pool(PoolOp::AvgPool2dBackward {
                    params,
                    count_include_pad,
                    input_size,
                })
            })
            .boxed(),
    );
    all.push(
        [dim(), dim()]
            .prop_map(|output_size| Op::Pool(PoolOp::AdaptiveAvgPool2d { output_size }))
            .boxed(),
    );
    all.push(
        [dim(), dim()]
            .prop_map(|output_size| Op::Pool(PoolOp::AdaptiveMaxPool2d { output_size }))
            .boxed(),
    );
    all.push(
        [dim(), dim()]
            .prop_map(|input_size| Op::Pool(PoolOp::AdaptiveAvgPool2dBackward { input_size }))
            .boxed(),
    );
    all.push(
        (any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(training, weight, bias)| {
                Op::Norm(NormOp::BatchNorm {
                    training,
                    eps: 1e-5,
                    weight,
                    bias,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), any::<bool>(), any::<bool>())
            .prop_map(|(normalized_ndim, weight, bias)| {
                Op::Norm(NormOp::LayerNorm {
                    normalized_ndim,
                    eps: 1e-5,
                    weight,
                    bias,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), any::<bool>(), any::<bool>())
            .prop_map(|(num_groups, weight, bias)| {
                Op::Norm(NormOp::GroupNorm {
                    num_groups,
                    eps: 1e-5,
                    weight,
                    bias,
                })
            })
            .boxed(),
    );
    all.push(
        (any::<bool>(), any::<bool>())
            .prop_map(|(weight, bias)| {
                Op::Norm(NormOp::InstanceNorm {
                    eps: 1e-5,
                    weight,
                    bias,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), any::<bool>())
            .prop_map(|(normalized_ndim, weight)| {
                Op::Norm(NormOp::RmsNorm {
                    normalized_ndim,
                    eps: 1e-6,
                    weight,
                })
            })
            .boxed(),
    );
    all.push(
        (prop::sample::select(vec![0.0, 0.5, 1.0]), any::<bool>())
            .prop_map(|(p, training)| Op::Dropout(DropoutOp { p, training }))
            .boxed(),
    );
    all.push(
        (
            prop::option::of(prop::sample::select(vec![0.0, 0.1, 1.0])),
            small(),
            any::<bool>(),
        )
            .prop_map(|(momentum, count, counted)| {
                Op::BatchNormUpdate(BatchNormUpdateOp {
                    momentum,
                    count,
                    counted,
                })
            })
            .boxed(),
    );
    all.push(
        prop::option::of(small())
            .prop_map(|padding_idx| Op::Embedding(EmbeddingOp { padding_idx }))
            .boxed(),
    );
    all.push(
        (dim(), prop::option::of(small()))
            .prop_map(|(num_weights, padding_idx)| {
                Op::EmbeddingBackward(EmbeddingBackwardOp {
                    num_weights,
                    padding_idx,
                })
            })
            .boxed(),
    );
    all.push(
        small()
            .prop_map(|dim| Op::Index(IndexOp::Cat { dim }))
            .boxed(),
    );
    all.push(
        small()
            .prop_map(|dim| Op::Index(IndexOp::IndexSelect { dim }))
            .boxed(),
    );
    all.push(
        small()
            .prop_map(|dim| Op::Index(IndexOp::IndexAdd { dim }))
            .boxed(),
    );
    all.push(
        small()
            .prop_map(|dim| Op::Index(IndexOp::Gather { dim }))
            .boxed(),
    );
    all.push(
        small()
            .prop_map(|dim| Op::Index(IndexOp::ScatterAdd { dim }))
            .boxed(),
    );
    all.push(
        dim()
            .prop_map(|num_classes| Op::Index(IndexOp::OneHot { num_classes }))
            .boxed(),
    );
    all.push(
        reduction()
            .prop_map(|reduction| Op::Loss(LossOp::Mse { reduction }))
            .boxed(),
    );
    all.push(
        reduction()
            .prop_map(|reduction| Op::Loss(LossOp::L1 { reduction }))
            .boxed(),
    );
    all.push(
        reduction()
            .prop_map(|reduction| Op::Loss(LossOp::Bce { reduction }))
            .boxed(),
    );
    all.push(
        (reduction(), prop::sample::select(vec![-100i64, 0, 1]))
            .prop_map(|(reduction, ignore_index)| {
                Op::Loss(LossOp::Nll {
                    reduction,
                    ignore_index,
                    label_smoothing: 0.1,
                })
            })
            .boxed(),
    );
    all.push(
        (reduction(), prop::sample::select(vec![-100i64, 0, 1]))
            .prop_map(|(reduction, ignore_index)| {
                Op::Loss(LossOp::NllBackward {
                    reduction,
                    ignore_index,
                    label_smoothing: 0.1,
                })
            })
            .boxed(),
    );
    all.push(
        (reduction(), any::<bool>())
            .prop_map(|(reduction, pos_weight)| {
                Op::Loss(LossOp::BceWithLogits {
                    reduction,
                    pos_weight,
                })
            })
            .boxed(),
    );
    all.push(
        (quant_dtype(), prop::sample::select(vec![0i64, 3, 300]))
            .prop_map(|(dtype, zero_point)| {
                Op::Quant(QuantOp::QuantizePerTensor {
                    scale: 0.1,
                    zero_point,
                    dtype,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), quant_dtype())
            .prop_map(|(axis, dtype)| Op::Quant(QuantOp::QuantizePerChannel { axis, dtype }))
            .boxed(),
    );
    all.push(
        prop::sample::select(vec![0i64, 3])
            .prop_map(|zero_point| {
                Op::Quant(QuantOp::DequantizePerTensor {
                    scale: 0.1,
                    zero_point,
                })
            })
            .boxed(),
    );
    all.push(
        small()
            .prop_map(|axis| Op::Quant(QuantOp::DequantizePerChannel { axis }))
            .boxed(),
    );
    all.push(
        (any::<bool>(), any::<bool>())
            .prop_map(|(bias, reduce_range)| {
                Op::Quant(QuantOp::LinearDynamic { bias, reduce_range })
            })
            .boxed(),
    );
    all.push(
        (any::<bool>(), any::<bool>())
            .prop_map(|(relu, bias)| {
                Op::Quant(QuantOp::Linear {
                    x_scale: 0.1,
                    x_zero_point: 3,
                    out_scale: 0.2,
                    out_zero_point: 5,
                    relu,
                    bias,
                })
            })
            .boxed(),
    );
    all.push(
        (conv_params(), any::<bool>(), any::<bool>())
            .prop_map(|(params, relu, bias)| {
                Op::Quant(QuantOp::Conv2d {
                    params,
                    x_scale: 0.1,
                    x_zero_point: 3,
                    out_scale: 0.2,
                    out_zero_point: 5,
                    relu,
                    bias,
                })
            })
            .boxed(),
    );
    all.push(
        any::<bool>()
            .prop_map(|relu| {
                Op::Quant(QuantOp::Add {
                    a_scale: 0.1,
                    a_zero_point: 3,
                    b_scale: 0.3,
                    b_zero_point: 200,
                    out_scale: 0.2,
                    out_zero_point: 5,
                    relu,
                })
            })
            .boxed(),
    );
    all.push(
        (pool_params(), [dim(), dim()], any::<bool>())
            .prop_map(|(params, output_size, adaptive)| {
                let pool = if adaptive {
                    PoolOp::AdaptiveAvgPool2d { output_size }
                } else {
                    PoolOp::AvgPool2d {
                        params,
                        count_include_pad: false,
                    }
                };
                Op::Quant(QuantOp::AvgPool {
                    pool,
                    zero_point: 37,
                })
            })
            .boxed(),
    );
    // Ranges include an empty one (`quant_min > quant_max`), which is an error.
    let range = || prop::sample::select(vec![(0i64, 255i64), (-128, 127), (5, 2)]);
    all.push(
        range()
            .prop_map(|(quant_min, quant_max)| {
                Op::FakeQuant(FakeQuantOp::PerTensor {
                    quant_min,
                    quant_max,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), range())
            .prop_map(|(axis, (quant_min, quant_max))| {
                Op::FakeQuant(FakeQuantOp::PerChannel {
                    axis,
                    quant_min,
                    quant_max,
                })
            })
            .boxed(),
    );
    all.push(
        range()
            .prop_map(|(quant_min, quant_max)| {
                Op::FakeQuant(FakeQuantOp::LearnablePerTensor {
                    quant_min,
                    quant_max,
                    grad_factor: 1.0,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), range())
            .prop_map(|(axis, (quant_min, quant_max))| {
                Op::FakeQuant(FakeQuantOp::LearnablePerChannel {
                    axis,
                    quant_min,
                    quant_max,
                    grad_factor: 0.5,
                })
            })
            .boxed(),
    );
    all.push(
        (small(), range(), any::<bool>())
            .prop_map(|(axis, (quant_min, quant_max), learnable)| {
                Op::FakeQuantBackward(if learnable {
                    FakeQuantOp::LearnablePerChannel {
                        axis,
                        quant_min,
                        quant_max,
                        grad_factor: 0.5,
                    }
                } else {
                    FakeQuantOp::PerTensor {
                        quant_min,
                        quant_max,
                    }
                })
            })
            .boxed(),
    );
    all.push(
        (any::<bool>(), any::<bool>(), any::<bool>())
            .prop_map(|(momentum, nesterov, maximize)| {
                Op::Optim(OptimOp::SgdUpdate {
                    momentum: if momentum { 0.9 } else { 0.0 },
                    dampening: 0.0,
                    weight_decay: 0.01,
                    nesterov: nesterov && momentum,
                    maximize,
                })
            })
            .boxed(),
    );
    all.push(
        Just(Op::Optim(OptimOp::AdamStepScalars {
            beta1: 0.9,
            beta2: 0.999,
        }))
        .boxed(),
    );
    all.push(
        (any::<bool>(), any::<bool>())
            .prop_map(|(amsgrad, decoupled_weight_decay)| {
                Op::Optim(OptimOp::AdamUpdate {
                    beta1: 0.9,
                    beta2: 0.999,
                    eps: 1e-8,
                    weight_decay: 0.01,
                    amsgrad,
                    maximize: false,
                    decoupled_weight_decay,
                })
            })
            .boxed(),
    );
    all
}

const DTYPES: [DType; 9] = DType::ALL;

/// The op's variant as `family.variant`. The matches have no wildcard: a new op or family
/// does not compile until it is named here, and then fails
/// `every_variant_of_the_op_table_is_generated` until [`op_strategies`] generates it.
pub fn variant(op: &Op) -> &'static str {
    match op {
        Op::Unary(u) => match u {
            UnaryOp::Neg => "unary.neg",
            UnaryOp::Abs => "unary.abs",
            UnaryOp::Sign => "unary.sign",
            UnaryOp::Exp => "unary.exp",
            UnaryOp::Log => "unary.log",
            UnaryOp::Sqrt => "unary.sqrt",
            UnaryOp::Rsqrt => "unary.rsqrt",
            UnaryOp::Sin => "unary.sin",
            UnaryOp::Cos => "unary.cos",
            UnaryOp::Tanh => "unary.tanh",
            UnaryOp::Sigmoid => "unary.sigmoid",
            UnaryOp::Relu => "unary.relu",
            UnaryOp::LeakyRelu { .. } => "unary.leaky_relu",
            UnaryOp::Gelu { .. } => "unary.gelu",
            UnaryOp::Silu => "unary.silu",
            UnaryOp::Elu { .. } => "unary.elu",
            UnaryOp::Hardswish => "unary.hardswish",
            UnaryOp::Hardsigmoid => "unary.hardsigmoid",
            UnaryOp::Relu6 => "unary.relu6",
            UnaryOp::Softplus { .. } => "unary.softplus",
        },
        Op::UnaryBackward(_) => "unary_backward",
        Op::Binary(b) => match b {
            BinaryOp::Add => "binary.add",
            BinaryOp::Sub => "binary.sub",
            BinaryOp::Mul => "binary.mul",
            BinaryOp::Div => "binary.div",
            BinaryOp::Pow => "binary.pow",
            BinaryOp::Maximum => "binary.maximum",
            BinaryOp::Minimum => "binary.minimum",
        },
        Op::Scalar(_) => "scalar",
        Op::Compare(c) => match c {
            CompareOp::Eq => "compare.eq",
            CompareOp::Ne => "compare.ne",
            CompareOp::Lt => "compare.lt",
            CompareOp::Le => "compare.le",
            CompareOp::Gt => "compare.gt",
            CompareOp::Ge => "compare.ge",
        },
        Op::Where => "where",
        Op::Clamp { .. } => "clamp",
        Op::Reduce(_) => "reduce",
        Op::Softmax { .. } => "softmax",
        Op::Matmul => "matmul",
        Op::Linear { .. } => "linear",
        Op::View(v) => match v {
            ViewOp::Reshape(_) => "view.reshape",
            ViewOp::Permute(_) => "view.permute",
            ViewOp::Narrow { .. } => "view.narrow",
            ViewOp::Expand(_) => "view.expand",
            ViewOp::Contiguous => "view.contiguous",
        },
        Op::ToDType(_) => "to_dtype",
        Op::Conv(c) => match c {
            ConvOp::Forward { .. } => "conv.forward",
            ConvOp::BackwardInput { .. } => "conv.backward_input",
            ConvOp::BackwardWeight { .. } => "conv.backward_weight",
        },
        Op::Pool(p) => match p {
            PoolOp::MaxPool2d(_) => "pool.max",
            PoolOp::MaxPool2dValues(_) => "pool.max_values",
            PoolOp::MaxPool2dBackward { .. } => "pool.max_backward",
            PoolOp::AvgPool2d { .. } => "pool.avg",
            PoolOp::AvgPool2dBackward { .. } => "pool.avg_backward",
            PoolOp::AdaptiveAvgPool2d { .. } => "pool.adaptive_avg",
            PoolOp::AdaptiveAvgPool2dBackward { .. } => "pool.adaptive_avg_backward",
            PoolOp::AdaptiveMaxPool2d { .. } => "pool.adaptive_max",
        },
        Op::Norm(n) => match n {
            NormOp::BatchNorm { .. } => "norm.batch",
            NormOp::LayerNorm { .. } => "norm.layer",
            NormOp::GroupNorm { .. } => "norm.group",
            NormOp::InstanceNorm { .. } => "norm.instance",
            NormOp::RmsNorm { .. } => "norm.rms",
        },
        Op::Dropout(_) => "dropout",
        Op::BatchNormUpdate(_) => "batch_norm_update",
        Op::Embedding(_) => "embedding",
        Op::EmbeddingBackward(_) => "embedding_backward",
        Op::Index(i) => match i {
            IndexOp::Cat { .. } => "index.cat",
            IndexOp::IndexSelect { .. } => "index.index_select",
            IndexOp::IndexAdd { .. } => "index.index_add",
            IndexOp::Gather { .. } => "index.gather",
            IndexOp::ScatterAdd { .. } => "index.scatter_add",
            IndexOp::OneHot { .. } => "index.one_hot",
        },
        Op::Loss(l) => match l {
            LossOp::Mse { .. } => "loss.mse",
            LossOp::L1 { .. } => "loss.l1",
            LossOp::Nll { .. } => "loss.nll",
            LossOp::BceWithLogits { .. } => "loss.bce_with_logits",
            LossOp::Bce { .. } => "loss.bce",
            LossOp::NllBackward { .. } => "loss.nll_backward",
        },
        Op::Quant(q) => match q {
            QuantOp::QuantizePerTensor { .. } => "quant.quantize_per_tensor",
            QuantOp::QuantizePerChannel { .. } => "quant.quantize_per_channel",
            QuantOp::DequantizePerTensor { .. } => "quant.dequantize_per_tensor",
            QuantOp::DequantizePerChannel { .. } => "quant.dequantize_per_channel",
            QuantOp::LinearDynamic { .. } => "quant.linear_dynamic",
            QuantOp::Linear { .. } => "quant.linear",
            QuantOp::Conv2d { .. } => "quant.conv2d",
            QuantOp::Add { .. } => "quant.add",
            QuantOp::AvgPool { .. } => "quant.avg_pool",
        },
        Op::FakeQuantBackward(_) => "fake_quant_backward",
        Op::FakeQuant(f) => match f {
            FakeQuantOp::PerTensor { .. } => "fake_quant.per_tensor",
            FakeQuantOp::PerChannel { .. } => "fake_quant.per_channel",
            FakeQuantOp::LearnablePerTensor { .. } => "fake_quant.learnable_per_tensor",
            FakeQuantOp::LearnablePerChannel { .. } => "fake_quant.learnable_per_channel",
        },
        Op::Optim(o) => match o {
            OptimOp::SgdUpdate { .. } => "optim.sgd_update",
            OptimOp::AdamStepScalars { .. } => "optim.adam_step_scalars",
            OptimOp::AdamUpdate { .. } => "optim.adam_update",
        },
        // A user-defined op runs the user's own meta and kernel; the tests of custom ops
        // cover the table's side of it.
        Op::Custom(_) => "custom",
    }
}

/// Every name [`variant`] gives except `custom`.
pub const VARIANTS: &[&str] = &[
    "unary.neg",
    "unary.abs",
    "unary.sign",
    "unary.exp",
    "unary.log",
    "unary.sqrt",
    "unary.rsqrt",
    "unary.sin",
    "unary.cos",
    "unary.tanh",
    "unary.sigmoid",
    "unary.relu",
    "unary.leaky_relu",
    "unary.gelu",
    "unary.silu",
    "unary.elu",
    "unary.hardswish",
    "unary.hardsigmoid",
    "unary.relu6",
    "unary.softplus",
    "unary_backward",
    "binary.add",
    "binary.sub",
    "binary.mul",
    "binary.div",
    "binary.pow",
    "binary.maximum",
    "binary.minimum",
    "scalar",
    "compare.eq",
    "compare.ne",
    "compare.lt",
    "compare.le",
    "compare.gt",
    "compare.ge",
    "where",
    "clamp",
    "reduce",
    "softmax",
    "matmul",
    "linear",
    "view.reshape",
    "view.permute",
    "view.narrow",
    "view.expand",
    "view.contiguous",
    "to_dtype",
    "conv.forward",
    "conv.backward_input",
    "conv.backward_weight",
    "pool.max",
    "pool.max_values",
    "pool.max_backward",
    "pool.avg",
    "pool.avg_backward",
    "pool.adaptive_avg",
    "pool.adaptive_avg_backward",
    "pool.adaptive_max",
    "norm.batch",
    "norm.layer",
    "norm.group",
    "norm.instance",
    "norm.rms",
    "dropout",
    "batch_norm_update",
    "embedding",
    "embedding_backward",
    "index.cat",
    "index.index_select",
    "index.index_add",
    "index.gather",
    "index.scatter_add",
    "index.one_hot",
    "loss.mse",
    "loss.l1",
    "loss.nll",
    "loss.bce_with_logits",
    "loss.bce",
    "loss.nll_backward",
    "quant.quantize_per_tensor",
    "quant.quantize_per_channel",
    "quant.dequantize_per_tensor",
    "quant.dequantize_per_channel",
    "quant.linear_dynamic",
    "quant.linear",
    "quant.conv2d",
    "quant.add",
    "quant.avg_pool",
    "fake_quant.per_tensor",
    "fake_quant.per_channel",
    "fake_quant.learnable_per_tensor",
    "fake_quant.learnable_per_channel",
    "fake_quant_backward",
    "optim.sgd_update",
    "optim.adam_step_scalars",
    "optim.adam_update",
];

/// The dtype of each input an op takes (optional inputs included when the attribute says).
pub fn input_dtypes(op: &Op) -> Vec<DType> {
    use DType::{Bool, F32, F64, I8, I64, U8};
    match op {
        Op::Unary(_) | Op::Scalar(_) | Op::Clamp { .. } | Op::Reduce(_) => vec![F32],
        Op::Softmax { .. } | Op::View(_) | Op::Dropout(_) => vec![F32],
        Op::BatchNormUpdate(u) => {
            let counter = if u.counted { vec![I64] } else { vec![] };
            [vec![F32; 4], counter].concat()
        }
        Op::ToDType(_) => vec![I64],
        Op::Binary(_) | Op::Compare(_) | Op::Matmul => vec![F32, F32],
        Op::Where => vec![Bool, F32, F32],
        Op::Linear { bias } => [vec![F32, F32], bias_input(*bias)].concat(),
        Op::Conv(ConvOp::Forward { bias, .. }) => [vec![F32, F32], bias_input(*bias)].concat(),
        Op::Conv(_) => vec![F32, F32],
        Op::Pool(PoolOp::MaxPool2dBackward { .. }) => vec![F32, I64],
        Op::Pool(_) => vec![F32],
        Op::Norm(NormOp::BatchNorm {
            training,
            weight,
            bias,
            ..
        }) => {
            let running = if *training { vec![] } else { vec![F32, F32] };
            [vec![F32], running, bias_input(*weight), bias_input(*bias)].concat()
        }
        Op::Norm(
            NormOp::LayerNorm { weight, bias, .. }
            | NormOp::GroupNorm { weight, bias, .. }
            | NormOp::InstanceNorm { weight, bias, .. },
        ) => [vec![F32], bias_input(*weight), bias_input(*bias)].concat(),
        Op::Norm(NormOp::RmsNorm { weight, .. }) => [vec![F32], bias_input(*weight)].concat(),
        Op::Embedding(_) => vec![F32, I64],
        Op::EmbeddingBackward(_) => vec![F32, I64],
        Op::UnaryBackward(_) => vec![F32, F32],
        Op::Index(IndexOp::Cat { .. }) => vec![F32, F32, F32],
        Op::Index(IndexOp::IndexSelect { .. } | IndexOp::Gather { .. }) => vec![F32, I64],
        Op::Index(IndexOp::IndexAdd { .. } | IndexOp::ScatterAdd { .. }) => vec![F32, I64, F32],
        Op::Index(IndexOp::OneHot { .. }) => vec![I64],
        Op::Loss(LossOp::Nll { .. }) => vec![F32, I64],
        Op::Loss(LossOp::NllBackward { .. }) => vec![F32, F32, I64],
        Op::Loss(LossOp::BceWithLogits { pos_weight, .. }) => {
            [vec![F32, F32], bias_input(*pos_weight)].concat()
        }
        Op::Loss(_) => vec![F32, F32],
        Op::Quant(QuantOp::QuantizePerTensor { .. }) => vec![F32],
        Op::Quant(QuantOp::QuantizePerChannel { .. }) => vec![F32, F32, I64],
        Op::Quant(QuantOp::DequantizePerTensor { .. }) => vec![U8],
        Op::Quant(QuantOp::DequantizePerChannel { .. }) => vec![I8, F32, I64],
        Op::Quant(QuantOp::LinearDynamic { bias, .. }) => {
            [vec![F32, I8, F32, I64], bias_input(*bias)].concat()
        }
        Op::Quant(QuantOp::Linear { bias, .. } | QuantOp::Conv2d { bias, .. }) => {
            [vec![U8, I8, F32, I64], bias_input(*bias)].concat()
        }
        Op::Quant(QuantOp::Add { .. }) => vec![U8, U8],
        Op::Quant(QuantOp::AvgPool { .. }) => vec![U8],
        Op::FakeQuant(FakeQuantOp::PerTensor { .. } | FakeQuantOp::PerChannel { .. }) => {
            vec![F32, F32, I64]
        }
        Op::FakeQuant(_) => vec![F32, F32, F32],
        Op::FakeQuantBackward(FakeQuantOp::PerTensor { .. } | FakeQuantOp::PerChannel { .. }) => {
            vec![F32, F32, F32, I64]
        }
        Op::FakeQuantBackward(_) => vec![F32, F32, F32, F32],
        Op::Optim(OptimOp::SgdUpdate { momentum, .. }) => {
            let buffer = if *momentum != 0.0 { vec![F32] } else { vec![] };
            [vec![F32, F32], buffer, vec![F64]].concat()
        }
        Op::Optim(OptimOp::AdamStepScalars { .. }) => vec![F32, F64],
        Op::Optim(OptimOp::AdamUpdate { amsgrad, .. }) => {
            [vec![F32; 4], bias_input(*amsgrad), vec![F64; 3]].concat()
        }
        Op::Custom(_) => vec![],
    }
}

fn bias_input(present: bool) -> Vec<DType> {
    if present { vec![DType::F32] } else { vec![] }
}

/// Shapes for `count` inputs, their dimensions drawn from one shared pool so that related
/// shapes (equal, broadcastable, matching channels) come up often.
pub fn shapes(count: usize) -> impl Strategy<Value = Vec<Vec<usize>>> {
    (
        prop::collection::vec(dim(), 4),
        prop::collection::vec(prop::collection::vec(0usize..4, 0..5), count),
    )
        .prop_map(|(pool, picks)| {
            picks
                .into_iter()
                .map(|p| p.into_iter().map(|i| pool[i]).collect())
                .collect()
        })
}

pub fn numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d))
}

/// A real input: random floats, zero indices, false conditions.
pub fn real_input(meta: &TensorMeta) -> Tensor {
    let t = if meta.dtype.is_float() {
        Tensor::randn(&meta.shape, meta.dtype)
    } else {
        Tensor::zeros(&meta.shape, meta.dtype)
    };
    t.expect("a small input tensor")
}
