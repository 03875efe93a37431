//! Random chains of elementwise, reduction and view ops (values used several times included):
//! the joint graph's gradients equal eager autograd's on the same chain.

use crate::autodiff_common;

use autodiff_common::{assert_joint_matches_eager, traced_loss};
use proptest::prelude::*;
use tessera_nn::layers::Identity;
use tessera_tensor::op::UnaryOp;
use tessera_tensor::{DType, Generator, Result, Tensor, TensorMeta};

/// One link of a chain; every link maps a `[2, 3]` value to a `[2, 3]` value.
#[derive(Debug, Clone)]
enum Link {
    Unary(UnaryOp),
    MulW,
    AddW,
    Scale(f64),
    /// `x * x`: one value used twice.
    Square,
    /// A sum or mean over `dim`, broadcast back.
    Reduce {
        dim: usize,
        mean: bool,
    },
    /// Transposed, made contiguous, reshaped and back.
    Shuffle,
    /// Column 0 and columns 1.. narrowed apart and joined again in the other order.
    Rotate,
    Softmax {
        dim: usize,
        log: bool,
    },
}

fn link() -> impl Strategy<Value = Link> {
    let unary = prop::sample::select(vec![
        UnaryOp::Tanh,
        UnaryOp::Sigmoid,
        UnaryOp::Sin,
        UnaryOp::Neg,
        UnaryOp::Silu,
        UnaryOp::Gelu { tanh: false },
        UnaryOp::Softplus {
            beta: 1.0,
            threshold: 20.0,
        },
    ]);
    prop_oneof![
        unary.prop_map(Link::Unary),
        Just(Link::MulW),
        Just(Link::AddW),
        (-2.0f64..2.0).prop_map(Link::Scale),
        Just(Link::Square),
        (0usize..2, any::<bool>()).prop_map(|(dim, mean)| Link::Reduce { dim, mean }),
        Just(Link::Shuffle),
        Just(Link::Rotate),
        (0usize..2, any::<bool>()).prop_map(|(dim, log)| Link::Softmax { dim, log }),
    ]
}

fn apply(link: &Link, x: &Tensor, w: &Tensor) -> Result<Tensor> {
    match link {
        Link::Unary(u) => tessera_tensor::Op::Unary(*u).apply1(&[x]),
        Link::MulW => x.mul(w),
        Link::AddW => x.add(w),
        Link::Scale(s) => x.mul_scalar(*s),
        Link::Square => x.mul(x),
        Link::Reduce { dim, mean } => {
            let r = if *mean {
                x.mean_dims(&[*dim], true)?
            } else {
                x.sum_dims(&[*dim], true)?
            };
            r.expand(&[2, 3])
        }
        Link::Shuffle => x
            .transpose(0, 1)?
            .contiguous()?
            .reshape(&[2, 3])?
            .reshape(&[3, 2])?
            .transpose(0, 1),
        Link::Rotate => Tensor::cat(&[&x.narrow(1, 1, 2)?, &x.narrow(1, 0, 1)?], 1),
        Link::Softmax { dim, log } => tessera_tensor::Op::Softmax {
            dim: *dim,
            log: *log,
        }
        .apply1(&[x]),
    }
}

fn run(chain: &[Link], x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let mut v = x.clone();
    for link in chain {
        v = apply(link, &v, w)?;
    }
    v.sum_all()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_chains_differentiate_as_eager(chain in prop::collection::vec(link(), 1..7), seed in 0u64..1000) {
        let root = Identity::new();
        let mut generator = Generator::new(seed);
        let x = Tensor::randn_with(&[2, 3], DType::F64, &mut generator).unwrap();
        let w = Tensor::randn_with(&[3], DType::F64, &mut generator).unwrap();
        let inputs = [
            ("x", TensorMeta::new([2, 3], DType::F64)),
            ("w", TensorMeta::new([3], DType::F64)),
        ];
        let traced = traced_loss(&root, &inputs, |t| Ok(vec![run(&chain, &t[0], &t[1])?]));
        assert_joint_matches_eager(
            &root,
            &traced,
            &["x", "w"],
            &["x", "w"],
            &[x, w],
            |t| run(&chain, &t[0], &t[1]).unwrap(),
            (1e-10, 1e-12),
        );
    }
}
