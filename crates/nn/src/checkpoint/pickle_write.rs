//! A pickler that writes values the way `torch.save` does (protocol 2, CPython's opcode
//! choices and batching, `BINPUT` memoisation), collecting each tensor's bytes as a
//! storage record for the zip writer.

use std::collections::HashMap;

use indexmap::IndexMap;
use tessera_tensor::{Tensor, TensorId};

use super::CheckpointError;
use super::dtype_bytes::tensor_to_le_bytes;
use super::pickle_ops as op;
use super::torch_globals::Global;
use crate::{Key, QuantizedTensor, Quantizer, StateDict, Value, ValueStateDict};

/// CPython's `_BATCHSIZE`: items per `SETITEMS`/`APPENDS`.
const BATCH: usize = 1000;

/// One storage record: `data/<key>` in the zip.
pub(crate) struct StorageRecord {
    pub key: String,
    pub bytes: Vec<u8>,
}

/// A finished pickle and the storages it refers to, in key order.
pub(crate) struct Pickled {
    pub pickle: Vec<u8>,
    pub storages: Vec<StorageRecord>,
}

/// Pickles a general value; dicts become plain `dict`s.
pub(crate) fn pickle_value(value: &Value) -> Result<Pickled, CheckpointError> {
    let mut p = Pickler::default();
    p.proto();
    p.value(value)?;
    Ok(p.finish())
}

/// Pickles a state dict as PyTorch does: an `OrderedDict` whose `_metadata` holds
/// `{prefix: {"version": n}}`.
pub(crate) fn pickle_state_dict(state: &StateDict) -> Result<Pickled, CheckpointError> {
    let mut p = Pickler {
        detach: true,
        ..Pickler::default()
    };
    p.proto();
    p.ordered_dict_start();
    p.batch_setitems(state.iter(), |p, (k, t)| {
        p.string(k);
        p.tensor(t)
    })?;
    if !state.metadata.is_empty() {
        p.versions(&state.metadata)?;
    }
    Ok(p.finish())
}

/// Pickles a state dict of any values as [`pickle_state_dict`] does a tensor one.
pub(crate) fn pickle_value_state_dict(state: &ValueStateDict) -> Result<Pickled, CheckpointError> {
    let mut p = Pickler {
        detach: true,
        ..Pickler::default()
    };
    p.proto();
    p.ordered_dict_start();
    p.batch_setitems(state.entries.iter(), |p, (k, v)| {
        p.string(k);
        p.value(v)
    })?;
    if !state.metadata.is_empty() {
        p.versions(&state.metadata)?;
    }
    Ok(p.finish())
}

#[derive(Default)]
struct Pickler {
    /// Write `requires_grad=False` for every tensor, as `state_dict()` holds detached ones.
    detach: bool,
    out: Vec<u8>,
    next_memo: u32,
    strings: HashMap<String, u32>,
    globals: HashMap<(&'static str, &'static str), u32>,
    tensors: HashMap<TensorId, u32>,
    storages: Vec<StorageRecord>,
}

impl Pickler {
    fn finish(mut self) -> Pickled {
        self.out.push(op::STOP);
        Pickled {
            pickle: self.out,
            storages: self.storages,
        }
    }

    fn proto(&mut self) {
        self.out.extend_from_slice(&[op::PROTO, 2]);
    }

    /// Memoises the object just written (`BINPUT`, or `LONG_BINPUT` past 255).
    fn memoize(&mut self) -> u32 {
        let index = self.next_memo;
        self.next_memo += 1;
        match u8::try_from(index) {
            Ok(i) => self.out.extend_from_slice(&[op::BINPUT, i]),
            Err(_) => {
                self.out.push(op::LONG_BINPUT);
                self.out.extend_from_slice(&index.to_le_bytes());
            }
        }
        index
    }

    fn memo_get(&mut self, index: u32) {
        match u8::try_from(index) {
            Ok(i) => self.out.extend_from_slice(&[op::BINGET, i]),
            Err(_) => {
                self.out.push(op::LONG_BINGET);
                self.out.extend_from_slice(&index.to_le_bytes());
            }
        }
    }

    // ----- atoms -----

    /// CPython's `save_long`: the smallest of `BININT1`, `BININT2`, `BININT`, `LONG1`.
    fn int(&mut self, v: i64) {
        if let Ok(b) = u8::try_from(v) {
            self.out.extend_from_slice(&[op::BININT1, b]);
        } else if let Ok(w) = u16::try_from(v) {
            self.out.push(op::BININT2);
            self.out.extend_from_slice(&w.to_le_bytes());
        } else if let Ok(i) = i32::try_from(v) {
            self.out.push(op::BININT);
            self.out.extend_from_slice(&i.to_le_bytes());
        } else {
            let bytes = v.to_le_bytes();
            // Shortest two's-complement encoding that still has the right sign bit.
            let mut n = 8;
            while n > 1 {
                let (last, prev) = (bytes[n - 1], bytes[n - 2]);
                if (last == 0 && prev & 0x80 == 0) || (last == 0xff && prev & 0x80 != 0) {
                    n -= 1;
                } else {
                    break;
                }
            }
            self.out.extend_from_slice(&[op::LONG1, n as u8]);
            self.out.extend_from_slice(&bytes[..n]);
        }
    }

