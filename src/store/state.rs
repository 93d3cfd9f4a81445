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
//! written back.
//!
//! Parsing is per entry and never destroys data: an entry of `order`,
//! `lastGood` or `usageStats` of the wrong shape (or a whole field that is
//! not an object, or a `version` that is not a number) is reported as a
//! [`Problem`], left out of routing, and kept verbatim, so the next write
//! puts it back as it was while its valid siblings are used as usual. When
//! an update stores a new value under the key of such an entry, the new
//! value wins; [`AuthState::replaced_unparsed`] names what that replaces so
//! the store can copy the file aside before writing (see `file.rs`).
//!
//! Worked example: with `"order": {"openai": ["openai:a"], "anthropic":
//! "anthropic:me"}`, `order["openai"]` is used, `order.anthropic` is
//! reported ("order of `anthropic` ignored: …") and written back as the
//! string it was. The arithmetic on these fields lives in [`crate::auth`];
//! this module only reads and writes them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::json::{de_count, de_opt_ms, kind};
use super::Problem;
use crate::redact::scrub_serde_error;

/// The file format version this build writes.
pub(crate) const STATE_VERSION: u64 = 1;

/// Per-profile usage and failure record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UsageStats {
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `lastUsed`: when the profile last answered (epoch ms).
    pub last_used: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `cooldownUntil`: the profile is cooling until then (epoch ms, R7).
    pub cooldown_until: Option<u64>,
    /// `cooldownReason`: the reason of the failure that started the cooldown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_reason: Option<String>,
    /// Set when the cooldown blocks only this model (SPEC R7.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_model: Option<String>,
    /// `errorCount`: failures inside the failure window (R7.1).
    #[serde(default, deserialize_with = "de_count")]
    pub error_count: u32,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `disabledUntil`: the profile is disabled until then (billing, R8; auth_permanent, R16.4).
    pub disabled_until: Option<u64>,
    /// `disabledReason`: why it is disabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disabled_reason: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `lastFailureAt`: when it last failed (epoch ms).
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
    /// `modelCooldowns`: the cooldown of each model of this profile that
    /// failed with a model-scoped reason (SPEC R7.3), by model id. The
    /// authority for model windows; see [`UsageStats::model_windows`] for
    /// what `cooldownModel` holds beside it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub model_cooldowns: BTreeMap<String, ModelCooldown>,
    /// Every field another subsystem owns, kept as it was.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// One model's cooldown on a profile (`modelCooldowns.<model>`, SPEC R7.3,
/// R7.4): its own window, reason and error count, so that one model's
/// failures neither block nor escalate a sibling model of the same
/// profile.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelCooldown {
    /// `cooldownUntil`: the model is cooling on this profile until then (epoch ms).
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub cooldown_until: Option<u64>,
    /// `cooldownReason`: the reason of the failure that started the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_reason: Option<String>,
    /// `errorCount`: this model's failures inside the failure window; its
    /// window's step (R7.4).
    #[serde(default, deserialize_with = "de_count")]
    pub error_count: u32,
    /// `lastFailureAt`: when this model last failed on this profile (epoch ms).
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_failure_at: Option<u64>,
    /// Fields a newer build writes, kept as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A model's window as [`UsageStats::model_windows`] reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelWindow<'a> {
    /// The model id.
    pub model: &'a str,
    /// The end of its window (epoch ms).
    pub until: u64,
    /// The reason that started it, when recorded.
    pub reason: Option<&'a str>,
}

impl UsageStats {
    /// The profile-wide cooldown (`cooldownUntil` without `cooldownModel`):
    /// its end and reason, active or not.
    pub fn profile_cooldown(&self) -> Option<(u64, Option<&str>)> {
        match (&self.cooldown_model, self.cooldown_until) {
            (None, Some(until)) => Some((until, self.cooldown_reason.as_deref())),
            _ => None,
        }
    }

