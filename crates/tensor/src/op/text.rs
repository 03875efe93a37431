//! The attributes an op prints after its name, and reading an op back from its name and
//! attributes. Both come from each op family's serde form, so a new variant of a family needs
//! nothing here: its name (from `OpDef::name`) and its fields are its text.

use super::{Op, OpDef};
use serde::Serialize;
use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde_json::Value;

/// The attributes of a variant of a serde enum family as JSON text (fields in declaration
/// order), or `None` for a unit variant, whose name says everything.
pub(crate) fn variant_attributes<T: Serialize>(family: &T) -> Option<String> {
    let value = serde_json::to_value(family).ok()?;
    match value {
        Value::String(_) => None,
        Value::Object(map) if map.len() == 1 => {
            let text = serde_json::to_string(family).ok()?;
            // `{"Variant":INNER}`: keep INNER as written, in declaration order.
            let start = text.find(':')? + 1;
            Some(text[start..text.len() - 1].to_string())
        }
        _ => serde_json::to_string(family).ok(),
    }
}

/// The whole serde form of a struct family as JSON text.
pub(crate) fn struct_attributes<T: Serialize>(family: &T) -> Option<String> {
    serde_json::to_string(family).ok()
}

/// Whether `op` prints as exactly `name` and `attrs`.
fn prints_as(op: &dyn OpDef, name: &str, attrs: Option<&Value>) -> bool {
    if op.name() != name {
        return false;
    }
    let own = op
        .attributes()
        .map(|text| serde_json::from_str::<Value>(&text).ok());
    match (own, attrs) {
        (None, None) => true,
        (Some(Some(own)), Some(attrs)) => own == *attrs,
        _ => false,
    }
}

/// The variant of the enum family `T` that prints as `name` and `attrs`.
pub(crate) fn decode_variant<T: DeserializeOwned + OpDef>(
    name: &str,
    attrs: Option<&Value>,
) -> Option<T> {
    variant_names::<T>().iter().find_map(|variant| {
        let value = match attrs {
            None => Value::String((*variant).to_string()),
            Some(attrs) => Value::Object(
                [((*variant).to_string(), attrs.clone())]
                    .into_iter()
                    .collect(),
            ),
        };
        let op = T::deserialize(value).ok()?;
        prints_as(&op, name, attrs).then_some(op)
    })
}

/// The struct family `T` with these attributes, if it prints as `name`.
pub(crate) fn decode_struct<T: DeserializeOwned + OpDef>(
    name: &str,
    attrs: Option<&Value>,
) -> Option<T> {
    let op = T::deserialize(attrs?.clone()).ok()?;
    prints_as(&op, name, attrs).then_some(op)
}

/// `op` if it prints as `name` and `attrs` (for ops without attributes, such as `matmul`).
pub(crate) fn decode_fixed(op: Op, name: &str, attrs: Option<&Value>) -> Option<Op> {
    let matches = op.name() == name && attrs.is_none();
    matches.then_some(op)
}

/// The variant names serde derived for the enum `T`, read by asking `T` to deserialize itself
/// from a deserializer that records the names it is offered.
fn variant_names<T: DeserializeOwned>() -> &'static [&'static str] {
    let mut probe = VariantProbe(&[]);
    let _ = T::deserialize(&mut probe);
    probe.0
}

struct VariantProbe(&'static [&'static str]);

impl<'de> Deserializer<'de> for &mut VariantProbe {
    type Error = de::value::Error;

    fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
        Err(de::Error::custom("not an enum"))
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        variants: &'static [&'static str],
        _visitor: V,
    ) -> Result<V::Value, Self::Error> {
        self.0 = variants;
        Err(de::Error::custom("variant names read"))
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier
        ignored_any
    }
}
