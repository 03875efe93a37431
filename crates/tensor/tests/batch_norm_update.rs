//! The running-statistics update of a training batch norm (`batch_norm_update`), which eager
//! batch norm applies and traced graphs return as buffer mutations: on random shapes, momenta
//! and counters, the buffers eager `batch_norm_tracked` leaves equal the update op's outputs
//! bit for bit, and both equal PyTorch's formula computed independently in f64 from the input.

use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use tessera_tensor::functional::{RunningStats, batch_norm_tracked};
use tessera_tensor::op::BatchNormUpdateOp;
use tessera_tensor::{DType, Generator, Op, Tensor};

/// PyTorch's update from the input `[n, c, inner]` itself, in f64.
fn reference(
    x: &[f64],
    (n, c, inner): (usize, usize, usize),
    running: (&[f64], &[f64]),
    momentum: Option<f64>,
    batches: i64,
) -> (Vec<f64>, Vec<f64>) {
    let factor = momentum.unwrap_or(1.0 / batches as f64);
    let count = (n * inner) as f64;
    let values =
        |ch: usize| (0..n).flat_map(move |i| (0..inner).map(move |k| x[(i * c + ch) * inner + k]));
    (0..c)
        .map(|ch| {
            let mean = values(ch).sum::<f64>() / count;
            let unbiased = values(ch).map(|v| (v - mean).powi(2)).sum::<f64>() / (count - 1.0);
            (
                (1.0 - factor) * running.0[ch] + factor * mean,
                (1.0 - factor) * running.1[ch] + factor * unbiased,
            )
        })
        .unzip()
}

fn close(actual: &[f64], expected: &[f64]) -> bool {
    actual
        .iter()
        .zip(expected)
        .all(|(a, e)| (a - e).abs() <= 1e-5 * e.abs() + 1e-6)
}

#[test]
fn eager_batch_norm_updates_its_statistics_with_the_update_op_and_pytorchs_formula() {
    let strategy = (
        1usize..4,
        1usize..5,
        1usize..7,
        prop::option::of(prop::sample::select(vec![0.1, 0.5, 1.0])),
        0i64..5,
        any::<u64>(),
    );
    let mut runner = TestRunner::new(Config::with_cases(64));
    runner
        .run(&strategy, |(n, c, inner, momentum, tracked, seed)| {
            prop_assume!(n * inner > 1);
            let mut g = Generator::new(seed);
            let x = Tensor::randn_with(&[n, c, inner], DType::F32, &mut g).unwrap();
            let mean = Tensor::randn_with(&[c], DType::F32, &mut g).unwrap();
            let var = Tensor::rand_with(&[c], DType::F32, &mut g).unwrap();
            let count = Tensor::scalar(tracked);
            let before = (mean.to_vec_f64().unwrap(), var.to_vec_f64().unwrap());
            let copy = |t: &Tensor| Tensor::from_vec(t.to_vec::<f32>().unwrap(), &[c]).unwrap();
            let (mean_0, var_0) = (copy(&mean), copy(&var));
            let running = RunningStats {
                mean: Some(&mean),
                var: Some(&var),
                num_batches_tracked: Some(&count),
            };
            batch_norm_tracked(&x, running, None, None, true, momentum, 1e-5).unwrap();
            prop_assert_eq!(count.item::<i64>().unwrap(), tracked + 1);

            // The op applied directly to the batch statistics gives the same buffers.
            let stats = Op::Norm(tessera_tensor::op::NormOp::BatchNorm {
                training: true,
                eps: 1e-5,
                weight: false,
                bias: false,
            })
            .apply(&[&x])
            .unwrap();
            let update = Op::BatchNormUpdate(BatchNormUpdateOp {
                momentum,
                count: n * inner,
                counted: true,
            });
            let direct = update
                .apply(&[
                    &stats[1],
                    &stats[2],
                    &mean_0,
                    &var_0,
                    &Tensor::scalar(tracked),
                ])
                .unwrap();
            prop_assert_eq!(
                direct[0].to_vec::<f32>().unwrap(),
                mean.to_vec::<f32>().unwrap()
            );
            prop_assert_eq!(
                direct[1].to_vec::<f32>().unwrap(),
                var.to_vec::<f32>().unwrap()
            );
            prop_assert_eq!(direct[2].item::<i64>().unwrap(), tracked + 1);

            let (want_mean, want_var) = reference(
                &x.to_vec_f64().unwrap(),
                (n, c, inner),
                (&before.0, &before.1),
                momentum,
                tracked + 1,
            );
            prop_assert!(
                close(&mean.to_vec_f64().unwrap(), &want_mean),
                "mean {:?}",
                want_mean
            );
            prop_assert!(
                close(&var.to_vec_f64().unwrap(), &want_var),
                "var {:?}",
                want_var
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn the_update_op_refuses_a_cumulative_average_without_a_counter_and_single_values() {
    let v = Tensor::zeros(&[3], DType::F32).unwrap();
    let cumulative = Op::BatchNormUpdate(BatchNormUpdateOp {
        momentum: None,
        count: 8,
        counted: false,
    });
    let err = cumulative.apply(&[&v, &v, &v, &v]).err().unwrap();
    assert!(err.to_string().contains("num_batches_tracked"), "{err}");
    let single = Op::BatchNormUpdate(BatchNormUpdateOp {
        momentum: Some(0.1),
        count: 1,
        counted: false,
    });
    let err = single.apply(&[&v, &v, &v, &v]).err().unwrap();
    assert!(
        err.to_string().contains("more than 1 value per channel"),
        "{err}"
    );
    let short = Tensor::zeros(&[2], DType::F32).unwrap();
    let update = Op::BatchNormUpdate(BatchNormUpdateOp {
        momentum: Some(0.1),
        count: 8,
        counted: false,
    });
    let err = update.apply(&[&v, &v, &short, &v]).err().unwrap();
    assert!(
        err.to_string()
            .contains("running_mean must be a vector like batch_mean"),
        "{err}"
    );
}
