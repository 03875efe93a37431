//! Fusion grouping for code generation: marks maximal groups of elementwise call_function
//! nodes of one output shape that a backend can emit as one kernel, together with a GEMM or
//! convolution whose epilogue they form and a reduction they feed. The pass only records each
//! member's group in its metadata (`fusion_group = "g0"`); it never changes what the graph
//! computes, and leaves views, module calls, multi-output ops and everything else ungrouped,
//! but for elementwise ops whose outputs share one shape (an optimizer update: new parameter
//! and state), which end a group: their users (the `getitem`s) never join one, so the update
//! takes the elementwise ops or the GEMM computing its gradient as its kernel's start.
//!
//! Groups grow from their output backwards: a node joins the group of its users only when all
//! of its users are in that one group. So every member but the group's output is used only
//! inside the group, a group has one output, and it is convex (a path leaving the group starts
//! at its output and can never come back in). Nothing joins a group through its producer: an
//! elementwise op feeding a convolution is the epilogue of whatever computed its input.

use crate::{Changed, Pass, Result};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use tessera_fx::{Graph, GraphModule, NodeId, NodeKind};
use tessera_tensor::op::FusionRole as Role;

/// The metadata key the pass writes.
pub const FUSION_GROUP_KEY: &str = "fusion_group";

/// A group's id; prints as the metadata spells it (`g3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub usize);

impl fmt::Display for GroupId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "g{}", self.0)
    }
}

/// The op a group's elementwise epilogue follows (the op table's [`Producer`]).
pub use tessera_tensor::op::Producer;

/// One kernel: an optional producer, elementwise ops, an optional final reduction.
#[derive(Debug, Clone)]
pub struct FusionGroup {
    pub id: GroupId,
    /// Every member, in graph order.
    pub nodes: Vec<NodeId>,
    pub producer: Option<Producer>,
    /// Whether the group ends in a reduction (its output).
    pub reduction: bool,
}

impl FusionGroup {
    /// The kernel kind: `elementwise`, `gemm+epilogue`, `conv+epilogue`, each possibly
    /// followed by `+reduction`.
    pub fn kind(&self) -> String {
        let head = match self.producer {
            None => "elementwise",
            Some(Producer::Gemm) => "gemm+epilogue",
            Some(Producer::Conv) => "conv+epilogue",
        };
        if self.reduction {
            format!("{head}+reduction")
        } else {
            head.to_string()
        }
    }
}

/// The groups of a graph, numbered in the order of their first member.
#[derive(Debug, Clone, Default)]
pub struct FusionGrouping {
    pub groups: Vec<FusionGroup>,
    /// The printed name of every member, for `Display`.
    names: HashMap<NodeId, String>,
}

impl FusionGrouping {
    /// The group of `node`, if it has one.
    pub fn group_of(&self, node: &NodeId) -> Option<GroupId> {
        self.groups
            .iter()
            .find(|g| g.nodes.contains(node))
            .map(|g| g.id)
    }
}

/// One line per group: `g0 gemm+epilogue: %linear, %add, %relu`.
impl fmt::Display for FusionGrouping {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.groups.is_empty() {
            return writeln!(f, "(no groups)");
        }
        for g in &self.groups {
            let names: Vec<String> = g
                .nodes
                .iter()
                .map(|n| self.names.get(n).cloned().unwrap_or_else(|| "%?".into()))
                .collect();
            writeln!(f, "{} {}: {}", g.id, g.kind(), names.join(", "))?;
        }
        Ok(())
    }
}

/// What a node can be in a group: the op's fusion role from the op table; nodes other than
/// call_function nodes with one output, or with several of one shape computed elementwise
/// (an optimizer update), run alone.
fn role(graph: &Graph, id: &NodeId) -> Result<Role> {
    let node = graph.node(id)?;
    let one_shape = node.meta.windows(2).all(|w| w[0].shape == w[1].shape);
    Ok(match &node.kind {
        NodeKind::CallFunction { op } if node.meta.len() == 1 => op.fusion_role(),
        NodeKind::CallFunction { op } if !node.meta.is_empty() && one_shape => {
            match op.fusion_role() {
                Role::Elementwise => Role::Elementwise,
                _ => Role::Alone,
            }
        }
        _ => Role::Alone,
    })
}

/// Whether `id` is a GEMM or convolution (the producer a group starts with).
fn producer_member(graph: &Graph, id: &NodeId) -> bool {
    matches!(role(graph, id), Ok(Role::Producer(_)))
}

/// A group being grown backwards from its output.
struct Growing {
    /// The shape of the elementwise members (a reduction's input shape).
    shape: Vec<usize>,
    members: Vec<NodeId>,
    elementwise: usize,
    producer: Option<Producer>,
    reduction: bool,
}

