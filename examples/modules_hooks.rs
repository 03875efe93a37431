//! The PyTorch Modules note's hooks sample ported to Tessera: a forward pre-hook that changes
//! the input, a forward hook that changes the output, their removal through handles, and a
//! full backward hook that replaces the input gradients.

use tessera::nn::layers::Linear;
use tessera::nn::{Call, Module, ModuleExt, Result};
use tessera::{DType, Tensor, TensorError, manual_seed};

pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    manual_seed(1);

    // Allows for examination and modification of the input before the forward pass. Inputs
    // arrive as a slice (Python's tuple); returning `Some` replaces them.
    let forward_pre_hook = |_: &dyn Module, inputs: &[Tensor]| -> Result<Option<Vec<Tensor>>> {
        Ok(Some(vec![inputs[0].add_scalar(1.0)?]))
    };

    // Allows for examination of inputs and outputs and modification of the outputs after the
    // forward pass: a residual computation a la ResNet.
    let forward_hook =
        |_: &dyn Module, inputs: &[Tensor], outputs: &[Tensor]| -> Result<Option<Vec<Tensor>>> {
            Ok(Some(vec![outputs[0].add(&inputs[0])?]))
        };

    // Allows for examination of grad_inputs / grad_outputs and modification of the
    // grad_inputs used in the rest of the backward pass.
    let backward_hook = |grad_inputs: &[Option<Tensor>],
                         _grad_outputs: &[Option<Tensor>]|
     -> Result<Option<Vec<Option<Tensor>>>> {
        let new_grad_inputs = grad_inputs
            .iter()
            .map(|gi| {
                gi.as_ref()
                    .map(|gi| Tensor::ones_like(gi)?.mul_scalar(42.0))
                    .transpose()
            })
            .collect::<Result<Vec<_>, TensorError>>()?;
        Ok(Some(new_grad_inputs))
    };

    // Create sample module & input.
    let m = Linear::new(3, 3)?;
    let x = Tensor::randn(&[2, 3], DType::F32)?.requires_grad_(true)?;

    // ==== Demonstrate forward hooks. ====
    // Run input through module before and after adding hooks.
    println!("output with no forward hooks: {}", m.call(x.clone())?);

    // Note that the modified input results in a different output.
    let forward_pre_hook_handle = m.register_forward_pre_hook(forward_pre_hook);
    println!("output with forward pre hook: {}", m.call(x.clone())?);

    // Note the modified output.
    let forward_hook_handle = m.register_forward_hook(forward_hook);
    println!("output with both forward hooks: {}", m.call(x.clone())?);

    // Remove hooks; note that the output here matches the output before adding hooks.
    forward_pre_hook_handle.remove();
    forward_hook_handle.remove();
    println!(
        "output after removing forward hooks: {}",
        m.call(x.clone())?
    );

    // ==== Demonstrate backward hooks. ====
    m.call(x.clone())?.sum_all()?.backward()?;
    let no_hook = x.grad().ok_or("x has no gradient")?;
    println!("x.grad with no backwards hook: {no_hook}");

    // Clear gradients before running backward pass again.
    m.zero_grad(true)?;
    no_hook.zero_()?;

    m.register_full_backward_hook(backward_hook);
    m.call(x.clone())?.sum_all()?.backward()?;
    let with_hook = x.grad().ok_or("x has no gradient")?;
    println!("x.grad with backwards hook: {with_hook}");
    Ok(())
}
