//! The PyTorch Modules note's first sections ported to Tessera: a custom module (MyLinear),
//! modules as building blocks (Sequential, Net, BigNet, DynamicNet), moving a module to
//! another dtype or device, and re-initialising parameters with `apply`.
//!
//! The note's modules are defined once, in `tessera::nn::models::note`
//! (crates/nn/src/models/note.rs): read them there next to this file. The conformance tests
//! check the same definitions against PyTorch.

use tessera::nn::layers::{Linear, ReLU};
use tessera::nn::models::note::{BigNet, DynamicNet, MyLinear, Net};
use tessera::nn::{Call, Module, ModuleExt, NnError, Result, Sequential, init};
use tessera::{DType, Device, Tensor, manual_seed, no_grad};

/// Prints `(name, item)` pairs the way Python prints the tuples the note iterates over.
fn print_named<T: std::fmt::Display>(items: impl IntoIterator<Item = (String, T)>) {
    for (name, item) in items {
        println!("('{name}', {item})");
    }
}

fn section(title: &str) {
    println!("\n===== {title} =====");
}

pub(crate) fn main() -> Result<()> {
    manual_seed(0);

    section("A Simple Custom Module");
    let m = MyLinear::new(4, 3)?;
    let sample_input = Tensor::randn(&[4], DType::F32)?;
    println!(">>> m(sample_input)\n{}", m.call(sample_input)?);
    println!(">>> for parameter in m.named_parameters(): print(parameter)");
    print_named(m.named_parameters());

    section("Modules as Building Blocks: Sequential");
    let net = Sequential::new()
        .add(MyLinear::new(4, 3)?)
        .add(ReLU::new())
        .add(MyLinear::new(3, 1)?);
    let sample_input = Tensor::randn(&[4], DType::F32)?;
    println!(">>> print(net)\n{}", net.repr());
    println!(">>> net(sample_input)\n{}", net.call(sample_input)?);

    section("Modules as Building Blocks: Net and BigNet");
    let net = Net::new()?;
    println!(">>> for child in net.named_children(): print(child)");
    print_named(net.named_children().into_iter().map(|(n, c)| (n, c.repr())));
    let big_net = BigNet::new()?;
    println!(">>> for module in big_net.named_modules(): print(module)");
    print_named(
        big_net
            .named_modules()
            .into_iter()
            .map(|(n, c)| (n, c.repr())),
    );
    println!(">>> [p.shape for p in big_net.parameters()]");
    let shapes: Vec<Vec<usize>> = big_net.parameters().iter().map(|p| p.shape()).collect();
    println!("{shapes:?}");
    println!(
        ">>> big_net(torch.randn(5))\n{}",
        big_net.call(Tensor::randn(&[5], DType::F32)?)?
    );

    section("Modules as Building Blocks: DynamicNet");
    let dynamic_net = DynamicNet::new(3)?;
    println!(">>> print(dynamic_net)\n{}", dynamic_net.repr());
    let sample_input = Tensor::randn(&[4], DType::F32)?;
    println!(
        ">>> dynamic_net(sample_input, 'relu')\n{}",
        dynamic_net.call((sample_input.clone(), "relu"))?
    );
    println!(
        ">>> dynamic_net(sample_input, 'lrelu')\n{}",
        dynamic_net.call((sample_input, "lrelu"))?
    );
    println!(">>> for parameter in dynamic_net.named_parameters(): print(parameter)");
    print_named(dynamic_net.named_parameters());

    section("Moving a module: to(device=...), to(dtype=...)");
    println!(">>> dynamic_net.to(device='cuda')");
    match dynamic_net.to_device(Device::Cuda(0)) {
        Ok(()) => println!("moved to cuda:0"),
        Err(e) => println!("not moved, staying on the CPU: {e}"),
    }
    println!(">>> dynamic_net.to(dtype=torch.float64)");
    dynamic_net.to_dtype(DType::F64)?;
    println!(
        ">>> dynamic_net(torch.randn(5, 4, dtype=torch.float64), 'relu')\n{}",
        dynamic_net.call((Tensor::randn(&[5, 4], DType::F64)?, "relu"))?
    );

    section("Re-initialising parameters with apply");
    // The note's `init_weights` runs under `@torch.no_grad()`; Tessera's initialisers write
    // under `no_grad()` themselves, and `apply`'s closure cannot return an error, so the
    // first one is kept and reported afterwards.
    let mut failure: Option<NnError> = None;
    let mut reinitialised = Vec::new();
    let mut init_weights = |m: &dyn Module| {
        let result = if let Some(linear) = m.as_any().downcast_ref::<Linear>() {
            reinitialised.push("Linear");
            init::xavier_normal_(&linear.weight, 1.0, None).and_then(|()| match &linear.bias {
                Some(bias) => init::zeros_(bias),
                None => Ok(()),
            })
        } else if let Some(linear) = m.as_any().downcast_ref::<MyLinear>() {
            reinitialised.push("MyLinear");
            init::xavier_normal_(&linear.weight, 1.0, None).and_then(|()| {
                let _guard = no_grad();
                linear.bias.fill_(0.0)?;
                Ok(())
            })
        } else {
            Ok(())
        };
        if let Err(e) = result {
            failure.get_or_insert(e);
        }
    };
    println!(">>> dynamic_net.apply(init_weights)");
    dynamic_net.apply(&mut init_weights);
    if let Some(e) = failure {
        return Err(e);
    }
    println!(
        "re-initialised {} modules: {reinitialised:?}",
        reinitialised.len()
    );
    println!(">>> dynamic_net.final.weight, dynamic_net.final.bias");
    println!(
        "{}\n{}",
        dynamic_net.r#final.weight, dynamic_net.r#final.bias
    );
    Ok(())
}
