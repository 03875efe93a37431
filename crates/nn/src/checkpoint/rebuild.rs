//! Unpickled nodes to [`Value`]s and [`StateDict`]s: materialises each tensor by gathering
//! its strided view out of the storage bytes, checking every size, stride and offset
//! against the storage first, and bounding nesting depth and total output size.

use std::collections::HashMap;

use indexmap::IndexMap;
use tessera_tensor::Tensor;

use super::CheckpointError;
use super::dtype_bytes::tensor_from_le_bytes;
use super::pickle_read::{
    MAX_DIMS, Node, NodeId, Pickle, QTensorSpec, QuantizerSpec, StorageRef, TensorSpec,
};
use super::torch_globals::Global;
use crate::{Key, QuantizedTensor, Quantizer, StateDict, Value, ValueStateDict};

/// Deepest container nesting accepted (real checkpoints nest a handful of levels).
const MAX_DEPTH: usize = 128;
/// Bytes tensors may occupy beyond the storages' own sizes (overlapping or expanded views).
const EXPANSION_SLACK: u64 = 256 << 20;

/// Where storage bytes come from: the zip records of a `.pt` file.
pub(crate) trait StorageSource {
    /// All bytes of the storage `key`, already checked to hold `numel` elements.
    fn storage(&mut self, storage: &StorageRef) -> Result<&[u8], CheckpointError>;
    /// Total bytes of all storage records, the base of the output budget.
    fn total_bytes(&self) -> u64;
}

/// Converts one unpickled graph, caching tensors so a memoised tensor stays one tensor.
pub(crate) struct Rebuilder<'a, S: StorageSource> {
    pickle: &'a Pickle,
    source: &'a mut S,
    tensors: HashMap<NodeId, Tensor>,
    /// Tensors by the view they read (storage, dtype, offset, size, stride): two records of the
    /// same view (tied weights, saved under two keys) load as one tensor, so they stay tied
    /// and save back as one storage, as PyTorch's do.
    views: HashMap<ViewKey, Tensor>,
    /// Output bytes still allowed.
    budget: u64,
    /// Nodes still allowed to be visited (a shared node counts each time it is reached).
    visits: usize,
}

impl<'a, S: StorageSource> Rebuilder<'a, S> {
    pub(crate) fn new(pickle: &'a Pickle, source: &'a mut S) -> Self {
        let budget = source.total_bytes().saturating_add(EXPANSION_SLACK);
        let visits = pickle.len().saturating_mul(4).saturating_add(1024);
        Rebuilder {
            pickle,
            source,
            tensors: HashMap::new(),
            views: HashMap::new(),
            budget,
            visits,
        }
    }

    /// The whole pickle as a value; an `OrderedDict` becomes a plain dict.
    pub(crate) fn value(&mut self) -> Result<Value, CheckpointError> {
        self.convert(self.pickle.root, 0)
    }

    /// The pickle as a state dict: a dict of name -> tensor, with `_metadata` versions.
    pub(crate) fn state_dict(&mut self) -> Result<StateDict, CheckpointError> {
        let (entries, metadata) = self.state_entries()?;
        let mut state = StateDict::new();
        for (key, v) in entries {
            let Node::Tensor(spec) = self.pickle.node(v) else {
                return Err(contents(format!(
                    "state dict entry {key} is a {}, not a tensor",
                    self.pickle.node(v).kind()
                )));
            };
            let tensor = self.tensor(v, spec)?;
            state.insert(key.clone(), tensor);
        }
        state.metadata = metadata;
        Ok(state)
    }

    /// The pickle as a state dict of any values (quantized tensors, tuples, dtypes), with
    /// `_metadata` versions.
    pub(crate) fn value_state_dict(&mut self) -> Result<ValueStateDict, CheckpointError> {
        let (entries, metadata) = self.state_entries()?;
        let mut state = ValueStateDict::default();
        for (key, v) in entries {
            let value = self.convert(v, 1)?;
            state.entries.insert(key.clone(), value);
        }
        state.metadata = metadata;
        Ok(state)
    }

