//! The state dict that PyTorch's `convert_fx` gives a statically quantized graph module, for
//! Tessera's graph after `ConvertStatic`: torch.fx's layout (see [`crate::FxLayout`]) with
//! each quantized conv and linear holding PyTorch's quantized keys, and a root buffer pair
//! for each input quantize. Dynamic quantized linears and float modules keep their keys.

use crate::fx_layout::{layout_path, layout_state_error};
use crate::{GraphModule, NodeKind};
use indexmap::IndexMap;
use std::collections::HashSet;
use tessera_nn::quantized::{
    QuantizedConv2d, QuantizedConvReLU2d, QuantizedLinear, QuantizedLinearReLU,
};
use tessera_nn::{Module, QuantizedTensor, Quantizer, TorchDtype, Value, ValueStateDict};
use tessera_tensor::op::QuantOp;
use tessera_tensor::op::quant::QParams;
use tessera_tensor::{Op, Tensor};

/// Tessera's keys of a quantized module, which PyTorch's replace.
const TESSERA_KEYS: [&str; 4] = ["weight", "weight_scale", "weight_zero_point", "bias"];

/// The version PyTorch's quantized `Linear` and its `LinearPackedParams` save with; older
/// versions load `weight` and `bias` instead of `_packed_params._packed_params`.
const PACKED_PARAMS_VERSION: i64 = 3;

/// What a quantized module holds, read from its Tessera fields.
struct QuantizedParts<'a> {
    weight: &'a Tensor,
    weight_scale: &'a Tensor,
    weight_zero_point: &'a Tensor,
    bias: Option<&'a Tensor>,
    output: QParams,
    per_channel: bool,
    linear: bool,
}

impl GraphModule {
    /// The state dict of PyTorch's `convert_fx` model of the same graph: as
    /// [`GraphModule::fx_state_dict`], but each static quantized conv holds `weight` (a
    /// `torch.qint8` tensor, per-channel affine on axis 0 or per tensor), `bias`, and its
    /// output's `scale` and `zero_point` (0-d f32 and i64), and each static quantized linear
    /// its output's `scale` and `zero_point`, `_packed_params.dtype` (`torch.qint8`) and
    /// `_packed_params._packed_params` (the tuple of weight and bias), at version 3. Each
    /// `quantize_per_tensor` adds 0-d root buffers named as `convert_fx` names them:
    /// `conv1_input_scale_0` and `conv1_input_zero_point_0` when it quantizes a graph input
    /// for the module `conv1`, `flatten_scale_0` for the output of the module `flatten`. Keys match PyTorch's where
    /// both graphs quantize at the same places. Write it with `save_pt_value_state_dict`.
    pub fn fx_quantized_state_dict(&self) -> crate::Result<ValueStateDict> {
        let plain = self.fx_state_dict()?;
        let mut state = ValueStateDict {
            entries: self.input_quantize_buffers()?,
            metadata: plain.metadata.clone(),
        };
        let quantized = self.quantized_modules()?;
        let mut written = HashSet::new();
        for (key, tensor) in plain.iter() {
            let owner = key.rsplit_once('.').filter(|(path, leaf)| {
                quantized.contains_key(*path) && TESSERA_KEYS.contains(leaf)
            });
            let Some((path, _)) = owner else {
                state
                    .entries
                    .insert(key.to_string(), Value::Tensor(tensor.clone()));
                continue;
            };
            if !written.insert(path.to_string()) {
                continue;
            }
            let parts = &quantized[path];
            for (leaf, value) in torch_entries(parts).map_err(layout_state_error)? {
                state.entries.insert(format!("{path}.{leaf}"), value);
            }
            if parts.linear {
                state.metadata.insert(path.into(), PACKED_PARAMS_VERSION);
                state
                    .metadata
                    .insert(format!("{path}._packed_params"), PACKED_PARAMS_VERSION);
            }
        }
        Ok(state)
    }

