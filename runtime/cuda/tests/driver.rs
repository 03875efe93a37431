//! The [`CudaDriver`] trait, on the emulated driver (every machine) and on the system driver
//! (which, without libcuda, must refuse to construct with a typed error): memory, copies, a
//! rendered kernel loaded and launched, and the errors a misuse gets.

use crate::common;
use crate::emulated_driver;

use common::{kernels, op_graph};
use emulated_driver::EmulatedDriver;
use tessera_cuda::driver::{DevicePtr, KernelArg, LaunchDims};
use tessera_cuda::{CudaDriver, CudaError, SystemDriver, driver_present, render};
use tessera_tensor::op::UnaryOp;
use tessera_tensor::{DType, Op};

fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

#[test]
fn the_system_driver_without_libcuda_is_unavailable_not_a_panic() {
    if driver_present() {
        println!("skipped: libcuda is present on this machine");
        return;
    }
    match SystemDriver::new() {
        Err(CudaError::DeviceUnavailable { reason }) => assert!(reason.contains("libcuda")),
        other => panic!("expected DeviceUnavailable, got {other:?}"),
    }
}

#[test]
fn memory_round_trips_through_copies_and_memset() -> tessera_cuda::Result<()> {
    let driver = EmulatedDriver::new(1);
    let a = driver.alloc(0, 16)?;
    let b = driver.alloc(0, 16)?;
    assert_eq!(a.address() % 256, 0, "allocations are 256-byte aligned");
    let mut back = vec![0u8; 16];
    // SAFETY: both are live 16-byte allocations of device 0.
    unsafe {
        driver.copy_to_device(0, a, &f32_bytes(&[1.0, 2.0, 3.0, 4.0]))?;
        driver.copy_on_device(0, b, a, 16)?;
        driver.memset(0, b, 0, 4)?;
        driver.copy_to_host(0, &mut back, b)?;
        driver.free(0, a)?;
        driver.free(0, b)?;
    }
    assert_eq!(f32s(&back), vec![0.0, 2.0, 3.0, 4.0]);
    assert_eq!(driver.live_allocations(0), 0);
    Ok(())
}

#[test]
fn a_rendered_kernel_loads_and_runs_through_the_trait() -> tessera_cuda::Result<()> {
    let driver = EmulatedDriver::new(1);
    let target = driver.properties(0)?.ptx_target();
    let kernel = &kernels(&op_graph(Op::Unary(UnaryOp::Neg), DType::F32, &[&[5]]))[0];
    let rendered = render(kernel, &target)?;
    let module = driver.load_module(0, &rendered.ptx)?;
    let function = driver.function(module, &rendered.name)?;
    let x = driver.alloc(0, 20)?;
    let y = driver.alloc(0, 20)?;
    let mut out = vec![0u8; 20];
    // SAFETY: one f32 input and one f32 output of 5 elements, as the kernel's parameters.
    unsafe {
        driver.copy_to_device(0, x, &f32_bytes(&[1.0, -2.0, 0.5, 0.0, 8.0]))?;
        driver.launch(
            function,
            LaunchDims::linear(rendered.grid_for(1), rendered.block),
            &[KernelArg::Ptr(x), KernelArg::Ptr(y)],
        )?;
        driver.copy_to_host(0, &mut out, y)?;
    }
    assert_eq!(f32s(&out), vec![-1.0, 2.0, -0.5, -0.0, -8.0]);
    driver.unload_module(module)?;
    assert!(matches!(
        driver.function(module, &rendered.name),
        Err(CudaError::InvalidUse { .. })
    ));
    Ok(())
}

#[test]
fn misuse_is_reported_not_undefined() -> tessera_cuda::Result<()> {
    let driver = EmulatedDriver::new(1);
    let a = driver.alloc(0, 8)?;
    let mut back = [0u8; 16];
    // SAFETY: deliberately wrong; the emulated driver checks.
    let past_the_end = unsafe { driver.copy_to_host(0, &mut back, a) };
    assert!(
        matches!(&past_the_end, Err(CudaError::InvalidUse { message, .. }) if message.contains("out of bounds")),
        "{past_the_end:?}"
    );
    // SAFETY: as above.
    unsafe { driver.free(0, a)? };
    // SAFETY: as above: a use after free.
    let after_free = unsafe { driver.copy_to_device(0, a, &[1, 2]) };
    assert!(matches!(after_free, Err(CudaError::InvalidUse { .. })));
    // SAFETY: as above: never allocated.
    assert!(unsafe { driver.free(0, DevicePtr::new(0x10)) }.is_err());
    assert!(matches!(
        driver.alloc(3, 8),
        Err(CudaError::DeviceUnavailable { .. })
    ));
    assert!(matches!(
        driver.alloc(0, 1 << 40),
        Err(CudaError::OutOfMemory { .. })
    ));
    Ok(())
}

#[test]
fn rejected_ptx_reports_the_line() {
    let driver = EmulatedDriver::new(1);
    let ptx = ".version 7.0\n.target sm_80\n.address_size 64\n.visible .entry k()\n{\n\tnot_an_instruction;\n\tret;\n}\n";
    match driver.load_module(0, ptx) {
        Err(CudaError::ModuleRejected { log, .. }) => {
            assert!(log.contains("line 6"), "the log names the line: {log}")
        }
        other => panic!("expected ModuleRejected, got {other:?}"),
    }
}
