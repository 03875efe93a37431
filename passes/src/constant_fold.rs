//! Constant folding: evaluates once every subgraph of call_function and getitem nodes that
//! depends only on frozen get_attr tensors, stores each result as a new constant
//! (`_folded_0`, ...) and reads it with one get_attr. It leaves call_module nodes (a module may
//! hold state), dropout and custom ops, placeholders and non-frozen attributes alone.

use crate::{Changed, Pass, PassError, Result};
use std::collections::{BTreeSet, HashMap, HashSet};
use tessera_fx::interpreter::{GraphInterpreter, Interpreter};
use tessera_fx::{FxError, GraphModule, NodeId, NodeKind};
use tessera_nn::{Module, ModuleExt};
use tessera_tensor::{Op, Tensor};

/// Constant folding over frozen attributes: those named in `frozen`, or every get_attr target
/// when `freeze_all` is set (an inference graph whose weights no longer change).
#[derive(Debug, Clone, Default)]
pub struct ConstantFold {
    pub frozen: BTreeSet<String>,
    pub freeze_all: bool,
}

impl ConstantFold {
    /// Folds over every attribute.
    pub fn freeze_all() -> Self {
        ConstantFold {
            frozen: BTreeSet::new(),
            freeze_all: true,
        }
    }

    /// Folds over the attributes named in `names` only.
    pub fn frozen<I: IntoIterator<Item = S>, S: Into<String>>(names: I) -> Self {
        ConstantFold {
            frozen: names.into_iter().map(Into::into).collect(),
            freeze_all: false,
        }
    }

    fn is_frozen(&self, target: &str) -> bool {
        self.freeze_all || self.frozen.contains(target)
    }
}

/// Whether a call_function of `op` on constants gives the same result every time.
fn is_deterministic(op: &Op) -> bool {
    op.is_pure()
}

/// A fresh constant name `_folded_N` not yet taken by a constant or a parameter.
fn fresh_constant_name(gm: &GraphModule) -> String {
    (0..)
        .map(|i| format!("_folded_{i}"))
        .find(|n| !gm.constants.contains_key(n) && gm.get_parameter(n).is_err())
        .unwrap_or_else(|| "_folded".into())
}

impl Pass for ConstantFold {
    fn name(&self) -> &'static str {
        "constant_fold"
    }

    fn run(&self, gm: &mut GraphModule) -> Result<Changed> {
        let order: Vec<NodeId> = gm.graph.nodes().collect();
        // Values of the constant nodes, computed in node order.
        let mut values: HashMap<NodeId, Vec<Tensor>> = HashMap::new();
        let mut computed: HashSet<NodeId> = HashSet::new();
        {
            let mut interpreter = GraphInterpreter {
                root: gm.as_module(),
                constants: Some(&gm.constants),
            };
            for id in &order {
                let node = gm.graph.node(id)?;
                let operands = gm.graph.operands(id)?;
                let constant_operands = operands.iter().all(|o| values.contains_key(o));
                let value = match &node.kind {
                    NodeKind::GetAttr { target } if self.is_frozen(target) => {
                        let value =
                            interpreter
                                .get_attr(node, target)
                                .map_err(|source| FxError::Run {
                                    node: format!("%{} = get_attr[{target}]()", node.name),
                                    source,
                                })?;
                        vec![value.detach()]
                    }
                    NodeKind::CallFunction { op } if constant_operands && is_deterministic(op) => {
                        let args: Vec<&Tensor> = operands.iter().map(|o| &values[o][0]).collect();
                        let outs = op.apply(&args).map_err(|e| {
                            PassError::Unsupported(format!("folding %{}: {e}", node.name))
                        })?;
                        computed.insert(*id);
                        outs.into_iter().map(|t| t.detach()).collect()
                    }
                    NodeKind::GetItem { index } if constant_operands => {
                        computed.insert(*id);
                        vec![values[&operands[0]][*index].clone()]
                    }
                    _ => continue,
                };
                values.insert(*id, value);
            }
        }
        // Fold the computed single-value nodes that a non-constant node (or the output) uses.
        let mut changed = false;
        for id in order.iter().filter(|id| computed.contains(*id)) {
            let users = gm.graph.users(id)?;
            let boundary = users.iter().any(|u| !values.contains_key(u));
            let node = gm.graph.node(id)?;
            if !boundary || node.meta.len() != 1 {
                continue;
            }
            let meta = node.meta[0].clone();
            let name = fresh_constant_name(gm);
            gm.constants.insert(name.clone(), values[id][0].clone());
            let folded = gm.graph.insert_before(id, |g| g.get_attr(&name, meta))?;
            gm.graph.replace_all_uses_with(id, &folded)?;
            changed = true;
        }
        // Erase the folded subgraphs (constant nodes nobody uses now), and nothing else.
        for id in order.iter().rev().filter(|id| values.contains_key(*id)) {
            if gm.graph.users(id)?.is_empty() {
                gm.graph.erase(id)?;
            }
        }
        Ok(Changed::from_bool(changed))
    }
}