    /// Every model window recorded on this profile, active or not.
    ///
    /// `modelCooldowns` holds them. The original's fields keep their
    /// meaning for its readers: when no profile-wide cooldown is running,
    /// `cooldownUntil` / `cooldownReason` / `cooldownModel` copy the model
    /// window that ends last (so a reader that knows one model window sees
    /// the longest one), and `errorCount` counts the profile's failures of
    /// every model. A `cooldownModel` that `modelCooldowns` does not name —
    /// a file the original or an earlier build wrote — is that model's
    /// window, and the next update moves it into the map
    /// ([`UsageStats::migrate_model_window`]).
    pub fn model_windows(&self) -> impl Iterator<Item = ModelWindow<'_>> {
        let legacy = match (&self.cooldown_model, self.cooldown_until) {
            (Some(m), Some(until)) if !self.model_cooldowns.contains_key(m) => Some(ModelWindow {
                model: m.as_str(),
                until,
                reason: self.cooldown_reason.as_deref(),
            }),
            _ => None,
        };
        self.model_cooldowns
            .iter()
            .filter_map(|(m, c)| {
                Some(ModelWindow {
                    model: m.as_str(),
                    until: c.cooldown_until?,
                    reason: c.cooldown_reason.as_deref(),
                })
            })
            .chain(legacy)
    }

    /// The window of `model`, active or not.
    pub fn model_window(&self, model: &str) -> Option<ModelWindow<'_>> {
        self.model_windows().find(|w| w.model == model)
    }

    /// Moves a `cooldownModel` window that `modelCooldowns` does not name
    /// into it (the migration of a file written before per-model windows;
    /// its count is the profile's, the only one that file had).
    pub fn migrate_model_window(&mut self) {
        if let (Some(m), Some(until)) = (&self.cooldown_model, self.cooldown_until) {
            if !self.model_cooldowns.contains_key(m) {
                self.model_cooldowns.insert(
                    m.clone(),
                    ModelCooldown {
                        cooldown_until: Some(until),
                        cooldown_reason: self.cooldown_reason.clone(),
                        error_count: self.error_count.max(1),
                        last_failure_at: self.last_failure_at,
                        extra: Map::new(),
                    },
                );
            }
        }
    }

    /// Drops the model windows over at `now_ms` whose last failure is also
    /// past the failure window (`window_ms`, R16.6): their counts would
    /// reset anyway, and the map must not grow with every model ever used.
    pub fn prune_model_windows(&mut self, now_ms: u64, window_ms: u64) {
        self.model_cooldowns.retain(|_, c| {
            c.cooldown_until.is_some_and(|u| u > now_ms)
                || c.last_failure_at
                    .is_some_and(|f| now_ms.saturating_sub(f) <= window_ms)
        });
    }

    /// Rewrites the original's fields from the model windows (see
    /// [`UsageStats::model_windows`]): unless a profile-wide cooldown is
    /// running at `now_ms`, they copy the active model window that ends
    /// last, or are cleared when they held a model window and none is
    /// active.
    pub fn mirror_model_windows(&mut self, now_ms: u64) {
        if self
            .profile_cooldown()
            .is_some_and(|(until, _)| until > now_ms)
        {
            return;
        }
        let latest = self
            .model_cooldowns
            .iter()
            .filter_map(|(m, c)| Some((c.cooldown_until.filter(|u| *u > now_ms)?, m, c)))
            .max_by_key(|(until, _, _)| *until);
        match latest {
            Some((until, m, c)) => {
                self.cooldown_until = Some(until);
                self.cooldown_reason = c.cooldown_reason.clone();
                self.cooldown_model = Some(m.clone());
            }
            None if self.cooldown_model.is_some() => {
                self.cooldown_until = None;
                self.cooldown_reason = None;
                self.cooldown_model = None;
            }
            None => {}
        }
    }
}

/// The whole routing-state document.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AuthState {
    /// The file's `version`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    /// Stored rotation order per provider; it wins over config `auth.order`
    /// (REFERENCE b). An empty list disables the provider.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub order: BTreeMap<String, Vec<String>>,
    /// The profile that last succeeded, per provider (informational).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub last_good: BTreeMap<String, String>,
    /// `usageStats`: profile id → its routing state.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub usage_stats: BTreeMap<String, UsageStats>,
    /// Every field another subsystem owns, kept as it was.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Parts of the file that did not parse, kept verbatim for the next write.
    #[serde(skip)]
    unparsed: Unparsed,
}

/// What [`AuthState::from_json`] could not use, as it was in the file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Unparsed {
    /// Top-level fields of the wrong shape (`"order": 5`, `"version": "x"`).
    fields: Map<String, Value>,
    /// Entries of `order`, `lastGood` and `usageStats` that did not parse.
    order: Map<String, Value>,
    last_good: Map<String, Value>,
    usage_stats: Map<String, Value>,
}

