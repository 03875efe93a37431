//! Reads the printed form back into a [`Graph`] (`Graph::parse`), so that print -> parse ->
//! print is the identity; syntax errors give the line and column, and the graph read is
//! verified, so hand-written text with a wrong shape or a cycle is an error here.

use crate::graph::module_kind_of_repr;
use crate::lexer::Lexer;
use crate::op_syntax::read_op;
pub use crate::parse_error::ParseError;
use crate::{FxError, Graph, NodeKind};
use petgraph::stable_graph::NodeIndex;
use std::collections::HashMap;
use tessera_tensor::{DType, TensorMeta};

/// A use of a node by name, with where it was written.
struct Use {
    name: String,
    at: ParseError,
}

/// One parsed node before the graph is built (so operands may be named before defined).
struct Entry {
    name: Option<Use>,
    kind: NodeKind,
    meta: Vec<TensorMeta>,
    operands: Vec<Use>,
    /// The buffers an output's trailing operands are written into.
    mutations: Vec<String>,
}

impl Graph {
    /// Reads a graph in the form `Display` prints and verifies it ([`Graph::verify`]): a
    /// syntax error is [`FxError::Parse`], a graph that reads but is invalid (a shape that
    /// disagrees with its op, a cycle, no output) is [`FxError::Verify`].
    pub fn parse(text: &str) -> Result<Graph, FxError> {
        let graph = Graph::parse_unverified(text)?;
        graph.verify()?;
        Ok(graph)
    }

    /// Reads a graph in the form `Display` prints without verifying it: for building invalid
    /// graphs on purpose (tests of [`Graph::verify`] and of passes' error paths).
    pub fn parse_unverified(text: &str) -> Result<Graph, ParseError> {
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let (header_line, header) = lines
            .by_ref()
            .find(|(_, l)| !l.trim().is_empty())
            .ok_or_else(|| ParseError {
                line: 1,
                column: 1,
                message: "expected `graph(...):`, found an empty text".into(),
            })?;
        let mut entries = parse_header(&mut Lexer::new(header, header_line))?;
        for (number, line) in lines {
            if !line.trim().is_empty() {
                entries.push(parse_line(&mut Lexer::new(line, number))?);
            }
        }
        build(entries)
    }
}

fn parse_header(lx: &mut Lexer) -> Result<Vec<Entry>, ParseError> {
    lx.expect("graph")?;
    lx.expect("(")?;
    let mut entries = Vec::new();
    if !lx.eat(")") {
        loop {
            let name = name_use(lx, "an input name")?;
            lx.expect(":")?;
            let meta = parse_meta(lx)?;
            entries.push(Entry {
                kind: NodeKind::Placeholder {
                    target: name.name.clone(),
                },
                name: Some(name),
                meta,
                operands: Vec::new(),
                mutations: Vec::new(),
            });
            if !lx.eat(",") {
                break;
            }
        }
        lx.expect(")")?;
    }
    lx.expect(":")?;
    expect_end(lx)?;
    Ok(entries)
}

fn parse_line(lx: &mut Lexer) -> Result<Entry, ParseError> {
    if lx.eat("return") {
        let items = if lx.eat("(") {
            let items = return_items(lx)?;
            lx.expect(")")?;
            items
        } else {
            vec![return_item(lx)?]
        };
        expect_end(lx)?;
        let mut operands = Vec::with_capacity(items.len());
        let mut mutations = Vec::new();
        for (value, target) in items {
            match target {
                Some(target) => mutations.push(target),
                None if !mutations.is_empty() => {
                    let mut at = value.at;
                    at.message =
                        "a result cannot follow a buffer mutation (`%value -> buffer`)".into();
                    return Err(at);
                }
                None => {}
            }
            operands.push(value);
        }
        return Ok(Entry {
            name: None,
            kind: NodeKind::Output,
            meta: Vec::new(),
            operands,
            mutations,
        });
    }
    lx.expect("%")?;
    let name = name_use(lx, "a node name")?;
    lx.expect(":")?;
    let meta = parse_meta(lx)?;
    lx.expect("=")?;
    lx.skip_spaces();
    let opcode_at = lx.position();
    let opcode = lx.ident("an opcode")?;
    lx.expect("[")?;
    let (kind, has_operands) = match opcode {
        "get_attr" => {
            let target = lx.path("an attribute path")?.to_string();
            (NodeKind::GetAttr { target }, false)
        }
        "call_module" => {
            let target = lx.path("a module path")?.to_string();
            lx.expect(":")?;
            lx.skip_spaces();
            let repr_at = lx.position();
            let module_repr = lx.balanced_until_bracket()?.to_string();
            let module_kind = module_kind_of_repr(&module_repr)
                .ok_or_else(|| lx.error_at(repr_at, "expected a module repr like `Conv2d(...)`"))?;
            let kind = NodeKind::CallModule {
                target,
                kind: module_kind,
                module_repr,
            };
            (kind, true)
        }
        "call_function" => {
            let op = read_op(lx, "]")?;
            return finish(lx, name, NodeKind::CallFunction { op }, meta, true);
        }
        "getitem" => {
            let index = lx.usize("an output index")?;
            (NodeKind::GetItem { index }, true)
        }
        other => {
            return Err(lx.error_at(
                opcode_at,
                format!("unknown opcode `{other}`: expected call_module, call_function, get_attr or getitem"),
            ));
        }
    };
    lx.expect("]")?;
    finish(lx, name, kind, meta, has_operands)
}