    fn float(&mut self, v: f64) {
        self.out.push(op::BINFLOAT);
        self.out.extend_from_slice(&v.to_be_bytes());
    }

    fn bool(&mut self, v: bool) {
        self.out.push(if v { op::NEWTRUE } else { op::NEWFALSE });
    }

    /// A `str`, memoised by value (CPython memoises by identity; equal strings are
    /// interchangeable when unpickled).
    fn string(&mut self, s: &str) {
        if let Some(&index) = self.strings.get(s) {
            self.memo_get(index);
            return;
        }
        let index = self.fresh_string(s);
        self.strings.insert(s.to_string(), index);
    }

    /// A `str` written and memoised but never reused: a storage key, which in PyTorch is
    /// a string object of its own (so `_metadata`'s prefix `"0"` does not share it).
    fn fresh_string(&mut self, s: &str) -> u32 {
        self.out.push(op::BINUNICODE);
        self.out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        self.out.extend_from_slice(s.as_bytes());
        self.memoize()
    }

    fn global(&mut self, global: Global) {
        let path = global.path();
        if let Some(&index) = self.globals.get(&path) {
            self.memo_get(index);
            return;
        }
        self.out.push(op::GLOBAL);
        for part in [path.0, path.1] {
            self.out.extend_from_slice(part.as_bytes());
            self.out.push(b'\n');
        }
        let index = self.memoize();
        self.globals.insert(path, index);
    }

    // ----- containers -----

    /// A tuple of already-known length: `TUPLE1..3` up to three items, `MARK ... TUPLE`
    /// beyond, `EMPTY_TUPLE` (not memoised) for none.
    fn tuple<T>(
        &mut self,
        items: &[T],
        mut item: impl FnMut(&mut Self, &T) -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        if items.is_empty() {
            self.out.push(op::EMPTY_TUPLE);
            return Ok(());
        }
        if items.len() > 3 {
            self.out.push(op::MARK);
        }
        for i in items {
            item(self, i)?;
        }
        self.out.push(match items.len() {
            1 => op::TUPLE1,
            2 => op::TUPLE2,
            3 => op::TUPLE3,
            _ => op::TUPLE,
        });
        self.memoize();
        Ok(())
    }

    /// CPython's `_batch_setitems`: `SETITEM` for a lone pair, `MARK ... SETITEMS` else.
    fn batch_setitems<I: Iterator>(
        &mut self,
        items: I,
        mut pair: impl FnMut(&mut Self, I::Item) -> Result<(), CheckpointError>,
    ) -> Result<(), CheckpointError> {
        let items: Vec<I::Item> = items.collect();
        let mut items = items.into_iter().peekable();
        while items.peek().is_some() {
            let chunk: Vec<I::Item> = items.by_ref().take(BATCH).collect();
            let single = chunk.len() == 1;
            if !single {
                self.out.push(op::MARK);
            }
            for item in chunk {
                pair(self, item)?;
            }
            self.out
                .push(if single { op::SETITEM } else { op::SETITEMS });
        }
        Ok(())
    }

    /// `OrderedDict()`: `GLOBAL`, `EMPTY_TUPLE`, `REDUCE`, memoised.
    fn ordered_dict_start(&mut self) {
        self.global(Global::OrderedDict);
        self.out.push(op::EMPTY_TUPLE);
        self.out.push(op::REDUCE);
        self.memoize();
    }

    /// The `BUILD` that sets a state dict's `_metadata`.
    fn versions(&mut self, versions: &IndexMap<String, i64>) -> Result<(), CheckpointError> {
        self.out.push(op::EMPTY_DICT);
        self.memoize();
        self.string("_metadata");
        self.ordered_dict_start();
        self.batch_setitems(versions.iter(), |p, (prefix, &version)| {
            p.string(prefix);
            p.out.push(op::EMPTY_DICT);
            p.memoize();
            p.string("version");
            p.int(version);
            p.out.push(op::SETITEM);
            Ok(())
        })?;
        self.out.push(op::SETITEM);
        self.out.push(op::BUILD);
        Ok(())
    }

