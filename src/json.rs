//! JSON in and out, the way the reference library sees it.
//!
//! * [`parse_strict`] reads a caller's body into an order-preserving [`Value`] and refuses
//!   duplicate keys at any depth (serde_json alone keeps the last one silently), saying
//!   where (a [`Duplicate`]) without ever putting the key in a message: keys are the
//!   caller's content (state keys, option labels).
//!   Numbers keep the text the caller wrote (`arbitrary_precision`), so `2**64` and `10**30`
//!   survive exactly.
//! * [`write_python`] writes a value byte for byte as Python's
//!   `json.dumps(v, ensure_ascii=False, allow_nan=False)`: `", "` and `": "` separators, raw
//!   UTF-8, escapes only for `"` `\\` and C0 controls, integers as written, floats as
//!   Python's `repr`. The prompt is made of this text, so a single differing byte changes
//!   what the model sees.

use std::cell::{Cell, RefCell};
use std::fmt::{self, Write as _};

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::map::Entry;
use serde_json::{Map, Number, Value};

/// Why a body is not acceptable JSON.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not JSON at all (syntax, encoding, nesting deeper than 128). serde_json's syntax
    /// messages name a line and column, never the text found there.
    #[error("the body is not valid JSON: {0}")]
    Syntax(String),
    /// Valid JSON, but some object names a key twice.
    #[error("{0}")]
    DuplicateKey(Duplicate),
    /// The parsed value would hold more memory than its meter granted.
    #[error("the body needs more memory than is free now")]
    OverBudget,
}

/// Where a body repeats a key: the path to the object and the positions of the two
/// entries. The key and the path's keys are kept for the caller-facing rule that decides
/// which of them may be named (`request::validate::duplicate_key`); this type's own
/// `Display` and `Debug` name none of them, so logging it leaks nothing.
#[derive(Clone, PartialEq, Eq)]
pub struct Duplicate {
    /// From the body down to the object that repeats a key.
    pub path: Vec<Step>,
    /// The repeated key.
    pub key: String,
    /// Position of the key's first entry in its object (0-based, in body order).
    pub first: usize,
    /// Position of the entry that repeats it.
    pub again: usize,
}

/// One step of a [`Duplicate`]'s path.
#[derive(Clone, PartialEq, Eq)]
pub enum Step {
    /// Into an object's value under this key.
    Key(String),
    /// Into an array's element at this index.
    Index(usize),
}

impl fmt::Debug for Step {
    /// A key by its length only, as everywhere in this type.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Key(k) => write!(f, "Key({} bytes)", k.len()),
            Step::Index(i) => write!(f, "Index({i})"),
        }
    }
}

impl fmt::Display for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an object {} levels deep names a key twice (keys #{} and #{} of that object)",
            self.path.len(),
            self.first,
            self.again
        )
    }
}

impl fmt::Debug for Duplicate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Duplicate")
            .field("depth", &self.path.len())
            .field("first", &self.first)
            .field("again", &self.again)
            .finish_non_exhaustive()
    }
}

/// The key serde_json uses to hand an `arbitrary_precision` number to a visitor.
const NUMBER_TOKEN: &str = "$serde_json::private::Number";

/// Parses `bytes` as one JSON value, refusing duplicate object keys anywhere.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, JsonError> {
    parse_strict_metered(bytes, &|_| true)
}

/// [`parse_strict`], asking `grow` for the memory the value will hold as it is built:
/// `grow(n)` is called with the estimated total so far (in steps of [`METER_STEP`]), and
/// `false` ends the parse with [`JsonError::OverBudget`]. The text alone does not bound
/// the value: `[1,1,…]` costs about 50 bytes of value for every 2 bytes of text.
pub fn parse_strict_metered(
    bytes: &[u8],
    grow: &dyn Fn(usize) -> bool,
) -> Result<Value, JsonError> {
    let strict = Strict {
        found: RefCell::new(None),
        used: Cell::new(0),
        granted: Cell::new(0),
        grow,
        over: Cell::new(false),
    };
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let parsed = StrictValue(&strict)
        .deserialize(&mut de)
        .and_then(|value| de.end().map(|()| value));
    if strict.over.get() {
        return Err(JsonError::OverBudget);
    }
    parsed.map_err(|e| match strict.found.into_inner() {
        Some(mut duplicate) => {
            // Steps were added on the way out, innermost first.
            duplicate.path.reverse();
            JsonError::DuplicateKey(duplicate)
        }
        None => JsonError::Syntax(e.to_string()),
    })
}

