//! The text form of op attributes: serde values written like relaxed JSON (bare identifier
//! keys and strings, `{stride: [1, 1], reduction: Mean}`), fields in declaration order, and read
//! back exactly.

use crate::lexer::Lexer;
use crate::names::is_identifier;
use crate::parse::ParseError;
use serde_json::{Number, Value};
use std::fmt::Write;

/// A serde value whose maps keep their order (serde_json's `Map` sorts its keys).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Attr {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    Array(Vec<Attr>),
    Object(Vec<(String, Attr)>),
}

type Map = Vec<(String, Attr)>;

impl Attr {
    /// The value of JSON text, with fields in the order written.
    pub(crate) fn from_json_text(json: &str) -> Result<Attr, ParseError> {
        let mut lx = Lexer::new(json, 1);
        parse_value(&mut lx)
    }

    /// As a serde_json value, to deserialize from or compare regardless of key order.
    pub(crate) fn to_json(&self) -> Value {
        match self {
            Attr::Null => Value::Null,
            Attr::Bool(b) => Value::Bool(*b),
            Attr::Number(n) => Value::Number(n.clone()),
            Attr::String(s) => Value::String(s.clone()),
            Attr::Array(items) => Value::Array(items.iter().map(Attr::to_json).collect()),
            Attr::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (k.clone(), v.to_json())).collect())
            }
        }
    }
}

/// Writes a value; floats keep a `.` or exponent so they read back as floats.
pub(crate) fn render(value: &Attr, out: &mut String) {
    match value {
        Attr::Null => out.push_str("null"),
        Attr::Bool(b) => write!(out, "{b}").unwrap_or_default(),
        Attr::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => write!(out, "{u}").unwrap_or_default(),
            (_, Some(i), _) => write!(out, "{i}").unwrap_or_default(),
            (_, _, Some(f)) => write!(out, "{f:?}").unwrap_or_default(),
            _ => out.push_str("null"),
        },
        Attr::String(s) => render_string(s, out),
        Attr::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(item, out);
            }
            out.push(']');
        }
        Attr::Object(map) => {
            out.push('{');
            render_entries(map, out);
            out.push('}');
        }
    }
}

/// The attribute block of a call_function: an object's entries, or a single other value,
/// between braces.
pub(crate) fn render_block(value: &Attr, out: &mut String) {
    out.push('{');
    match value {
        Attr::Object(map) => render_entries(map, out),
        other => render(other, out),
    }
    out.push('}');
}

fn render_entries(map: &Map, out: &mut String) {
    for (i, (key, item)) in map.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        render_string(key, out);
        out.push_str(": ");
        render(item, out);
    }
}

fn render_string(s: &str, out: &mut String) {
    if is_identifier(s) && !matches!(s, "null" | "true" | "false") {
        out.push_str(s);
    } else {
        out.push_str(&serde_json::to_string(s).unwrap_or_default());
    }
}

/// Reads what [`render_block`] wrote, the `{` included.
pub(crate) fn parse_block(lx: &mut Lexer) -> Result<Attr, ParseError> {
    lx.expect("{")?;
    lx.skip_spaces();
    let value = if lx.peek() == Some('}') || starts_entry(lx) {
        Attr::Object(parse_entries(lx, 1)?)
    } else {
        parse_nested(lx, 1)?
    };
    lx.expect("}")?;
    Ok(value)
}

/// Whether an object entry (`key:`) comes next.
fn starts_entry(lx: &Lexer) -> bool {
    let mut probe = Lexer::new(lx.rest(), 0);
    parse_key(&mut probe).is_ok() && probe.eat(":")
}

fn parse_entries(lx: &mut Lexer, depth: usize) -> Result<Map, ParseError> {
    let mut map = Map::new();
    lx.skip_spaces();
    if lx.peek() == Some('}') {
        return Ok(map);
    }
    loop {
        let key = parse_key(lx)?;
        lx.expect(":")?;
        let value = parse_nested(lx, depth)?;
        map.push((key, value));
        if !lx.eat(",") {
            return Ok(map);
        }
    }
}

fn parse_key(lx: &mut Lexer) -> Result<String, ParseError> {
    lx.skip_spaces();
    if lx.peek() == Some('"') {
        parse_quoted(lx)
    } else {
        Ok(lx.ident("an attribute name")?.to_string())
    }
}

fn parse_quoted(lx: &mut Lexer) -> Result<String, ParseError> {
    let start = lx.position();
    let rest = lx.rest();
    let mut stream = serde_json::Deserializer::from_str(rest).into_iter::<String>();
    match stream.next() {
        Some(Ok(s)) => {
            lx.advance(stream.byte_offset());
            Ok(s)
        }
        _ => Err(lx.error_at(start, "expected a quoted string")),
    }
}

/// How deeply attribute values may nest. Op attributes nest two or three levels; the limit
/// keeps hostile text (`[[[[...`) from exhausting the stack.
pub(crate) const MAX_DEPTH: usize = 64;

/// Reads one value.
pub(crate) fn parse_value(lx: &mut Lexer) -> Result<Attr, ParseError> {
    parse_nested(lx, 0)
}

/// Reads one value `depth` levels inside others.
fn parse_nested(lx: &mut Lexer, depth: usize) -> Result<Attr, ParseError> {
    lx.skip_spaces();
    let start = lx.position();
    if depth >= MAX_DEPTH && matches!(lx.peek(), Some('{' | '[')) {
        return Err(lx.error_at(
            start,
            format!("attribute values nest more than {MAX_DEPTH} levels deep"),
        ));
    }
    match lx.peek() {
        Some('{') => {
            lx.bump();
            let map = parse_entries(lx, depth + 1)?;
            lx.expect("}")?;
            Ok(Attr::Object(map))
        }
        Some('[') => {
            lx.bump();
            let mut items = Vec::new();
            if !lx.eat("]") {
                loop {
                    items.push(parse_nested(lx, depth + 1)?);
                    if !lx.eat(",") {
                        break;
                    }
                }
                lx.expect("]")?;
            }
            Ok(Attr::Array(items))
        }
        Some('"') => Ok(Attr::String(parse_quoted(lx)?)),
        Some(c) if c == '-' || c.is_ascii_digit() => {
            let text = lx.take_while(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            parse_number(text).ok_or_else(|| lx.error_at(start, format!("bad number `{text}`")))
        }
        _ => {
            let word = lx.ident("an attribute value")?;
            Ok(match word {
                "null" => Attr::Null,
                "true" => Attr::Bool(true),
                "false" => Attr::Bool(false),
                other => Attr::String(other.into()),
            })
        }
    }
}

fn parse_number(text: &str) -> Option<Attr> {
    if text.contains(['.', 'e', 'E']) || text.contains("inf") || text.contains("NaN") {
        let f: f64 = text.parse().ok()?;
        Number::from_f64(f).map(Attr::Number)
    } else if let Ok(u) = text.parse::<u64>() {
        Some(Attr::Number(u.into()))
    } else {
        Some(Attr::Number(text.parse::<i64>().ok()?.into()))
    }
}
