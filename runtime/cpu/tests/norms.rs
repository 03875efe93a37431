//! Differential tests of the channel norms as generated kernels: group norm (channels split
//! into groups inside the kernel's frame), instance norm, eval-mode batch norm (running
//! statistics, not folded into a convolution) and training-mode batch norm (batch statistics
//! per channel, over the batch and spatial dims), each with an elementwise prologue and epilogue
//! fused, run by the eager ops, the kernel-IR interpreter and the JIT, in f32 and f64, for odd
//! shapes and transposed (non-contiguous) inputs; and the snapshot of a group norm kernel.

use crate::common;

use common::{
    Builder, check_backends, eager, kernels_text, lowered, one_kernel_agreeing, snapshots,
};
use tessera_fx::NodeId;
use tessera_tensor::op::{BinaryOp, NormOp, ScalarOp, UnaryOp};
use tessera_tensor::{DType, Op};

/// Which norm, with its affine flags.
#[derive(Debug, Clone, Copy)]
enum Norm {
    Group(usize, bool, bool),
    Instance(bool, bool),
    BatchEval(bool, bool),
    BatchTrain(bool, bool),
}

impl Norm {
    fn op(self) -> NormOp {
        match self {
            Norm::Group(num_groups, weight, bias) => NormOp::GroupNorm {
                num_groups,
                eps: 1e-5,
                weight,
                bias,
            },
            Norm::Instance(weight, bias) => NormOp::InstanceNorm {
                eps: 1e-5,
                weight,
                bias,
            },
            Norm::BatchEval(weight, bias) => NormOp::BatchNorm {
                training: false,
                eps: 1e-5,
                weight,
                bias,
            },
            Norm::BatchTrain(weight, bias) => NormOp::BatchNorm {
                training: true,
                eps: 1e-5,
                weight,
                bias,
            },
        }
    }
}

/// `x op value`.
fn scalar(b: &mut Builder, x: &NodeId, op: BinaryOp, value: f64) -> NodeId {
    b.call(
        Op::Scalar(ScalarOp {
            op,
            value,
            reversed: false,
        }),
        &[x],
    )
}

/// `relu(norm(x * 0.5 + y) + 1)` for inputs of `shape` (without `prologue`, the norm reads `x`;
/// without `epilogue`, its output is returned), `x` transposed when `strided`; `stat` also
/// returns the norm's output of that index.
fn normed(
    dtype: DType,
    shape: &[usize],
    norm: Norm,
    strided: bool,
    (prologue, epilogue): (bool, bool),
    stat: Option<usize>,
) -> Builder {
    let mut b = Builder::new(dtype, strided);
    let mut x = b.input(shape, strided);
    if prologue {
        let y = b.input(shape, false);
        let half = scalar(&mut b, &x, BinaryOp::Mul, 0.5);
        x = b.call(Op::Binary(BinaryOp::Add), &[&half, &y]);
    }
    let channels = [shape[1]];
    let mut args: Vec<NodeId> = vec![x];
    if let Norm::BatchEval(..) = norm {
        let mean = b.input(&channels, false);
        args.push(mean);
        // A variance is positive: the input's values made `|v| + 0.1`.
        args.push(b.input(&channels, false));
        let v = b.inputs.pop().unwrap();
        b.inputs.push(v.abs().unwrap().add_scalar(0.1).unwrap());
    }
    let op = norm.op();
    let (weight, bias) = match norm {
        Norm::Group(_, w, b)
        | Norm::Instance(w, b)
        | Norm::BatchEval(w, b)
        | Norm::BatchTrain(w, b) => (w, b),
    };
    if weight {
        args.push(b.input(&channels, false));
    }
    if bias {
        args.push(b.input(&channels, false));
    }
    let refs: Vec<&NodeId> = args.iter().collect();
    let n = b.graph.call_function(Op::Norm(op), &refs).unwrap();
    let mut y = b.graph.getitem(&n, 0).unwrap();
    if epilogue {
        let one = scalar(&mut b, &y, BinaryOp::Add, 1.0);
        y = b.call(Op::Unary(UnaryOp::Relu), &[&one]);
    }
    let mut outs = vec![y];
    if let Some(i) = stat {
        outs.push(b.graph.getitem(&n, i).unwrap());
    }
    let refs: Vec<&NodeId> = outs.iter().collect();
    b.graph.output(&refs).unwrap();
    b
}

/// The norm of `b` and the ops around it are generated (no fallback), and every backend agrees
/// with eager within `tol`.
fn generated_and_agreeing(b: &Builder, tol: f64) -> tessera_kernel::Program {
    let program = lowered(&b.graph, &b.inputs);
    assert!(program.fallbacks.is_empty(), "{program}");
    check_backends(&program, &b.inputs, &eager(&b.graph, &b.inputs), tol);
    program
}

fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::F64 { 1e-12 } else { 2e-5 }
}

#[test]
fn group_norm_with_prologue_and_epilogue_is_one_kernel_in_f32_and_f64() {
    for dtype in [DType::F32, DType::F64] {
        for strided in [false, true] {
            let b = normed(
                dtype,
                &[2, 6, 5, 3],
                Norm::Group(3, true, true),
                strided,
                (true, true),
                None,
            );
            let program = generated_and_agreeing(&b, tolerance(dtype));
            // The prologue's add reads `y`; its scale and the norm, relu and +1 are one kernel.
            assert_eq!(program.kernels().count(), 1, "{program}");
        }
    }
}

