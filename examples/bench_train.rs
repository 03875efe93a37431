//! The training workloads of `examples/bench.rs` as compiled steps (`tessera::compile_train_step`):
//! the baseline MLP's SGD step (`mlp_train_b256_compiled`, against `mlp_train_b256_nn`), the shapes
//! CNN's step eager and compiled (`cnn_train_b64_eager`, `cnn_train_b64_compiled`), and the cold
//! compile time of the MLP step (`compile_mlp_train_ms`: trace, backward, first call).

use crate::bench_compiled::mlp;
use crate::shapes_net::ShapesNet;
use crate::{Workload, nn_err};
use std::sync::Arc;
use tessera::datasets::{CLASSES, SIDE};
use tessera::functional as F;
use tessera::nn::optim::{Optimizer, SGD, SgdOptions};
use tessera::nn::{Call, Layer, ModuleExt};
use tessera::{CompileOptions, DType, Generator, Result, Tensor, compile_train_step};

/// The baseline's optimizer: SGD, lr 0.01, momentum 0.9.
fn sgd(model: &dyn tessera::nn::Module) -> Result<SGD> {
    let options = SgdOptions {
        lr: 0.01,
        momentum: 0.9,
        ..Default::default()
    };
    SGD::new(model.parameter_tensors(), options).map_err(nn_err)
}

fn cross_entropy(logits: &Tensor, target: &Tensor) -> tessera::nn::Result<Tensor> {
    Ok(F::cross_entropy(logits, target, Default::default())?)
}

fn compile_err(e: tessera::CompileError) -> tessera::TensorError {
    tessera::TensorError::Autograd(format!("compile_train_step: {e}"))
}

/// A workload running `model`'s training step on `(x, y)` compiled.
fn compiled_step<M: Layer + 'static>(
    model: M,
    x: Tensor,
    y: Tensor,
) -> Result<Box<dyn FnMut() -> Result<()>>> {
    let model = Arc::new(model);
    model.train(true);
    let opt = sgd(&*model)?;
    let mut step = compile_train_step(
        model,
        cross_entropy,
        opt,
        (&x, &y),
        CompileOptions::default(),
    )
    .map_err(compile_err)?;
    Ok(Box::new(move || {
        step.step(&x, &y).map(drop).map_err(compile_err)
    }))
}

/// A workload running `model`'s training step on `(x, y)` eagerly.
fn eager_step<M: Layer + 'static>(
    model: M,
    x: Tensor,
    y: Tensor,
) -> Result<Box<dyn FnMut() -> Result<()>>> {
    model.train(true);
    let mut opt = sgd(&model)?;
    Ok(Box::new(move || {
        opt.zero_grad(true);
        let loss = cross_entropy(&model.call(x.clone()).map_err(nn_err)?, &y).map_err(nn_err)?;
        loss.backward()?;
        opt.step().map_err(nn_err)
    }))
}

fn mlp_batch(g: &mut Generator) -> Result<(Tensor, Tensor)> {
    Ok((
        Tensor::randn_with(&[256, 784], DType::F32, g)?,
        Tensor::randint_with(0, 10, &[256], DType::I64, g)?,
    ))
}

fn shapes_batch(g: &mut Generator) -> Result<(Tensor, Tensor)> {
    Ok((
        Tensor::randn_with(&[64, 1, SIDE, SIDE], DType::F32, g)?,
        Tensor::randint_with(0, CLASSES.len() as i64, &[64], DType::I64, g)?,
    ))
}

pub const WORKLOADS: [Workload; 4] = [
    ("mlp_train_b256_compiled", |g| {
        let (x, y) = mlp_batch(g)?;
        compiled_step(mlp()?, x, y)
    }),
    ("cnn_train_b64_eager", |g| {
        let (x, y) = shapes_batch(g)?;
        eager_step(ShapesNet::new().map_err(nn_err)?, x, y)
    }),
    ("cnn_train_b64_compiled", |g| {
        let (x, y) = shapes_batch(g)?;
        compiled_step(ShapesNet::new().map_err(nn_err)?, x, y)
    }),
    ("compile_mlp_train_ms", |g| {
        let (x, y) = mlp_batch(g)?;
        Ok(Box::new(move || {
            // Trace, derive the backward, then the first call compiles (and runs) the step
            // with the model's own optimizer (one over another model's parameters would record
            // no update).
            let model = Arc::new(mlp()?);
            let opt = sgd(&*model)?;
            let mut step = compile_train_step(
                model,
                cross_entropy,
                opt,
                (&x, &y),
                CompileOptions::default(),
            )
            .map_err(compile_err)?;
            step.step(&x, &y).map(drop).map_err(compile_err)
        }))
    }),
];
