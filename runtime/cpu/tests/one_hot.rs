//! `one_hot` as one generated kernel: the interpreter's and the JIT's i64 results equal the
//! eager kernel's, for classes of any rank and layout; a class outside `0..num_classes` fails
//! both runners with `IndexOutOfRange` (eager fails the op), also with zero classes (an empty
//! output, the classes checked by a check kernel); u8, i8 and i32 classes are read in their
//! own type and widened (zero classes of those run the eager kernel).

use crate::common;

use common::{faults, lowered, lowered_agreeing, op_graph};
use tessera_kernel::ScalarType;
use tessera_tensor::op::IndexOp;
use tessera_tensor::{DType, Op, Tensor};

fn one_hot(num_classes: usize) -> Op {
    Op::Index(IndexOp::OneHot { num_classes })
}

fn classes(values: &[i64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(values.to_vec(), shape).unwrap()
}

#[test]
fn one_hot_of_classes_of_any_rank_and_layout_equals_eager() {
    let program = lowered_agreeing(one_hot(5), &[classes(&[0, 4, 2, 2, 1, 3], &[6])], 0.0);
    assert_eq!(program.kernels().count(), 1, "{program}");
    let kernel = program.kernels().next().unwrap();
    assert_eq!(kernel.buffers.last().unwrap().ty, ScalarType::I64);
    lowered_agreeing(one_hot(7), &[classes(&[3], &[])], 0.0);
    lowered_agreeing(one_hot(3), &[classes(&[], &[0, 2])], 0.0);
    // Read transposed, in place.
    let t = classes(&[0, 1, 2, 2, 1, 0, 1, 1, 0, 2, 0, 1], &[3, 4])
        .t()
        .unwrap();
    lowered_agreeing(one_hot(3), &[t], 0.0);
}

#[test]
fn a_class_outside_the_classes_fails_with_the_class_and_the_count() {
    faults(one_hot(4), &[classes(&[1, 4, 0], &[3])], 4, 4);
    faults(one_hot(4), &[classes(&[1, 2, -1, 0], &[2, 2])], -1, 4);
}

#[test]
fn classes_of_narrow_integer_dtypes_are_read_in_their_own_type() {
    for dtype in [DType::U8, DType::I8, DType::I32] {
        let x = classes(&[1, 0, 2, 2, 0, 1], &[2, 3])
            .to_dtype(dtype)
            .unwrap();
        let program = lowered_agreeing(one_hot(3), std::slice::from_ref(&x), 0.0);
        assert_eq!(program.kernels().count(), 1, "{program}");
        lowered_agreeing(one_hot(3), &[x.t().unwrap()], 0.0);
    }
    let x = classes(&[1, 3, 0], &[3]).to_dtype(DType::U8).unwrap();
    faults(one_hot(3), &[x], 3, 3);
    let x = classes(&[1, -2, 0], &[3]).to_dtype(DType::I8).unwrap();
    faults(one_hot(3), &[x], -2, 3);
    // Zero classes of a narrow dtype run the eager kernel (the check kernel reads i64).
    let inputs = [Tensor::from_vec(Vec::<u8>::new(), &[0]).unwrap()];
    let program = lowered(&op_graph(one_hot(0), &inputs), &inputs);
    assert_eq!(program.fallbacks.len(), 1, "{program}");
}

#[test]
fn zero_classes_give_an_empty_output_and_check_every_class_as_eager_does() {
    for x in [classes(&[], &[0]), classes(&[], &[2, 0])] {
        let program = lowered_agreeing(one_hot(0), &[x], 0.0);
        assert_eq!(
            program.kernels().count(),
            2,
            "a check and the empty output\n{program}"
        );
    }
    faults(one_hot(0), &[classes(&[3], &[1])], 3, 0);
}
