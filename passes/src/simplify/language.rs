//! The tensor-expression language the e-graph works in: the elementwise and layout ops of the
//! op table as e-nodes, their scalar and shape attributes as leaf e-nodes, and opaque graph
//! values as numbered leaves; with the mapping from op-table ops to e-nodes and back. The ops
//! the rules name have e-nodes of their own; every other op the op table calls pure and
//! elementwise (a new op included) enters as an `Other` e-node named by its text, so it is
//! hash-consed, folded and costed like the others.

use egg::{EGraph, Id, Symbol, define_language};
use std::fmt;
use std::str::FromStr;
use tessera_tensor::Op;
use tessera_tensor::op::{BinaryOp, ScalarOp, UnaryOp, ViewOp};

define_language! {
    /// One e-node. Scalar ops take their scalar as a `Num` child (`(mul_s ?x 2)`), views their
    /// sizes or dims as a `Dims` child (`(reshape ?x [2,3])`); reversed scalar ops put the
    /// scalar first (`(rsub_s 1 ?x)` is `1 - x`).
    pub enum TensorLang {
        "neg" = Neg(Id),
        "abs" = Abs(Id),
        "sign" = Sign(Id),
        "exp" = Exp(Id),
        "log" = Log(Id),
        "sqrt" = Sqrt(Id),
        "rsqrt" = Rsqrt(Id),
        "sin" = Sin(Id),
        "cos" = Cos(Id),
        "tanh" = Tanh(Id),
        "sigmoid" = Sigmoid(Id),
        "relu" = Relu(Id),
        "silu" = Silu(Id),
        "gelu" = Gelu(Id),
        "gelu_tanh" = GeluTanh(Id),
        "leaky_relu" = LeakyRelu([Id; 2]),
        "add" = Add([Id; 2]),
        "sub" = Sub([Id; 2]),
        "mul" = Mul([Id; 2]),
        "div" = Div([Id; 2]),
        "pow" = Pow([Id; 2]),
        "maximum" = Maximum([Id; 2]),
        "minimum" = Minimum([Id; 2]),
        "add_s" = AddS([Id; 2]),
        "sub_s" = SubS([Id; 2]),
        "mul_s" = MulS([Id; 2]),
        "div_s" = DivS([Id; 2]),
        "pow_s" = PowS([Id; 2]),
        "max_s" = MaxS([Id; 2]),
        "min_s" = MinS([Id; 2]),
        "rsub_s" = RSubS([Id; 2]),
        "rdiv_s" = RDivS([Id; 2]),
        "rpow_s" = RPowS([Id; 2]),
        "clamp_min" = ClampMin([Id; 2]),
        "clamp_max" = ClampMax([Id; 2]),
        "clamp" = Clamp([Id; 3]),
        "reshape" = Reshape([Id; 2]),
        "permute" = Permute([Id; 2]),
        "expand" = Expand([Id; 2]),
        "narrow" = Narrow([Id; 2]),
        "contiguous" = Contiguous(Id),
        Num(Scalar),
        Dims(Dims),
        Leaf(Leaf),
        Other(Symbol, Vec<Id>),
    }
}

/// The symbol of an e-node for a pure elementwise op that no rule names: the op's text as the
/// op table writes it, name and attributes joined by `|` (`cube`, `to_dtype|"F64"`).
fn other_symbol(op: &Op) -> Symbol {
    match op.attributes() {
        Some(attrs) => Symbol::from(format!("{}|{attrs}", op.name())),
        None => Symbol::from(op.name()),
    }
}

/// The op an [`other_symbol`] names.
fn other_op(symbol: Symbol) -> Option<Op> {
    let text = symbol.as_str();
    match text.split_once('|') {
        Some((name, attrs)) => Op::from_text(name, Some(&serde_json::from_str(attrs).ok()?)),
        None => Op::from_text(text, None),
    }
}

/// A scalar attribute, compared and hashed by its bits (so `0` and `-0` differ); prints and
/// parses as a Rust `f64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scalar(u64);

impl Scalar {
    pub fn new(value: f64) -> Self {
        Scalar(value.to_bits())
    }

