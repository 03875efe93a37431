//! A restricted unpickler: runs the pickle machine for the opcodes `torch.save` emits
//! into an arena of plain nodes, resolves only the globals of [`Global`], and stops with
//! an error (never a panic) on anything else. Tensors stay unmaterialised references to
//! storages here; `rebuild.rs` turns nodes into values. Every node, container entry and
//! memo entry is charged to a memory budget proportional to the pickle's size
//! ([`MemoryBudget`]), so tiny opcodes cannot build values that exhaust memory.

use std::collections::HashMap;

use tessera_tensor::DType;

use super::CheckpointError;
use super::limits::MemoryBudget;
use super::pickle_ops as op;
use super::torch_globals::Global;
use crate::TorchDtype;

/// Most entries the value stack may hold at once.
const MAX_STACK: usize = 1 << 20;
/// Most open `MARK`s at once.
const MAX_MARKS: usize = 1 << 16;
/// Most memo entries.
const MAX_MEMO: usize = 1 << 20;
/// Most dimensions of one tensor.
pub(crate) const MAX_DIMS: usize = 64;

/// Index of a node in [`Pickle::nodes`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct NodeId(usize);

/// `("storage", torch.<Type>Storage, key, location, numel)`: a storage by persistent id.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StorageRef {
    pub dtype: DType,
    pub key: String,
    pub numel: u64,
}

/// A tensor as `_rebuild_tensor_v2` describes it: a strided view of a storage.
#[derive(Debug, Clone)]
pub(crate) struct TensorSpec {
    pub storage: StorageRef,
    pub offset: u64,
    pub size: Vec<u64>,
    pub stride: Vec<u64>,
    pub requires_grad: bool,
}

/// The quantizer parameters of `_rebuild_qtensor`.
#[derive(Debug, Clone)]
pub(crate) enum QuantizerSpec {
    /// `(torch.per_tensor_affine, scale, zero_point)`.
    PerTensor { scale: f64, zero_point: i64 },
    /// `(torch.per_channel_affine, scales, zero_points, axis)`, the tensors as nodes.
    PerChannel {
        scales: NodeId,
        zero_points: NodeId,
        axis: i64,
    },
}

/// A quantized tensor as `_rebuild_qtensor` describes it: its integer view and quantizer.
#[derive(Debug, Clone)]
pub(crate) struct QTensorSpec {
    pub int_repr: TensorSpec,
    pub quantizer: QuantizerSpec,
}

/// One Python object.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    Tuple(Vec<NodeId>),
    List(Vec<NodeId>),
    Dict(Vec<(NodeId, NodeId)>),
    /// `collections.OrderedDict`, with the `_metadata` attribute a `BUILD` may set.
    OrderedDict {
        items: Vec<(NodeId, NodeId)>,
        metadata: Option<NodeId>,
    },
    Global(Global),
    Storage(StorageRef),
    /// Boxed: the largest variant by far, it would triple the size of every node.
    Tensor(Box<TensorSpec>),
    /// A `torch.qint8` tensor.
    QTensor(Box<QTensorSpec>),
}

impl Node {
    /// The Python type name, for error messages.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Node::None => "None",
            Node::Bool(_) => "bool",
            Node::Int(_) => "int",
            Node::Float(_) => "float",
            Node::Str(_) => "str",
            Node::Tuple(_) => "tuple",
            Node::List(_) => "list",
            Node::Dict(_) => "dict",
            Node::OrderedDict { .. } => "OrderedDict",
            Node::Global(_) => "global",
            Node::Storage(_) => "storage",
            Node::Tensor(_) => "tensor",
            Node::QTensor(_) => "quantized tensor",
        }
    }

    /// The bytes this node occupies, with what it owns on the heap: its cost to the budget.
    fn footprint(&self) -> usize {
        let id = size_of::<NodeId>();
        let owned = match self {
            Node::Str(text) => text.len(),
            Node::Tuple(items) | Node::List(items) => items.len() * id,
            Node::Dict(items) | Node::OrderedDict { items, .. } => items.len() * 2 * id,
            Node::Storage(storage) => storage.key.len(),
            Node::Tensor(spec) => {
                size_of::<TensorSpec>()
                    + spec.storage.key.len()
                    + (spec.size.len() + spec.stride.len()) * size_of::<u64>()
            }
            Node::QTensor(spec) => {
                size_of::<QTensorSpec>()
                    + spec.int_repr.storage.key.len()
                    + (spec.int_repr.size.len() + spec.int_repr.stride.len()) * size_of::<u64>()
            }
            Node::None | Node::Bool(_) | Node::Int(_) | Node::Float(_) | Node::Global(_) => 0,
        };
        size_of::<Node>() + owned
    }
}

