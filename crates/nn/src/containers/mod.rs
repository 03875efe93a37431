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

use crate::{NnError, Result};
use indexmap::IndexMap;

/// The `visit_fields` and `child_module` of a list-like container over its field `$items`:
/// children are named `0`, `1`, ... by position, and an index is looked up without a scan.
macro_rules! indexed_children {
    ($items:ident) => {
        fn visit_fields<'a>(&'a self, visitor: &mut dyn Visitor<'a>) {
            let mut name = [0u8; 20];
            for (i, child) in self.$items.iter().enumerate() {
                visitor.child(
                    $crate::containers::index_name(i, &mut name),
                    child.as_module(),
                );
            }
        }
        fn child_module(&self, name: &str) -> Option<&dyn Module> {
            match name.parse::<usize>() {
                Ok(i) if i < self.$items.len() && i.to_string() == name => {
                    Some(self.$items[i].as_module())
                }
                _ => crate::walk::find_child(self.as_module(), name),
            }
        }
    };
}
pub(crate) use indexed_children;

/// `i` in decimal, written into `buf` (a child's name, made without allocating: walking a
/// module tree, as a compiled module's every call does, then allocates nothing).
pub(crate) fn index_name(i: usize, buf: &mut [u8; 20]) -> &str {
    let (mut n, mut at) = (i, buf.len());
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// Inserts `value` under `name` (`what` names the kind in the error), refusing a name that
/// cannot stand in a qualified path; a replaced entry keeps its position.
pub(crate) fn insert_named<V>(
    items: &mut IndexMap<String, V>,
    what: &str,
    name: String,
    value: V,
) -> Result<()> {
    if name.is_empty() || name.contains('.') {
        return Err(NnError::Invalid(format!(
            "{what} name \"{name}\" can't be empty or contain \".\""
        )));
    }
    items.insert(name, value);
    Ok(())
}

/// The reading methods of a name-keyed, insertion-ordered map held in the field `$items`
/// (an `IndexMap<String, $value>`): `get`, `keys`, `iter`, `len`, `is_empty`.
macro_rules! ordered_map_reads {
    ($items:ident: $value:ty) => {
        pub fn get(&self, name: &str) -> Option<&$value> {
            self.$items.get(name)
        }

        pub fn keys(&self) -> impl Iterator<Item = &str> {
            self.$items.keys().map(String::as_str)
        }

        pub fn iter(&self) -> impl Iterator<Item = (&str, &$value)> {
            self.$items.iter().map(|(k, v)| (k.as_str(), v))
        }

        pub fn len(&self) -> usize {
            self.$items.len()
        }

        pub fn is_empty(&self) -> bool {
            self.$items.is_empty()
        }
    };
}
pub(crate) use ordered_map_reads;

/// `size_str` of a parameter line in ParameterList/ParameterDict reprs (`2x3`).
pub(crate) fn size_str(shape: &[usize]) -> String {
    shape
        .iter()
        .map(|d| d.to_string())
        .collect::<Vec<_>>()
        .join("x")
}