    pub fn value(self) -> f64 {
        f64::from_bits(self.0)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.value())
    }
}

impl FromStr for Scalar {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.parse::<f64>().map(Scalar::new).map_err(|e| e.to_string())
    }
}

/// A list of sizes or dimensions, printed without spaces (`[2,3]`) so it is one token.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dims(pub Vec<usize>);

impl fmt::Display for Dims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let items: Vec<String> = self.0.iter().map(|d| d.to_string()).collect();
        write!(f, "[{}]", items.join(","))
    }
}

impl FromStr for Dims {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let inner = s
            .strip_prefix('[')
            .and_then(|s| s.strip_suffix(']'))
            .ok_or_else(|| format!("`{s}` is not a dims list"))?;
        if inner.is_empty() {
            return Ok(Dims(Vec::new()));
        }
        inner
            .split(',')
            .map(|d| d.parse::<usize>().map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()
            .map(Dims)
    }
}

/// An opaque graph value (an input of a region), numbered in the order it was met; prints as
/// `v3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Leaf(pub u32);

impl fmt::Display for Leaf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "v{}", self.0)
    }
}

impl FromStr for Leaf {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix('v')
            .and_then(|n| n.parse::<u32>().ok())
            .map(Leaf)
            .ok_or_else(|| format!("`{s}` is not a leaf"))
    }
}

/// The value of an attribute child, as the analysis knows it.
pub enum Attr {
    Num(f64),
    Dims(Vec<usize>),
}

fn unary(op: UnaryOp, x: Id) -> Option<TensorLang> {
    use TensorLang as T;
    Some(match op {
        UnaryOp::Neg => T::Neg(x),
        UnaryOp::Abs => T::Abs(x),
        UnaryOp::Sign => T::Sign(x),
        UnaryOp::Exp => T::Exp(x),
        UnaryOp::Log => T::Log(x),
        UnaryOp::Sqrt => T::Sqrt(x),
        UnaryOp::Rsqrt => T::Rsqrt(x),
        UnaryOp::Sin => T::Sin(x),
        UnaryOp::Cos => T::Cos(x),
        UnaryOp::Tanh => T::Tanh(x),
        UnaryOp::Sigmoid => T::Sigmoid(x),
        UnaryOp::Relu => T::Relu(x),
        UnaryOp::Silu => T::Silu(x),
        UnaryOp::Gelu { tanh: false } => T::Gelu(x),
        UnaryOp::Gelu { tanh: true } => T::GeluTanh(x),
        UnaryOp::LeakyRelu { .. }
        | UnaryOp::Elu { .. }
        | UnaryOp::Hardswish
        | UnaryOp::Hardsigmoid
        | UnaryOp::Relu6
        | UnaryOp::Softplus { .. } => return None,
    })
}

fn binary(op: BinaryOp, ids: [Id; 2]) -> TensorLang {
    use TensorLang as T;
    match op {
        BinaryOp::Add => T::Add(ids),
        BinaryOp::Sub => T::Sub(ids),
        BinaryOp::Mul => T::Mul(ids),
        BinaryOp::Div => T::Div(ids),
        BinaryOp::Pow => T::Pow(ids),
        BinaryOp::Maximum => T::Maximum(ids),
        BinaryOp::Minimum => T::Minimum(ids),
    }
}

/// Whether the language can express `op` (one output, elementwise or a layout change).
pub fn is_supported(op: &Op) -> bool {
    has_own_enode(op) || is_other(op)
}

/// Whether `op` is pure and elementwise by the op table but has no e-node of its own.
fn is_other(op: &Op) -> bool {
    !has_own_enode(op) && op.kind().is_elementwise() && op.is_pure() && op.has_text()
}

/// Whether `op` has an e-node of its own, which rules can name.
fn has_own_enode(op: &Op) -> bool {
    match op {
        Op::Unary(_) | Op::Binary(_) => true,
        // `max(s, x)` and `max(x, s)` differ in the sign of a zero result: not modelled.
        Op::Scalar(s) => !(s.reversed && matches!(s.op, BinaryOp::Maximum | BinaryOp::Minimum)),
        Op::Clamp { min, max } => min.is_some() || max.is_some(),
        Op::View(_) => true,
        _ => false,
    }
}

