//! How an [`Op`] is written in graph text: its name, then the attributes that the name does not
//! already say (`conv2d{params: {...}, bias: true}`), derived from the op's serde form.
//!
//! The serde form wraps the attributes in the enum variants that select the op
//! (`{"Conv": {"Forward": {...}}}`); [`VARIANT_PATHS`] lists those wrappers, so the text keeps
//! only the innermost attributes. An op whose path is missing still round-trips, printed with
//! its whole serde form. Non-finite float attributes (NaN, infinities) have no JSON form and
//! print as `null`, so they do not round-trip.

use crate::attr_text::{Attr, parse_block, render_block};
use crate::lexer::Lexer;
use crate::parse::ParseError;
use crate::{FxError, Result};
use tessera_tensor::Op;

/// The enum variants that select each op, outermost first.
const VARIANT_PATHS: &[&str] = &[
    "Unary.Neg",
    "Unary.Abs",
    "Unary.Sign",
    "Unary.Exp",
    "Unary.Log",
    "Unary.Sqrt",
    "Unary.Rsqrt",
    "Unary.Sin",
    "Unary.Cos",
    "Unary.Tanh",
    "Unary.Sigmoid",
    "Unary.Relu",
    "Unary.LeakyRelu",
    "Unary.Gelu",
    "Unary.Silu",
    "Binary.Add",
    "Binary.Sub",
    "Binary.Mul",
    "Binary.Div",
    "Binary.Pow",
    "Binary.Maximum",
    "Binary.Minimum",
    "Scalar",
    "Compare.Eq",
    "Compare.Ne",
    "Compare.Lt",
    "Compare.Le",
    "Compare.Gt",
    "Compare.Ge",
    "Where",
    "Clamp",
    "Reduce",
    "Softmax",
    "Matmul",
    "Linear",
    "View.Reshape",
    "View.Permute",
    "View.Narrow",
    "View.Expand",
    "View.Contiguous",
    "ToDType",
    "Conv.Forward",
    "Conv.BackwardInput",
    "Conv.BackwardWeight",
    "Pool.MaxPool2d",
    "Pool.MaxPool2dValues",
    "Pool.MaxPool2dBackward",
    "Pool.AvgPool2d",
    "Pool.AvgPool2dBackward",
    "Pool.AdaptiveAvgPool2d",
    "Pool.AdaptiveAvgPool2dBackward",
    "Norm.BatchNorm",
    "Norm.LayerNorm",
    "Norm.GroupNorm",
    "Dropout",
    "Embedding",
    "Index.Cat",
    "Index.IndexSelect",
    "Index.IndexAdd",
    "Index.Gather",
    "Index.ScatterAdd",
    "Index.OneHot",
    "Loss.Mse",
    "Loss.L1",
    "Loss.Nll",
    "Loss.BceWithLogits",
    "Quant.QuantizePerTensor",
    "Quant.QuantizePerChannel",
    "Quant.DequantizePerTensor",
    "Quant.DequantizePerChannel",
    "Quant.LinearDynamic",
    "Quant.Linear",
    "Quant.Conv2d",
];

/// An op as text: its name and its remaining attributes, if any.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OpText {
    pub name: String,
    pub attrs: Option<Attr>,
}

impl OpText {
    /// Equal names and attributes, whatever the order of the attributes' fields.
    fn same(&self, other: &OpText) -> bool {
        self.name == other.name
            && self.attrs.as_ref().map(Attr::to_json) == other.attrs.as_ref().map(Attr::to_json)
    }
}

/// The text of an op; a `Custom` op has none.
pub(crate) fn split_op(op: &Op) -> Result<OpText> {
    let value = Attr::of(op).map_err(|source| FxError::Unserializable {
        op: op.name(),
        source,
    })?;
    let attrs = paths()
        .filter_map(|path| strip(&value, &path))
        .max_by_key(|(depth, _)| *depth)
        .map(|(_, attrs)| attrs)
        .unwrap_or(Some(value));
    Ok(OpText {
        name: op.name(),
        attrs,
    })
}

/// The op that prints as `text`, if exactly that text.
pub(crate) fn join_op(text: &OpText) -> Option<Op> {
    paths()
        .chain(std::iter::once(Vec::new()))
        .filter_map(|path| wrap(&path, text.attrs.clone()))
        .filter_map(|value| serde_json::from_value::<Op>(value.to_json()).ok())
        .find(|op| split_op(op).is_ok_and(|t| t.same(text)))
}

fn paths() -> impl Iterator<Item = Vec<&'static str>> {
    VARIANT_PATHS.iter().map(|p| p.split('.').collect())
}

/// The attributes inside the wrappers of `path` and how many wrappers matched, or `None` if
/// `value` is not an op of that path.
fn strip(value: &Attr, path: &[&str]) -> Option<(usize, Option<Attr>)> {
    let mut value = value;
    for (i, variant) in path.iter().enumerate() {
        match value {
            Attr::String(s) if s == variant && i + 1 == path.len() => {
                return Some((path.len(), None));
            }
            Attr::Object(map) if map.len() == 1 && map[0].0 == *variant => value = &map[0].1,
            _ => return None,
        }
    }
    Some((path.len(), Some(value.clone())))
}

/// The serde form of the op with these attributes under the wrappers of `path`.
fn wrap(path: &[&str], attrs: Option<Attr>) -> Option<Attr> {
    let (mut value, outer) = match attrs {
        Some(attrs) => (attrs, path),
        None => {
            let (last, outer) = path.split_last()?;
            (Attr::String((*last).into()), outer)
        }
    };
    for variant in outer.iter().rev() {
        value = Attr::Object(vec![((*variant).into(), value)]);
    }
    Some(value)
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
