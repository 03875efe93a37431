//! `ParameterDict`: parameters by name, in insertion order, registered under their keys.

use crate::{Module, ModuleCore, Parameter, Result, Visitor};
use indexmap::IndexMap;
use tessera_tensor::DType;

/// Named parameters in insertion order. (PyTorch sorts the keys when it is built from a
/// plain Python dict and keeps the order of an `OrderedDict`; insert in the order you want.)
#[derive(Default)]
pub struct ParameterDict {
    core: ModuleCore,
    items: IndexMap<String, Parameter>,
}

/// PyTorch's `torch.typename` of a CPU tensor (`torch.FloatTensor`).
fn legacy_type_name(dtype: DType) -> &'static str {
    match dtype {
        DType::F32 => "torch.FloatTensor",
        DType::F64 => "torch.DoubleTensor",
        DType::F16 => "torch.HalfTensor",
        DType::BF16 => "torch.BFloat16Tensor",
        DType::I64 => "torch.LongTensor",
        DType::I32 => "torch.IntTensor",
        DType::I8 => "torch.CharTensor",
        DType::U8 => "torch.ByteTensor",
        DType::Bool => "torch.BoolTensor",
    }
}

impl ParameterDict {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, name: impl Into<String>, param: Parameter) -> Result<()> {
        super::insert_named(&mut self.items, "parameter", name.into(), param)
    }

    super::ordered_map_reads!(items: Parameter);
}

impl std::ops::Index<&str> for ParameterDict {
    type Output = Parameter;

    fn index(&self, name: &str) -> &Parameter {
        &self.items[name]
    }
}

impl Module for ParameterDict {
    crate::module_core_methods!();
    fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
        for (name, p) in &self.items {
            visitor.parameter(name, Some(p));
        }
    }
    fn type_name(&self) -> String {
        "ParameterDict".into()
    }

    /// `  (foo): Parameter containing: [torch.FloatTensor of size 3]` per parameter.
    fn extra_repr(&self) -> String {
        self.items
            .iter()
            .map(|(k, p)| {
                format!(
                    "  ({k}): Parameter containing: [{} of size {}]",
                    legacy_type_name(p.dtype()),
                    super::size_str(&p.shape())
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}
