//! The PyTorch Modules note's sections on training and state ported to Tessera: the loop
//! that teaches Net to output zero, training vs evaluation mode (ModalModule), buffers
//! (RunningMean), everything a module can register (StatefulModule), saving and loading
//! state dicts, dtype and device moves, and building layers on a dtype or without init.
//!
//! Net and StatefulModule are the note's, defined once in `tessera::nn::models::note`
//! (crates/nn/src/models/note.rs); the modules only this part of the note uses are here.

use tessera::nn::layers::{Linear, LinearOptions};
use tessera::nn::models::note::{Net, StatefulModule};
use tessera::nn::optim::{Optimizer, SGD, SgdOptions};
use tessera::nn::{
    Call, Forward, Module, ModuleCore, ModuleExt, Result, StateDict, init, load_pt_state_dict,
    save_pt_state_dict,
};
use tessera::{DType, Device, Tensor, manual_seed, no_grad};

// ----- Training and Evaluation Mode -----

/// Adds a constant only in training mode; in evaluation mode it returns its input.
#[derive(Module)]
struct ModalModule {
    core: ModuleCore,
}

impl Forward for ModalModule {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        if self.is_training() {
            Ok(x.add_scalar(1.0)?)
        } else {
            Ok(x)
        }
    }
}

// ----- Module State -----

/// A running mean of its inputs, kept in a persistent buffer: state that is saved and moved
/// with the module but is not learnt.
#[derive(Module)]
struct RunningMean {
    core: ModuleCore,
    #[module(skip)]
    momentum: f64,
    #[module(buffer)]
    mean: Tensor,
}

impl RunningMean {
    fn new(num_features: usize, momentum: f64) -> Result<RunningMean> {
        Ok(RunningMean {
            core: ModuleCore::default(),
            momentum,
            mean: Tensor::zeros(&[num_features], DType::F32)?,
        })
    }
}

impl Forward for RunningMean {
    type Output = Tensor;
    fn forward(&self, x: Tensor) -> Result<Tensor> {
        // PyTorch rebinds `self.mean`; a Tessera buffer is updated in place, which every
        // holder of the handle (the state dict included) sees.
        let _guard = no_grad();
        let updated = self
            .mean
            .mul_scalar(self.momentum)?
            .add(&x.mul_scalar(1.0 - self.momentum)?)?;
        self.mean.copy_(&updated)?;
        Ok(self.mean.clone())
    }
}

/// Prints a state dict the way Python prints an `OrderedDict`, continuation lines of a
/// tensor aligned under its first row.
fn print_state_dict(state: &StateDict) {
    const OPEN: &str = "OrderedDict([";
    let margin = " ".repeat(OPEN.len());
    let entries: Vec<String> = state
        .iter()
        .map(|(k, t)| {
            let head = format!("('{k}', ");
            let indent = format!("\n{margin}{}", " ".repeat(head.len()));
            format!("{head}{})", t.to_string().replace('\n', &indent))
        })
        .collect();
    println!("{OPEN}{}])", entries.join(&format!(",\n{margin}")));
}

fn section(title: &str) {
    println!("\n===== {title} =====");
}

