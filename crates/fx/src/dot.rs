//! Graphviz DOT export: one box per node (name, meta, what it does), edges from operands to
//! users labelled with the operand position.

use crate::Graph;
use crate::print::node_meta_text;
use petgraph::visit::EdgeRef;
use std::fmt::Write;

fn escape(text: &str) -> String {
    text.replace('\\', "\\\\").replace('"', "\\\"")
}

impl Graph {
    /// The graph in DOT, nodes and edges in node order.
    pub fn to_dot(&self) -> String {
        self.to_dot_styled(&|_| None)
    }

    /// [`Graph::to_dot`] with extra DOT attributes for some nodes, chosen by node name
    /// (`style="filled", fillcolor="#a6cee3"` to colour a fusion group).
    pub fn to_dot_styled(&self, node_attributes: &dyn Fn(&str) -> Option<String>) -> String {
        let mut out = String::from("digraph G {\n    node [shape=box, fontname=\"monospace\"];\n");
        for i in self.order.iter() {
            let node = &self.graph[i];
            let head = format!("%{} : {}", node.name, node_meta_text(&node.meta));
            let body = escape(&self.target_text(i));
            let extra = node_attributes(&node.name)
                .map(|a| format!(", {a}"))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "    \"{}\" [label=\"{}\\n{body}\"{extra}];",
                node.name,
                escape(&head)
            );
        }
        for i in self.order.iter() {
            let mut edges: Vec<_> = self
                .graph
                .edges_directed(i, petgraph::Direction::Incoming)
                .map(|e| (*e.weight(), e.source()))
                .collect();
            edges.sort();
            for (position, source) in edges {
                let _ = writeln!(
                    out,
                    "    \"{}\" -> \"{}\" [label=\"{position}\"];",
                    self.graph[source].name, self.graph[i].name
                );
            }
        }
        out.push_str("}\n");
        out
    }
}
