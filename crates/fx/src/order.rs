//! [`NodeOrder`]: a graph's node order, a sequence that inserts and removes anywhere in
//! logarithmic time and compares two nodes' positions in constant time, so that editing a large
//! graph node by node stays linear overall.
//!
//! Each node holds a key; keys grow along the order with gaps between them. A node inserted
//! between two others takes the middle of their gap; when a gap is used up, every key is spread
//! out again over the lower half of the key space (the upper half stays free for appends).

use petgraph::stable_graph::NodeIndex;
use std::collections::{BTreeMap, HashMap};

/// The gap left after the last node by an append.
const APPEND_GAP: u64 = 1 << 32;

#[derive(Debug, Clone, Default)]
pub(crate) struct NodeOrder {
    by_key: BTreeMap<u64, NodeIndex<u32>>,
    keys: HashMap<NodeIndex<u32>, u64>,
}

impl NodeOrder {
    pub fn len(&self) -> usize {
        self.by_key.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// The nodes in order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = NodeIndex<u32>> + '_ {
        self.by_key.values().copied()
    }

    pub fn last(&self) -> Option<NodeIndex<u32>> {
        self.by_key.last_key_value().map(|(_, &i)| i)
    }

    /// A number that orders `node` among the others (larger is later); `None` if absent.
    /// Keys change when the order is edited: compare them only between edits.
    pub fn key(&self, node: NodeIndex<u32>) -> Option<u64> {
        self.keys.get(&node).copied()
    }

    /// Appends `node` after every other node.
    pub fn push(&mut self, node: NodeIndex<u32>) {
        let last = self.by_key.last_key_value().map_or(0, |(&k, _)| k);
        match last.checked_add(APPEND_GAP) {
            Some(key) if key < u64::MAX => self.place(key, node),
            _ => self.insert_between(Some(last), None, node),
        }
    }

    /// Puts `node` before every other node.
    pub fn insert_first(&mut self, node: NodeIndex<u32>) {
        let first = self.by_key.first_key_value().map(|(&k, _)| k);
        self.insert_between(None, first, node);
    }

    /// Puts `node` just before `at`, or last if `at` is absent.
    pub fn insert_before(&mut self, at: NodeIndex<u32>, node: NodeIndex<u32>) {
        let Some(hi) = self.key(at) else {
            return self.push(node);
        };
        let lo = self.by_key.range(..hi).next_back().map(|(&k, _)| k);
        self.insert_between(lo, Some(hi), node);
    }

    /// Puts `node` just after `at`, or last if `at` is absent.
    pub fn insert_after(&mut self, at: NodeIndex<u32>, node: NodeIndex<u32>) {
        let Some(lo) = self.key(at) else {
            return self.push(node);
        };
        match self.by_key.range(lo + 1..).next().map(|(&k, _)| k) {
            Some(hi) => self.insert_between(Some(lo), Some(hi), node),
            None => self.push(node),
        }
    }

    /// Removes `node`; returns whether it was there.
    pub fn remove(&mut self, node: NodeIndex<u32>) -> bool {
        match self.keys.remove(&node) {
            Some(key) => {
                self.by_key.remove(&key);
                true
            }
            None => false,
        }
    }

    /// Puts `node` between the neighbours with keys `lo` and `hi` (`None`: the ends).
    fn insert_between(&mut self, lo: Option<u64>, hi: Option<u64>, node: NodeIndex<u32>) {
        let (low, high) = (lo.unwrap_or(0), hi.unwrap_or(u64::MAX));
        if high - low >= 2 {
            return self.place(low + (high - low) / 2, node);
        }
        // No room: spread the keys out and try again between the same neighbours.
        let (before, after) = (lo.map(|k| self.by_key[&k]), hi.map(|k| self.by_key[&k]));
        self.spread();
        let lo = before.and_then(|n| self.key(n));
        let hi = after.and_then(|n| self.key(n));
        let (low, high) = (lo.unwrap_or(0), hi.unwrap_or(u64::MAX));
        self.place(low + (high - low) / 2, node);
    }

    /// Gives the nodes evenly spaced keys over the lower half of the key space.
    fn spread(&mut self) {
        let nodes: Vec<NodeIndex<u32>> = self.iter().collect();
        let gap = (u64::MAX / 2) / (nodes.len() as u64 + 1);
        self.keys.clear();
        self.by_key = nodes
            .into_iter()
            .enumerate()
            .map(|(p, node)| {
                let key = gap * (p as u64 + 1);
                self.keys.insert(node, key);
                (key, node)
            })
            .collect();
    }

    fn place(&mut self, key: u64, node: NodeIndex<u32>) {
        self.by_key.insert(key, node);
        self.keys.insert(node, key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn order_of(order: &NodeOrder) -> Vec<u32> {
        order.iter().map(|i| i.index() as u32).collect()
    }

    #[test]
    fn inserts_keep_the_order_through_many_respreads() {
        let mut order = NodeOrder::default();
        let mut expected: Vec<u32> = Vec::new();
        for i in 0..4 {
            order.push(NodeIndex::new(i));
            expected.push(i as u32);
        }
        // 200 nodes squeezed in just before node 2 halve the same gap again and again.
        for i in 4..204 {
            order.insert_before(NodeIndex::new(2), NodeIndex::new(i));
            let at = expected.iter().position(|&n| n == 2).unwrap();
            expected.insert(at, i as u32);
        }
        // And 200 just after node 1, each after the one before.
        let mut prev = NodeIndex::new(1);
        for i in 204..404 {
            order.insert_after(prev, NodeIndex::new(i));
            let at = expected
                .iter()
                .position(|&n| n == prev.index() as u32)
                .unwrap();
            expected.insert(at + 1, i as u32);
            prev = NodeIndex::new(i);
        }
        order.insert_first(NodeIndex::new(404));
        expected.insert(0, 404);
        assert_eq!(order_of(&order), expected);
        let keys: Vec<u64> = order.iter().map(|n| order.key(n).unwrap()).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(order.remove(NodeIndex::new(2)));
        assert!(!order.remove(NodeIndex::new(2)));
        expected.retain(|&n| n != 2);
        assert_eq!(order_of(&order), expected);
        assert_eq!(order.len(), expected.len());
        assert_eq!(order.last(), Some(NodeIndex::new(3)));
    }

    #[test]
    fn a_missing_anchor_appends() {
        let mut order = NodeOrder::default();
        order.push(NodeIndex::new(0));
        order.insert_before(NodeIndex::new(9), NodeIndex::new(1));
        order.insert_after(NodeIndex::new(9), NodeIndex::new(2));
        assert_eq!(order_of(&order), [0, 1, 2]);
    }
}
