//! Gradient checks with the default tolerances, for the tests that compare autograd against
//! finite differences.

use tessera_tensor::{GradcheckOptions, Result, Tensor, gradcheck};

/// A named tensor method of one input, checked by [`check_unary_methods`].
pub type UnaryMethod = (&'static str, fn(&Tensor) -> Result<Tensor>);

/// Asserts `f`'s gradients at `inputs` match finite differences.
pub fn check(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: &[Tensor]) {
    gradcheck(f, inputs, GradcheckOptions::default()).unwrap();
}

/// Asserts each method's gradient at `x` matches finite differences, naming the one that does
/// not.
pub fn check_unary_methods(x: &Tensor, methods: &[UnaryMethod]) {
    for (name, f) in methods {
        gradcheck(
            |i| f(&i[0]),
            std::slice::from_ref(x),
            GradcheckOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    }
}
