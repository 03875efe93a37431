//! The kernel IR's text: deterministic, one line per value and store, the test oracle that
//! snapshots hold.

use crate::{BufferRole, Expr, IndexExpr, Kernel, LoopId};
use std::fmt;

/// `[5 + 12*i0 + i1]`: the offset (when not zero) and one term per loop with a non-zero
/// stride, a unit stride written as the bare index.
impl fmt::Display for IndexExpr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut terms: Vec<String> = Vec::new();
        if self.offset != 0 {
            terms.push(self.offset.to_string());
        }
        for (l, &s) in self.strides.iter().enumerate() {
            let i = LoopId::from_index(l);
            match s {
                0 => {}
                1 => terms.push(i.to_string()),
                s => terms.push(format!("{s}*{i}")),
            }
        }
        if terms.is_empty() {
            terms.push("0".into());
        }
        write!(f, "[{}]", terms.join(" + "))
    }
}

/// A constant as Rust prints an `f64`, so it reads back exactly.
fn constant(c: f64) -> String {
    if c.is_finite() && c == c.trunc() && c.abs() < 1e15 {
        format!("{c:.1}")
    } else {
        format!("{c:?}")
    }
}

impl fmt::Display for Kernel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let params: Vec<String> = self
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let role = match b.role {
                    BufferRole::Input => "in",
                    BufferRole::Output => "out",
                    BufferRole::Scratch => "scratch",
                };
                format!("buf{i}: {role} {}[{}]", b.ty, b.len)
            })
            .collect();
        writeln!(f, "kernel {}({}) {{", self.name, params.join(", "))?;
        let loops: Vec<String> = self
            .domain
            .iter()
            .enumerate()
            .map(|(l, n)| format!("{} < {n}", LoopId::from_index(l)))
            .collect();
        let reduce: Vec<String> = self
            .reduce
            .iter()
            .enumerate()
            .map(|(l, n)| format!("{} < {n}", LoopId::from_index(self.domain.len() + l)))
            .collect();
        let s = &self.schedule;
        writeln!(
            f,
            "  for {}{} ; vector {} unroll {} parallel {}",
            if loops.is_empty() {
                "()".into()
            } else {
                loops.join(", ")
            },
            if reduce.is_empty() {
                String::new()
            } else {
                format!(" reduce {}", reduce.join(", "))
            },
            s.vector_width,
            s.unroll,
            s.parallel.map_or("none".into(), |l| l.to_string())
        )?;
        if let Some(g) = &self.gemm {
            let m = |x: &crate::MatrixIndex| {
                format!("[{} + {}*r + {}*c]", x.offset, x.row_stride, x.col_stride)
            };
            writeln!(
                f,
                "    gemm {} = {}{} x {}{} ; k {}, per block of i0",
                g.out,
                g.a,
                m(&g.a_index),
                g.b,
                m(&g.b_index),
                g.k
            )?;
        }
        if let Some(c) = &self.conv {
            let p = &c.params;
            write!(
                f,
                "    conv {} = conv2d({}{:?}, {}{:?}) stride {:?} padding {:?} dilation {:?} groups {} by {}",
                c.out,
                c.input,
                c.input_shape,
                c.weight,
                c.weight_shape,
                p.stride,
                p.padding,
                p.dilation,
                p.groups,
                c.algorithm
            )?;
            if let Some(b) = c.bias {
                write!(f, " + {b}")?;
            }
            if c.stage.relu {
                f.write_str(" then relu")?;
            }
            if let Some([kh, kw]) = c.stage.max_pool {
                write!(f, " then max_pool {kh}x{kw}")?;
            }
            writeln!(f, " ; per block of i0")?;
        }
        for (i, v) in self.values.iter().enumerate() {
            let rhs = match &v.expr {
                Expr::Load { buffer, index } => format!("load {buffer}{index}"),
                Expr::LoadIf {
                    buffer,
                    index,
                    bounds,
                    fill,
                } => {
                    let dims: Vec<String> = bounds
                        .iter()
                        .map(|b| format!("{}*({} - {} in 0..{})", b.stride, b.coord, b.pad, b.len))
                        .collect();
                    format!(
                        "load_if {buffer}{index} + {} else {}",
                        dims.join(" + "),
                        constant(*fill)
                    )
                }
                Expr::Gather {
                    buffer,
                    index,
                    by,
                    stride,
                    len,
                    status,
                } => {
                    format!("gather {buffer}{index} + {stride}*({by} in 0..{len}) faults {status}")
                }
                Expr::LoopIndex(l) => format!("index {l}"),
                Expr::Const(c) => format!("const {}", constant(*c)),
                Expr::Unary(op, a) => format!("{} {a}", op.name()),
                Expr::Binary(op, a, b) => format!("{} {a}, {b}", op.name()),
                Expr::Compare(op, a, b) => format!("{} {a}, {b}", op.name()),
                Expr::Select { cond, a, b } => format!("select {cond}, {a}, {b}"),
                Expr::Cast(a) => format!("cast {a}"),
                Expr::Reduce(op, a) => format!("reduce_{} {a}", op.name()),
            };
            writeln!(f, "    v{i}: {} = {rhs}", v.ty)?;
        }
        for s in &self.stores {
            writeln!(f, "    store {}{} = {}", s.buffer, s.index, s.value)?;
        }
        writeln!(f, "}}")
    }
}