/// The fusion groups of `graph`.
pub fn fusion_groups(graph: &Graph) -> Result<FusionGrouping> {
    let order: Vec<NodeId> = graph.nodes().collect();
    let mut group_of: HashMap<NodeId, usize> = HashMap::new();
    let mut growing: Vec<Growing> = Vec::new();
    for id in order.iter().rev() {
        let role = role(graph, id)?;
        if role == Role::Alone {
            continue;
        }
        let shape = graph.node(id)?.meta[0].shape.clone();
        // The one group every user is in, if there is one.
        let users = graph.users(id)?;
        let mut user_groups = users.iter().map(|u| group_of.get(u).copied());
        let shared = match user_groups.next() {
            Some(Some(first)) if user_groups.all(|g| g == Some(first)) => Some(first),
            _ => None,
        };
        // A group's producer is its first computation: a node feeding the producer is its
        // operand, never part of its kernel (joining would take the producer's operand away
        // from the epilogue of the GEMM or convolution before it).
        let feeds_producer = shared.is_some() && users.iter().any(|u| producer_member(graph, u));
        let joined = match (role, shared) {
            _ if feeds_producer => None,
            (Role::Elementwise, Some(g)) if growing[g].shape == shape => {
                growing[g].elementwise += 1;
                Some(g)
            }
            (Role::Producer(p), Some(g))
                if growing[g].shape == shape
                    && growing[g].producer.is_none()
                    && growing[g].elementwise > 0 =>
            {
                growing[g].producer = Some(p);
                Some(g)
            }
            _ => None,
        };
        let g = match (joined, role) {
            (Some(g), _) => g,
            (None, Role::Elementwise) => {
                growing.push(Growing {
                    shape,
                    members: Vec::new(),
                    elementwise: 1,
                    producer: None,
                    reduction: false,
                });
                growing.len() - 1
            }
            (None, Role::Reduction) => {
                let operands = graph.operands(id)?;
                let Some(input) = operands.first() else {
                    continue;
                };
                let Some(input_meta) = graph.node(input)?.meta.first() else {
                    continue;
                };
                growing.push(Growing {
                    shape: input_meta.shape.clone(),
                    members: Vec::new(),
                    elementwise: 0,
                    producer: None,
                    reduction: true,
                });
                growing.len() - 1
            }
            (None, _) => continue,
        };
        growing[g].members.push(*id);
        group_of.insert(*id, g);
    }
    let position: HashMap<&NodeId, usize> = order.iter().enumerate().map(|(i, n)| (n, i)).collect();
    // Groups without an elementwise op (a lone reduction) are no fusion.
    let mut kept: BTreeMap<usize, FusionGroup> = BTreeMap::new();
    for g in growing.into_iter().filter(|g| g.elementwise > 0) {
        let mut nodes = g.members;
        nodes.sort_by_key(|n| position.get(n).copied().unwrap_or(usize::MAX));
        let first = nodes.first().and_then(|n| position.get(n)).copied();
        kept.insert(
            first.unwrap_or(usize::MAX),
            FusionGroup {
                id: GroupId(0),
                nodes,
                producer: g.producer,
                reduction: g.reduction,
            },
        );
    }
    let groups: Vec<FusionGroup> = kept
        .into_values()
        .enumerate()
        .map(|(i, mut g)| {
            g.id = GroupId(i);
            g
        })
        .collect();
    let names = groups
        .iter()
        .flat_map(|g| &g.nodes)
        .map(|&n| (n, graph.display(&n)))
        .collect();
    Ok(FusionGrouping { groups, names })
}

/// Records each node's fusion group in its metadata (and clears stale records).
pub struct FuseGroups;

impl Pass for FuseGroups {
    fn name(&self) -> &'static str {
        "fusion_groups"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let grouping = fusion_groups(&gm.graph)?;
        let mut wanted: HashMap<NodeId, String> = HashMap::new();
        for g in &grouping.groups {
            for n in &g.nodes {
                wanted.insert(*n, g.id.to_string());
            }
        }
        let order: Vec<NodeId> = gm.graph.nodes().collect();
        let mut changed = false;
        for id in order {
            let metadata = gm.graph.metadata_mut(&id)?;
            let before = metadata.get(FUSION_GROUP_KEY).cloned();
            match wanted.remove(&id) {
                Some(group) => {
                    metadata.insert(FUSION_GROUP_KEY.into(), group);
                }
                None => {
                    metadata.remove(FUSION_GROUP_KEY);
                }
            }
            changed |= metadata.get(FUSION_GROUP_KEY) != before.as_ref();
        }
        Ok(Changed::from_bool(changed))
    }
}
