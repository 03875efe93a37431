//! The tabular form of a graph (FX's `print_tabular`): one row per node with its opcode, name,
//! target, operands and users.

use crate::{Graph, NodeKind};

impl Graph {
    /// A table with columns opcode, name, target, args and users, aligned with spaces.
    pub fn tabular(&self) -> String {
        let header = ["opcode", "name", "target", "args", "users"].map(String::from);
        let mut rows = vec![header];
        for i in self.order.iter() {
            let node = &self.graph[i];
            let target = match &node.kind {
                NodeKind::Placeholder { target } | NodeKind::GetAttr { target } => target.clone(),
                NodeKind::CallModule { target, .. } => target.clone(),
                NodeKind::Output => "output".into(),
                _ => {
                    let text = self.target_text(i);
                    let start = text.find('[').map_or(0, |p| p + 1);
                    text[start..].replacen(']', "", 1)
                }
            };
            let users: Vec<String> = self
                .user_indices(i)
                .into_iter()
                .map(|u| format!("%{}", self.graph[u].name))
                .collect();
            rows.push([
                node.kind.opcode().into(),
                node.name.clone(),
                target,
                format!("({})", self.operand_list(i)),
                format!("[{}]", users.join(", ")),
            ]);
        }
        let widths: Vec<usize> = (0..5)
            .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
            .collect();
        let rule: [String; 5] = std::array::from_fn(|c| "-".repeat(widths[c]));
        rows.insert(1, rule);
        let mut out = String::new();
        for row in rows {
            let cells: Vec<String> = row
                .iter()
                .zip(&widths)
                .map(|(cell, &w)| format!("{cell:<w$}"))
                .collect();
            out.push_str(cells.join("  ").trim_end());
            out.push('\n');
        }
        out
    }
}
