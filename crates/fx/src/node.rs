//! [`Node`] and [`NodeKind`]: one value of the graph, with FX's opcodes, its tensor metas and
//! free-form metadata.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use tessera_nn::ModuleKind;
use tessera_tensor::{DType, Op, TensorMeta};

/// What a node does: FX's opcodes, plus `GetItem` to pick one value of a multi-output node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum NodeKind {
    /// A graph input; `target` is the input's name (the node's name).
    Placeholder { target: String },
    /// A parameter or buffer read by qualified path (`conv1.weight`).
    GetAttr { target: String },
    /// A call of a leaf submodule by qualified path; `kind` is the module's kind, whose name
    /// `module_repr` starts with (`Conv2d` of `Conv2d(3, 16, kernel_size=(3, 3))`), so the
    /// printed repr gives it back. Graphs saved before kinds were typed spell it `module_type`.
    CallModule {
        target: String,
        #[serde(alias = "module_type", with = "kind_serde")]
        kind: ModuleKind,
        module_repr: String,
    },
    /// A call of one op of the op table.
    CallFunction { op: Op },
    /// Value `index` of a multi-output operand (FX's `operator.getitem`).
    GetItem { index: usize },
    /// The graph's results, its operands in order.
    Output,
}

impl NodeKind {
    /// FX's opcode name, as the tabular form prints it.
    pub fn opcode(&self) -> &'static str {
        match self {
            NodeKind::Placeholder { .. } => "placeholder",
            NodeKind::GetAttr { .. } => "get_attr",
            NodeKind::CallModule { .. } => "call_module",
            NodeKind::CallFunction { .. } => "call_function",
            NodeKind::GetItem { .. } => "getitem",
            NodeKind::Output => "output",
        }
    }
}

/// One node: its unique name, what it does, the shape and dtype of each value it yields, and
/// metadata (free-form strings that copies keep, e.g. the source module or a pass's notes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    pub kind: NodeKind,
    #[serde(with = "metas_serde")]
    pub meta: Vec<TensorMeta>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

/// Serde for `Vec<TensorMeta>` through a mirror struct (the tensor crate does not derive it).
mod metas_serde {
    use super::*;
    use serde::{Deserializer, Serializer};

    #[derive(Serialize, Deserialize)]
    struct MetaRepr {
        shape: Vec<usize>,
        dtype: DType,
    }

    pub fn serialize<S: Serializer>(metas: &[TensorMeta], s: S) -> Result<S::Ok, S::Error> {
        let reprs: Vec<MetaRepr> = metas
            .iter()
            .map(|m| MetaRepr {
                shape: m.shape.clone(),
                dtype: m.dtype,
            })
            .collect();
        reprs.serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<TensorMeta>, D::Error> {
        let reprs = Vec::<MetaRepr>::deserialize(d)?;
        Ok(reprs
            .into_iter()
            .map(|r| TensorMeta::new(r.shape, r.dtype))
            .collect())
    }
}

/// Serde for [`ModuleKind`] as its name (`"Conv2d"`), the text old graphs hold.
mod kind_serde {
    use super::ModuleKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(kind: &ModuleKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(kind.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ModuleKind, D::Error> {
        Ok(ModuleKind::from_name(&String::deserialize(d)?))
    }
}