/// Adds `op` applied to the e-classes `operands`, with its attribute leaves; `None` when the
/// language cannot express it (see [`is_supported`]) or the operand count is wrong.
pub fn add_op<N: egg::Analysis<TensorLang>>(
    egraph: &mut EGraph<TensorLang, N>,
    op: &Op,
    operands: &[Id],
) -> Option<Id> {
    use TensorLang as T;
    let num = |egraph: &mut EGraph<TensorLang, N>, v: f64| egraph.add(T::Num(Scalar::new(v)));
    let node = match (op, operands) {
        (Op::Unary(UnaryOp::LeakyRelu { negative_slope }), &[x]) => {
            T::LeakyRelu([x, num(egraph, *negative_slope)])
        }
        (Op::Unary(u), &[x]) => unary(*u, x)?,
        (Op::Binary(b), &[x, y]) => binary(*b, [x, y]),
        (Op::Scalar(s), &[x]) if is_supported(op) => {
            let c = num(egraph, s.value);
            match (s.op, s.reversed) {
                (BinaryOp::Add, _) => T::AddS([x, c]),
                (BinaryOp::Mul, _) => T::MulS([x, c]),
                (BinaryOp::Sub, false) => T::SubS([x, c]),
                (BinaryOp::Div, false) => T::DivS([x, c]),
                (BinaryOp::Pow, false) => T::PowS([x, c]),
                (BinaryOp::Maximum, false) => T::MaxS([x, c]),
                (BinaryOp::Minimum, false) => T::MinS([x, c]),
                (BinaryOp::Sub, true) => T::RSubS([c, x]),
                (BinaryOp::Div, true) => T::RDivS([c, x]),
                (BinaryOp::Pow, true) => T::RPowS([c, x]),
                (BinaryOp::Maximum | BinaryOp::Minimum, true) => return None,
            }
        }
        (Op::Clamp { min, max }, &[x]) => match (min, max) {
            (Some(lo), None) => T::ClampMin([x, num(egraph, *lo)]),
            (None, Some(hi)) => T::ClampMax([x, num(egraph, *hi)]),
            (Some(lo), Some(hi)) => {
                let (lo, hi) = (num(egraph, *lo), num(egraph, *hi));
                T::Clamp([x, lo, hi])
            }
            (None, None) => return None,
        },
        (op, operands) if is_other(op) => T::Other(other_symbol(op), operands.to_vec()),
        (Op::View(v), &[x]) => {
            let mut dims = |d: &[usize]| egraph.add(T::Dims(Dims(d.to_vec())));
            match v {
                ViewOp::Reshape(s) => T::Reshape([x, dims(s)]),
                ViewOp::Permute(p) => T::Permute([x, dims(p)]),
                ViewOp::Expand(s) => T::Expand([x, dims(s)]),
                ViewOp::Narrow { dim, start, len } => T::Narrow([x, dims(&[*dim, *start, *len])]),
                ViewOp::Contiguous => T::Contiguous(x),
            }
        }
        _ => return None,
    };
    Some(egraph.add(node))
}

