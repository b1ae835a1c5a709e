//! JSON in and out, the way the reference library sees it.
//!
//! * [`parse_strict`] reads a caller's body into an order-preserving [`Value`](serde_json::Value) and refuses
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

mod parse;
mod write;

pub use parse::{
    parse_strict, parse_strict_metered, type_name, Duplicate, JsonError, Step, METER_STEP,
};
pub use write::{
    to_python, write_escaped, write_float_repr, write_python, write_python_str, NonFiniteNumber,
};
