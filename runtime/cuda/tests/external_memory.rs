//! A CUDA tensor's device memory handed to an external library (what NCCL collectives work on
//! in place), checked on the emulated driver: the address of a view's first element is its
//! storage offset into the allocation (the bytes read there are the view's values), a write
//! there is what the tensor holds afterwards and counts as an in-place write, and tensors that
//! are not contiguous CUDA memory are typed errors naming the op. The emulator has no CUDA
//! context, so `external_stream` is a typed error there, not a null stream.
//! (Its own test binary: the backend registry is per process.)

mod emulated_driver;
mod emulator;

use emulated_driver::EmulatedDriver;
use std::sync::{Arc, OnceLock};
use tessera_cuda::{CudaDriver, CudaError, init_with_driver, with_cuda_memory};
use tessera_tensor::{DType, Device, Tensor};

type Error = Box<dyn std::error::Error>;

fn driver() -> &'static Arc<EmulatedDriver> {
    static DRIVER: OnceLock<Arc<EmulatedDriver>> = OnceLock::new();
    DRIVER.get_or_init(|| {
        let driver = Arc::new(EmulatedDriver::new(2));
        init_with_driver(driver.clone()).expect("registering the backend");
        driver
    })
}

fn on_device(values: &[f32], shape: &[usize], ordinal: usize) -> Result<Tensor, Error> {
    driver();
    Ok(Tensor::from_slice(values, shape)?.to_device(Device::Cuda(ordinal))?)
}

#[test]
fn a_views_memory_starts_at_its_first_element_and_holds_its_values() -> Result<(), Error> {
    let values: Vec<f32> = (0..12).map(|v| v as f32 * 1.5).collect();
    let t = on_device(&values, &[4, 3], 1)?;
    // Rows 1..3: contiguous, six elements from element 3 of the allocation.
    let rows = t.narrow(0, 1, 2)?;
    let (base, read) = (
        with_cuda_memory(&t, "test", false, |m| m.ptr)?,
        with_cuda_memory(&rows, "test", false, |m| {
            assert_eq!(
                (m.ordinal, m.numel, m.dtype, m.bytes()),
                (1, 6, DType::F32, 24)
            );
            let mut bytes = vec![0u8; m.bytes()];
            // SAFETY: the view's bytes lie in its live allocation on this device.
            unsafe { m.driver.copy_to_host(m.ordinal, &mut bytes, m.ptr) }.map(|()| (m.ptr, bytes))
        })??,
    );
    let (ptr, bytes) = read;
    assert_eq!(ptr.address(), base.address() + 3 * 4);
    let got: Vec<f32> = bytes
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(got, values[3..9]);
    Ok(())
}

#[test]
fn a_write_through_the_memory_is_what_the_tensor_holds_and_bumps_its_version() -> Result<(), Error>
{
    let t = on_device(&[0.0; 6], &[2, 3], 0)?;
    let row = t.narrow(0, 1, 1)?;
    let before = t.version();
    let new: Vec<u8> = [7.0f32, 8.0, 9.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    with_cuda_memory(&row, "test", true, |m| {
        // SAFETY: three f32 from the row's first element lie in the allocation.
        unsafe { m.driver.copy_to_device(m.ordinal, m.ptr, &new) }
    })??;
    assert_eq!(t.to_vec::<f32>()?, [0.0, 0.0, 0.0, 7.0, 8.0, 9.0]);
    assert!(t.version() > before, "an in-place write is counted");
    let unchanged = t.version();
    with_cuda_memory(&t, "test", false, |_| ())?;
    assert_eq!(t.version(), unchanged, "a read is not a write");
    Ok(())
}

#[test]
fn tensors_that_are_not_contiguous_cuda_memory_are_errors_naming_the_op() -> Result<(), Error> {
    let t = on_device(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3], 0)?;
    let transposed = t.transpose(0, 1)?;
    let err = with_cuda_memory(&transposed, "all_reduce", false, |_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::InvalidUse {
                call: "all_reduce",
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("not contiguous"), "{err}");
    // Its contiguous copy is accepted.
    let copy = transposed.contiguous()?;
    assert_eq!(
        with_cuda_memory(&copy, "all_reduce", false, |m| m.numel)?,
        6
    );

    let cpu = Tensor::zeros(&[2, 3], DType::F32)?;
    let err = with_cuda_memory(&cpu, "broadcast", true, |_| ()).unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::InvalidUse {
                call: "broadcast",
                ..
            }
        ),
        "{err}"
    );
    let text = err.to_string();
    assert!(text.contains("cpu") && text.contains("[2, 3]"), "{text}");
    Ok(())
}

#[test]
fn the_emulator_has_no_stream_for_an_external_library() {
    let driver = driver();
    let err = driver.external_stream(0).unwrap_err();
    assert!(
        matches!(
            err,
            CudaError::InvalidUse {
                call: "external_stream",
                ..
            }
        ),
        "{err}"
    );
    let err = driver.external_stream(5).unwrap_err();
    assert!(matches!(err, CudaError::DeviceUnavailable { .. }), "{err}");
}
