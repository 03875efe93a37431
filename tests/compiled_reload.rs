//! What the compiled-module tests share: new weights loaded into a compiled module after its
//! first call are what its next call runs, without compiling again.

use tessera::nn::{Call, Module, ModuleExt};
use tessera::tensor::Tensor;
use tessera::{CompiledModule, nn::StateDict};
use tessera_testkit::assert_close;

/// Loads new weights into `compiled` (compiled from `model`, whose parameters it shares),
/// copied into the existing storage (a new version) and then as new storage, and checks after
/// each that its output on `x` equals `model`'s within `tol`, that the output moved from
/// `before` (the output with the old weights) and that nothing was compiled again.
/// The new weights are derived from the model's own (not drawn from the global generator,
/// which tests running in parallel reseed).
pub fn new_weights_are_run_without_compiling<M>(
    compiled: &CompiledModule,
    model: &M,
    x: &Tensor,
    before: &Tensor,
    tol: f64,
) where
    M: Module + Call<Tensor, Output = Tensor>,
{
    let state: StateDict = model
        .state_dict()
        .unwrap()
        .entries
        .into_iter()
        .map(|(name, t)| (name, t.mul_scalar(-1.5).unwrap().add_scalar(0.01).unwrap()))
        .collect();
    for assign in [false, true] {
        compiled.load_state_dict(&state, true, assign).unwrap();
        let expected = model.call(x.clone()).unwrap();
        let got = compiled.call(x.clone()).unwrap();
        let what = format!("after loading new weights (assign {assign})");
        assert_close(&got, &expected, tol, tol, &what);
        let moved = got
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(&before.to_vec::<f32>().unwrap())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(moved > 1e-3, "the output did not change");
    }
    assert_eq!(compiled.compile_count(), 1);
}
