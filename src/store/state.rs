//! `auth-state.json`: runtime routing state, no secrets (SPEC R5.2).
//!
//! ```json
//! {
//!   "version": 1,
//!   "order": {"openai": ["openai:me@x.io", "openai:backup"]},
//!   "lastGood": {"openai": "openai:me@x.io"},
//!   "usageStats": {
//!     "openai:me@x.io": {"lastUsed": 1767225600000, "cooldownUntil": 1767225660000,
//!                        "cooldownReason": "rate_limit", "cooldownModel": "gpt-5",
//!                        "errorCount": 1, "failureCounts": {"rate_limit": 1},
//!                        "lastFailureAt": 1767225600000}
//!   }
//! }
//! ```
//!
//! The shapes follow the original system (REFERENCE c) so its files load.
//! Unknown fields, at the top and inside each `usageStats` entry (newer
//! builds add `blockedUntil`, `cooldownClassification`, …), are kept and
//! written back. A `usageStats` entry of the wrong shape is reported and
//! dropped — routing state is a cache of recent failures, not a secret, and
//! the next failure rebuilds it. The arithmetic on these fields lives in
//! [`crate::auth`]; this module only reads and writes them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::json::{de_count, de_opt_ms, kind, scrub_serde_error};
use super::Problem;

/// The file format version this build writes.
pub const STATE_VERSION: u64 = 1;

/// Per-profile usage and failure record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageStats {
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_used: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub cooldown_until: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_reason: Option<String>,
    /// Set when the cooldown blocks only this model (SPEC R7.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_model: Option<String>,
    #[serde(default, deserialize_with = "de_count")]
    pub error_count: u32,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub disabled_until: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_failure_at: Option<u64>,
    /// Failures per reason inside the failure window (drives the doubling of
    /// disable lanes and the unavailable-reason summary).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub failure_counts: BTreeMap<String, u32>,
    /// When the profile was last probed during a cooldown (SPEC R16.1).
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_probe_at: Option<u64>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The whole routing-state document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthState {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// Stored rotation order per provider; it wins over config `auth.order`
    /// (REFERENCE b). An empty list disables the provider.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub order: BTreeMap<String, Vec<String>>,
    /// The profile that last succeeded, per provider (informational).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub last_good: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub usage_stats: BTreeMap<String, UsageStats>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl AuthState {
    /// Parses the document. `Err` means it is not a state file at all (a
    /// corrupt file); malformed parts go to `problems` and are dropped.
    pub fn from_json(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String> {
        let Value::Object(mut top) = v else {
            return Err(format!("expected an object, found {}", kind(&v)));
        };
        let mut bad = |what: &'static str, key: &str, detail: String| {
            problems.push(Problem::InvalidEntry {
                path: path.to_path_buf(),
                what,
                key: key.into(),
                detail,
            })
        };
        let mut out = AuthState {
            version: top.remove("version").as_ref().and_then(super::json::as_ms),
            ..Default::default()
        };
        if let Some(v) = top.remove("order").filter(|v| !v.is_null()) {
            match serde_json::from_value(v) {
                Ok(o) => out.order = o,
                Err(e) => bad("field", "order", scrub_serde_error(&e)),
            }
        }
        if let Some(v) = top.remove("lastGood").filter(|v| !v.is_null()) {
            match serde_json::from_value(v) {
                Ok(o) => out.last_good = o,
                Err(e) => bad("field", "lastGood", scrub_serde_error(&e)),
            }
        }
        match top.remove("usageStats") {
            None | Some(Value::Null) => {}
            Some(Value::Object(entries)) => {
                for (id, entry) in entries {
                    match serde_json::from_value::<UsageStats>(entry) {
                        Ok(s) => {
                            out.usage_stats.insert(id, s);
                        }
                        Err(e) => bad("usage stats of", &id, scrub_serde_error(&e)),
                    }
                }
            }
            Some(other) => bad(
                "field",
                "usageStats",
                format!("expected an object, found {}", kind(&other)),
            ),
        }
        out.extra = top;
        Ok(out)
    }

    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).expect("state serialises");
        if let Value::Object(m) = &mut v {
            m.insert(
                "version".into(),
                self.version.unwrap_or(STATE_VERSION).into(),
            );
        }
        v
    }

    /// The stats of `profile_id`, created empty on first use.
    pub fn stats_mut(&mut self, profile_id: &str) -> &mut UsageStats {
        self.usage_stats.entry(profile_id.to_string()).or_default()
    }

    pub fn stats(&self, profile_id: &str) -> Option<&UsageStats> {
        self.usage_stats.get(profile_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // R5.2: the original system's shape loads, unknown fields round-trip.
    #[test]
    fn r5_2_round_trips_original_shape() {
        let src = json!({
            "version": 1,
            "order": {"openai": ["openai:a", "openai:b"], "xai": []},
            "lastGood": {"openai": "openai:a"},
            "usageStats": {
                "openai:a": {"lastUsed": 1.0e12, "cooldownUntil": 1000000060000_u64, "cooldownModel": "gpt-5",
                             "errorCount": 1, "failureCounts": {"rate_limit": 1}, "blockedUntil": 5,
                             "disabledReason": null},
                "openai:b": {"errorCount": null}
            },
            "futureField": {"x": 1}
        });
        let mut problems = Vec::new();
        let s = AuthState::from_json(src, Path::new("s.json"), &mut problems).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        let a = &s.usage_stats["openai:a"];
        assert_eq!(a.last_used, Some(1_000_000_000_000));
        assert_eq!(a.cooldown_model.as_deref(), Some("gpt-5"));
        assert_eq!(a.extra["blockedUntil"], json!(5));
        assert_eq!(s.order["xai"], Vec::<String>::new());
        let back = s.to_json();
        assert_eq!(back["futureField"], json!({"x": 1}));
        assert_eq!(back["usageStats"]["openai:a"]["blockedUntil"], json!(5));
        assert_eq!(back["usageStats"]["openai:b"]["errorCount"], json!(0));
        assert_eq!(back["order"]["xai"], json!([]));
    }

    #[test]
    fn malformed_entry_is_reported_and_dropped() {
        let src =
            json!({"usageStats": {"a:b": {"cooldownUntil": "soon"}, "a:c": {"errorCount": 2}}});
        let mut problems = Vec::new();
        let s = AuthState::from_json(src, Path::new("s.json"), &mut problems).unwrap();
        assert_eq!(s.usage_stats.len(), 1);
        let msg = problems[0].to_string();
        assert!(msg.contains("usage stats of `a:b` ignored"), "{msg}");
        assert!(!msg.contains("soon"), "{msg}");
    }

    #[test]
    fn not_an_object_is_corrupt() {
        let mut problems = Vec::new();
        assert!(AuthState::from_json(json!([1]), Path::new("s.json"), &mut problems).is_err());
    }
}
