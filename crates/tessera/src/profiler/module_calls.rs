//! Profiling an eager run: global forward hooks, installed only while the run lasts, time
//! every module call by its qualified path.

use super::{Event, EventKind, Profiler, bytes_of};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tessera_nn::hooks::{register_module_forward_hook, register_module_forward_pre_hook};
use tessera_nn::{ModuleExt, current_module_path};

/// Calls under way: their path, type and start, innermost last.
type Open = Arc<Mutex<Vec<(String, String, Instant)>>>;

impl Profiler {
    /// Runs `f` (an eager forward) recording one event per module call, nested as called.
    pub fn profile_module<R>(&self, f: impl FnOnce() -> R) -> R {
        let open: Open = Arc::default();
        let closed: Arc<Mutex<Vec<Event>>> = Arc::default();
        let origin = self.origin;
        let pre = {
            let open = open.clone();
            register_module_forward_pre_hook(move |module, _inputs| {
                let path = current_module_path().unwrap_or_default();
                let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                open.push((path, module.type_name(), Instant::now()));
                Ok(None)
            })
        };
        let post = {
            let (open, closed) = (open.clone(), closed.clone());
            register_module_forward_hook(move |module, _inputs, outputs| {
                let end = Instant::now();
                let mut open = open.lock().unwrap_or_else(|e| e.into_inner());
                let Some((path, name, start)) = open.pop() else {
                    return Ok(None);
                };
                let path = if path.is_empty() {
                    module.type_name()
                } else {
                    path
                };
                let flops = module_flops(module, outputs);
                closed
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(Event {
                        name,
                        path,
                        kind: EventKind::Module,
                        start: start.saturating_duration_since(origin),
                        duration: end.saturating_duration_since(start),
                        depth: open.len(),
                        bytes: bytes_of(outputs),
                        flops,
                    });
                Ok(None)
            })
        };
        let result = f();
        pre.remove();
        post.remove();
        let events = std::mem::take(&mut *closed.lock().unwrap_or_else(|e| e.into_inner()));
        for event in events {
            self.record(event);
        }
        result
    }
}

/// FLOPs of a linear or convolution call, from its weight and output shapes: each output
/// element takes one multiply-add per weight element of its output channel.
fn module_flops(module: &dyn tessera_nn::Module, outputs: &[tessera_tensor::Tensor]) -> u64 {
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