/// Parses each entry of the object `field` (`name` in the file) with
/// `parse`. Returns the entries that parsed, the ones that did not
/// (reported, verbatim), and the whole value when it is not an object.
fn parse_entries<T>(
    field: Option<Value>,
    name: &str,
    what: &'static str,
    report: &mut dyn FnMut(&'static str, &str, String),
    parse: impl Fn(Value) -> Result<T, serde_json::Error>,
) -> (BTreeMap<String, T>, Map<String, Value>, Option<Value>) {
    let mut typed = BTreeMap::new();
    let mut raw = Map::new();
    match field {
        None | Some(Value::Null) => {}
        Some(Value::Object(entries)) => {
            for (key, entry) in entries {
                match parse(entry.clone()) {
                    Ok(t) => {
                        typed.insert(key, t);
                    }
                    Err(e) => {
                        report(what, &key, scrub_serde_error(&e));
                        raw.insert(key, entry);
                    }
                }
            }
        }
        Some(other) => {
            report(
                "field",
                name,
                format!("expected an object, found {}", kind(&other)),
            );
            return (typed, raw, Some(other));
        }
    }
    (typed, raw, None)
}

/// Puts the verbatim entries `raw` back into the object field `name` of
/// `top`, under keys the typed map does not hold; a whole field of the
/// wrong shape goes back when the typed map is empty.
fn merge_unparsed(
    top: &mut Map<String, Value>,
    name: &str,
    typed_empty: bool,
    raw: &Map<String, Value>,
    whole: &Map<String, Value>,
) {
    if !raw.is_empty() {
        let field = top
            .entry(name.to_string())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(m) = field {
            for (k, v) in raw {
                m.entry(k.clone()).or_insert_with(|| v.clone());
            }
        }
    }
    if typed_empty {
        if let Some(v) = whole.get(name) {
            top.insert(name.into(), v.clone());
        }
    }
}

impl AuthState {
    /// Parses the document. `Err` means it is not a state file at all (a
    /// corrupt file); malformed parts go to `problems`, are left out of the
    /// typed fields and are kept verbatim for [`AuthState::to_json`].
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
        let mut out = AuthState::default();
        let un = &mut out.unparsed;
        match top.remove("version") {
            None | Some(Value::Null) => {}
            Some(v) => match super::json::as_ms(&v) {
                Some(n) => out.version = Some(n),
                None => {
                    bad(
                        "field",
                        "version",
                        format!("expected a non-negative number, found {}", kind(&v)),
                    );
                    un.fields.insert("version".into(), v);
                }
            },
        }
        let (order, raw, whole) = parse_entries(
            top.remove("order"),
            "order",
            "order of",
            &mut bad,
            serde_json::from_value,
        );
        (out.order, un.order) = (order, raw);
        un.fields.extend(whole.map(|v| ("order".to_string(), v)));
        let (last_good, raw, whole) = parse_entries(
            top.remove("lastGood"),
            "lastGood",
            "last good profile of",
            &mut bad,
            serde_json::from_value,
        );
        (out.last_good, un.last_good) = (last_good, raw);
        un.fields.extend(whole.map(|v| ("lastGood".to_string(), v)));
        let (stats, raw, whole) = parse_entries(
            top.remove("usageStats"),
            "usageStats",
            "usage stats of",
            &mut bad,
            serde_json::from_value,
        );
        (out.usage_stats, un.usage_stats) = (stats, raw);
        un.fields
            .extend(whole.map(|v| ("usageStats".to_string(), v)));
        out.extra = top;
        Ok(out)
    }

    /// The document as JSON, with every part that did not parse put back
    /// as it was (unless a typed value now holds its key).
    pub fn to_json(&self) -> Value {
        let mut v = serde_json::to_value(self).expect("state serialises");
        if let Value::Object(m) = &mut v {
            let un = &self.unparsed;
            merge_unparsed(m, "order", self.order.is_empty(), &un.order, &un.fields);
            merge_unparsed(
                m,
                "lastGood",
                self.last_good.is_empty(),
                &un.last_good,
                &un.fields,
            );
            merge_unparsed(
                m,
                "usageStats",
                self.usage_stats.is_empty(),
                &un.usage_stats,
                &un.fields,
            );
            match (self.version, un.fields.get("version")) {
                (None, Some(raw)) => m.insert("version".into(), raw.clone()),
                _ => m.insert(
                    "version".into(),
                    self.version.unwrap_or(STATE_VERSION).into(),
                ),
            };
        }
        v
    }

    /// Parts that did not parse and that [`AuthState::to_json`] will not
    /// write back because a typed value now takes their place (an update
    /// recorded new stats for a profile whose entry was malformed), named
    /// for a message. Empty when every unparsed part is kept.
    pub fn replaced_unparsed(&self) -> Vec<String> {
        let un = &self.unparsed;
        let mut out = Vec::new();
        let mut entries = |what: &str, raw: &Map<String, Value>, held: &dyn Fn(&str) -> bool| {
            out.extend(
                raw.keys()
                    .filter(|k| held(k))
                    .map(|k| format!("{what} `{k}`")),
            );
        };
        entries("order of", &un.order, &|k| self.order.contains_key(k));
        entries("last good profile of", &un.last_good, &|k| {
            self.last_good.contains_key(k)
        });
        entries("usage stats of", &un.usage_stats, &|k| {
            self.usage_stats.contains_key(k)
        });
        for (name, typed_empty) in [
            ("version", self.version.is_none()),
            ("order", self.order.is_empty()),
            ("lastGood", self.last_good.is_empty()),
            ("usageStats", self.usage_stats.is_empty()),
        ] {
            if un.fields.contains_key(name) && !typed_empty {
                out.push(format!("field `{name}`"));
            }
        }
        out
    }

    /// The stats of `profile_id`, created empty on first use.
    pub fn stats_mut(&mut self, profile_id: &str) -> &mut UsageStats {
        self.usage_stats.entry(profile_id.to_string()).or_default()
    }

    /// The routing state of a profile, if any.
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
    fn malformed_entry_is_reported_and_kept() {
        let src =
            json!({"usageStats": {"a:b": {"cooldownUntil": "soon"}, "a:c": {"errorCount": 2}}});
        let mut problems = Vec::new();
        let s = AuthState::from_json(src, Path::new("s.json"), &mut problems).unwrap();
        assert_eq!(s.usage_stats.len(), 1);
        let msg = problems[0].to_string();
        assert!(msg.contains("usage stats of `a:b` ignored"), "{msg}");
        assert!(!msg.contains("soon"), "{msg}");
        assert_eq!(
            s.to_json()["usageStats"]["a:b"],
            json!({"cooldownUntil": "soon"})
        );
        assert!(s.replaced_unparsed().is_empty());
    }

    // A bad entry inside `order` or `lastGood` does not take its valid
    // siblings down with it; it is written back verbatim.
    #[test]
    fn partly_bad_maps_keep_valid_siblings_and_raw_entries() {
        let src = json!({
            "order": {"openai": ["openai:a", "openai:b"], "anthropic": "anthropic:me", "xai": [1]},
            "lastGood": {"openai": 5, "google": "google:a"},
            "usageStats": {"anthropic:me": {"disabledUntil": "2026-01-02T00:00:00Z"}}
        });
        let mut problems = Vec::new();
        let mut s = AuthState::from_json(src.clone(), Path::new("s.json"), &mut problems).unwrap();
        assert_eq!(s.order.keys().collect::<Vec<_>>(), ["openai"]);
        assert_eq!(s.last_good["google"], "google:a");
        let msgs: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 4, "{msgs:?}");
        assert!(msgs
            .iter()
            .any(|m| m.starts_with("`s.json`: order of `anthropic` ignored: a string where")));
        assert!(msgs
            .iter()
            .any(|m| m.starts_with("`s.json`: last good profile of `openai` ignored")));
        let mut back = s.to_json();
        back.as_object_mut().unwrap().remove("version");
        assert_eq!(back, src);

        // A typed value under a bad entry's key wins, and is named.
        s.stats_mut("anthropic:me").error_count = 1;
        s.order.insert("xai".into(), vec![]);
        assert_eq!(
            s.replaced_unparsed(),
            ["order of `xai`", "usage stats of `anthropic:me`"]
        );
        let back = s.to_json();
        assert_eq!(back["usageStats"]["anthropic:me"], json!({"errorCount": 1}));
        assert_eq!(back["order"]["anthropic"], json!("anthropic:me"));
    }

    // A whole field that does not parse (a future `version`, an `order`
    // that is not a map) is written back as it was while no typed value
    // takes its place, and named once one does.
    #[test]
    fn unparsed_fields_are_kept_until_replaced() {
        let src = json!({"version": "two", "order": 5, "usageStats": {}});
        let mut problems = Vec::new();
        let mut s = AuthState::from_json(src, Path::new("s.json"), &mut problems).unwrap();
        assert_eq!(s.version, None);
        let back = s.to_json();
        assert_eq!(
            (&back["version"], &back["order"]),
            (&json!("two"), &json!(5))
        );
        assert!(
            s.replaced_unparsed().is_empty(),
            "{:?}",
            s.replaced_unparsed()
        );
        s.order.insert("openai".into(), vec!["openai:a".into()]);
        assert_eq!(s.replaced_unparsed(), ["field `order`"]);
        assert_eq!(s.to_json()["order"], json!({"openai": ["openai:a"]}));
    }

    #[test]
    fn not_an_object_is_corrupt() {
        let mut problems = Vec::new();
        assert!(AuthState::from_json(json!([1]), Path::new("s.json"), &mut problems).is_err());
    }

    fn window(until: u64, last: u64) -> ModelCooldown {
        ModelCooldown {
            cooldown_until: Some(until),
            cooldown_reason: Some("rate_limit".into()),
            error_count: 1,
            last_failure_at: Some(last),
            extra: Map::new(),
        }
    }

    // Issue 51: a model window is kept while it runs or while its last
    // failure is inside the failure window; at both ends, dropped.
    #[test]
    fn model_windows_are_pruned_past_both_ends() {
        let mut s = UsageStats::default();
        s.model_cooldowns.insert("running".into(), window(1_001, 0));
        s.model_cooldowns
            .insert("counting".into(), window(500, 900));
        s.model_cooldowns.insert("over".into(), window(1_000, 899));
        s.prune_model_windows(1_000, 100);
        let kept: Vec<&str> = s.model_cooldowns.keys().map(String::as_str).collect();
        assert_eq!(kept, ["counting", "running"]);
    }

    // Issue 51: the original's fields copy the model window that ends last,
    // unless a profile-wide cooldown runs; with no model window running
    // they are cleared when they held one, and a profile-wide record is
    // left alone.
    #[test]
    fn the_originals_fields_mirror_the_latest_model_window() {
        let mut s = UsageStats::default();
        s.model_cooldowns.insert("a".into(), window(2_000, 0));
        s.model_cooldowns.insert("b".into(), window(3_000, 0));
        s.mirror_model_windows(1_000);
        assert_eq!(
            (s.cooldown_model.as_deref(), s.cooldown_until),
            (Some("b"), Some(3_000))
        );
        // At b's end, none runs: cleared.
        s.mirror_model_windows(3_000);
        assert_eq!(
            (s.cooldown_model.as_deref(), s.cooldown_until),
            (None, None)
        );
        // A profile-wide cooldown running stays as it is.
        s.cooldown_until = Some(1_500);
        s.cooldown_reason = Some("auth".into());
        s.mirror_model_windows(1_000);
        assert_eq!(
            (s.cooldown_model.as_deref(), s.cooldown_until),
            (None, Some(1_500))
        );
        // Over, the model window that ends last replaces it.
        s.mirror_model_windows(1_500);
        assert_eq!(
            (s.cooldown_model.as_deref(), s.cooldown_until),
            (Some("b"), Some(3_000))
        );
        // An expired profile-wide record with no model window is left.
        let mut p = UsageStats {
            cooldown_until: Some(10),
            cooldown_reason: Some("auth".into()),
            ..Default::default()
        };
        p.mirror_model_windows(1_000);
        assert_eq!(p.cooldown_until, Some(10));
    }

    // Issue 51: a `cooldownModel` the map does not name is that model's
    // window, and is moved into the map with the profile's count.
    #[test]
    fn a_legacy_model_window_is_read_and_migrated() {
        let mut s = UsageStats {
            cooldown_until: Some(2_000),
            cooldown_reason: Some("rate_limit".into()),
            cooldown_model: Some("gpt-5".into()),
            error_count: 3,
            last_failure_at: Some(100),
            ..Default::default()
        };
        assert_eq!(s.profile_cooldown(), None);
        assert_eq!(s.model_window("gpt-5").map(|w| w.until), Some(2_000));
        s.migrate_model_window();
        let w = &s.model_cooldowns["gpt-5"];
        assert_eq!(
            (w.cooldown_until, w.error_count, w.last_failure_at),
            (Some(2_000), 3, Some(100))
        );
        assert_eq!(s.model_windows().count(), 1, "not counted twice");
    }
}
