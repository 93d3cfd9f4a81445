//! Small JSON helpers shared by the state documents.
//!
//! The original system is written in TypeScript, so its files may hold
//! timestamps as floats (`1767225600000.0`) or counters as `null`; the
//! readers here accept any non-negative number and treat `null` as absent.
//! Field extraction never echoes a value in its error text, because the
//! value might be a secret in the wrong place.

use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// A non-negative number as epoch milliseconds (or a counter).
pub(crate) fn as_ms(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| {
            n.as_f64()
                .filter(|f| f.is_finite() && *f >= 0.0)
                .map(|f| f.round() as u64)
        }),
        _ => None,
    }
}

/// Serde adapter: `Option<u64>` from any non-negative number or `null`.
pub(crate) fn de_opt_ms<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_ms(&v)
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("expected a non-negative number")),
    }
}

/// Serde adapter: a counter that may be absent, `null` or a float.
pub(crate) fn de_count<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    Ok(de_opt_ms(d)?.map_or(0, |n| n.min(u64::from(u32::MAX)) as u32))
}

/// Reads an optional string field; `Err` names the field, never the value.
pub(crate) fn opt_str(obj: &Map<String, Value>, field: &str) -> Result<Option<String>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(format!("field `{field}` must be a string")),
    }
}

/// Reads an optional timestamp field; `Err` names the field, never the value.
pub(crate) fn opt_ms(obj: &Map<String, Value>, field: &str) -> Result<Option<u64>, String> {
    match obj.get(field) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => as_ms(v)
            .map(Some)
            .ok_or_else(|| format!("field `{field}` must be a non-negative number")),
    }
}

/// A short description of a JSON value's kind, for messages.
pub(crate) fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_of_all_shapes() {
        assert_eq!(as_ms(&json!(5)), Some(5));
        assert_eq!(as_ms(&json!(1.6e12)), Some(1_600_000_000_000));
        assert_eq!(as_ms(&json!(-1)), None);
        assert_eq!(as_ms(&json!("5")), None);
    }
}
