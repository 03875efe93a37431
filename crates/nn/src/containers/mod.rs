//! PyTorch's containers: `Sequential`, `ModuleList`, `ModuleDict`, `ParameterList`,
//! `ParameterDict`.

mod module_dict;
mod module_list;
mod parameter_dict;
mod parameter_list;
mod sequential;

pub use module_dict::ModuleDict;
pub use module_list::ModuleList;
pub use parameter_dict::ParameterDict;
pub use parameter_list::ParameterList;
pub use sequential::Sequential;

/// `size_str` of a parameter line in ParameterList/ParameterDict reprs (`2x3`).
pub(crate) fn size_str(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}
