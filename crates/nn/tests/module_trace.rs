//! Module calls seen by a tracing recorder: leaves are recorded once with their paths and
//! their inner ops are not; non-leaves are traced through.

use std::sync::{Arc, Mutex};
use tessera_nn::layers::{Linear, ReLU};
use tessera_nn::module_trace::{ModuleCallRecorder, with_module_recorder};
use tessera_nn::{Call, Module, Result, Sequential};
use tessera_tensor::trace::{TraceRecorder, with_recorder};
use tessera_tensor::{DType, Op, Tensor};

#[derive(Default)]
struct Log(Mutex<Vec<String>>);

impl ModuleCallRecorder for Log {
    fn is_leaf(&self, module: &dyn Module, _path: &str) -> bool {
        module.type_name() == "Linear"
    }
    fn record_call(
        &self,
        module: &dyn Module,
        path: &str,
        inputs: &[Tensor],
        outputs: &[Tensor],
    ) -> Result<()> {
        self.0.lock().unwrap().push(format!(
            "module {path}: {} {:?} -> {:?}",
            module.type_name(),
            inputs[0].shape(),
            outputs[0].shape()
        ));
        Ok(())
    }
}

impl TraceRecorder for Log {
    fn record(
        &self,
        op: &Op,
        _inputs: &[&Tensor],
        outputs: &[Tensor],
    ) -> tessera_tensor::Result<()> {
        self.0
            .lock()
            .unwrap()
            .push(format!("op {}: {:?}", op.name(), outputs[0].shape()));
        Ok(())
    }
}

#[test]
fn leaves_are_recorded_once_and_others_are_traced_through() -> Result<()> {
    let seq = Sequential::new()
        .add(Linear::new(4, 3)?)
        .add(ReLU::new())
        .add(Linear::new(3, 2)?);
    let log = Arc::new(Log::default());
    let out = with_module_recorder(log.clone(), || {
        with_recorder(log.clone(), || {
            seq.call(Tensor::new_meta(&[5, 4], DType::F32))
        })
    })?;
    assert_eq!(out.shape(), vec![5, 2]);
    assert_eq!(
        *log.0.lock().unwrap(),
        [
            "module 0: Linear [5, 4] -> [5, 3]",
            "op relu: [5, 3]",
            "module 2: Linear [5, 3] -> [5, 2]"
        ]
    );
    Ok(())
}

#[test]
fn real_inputs_are_not_recorded() -> Result<()> {
    let seq = Sequential::new().add(Linear::new(4, 3)?);
    let log = Arc::new(Log::default());
    with_module_recorder(log.clone(), || {
        seq.call(Tensor::ones(&[1, 4], DType::F32).unwrap())
    })?;
    assert!(log.0.lock().unwrap().is_empty());
    Ok(())
}

#[test]
fn as_layer_finds_one_tensor_modules_only() -> Result<()> {
    use tessera_nn::layers::CrossEntropyLoss;
    use tessera_nn::{ModuleCore, models::SmallCnn};
    #[derive(Module)]
    struct NoForward {
        core: ModuleCore,
    }
    assert!(Linear::new(2, 2)?.as_layer().is_some());
    assert!(SmallCnn::new()?.as_layer().is_some());
    assert!(Sequential::new().as_layer().is_some());
    assert!(
        CrossEntropyLoss::new().as_layer().is_none(),
        "two tensors in"
    );
    assert!(
        NoForward {
            core: ModuleCore::default()
        }
        .as_layer()
        .is_none()
    );
    let boxed: Box<dyn Module> = Box::new(ReLU::new());
    let y = boxed
        .as_layer()
        .unwrap()
        .call(Tensor::from_vec(vec![-1.0f32, 1.0], &[2])?)?;
    assert_eq!(y.to_vec::<f32>()?, vec![0.0, 1.0]);
    Ok(())
}
