//! Events as Chrome trace JSON: complete ("X") events in microseconds, one process, one
//! thread, with the module path, the op, allocated and output bytes and FLOPs as arguments.

use super::{Event, EventKind};
use serde_json::json;

pub(super) fn to_json(events: &[Event]) -> String {
    let trace_events: Vec<_> = events
        .iter()
        .map(|e| {
            json!({
                "name": match e.kind {
                    EventKind::Node => format!("{} {}", e.name, e.path),
                    EventKind::Module => format!("{} ({})", e.path, e.name),
                },
                "cat": match e.kind {
                    EventKind::Node => "node",
                    EventKind::Module => "module",
                },
                "ph": "X",
                "ts": e.start.as_secs_f64() * 1e6,
                "dur": e.duration.as_secs_f64() * 1e6,
                "pid": 1,
                "tid": 1,
                "args": {
                    "path": e.path,
                    "op": e.name,
                    "allocated_bytes": e.allocated_bytes,
                    "output_bytes": e.output_bytes,
                    "flops": e.flops,
                },
            })
        })
        .collect();
    json!({ "traceEvents": trace_events, "displayTimeUnit": "ms" }).to_string()
}
