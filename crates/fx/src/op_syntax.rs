//! How an [`Op`] is written in graph text: its name, then the attributes that the name does not
//! already say (`cat{dim: 1}`). Both come from the op table ([`Op::name`],
//! [`Op::attributes`], [`Op::from_text`]), so this file knows no op. Non-finite float
//! attributes (NaN, infinities) have no JSON form and print as `null`, so they do not
//! round-trip; a user-defined op that is not registered prints with `{custom}` and does not
//! parse back.

use crate::attr_text::{Attr, parse_block, render_block};
use crate::lexer::Lexer;
use crate::parse::ParseError;
use crate::{FxError, Result};
use tessera_tensor::Op;

/// An op as text: its name and its remaining attributes, if any.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpText {
    pub name: String,
    pub attrs: Option<Attr>,
}

/// The text of an op; an error for an op with no text form (an unregistered `Custom` op).
pub(crate) fn split_op(op: &Op) -> Result<OpText> {
    if !op.has_text() {
        return Err(FxError::Unserializable { op: op.name() });
    }
    let attrs = op
        .attributes()
        .map(|json| Attr::from_json_text(&json))
        .transpose()
        .map_err(|source| FxError::AttributeText {
            op: op.name(),
            source,
        })?;
    Ok(OpText {
        name: op.name(),
        attrs,
    })
}

/// The op that prints as `text`, if exactly that text.
pub(crate) fn join_op(text: &OpText) -> Option<Op> {
    let attrs = text.attrs.as_ref().map(Attr::to_json);
    Op::from_text(&text.name, attrs.as_ref())
}

/// The text of an op, e.g. `relu`, `cat{dim: 1}` (a graph prints `call_function[cat]{dim: 1}`);
/// an error for a `Custom` op.
pub fn op_to_text(op: &Op) -> Result<String> {
    op_text_between(op, "")
}

/// The op's name, then `between`, then its attribute block if it has one.
pub(crate) fn op_text_between(op: &Op, between: &str) -> Result<String> {
    let text = split_op(op)?;
    let mut out = text.name;
    out.push_str(between);
    if let Some(attrs) = &text.attrs {
        render_block(attrs, &mut out);
    }
    Ok(out)
}

/// Reads what [`op_to_text`] writes.
pub fn parse_op(text: &str) -> std::result::Result<Op, ParseError> {
    let mut lx = Lexer::new(text, 1);
    let op = read_op(&mut lx, "")?;
    lx.skip_spaces();
    if !lx.at_end() {
        return Err(lx.error(format!("unexpected {} after the op", lx.found())));
    }
    Ok(op)
}

/// Reads an op name, then `between` (`]` in a graph line), then the optional attribute block.
pub(crate) fn read_op(lx: &mut Lexer, between: &str) -> std::result::Result<Op, ParseError> {
    lx.skip_spaces();
    let at = lx.position();
    let name = lx.ident("an op name")?.to_string();
    lx.expect(between)?;
    lx.skip_spaces();
    let attrs = if lx.peek() == Some('{') {
        Some(parse_block(lx)?)
    } else {
        None
    };
    let text = OpText { name, attrs };
    join_op(&text)
        .ok_or_else(|| lx.error_at(at, format!("no op `{}` with these attributes", text.name)))
}
