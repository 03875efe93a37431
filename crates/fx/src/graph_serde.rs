//! Serde for [`Graph`]: the nodes in node order, each with its operands by name, so that a
//! saved graph is readable and independent of petgraph's indices.

use crate::{Graph, Node};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;

#[derive(Serialize, Deserialize)]
struct NodeRepr {
    #[serde(flatten)]
    node: Node,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    operands: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct GraphRepr {
    nodes: Vec<NodeRepr>,
    /// The buffers the trailing outputs are written into.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    buffer_mutations: Vec<String>,
}

impl Serialize for Graph {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let nodes = self
            .order
            .iter()
            .map(|i| NodeRepr {
                node: self.graph[i].clone(),
                operands: self
                    .operand_indices(i)
                    .into_iter()
                    .map(|o| self.graph[o].name.clone())
                    .collect(),
            })
            .collect();
        GraphRepr {
            nodes,
            buffer_mutations: self.mutations.clone(),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for Graph {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let repr = GraphRepr::deserialize(d)?;
        let mut graph = Graph::new();
        let mut indices = Vec::with_capacity(repr.nodes.len());
        for entry in &repr.nodes {
            let node = &entry.node;
            if graph.names.contains_key(&node.name) {
                return Err(D::Error::custom(format!(
                    "two nodes are named %{}",
                    node.name
                )));
            }
            let index =
                graph.add_unordered(node.name.clone(), node.kind.clone(), node.meta.clone(), &[]);
            graph.graph[index].metadata = node.metadata.clone();
            indices.push(index);
        }
        let by_name: HashMap<_, _> = graph.names.clone();
        for (entry, &index) in repr.nodes.iter().zip(&indices) {
            for (position, operand) in entry.operands.iter().enumerate() {
                let source = by_name.get(operand).ok_or_else(|| {
                    D::Error::custom(format!("%{} uses unknown node %{operand}", entry.node.name))
                })?;
                graph.graph.add_edge(*source, index, position as u32);
            }
            graph.order.push(index);
        }
        graph.mutations = repr.buffer_mutations;
        Ok(graph)
    }
}
