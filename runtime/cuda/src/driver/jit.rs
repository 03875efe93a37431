//! The two pieces of raw driver plumbing shared by [`SystemDriver`](super::SystemDriver) and
//! [`CudaDevice`](crate::CudaDevice): a driver result as a typed error, and loading PTX with
//! `cuModuleLoadDataEx` and the JIT's error log (cudarc's `load_module` passes no log, so a
//! rejection would not say which line).

use crate::{CudaError, Result};
use cudarc::driver::sys::{self, CUresult};
use std::ffi::{CString, c_void};

/// `Ok` for `CUDA_SUCCESS`, else [`CudaError::Driver`] naming `call` and the code.
pub(crate) fn driver_call(call: &'static str, r: CUresult) -> Result<()> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(CudaError::Driver {
            call,
            code: format!("{r:?}"),
        })
    }
}

/// Loads `ptx` into the context bound to this thread; `kernel` names it in errors. A
/// rejection is [`CudaError::ModuleRejected`] with the JIT's log.
pub(crate) fn load_with_log(kernel: &str, ptx: &str) -> Result<sys::CUmodule> {
    let text = CString::new(ptx).map_err(|_| CudaError::Launch {
        kernel: kernel.to_string(),
        message: "the PTX text contains a NUL byte".into(),
    })?;
    let mut log = vec![0u8; 16 * 1024];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    let mut values = [log.as_mut_ptr() as *mut c_void, log.len() as *mut c_void];
    let mut module: sys::CUmodule = std::ptr::null_mut();
    // SAFETY: `text` is NUL-terminated PTX; the options point at a live buffer of the size
    // given, which the driver fills with a NUL-terminated log. The caller bound a context.
    let r = unsafe {
        sys::cuModuleLoadDataEx(
            &mut module,
            text.as_ptr() as *const c_void,
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
        )
    };
    if r != CUresult::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        return Err(CudaError::ModuleRejected {
            kernel: kernel.to_string(),
            code: format!("{r:?}"),
            log: String::from_utf8_lossy(&log[..end]).into_owned(),
        });
    }
    Ok(module)
}
