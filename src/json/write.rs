//! Writing a value byte for byte as Python's `json.dumps(v, ensure_ascii=False,
//! allow_nan=False)`: the prompt is made of this text.

use std::fmt::Write as _;

use serde_json::Value;

/// A number that Python's `json.dumps(..., allow_nan=False)` refuses: a float literal
/// outside the range of `f64` (Python reads `1e400` as `inf`). The message does not repeat
/// the number: it sits in the state, instructions or a description, the caller's content.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("it holds a number outside the range of a 64-bit float (about ±1.8e308)")]
pub struct NonFiniteNumber;

/// Writes `v` as Python's `json.dumps(v, ensure_ascii=False, allow_nan=False)` would.
pub fn write_python(out: &mut String, v: &Value) -> Result<(), NonFiniteNumber> {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(true) => out.push_str("true"),
        Value::Bool(false) => out.push_str("false"),
        Value::Number(n) => write_number(out, n.as_str())?,
        Value::String(s) => write_python_str(out, s),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python(out, item)?;
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_python_str(out, k);
                out.push_str(": ");
                write_python(out, item)?;
            }
            out.push('}');
        }
    }
    Ok(())
}

/// `write_python` into a fresh string.
pub fn to_python(v: &Value) -> Result<String, NonFiniteNumber> {
    let mut out = String::new();
    write_python(&mut out, v)?;
    Ok(out)
}

/// Writes a JSON string literal with Python's escapes (`ensure_ascii=False`).
pub fn write_python_str(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    write_escaped(out, s);
    out.push('"');
}

/// Writes the inside of `s`'s JSON string literal: `"` `\\` and C0 controls escaped
/// (`\n`-style where JSON has one, else `\u00xx`), everything else as is. These are both
/// Python's `json.dumps(ensure_ascii=False)` bytes and serde_json's, so the prompt's pieces
/// can be escaped once each for an upstream body and joined.
pub fn write_escaped(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut start = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let escape = ESCAPE[usize::from(b)];
        if escape == 0 {
            continue;
        }
        // `b` is ASCII, so `i` is a character boundary.
        out.push_str(&s[start..i]);
        out.push('\\');
        if escape == b'u' {
            out.push_str("u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
        } else {
            out.push(char::from(escape));
        }
        start = i + 1;
    }
    out.push_str(&s[start..]);
}

/// Per byte: 0 when it stands for itself in a JSON string, else the letter after the
/// backslash of its escape (`u` for `\u00xx`). A table, as serde_json has, so the common
/// byte costs one load and one test.
static ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Writes a JSON number literal the way Python re-serialises what `json.loads` read:
/// integers keep their digits (Python ints are unbounded), floats go through `repr`.
fn write_number(out: &mut String, literal: &str) -> Result<(), NonFiniteNumber> {
    let is_float = literal.bytes().any(|b| matches!(b, b'.' | b'e' | b'E'));
    if !is_float {
        // `-0` is the int 0 in Python.
        out.push_str(if literal == "-0" { "0" } else { literal });
        return Ok(());
    }
    let x: f64 = literal.parse().map_err(|_| NonFiniteNumber)?;
    if !x.is_finite() {
        return Err(NonFiniteNumber);
    }
    write_float_repr(out, x);
    Ok(())
}

/// Python's `repr(float)`: the shortest round-tripping digits, positional notation when
/// the decimal exponent is in [-4, 16), scientific (`1e-07`, `1.5e+300`) otherwise, and a
/// trailing `.0` on integral positional values.
pub fn write_float_repr(out: &mut String, x: f64) {
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    // Rust's `{:e}` gives the same shortest round-trip digits as Python's repr.
    let sci = format!("{:e}", x.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    if x.is_sign_negative() {
        out.push('-');
    }
    // Value = 0.DIGITS × 10^decpt.
    let decpt = exp + 1;
    if (-4 < decpt) && (decpt <= 16) {
        let ndigits = digits.len() as i32;
        if decpt <= 0 {
            out.push_str("0.");
            for _ in 0..(-decpt) {
                out.push('0');
            }
            out.push_str(&digits);
        } else if decpt >= ndigits {
            out.push_str(&digits);
            for _ in 0..(decpt - ndigits) {
                out.push('0');
            }
            out.push_str(".0");
        } else {
            let (int_part, frac) = digits.split_at(decpt as usize);
            out.push_str(int_part);
            out.push('.');
            out.push_str(frac);
        }
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::json::parse_strict;

    #[test]
    fn escapes_are_serde_jsons_bytes() {
        let every_ascii: String = (0u8..0x80).map(char::from).collect();
        for text in [every_ascii.as_str(), "é ✓ 𝄞 \u{7f}", "", "plain"] {
            let mut ours = String::from('"');
            write_escaped(&mut ours, text);
            ours.push('"');
            assert_eq!(ours, serde_json::to_string(text).expect("string"));
        }
    }

    proptest::proptest! {
        /// Whatever mix of plain text, quotes, backslashes, controls and multi-byte
        /// characters a piece holds, its escape is serde_json's.
        #[test]
        fn any_text_escapes_as_serde_json(
            text in "[a-z \"\\\\\u{0}-\u{1f}\u{7f}é✓𝄞]{0,40}"
        ) {
            let mut ours = String::from('"');
            write_escaped(&mut ours, &text);
            ours.push('"');
            proptest::prop_assert_eq!(ours, serde_json::to_string(&text).expect("string"));
        }
    }

    fn py(text: &str) -> String {
        to_python(&parse_strict(text.as_bytes()).expect("parses")).expect("finite")
    }

    #[test]
    fn floats_follow_python_repr() {
        let cases = [
            ("0.1", "0.1"),
            ("1e-7", "1e-07"),
            ("2.0", "2.0"),
            ("1e15", "1000000000000000.0"),
            ("1e16", "1e+16"),
            ("-0.0", "-0.0"),
            ("1.5e300", "1.5e+300"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("5e-324", "5e-324"),
            ("0.0001", "0.0001"),
            ("0.00001", "1e-05"),
            ("123456.789", "123456.789"),
            ("1E5", "100000.0"),
            ("-2.5e-3", "-0.0025"),
            ("9007199254740993.0", "9007199254740992.0"),
        ];
        for (input, want) in cases {
            assert_eq!(py(input), want, "input {input}");
        }
    }

    #[test]
    fn integers_keep_their_digits() {
        assert_eq!(py("18446744073709551616"), "18446744073709551616");
        assert_eq!(
            py("1000000000000000000000000000000"),
            "1000000000000000000000000000000"
        );
        assert_eq!(py("-0"), "0");
        assert_eq!(py("-17"), "-17");
    }

    #[test]
    fn strings_escape_like_python() {
        let s = "q\"b\\n\n\r\t\u{8}\u{c}\u{0}\u{1}\u{1f}\u{7f}/\u{2028}é😀";
        let v = Value::String(s.into());
        assert_eq!(
            to_python(&v).expect("ok"),
            "\"q\\\"b\\\\n\\n\\r\\t\\b\\f\\u0000\\u0001\\u001f\u{7f}/\u{2028}é😀\""
        );
    }

    #[test]
    fn containers_use_python_separators_and_keep_order() {
        assert_eq!(
            py(r#"{"b": [1, {}, []], "a": null}"#),
            r#"{"b": [1, {}, []], "a": null}"#
        );
    }

    #[test]
    fn overflowing_floats_are_refused() {
        let v = parse_strict(b"1e400").expect("parses as a literal");
        assert_eq!(to_python(&v), Err(NonFiniteNumber));
    }
}
