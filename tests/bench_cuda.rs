//! The GPU rows of `examples/bench.rs` (its own test binary: the machine's real driver, no
//! emulated backend): without libcuda or a GPU every row is a typed `DeviceUnavailable` error
//! naming `cuda:0`, never a panic, so the bench reports it and goes on; on a GPU machine the
//! ignored test measures each row once and checks its figures are there and positive.

#[path = "../examples/bench_cuda.rs"]
mod bench_cuda;
#[path = "../examples/support.rs"]
mod support;

use tessera::TensorError;
use tessera::cuda::driver_present;
use tessera::tensor::Device;

#[test]
fn without_a_gpu_every_row_is_device_unavailable() {
    if driver_present() {
        eprintln!("an NVIDIA driver is present: the rows run in the ignored test");
        return;
    }
    for name in bench_cuda::ROWS {
        match bench_cuda::measure(name, 1) {
            Err(TensorError::DeviceUnavailable { device, reason }) => {
                assert_eq!(device, Device::Cuda(0), "{name}");
                assert!(!reason.is_empty(), "{name}");
            }
            other => panic!("{name}: expected DeviceUnavailable, got {other:?}"),
        }
    }
}

#[test]
fn an_unknown_row_is_an_invalid_argument_not_a_panic() {
    if !driver_present() {
        // Without a driver the device check comes first.
        assert!(matches!(
            bench_cuda::measure("no_such_row", 1),
            Err(TensorError::DeviceUnavailable { .. })
        ));
        return;
    }
    assert!(matches!(
        bench_cuda::measure("no_such_row", 1),
        Err(TensorError::InvalidArgument { .. })
    ));
}

#[test]
#[ignore = "needs an NVIDIA GPU"]
fn on_a_gpu_every_row_measures() {
    for name in bench_cuda::ROWS {
        let row = bench_cuda::measure(name, 3).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(row.median_ms > 0.0 && row.min_ms > 0.0, "{row:?}");
        if name.starts_with("copy") || name.starts_with("elementwise") {
            assert!(row.gbs.is_some_and(|g| g > 0.0), "{row:?}");
        }
        if name.starts_with("launch_overhead") {
            assert!(row.us_per_kernel.is_some_and(|u| u > 0.0), "{row:?}");
        }
        eprintln!("{name}: {row:?}");
    }
}