/// How far past its use a metered parse asks for memory at a time, so that the meter is
/// asked once in a while, not for every value.
pub const METER_STEP: usize = 256 * 1024;

/// What every level of a strict parse shares: the duplicate found, if any, and the meter.
struct Strict<'a> {
    /// Where a repeated key was found (the path is added on the way out).
    found: RefCell<Option<Duplicate>>,
    /// Estimated bytes of the value built so far.
    used: Cell<usize>,
    /// Bytes `grow` has granted.
    granted: Cell<usize>,
    /// Asked for more when `used` passes `granted`.
    grow: &'a dyn Fn(usize) -> bool,
    /// Set when `grow` refused: the parse failed for memory, not syntax.
    over: Cell<bool>,
}

impl Strict<'_> {
    /// Counts `bytes` more of the value, asking the meter when the grant is used up.
    fn charge<E: de::Error>(&self, bytes: usize) -> Result<(), E> {
        let used = self.used.get().saturating_add(bytes);
        self.used.set(used);
        if used > self.granted.get() {
            let want = used.saturating_add(METER_STEP);
            if !(self.grow)(want) {
                self.over.set(true);
                return Err(E::custom("out of memory budget"));
            }
            self.granted.set(want);
        }
        Ok(())
    }
}

/// Estimated bytes of one value: its slot (twice, for the slack of the growing array or
/// map that holds it) and the heap bytes of `text_len` (a string, key or number literal),
/// as malloc rounds them.
fn value_cost(text_len: usize) -> usize {
    let heap = if text_len == 0 {
        0
    } else {
        text_len.max(24).next_multiple_of(16) + 8
    };
    2 * std::mem::size_of::<Value>() + heap
}

/// A seed that builds a [`Value`] and fails on a repeated key, recording where in the
/// cell it shares with every level (serde's errors carry only text, and that text must
/// not hold the key). Each level adds its own step to a recorded duplicate as the error
/// passes through it, so the path costs nothing until there is one.
#[derive(Clone, Copy)]
struct StrictValue<'a>(&'a Strict<'a>);

impl StrictValue<'_> {
    /// Adds `step` (the way into the value that failed) to the duplicate found below, if
    /// that is why it failed.
    fn within(self, step: Step) {
        if let Some(duplicate) = self.0.found.borrow_mut().as_mut() {
            duplicate.path.push(step);
        }
    }
}

