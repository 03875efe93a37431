//! Compiled linears multiply by a packed `[in, out]` transpose of each constant weight,
//! derived on the first call and again only when the weight changes (the `gemm` crate would
//! otherwise repack the `[out, in]` weight on every call): the program lists one derived slot
//! per weight, one for a weight two linears share, none for a weight the program also reads
//! otherwise or one of a single row; the output equals eager, and new weights loaded
//! afterwards are transposed again without compiling.

use std::sync::Arc;
use tessera::fx::GraphModule;
use tessera::fx::trace::{LeafPolicy, trace};
use tessera::nn::layers::{Linear, ReLU};
use tessera::nn::{Call, Forward, Module, ModuleCore, ModuleExt, Parameter, Sequential};
use tessera::tensor::{DType, Tensor};
use tessera::{CompileOptions, CompiledModule, compile};
use tessera_testkit::assert_close;

/// `model` traced and compiled for `x`, with its eager output.
fn compiled<M: Module + Call<Tensor, Output = Tensor> + 'static>(
    model: Arc<M>,
    x: &Tensor,
) -> (CompiledModule, Tensor) {
    model.train(false);
    let gm = GraphModule::new(
        model.clone(),
        trace(&*model, x, LeafPolicy::default()).unwrap(),
    );
    let compiled = compile(&gm, std::slice::from_ref(x), CompileOptions::default()).unwrap();
    (compiled, model.call(x.clone()).unwrap())
}

/// The derived transposes the compiled program lists.
fn transposes(compiled: &CompiledModule) -> usize {
    compiled.kernels().matches("(transpose of %").count()
}

/// `Linear(64, 48) -> ReLU -> Linear(48, 32) -> ReLU -> Linear(32, 1) -> ReLU`: every linear
/// has an epilogue, so each is a GEMM kernel (a lone small one would run its eager kernel).
fn mlp() -> Arc<Sequential> {
    Arc::new(
        Sequential::new()
            .add(Linear::new(64, 48).unwrap())
            .add(ReLU::new())
            .add(Linear::new(48, 32).unwrap())
            .add(ReLU::new())
            .add(Linear::new(32, 1).unwrap())
            .add(ReLU::new()),
    )
}

#[test]
fn each_linear_weight_but_a_single_row_is_transposed_and_the_output_matches_eager() {
    let model = mlp();
    let x = Tensor::randn(&[40, 64], DType::F32).unwrap();
    let (compiled, expected) = compiled(model, &x);
    let kernels = compiled.kernels();
    assert_eq!(
        kernels.matches("_linear_epilogue(%").count(),
        3,
        "{kernels}"
    );
    assert_eq!(transposes(&compiled), 2, "{kernels}");
    assert!(kernels.contains("F32[64, 48] (transpose of %"), "{kernels}");
    assert!(kernels.contains("F32[48, 32] (transpose of %"), "{kernels}");
    for _ in 0..2 {
        let got = compiled.call(x.clone()).unwrap();
        assert_close(
            &got,
            &expected,
            1e-5,
            1e-5,
            "transposed weights against eager",
        );
    }
}

#[test]
fn new_weights_are_transposed_again_without_compiling() {
    let model = mlp();
    let x = Tensor::randn(&[40, 64], DType::F32).unwrap();
    let (compiled, before) = compiled(model.clone(), &x);
    crate::compiled_reload::new_weights_are_run_without_compiling(
        &compiled, &*model, &x, &before, 1e-5,
    );
}

/// `relu(linear(relu(linear(x, w)), w))`, one square weight for both (each GEMM with an
/// epilogue, so a kernel), plus `w` itself when `add`.
#[derive(Module)]
struct Shared {
    core: ModuleCore,
    weight: Parameter,
    add: bool,
}

impl Shared {
    fn new(add: bool) -> Arc<Shared> {
        let weight = Tensor::randn(&[32, 32], DType::F32)
            .unwrap()
            .mul_scalar(0.2)
            .unwrap();
        Arc::new(Shared {
            core: ModuleCore::default(),
            weight: Parameter::new(weight),
            add,
        })
    }
}

impl Forward for Shared {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> tessera::nn::Result<Tensor> {
        let w = self.weight.tensor();
        let y = x.linear(w, None)?.relu()?.linear(w, None)?.relu()?;
        Ok(if self.add { y.add(w)? } else { y })
    }
}

#[test]
fn a_weight_two_linears_share_is_transposed_once() {
    let x = Tensor::randn(&[32, 32], DType::F32).unwrap();
    let (compiled, expected) = compiled(Shared::new(false), &x);
    assert_eq!(transposes(&compiled), 1, "{}", compiled.kernels());
    let got = compiled.call(x).unwrap();
    assert_close(&got, &expected, 1e-5, 1e-5, "a shared transposed weight");
}

#[test]
fn a_weight_the_program_also_reads_otherwise_is_read_as_stored() {
    let x = Tensor::randn(&[32, 32], DType::F32).unwrap();
    let (compiled, expected) = compiled(Shared::new(true), &x);
    assert_eq!(transposes(&compiled), 0, "{}", compiled.kernels());
    let got = compiled.call(x).unwrap();
    assert_close(&got, &expected, 1e-5, 1e-5, "a weight read as stored");
}