impl TensorLang {
    /// The op-table op this e-node computes and its tensor operands (e-classes), given how to
    /// read an attribute child; `None` for leaves and attributes, or an unreadable attribute.
    pub fn to_op(&self, attr: impl Fn(Id) -> Option<Attr>) -> Option<(Op, Vec<Id>)> {
        use TensorLang as T;
        let num = |id: Id| match attr(id) {
            Some(Attr::Num(v)) => Some(v),
            _ => None,
        };
        let dims = |id: Id| match attr(id) {
            Some(Attr::Dims(d)) => Some(d),
            _ => None,
        };
        let u = |op: UnaryOp, x: &Id| Some((Op::Unary(op), vec![*x]));
        let b = |op: BinaryOp, ids: &[Id; 2]| Some((Op::Binary(op), ids.to_vec()));
        let s = |op: BinaryOp, x: Id, c: Id, reversed: bool| {
            let value = num(c)?;
            Some((
                Op::Scalar(ScalarOp {
                    op,
                    value,
                    reversed,
                }),
                vec![x],
            ))
        };
        let view = |v: ViewOp, x: Id| Some((Op::View(v), vec![x]));
        match self {
            T::Neg(x) => u(UnaryOp::Neg, x),
            T::Abs(x) => u(UnaryOp::Abs, x),
            T::Sign(x) => u(UnaryOp::Sign, x),
            T::Exp(x) => u(UnaryOp::Exp, x),
            T::Log(x) => u(UnaryOp::Log, x),
            T::Sqrt(x) => u(UnaryOp::Sqrt, x),
            T::Rsqrt(x) => u(UnaryOp::Rsqrt, x),
            T::Sin(x) => u(UnaryOp::Sin, x),
            T::Cos(x) => u(UnaryOp::Cos, x),
            T::Tanh(x) => u(UnaryOp::Tanh, x),
            T::Sigmoid(x) => u(UnaryOp::Sigmoid, x),
            T::Relu(x) => u(UnaryOp::Relu, x),
            T::Silu(x) => u(UnaryOp::Silu, x),
            T::Gelu(x) => u(UnaryOp::Gelu { tanh: false }, x),
            T::GeluTanh(x) => u(UnaryOp::Gelu { tanh: true }, x),
            T::LeakyRelu([x, c]) => u(
                UnaryOp::LeakyRelu {
                    negative_slope: num(*c)?,
                },
                x,
            ),
            T::Add(ids) => b(BinaryOp::Add, ids),
            T::Sub(ids) => b(BinaryOp::Sub, ids),
            T::Mul(ids) => b(BinaryOp::Mul, ids),
            T::Div(ids) => b(BinaryOp::Div, ids),
            T::Pow(ids) => b(BinaryOp::Pow, ids),
            T::Maximum(ids) => b(BinaryOp::Maximum, ids),
            T::Minimum(ids) => b(BinaryOp::Minimum, ids),
            T::AddS([x, c]) => s(BinaryOp::Add, *x, *c, false),
            T::SubS([x, c]) => s(BinaryOp::Sub, *x, *c, false),
            T::MulS([x, c]) => s(BinaryOp::Mul, *x, *c, false),
            T::DivS([x, c]) => s(BinaryOp::Div, *x, *c, false),
            T::PowS([x, c]) => s(BinaryOp::Pow, *x, *c, false),
            T::MaxS([x, c]) => s(BinaryOp::Maximum, *x, *c, false),
            T::MinS([x, c]) => s(BinaryOp::Minimum, *x, *c, false),
            T::RSubS([c, x]) => s(BinaryOp::Sub, *x, *c, true),
            T::RDivS([c, x]) => s(BinaryOp::Div, *x, *c, true),
            T::RPowS([c, x]) => s(BinaryOp::Pow, *x, *c, true),
            T::ClampMin([x, lo]) => Some((
                Op::Clamp {
                    min: Some(num(*lo)?),
                    max: None,
                },
                vec![*x],
            )),
            T::ClampMax([x, hi]) => Some((
                Op::Clamp {
                    min: None,
                    max: Some(num(*hi)?),
                },
                vec![*x],
            )),
            T::Clamp([x, lo, hi]) => Some((
                Op::Clamp {
                    min: Some(num(*lo)?),
                    max: Some(num(*hi)?),
                },
                vec![*x],
            )),
            T::Reshape([x, d]) => view(ViewOp::Reshape(dims(*d)?), *x),
            T::Permute([x, d]) => view(ViewOp::Permute(dims(*d)?), *x),
            T::Expand([x, d]) => view(ViewOp::Expand(dims(*d)?), *x),
            T::Narrow([x, d]) => match dims(*d)?.as_slice() {
                &[dim, start, len] => view(ViewOp::Narrow { dim, start, len }, *x),
                _ => None,
            },
            T::Contiguous(x) => view(ViewOp::Contiguous, *x),
            T::Other(symbol, operands) => Some((other_op(*symbol)?, operands.clone())),
            T::Num(_) | T::Dims(_) | T::Leaf(_) => None,
        }
    }
}
