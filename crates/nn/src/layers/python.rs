//! Python's spelling of the values layer reprs print (`repr(float)`, `True`, tuples), so that
//! `extra_repr` texts match PyTorch's character for character.

/// A float as Python's `repr(float)` prints it: the shortest round-trip digits, fixed
/// notation for decimal exponents from -4 to 15 (`0.0001`, `0.5`, `2.0`), scientific
/// otherwise with a signed two-digit exponent (`1e-05`, `1e+16`).
pub fn py_float(x: f64) -> String {
    if x.is_nan() {
        return "nan".into();
    }
    if x.is_infinite() {
        return if x > 0.0 { "inf" } else { "-inf" }.into();
    }
    if x == 0.0 {
        return if x.is_sign_negative() { "-0.0" } else { "0.0" }.into();
    }
    let scientific = format!("{x:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .expect("`{:e}` always prints an exponent");
    let exponent: i32 = exponent.parse().expect("`{:e}` prints an integer exponent");
    // Python's decimal point position is one more than the scientific exponent.
    let decpt = exponent + 1;
    if decpt <= -4 || decpt > 16 {
        let sign = if exponent < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exponent.abs())
    } else {
        let fixed = format!("{x}");
        if fixed.contains('.') {
            fixed
        } else {
            format!("{fixed}.0")
        }
    }
}

/// `Some(x)` as [`py_float`], `None` as `None`.
pub fn py_opt_float(x: Option<f64>) -> String {
    x.map_or_else(|| "None".into(), py_float)
}

pub fn py_bool(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// A tuple of integers: `(3,)`, `(3, 3)`.
pub fn py_tuple(items: &[usize]) -> String {
    match items {
        [one] => format!("({one},)"),
        _ => format!(
            "({})",
            items
                .iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_print_as_python_repr() {
        let cases = [
            (1e-5, "1e-05"),
            (0.1, "0.1"),
            (0.5, "0.5"),
            (0.01, "0.01"),
            (1.0, "1.0"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (1e16, "1e+16"),
            (1e15, "1000000000000000.0"),
            (123456.789, "123456.789"),
            (-2.5e-7, "-2.5e-07"),
            (1e100, "1e+100"),
        ];
        for (x, expected) in cases {
            assert_eq!(py_float(x), expected, "{x}");
        }
    }

    #[test]
    fn tuples_print_as_python() {
        assert_eq!(py_tuple(&[3]), "(3,)");
        assert_eq!(py_tuple(&[3, 3]), "(3, 3)");
    }
}
