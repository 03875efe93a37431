//! The graph-text target: printed graph IR parsed (and verified); whatever parses must print
//! and parse back to the same graph, and, when small, run on ones as it declares.

use tessera_fx::Graph;
use tessera_fx::trace::TracedGraph;

use crate::memory::{MemoryBound, measure};
use crate::run_graph::{ones_for_attributes, run_if_small};

/// The parser's bound: tokens, nodes and their metas grow with the text; attribute nesting is
/// limited in depth, and verifying costs O(rank) per value, never O(elements).
pub const GRAPH_TEXT_MEMORY: MemoryBound = MemoryBound {
    per_input_byte: 64,
    fixed: 1 << 20,
};

/// Parses `data` as printed graph text; panics if parsing panics, exceeds
/// [`GRAPH_TEXT_MEMORY`], a parsed graph does not print and parse back the same, or a small
/// one runs to other shapes than it declares. Returns the parse's peak heap bytes.
pub fn graph_text(data: &[u8]) -> usize {
    let Ok(text) = std::str::from_utf8(data) else {
        return 0;
    };
    let (graph, peak) = measure(|| Graph::parse(text));
    GRAPH_TEXT_MEMORY.check("Graph::parse", data.len(), peak);
    let Ok(graph) = graph else {
        return peak;
    };
    let printed = graph.to_string();
    let back = Graph::parse(&printed).expect("a printed graph parses back");
    assert!(
        back.same_structure(&graph),
        "parse(print(g)) differs from g:\n{printed}"
    );
    assert_eq!(back.to_string(), printed, "printing is not a fixpoint");
    if let Some(attributes) = ones_for_attributes(&graph) {
        run_if_small(&TracedGraph { graph, attributes });
    }
    peak
}
