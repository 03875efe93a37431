//! The text around every kernel body of this crate: leading comments, the module header
//! (`.version`, `.target`, `.address_size 64`) and the `.visible .entry` whose parameters are
//! `.u64` buffer pointers, so one launcher runs every kernel.

use crate::PtxTarget;
use std::fmt::Write;

/// Appends the `about` lines as comments, then the header for `target`.
pub(crate) fn header(ptx: &mut String, about: &[String], target: &PtxTarget) {
    for line in about {
        let _ = writeln!(ptx, "// {line}");
    }
    let _ = writeln!(ptx, ".version {}.{}", target.version.0, target.version.1);
    let _ = writeln!(ptx, ".target sm_{}", target.sm);
    let _ = writeln!(ptx, ".address_size 64\n");
}

/// Appends entry `name` taking one `.u64` pointer per name of `params`, its body `body`.
pub(crate) fn entry(ptx: &mut String, name: &str, params: &[String], body: &str) {
    let params: Vec<String> = params
        .iter()
        .map(|p| format!("\t.param .u64 {p}"))
        .collect();
    let _ = writeln!(
        ptx,
        ".visible .entry {name}(\n{}\n)\n{{",
        params.join(",\n")
    );
    ptx.push_str(body);
    ptx.push_str("}\n");
}
