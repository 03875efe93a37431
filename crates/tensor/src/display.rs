//! `Display` for tensors, printed exactly as PyTorch's `repr` with its default print options
//! (`torch/_tensor_str.py`): precision 4, summarised past 1000 elements with 3 edge items,
//! 80 columns. Only the grad_fn suffix differs, since it carries Tessera's node names.

use crate::{DType, Device, Result, Tensor};
use std::fmt;

const PRECISION: usize = 4;
const THRESHOLD: usize = 1000;
const EDGE_ITEMS: usize = 3;
const LINE_WIDTH: usize = 80;
const PREFIX: &str = "tensor(";

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match render(self) {
            Ok(text) => f.write_str(&text),
            Err(e) => write!(f, "{PREFIX}<unprintable: {e}>)"),
        }
    }
}

/// The whole repr: `tensor(` + the nested contents + the suffixes + `)`.
fn render(tensor: &Tensor) -> Result<String> {
    let x = tensor.detach();
    let dtype = x.dtype();
    if x.is_meta() {
        // PyTorch: `tensor(..., device='meta', size=(2, 3))`.
        let mut text = format!(
            "{PREFIX}..., device='meta', size={}",
            python_tuple(&x.shape())
        );
        if dtype != DType::F32 {
            text.push_str(&format!(", dtype={}", dtype.torch_name()));
        }
        return Ok(text + ")");
    }
    let indent = PREFIX.len();
    let mut suffixes = Vec::new();
    if x.device() != Device::Cpu {
        suffixes.push(format!("device='{}'", x.device()));
    }
    let contents = if x.numel() == 0 {
        let shape = x.shape();
        if shape.len() != 1 {
            suffixes.push(format!("size={}", python_tuple(&shape)));
        }
        if dtype != DType::F32 {
            suffixes.push(format!("dtype={}", dtype.torch_name()));
        }
        "[]".to_string()
    } else {
        if !matches!(dtype, DType::F32 | DType::I64 | DType::Bool) {
            suffixes.push(format!("dtype={}", dtype.torch_name()));
        }
        // Values print from a host copy, as PyTorch's do.
        contents(&x.to_device(Device::Cpu)?, indent)?
    };
    if let Some(name) = tensor.grad_fn_name() {
        suffixes.push(format!("grad_fn=<{name}>"));
    } else if tensor.requires_grad() {
        suffixes.push("requires_grad=True".to_string());
    }
    Ok(add_suffixes(
        format!("{PREFIX}{contents}"),
        &suffixes,
        indent,
    ))
}

/// Python's `str(tuple(shape))`.
fn python_tuple(shape: &[usize]) -> String {
    let items: Vec<String> = shape.iter().map(usize::to_string).collect();
    match items.len() {
        1 => format!("({},)", items[0]),
        _ => format!("({})", items.join(", ")),
    }
}

/// Appends `, suffix` to the text, or `,\n` + indent + suffix past the line width (with
/// PyTorch's own reckoning of the last line's length).
fn add_suffixes(mut text: String, suffixes: &[String], indent: usize) -> String {
    let mut last_line_len = match text.rfind('\n') {
        Some(p) => text.len() - p + 1,
        None => text.len() + 2,
    };
    for suffix in suffixes {
        if last_line_len + suffix.len() + 2 > LINE_WIDTH {
            text.push_str(&format!(",\n{}{suffix}", " ".repeat(indent)));
            last_line_len = indent + suffix.len();
        } else {
            text.push_str(&format!(", {suffix}"));
            last_line_len += suffix.len() + 2;
        }
    }
    text.push(')');
    text
}

/// The summarised tensor being printed: row-major element strings, all padded to one width,
/// its shape, and which dimensions lost their middle to `...`.
struct Printed {
    cells: Vec<String>,
    shape: Vec<usize>,
    elided: Vec<bool>,
    width: usize,
}

/// The nested-bracket text of a non-empty tensor.
fn contents(x: &Tensor, indent: usize) -> Result<String> {
    let mut kept = x.clone();
    let mut elided = vec![false; x.ndim()];
    if x.numel() > THRESHOLD {
        for (d, &n) in x.shape().iter().enumerate() {
            if n > 2 * EDGE_ITEMS {
                // Narrow views first, so that only the printed edges are ever copied.
                let d = d as isize;
                let head = kept.narrow(d, 0, EDGE_ITEMS)?;
                let tail = kept.narrow(d, n - EDGE_ITEMS, EDGE_ITEMS)?;
                kept = Tensor::cat(&[&head, &tail], d)?;
                elided[d as usize] = true;
            }
        }
    }
    let (cells, width) = cells(&kept)?;
    let printed = Printed {
        cells,
        shape: kept.shape(),
        elided,
        width,
    };
    Ok(nested(&printed, 0, 0, indent))
}

/// Every element's text, left-padded to the common width, and that width.
fn cells(x: &Tensor) -> Result<(Vec<String>, usize)> {
    let dtype = x.dtype();
    let raw: Vec<String> = if dtype.is_float() {
        let values = x.to_dtype(DType::F64)?.to_vec::<f64>()?;
        let style = FloatStyle::new(&values);
        let cells: Vec<String> = values.iter().map(|&v| style.format(v)).collect();
        return Ok((pad_all(cells, style.width), style.width));
    } else if dtype == DType::Bool {
        x.to_vec::<bool>()?
            .into_iter()
            .map(|b| if b { "True" } else { "False" }.to_string())
            .collect()
    } else {
        x.to_dtype(DType::I64)?
            .to_vec::<i64>()?
            .into_iter()
            .map(|v| v.to_string())
            .collect()
    };
    let width = raw.iter().map(String::len).max().unwrap_or(0).max(1);
    Ok((pad_all(raw, width), width))
}