#[test]
fn group_norm_of_odd_shapes_groups_and_ranks_agrees() {
    let cases: [(&[usize], usize); 7] = [
        (&[1, 4, 7, 9], 1),
        (&[3, 5, 3, 1], 5),
        (&[2, 9, 11], 3),
        (&[4, 6], 2),
        (&[1, 1, 1, 1], 1),
        (&[2, 8, 1, 13], 4),
        (&[3, 12, 2, 3, 5], 6),
    ];
    for (shape, groups) in cases {
        for (weight, bias) in [(false, false), (true, false), (true, true)] {
            for dtype in [DType::F32, DType::F64] {
                let norm = Norm::Group(groups, weight, bias);
                for strided in [false, true] {
                    let b = normed(dtype, shape, norm, strided, (false, false), None);
                    generated_and_agreeing(&b, tolerance(dtype));
                }
            }
        }
    }
}

#[test]
fn group_norm_statistics_are_stored_per_image_and_group() {
    for stat in [1, 2] {
        let b = normed(
            DType::F32,
            &[3, 6, 4, 5],
            Norm::Group(2, true, true),
            true,
            (true, true),
            Some(stat),
        );
        generated_and_agreeing(&b, 2e-5);
    }
}

#[test]
fn instance_norm_is_a_reduction_over_the_spatial_dims() {
    for dtype in [DType::F32, DType::F64] {
        for (shape, affine) in [(&[2, 3, 5, 7][..], true), (&[3, 4, 9][..], false)] {
            for strided in [false, true] {
                let b = normed(
                    dtype,
                    shape,
                    Norm::Instance(affine, affine),
                    strided,
                    (true, true),
                    Some(1),
                );
                generated_and_agreeing(&b, tolerance(dtype));
            }
        }
    }
}

#[test]
fn eval_batch_norm_equals_eager_bit_for_bit() {
    let shapes: [&[usize]; 5] = [
        &[2, 3, 5, 7],
        &[4, 5],
        &[3, 2, 9],
        &[1, 7, 1, 1],
        &[2, 3, 4, 2, 3],
    ];
    for dtype in [DType::F32, DType::F64] {
        for shape in shapes {
            for (weight, bias) in [(false, false), (true, false), (false, true), (true, true)] {
                for strided in [false, true] {
                    for fused in [false, true] {
                        let norm = Norm::BatchEval(weight, bias);
                        let b = normed(dtype, shape, norm, strided, (fused, fused), None);
                        // The scale and shift are computed in f64 and rounded as eager does.
                        generated_and_agreeing(&b, 0.0);
                    }
                }
            }
        }
    }
}

#[test]
fn training_batch_norm_is_a_reduction_over_batch_and_spatial_dims_with_per_channel_statistics() {
    let shapes: [&[usize]; 4] = [&[2, 3, 5, 7], &[4, 5], &[3, 2, 9], &[2, 3, 4, 2, 3]];
    for dtype in [DType::F32, DType::F64] {
        for shape in shapes {
            for affine in [false, true] {
                for strided in [false, true] {
                    for stat in [None, Some(1), Some(2)] {
                        let norm = Norm::BatchTrain(affine, affine);
                        let b = normed(dtype, shape, norm, strided, (true, true), stat);
                        let program = generated_and_agreeing(&b, tolerance(dtype));
                        // The channel is the one output loop of the norm's kernel.
                        assert!(
                            program.kernels().any(|k| k.domain == [shape[1]]),
                            "{program}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn eval_batch_norm_with_its_epilogue_is_one_kernel_that_computes_the_affine_per_channel() {
    let norm = Norm::BatchEval(true, true);
    let b = normed(DType::F32, &[2, 8, 6, 10], norm, false, (false, true), None);
    let program = one_kernel_agreeing(&b.graph, &b.inputs, 0.0);
    let kernel = program.kernels().next().unwrap();
    // Images and channels are output loops; the plane is swept once, vectorised.
    assert_eq!(
        (kernel.domain.as_slice(), kernel.reduce.as_slice()),
        (&[2, 8][..], &[60][..]),
        "{program}"
    );
    assert_eq!(kernel.schedule.vector_width, 4, "{program}");
    let stages = tessera_kernel::Stages::of(kernel);
    assert!(
        stages.sweep_values[0]
            .iter()
            .all(|v| kernel.value(*v).ty != tessera_kernel::ScalarType::F64),
        "the f64 affine runs once per channel, outside the sweep:\n{program}"
    );
}

#[test]
fn eval_batch_norm_running_statistics_outputs_are_stored() {
    for stat in [1, 2] {
        let b = normed(
            DType::F64,
            &[2, 3, 4, 5],
            Norm::BatchEval(true, false),
            true,
            (false, false),
            Some(stat),
        );
        generated_and_agreeing(&b, 0.0);
    }
}

#[test]
fn group_norm_kernel_snapshot() {
    let b = normed(
        DType::F32,
        &[2, 6, 4, 4],
        Norm::Group(3, true, true),
        false,
        (true, true),
        None,
    );
    let program = one_kernel_agreeing_but_inputs(&b);
    snapshots().bind(|| insta::assert_snapshot!("compile_group_norm", kernels_text(&program)));
}

/// `b`'s program, which is one kernel besides the copy of nothing, agreeing with eager.
fn one_kernel_agreeing_but_inputs(b: &Builder) -> tessera_kernel::Program {
    let program = generated_and_agreeing(b, 2e-5);
    assert_eq!(program.kernels().count(), 1, "{program}");
    program
}
