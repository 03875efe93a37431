//! Checks a safetensors header against the limits before it is parsed into tensors: its
//! declared size, and the number of its entries, counted by a pass that keeps nothing, so
//! a header of half a million empty tensors is refused before it costs memory.

use std::fmt;

use serde::Deserializer as _;
use serde::de::{IgnoredAny, MapAccess, Visitor};

use super::CheckpointError;
use super::limits::{
    CheckpointLimit, SAFETENSORS_MAX_HEADER_BYTES, check, safetensors_tensors_allowed,
};

/// Refuses a header larger than [`SAFETENSORS_MAX_HEADER_BYTES`] or with more entries than a
/// file of this size may hold. What is not a well-formed header (a length past the end of
/// the file, text that is not a JSON object) is left for the safetensors parser to report.
pub(crate) fn check_header(file: &[u8]) -> Result<(), CheckpointError> {
    let Some(len) = file.get(..8) else {
        return Ok(());
    };
    let mut le = [0u8; 8];
    le.copy_from_slice(len);
    let header_len = u64::from_le_bytes(le);
    // A length past the end of the file is a damaged file, not a large header: the parser
    // reports it.
    let Some(header) = usize::try_from(header_len)
        .ok()
        .and_then(|n| file.get(8..8usize.checked_add(n)?))
    else {
        return Ok(());
    };
    check(
        CheckpointLimit::SafetensorsHeader,
        header_len,
        SAFETENSORS_MAX_HEADER_BYTES,
    )?;
    let Ok(entries) = serde_json::Deserializer::from_slice(header).deserialize_map(CountEntries)
    else {
        return Ok(());
    };
    check(
        CheckpointLimit::SafetensorsTensors,
        entries,
        safetensors_tensors_allowed(file.len() as u64),
    )
}

/// Counts a JSON object's entries, skipping their keys and values.
struct CountEntries;

impl<'de> Visitor<'de> for CountEntries {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<u64, A::Error> {
        let mut count = 0u64;
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
            count += 1;
        }
        Ok(count)
    }
}