    /// The root dict's keys with their value nodes, and its `_metadata` versions (empty
    /// without any): what both kinds of state dict read.
    #[allow(clippy::type_complexity)] // one pair: the entries and the versions
    fn state_entries(
        &self,
    ) -> Result<(Vec<(&'a String, NodeId)>, IndexMap<String, i64>), CheckpointError> {
        let pickle = self.pickle;
        let (items, metadata) = match pickle.node(pickle.root) {
            Node::OrderedDict { items, metadata } => (items, *metadata),
            Node::Dict(items) => (items, None),
            other => {
                return Err(contents(format!(
                    "holds a {}, not a state dict",
                    other.kind()
                )));
            }
        };
        let mut entries = Vec::with_capacity(items.len());
        for &(k, v) in items {
            let Node::Str(key) = pickle.node(k) else {
                return Err(contents(format!(
                    "state dict key is a {}, not a str",
                    pickle.node(k).kind()
                )));
            };
            entries.push((key, v));
        }
        let versions = match metadata {
            Some(m) => self.versions(m)?,
            None => IndexMap::new(),
        };
        Ok((entries, versions))
    }

    /// `_metadata`: `{prefix: {"version": n, ...}}`; prefixes without a version are skipped.
    fn versions(&self, id: NodeId) -> Result<IndexMap<String, i64>, CheckpointError> {
        let (Node::Dict(items) | Node::OrderedDict { items, .. }) = self.pickle.node(id) else {
            return Err(contents("_metadata is not a dict"));
        };
        let mut versions = IndexMap::new();
        for &(k, v) in items {
            let Node::Str(prefix) = self.pickle.node(k) else {
                return Err(contents("_metadata key is not a str"));
            };
            let (Node::Dict(fields) | Node::OrderedDict { items: fields, .. }) =
                self.pickle.node(v)
            else {
                return Err(contents(format!("_metadata[{prefix:?}] is not a dict")));
            };
            let version = fields.iter().find_map(|&(fk, fv)| {
                match (self.pickle.node(fk), self.pickle.node(fv)) {
                    (Node::Str(name), &Node::Int(n)) if name == "version" => Some(n),
                    _ => None,
                }
            });
            if let Some(n) = version {
                versions.insert(prefix.clone(), n);
            }
        }
        Ok(versions)
    }

    fn convert(&mut self, id: NodeId, depth: usize) -> Result<Value, CheckpointError> {
        if depth > MAX_DEPTH {
            return Err(contents(format!(
                "objects nested more than {MAX_DEPTH} deep"
            )));
        }
        self.visits = self.visits.checked_sub(1).ok_or_else(|| {
            contents("too many shared references: the object graph expands too much")
        })?;
        let pickle = self.pickle;
        Ok(match pickle.node(id) {
            Node::None => Value::None,
            &Node::Bool(b) => Value::Bool(b),
            &Node::Int(i) => Value::Int(i),
            &Node::Float(f) => Value::Float(f),
            Node::Str(s) => Value::Str(s.clone()),
            Node::Tuple(items) => Value::Tuple(self.convert_all(items, depth)?),
            Node::List(items) => Value::List(self.convert_all(items, depth)?),
            Node::Dict(items) | Node::OrderedDict { items, .. } => {
                let mut dict = IndexMap::with_capacity(items.len());
                for &(k, v) in items {
                    let key = match pickle.node(k) {
                        Node::Str(s) => Key::Str(s.clone()),
                        &Node::Int(i) => Key::Int(i),
                        other => {
                            return Err(contents(format!("dict key of type {}", other.kind())));
                        }
                    };
                    let value = self.convert(v, depth + 1)?;
                    dict.insert(key, value);
                }
                Value::Dict(dict)
            }
            Node::Tensor(spec) => Value::Tensor(self.tensor(id, spec)?),
            Node::QTensor(spec) => Value::Quantized(self.quantized_tensor(id, spec)?),
            &Node::Global(Global::Dtype(dtype)) => Value::Dtype(dtype),
            other => return Err(contents(format!("a bare {} is not a value", other.kind()))),
        })
    }

    fn convert_all(
        &mut self,
        items: &[NodeId],
        depth: usize,
    ) -> Result<Vec<Value>, CheckpointError> {
        items.iter().map(|&i| self.convert(i, depth + 1)).collect()
    }

    /// The quantized tensor of node `id`: its integer view and its quantizer's tensors.
    fn quantized_tensor(
        &mut self,
        id: NodeId,
        spec: &QTensorSpec,
    ) -> Result<QuantizedTensor, CheckpointError> {
        let int_repr = self.tensor(id, &spec.int_repr)?;
        let quantizer = match spec.quantizer {
            QuantizerSpec::PerTensor { scale, zero_point } => {
                Quantizer::PerTensorAffine { scale, zero_point }
            }
            QuantizerSpec::PerChannel {
                scales,
                zero_points,
                axis,
            } => {
                let mut tensor_at = |node: NodeId| match self.pickle.node(node) {
                    Node::Tensor(spec) => self.tensor(node, spec),
                    other => Err(contents(format!(
                        "a quantizer parameter is a {}, not a tensor",
                        other.kind()
                    ))),
                };
                Quantizer::PerChannelAffine {
                    scales: tensor_at(scales)?,
                    zero_points: tensor_at(zero_points)?,
                    axis: usize::try_from(axis)
                        .map_err(|_| contents(format!("per-channel axis {axis}")))?,
                }
            }
        };
        QuantizedTensor::new(int_repr, quantizer)
            .map_err(|e| contents(format!("quantized tensor: {e}")))
    }

    /// The tensor of node `id`, materialised once.
    fn tensor(&mut self, id: NodeId, spec: &TensorSpec) -> Result<Tensor, CheckpointError> {
        if let Some(t) = self.tensors.get(&id) {
            return Ok(t.clone());
        }
        let view = ViewKey::of(spec);
        let tensor = match self.views.get(&view) {
            Some(t) if t.requires_grad() == spec.requires_grad => t.clone(),
            _ => {
                let t = self.materialise(spec)?;
                self.views.insert(view, t.clone());
                t
            }
        };
        self.tensors.insert(id, tensor.clone());
        Ok(tensor)
    }

    fn materialise(&mut self, spec: &TensorSpec) -> Result<Tensor, CheckpointError> {
        let storage = &spec.storage;
        let view = |problem: &str| CheckpointError::View {
            key: storage.key.clone(),
            problem: problem.into(),
        };
        let numel = checked_view(spec)?;
        let bytes = numel
            .checked_mul(storage.dtype.size_in_bytes() as u64)
            .ok_or_else(|| view("size overflows"))?;
        self.budget = self
            .budget
            .checked_sub(bytes)
            .ok_or_else(|| view("views expand to more bytes than the file holds"))?;
        let data = self.source.storage(storage)?;
        let shape: Vec<usize> = spec.size.iter().map(|&s| s as usize).collect();
        let decode = |source| CheckpointError::Decode {
            key: storage.key.clone(),
            source,
        };
        let tensor = if numel == 0 {
            tensor_from_le_bytes(storage.dtype, data, std::iter::empty(), &shape)
        } else {
            let offsets = StridedOffsets::new(spec);
            tensor_from_le_bytes(storage.dtype, data, offsets, &shape)
        }
        .map_err(decode)?;
        if spec.requires_grad && storage.dtype.is_float() {
            return tensor.requires_grad_(true).map_err(decode);
        }
        Ok(tensor)
    }
}

/// A [`CheckpointError::Contents`]: the objects are not what was asked for.
fn contents(problem: impl Into<String>) -> CheckpointError {
    CheckpointError::Contents {
        problem: problem.into(),
    }
}

/// What identifies a strided view of a storage.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ViewKey {
    storage: String,
    dtype: String,
    offset: u64,
    size: Vec<u64>,
    stride: Vec<u64>,
}

