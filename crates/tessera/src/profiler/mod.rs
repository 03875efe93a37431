//! The profiler (PyTorch's `torch.profiler`): per node of a graph run, per step of a compiled
//! run (a generated kernel or a node run eagerly) and per module call of an eager run, the
//! wall time, the bytes of tensor storage allocated, the bytes the outputs hold and the
//! FLOPs, mapped back to module paths; a table sorted by self time and a Chrome trace that
//! opens in Perfetto.
//!
//! Nothing is recorded unless a run goes through a [`Profiler`]: graph runs use a profiling
//! interpreter of their own, compiled runs read the clock and the allocation count between
//! steps only when profiled, and eager runs install global module hooks only for the duration
//! of [`Profiler::profile_module`]. What runs unprofiled pays one thread-local add per new
//! tensor storage ([`tessera_tensor::allocated_bytes`]), nothing more.
//!
//! ```
//! use tessera::nn::models::SmallCnn;
//! use tessera::nn::Call;
//! use tessera::profiler::Profiler;
//! use tessera::{DType, Tensor};
//!
//! let cnn = SmallCnn::new()?;
//! let x = Tensor::randn(&[1, 3, 16, 16], DType::F32)?;
//! let profiler = Profiler::new();
//! profiler.profile_module(|| cnn.call(x.clone()))?;
//! assert!(profiler.events().iter().any(|e| e.path == "conv1"));
//! assert!(profiler.table().contains("conv1"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod chrome_trace;
mod compiled_run;
mod graph_run;
mod module_calls;
mod table;

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// What an event timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    /// One node of a graph run (an op, a module call, a weight read).
    Node,
    /// One call of a module in an eager run; calls of its submodules nest inside it.
    Module,
}

/// One timed node execution or module call.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// The node's op (`conv2d`, `call_module`) or the module's type (`Conv2d`).
    pub name: String,
    /// The module path (`layer1.0.conv1`), or for a graph node the node's name (`%relu_1`)
    /// followed by the module its weights come from where there is one.
    pub path: String,
    pub kind: EventKind,
    /// Start, from the profiler's creation.
    pub start: Duration,
    pub duration: Duration,
    /// Nesting depth: 0 for graph nodes and outermost module calls.
    pub depth: usize,
    /// Bytes of tensor storage created while it ran, on the profiling thread
    /// ([`tessera_tensor::allocated_bytes`]): 0 for a view, the output's size for an op that
    /// writes one fresh tensor, more for one that makes temporaries. A module call's count
    /// includes the calls nested in it.
    pub allocated_bytes: u64,
    /// Bytes the outputs hold, whether fresh or views of memory that was there before.
    pub output_bytes: u64,
    /// Floating-point operations, two per multiply-add (convolutions, linear layers, matmuls).
    pub flops: u64,
}

/// Collects [`Event`]s from the runs made through it.
#[derive(Debug)]
pub struct Profiler {
    origin: Instant,
    events: Mutex<Vec<Event>>,
}

impl Default for Profiler {
    fn default() -> Self {
        Profiler::new()
    }
}

impl Profiler {
    pub fn new() -> Self {
        Profiler {
            origin: Instant::now(),
            events: Mutex::new(Vec::new()),
        }
    }

    /// Every event so far, in the order they started.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self.lock().clone();
        events.sort_by_key(|e| e.start);
        events
    }

    /// Forgets the events recorded so far.
    pub fn clear(&self) {
        self.lock().clear();
    }

    /// The `key_averages().table()` view: one row per op or module path, sorted by self time.
    pub fn table(&self) -> String {
        table::key_averages(&self.events())
    }

    /// The events as Chrome trace JSON (`chrome://tracing`, Perfetto).
    pub fn chrome_trace(&self) -> String {
        chrome_trace::to_json(&self.events())
    }

    fn record(&self, event: Event) {
        self.lock().push(event);
    }

    fn since_origin(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Event>> {
        self.events.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Bytes held by `tensors`.
fn bytes_of<'a>(tensors: impl IntoIterator<Item = &'a tessera_tensor::Tensor>) -> u64 {
    tensors
        .into_iter()
        .map(|t| t.numel().saturating_mul(t.dtype().size_in_bytes()) as u64)
        .sum()
}
