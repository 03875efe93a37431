//! [`RematReport`]: what rematerialisation did to a joint graph: the forward values kept for
//! the backward before and after, the bytes that saves, and the nodes the backward recomputes.

use std::fmt;

/// A forward value kept alive for the backward: its node's name and its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedValue {
    pub name: String,
    pub bytes: u64,
}

/// What [`super::Rematerialize`] did. Inputs (placeholders, get_attr) are alive for the whole
/// step anyway and are never counted as saved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RematReport {
    /// The forward values the backward read before the pass, in graph order.
    pub saved_before: Vec<SavedValue>,
    /// The forward values it reads after, in graph order.
    pub saved_after: Vec<SavedValue>,
    /// The forward nodes computed again in the backward, each with its copy's name
    /// (`gelu` and `gelu_recomputed`), in graph order.
    pub recomputed: Vec<(String, String)>,
}

impl RematReport {
    /// Bytes of the values kept before the pass.
    pub fn bytes_before(&self) -> u64 {
        self.saved_before.iter().map(|v| v.bytes).sum()
    }

    /// Bytes of the values kept after the pass (never more than before).
    pub fn bytes_after(&self) -> u64 {
        self.saved_after.iter().map(|v| v.bytes).sum()
    }

    /// How many bytes fewer the backward keeps alive.
    pub fn bytes_saved(&self) -> u64 {
        self.bytes_before().saturating_sub(self.bytes_after())
    }
}

/// Bytes as `812 B`, `1.5 KiB`, `3.2 MiB`.
pub(super) struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0 as f64;
        if self.0 < 1024 {
            write!(f, "{} B", self.0)
        } else if b < 1024.0 * 1024.0 {
            write!(f, "{:.1} KiB", b / 1024.0)
        } else {
            write!(f, "{:.1} MiB", b / (1024.0 * 1024.0))
        }
    }
}

fn list(f: &mut fmt::Formatter<'_>, label: &str, values: &[SavedValue]) -> fmt::Result {
    write!(f, "  {label}:")?;
    if values.is_empty() {
        write!(f, " none")?;
    }
    for (i, v) in values.iter().enumerate() {
        let sep = if i == 0 { " " } else { ", " };
        write!(f, "{sep}%{} ({})", v.name, Bytes(v.bytes))?;
    }
    writeln!(f)
}

/// A summary line, then the values kept before and after and the nodes recomputed.
impl fmt::Display for RematReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "rematerialisation: {} saved values ({}) -> {} ({}), {} saved, nodes recomputed: {}",
            self.saved_before.len(),
            Bytes(self.bytes_before()),
            self.saved_after.len(),
            Bytes(self.bytes_after()),
            Bytes(self.bytes_saved()),
            self.recomputed.len()
        )?;
        list(f, "saved before", &self.saved_before)?;
        list(f, "saved after", &self.saved_after)?;
        write!(f, "  recomputed:")?;
        if self.recomputed.is_empty() {
            write!(f, " none")?;
        }
        for (i, (original, copy)) in self.recomputed.iter().enumerate() {
            let sep = if i == 0 { " " } else { ", " };
            write!(f, "{sep}%{original} as %{copy}")?;
        }
        writeln!(f)
    }
}
