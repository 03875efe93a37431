//! Meta tensors (shapes and dtypes, no data) and the trace hook: ops on them compute output
//! shapes only, mix with real parameters, refuse to reveal values, and are reported to an
//! installed recorder in order.

use std::sync::{Arc, Mutex};
use tessera_tensor::functional as F;
use tessera_tensor::trace::{TraceRecorder, with_recorder};
use tessera_tensor::{DType, Device, Op, Result, Tensor, TensorError};

#[test]
fn ops_on_meta_tensors_compute_shapes_without_data() -> Result<()> {
    // Far too large to compute: only shapes flow.
    let x = Tensor::new_meta(&[1 << 20, 1 << 12], DType::F32);
    let w = Tensor::new_meta(&[1 << 12, 1 << 12], DType::F32);
    let y = x.matmul(&w)?.relu()?.sum(&[1], false)?;
    assert_eq!(
        (y.shape(), y.dtype(), y.device()),
        (vec![1 << 20], DType::F32, Device::Meta)
    );
    Ok(())
}

#[test]
fn meta_inputs_mix_with_real_parameters_through_layers() -> Result<()> {
    let x = Tensor::new_meta(&[8, 3, 32, 32], DType::F32);
    let w = Tensor::randn(&[16, 3, 3, 3], DType::F32)?;
    let b = Tensor::zeros(&[16], DType::F32)?;
    let y = F::conv2d(&x, &w, Some(&b), [2, 2], [1, 1], [1, 1], 1)?;
    let y = F::max_pool2d(&y, [2, 2], [2, 2], [0, 0], [1, 1], false)?.flatten(1, -1)?;
    assert_eq!(y.shape(), vec![8, 16 * 8 * 8]);
    assert!(y.is_meta());
    Ok(())
}

#[test]
fn shape_errors_surface_on_meta_tensors_naming_op_and_shapes() {
    let x = Tensor::new_meta(&[2, 5], DType::F32);
    let w = Tensor::new_meta(&[4, 3], DType::F32);
    let err = x.matmul(&w).unwrap_err().to_string();
    assert!(
        err.contains("matmul") && err.contains("[2, 5]") && err.contains("[4, 3]"),
        "{err}"
    );
}

#[test]
fn reading_a_meta_tensor_is_an_error_not_a_panic() {
    let x = Tensor::new_meta(&[3], DType::F32);
    assert!(matches!(x.to_vec::<f32>(), Err(TensorError::NoData { .. })));
    assert!(matches!(
        x.sum_all().unwrap().item::<f32>(),
        Err(TensorError::NoData { .. })
    ));
    assert!(x.fill_(1.0).is_err());
    assert_eq!(x.to_string(), "tensor(..., device='meta', size=(3,))");
    assert!(
        Tensor::ones(&[2], DType::F32)
            .unwrap()
            .to_device(Device::Meta)
            .unwrap()
            .is_meta()
    );
    assert!(
        x.to_device(Device::Cpu).is_err(),
        "a meta tensor has no values to copy"
    );
}

#[derive(Default)]
struct Names(Mutex<Vec<String>>);

impl TraceRecorder for Names {
    fn record(&self, op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) -> Result<()> {
        let shapes: Vec<_> = outputs.iter().map(|o| o.shape()).collect();
        self.0
            .lock()
            .unwrap()
            .push(format!("{}/{}->{shapes:?}", op.name(), inputs.len()));
        Ok(())
    }
}

#[test]
fn an_installed_recorder_sees_every_op_on_meta_tensors_in_order() -> Result<()> {
    let names = Arc::new(Names::default());
    let real = Tensor::ones(&[3], DType::F32)?;
    with_recorder(names.clone(), || -> Result<()> {
        let x = Tensor::new_meta(&[2, 3], DType::F32);
        x.add(&real)?.relu()?.sum(&[0], false)?;
        real.mul_scalar(2.0)?; // real tensors compute and are not reported
        Ok(())
    })?;
    assert_eq!(
        *names.0.lock().unwrap(),
        ["add/2->[[2, 3]]", "relu/1->[[2, 3]]", "sum/1->[[3]]"]
    );
    let after = Tensor::new_meta(&[1], DType::F32).neg()?;
    assert!(
        after.is_meta() && names.0.lock().unwrap().len() == 3,
        "the recorder is removed afterwards"
    );
    Ok(())
}