    /// Layout path -> parts of every static quantized module a node calls.
    fn quantized_modules(&self) -> crate::Result<IndexMap<String, QuantizedParts<'_>>> {
        let replacements = self.valid_replacements();
        let mut found = IndexMap::new();
        for id in self.graph.nodes() {
            let NodeKind::CallModule { target, .. } = &self.graph.node(&id)?.kind else {
                continue;
            };
            let Some(module) = self.owned_modules().get(target) else {
                continue;
            };
            if let Some(parts) = quantized_parts(module.as_ref()) {
                found.insert(layout_path(target, &replacements), parts);
            }
        }
        Ok(found)
    }

    /// `<prefix>scale_<i>` and `<prefix>zero_point_<i>` for each `quantize_per_tensor`, in
    /// node order, as `convert_fx` names them: the prefix is `<module>_input_` for a graph
    /// input read by the module `<module>` (its first user), else `<module>_` for a value
    /// the module `<module>` wrote, `_` for any other value; `<i>` is the first free index.
    fn input_quantize_buffers(&self) -> crate::Result<IndexMap<String, Value>> {
        let replacements = self.valid_replacements();
        let mut buffers = IndexMap::new();
        let mut taken = HashSet::new();
        for id in self.graph.nodes() {
            let node = self.graph.node(&id)?;
            let NodeKind::CallFunction {
                op:
                    Op::Quant(QuantOp::QuantizePerTensor {
                        scale, zero_point, ..
                    }),
            } = &node.kind
            else {
                continue;
            };
            let Some(input) = self.graph.operands(&id)?.first().cloned() else {
                continue;
            };
            let prefix = match self.graph.node(&input)?.kind {
                NodeKind::Placeholder { .. } => {
                    let first_user = self.graph.users(&id)?.into_iter().next();
                    let scope = match first_user {
                        Some(user) => self.scope(&user, &replacements)?,
                        None => String::new(),
                    };
                    format!("{scope}_input_")
                }
                _ => format!("{}_", self.scope(&input, &replacements)?),
            };
            let index = (0..)
                .find(|i| !taken.contains(&format!("{prefix}scale_{i}")))
                .unwrap_or(0);
            for name in [
                format!("{prefix}scale_{index}"),
                format!("{prefix}zero_point_{index}"),
            ] {
                taken.insert(name);
            }
            buffers.insert(
                format!("{prefix}scale_{index}"),
                Value::Tensor(Tensor::scalar(*scale as f32)),
            );
            buffers.insert(
                format!("{prefix}zero_point_{index}"),
                Value::Tensor(Tensor::scalar(*zero_point)),
            );
        }
        Ok(buffers)
    }

    /// `convert_fx`'s module path of a node, with `_` for `.`: the layout path of a
    /// `call_module` target, the root's (empty) for any other node.
    fn scope(
        &self,
        id: &crate::NodeId,
        replacements: &std::collections::HashMap<String, String>,
    ) -> crate::Result<String> {
        Ok(match &self.graph.node(id)?.kind {
            NodeKind::CallModule { target, .. } => {
                layout_path(target, replacements).replace('.', "_")
            }
            _ => String::new(),
        })
    }
}

/// The parts of a static quantized conv or linear; `None` for any other module.
fn quantized_parts(module: &dyn Module) -> Option<QuantizedParts<'_>> {
    let any = module.as_any();
    macro_rules! parts {
        ($($ty:ty => $linear:expr),*) => {
            $(if let Some(m) = any.downcast_ref::<$ty>() {
                return Some(QuantizedParts {
                    weight: &m.weight,
                    weight_scale: &m.weight_scale,
                    weight_zero_point: &m.weight_zero_point,
                    bias: m.bias.as_ref(),
                    output: m.output,
                    per_channel: m.per_channel(),
                    linear: $linear,
                });
            })*
        };
    }
    parts!(
        QuantizedConv2d => false,
        QuantizedConvReLU2d => false,
        QuantizedLinear => true,
        QuantizedLinearReLU => true
    );
    None
}

/// PyTorch's leaf keys and values of a quantized module, in its order.
fn torch_entries(parts: &QuantizedParts<'_>) -> tessera_nn::Result<Vec<(&'static str, Value)>> {
    let quantizer = if parts.per_channel {
        Quantizer::PerChannelAffine {
            scales: parts.weight_scale.clone(),
            zero_points: parts.weight_zero_point.clone(),
            axis: 0,
        }
    } else {
        let scale = parts.weight_scale.to_vec_f64()?;
        let zero_point = parts.weight_zero_point.to_vec::<i64>()?;
        match (scale.as_slice(), zero_point.as_slice()) {
            (&[scale], &[zero_point]) => Quantizer::PerTensorAffine { scale, zero_point },
            _ => {
                return Err(tessera_nn::NnError::Invalid(format!(
                    "a per-tensor quantized weight needs one scale and zero point, got {} and {}",
                    scale.len(),
                    zero_point.len()
                )));
            }
        }
    };
    let weight = Value::Quantized(QuantizedTensor::new(parts.weight.clone(), quantizer)?);
    let bias = parts.bias.map_or(Value::None, |b| Value::Tensor(b.clone()));
    let scale = Value::Tensor(Tensor::scalar(parts.output.scale));
    let zero_point = Value::Tensor(Tensor::scalar(parts.output.zero_point));
    Ok(if parts.linear {
        vec![
            ("scale", scale),
            ("zero_point", zero_point),
            ("_packed_params.dtype", Value::Dtype(TorchDtype::QInt8)),
            (
                "_packed_params._packed_params",
                Value::Tuple(vec![weight, bias]),
            ),
        ]
    } else {
        vec![
            ("weight", weight),
            ("bias", bias),
            ("scale", scale),
            ("zero_point", zero_point),
        ]
    })
}
