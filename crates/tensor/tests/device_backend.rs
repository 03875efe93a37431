//! The device seam, driven by a fake device crate: a backend that keeps its "device memory"
//! in a host `Vec` behind the traits, registered for `cuda` devices, with kernels for `add`,
//! `relu` and `contiguous` only. (Its own test binary: the registry is per process, and the
//! other tests expect no CUDA backend.)

use std::any::Any;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use tessera_tensor::backend::{
    DeviceBackend, DeviceOperand, DeviceStorage, register_backend, registered_backend,
};
use tessera_tensor::layout::{Layout, broadcast_layout};
use tessera_tensor::op::{BinaryOp, UnaryOp};
use tessera_tensor::storage::CpuStorage;
use tessera_tensor::{DType, Device, DeviceKind, Op, Result, Tensor, TensorError, TensorMeta};

/// "Device memory": a host buffer the tensor crate can only reach through the backend.
#[derive(Debug)]
struct VecMemory {
    device: Device,
    data: CpuStorage,
}

impl DeviceStorage for VecMemory {
    fn device(&self) -> Device {
        self.device
    }
    fn dtype(&self) -> DType {
        self.data.dtype()
    }
    fn numel(&self) -> usize {
        self.data.len()
    }
}

/// How many kernels the backend ran, so tests can see that ops went through it.
static KERNELS_RUN: AtomicUsize = AtomicUsize::new(0);
/// The names of the ops dispatch asked the backend for, kernels or not.
static ASKED: Mutex<Vec<String>> = Mutex::new(Vec::new());

struct VecBackend;

fn memory(m: &dyn DeviceStorage) -> &VecMemory {
    (m as &dyn Any)
        .downcast_ref::<VecMemory>()
        .expect("memory of the vec backend")
}

/// The f32 elements of an operand read with `layout`, packed row-major.
fn read_f32(memory: &VecMemory, layout: &Layout) -> Vec<f32> {
    match &memory.data {
        CpuStorage::F32(v) => layout.offsets().map(|o| v[o]).collect(),
        other => panic!(
            "the vec backend computes in f32 only, got {}",
            other.dtype()
        ),
    }
}

fn boxed(device: Device, values: Vec<f32>) -> Box<dyn DeviceStorage> {
    Box::new(VecMemory {
        device,
        data: CpuStorage::F32(values),
    })
}

impl DeviceBackend for VecBackend {
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda
    }

    fn name(&self) -> &str {
        "vec (test)"
    }

    fn copy_from_cpu(&self, host: &CpuStorage, device: Device) -> Result<Box<dyn DeviceStorage>> {
        Ok(Box::new(VecMemory {
            device,
            data: host.clone(),
        }))
    }

    fn copy_to_cpu(&self, m: &dyn DeviceStorage, layout: &Layout) -> Result<CpuStorage> {
        Ok(memory(m).data.gather(layout.offsets()))
    }

    fn write_from_cpu(
        &self,
        m: &mut dyn DeviceStorage,
        layout: &Layout,
        values: &CpuStorage,
    ) -> Option<Result<()>> {
        let m = (m as &mut dyn Any).downcast_mut::<VecMemory>()?;
        let (CpuStorage::F32(dst), CpuStorage::F32(src)) = (&mut m.data, values) else {
            return None;
        };
        layout.offsets().zip(src).for_each(|(o, &v)| dst[o] = v);
        Some(Ok(()))
    }

    fn apply(
        &self,
        op: &Op,
        inputs: &[DeviceOperand<'_>],
        outputs: &[TensorMeta],
    ) -> Option<Result<Vec<Box<dyn DeviceStorage>>>> {
        ASKED.lock().unwrap().push(op.name());
        let device = inputs[0].memory.device();
        let out = &outputs[0].shape;
        let values = match op {
            Op::Binary(BinaryOp::Add) => {
                let [a, b] = inputs else { return None };
                let read = |x: &DeviceOperand| -> Result<Vec<f32>> {
                    Ok(read_f32(
                        memory(x.memory),
                        &broadcast_layout("add", x.layout, out)?,
                    ))
                };
                let (a, b) = match (read(a), read(b)) {
                    (Ok(a), Ok(b)) => (a, b),
                    (Err(e), _) | (_, Err(e)) => return Some(Err(e)),
                };
                a.iter().zip(&b).map(|(x, y)| x + y).collect()
            }
            Op::Unary(UnaryOp::Relu) => read_f32(memory(inputs[0].memory), inputs[0].layout)
                .into_iter()
                .map(|x| x.max(0.0))
                .collect(),
            Op::View(tessera_tensor::op::ViewOp::Contiguous) => {
                read_f32(memory(inputs[0].memory), inputs[0].layout)
            }
            _ => return None,
        };
        KERNELS_RUN.fetch_add(1, Ordering::SeqCst);
        Some(Ok(vec![boxed(device, values)]))
    }
}

/// The fake device, its backend registered once for the whole test binary.
fn fake_device() -> Device {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        register_backend(Arc::new(VecBackend)).expect("cuda backends can be registered");
    });
    Device::Cuda(0)
}

fn on_device(values: &[f32], shape: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(values.to_vec(), shape)?.to_device(fake_device())
}

