//! Profiling an eager run: global forward hooks, installed only while the run lasts and
//! removed by a guard even when it panics, time every module call the profiling thread makes
//! by its qualified path; calls on other threads pass through unrecorded.

use super::{Event, EventKind, Profiler, bytes_of};
use std::sync::{Arc, Mutex};
use std::thread::ThreadId;
use std::time::Instant;
use tessera_nn::hooks::{
    HookHandle, register_module_forward_hook, register_module_forward_pre_hook,
};
use tessera_nn::{Module, ModuleExt, current_module_path};

/// A call under way on the profiling thread.
struct OpenCall {
    /// The module's address, to match the call's end with its start.
    module: usize,
    path: String,
    name: String,
    start: Instant,
    allocated: u64,
}

/// Calls under way, innermost last.
type Open = Arc<Mutex<Vec<OpenCall>>>;

/// Removes the hooks when dropped, however `profile_module`'s closure ends.
struct Installed(HookHandle, HookHandle);

impl Drop for Installed {
    fn drop(&mut self) {
        self.0.remove();
        self.1.remove();
    }
}

/// A module's address, the same in its pre-hook and its hook.
fn address(module: &dyn Module) -> usize {
    module as *const dyn Module as *const () as usize
}

impl Profiler {
    /// Runs `f` (an eager forward) recording one event per module call that this thread
    /// makes, nested as called. The hooks are removed when `f` returns, fails or panics.
    pub fn profile_module<R>(&self, f: impl FnOnce() -> R) -> R {
        let open: Open = Arc::default();
        let closed: Arc<Mutex<Vec<Event>>> = Arc::default();
        let origin = self.origin;
        let thread = std::thread::current().id();
        let pre = {
            let open = open.clone();
            register_module_forward_pre_hook(move |module, _inputs| {
                if !on(thread) {
                    return Ok(None);
                }
                let path = current_module_path().unwrap_or_default();
                let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                // An outermost call has no caller under way: what is left open belongs to
                // calls that failed (their hooks never ran).
                if path.is_empty() {
                    open.clear();
                }
                open.push(OpenCall {
                    module: address(module),
                    path,
                    name: module.type_name(),
                    start: Instant::now(),
                    allocated: tessera_tensor::allocated_bytes(),
                });
                Ok(None)
            })
        };
        let post = {
            let (open, closed) = (open.clone(), closed.clone());
            register_module_forward_hook(move |module, _inputs, outputs| {
                if !on(thread) {
                    return Ok(None);
                }
                let end = Instant::now();
                let allocated = tessera_tensor::allocated_bytes();
                let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                // Calls that failed inside this one never reached their hook: drop them too.
                let Some(at) = open.iter().rposition(|c| c.module == address(module)) else {
                    return Ok(None);
                };
                let call = open.swap_remove(at);
                open.truncate(at);
                let path = if call.path.is_empty() {
                    module.type_name()
                } else {
                    call.path
                };
                let event = Event {
                    name: call.name,
                    path,
                    kind: EventKind::Module,
                    start: call.start.saturating_duration_since(origin),
                    duration: end.saturating_duration_since(call.start),
                    depth: open.len(),
                    allocated_bytes: allocated.wrapping_sub(call.allocated),
                    output_bytes: bytes_of(outputs),
                    flops: module_flops(module, outputs),
                };
                closed.lock().unwrap_or_else(|e| e.into_inner()).push(event);
                Ok(None)
            })
        };
        let installed = Installed(pre, post);
        let result = f();
        drop(installed);
        let events = std::mem::take(&mut *closed.lock().unwrap_or_else(|e| e.into_inner()));
        for event in events {
            self.record(event);
        }
        result
    }
}

/// Whether the hook runs on the profiling thread.
fn on(thread: ThreadId) -> bool {
    std::thread::current().id() == thread
}

/// FLOPs of a linear or convolution call, from its weight and output shapes: each output
/// element takes one multiply-add per weight element of its output channel.
fn module_flops(module: &dyn Module, outputs: &[tessera_tensor::Tensor]) -> u64 {
    let kind = module.type_name();
    if !matches!(kind.as_str(), "Linear" | "Conv1d" | "Conv2d") {
        return 0;
    }
    let (Ok(weight), Some(out)) = (module.get_parameter("weight"), outputs.first()) else {
        return 0;
    };
    let per_output: usize = weight.shape().iter().skip(1).product();
    2 * (out.numel() as u64) * per_output as u64
}