fn pad_all(cells: Vec<String>, width: usize) -> Vec<String> {
    cells
        .into_iter()
        .map(|c| format!("{}{c}", " ".repeat(width.saturating_sub(c.len()))))
        .collect()
}

/// The sub-tensor of `printed` at dimension `dim` starting at cell `start`, in brackets.
fn nested(printed: &Printed, dim: usize, start: usize, indent: usize) -> String {
    let shape = &printed.shape[dim..];
    match shape.len() {
        0 => printed.cells[start].clone(),
        1 => row(printed, dim, start, indent),
        rank => {
            let stride: usize = shape[1..].iter().product();
            let sub = |i: usize| nested(printed, dim + 1, start + i * stride, indent + 1);
            let slices: Vec<String> = if printed.elided[dim] {
                let mut s: Vec<String> = (0..EDGE_ITEMS).map(sub).collect();
                s.push("...".to_string());
                s.extend((EDGE_ITEMS..2 * EDGE_ITEMS).map(sub));
                s
            } else {
                (0..shape[0]).map(sub).collect()
            };
            let sep = format!(",{}{}", "\n".repeat(rank - 1), " ".repeat(indent + 1));
            format!("[{}]", slices.join(&sep))
        }
    }
}

/// A 1-D run of cells, wrapped at the line width.
fn row(printed: &Printed, dim: usize, start: usize, indent: usize) -> String {
    let n = printed.shape[dim];
    let cells = &printed.cells[start..start + n];
    let items: Vec<&str> = if printed.elided[dim] {
        let mut items: Vec<&str> = cells[..EDGE_ITEMS].iter().map(String::as_str).collect();
        items.push(" ...");
        items.extend(cells[EDGE_ITEMS..].iter().map(String::as_str));
        items
    } else {
        cells.iter().map(String::as_str).collect()
    };
    let per_line = (LINE_WIDTH.saturating_sub(indent) / (printed.width + 2)).max(1);
    let lines: Vec<String> = items.chunks(per_line).map(|l| l.join(", ")).collect();
    format!(
        "[{}]",
        lines.join(&format!(",\n{}", " ".repeat(indent + 1)))
    )
}

/// How the float elements of one tensor print: integers with a trailing `.`, fixed with 4
/// decimals, or scientific, chosen from the nonzero finite magnitudes as PyTorch chooses.
struct FloatStyle {
    int_mode: bool,
    sci_mode: bool,
    width: usize,
}

impl FloatStyle {
    fn new(values: &[f64]) -> FloatStyle {
        let finite: Vec<f64> = values
            .iter()
            .copied()
            .filter(|v| v.is_finite() && *v != 0.0)
            .collect();
        let mut style = FloatStyle {
            int_mode: true,
            sci_mode: false,
            width: 1,
        };
        if finite.is_empty() {
            return style;
        }
        let min = finite.iter().fold(f64::INFINITY, |m, v| m.min(v.abs()));
        let max = finite.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        style.int_mode = finite.iter().all(|v| *v == v.ceil());
        let wide_range = max / min > 1000.0 || max > 1.0e8;
        style.sci_mode = wide_range || (!style.int_mode && min < 1.0e-4);
        style.width = finite
            .iter()
            .map(|&v| {
                if style.sci_mode {
                    scientific(v).len()
                } else if style.int_mode {
                    format!("{v:.0}").len() + 1
                } else {
                    format!("{v:.PRECISION$}").len()
                }
            })
            .max()
            .unwrap_or(1)
            .max(1);
        style
    }

    /// One value, unpadded.
    fn format(&self, v: f64) -> String {
        if !v.is_finite() {
            return nonfinite(v);
        }
        if self.sci_mode {
            scientific(v)
        } else if self.int_mode {
            format!("{v:.0}.")
        } else {
            format!("{v:.PRECISION$}")
        }
    }
}

/// Python's spelling of inf and nan (`"{:.4f}".format(float("nan"))` is `nan`).
fn nonfinite(v: f64) -> String {
    if v.is_nan() {
        "nan".into()
    } else if v > 0.0 {
        "inf".into()
    } else {
        "-inf".into()
    }
}

/// Python's `"{:.4e}"`: a signed exponent of at least two digits (`1.0000e-05`).
fn scientific(v: f64) -> String {
    if !v.is_finite() {
        return nonfinite(v);
    }
    let text = format!("{v:.PRECISION$e}");
    let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let sign = if exponent < 0 { '-' } else { '+' };
    format!("{mantissa}e{sign}{:02}", exponent.abs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scientific_matches_python() {
        assert_eq!(scientific(1e-5), "1.0000e-05");
        assert_eq!(scientific(12345.678), "1.2346e+04");
        assert_eq!(scientific(-0.0), "-0.0000e+00");
        assert_eq!(scientific(1e100), "1.0000e+100");
        assert_eq!(scientific(f64::NAN), "nan");
    }

    #[test]
    fn python_tuple_spells_one_element_with_a_comma() {
        assert_eq!(python_tuple(&[0]), "(0,)");
        assert_eq!(python_tuple(&[2, 0, 3]), "(2, 0, 3)");
    }
}