    fn value(&mut self, value: &Value) -> Result<(), CheckpointError> {
        match value {
            Value::None => self.out.push(op::NONE),
            &Value::Bool(b) => self.bool(b),
            &Value::Int(i) => self.int(i),
            &Value::Float(f) => self.float(f),
            Value::Str(s) => self.string(s),
            Value::Tensor(t) => self.tensor(t)?,
            Value::Quantized(q) => self.quantized_tensor(q)?,
            &Value::Dtype(dtype) => self.global(Global::Dtype(dtype)),
            Value::Tuple(items) => self.tuple(items, Self::value)?,
            Value::List(items) => {
                self.out.push(op::EMPTY_LIST);
                self.memoize();
                for chunk in items.chunks(BATCH) {
                    if let [single] = chunk {
                        self.value(single)?;
                        self.out.push(op::APPEND);
                    } else {
                        self.out.push(op::MARK);
                        for item in chunk {
                            self.value(item)?;
                        }
                        self.out.push(op::APPENDS);
                    }
                }
            }
            Value::Dict(dict) => {
                self.out.push(op::EMPTY_DICT);
                self.memoize();
                self.batch_setitems(dict.iter(), |p, (k, v)| {
                    match k {
                        Key::Str(s) => p.string(s),
                        &Key::Int(i) => p.int(i),
                    }
                    p.value(v)
                })?;
            }
        }
        Ok(())
    }

    /// `_rebuild_tensor_v2(persistent_id(("storage", <Storage>, key, "cpu", numel)),
    /// 0, size, stride, requires_grad, OrderedDict())` over a new contiguous storage; a
    /// tensor handle seen before is a `BINGET`, so sharing survives.
    fn tensor(&mut self, tensor: &Tensor) -> Result<(), CheckpointError> {
        if let Some(&index) = self.tensors.get(&tensor.id()) {
            self.memo_get(index);
            return Ok(());
        }
        self.global(Global::RebuildTensorV2);
        self.out.push(op::MARK);
        self.storage(tensor, Global::Storage(tensor.dtype()))?;
        self.bool(tensor.requires_grad() && !self.detach);
        self.ordered_dict_start();
        self.out.push(op::TUPLE);
        self.memoize();
        self.out.push(op::REDUCE);
        let index = self.memoize();
        self.tensors.insert(tensor.id(), index);
        Ok(())
    }

    /// `_rebuild_qtensor(persistent_id(("storage", QInt8Storage, key, "cpu", numel)), 0,
    /// size, stride, quantizer_params, False, OrderedDict())`, as `torch.save` writes a
    /// quantized tensor: `quantizer_params` is `(torch.per_tensor_affine, scale,
    /// zero_point)` or `(torch.per_channel_affine, scales, zero_points, axis)`.
    fn quantized_tensor(&mut self, q: &QuantizedTensor) -> Result<(), CheckpointError> {
        self.global(Global::RebuildQTensor);
        self.out.push(op::MARK);
        self.storage(q.int_repr(), Global::QStorage(crate::TorchDtype::QInt8))?;
        match q.quantizer() {
            &Quantizer::PerTensorAffine { scale, zero_point } => {
                self.global(Global::PerTensorAffine);
                self.float(scale);
                self.int(zero_point);
                self.out.push(op::TUPLE3);
                self.memoize();
            }
            Quantizer::PerChannelAffine {
                scales,
                zero_points,
                axis,
            } => {
                self.out.push(op::MARK);
                self.global(Global::PerChannelAffine);
                self.tensor(scales)?;
                self.tensor(zero_points)?;
                self.int(*axis as i64);
                self.out.push(op::TUPLE);
                self.memoize();
            }
        }
        self.bool(false);
        self.ordered_dict_start();
        self.out.push(op::TUPLE);
        self.memoize();
        self.out.push(op::REDUCE);
        self.memoize();
        Ok(())
    }

    /// The first four arguments of a rebuild call for a new contiguous storage of `tensor`'s
    /// bytes tagged `class`: the persistent id, offset 0, size and stride.
    fn storage(&mut self, tensor: &Tensor, class: Global) -> Result<(), CheckpointError> {
        let shape = tensor.shape();
        let key = self.storages.len().to_string();
        let bytes =
            tensor_to_le_bytes(tensor).map_err(|source| CheckpointError::Encode { source })?;
        self.storages.push(StorageRecord {
            key: key.clone(),
            bytes,
        });
        // The persistent id: a 5-tuple, so MARK ... TUPLE.
        self.out.push(op::MARK);
        self.string("storage");
        self.global(class);
        self.fresh_string(&key);
        self.string("cpu");
        self.int(tensor.numel() as i64);
        self.out.push(op::TUPLE);
        self.memoize();
        self.out.push(op::BINPERSID);
        self.int(0);
        let ints = |p: &mut Self, &v: &usize| {
            p.int(v as i64);
            Ok(())
        };
        self.tuple(&shape, ints)?;
        self.tuple(&contiguous_strides(&shape), ints)
    }
}

/// Row-major strides as PyTorch computes them (a size-0 or size-1 dim counts as 1).
fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1].max(1);
    }
    strides
}
