//! The `key_averages().table()` view of events: one row per op or module path, with calls,
//! self and total time, allocated and output bytes and FLOPs, sorted by self time.

use super::{Event, EventKind};
use std::collections::BTreeMap;
use std::time::Duration;

#[derive(Default)]
struct Row {
    calls: usize,
    total: Duration,
    self_time: Duration,
    allocated_bytes: u64,
    output_bytes: u64,
    flops: u64,
}

/// Rows keyed by op name for graph nodes and by module path for module calls. A module
/// call's self time leaves out the calls nested directly inside it.
pub(super) fn key_averages(events: &[Event]) -> String {
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let children: Duration = match e.kind {
            EventKind::Node => Duration::ZERO,
            EventKind::Module => events[i + 1..]
                .iter()
                .take_while(|c| c.start < e.start + e.duration)
                .filter(|c| c.kind == EventKind::Module && c.depth == e.depth + 1)
                .map(|c| c.duration)
                .sum(),
        };
        let key = match e.kind {
            EventKind::Node => e.name.clone(),
            EventKind::Module => format!("{} ({})", e.path, e.name),
        };
        let row = rows.entry(key).or_default();
        row.calls += 1;
        row.total += e.duration;
        row.self_time += e.duration.saturating_sub(children);
        row.allocated_bytes += e.allocated_bytes;
        row.output_bytes += e.output_bytes;
        row.flops += e.flops;
    }
    let mut rows: Vec<(String, Row)> = rows.into_iter().collect();
    rows.sort_by(|a, b| b.1.self_time.cmp(&a.1.self_time).then(a.0.cmp(&b.0)));
    let all_self: Duration = rows.iter().map(|(_, r)| r.self_time).sum();
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(4).max(4);
    let mut out = format!(
        "{:<width$}  {:>6}  {:>11}  {:>7}  {:>11}  {:>10}  {:>10}  {:>10}\n",
        "Name", "Calls", "Self (ms)", "Self %", "Total (ms)", "Alloc MB", "Output MB", "MFLOPs"
    );
    for (key, r) in &rows {
        let share = if all_self.is_zero() {
            0.0
        } else {
            100.0 * r.self_time.as_secs_f64() / all_self.as_secs_f64()
        };
        out.push_str(&format!(
            "{key:<width$}  {:>6}  {:>11.3}  {:>6.1}%  {:>11.3}  {:>10.3}  {:>10.3}  {:>10.2}\n",
            r.calls,
            r.self_time.as_secs_f64() * 1e3,
            share,
            r.total.as_secs_f64() * 1e3,
            r.allocated_bytes as f64 / 1e6,
            r.output_bytes as f64 / 1e6,
            r.flops as f64 / 1e6,
        ));
    }
    out.push_str(&format!(
        "Self time total: {:.3} ms\n",
        all_self.as_secs_f64() * 1e3
    ));
    out
}
