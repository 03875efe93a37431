//! Parse errors say what was expected, with the line and column where it went wrong.

use tessera_fx::{Graph, ParseError};

fn error(text: &str) -> ParseError {
    Graph::parse_unverified(text).expect_err("the text is invalid")
}

fn at(text: &str) -> (usize, usize, String) {
    let e = error(text);
    (e.line, e.column, e.message)
}

#[test]
fn empty_text_is_an_error_at_line_one() {
    assert_eq!(at("").0, 1);
}

#[test]
fn header_without_graph_keyword_names_the_expected_token() {
    assert_eq!(
        at("grph(x: f32[2]):\n"),
        (1, 1, "expected `graph`, found `grph(x: f32[`".into())
    );
}

#[test]
fn unknown_dtype_points_at_the_dtype() {
    assert_eq!(
        at("graph(x: f31[2]):\n    return %x\n"),
        (1, 10, "unknown dtype `f31`".into())
    );
}

#[test]
fn unknown_operand_points_at_its_name() {
    assert_eq!(
        at("graph(x: f32[2]):\n    %r : f32[2] = call_function[relu](%y)\n    return %r\n"),
        (2, 40, "unknown node %y".into())
    );
}

#[test]
fn duplicate_name_points_at_the_second_definition() {
    assert_eq!(
        at("graph(x: f32[2]):\n    %x : f32[2] = call_function[relu](%x)\n    return %x\n"),
        (2, 6, "a node named %x is already defined".into())
    );
}

#[test]
fn unknown_op_points_at_the_op_name() {
    assert_eq!(
        at("graph(x: f32[2]):\n    %r : f32[2] = call_function[frobnicate](%x)\n"),
        (2, 33, "no op `frobnicate` with these attributes".into())
    );
}

#[test]
fn wrong_attributes_are_an_unknown_op() {
    let (line, column, message) =
        at("graph(x: f32[2]):\n    %r : f32[2] = call_function[cat]{dim: true}(%x)\n");
    assert_eq!((line, column), (2, 33));
    assert_eq!(message, "no op `cat` with these attributes");
}

#[test]
fn unknown_opcode_lists_the_known_ones() {
    let (line, column, message) = at("graph():\n    %r : f32[2] = call_method[relu]()\n");
    assert_eq!((line, column), (2, 19));
    assert!(
        message.starts_with("unknown opcode `call_method`"),
        "{message}"
    );
}

#[test]
fn trailing_text_is_reported_where_it_starts() {
    assert_eq!(
        at("graph(x: f32[2]):\n    return %x junk\n"),
        (2, 15, "unexpected `junk` at the end of the line".into())
    );
}

#[test]
fn unbalanced_module_repr_is_reported() {
    let (line, _, message) =
        at("graph(x: f32[2]):\n    %m : f32[2] = call_module[m: Linear(2, 2](%x)\n");
    assert_eq!(line, 2);
    assert!(message.contains("unbalanced"), "{message}");
}

#[test]
fn display_of_a_parse_error_gives_line_and_column() {
    let e = error("graph(x: f32[2]):\n    %r f32[2]\n");
    assert_eq!(
        e.to_string(),
        "line 2, column 8: expected `:`, found `f32[2]`"
    );
}