#[test]
fn to_device_copies_onto_a_registered_device_and_back() -> Result<()> {
    let x = on_device(&[1.0, -2.0, 3.0, -4.0], &[2, 2])?;
    assert_eq!(x.device(), Device::Cuda(0));
    assert_eq!((x.shape(), x.dtype()), (vec![2, 2], DType::F32));
    assert_eq!(x.to_vec::<f32>()?, vec![1.0, -2.0, 3.0, -4.0]);
    let back = x.to_device(Device::Cpu)?;
    assert_eq!(back.device(), Device::Cpu);
    assert_eq!(back.to_vec::<f32>()?, vec![1.0, -2.0, 3.0, -4.0]);
    assert_eq!(
        x.to_string(),
        "tensor([[ 1., -2.],\n        [ 3., -4.]], device='cuda:0')"
    );
    assert!(registered_backend(DeviceKind::Cuda).is_some());
    Ok(())
}

#[test]
fn ops_the_backend_has_run_on_the_device() -> Result<()> {
    let x = on_device(&[1.0, -2.0, 3.0, -4.0], &[2, 2])?;
    let bias = on_device(&[10.0, 20.0], &[2])?;
    let before = KERNELS_RUN.load(Ordering::SeqCst);
    let y = x.add(&bias)?.relu()?;
    assert!(KERNELS_RUN.load(Ordering::SeqCst) >= before + 2);
    assert_eq!(y.device(), Device::Cuda(0));
    assert_eq!(y.to_vec::<f32>()?, vec![11.0, 18.0, 13.0, 16.0]);
    Ok(())
}

#[test]
fn an_op_the_backend_lacks_is_a_typed_error_naming_op_and_device() -> Result<()> {
    let x = on_device(&[1.0, 2.0], &[2])?;
    let err = x.mul(&x).unwrap_err();
    assert!(ASKED.lock().unwrap().iter().any(|name| name == "mul"));
    assert_eq!(
        err,
        TensorError::UnsupportedOnDevice {
            op: "mul".into(),
            device: Device::Cuda(0),
            backend: "vec (test)".into(),
        }
    );
    let message = err.to_string();
    assert!(
        message.contains("mul") && message.contains("cuda:0"),
        "{message}"
    );
    Ok(())
}

#[test]
fn views_share_device_memory_and_copies_go_through_the_backend() -> Result<()> {
    let x = on_device(&[0.0, 1.0, 2.0, 3.0, 4.0, 5.0], &[2, 3])?;
    let t = x.t()?;
    assert!(t.shares_storage(&x) && t.device() == Device::Cuda(0));
    assert_eq!(t.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    // Flattening a transpose needs a packed copy: the backend's `contiguous`.
    let flat = t.reshape(&[6])?;
    assert!(!flat.shares_storage(&x) && flat.device() == Device::Cuda(0));
    assert_eq!(flat.to_vec::<f32>()?, vec![0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    Ok(())
}

#[test]
fn in_place_writes_reach_device_memory() -> Result<()> {
    let x = on_device(&[0.0; 4], &[2, 2])?;
    x.narrow(0, 1, 1)?
        .copy_(&Tensor::from_vec(vec![7.0f32, 8.0], &[1, 2])?)?;
    assert_eq!(x.to_vec::<f32>()?, vec![0.0, 0.0, 7.0, 8.0]);
    x.fill_(1.5)?;
    assert_eq!(x.device(), Device::Cuda(0));
    assert_eq!(x.to_vec::<f32>()?, vec![1.5; 4]);
    Ok(())
}

#[test]
fn mixing_cpu_and_device_tensors_is_a_device_mismatch() -> Result<()> {
    let x = on_device(&[1.0], &[1])?;
    let cpu = Tensor::from_vec(vec![1.0f32], &[1])?;
    assert!(matches!(
        cpu.add(&x),
        Err(TensorError::DeviceMismatch {
            lhs: Device::Cpu,
            rhs: Device::Cuda(0),
            ..
        })
    ));
    Ok(())
}

#[test]
fn cpu_autograd_is_unaffected_by_a_registered_backend() -> Result<()> {
    fake_device();
    let x = Tensor::from_vec(vec![1.0f32, -2.0, 3.0], &[3])?.requires_grad_(true)?;
    let y = x.relu()?.mul_scalar(2.0)?.sum_all()?;
    y.backward()?;
    assert_eq!(
        x.grad().map(|g| g.to_vec::<f32>()).transpose()?,
        Some(vec![2.0, 0.0, 2.0])
    );
    assert_eq!(y.device(), Device::Cpu);
    Ok(())
}

#[test]
fn ops_on_device_tensors_record_autograd_nodes() -> Result<()> {
    let x = on_device(&[1.0, -1.0], &[2])?.requires_grad_(true)?;
    let y = x.relu()?;
    assert_eq!(y.grad_fn_name().as_deref(), Some("reluBackward"));
    Ok(())
}

#[test]
fn the_cpu_and_meta_devices_cannot_be_replaced() {
    struct CpuImpostor;
    impl DeviceBackend for CpuImpostor {
        fn kind(&self) -> DeviceKind {
            DeviceKind::Cpu
        }
        fn name(&self) -> &str {
            "impostor"
        }
        fn copy_from_cpu(&self, _: &CpuStorage, _: Device) -> Result<Box<dyn DeviceStorage>> {
            unreachable!()
        }
        fn copy_to_cpu(&self, _: &dyn DeviceStorage, _: &Layout) -> Result<CpuStorage> {
            unreachable!()
        }
        fn apply(
            &self,
            _: &Op,
            _: &[DeviceOperand<'_>],
            _: &[TensorMeta],
        ) -> Option<Result<Vec<Box<dyn DeviceStorage>>>> {
            None
        }
    }
    assert!(matches!(
        register_backend(Arc::new(CpuImpostor)),
        Err(TensorError::InvalidArgument { .. })
    ));
}
