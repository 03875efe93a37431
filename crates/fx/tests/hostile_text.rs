//! Hostile graph text: attribute values nested past any real op's (`[[[[...`, `{a: {a: ...`)
//! are a parse error naming the limit, not a stack overflow (about 32k levels used to abort).

use tessera_fx::{Graph, ParseError};

fn graph_with_attrs(attrs: &str) -> String {
    format!("graph(x: f32[2]):\n    %r : f32[2] = call_function[relu]{attrs}(%x)\n    return %r\n")
}

/// The error parsing an op with the attributes `attrs`, checked to name the nesting limit.
fn nesting_limit_error(attrs: &str) -> ParseError {
    let e = Graph::parse_unverified(&graph_with_attrs(attrs)).unwrap_err();
    assert!(e.message.contains("nest more than 64 levels"), "{e}");
    e
}

#[test]
fn deeply_nested_arrays_are_an_error() {
    let depth = 100_000;
    let attrs = format!("{{{}{}}}", "[".repeat(depth), "]".repeat(depth));
    assert_eq!(nesting_limit_error(&attrs).line, 2);
}

#[test]
fn deeply_nested_objects_are_an_error() {
    let depth = 100_000;
    let attrs = format!("{}1{}", "{a: ".repeat(depth), "}".repeat(depth));
    nesting_limit_error(&attrs);
}

#[test]
fn nesting_within_the_limit_still_parses_as_far_as_the_op() {
    // Fifty levels parse; the op then rejects the attributes it does not have.
    let attrs = format!("{{{}{}}}", "[".repeat(50), "]".repeat(50));
    let e = Graph::parse_unverified(&graph_with_attrs(&attrs)).unwrap_err();
    assert!(
        e.message.contains("no op `relu` with these attributes"),
        "{e}"
    );
}
