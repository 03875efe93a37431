//! Dynamic batch: a model compiled at one batch runs any other with the code it compiled
//! (the compile counter does not move) and equals eager; another image size compiles once
//! and going back to a seen size compiles nothing; a batch of zero gives an empty output; a
//! graph whose kernels bake the batch compiles per batch and the report says why; the
//! kernel-IR interpreter runs the same programs as the JIT at every batch.

use std::sync::Arc;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::fx::{Graph, GraphModule};
use tessera::nn::models::SmallCnn;
use tessera::nn::{Call, Layer, Linear, ModuleExt, ReLU, Sequential};
use tessera::tensor::op::{UnaryOp, ViewOp};
use tessera::tensor::{DType, Op, Tensor, TensorMeta};
use tessera::{Backend, BatchMode, CompileOptions, CompiledModule, compile};
use tessera_testkit::assert_close;

/// `model` in eval mode, traced and compiled for `example` with `backend`.
fn compiled<M: Layer + 'static>(
    model: &Arc<M>,
    example: &Tensor,
    backend: Backend,
) -> CompiledModule {
    model.train(false);
    let traced = trace(&**model, example, LeafPolicy::default()).unwrap();
    let gm = GraphModule::new(model.clone(), traced);
    let options = CompileOptions {
        backend,
        ..CompileOptions::default()
    };
    compile(&gm, std::slice::from_ref(example), options).unwrap()
}

fn mlp() -> Arc<Sequential> {
    Arc::new(
        Sequential::new()
            .add(Linear::new(48, 32).unwrap())
            .add(ReLU::new())
            .add(Linear::new(32, 10).unwrap()),
    )
}

/// Runs `compiled` at each batch of `batches` (inputs `shape` with that leading size) and
/// checks it against `eager`; the compile counter must stay where it was.
fn runs_batches_without_compiling<M: Layer>(
    compiled: &CompiledModule,
    eager: &M,
    shape: &[usize],
    batches: &[usize],
) {
    let before = compiled.compile_count();
    for &batch in batches {
        let mut dims = shape.to_vec();
        dims[0] = batch;
        let x = Tensor::randn(&dims, DType::F32).unwrap();
        let got = compiled.call(x.clone()).unwrap();
        let want = eager.call(x).unwrap();
        assert_eq!(got.shape(), want.shape(), "batch {batch}");
        assert_close(&got, &want, 1e-5, 1e-5, &format!("batch {batch}"));
    }
    assert_eq!(
        compiled.compile_count(),
        before,
        "a new batch compiled again: {}",
        compiled.report()
    );
}

#[test]
fn small_cnn_runs_every_batch_with_the_code_compiled_at_batch_4() {
    let model = Arc::new(SmallCnn::new().unwrap());
    let example = Tensor::randn(&[4, 3, 16, 16], DType::F32).unwrap();
    let compiled = compiled(&model, &example, Backend::Jit);
    assert_eq!(compiled.compile_count(), 1);
    assert_eq!(
        compiled.report().batch,
        BatchMode::Dynamic,
        "{}",
        compiled.report()
    );
    runs_batches_without_compiling(&compiled, &*model, &[4, 3, 16, 16], &[1, 7, 64, 4]);
    // Another image size compiles once; going back to either size compiles nothing.
    runs_batches_without_compiling(&compiled, &*model, &[4, 3, 16, 16], &[2]);
    let larger = Tensor::randn(&[4, 3, 24, 24], DType::F32).unwrap();
    compiled.call(larger).unwrap();
    assert_eq!(compiled.compile_count(), 2, "{}", compiled.report());
    runs_batches_without_compiling(&compiled, &*model, &[4, 3, 24, 24], &[3, 9]);
    runs_batches_without_compiling(&compiled, &*model, &[4, 3, 16, 16], &[5, 1]);
    assert_eq!(compiled.compile_count(), 2);
}

#[test]
fn mlp_runs_every_batch_with_the_code_compiled_at_batch_4() {
    let model = mlp();
    let example = Tensor::randn(&[4, 48], DType::F32).unwrap();
    let compiled = compiled(&model, &example, Backend::Jit);
    assert_eq!(
        compiled.report().batch,
        BatchMode::Dynamic,
        "{}",
        compiled.report()
    );
    runs_batches_without_compiling(&compiled, &*model, &[4, 48], &[1, 7, 64, 300]);
    assert_eq!(compiled.compile_count(), 1);
}

