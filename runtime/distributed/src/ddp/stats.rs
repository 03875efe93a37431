//! What one synchronised backward did: bucket launch order, and how much of the gradient
//! communication was hidden behind the rest of backward.

use std::time::Duration;

/// Measurements of the last backward whose gradients were averaged.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncStats {
    /// Bucket indices in the order their all-reduces were launched (always `0, 1, ...`).
    pub launch_order: Vec<usize>,
    /// For each launch, how many gradients were still to come: a bucket launched with some
    /// pending overlaps its communication with the rest of backward.
    pub pending_at_launch: Vec<usize>,
    /// The time the all-reduces took on the communication thread, summed.
    pub communication: Duration,
    /// The time backward waited for them after its last gradient (communication not hidden).
    pub exposed: Duration,
}

impl SyncStats {
    /// The share of communication time hidden behind backward, in `0..=1`.
    pub fn hidden_share(&self) -> f64 {
        let total = self.communication.as_secs_f64();
        if total <= 0.0 {
            return 1.0;
        }
        (1.0 - self.exposed.as_secs_f64() / total).clamp(0.0, 1.0)
    }
}