/// An unpickled object graph: every node, and the one `STOP` returned.
#[derive(Debug)]
pub(crate) struct Pickle {
    nodes: Vec<Node>,
    pub root: NodeId,
}

impl Pickle {
    pub(crate) fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    /// How many nodes the graph holds (each node's id is below this).
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

/// Runs the pickle machine over `data`.
pub(crate) fn unpickle(data: &[u8]) -> Result<Pickle, CheckpointError> {
    unpickle_counted(data).map(|(pickle, _)| pickle)
}

/// [`unpickle`], also returning the bytes charged to the memory budget.
pub(crate) fn unpickle_counted(data: &[u8]) -> Result<(Pickle, u64), CheckpointError> {
    let mut machine = Machine {
        budget: MemoryBudget::for_pickle(data.len()),
        input: data,
        pos: 0,
        at: 0,
        nodes: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
    };
    let root = machine.run()?;
    let used = machine.budget.used();
    Ok((
        Pickle {
            nodes: machine.nodes,
            root,
        },
        used,
    ))
}

struct Machine<'a> {
    input: &'a [u8],
    pos: usize,
    /// Where the opcode being run starts: the offset errors name.
    at: usize,
    nodes: Vec<Node>,
    stack: Vec<NodeId>,
    marks: Vec<usize>,
    memo: HashMap<u32, NodeId>,
    budget: MemoryBudget,
}

/// What one memo entry costs the budget: its key, its value and the hash table's overhead.
const MEMO_ENTRY_BYTES: usize = 32;

