//! Unique node names, made like FX's: invalid characters become `_`, and a taken name gets
//! `_1`, `_2`, ... appended.

use std::collections::HashMap;

/// Turns any candidate into an identifier: `layer1.0.conv` becomes `layer1_0_conv`.
pub fn sanitize(candidate: &str) -> String {
    let mut name: String = candidate
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        name.insert(0, '_');
    }
    name
}

/// Whether `name` is printable and parseable as a node name.
pub fn is_identifier(name: &str) -> bool {
    !name.is_empty() && sanitize(name) == name
}

/// `candidate` if free, else the first free `base_N` counting up (like FX: `relu_1` taken
/// gives `relu_2`, not `relu_1_1`); `counters` remembers where each base's search stopped.
pub fn fresh_name(
    candidate: &str,
    counters: &mut HashMap<String, usize>,
    taken: impl Fn(&str) -> bool,
) -> String {
    let candidate = sanitize(candidate);
    if !taken(&candidate) {
        return candidate;
    }
    let (base, mut number) = match split_counter(&candidate) {
        Some((base, number)) => (base.to_string(), number),
        None => {
            let number = counters.get(&candidate).copied().unwrap_or(0);
            (candidate, number)
        }
    };
    loop {
        number += 1;
        let name = format!("{base}_{number}");
        if !taken(&name) {
            counters.insert(base, number);
            return name;
        }
    }
}

/// `("relu", 2)` for `relu_2`.
fn split_counter(name: &str) -> Option<(&str, usize)> {
    let (base, digits) = name.rsplit_once('_')?;
    let number = digits
        .parse()
        .ok()
        .filter(|_| !base.is_empty() && !digits.starts_with('+'))?;
    Some((base, number))
}
