//! Reading a caller's body strictly: duplicate keys refused at any depth (saying where,
//! never which key), numbers kept as written, the memory the value takes metered.

use std::cell::{Cell, RefCell};
use std::fmt;

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
}
