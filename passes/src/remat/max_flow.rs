//! Maximum flow and the minimum cut nearest the sink, by Dinic's algorithm (BFS levels, then
//! blocking flows along them), on a small directed graph with integer capacities. The
//! rematerialisation pass builds its network here; nothing in this file knows about graphs
//! of ops.

use std::collections::VecDeque;

/// A capacity no cut may take: larger than any sum of finite capacities the pass builds.
pub(super) const INFINITE: u64 = u64::MAX / 4;

/// One direction of an edge; its reverse sits at `index ^ 1` in [`FlowNetwork::edges`].
#[derive(Debug, Clone, Copy)]
struct Edge {
    to: usize,
    /// Capacity left (forward edges) or flow that may be pushed back (reverse edges).
    residual: u64,
}

/// A flow network over vertices `0..n`.
#[derive(Debug, Clone)]
pub(super) struct FlowNetwork {
    edges: Vec<Edge>,
    /// Per vertex, the indices of its outgoing edges (reverse edges included).
    out: Vec<Vec<usize>>,
}

impl FlowNetwork {
    pub(super) fn new(vertices: usize) -> FlowNetwork {
        FlowNetwork {
            edges: Vec::new(),
            out: vec![Vec::new(); vertices],
        }
    }

    /// Adds an edge `from -> to` of capacity `capacity`.
    pub(super) fn add_edge(&mut self, from: usize, to: usize, capacity: u64) {
        self.out[from].push(self.edges.len());
        self.edges.push(Edge {
            to,
            residual: capacity,
        });
        self.out[to].push(self.edges.len());
        self.edges.push(Edge {
            to: from,
            residual: 0,
        });
    }

    /// Pushes a maximum flow from `source` to `sink` and returns its value (saturating at
    /// [`INFINITE`] when an infinite path exists).
    pub(super) fn max_flow(&mut self, source: usize, sink: usize) -> u64 {
        let mut total: u64 = 0;
        while let Some(level) = self.levels(source, sink) {
            let mut next = vec![0usize; self.out.len()];
            loop {
                let pushed = self.push(source, sink, INFINITE, &level, &mut next);
                if pushed == 0 {
                    break;
                }
                total = total.saturating_add(pushed);
                if total >= INFINITE {
                    return INFINITE;
                }
            }
        }
        total
    }

    /// BFS distances from `source` over edges with capacity left; `None` once `sink` is
    /// unreachable.
    fn levels(&self, source: usize, sink: usize) -> Option<Vec<usize>> {
        let mut level = vec![usize::MAX; self.out.len()];
        level[source] = 0;
        let mut queue = VecDeque::from([source]);
        while let Some(v) = queue.pop_front() {
            for &e in &self.out[v] {
                let edge = self.edges[e];
                if edge.residual > 0 && level[edge.to] == usize::MAX {
                    level[edge.to] = level[v] + 1;
                    queue.push_back(edge.to);
                }
            }
        }
        (level[sink] != usize::MAX).then_some(level)
    }

    /// One augmenting path along increasing levels (iteratively, so deep graphs do not
    /// overflow the stack); returns the flow pushed, 0 when none is left in this phase.
    fn push(
        &mut self,
        source: usize,
        sink: usize,
        limit: u64,
        level: &[usize],
        next: &mut [usize],
    ) -> u64 {
        // The path so far, as edge indices.
        let mut path: Vec<usize> = Vec::new();
        let mut v = source;
        loop {
            if v == sink {
                let pushed = path
                    .iter()
                    .map(|&e| self.edges[e].residual)
                    .fold(limit, u64::min);
                for &e in &path {
                    self.edges[e].residual -= pushed;
                    let back = &mut self.edges[e ^ 1];
                    back.residual = back.residual.saturating_add(pushed).min(INFINITE);
                }
                return pushed;
            }
            let advance = self.out[v][next[v]..].iter().position(|&e| {
                let edge = self.edges[e];
                edge.residual > 0 && level[edge.to] == level[v] + 1
            });
            match advance {
                Some(skip) => {
                    next[v] += skip;
                    let e = self.out[v][next[v]];
                    path.push(e);
                    v = self.edges[e].to;
                }
                None => {
                    // A dead end: never try it again in this phase, and step back.
                    next[v] = self.out[v].len();
                    let Some(e) = path.pop() else {
                        return 0;
                    };
                    v = self.edges[e ^ 1].to;
                    next[v] += 1;
                }
            }
        }
    }

    /// After [`FlowNetwork::max_flow`]: which vertices can still reach `sink` along edges with
    /// capacity left. Those form the sink side of the minimum cut nearest the sink (the one
    /// whose source side is largest); every other vertex is on its source side.
    pub(super) fn reaches_sink(&self, sink: usize) -> Vec<bool> {
        let mut into: Vec<Vec<usize>> = vec![Vec::new(); self.out.len()];
        for (v, edges) in self.out.iter().enumerate() {
            for &e in edges {
                if self.edges[e].residual > 0 {
                    into[self.edges[e].to].push(v);
                }
            }
        }
        let mut reached = vec![false; self.out.len()];
        reached[sink] = true;
        let mut queue = VecDeque::from([sink]);
        while let Some(v) = queue.pop_front() {
            for &u in &into[v] {
                if !reached[u] {
                    reached[u] = true;
                    queue.push_back(u);
                }
            }
        }
        reached
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The classic six-vertex example (CLRS figure 26.1): maximum flow 23.
    #[test]
    fn max_flow_of_the_textbook_network_is_23() {
        let mut n = FlowNetwork::new(6);
        for (a, b, c) in [
            (0, 1, 16),
            (0, 2, 13),
            (2, 1, 4),
            (1, 3, 12),
            (3, 2, 9),
            (2, 4, 14),
            (4, 3, 7),
            (3, 5, 20),
            (4, 5, 4),
        ] {
            n.add_edge(a, b, c);
        }
        assert_eq!(n.max_flow(0, 5), 23);
        let sink_side = n.reaches_sink(5);
        // The cut nearest the sink: {0, 1, 2, 4} | {3, 5}, edges 1->3 (12), 4->3 (7), 4->5 (4).
        assert_eq!(sink_side, [false, false, false, true, false, true]);
    }

    #[test]
    fn among_equal_cuts_the_one_nearest_the_sink_is_chosen() {
        // 0 -> 1 -> 2 -> 3, every edge of capacity 5: three minimum cuts.
        let mut n = FlowNetwork::new(4);
        n.add_edge(0, 1, 5);
        n.add_edge(1, 2, 5);
        n.add_edge(2, 3, 5);
        assert_eq!(n.max_flow(0, 3), 5);
        assert_eq!(n.reaches_sink(3), [false, false, false, true]);
    }

    #[test]
    fn an_infinite_path_saturates() {
        let mut n = FlowNetwork::new(3);
        n.add_edge(0, 1, INFINITE);
        n.add_edge(1, 2, INFINITE);
        assert_eq!(n.max_flow(0, 2), INFINITE);
    }

    #[test]
    fn no_path_means_no_flow_and_only_the_sink_reaches_it() {
        let mut n = FlowNetwork::new(3);
        n.add_edge(0, 1, 3);
        assert_eq!(n.max_flow(0, 2), 0);
        assert_eq!(n.reaches_sink(2), [false, false, true]);
    }
}
