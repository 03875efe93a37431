//! The text form of op attributes: serde values written like relaxed JSON (bare identifier
//! keys and strings, `{stride: [1, 1], reduction: Mean}`), and read back exactly.

use crate::lexer::Lexer;
use crate::names::is_identifier;
use crate::parse::ParseError;
use serde_json::{Map, Number, Value};
use std::fmt::Write;

/// Writes a value; floats keep a `.` or exponent so they read back as floats.
pub(crate) fn render(value: &Value, out: &mut String) {
    match value {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => write!(out, "{b}").unwrap_or_default(),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => write!(out, "{u}").unwrap_or_default(),
            (_, Some(i), _) => write!(out, "{i}").unwrap_or_default(),
            (_, _, Some(f)) => write!(out, "{f:?}").unwrap_or_default(),
            _ => out.push_str("null"),
        },
        Value::String(s) => render_string(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                render(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            render_entries(map, out);
            out.push('}');
        }
    }
}

/// The attribute block of a call_function: an object's entries, or a single other value,
/// between braces.
pub(crate) fn render_block(value: &Value, out: &mut String) {
    out.push('{');
    match value {
        Value::Object(map) => render_entries(map, out),
        other => render(other, out),
    }
    out.push('}');
}

fn render_entries(map: &Map<String, Value>, out: &mut String) {
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
pub(crate) fn parse_block(lx: &mut Lexer) -> Result<Value, ParseError> {
    lx.expect("{")?;
    lx.skip_spaces();
    let value = if lx.peek() == Some('}') || starts_entry(lx) {
        Value::Object(parse_entries(lx)?)
    } else {
        parse_value(lx)?
    };
    lx.expect("}")?;
    Ok(value)
}

/// Whether an object entry (`key:`) comes next.
fn starts_entry(lx: &Lexer) -> bool {
    let mut probe = Lexer::new(lx.rest(), 0);
    parse_key(&mut probe).is_ok() && probe.eat(":")
}

fn parse_entries(lx: &mut Lexer) -> Result<Map<String, Value>, ParseError> {
    let mut map = Map::new();
    lx.skip_spaces();
    if lx.peek() == Some('}') {
        return Ok(map);
    }
    loop {
        let key = parse_key(lx)?;
        lx.expect(":")?;
        map.insert(key, parse_value(lx)?);
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

/// Reads one value.
pub(crate) fn parse_value(lx: &mut Lexer) -> Result<Value, ParseError> {
    lx.skip_spaces();
    let start = lx.position();
    match lx.peek() {
        Some('{') => {
            lx.bump();
            let map = parse_entries(lx)?;
            lx.expect("}")?;
            Ok(Value::Object(map))
        }
        Some('[') => {
            lx.bump();
            let mut items = Vec::new();
            if !lx.eat("]") {
                loop {
                    items.push(parse_value(lx)?);
                    if !lx.eat(",") {
                        break;
                    }
                }
                lx.expect("]")?;
            }
            Ok(Value::Array(items))
        }
        Some('"') => Ok(Value::String(parse_quoted(lx)?)),
        Some(c) if c == '-' || c.is_ascii_digit() => {
            let text = lx.take_while(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            parse_number(text).ok_or_else(|| lx.error_at(start, format!("bad number `{text}`")))
        }
        _ => {
            let word = lx.ident("an attribute value")?;
            Ok(match word {
                "null" => Value::Null,
                "true" => Value::Bool(true),
                "false" => Value::Bool(false),
                other => Value::String(other.into()),
            })
        }
    }
}

fn parse_number(text: &str) -> Option<Value> {
    if text.contains(['.', 'e', 'E']) || text.contains("inf") || text.contains("NaN") {
        let f: f64 = text.parse().ok()?;
        Number::from_f64(f).map(Value::Number)
    } else if let Ok(u) = text.parse::<u64>() {
        Some(Value::Number(u.into()))
    } else {
        Some(Value::Number(text.parse::<i64>().ok()?.into()))
    }
}