impl<'de> DeserializeSeed<'de> for StrictValue<'_> {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        self.0.charge(value_cost(0))?;
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        self.0.charge(value_cost(20))?;
        Ok(Value::Number(v.into()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        self.0.charge(value_cost(20))?;
        Ok(Value::Number(v.into()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        self.0.charge(value_cost(24))?;
        Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("non-finite number"))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        self.0.charge(value_cost(v.len()))?;
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        self.0.charge(value_cost(v.len()))?;
        Ok(Value::String(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        self.0.charge(value_cost(0))?;
        Ok(Value::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.0.charge(value_cost(0))?;
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        loop {
            match seq.next_element_seed(self) {
                Ok(Some(v)) => out.push(v),
                Ok(None) => return Ok(Value::Array(out)),
                Err(e) => {
                    self.within(Step::Index(out.len()));
                    return Err(e);
                }
            }
        }
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if key == NUMBER_TOKEN && out.is_empty() {
                // An arbitrary-precision number: its literal text comes as the value.
                let literal: String = map.next_value()?;
                self.0.charge(value_cost(literal.len()))?;
                let number: Number = serde_json::from_str(&literal).map_err(de::Error::custom)?;
                return Ok(Value::Number(number));
            }
            // The key's string and the map's hash and index slots.
            self.0.charge(value_cost(key.len()))?;
            let value = match map.next_value_seed(self) {
                Ok(value) => value,
                Err(e) => {
                    self.within(Step::Key(key));
                    return Err(e);
                }
            };
            let again = out.len();
            // One hash of the key for both the check and the insert.
            match out.entry(key) {
                Entry::Occupied(taken) => {
                    let key = taken.key().clone();
                    let first = out.keys().position(|k| *k == key).unwrap_or(0);
                    *self.0.found.borrow_mut() = Some(Duplicate {
                        path: Vec::new(),
                        key,
                        first,
                        again,
                    });
                    return Err(de::Error::custom("a key appears twice"));
                }
                Entry::Vacant(slot) => {
                    slot.insert(value);
                }
            }
        }
        Ok(Value::Object(out))
    }
}

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

/// The JSON type of `v`, with its article, as messages say it after "got" (never the
/// value: it may be a caller's content, or echo it).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// The duplicate `parse_strict` finds in `text`.
    fn duplicate(text: &str) -> Duplicate {
        match parse_strict(text.as_bytes()) {
            Err(JsonError::DuplicateKey(d)) => d,
            other => panic!("{text}: {other:?}"),
        }
    }

    fn key(k: &str) -> Step {
        Step::Key(k.into())
    }

    #[test]
    fn a_metered_parse_asks_for_what_its_value_holds() {
        let asked = Cell::new(0usize);
        let grow = |n: usize| {
            asked.set(n);
            n <= 4 * 1024 * 1024
        };
        // A long string costs about its text.
        let text = format!("{{\"s\": \"{}\"}}", "x".repeat(1_000_000));
        assert!(parse_strict_metered(text.as_bytes(), &grow).is_ok());
        assert!(asked.get() >= 1_000_000 && asked.get() <= 1_000_000 + 2 * METER_STEP);
        // 200 KB of `1,` is far more as values: refused, and not as a syntax error.
        let ones = format!("[{}1]", "1,".repeat(100_000));
        assert!(matches!(
            parse_strict_metered(ones.as_bytes(), &grow),
            Err(JsonError::OverBudget)
        ));
        assert!(
            parse_strict(ones.as_bytes()).is_ok(),
            "unmetered, it parses"
        );
    }

    #[test]
    fn duplicate_keys_are_found_at_any_depth_with_their_path() {
        let d = duplicate(r#"{"a": {"x": 1, "y": 2, "x": 3}}"#);
        assert_eq!(
            (d.path, d.key.as_str(), d.first, d.again),
            (vec![key("a")], "x", 0, 2)
        );
        let d = duplicate(r#"{"s": [0, {"k": [{"q": 1, "q": 2}]}], "t": 1}"#);
        let path = vec![key("s"), Step::Index(1), key("k"), Step::Index(0)];
        assert_eq!((d.path, d.first, d.again), (path, 0, 1));
        let d = duplicate(r#"{"a": 1, "b": 2, "a": 3}"#);
        assert_eq!((d.path, d.first, d.again), (vec![], 0, 2));
        assert!(parse_strict(br#"[{"a":1},{"a":1}]"#).is_ok());
        assert!(matches!(parse_strict(b"{"), Err(JsonError::Syntax(_))));
        assert!(matches!(parse_strict(b"{} x"), Err(JsonError::Syntax(_))));
        assert!(matches!(
            parse_strict(br#"{"a": 1} {"a": 1, "a": 2}"#),
            Err(JsonError::Syntax(_))
        ));
    }

    #[test]
    fn a_duplicate_never_shows_its_keys() {
        let d = duplicate(r#"{"canary-a": [{"canary-k": 1, "canary-k": 2}]}"#);
        let shown = format!("{d} {d:?} {:?}", JsonError::DuplicateKey(d.clone()));
        assert!(!shown.contains("canary"), "{shown}");
        assert_eq!(
            d.to_string(),
            "an object 2 levels deep names a key twice (keys #0 and #1 of that object)"
        );
    }

    #[test]
    fn overflowing_floats_are_refused() {
        let v = parse_strict(b"1e400").expect("parses as a literal");
        assert_eq!(to_python(&v), Err(NonFiniteNumber));
    }
}