#[test]
fn batch_zero_gives_an_empty_output_without_compiling() {
    let cnn = Arc::new(SmallCnn::new().unwrap());
    let compiled_cnn = compiled(
        &cnn,
        &Tensor::randn(&[4, 3, 8, 8], DType::F32).unwrap(),
        Backend::Jit,
    );
    let mlp = mlp();
    let compiled_mlp = compiled(
        &mlp,
        &Tensor::randn(&[4, 48], DType::F32).unwrap(),
        Backend::Jit,
    );
    for (compiled, shape, out) in [
        (&compiled_cnn, vec![0, 3, 8, 8], vec![0, 10]),
        (&compiled_mlp, vec![0, 48], vec![0, 10]),
    ] {
        let y = compiled
            .call(Tensor::zeros(&shape, DType::F32).unwrap())
            .unwrap();
        assert_eq!(y.shape(), out);
        assert_eq!(compiled.compile_count(), 1, "{}", compiled.report());
    }
}

#[test]
fn jit_equals_the_kernel_interpreter_at_several_batches() {
    let model = Arc::new(SmallCnn::new().unwrap());
    let example = Tensor::randn(&[4, 3, 12, 12], DType::F32).unwrap();
    let jit = compiled(&model, &example, Backend::Jit);
    let interpreted = compiled(&model, &example, Backend::Interpreter);
    assert_eq!(interpreted.report().batch, BatchMode::Dynamic);
    for batch in [1, 3, 17] {
        let x = Tensor::randn(&[batch, 3, 12, 12], DType::F32).unwrap();
        let (a, b) = (jit.call(x.clone()).unwrap(), interpreted.call(x).unwrap());
        assert_close(
            &a,
            &b,
            1e-6,
            1e-6,
            &format!("JIT vs interpreter at batch {batch}"),
        );
    }
    assert_eq!((jit.compile_count(), interpreted.compile_count()), (1, 1));
}

/// `x [B, 8] -> relu(transpose(x))`: the batch is the kernel's inner loop, whose extent the
/// code holds, so each batch compiles its own code.
fn transposed_relu() -> GraphModule {
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([4, 8], DType::F32));
    let t = g
        .call_function(Op::View(ViewOp::Permute(vec![1, 0])), &[&x])
        .unwrap();
    let y = g.call_function(Op::Unary(UnaryOp::Relu), &[&t]).unwrap();
    g.output(&[&y]).unwrap();
    GraphModule::from_graph(g)
}

#[test]
fn a_graph_whose_kernels_bake_the_batch_compiles_per_batch_and_says_why() {
    let gm = transposed_relu();
    let example = Tensor::randn(&[4, 8], DType::F32).unwrap();
    let compiled = compile(
        &gm,
        std::slice::from_ref(&example),
        CompileOptions::default(),
    )
    .unwrap();
    let BatchMode::Specialised(why) = compiled.report().batch else {
        panic!("the batch is an inner loop: {}", compiled.report());
    };
    assert!(why.contains("inner loop extents"), "{why}");
    for (batch, compiles) in [(5, 2), (6, 3), (5, 3), (4, 3)] {
        let x = Tensor::randn(&[batch, 8], DType::F32).unwrap();
        let y = compiled.run(std::slice::from_ref(&x)).unwrap().remove(0);
        let want = x.transpose(0, 1).unwrap().relu().unwrap();
        assert_close(&y, &want, 0.0, 0.0, &format!("batch {batch}"));
        assert_eq!(compiled.compile_count(), compiles, "batch {batch}");
    }
}

#[test]
fn a_reshape_mixing_the_batch_into_another_dimension_is_reported() {
    // [B, 6] -> [3, 2B]: the leading size 3 is no multiple of the batch, so it stays as traced.
    let mut g = Graph::new();
    let x = g.placeholder("x", TensorMeta::new([4, 6], DType::F32));
    let r = g
        .call_function(Op::View(ViewOp::Reshape(vec![3, 8])), &[&x])
        .unwrap();
    let y = g.call_function(Op::Unary(UnaryOp::Relu), &[&r]).unwrap();
    g.output(&[&y]).unwrap();
    let gm = GraphModule::from_graph(g);
    let example = Tensor::randn(&[4, 6], DType::F32).unwrap();
    let compiled = compile(
        &gm,
        std::slice::from_ref(&example),
        CompileOptions::default(),
    )
    .unwrap();
    let BatchMode::Specialised(why) = compiled.report().batch else {
        panic!("the reshape bakes the batch: {}", compiled.report());
    };
    assert!(
        why.contains("at batch 5") && why.contains("reshape"),
        "{why}"
    );
    let error = compiled
        .run(&[Tensor::randn(&[5, 6], DType::F32).unwrap()])
        .unwrap_err()
        .to_string();
    assert!(error.contains("reshape"), "{error}");
}