impl ViewKey {
    fn of(spec: &TensorSpec) -> Self {
        ViewKey {
            storage: spec.storage.key.clone(),
            dtype: spec.storage.dtype.to_string(),
            offset: spec.offset,
            size: spec.size.clone(),
            stride: spec.stride.clone(),
        }
    }
}

/// Checks that every element of the view lies inside its storage; returns the view's
/// element count.
fn checked_view(spec: &TensorSpec) -> Result<u64, CheckpointError> {
    let view = |problem: String| CheckpointError::View {
        key: spec.storage.key.clone(),
        problem,
    };
    if spec.size.len() > MAX_DIMS || spec.size.len() != spec.stride.len() {
        return Err(view("size and stride do not match".into()));
    }
    let numel = spec
        .size
        .iter()
        .try_fold(1u64, |n, &s| n.checked_mul(s))
        .filter(|&n| usize::try_from(n).is_ok())
        .ok_or_else(|| view("element count overflows".into()))?;
    if spec.offset > spec.storage.numel {
        return Err(view(format!(
            "offset {} is past the end of the storage ({} elements)",
            spec.offset, spec.storage.numel
        )));
    }
    if numel == 0 {
        return Ok(0);
    }
    let last = spec
        .size
        .iter()
        .zip(&spec.stride)
        .try_fold(spec.offset, |acc, (&size, &stride)| {
            (size - 1).checked_mul(stride)?.checked_add(acc)
        })
        .ok_or_else(|| view("size and stride overflow".into()))?;
    if last >= spec.storage.numel {
        return Err(view(format!(
            "size {:?} with stride {:?} at offset {} reads element {last}, but the storage \
             holds {} elements",
            spec.size, spec.stride, spec.offset, spec.storage.numel
        )));
    }
    Ok(numel)
}

/// The storage element offsets of a strided view in row-major order. Only built for a
/// view [`checked_view`] accepted with at least one element, so no step overflows.
struct StridedOffsets {
    size: Vec<usize>,
    stride: Vec<usize>,
    index: Vec<usize>,
    next: Option<usize>,
}

impl StridedOffsets {
    fn new(spec: &TensorSpec) -> Self {
        StridedOffsets {
            size: spec.size.iter().map(|&s| s as usize).collect(),
            stride: spec.stride.iter().map(|&s| s as usize).collect(),
            index: vec![0; spec.size.len()],
            next: Some(spec.offset as usize),
        }
    }
}

impl Iterator for StridedOffsets {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let current = self.next?;
        // Odometer step: bump the last dimension, carrying into earlier ones.
        let mut offset = current;
        self.next = None;
        for d in (0..self.size.len()).rev() {
            if self.index[d] + 1 < self.size[d] {
                self.index[d] += 1;
                self.next = Some(offset + self.stride[d]);
                break;
            }
            offset -= self.index[d] * self.stride[d];
            self.index[d] = 0;
        }
        Some(current)
    }
}