fn finish(
    lx: &mut Lexer,
    name: Use,
    kind: NodeKind,
    meta: Vec<TensorMeta>,
    has_operands: bool,
) -> Result<Entry, ParseError> {
    let operands = if has_operands {
        lx.expect("(")?;
        let operands = operand_list(lx)?;
        lx.expect(")")?;
        operands
    } else {
        Vec::new()
    };
    expect_end(lx)?;
    Ok(Entry {
        name: Some(name),
        kind,
        meta,
        operands,
        mutations: Vec::new(),
    })
}

fn expect_end(lx: &mut Lexer) -> Result<(), ParseError> {
    lx.skip_spaces();
    if lx.at_end() {
        Ok(())
    } else {
        Err(lx.error(format!("unexpected {} at the end of the line", lx.found())))
    }
}

fn name_use(lx: &mut Lexer, what: &str) -> Result<Use, ParseError> {
    lx.skip_spaces();
    let at = lx.error("");
    let name = lx.ident(what)?.to_string();
    Ok(Use { name, at })
}

fn operand(lx: &mut Lexer) -> Result<Use, ParseError> {
    lx.expect("%")?;
    name_use(lx, "an operand name")
}

/// `%a`, or a buffer mutation `%a -> bn.running_mean`.
fn return_item(lx: &mut Lexer) -> Result<(Use, Option<String>), ParseError> {
    let value = operand(lx)?;
    let target = match lx.eat("->") {
        true => Some(lx.path("a buffer path")?.to_string()),
        false => None,
    };
    Ok((value, target))
}

/// The items of a parenthesised `return`, up to its closing `)` (not consumed).
fn return_items(lx: &mut Lexer) -> Result<Vec<(Use, Option<String>)>, ParseError> {
    let mut items = Vec::new();
    lx.skip_spaces();
    if lx.peek() == Some(')') {
        return Ok(items);
    }
    loop {
        items.push(return_item(lx)?);
        if !lx.eat(",") {
            return Ok(items);
        }
    }
}

/// `%a, %b` up to a closing `)` (not consumed).
fn operand_list(lx: &mut Lexer) -> Result<Vec<Use>, ParseError> {
    let mut operands = Vec::new();
    lx.skip_spaces();
    if lx.peek() == Some(')') {
        return Ok(operands);
    }
    loop {
        operands.push(operand(lx)?);
        if !lx.eat(",") {
            return Ok(operands);
        }
    }
}

/// `f32[1, 3]`, or a tuple `(f32[2], i64[2])`.
fn parse_meta(lx: &mut Lexer) -> Result<Vec<TensorMeta>, ParseError> {
    if !lx.eat("(") {
        return Ok(vec![tensor_meta(lx)?]);
    }
    let mut metas = Vec::new();
    if !lx.eat(")") {
        loop {
            metas.push(tensor_meta(lx)?);
            if !lx.eat(",") {
                break;
            }
        }
        lx.expect(")")?;
    }
    Ok(metas)
}

fn tensor_meta(lx: &mut Lexer) -> Result<TensorMeta, ParseError> {
    lx.skip_spaces();
    let at = lx.position();
    let word = lx.ident("a dtype")?;
    let dtype = DType::ALL
        .into_iter()
        .find(|d| d.to_string() == word)
        .ok_or_else(|| lx.error_at(at, format!("unknown dtype `{word}`")))?;
    lx.expect("[")?;
    let mut shape = Vec::new();
    if !lx.eat("]") {
        loop {
            shape.push(lx.usize("a dimension")?);
            if !lx.eat(",") {
                break;
            }
        }
        lx.expect("]")?;
    }
    Ok(TensorMeta::new(shape, dtype))
}

/// Builds the graph: every named node first (so uses may precede definitions), then edges.
fn build(entries: Vec<Entry>) -> Result<Graph, ParseError> {
    let mut graph = Graph::new();
    let mut indices: Vec<Option<NodeIndex<u32>>> = Vec::with_capacity(entries.len());
    for entry in &entries {
        let index = match &entry.name {
            Some(name) => {
                if graph.names.contains_key(&name.name) {
                    let mut at = name.at.clone();
                    at.message = format!("a node named %{} is already defined", name.name);
                    return Err(at);
                }
                let kind = entry.kind.clone();
                Some(graph.add_unordered(name.name.clone(), kind, entry.meta.clone(), &[]))
            }
            None => None,
        };
        indices.push(index);
    }
    let by_name: HashMap<String, NodeIndex<u32>> = graph.names.clone();
    for (entry, index) in entries.into_iter().zip(indices) {
        let index = match index {
            Some(index) => index,
            None => {
                let name = graph.fresh_name("output");
                graph.mutations = entry.mutations;
                graph.add_unordered(name, entry.kind, entry.meta, &[])
            }
        };
        for (position, operand) in entry.operands.into_iter().enumerate() {
            let Some(&source) = by_name.get(&operand.name) else {
                let mut at = operand.at;
                at.message = format!("unknown node %{}", operand.name);
                return Err(at);
            };
            graph.graph.add_edge(source, index, position as u32);
        }
        graph.order.push(index);
    }
    Ok(graph)
}
