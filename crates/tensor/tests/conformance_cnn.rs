//! PyTorch conformance of the small CNN end to end (conv, batch norm, relu, max pool,
//! adaptive average pool, flatten, linear, cross-entropy): outputs, every activation and the
//! gradients of the input and of every parameter, in eval and in train mode (cases
//! `d_cnn_eval` and `d_cnn_train`).

use crate::common;

use common::Case;
use tessera_tensor::functional as F;
use tessera_tensor::{DType, Result, Tensor, no_grad};

/// The case's model as functional calls over its state dict.
struct SmallCnn {
    p: std::collections::HashMap<String, Tensor>,
}

const PARAMS: [&str; 10] = [
    "conv1.weight",
    "conv1.bias",
    "bn1.weight",
    "bn1.bias",
    "conv2.weight",
    "conv2.bias",
    "bn2.weight",
    "bn2.bias",
    "fc.weight",
    "fc.bias",
];

impl SmallCnn {
    fn from_case(case: &Case) -> SmallCnn {
        let mut p = std::collections::HashMap::new();
        for (key, t) in &case.weights {
            let t = t.deep_clone().unwrap();
            if PARAMS.contains(&key.as_str()) {
                t.requires_grad_(true).unwrap();
            }
            p.insert(key.clone(), t);
        }
        SmallCnn { p }
    }

    fn get(&self, key: &str) -> &Tensor {
        &self.p[key]
    }

    fn bn(&self, x: &Tensor, name: &str, training: bool) -> Result<Tensor> {
        let get = |k: &str| self.get(&format!("{name}.{k}")).clone();
        F::batch_norm(
            x,
            Some(&get("running_mean")),
            Some(&get("running_var")),
            Some(&get("weight")),
            Some(&get("bias")),
            training,
            0.1,
            1e-5,
        )
    }

    /// The 3x3 convolution `name` (padding 1) with `stride`.
    fn conv(&self, x: &Tensor, name: &str, stride: [usize; 2]) -> Result<Tensor> {
        F::conv2d(
            x,
            self.get(&format!("{name}.weight")),
            Some(self.get(&format!("{name}.bias"))),
            stride,
            [1, 1],
            [1, 1],
            1,
        )
    }

    /// The forward, returning every activation by module name.
    fn forward(&self, x: &Tensor, training: bool) -> Result<Vec<(&'static str, Tensor)>> {
        let conv1 = self.conv(x, "conv1", [1, 1])?;
        let bn1 = self.bn(&conv1, "bn1", training)?;
        let relu1 = bn1.relu()?;
        let pool1 = F::max_pool2d(&relu1, [2, 2], [2, 2], [0, 0], [1, 1], false)?;
        let conv2 = self.conv(&pool1, "conv2", [2, 2])?;
        let bn2 = self.bn(&conv2, "bn2", training)?;
        let relu2 = bn2.relu()?;
        let gap = F::adaptive_avg_pool2d(&relu2, [1, 1])?;
        let flatten = gap.flatten(1, -1)?;
        let fc = flatten.linear(self.get("fc.weight"), Some(self.get("fc.bias")))?;
        Ok(vec![
            ("conv1", conv1),
            ("bn1", bn1),
            ("relu1", relu1),
            ("pool1", pool1),
            ("conv2", conv2),
            ("bn2", bn2),
            ("relu2", relu2),
            ("gap", gap),
            ("flatten", flatten),
            ("fc", fc),
        ])
    }
}

fn run_case(name: &str, training: bool) -> Result<(Case, SmallCnn)> {
    let case = Case::load(name);
    let model = SmallCnn::from_case(&case);
    let input = case
        .io("input")
        .to_dtype(DType::F32)?
        .requires_grad_(true)?;
    let acts = model.forward(&input, training)?;
    for (module, act) in &acts {
        case.check(&format!("act/{module}"), act);
    }
    let output = acts.last().expect("fc").1.clone();
    case.check("output", &output);
    let loss = F::cross_entropy(
        &output,
        &case.io("target"),
        F::CrossEntropyOptions::default(),
    )?;
    case.check("loss", &loss);
    loss.backward()?;
    case.check("grad/input", &input.grad().expect("input grad"));
    for key in PARAMS {
        case.check(
            &format!("grad/{key}"),
            &model
                .get(key)
                .grad()
                .unwrap_or_else(|| panic!("grad of {key}")),
        );
    }
    Ok((case, model))
}

#[test]
fn eval_mode_outputs_activations_and_gradients_match_pytorch() -> Result<()> {
    run_case("d_cnn_eval", false).map(drop)
}

#[test]
fn train_mode_matches_pytorch_including_running_stat_updates() -> Result<()> {
    let (case, model) = run_case("d_cnn_train", true)?;
    for key in [
        "bn1.running_mean",
        "bn1.running_var",
        "bn2.running_mean",
        "bn2.running_var",
    ] {
        case.check(&format!("after/{key}"), model.get(key));
    }
    Ok(())
}

#[test]
fn three_warm_up_passes_reproduce_the_stored_running_stats() -> Result<()> {
    let case = Case::load("d_cnn_eval");
    let model = SmallCnn::from_case(&case);
    for name in ["bn1", "bn2"] {
        model.get(&format!("{name}.running_mean")).zero_()?;
        model.get(&format!("{name}.running_var")).fill_(1.0)?;
    }
    let _guard = no_grad();
    for i in 0..3 {
        model.forward(
            &case.io(&format!("warmup_input/{i}")).to_dtype(DType::F32)?,
            true,
        )?;
    }
    for key in [
        "bn1.running_mean",
        "bn1.running_var",
        "bn2.running_mean",
        "bn2.running_var",
    ] {
        common::assert_close(model.get(key), &case.weight(key), case.rtol, case.atol, key);
    }
    Ok(())
}