pub(crate) fn main() -> Result<(), Box<dyn std::error::Error>> {
    manual_seed(0);

    section("Neural Network Training with Modules");
    let net = Net::new()?;
    let params = net.parameter_tensors();
    let options = SgdOptions {
        lr: 1e-4,
        weight_decay: 1e-2,
        momentum: 0.9,
        ..Default::default()
    };
    let mut optimizer = SGD::new(params, options)?;
    println!(
        "teaching Net to output zero: 10000 steps of SGD(lr=1e-4, weight_decay=1e-2, momentum=0.9)"
    );
    let mut recent = Vec::new();
    for step in 0..10000 {
        let input = Tensor::randn(&[4], DType::F32)?;
        let output = net.call(input)?;
        let loss = output.abs()?;
        net.zero_grad(true)?;
        loss.backward()?;
        optimizer.step()?;
        let loss = loss.item::<f64>()?;
        recent.push(loss);
        if (step + 1) % 2000 == 0 {
            let mean = recent.iter().sum::<f64>() / recent.len() as f64;
            println!(
                "step {:>5}: mean |output| over the last 2000 steps {mean:.5}",
                step + 1
            );
            recent.clear();
        }
    }
    net.eval();
    let output = {
        let _guard = no_grad();
        net.call(Tensor::randn(&[4], DType::F32)?)?
    };
    println!(">>> net(torch.randn(4))  # near zero after training\n{output}");
    println!(">>> print(net.l1.weight)\n{}", net.l1.weight);

    section("Training and Evaluation Mode");
    let m = ModalModule {
        core: ModuleCore::default(),
    };
    let x = Tensor::randn(&[4], DType::F32)?;
    println!("training mode output: {}", m.call(x.clone())?);
    m.eval();
    println!("evaluation mode output: {}", m.call(x)?);

    section("Module State: buffers");
    let mut m = RunningMean::new(4, 0.9)?;
    for _ in 0..10 {
        m.call(Tensor::randn(&[4], DType::F32)?)?;
    }
    println!(">>> print(m)\n{}", m.repr());
    println!(">>> print(m.state_dict())");
    print_state_dict(&m.state_dict()?);
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("mean.pt");
    save_pt_state_dict(&m.state_dict()?, &path)?;
    let m_loaded = RunningMean::new(4, 0.9)?;
    m_loaded.load_state_dict(&load_pt_state_dict(&path)?, true, false)?;
    assert_eq!(m.mean.to_vec::<f32>()?, m_loaded.mean.to_vec::<f32>()?);
    println!("saved to mean.pt and loaded into a fresh RunningMean: the means are equal");

    println!(">>> m.register_buffer('unserialized_thing', torch.randn(5), persistent=False)");
    m.register_buffer(
        "unserialized_thing",
        Some(Tensor::randn(&[5], DType::F32)?),
        false,
    )?;
    println!(">>> for buffer in m.named_buffers(): print(buffer)");
    for (name, buffer) in m.named_buffers() {
        println!("('{name}', {buffer})");
    }
    println!(
        "state_dict keys: {:?}  # the non-persistent buffer is left out",
        m.state_dict()?.keys().collect::<Vec<_>>()
    );
    println!(">>> m.to(device='cuda', dtype=torch.float64)");
    m.to_dtype(DType::F64)?;
    match m.to_device(Device::Cuda(0)) {
        Ok(()) => println!("moved to cuda:0"),
        Err(e) => println!("not moved, staying on the CPU: {e}"),
    }
    println!(">>> m.mean\n{}", m.mean);

    section("Module State: StatefulModule");
    let m = StatefulModule::new()?;
    println!(">>> for p in m.named_parameters(): print(p)");
    for (name, p) in m.named_parameters() {
        println!("('{name}', shape {:?})", p.shape());
    }
    println!(">>> for b in m.named_buffers(): print(b)");
    for (name, b) in m.named_buffers() {
        println!("('{name}', shape {:?})", b.shape());
    }
    let path = dir.path().join("state.pt");
    save_pt_state_dict(&m.state_dict()?, &path)?;
    let m_loaded = StatefulModule::new()?;
    let keys = m_loaded.load_state_dict(&load_pt_state_dict(&path)?, true, false)?;
    println!(">>> m_loaded.load_state_dict(torch.load('state.pt'))\n{keys}");
    println!(
        "# buffer2 (non-persistent), param3 and buffer3 (reserved None) are not in the state dict"
    );
    println!(">>> print(m_loaded.state_dict())");
    print_state_dict(&m_loaded.state_dict()?);

    section("Module Initialization");
    println!(">>> m = nn.Linear(5, 3, device='cuda')");
    match Linear::with_options(5, 3, LinearOptions::default().device(Device::Cuda(0))) {
        Ok(m) => println!("{}", m.repr()),
        Err(e) => println!("not built: {e}"),
    }
    println!(">>> m = nn.Linear(5, 3, dtype=torch.half)");
    let m = Linear::with_options(5, 3, LinearOptions::default().dtype(DType::F16))?;
    println!("{}", m.weight);
    println!(">>> m = torch.nn.utils.skip_init(nn.Linear, 5, 3)");
    let m = init::skip_init(|| Linear::new(5, 3))?;
    println!("{}", m.weight);
    println!(">>> nn.init.orthogonal_(m.weight)");
    init::orthogonal_(&m.weight, 1.0, None)?;
    println!("{}", m.weight);
    let gram = m.weight.matmul(&m.weight.t()?)?;
    println!(
        ">>> m.weight @ m.weight.T  # orthonormal rows\n{}",
        gram.detach()
    );
    println!("(the note's device='meta' has no Tessera counterpart: devices are CPU and CUDA)");
    Ok(())
}
