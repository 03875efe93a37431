//! `Graph::code`: the graph rendered as the Rust-like source of an equivalent `forward`
//! function (FX's `GraphModule.code`), for reading what a graph computes.

use crate::op_syntax::op_text_between;
use crate::{Graph, NodeKind, Result};

/// `self.layer1[0].conv1` for the path `layer1.0.conv1`.
fn field_path(path: &str) -> String {
    path.split('.').fold(String::from("self"), |acc, segment| {
        if segment.chars().all(|c| c.is_ascii_digit()) {
            format!("{acc}[{segment}]")
        } else {
            format!("{acc}.{segment}")
        }
    })
}

impl Graph {
    /// Rust-like source of a `forward` doing what the graph does: one `let` per node, leaf
    /// modules called through `call`, ops by name with their attributes.
    pub fn code(&self) -> Result<String> {
        let inputs: Vec<String> = self
            .placeholders()
            .iter()
            .map(|p| Ok(format!("{}: Tensor", self.name(p)?)))
            .collect::<Result<_>>()?;
        let mut lines = vec![format!(
            "fn forward(&self, {}) -> Result<Tensor> {{",
            inputs.join(", ")
        )];
        for id in self.nodes() {
            let node = self.node(&id)?;
            let args: Vec<String> = self
                .operands(&id)?
                .iter()
                .map(|o| self.name(o).map(str::to_string))
                .collect::<Result<_>>()?;
            let name = node.name.as_str();
            let line = match &node.kind {
                NodeKind::Placeholder { .. } => continue,
                NodeKind::GetAttr { target } => format!("let {name} = &{};", field_path(target)),
                NodeKind::CallModule { target, .. } => format!(
                    "let {name} = {}.call({})?;",
                    field_path(target),
                    args.join(", ")
                ),
                NodeKind::CallFunction { op } => {
                    let refs: Vec<String> = args.iter().map(|a| format!("&{a}")).collect();
                    let callee = op_text_between(op, "").unwrap_or_else(|_| op.name());
                    format!("let {name} = {callee}({})?;", refs.join(", "))
                }
                NodeKind::GetItem { index } => {
                    format!("let {name} = {}[{index}].clone();", args.join(", "))
                }
                NodeKind::Output => match args.len() {
                    1 => format!("Ok({})", args[0]),
                    _ => format!("Ok(({}))", args.join(", ")),
                },
            };
            lines.push(format!("    {line}"));
        }
        lines.push("}".into());
        Ok(lines.join("\n") + "\n")
    }
}
