//! Printing a module tree exactly as PyTorch's `Module.__repr__` does.

use crate::Module;
use crate::walk::own;

/// Indents every line after the first by `spaces` (PyTorch's `_addindent`).
pub(crate) fn add_indent(s: &str, spaces: usize) -> String {
    let mut lines = s.split('\n');
    let first = lines.next().unwrap_or_default().to_string();
    let pad = " ".repeat(spaces);
    lines.fold(first, |acc, line| format!("{acc}\n{pad}{line}"))
}

/// `Name(extra)` or the multi-line tree with `(child): ...` lines.
pub fn repr(module: &dyn Module) -> String {
    if let Some(custom) = module.custom_repr() {
        return custom;
    }
    let extra = module.extra_repr();
    let extra_lines: Vec<String> = if extra.is_empty() {
        Vec::new()
    } else {
        extra.split('\n').map(String::from).collect()
    };
    let child_lines: Vec<String> = own(module)
        .children
        .into_iter()
        .map(|(name, child)| format!("({name}): {}", add_indent(&repr(child), 2)))
        .collect();
    let mut out = format!("{}(", crate::parametrize::class_name(module));
    if extra_lines.len() == 1 && child_lines.is_empty() {
        out.push_str(&extra_lines[0]);
    } else if !extra_lines.is_empty() || !child_lines.is_empty() {
        let lines: Vec<String> = extra_lines.into_iter().chain(child_lines).collect();
        out.push_str("\n  ");
        out.push_str(&lines.join("\n  "));
        out.push('\n');
    }
    out.push(')');
    out
}

/// [`repr`] on one line, as a graph's `call_module` node prints its module: a tree's child
/// lines are joined with `, ` inside their parentheses
/// (`TransformerEncoderLayer((self_attn): MultiheadAttention(...), (linear1): Linear(...))`).
pub fn one_line_repr(module: &dyn Module) -> String {
    let mut out = String::new();
    for line in repr(module).lines().map(str::trim) {
        let opens = out.ends_with('(') || out.is_empty();
        if !(opens || line.starts_with(')')) {
            out.push_str(", ");
        }
        out.push_str(line);
    }
    out
}