impl Machine<'_> {
    /// A [`CheckpointError::Pickle`] at the opcode being run.
    fn malformed(&self, problem: impl Into<String>) -> CheckpointError {
        CheckpointError::Pickle {
            offset: self.at,
            problem: problem.into(),
        }
    }

    /// The allowed global `module.name`, or a [`CheckpointError::UnsupportedGlobal`].
    fn global(&self, module: &str, name: &str) -> Result<Global, CheckpointError> {
        Global::resolve(module, name).ok_or_else(|| CheckpointError::UnsupportedGlobal {
            offset: self.at,
            module: module.into(),
            name: name.into(),
        })
    }

    fn run(&mut self) -> Result<NodeId, CheckpointError> {
        loop {
            self.at = self.pos;
            let code = self.byte()?;
            match code {
                op::STOP => {
                    let root = self.pop()?;
                    return if self.stack.is_empty() && self.marks.is_empty() {
                        Ok(root)
                    } else {
                        Err(self.malformed("STOP with objects left on the stack"))
                    };
                }
                _ => self.step(code)?,
            }
        }
    }

    fn step(&mut self, code: u8) -> Result<(), CheckpointError> {
        match code {
            op::PROTO => {
                let version = self.byte()?;
                if version > 5 {
                    return Err(self.malformed(format!("unsupported pickle protocol {version}")));
                }
            }
            op::FRAME => {
                self.take(8)?;
            }
            op::MARK => {
                if self.marks.len() >= MAX_MARKS {
                    return Err(self.malformed("too many nested MARKs"));
                }
                self.marks.push(self.stack.len());
            }
            op::POP => {
                self.pop()?;
            }
            op::POP_MARK => {
                self.pop_mark()?;
            }
            op::DUP => {
                let top = self.top()?;
                self.push_id(top)?;
            }

            op::NONE => self.push(Node::None)?,
            op::NEWTRUE => self.push(Node::Bool(true))?,
            op::NEWFALSE => self.push(Node::Bool(false))?,
            op::BININT => {
                let v = i32::from_le_bytes(self.array()?);
                self.push(Node::Int(v.into()))?;
            }
            op::BININT1 => {
                let v = self.byte()?;
                self.push(Node::Int(v.into()))?;
            }
            op::BININT2 => {
                let v = u16::from_le_bytes(self.array()?);
                self.push(Node::Int(v.into()))?;
            }
            op::LONG1 => {
                let n = self.byte()? as usize;
                let v = self.long(n)?;
                self.push(Node::Int(v))?;
            }
            op::LONG4 => {
                let n = u32::from_le_bytes(self.array()?) as usize;
                let v = self.long(n)?;
                self.push(Node::Int(v))?;
            }
            op::BINFLOAT => {
                let v = f64::from_be_bytes(self.array()?);
                self.push(Node::Float(v))?;
            }
            op::SHORT_BINUNICODE => {
                let n = self.byte()? as usize;
                self.string(n)?;
            }
            op::BINUNICODE => {
                let n = u32::from_le_bytes(self.array()?) as usize;
                self.string(n)?;
            }
            op::BINUNICODE8 => {
                let n = u64::from_le_bytes(self.array()?);
                self.string(usize::try_from(n).map_err(|_| self.malformed("string too long"))?)?;
            }

            op::EMPTY_TUPLE => self.push(Node::Tuple(Vec::new()))?,
            op::TUPLE => {
                let items = self.pop_mark()?;
                self.push(Node::Tuple(items))?;
            }
            op::TUPLE1 | op::TUPLE2 | op::TUPLE3 => {
                let n = (code - op::TUPLE1 + 1) as usize;
                if self.stack.len() < n + self.marks.last().copied().unwrap_or(0) {
                    return Err(self.malformed(format!("TUPLE{n} on a stack too short")));
                }
                let items = self.stack.split_off(self.stack.len() - n);
                self.push(Node::Tuple(items))?;
            }
            op::EMPTY_LIST => self.push(Node::List(Vec::new()))?,
            op::LIST => {
                let items = self.pop_mark()?;
                self.push(Node::List(items))?;
            }
            op::EMPTY_DICT => self.push(Node::Dict(Vec::new()))?,
            op::DICT => {
                let items = self.pairs()?;
                self.push(Node::Dict(items))?;
            }
            op::APPEND => {
                let item = self.pop()?;
                self.extend_list(vec![item])?;
            }
            op::APPENDS => {
                let items = self.pop_mark()?;
                self.extend_list(items)?;
            }
            op::SETITEM => {
                let value = self.pop()?;
                let key = self.pop()?;
                self.extend_dict(vec![(key, value)])?;
            }
            op::SETITEMS => {
                let items = self.pairs()?;
                self.extend_dict(items)?;
            }

            op::BINPUT | op::LONG_BINPUT => {
                let index = self.memo_index(code == op::LONG_BINPUT)?;
                self.put(index)?;
            }
            op::MEMOIZE => {
                let index =
                    u32::try_from(self.memo.len()).map_err(|_| self.malformed("memo full"))?;
                self.put(index)?;
            }
            op::BINGET | op::LONG_BINGET => {
                let index = self.memo_index(code == op::LONG_BINGET)?;
                self.get(index)?;
            }

            op::GLOBAL => {
                let module = self.line()?;
                let name = self.line()?;
                let global = self.global(&module, &name)?;
                self.push(Node::Global(global))?;
            }
            op::STACK_GLOBAL => {
                let name = self.pop()?;
                let module = self.pop()?;
                let (Node::Str(module), Node::Str(name)) = (self.node(module), self.node(name))
                else {
                    return Err(self.malformed("STACK_GLOBAL needs two strings"));
                };
                let global = self.global(module, name)?;
                self.push(Node::Global(global))?;
            }
            op::BINPERSID => {
                let pid = self.pop()?;
                let storage = self.storage_ref(pid)?;
                self.push(Node::Storage(storage))?;
            }
            op::REDUCE => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let node = self.reduce(callable, args)?;
                self.push(node)?;
            }
            op::BUILD => {
                let state = self.pop()?;
                let target = self.top()?;
                self.build(target, state)?;
            }
            other => return Err(self.malformed(format!("unsupported pickle opcode 0x{other:02x}"))),
        }
        Ok(())
    }

    // ----- input -----

    fn take(&mut self, n: usize) -> Result<&[u8], CheckpointError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.input.len())
            .ok_or_else(|| self.malformed("pickle is truncated"))?;
        let bytes = &self.input[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    /// The memo index operand of a `*PUT`/`*GET`: one byte, or four little-endian for
    /// the `LONG_` forms.
    fn memo_index(&mut self, long: bool) -> Result<u32, CheckpointError> {
        if long {
            Ok(u32::from_le_bytes(self.array()?))
        } else {
            Ok(self.byte()?.into())
        }
    }

    fn byte(&mut self) -> Result<u8, CheckpointError> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CheckpointError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A newline-terminated ASCII argument (of `GLOBAL`).
    fn line(&mut self) -> Result<String, CheckpointError> {
        let rest = &self.input[self.pos..];
        let n = rest
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| self.malformed("pickle is truncated inside GLOBAL"))?;
        let text = std::str::from_utf8(&rest[..n])
            .map_err(|_| self.malformed("GLOBAL name is not UTF-8"))?
            .to_string();
        self.pos += n + 1;
        Ok(text)
    }

    /// A little-endian two's-complement integer of `n` bytes that must fit in an i64.
    fn long(&mut self, n: usize) -> Result<i64, CheckpointError> {
        if n > 8 {
            return Err(self.malformed(format!("integer of {n} bytes does not fit in 64 bits")));
        }
        let bytes = self.take(n)?;
        let negative = bytes.last().is_some_and(|&b| b & 0x80 != 0);
        let mut raw = [if negative { 0xff } else { 0 }; 8];
        raw[..n].copy_from_slice(bytes);
        Ok(i64::from_le_bytes(raw))
    }

    fn string(&mut self, n: usize) -> Result<(), CheckpointError> {
        let bytes = self.take(n)?;
        let text = std::str::from_utf8(bytes).map(str::to_string);
        let text = text.map_err(|_| self.malformed("string is not UTF-8"))?;
        self.push(Node::Str(text))
    }

    // ----- stack and memo -----

    fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    fn push(&mut self, node: Node) -> Result<(), CheckpointError> {
        self.budget.charge(node.footprint())?;
        let id = NodeId(self.nodes.len());
        self.nodes.push(node);
        self.push_id(id)
    }

    fn push_id(&mut self, id: NodeId) -> Result<(), CheckpointError> {
        if self.stack.len() >= MAX_STACK {
            return Err(self.malformed("pickle stack too deep"));
        }
        self.stack.push(id);
        Ok(())
    }

    /// Pops the top object; a `MARK` above it is an error, as in CPython.
    fn pop(&mut self) -> Result<NodeId, CheckpointError> {
        if self.stack.len() <= self.marks.last().copied().unwrap_or(0) {
            return Err(self.malformed("pop from an empty stack (or across a MARK)"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.malformed("pop from an empty stack"))
    }

    fn top(&self) -> Result<NodeId, CheckpointError> {
        match self.stack.last() {
            Some(&id) if self.stack.len() > self.marks.last().copied().unwrap_or(0) => Ok(id),
            _ => Err(self.malformed("empty stack")),
        }
    }

    /// Pops everything above the innermost `MARK`, and the mark.
    fn pop_mark(&mut self) -> Result<Vec<NodeId>, CheckpointError> {
        let mark = self
            .marks
            .pop()
            .ok_or_else(|| self.malformed("no MARK to pop to"))?;
        Ok(self.stack.split_off(mark))
    }

    fn put(&mut self, index: u32) -> Result<(), CheckpointError> {
        let top = self.top()?;
        if !self.memo.contains_key(&index) {
            if self.memo.len() >= MAX_MEMO {
                return Err(self.malformed("memo too large"));
            }
            self.budget.charge(MEMO_ENTRY_BYTES)?;
        }
        self.memo.insert(index, top);
        Ok(())
    }

    fn get(&mut self, index: u32) -> Result<(), CheckpointError> {
        let id = *self
            .memo
            .get(&index)
            .ok_or_else(|| self.malformed(format!("memo key {index} was never stored")))?;
        self.push_id(id)
    }

    // ----- containers -----

    /// Pops to the innermost `MARK` and pairs the objects: `[k0, v0, k1, v1, ...]`.
    fn pairs(&mut self) -> Result<Vec<(NodeId, NodeId)>, CheckpointError> {
        let flat = self.pop_mark()?;
        if !flat.len().is_multiple_of(2) {
            return Err(self.malformed("SETITEMS with an odd number of objects"));
        }
        Ok(flat.chunks_exact(2).map(|kv| (kv[0], kv[1])).collect())
    }

    fn extend_list(&mut self, items: Vec<NodeId>) -> Result<(), CheckpointError> {
        self.budget.charge(items.len() * size_of::<NodeId>())?;
        let target = self.top()?;
        match &mut self.nodes[target.0] {
            Node::List(list) => {
                list.extend(items);
                Ok(())
            }
            other => {
                let kind = other.kind();
                Err(self.malformed(format!("APPEND to a {}", kind)))
            }
        }
    }

    fn extend_dict(&mut self, items: Vec<(NodeId, NodeId)>) -> Result<(), CheckpointError> {
        self.budget.charge(items.len() * 2 * size_of::<NodeId>())?;
        let target = self.top()?;
        match &mut self.nodes[target.0] {
            Node::Dict(dict) | Node::OrderedDict { items: dict, .. } => {
                dict.extend(items);
                Ok(())
            }
            other => {
                let kind = other.kind();
                Err(self.malformed(format!("SETITEM on a {}", kind)))
            }
        }
    }

    // ----- torch objects -----

    /// Reads the persistent id `("storage", torch.<Type>Storage, key, location, numel)`.
    fn storage_ref(&self, pid: NodeId) -> Result<StorageRef, CheckpointError> {
        let bad = || {
            self.malformed(
                "persistent id is not (\"storage\", <Storage class>, key, location, numel)",
            )
        };
        let Node::Tuple(fields) = self.node(pid) else {
            return Err(bad());
        };
        let [tag, class, key, location, numel] = fields.as_slice() else {
            return Err(bad());
        };
        match (
            self.node(*tag),
            self.node(*class),
            self.node(*key),
            self.node(*location),
            self.node(*numel),
        ) {
            (
                Node::Str(tag),
                Node::Global(class @ (Global::Storage(_) | Global::QStorage(TorchDtype::QInt8))),
                Node::Str(key),
                Node::Str(_),
                &Node::Int(numel),
            ) if tag == "storage" => Ok(StorageRef {
                dtype: match class {
                    Global::Storage(dtype) => *dtype,
                    _ => DType::I8,
                },
                key: key.clone(),
                numel: u64::try_from(numel).map_err(|_| self.malformed("negative storage size"))?,
            }),
            _ => Err(bad()),
        }
    }

    fn reduce(&self, callable: NodeId, args: NodeId) -> Result<Node, CheckpointError> {
        let Node::Tuple(args) = self.node(args) else {
            return Err(self.malformed("REDUCE arguments are not a tuple"));
        };
        match self.node(callable) {
            Node::Global(Global::OrderedDict) if args.is_empty() => Ok(Node::OrderedDict {
                items: Vec::new(),
                metadata: None,
            }),
            Node::Global(Global::RebuildTensorV2) => self
                .rebuild_tensor(args)
                .map(|spec| Node::Tensor(Box::new(spec))),
            Node::Global(Global::RebuildParameter) => match args.as_slice() {
                [data, requires_grad, _hooks] => {
                    match (self.node(*data), self.node(*requires_grad)) {
                        (Node::Tensor(spec), &Node::Bool(requires_grad)) => {
                            Ok(Node::Tensor(Box::new(TensorSpec {
                                requires_grad,
                                ..spec.as_ref().clone()
                            })))
                        }
                        _ => Err(self.malformed("_rebuild_parameter needs (tensor, bool, hooks)")),
                    }
                }
                _ => Err(self.malformed("_rebuild_parameter needs 3 arguments")),
            },
            Node::Global(Global::RebuildQTensor) => self
                .rebuild_qtensor(args)
                .map(|spec| Node::QTensor(Box::new(spec))),
            Node::Global(Global::OrderedDict) => {
                Err(self.malformed("OrderedDict(...) with arguments is not supported"))
            }
            other => {
                let kind = other.kind();
                Err(self.malformed(format!("REDUCE cannot call a {}", kind)))
            }
        }
    }

    /// `_rebuild_tensor_v2(storage, offset, size, stride, requires_grad, hooks[, metadata])`.
    fn rebuild_tensor(&self, args: &[NodeId]) -> Result<TensorSpec, CheckpointError> {
        let (storage, offset, size, stride, requires_grad) = match args {
            [s, o, sz, st, rg, _hooks] | [s, o, sz, st, rg, _hooks, _] => (s, o, sz, st, rg),
            _ => {
                return Err(self.malformed(format!(
                    "_rebuild_tensor_v2 takes 6 or 7 arguments, got {}",
                    args.len()
                )));
            }
        };
        let Node::Storage(storage) = self.node(*storage) else {
            return Err(self.malformed("_rebuild_tensor_v2: first argument is not a storage"));
        };
        let &Node::Int(offset) = self.node(*offset) else {
            return Err(self.malformed("_rebuild_tensor_v2: storage offset is not an int"));
        };
        let &Node::Bool(requires_grad) = self.node(*requires_grad) else {
            return Err(self.malformed("_rebuild_tensor_v2: requires_grad is not a bool"));
        };
        let size = self.dims(*size, "size")?;
        let stride = self.dims(*stride, "stride")?;
        if size.len() != stride.len() {
            return Err(self.malformed(format!(
                "_rebuild_tensor_v2: size has {} dimensions but stride has {}",
                size.len(),
                stride.len()
            )));
        }
        Ok(TensorSpec {
            storage: storage.clone(),
            offset: u64::try_from(offset).map_err(|_| self.malformed("negative storage offset"))?,
            size,
            stride,
            requires_grad,
        })
    }

    /// `_rebuild_qtensor(storage, offset, size, stride, quantizer_params, requires_grad,
    /// hooks)` over a `QInt8Storage`, per tensor or per channel affine.
    fn rebuild_qtensor(&self, args: &[NodeId]) -> Result<QTensorSpec, CheckpointError> {
        let [storage, offset, size, stride, params, requires_grad, hooks] = args else {
            return Err(self.malformed(format!(
                "_rebuild_qtensor takes 7 arguments, got {}",
                args.len()
            )));
        };
        let int_repr =
            self.rebuild_tensor(&[*storage, *offset, *size, *stride, *requires_grad, *hooks])?;
        let Node::Tuple(params) = self.node(*params) else {
            return Err(self.malformed("_rebuild_qtensor: quantizer parameters are not a tuple"));
        };
        let scheme = params.first().map(|&p| self.node(p));
        let quantizer = match (scheme, &params[..]) {
            (Some(Node::Global(Global::PerTensorAffine)), [_, scale, zero_point]) => {
                match (self.node(*scale), self.node(*zero_point)) {
                    (&Node::Float(scale), &Node::Int(zero_point)) => {
                        QuantizerSpec::PerTensor { scale, zero_point }
                    }
                    _ => {
                        return Err(self
                            .malformed("_rebuild_qtensor: per_tensor_affine needs (float, int)"));
                    }
                }
            }
            (Some(Node::Global(Global::PerChannelAffine)), [_, scales, zero_points, axis]) => {
                match (
                    self.node(*scales),
                    self.node(*zero_points),
                    self.node(*axis),
                ) {
                    (Node::Tensor(_), Node::Tensor(_), &Node::Int(axis)) => {
                        QuantizerSpec::PerChannel {
                            scales: *scales,
                            zero_points: *zero_points,
                            axis,
                        }
                    }
                    _ => {
                        return Err(self.malformed(
                            "_rebuild_qtensor: per_channel_affine needs (tensor, tensor, int)",
                        ));
                    }
                }
            }
            _ => {
                return Err(self.malformed(
                    "_rebuild_qtensor: only per_tensor_affine and per_channel_affine are supported",
                ));
            }
        };
        Ok(QTensorSpec {
            int_repr,
            quantizer,
        })
    }

    /// A tuple of non-negative ints (a size or a stride).
    fn dims(&self, id: NodeId, what: &str) -> Result<Vec<u64>, CheckpointError> {
        let Node::Tuple(items) = self.node(id) else {
            return Err(self.malformed(format!("_rebuild_tensor_v2: {what} is not a tuple")));
        };
        if items.len() > MAX_DIMS {
            return Err(self.malformed(format!("_rebuild_tensor_v2: {} dimensions", items.len())));
        }
        items
            .iter()
            .map(|&i| match self.node(i) {
                &Node::Int(v) if v >= 0 => Ok(v as u64),
                _ => Err(self.malformed(format!(
                    "_rebuild_tensor_v2: {what} holds a non-negative int only"
                ))),
            })
            .collect()
    }

    /// `BUILD`: sets attributes. Only an `OrderedDict`'s `_metadata` is kept.
    fn build(&mut self, target: NodeId, state: NodeId) -> Result<(), CheckpointError> {
        let Node::Dict(attributes) = self.node(state) else {
            return Err(self.malformed(format!("BUILD with a {} state", self.node(state).kind())));
        };
        let metadata = attributes
            .iter()
            .find(|(k, _)| matches!(self.node(*k), Node::Str(s) if s == "_metadata"))
            .map(|&(_, v)| v);
        match &mut self.nodes[target.0] {
            Node::OrderedDict { metadata: slot, .. } => {
                if metadata.is_some() {
                    *slot = metadata;
                }
                Ok(())
            }
            other => {
                let kind = other.kind();
                Err(self.malformed(format!("BUILD on a {} is not supported", kind)))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::limits::PICKLE_BYTES_PER_INPUT_BYTE;
    use std::io::Read;

    /// The `data.pkl` record of a `.pt` file.
    fn pickle_of(path: &std::path::Path) -> Vec<u8> {
        let mut zip = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
        let name = zip
            .file_names()
            .map(|n| n.unwrap().into_owned())
            .find(|n| n.ends_with("/data.pkl"))
            .unwrap();
        let mut data = Vec::new();
        zip.by_name(&name).unwrap().read_to_end(&mut data).unwrap();
        data
    }

    #[test]
    fn torch_saved_pickles_use_at_most_half_the_per_byte_budget() {
        let dir = tessera_testkit::conformance_dir();
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path().join("state_dict.pt");
            if !path.exists() {
                continue;
            }
            let data = pickle_of(&path);
            let (_, used) = unpickle_counted(&data).unwrap();
            let per_byte = used as f64 / data.len() as f64;
            assert!(
                per_byte <= PICKLE_BYTES_PER_INPUT_BYTE as f64 / 2.0,
                "{}: {per_byte:.1} bytes per pickle byte",
                path.display()
            );
            checked += 1;
        }
        assert!(
            checked >= 10,
            "only {checked} conformance checkpoints in {dir:?}"
        );
    }
}
