//! The session store: per-session model and auth-profile overrides
//! (SPEC R6.4–R6.6, R11).
//!
//! `agents/<agentId>/sessions/sessions.json` maps a session key to an entry
//! that many subsystems write. This engine owns only the override fields
//! (R11.1): `providerOverride`, `modelOverride`, `modelOverrideSource`,
//! `authProfileOverride`, `authProfileOverrideSource`,
//! `authProfileOverrideCompactionCount`, `modelOverrideFallbackOrigin*`,
//! and the `fallbackNotice*` fields; it reads `compactionCount`. Every other
//! field is kept as it was (`extra`), and an entry that does not parse is
//! kept verbatim, so a write here never erases another subsystem's data.
//!
//! Writes go through [`OverrideFields`]: the runner snapshots the fields it
//! is about to set, writes them before the attempt (R11.3), and on failure
//! [`OverrideFields::rollback`] restores each field only while it still
//! holds what the runner wrote (R11.4). Worked example: the runner writes
//! `modelOverride = "b"` over `"a"`; meanwhile the user runs `/model c`.
//! The fallback fails; rollback sees `"c" != "b"` and leaves the user's
//! choice alone.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::json::{de_opt_ms, kind};
use super::Problem;
use crate::redact::scrub_serde_error;

/// Who set an override (`modelOverrideSource`, `authProfileOverrideSource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OverrideSource {
    /// `/model`, the picker, `sessions.patch`, `@profile`: strict.
    User,
    /// Written by the runner: a preference.
    Auto,
}

impl OverrideSource {
    pub fn name(self) -> &'static str {
        match self {
            OverrideSource::User => "user",
            OverrideSource::Auto => "auto",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "user" => Some(OverrideSource::User),
            "auto" => Some(OverrideSource::Auto),
            _ => None,
        }
    }
}

/// One session's entry. Field names as in the original system.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionEntry {
    /// `providerOverride`: the provider of the session's model override.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider_override: Option<String>,
    /// `modelOverride`: the model the session runs on instead of its default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override: Option<String>,
    /// `modelOverrideSource`: `user` (chosen) or `auto` (set by a fallback, R11).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override_source: Option<String>,
    /// `modelOverrideFallbackOriginProvider`: the primary's provider an auto override came from (R11.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override_fallback_origin_provider: Option<String>,
    /// `modelOverrideFallbackOriginModel`: the primary model an auto override came from (R11.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_override_fallback_origin_model: Option<String>,
    /// `authProfileOverride`: the auth profile pinned for the session (R6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile_override: Option<String>,
    /// `authProfileOverrideSource`: `user` or `auto` (R6.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_profile_override_source: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `authProfileOverrideCompactionCount`: the compaction count when the pin was set (R6.4).
    pub auth_profile_override_compaction_count: Option<u64>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `compactionCount`: how many times the session was compacted.
    pub compaction_count: Option<u64>,
    /// `fallbackNoticeSelectedModel`: the model selected when the last notice was given (R13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_notice_selected_model: Option<String>,
    /// `fallbackNoticeActiveModel`: the model that answered when the last notice was given (R13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_notice_active_model: Option<String>,
    /// `fallbackNoticeReason`: why, in the last notice (R13).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fallback_notice_reason: Option<String>,
    #[serde(
        default,
        deserialize_with = "de_opt_ms",
        skip_serializing_if = "Option::is_none"
    )]
    /// `fallbackNoticeStartedAt`: when the current fallback state began (epoch ms, R13).
    pub fallback_notice_started_at: Option<u64>,
    /// Every field another subsystem owns, kept as it was.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SessionEntry {
    /// The model override's source; a legacy override without a source is
    /// a user override (SPEC R3, legacy row).
    pub fn model_override_source(&self) -> Option<OverrideSource> {
        self.model_override.as_ref()?;
        Some(
            self.model_override_source
                .as_deref()
                .and_then(OverrideSource::from_name)
                .unwrap_or(OverrideSource::User),
        )
    }

    /// The auth-profile pin's source; a legacy pin without a source is
    /// `auto` when a compaction count was stored with it, else `user`
    /// (REFERENCE b).
    pub fn auth_profile_override_source(&self) -> Option<OverrideSource> {
        self.auth_profile_override.as_ref()?;
        Some(
            match self
                .auth_profile_override_source
                .as_deref()
                .and_then(OverrideSource::from_name)
            {
                Some(s) => s,
                None if self.auth_profile_override_compaction_count.is_some() => {
                    OverrideSource::Auto
                }
                None => OverrideSource::User,
            },
        )
    }

    /// Whether any model or profile override is set.
    pub fn has_overrides(&self) -> bool {
        self.provider_override.is_some()
            || self.model_override.is_some()
            || self.auth_profile_override.is_some()
    }
}

/// The override fields the runner owns (SPEC R11.1), as one value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct OverrideFields {
    pub provider_override: Option<String>,
    pub model_override: Option<String>,
    pub model_override_source: Option<String>,
    pub model_override_fallback_origin_provider: Option<String>,
    pub model_override_fallback_origin_model: Option<String>,
    pub auth_profile_override: Option<String>,
    pub auth_profile_override_source: Option<String>,
    pub auth_profile_override_compaction_count: Option<u64>,
}

macro_rules! override_fields {
    ($m:ident) => {
        $m!(provider_override);
        $m!(model_override);
        $m!(model_override_source);
        $m!(model_override_fallback_origin_provider);
        $m!(model_override_fallback_origin_model);
        $m!(auth_profile_override);
        $m!(auth_profile_override_source);
        $m!(auth_profile_override_compaction_count);
    };
}

impl OverrideFields {
    /// The current values in `entry`.
    pub(crate) fn read(entry: &SessionEntry) -> Self {
        let mut out = OverrideFields::default();
        macro_rules! copy {
            ($f:ident) => {
                out.$f = entry.$f.clone();
            };
        }
        override_fields!(copy);
        out
    }

    /// Writes these values into `entry` and returns what was there before
    /// (keep it for [`OverrideFields::rollback`]).
    pub(crate) fn write(&self, entry: &mut SessionEntry) -> OverrideFields {
        let before = OverrideFields::read(entry);
        macro_rules! put {
            ($f:ident) => {
                entry.$f = self.$f.clone();
            };
        }
        override_fields!(put);
        before
    }

    /// R11.4: restores `before` field by field, each only while `entry`
    /// still holds what `self` wrote. Returns how many fields were restored.
    pub(crate) fn rollback(&self, before: &OverrideFields, entry: &mut SessionEntry) -> usize {
        let mut n = 0;
        macro_rules! back {
            ($f:ident) => {
                if entry.$f == self.$f && entry.$f != before.$f {
                    entry.$f = before.$f.clone();
                    n += 1;
                }
            };
        }
        override_fields!(back);
        n
    }
}

/// The whole session store.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SessionStore {
    /// Session key → entry.
    pub entries: BTreeMap<String, SessionEntry>,
    /// Entries that did not parse, kept verbatim.
    unparsed: BTreeMap<String, Value>,
}

impl SessionStore {
    /// Reads the document; entries that do not parse are skipped and listed in `problems`.
    pub fn from_json(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String> {
        let Value::Object(top) = v else {
            return Err(format!("expected an object, found {}", kind(&v)));
        };
        let mut out = SessionStore::default();
        for (key, entry) in top {
            match serde_json::from_value::<SessionEntry>(entry.clone()) {
                Ok(e) => {
                    out.entries.insert(key, e);
                }
                Err(e) => {
                    problems.push(Problem::InvalidEntry {
                        path: path.to_path_buf(),
                        what: "session",
                        key: key.clone(),
                        detail: scrub_serde_error(&e),
                    });
                    out.unparsed.insert(key, entry);
                }
            }
        }
        Ok(out)
    }

    /// The document as written to `sessions.json`.
    pub fn to_json(&self) -> Value {
        let mut m: Map<String, Value> = self.unparsed.clone().into_iter().collect();
        for (k, e) in &self.entries {
            m.insert(
                k.clone(),
                serde_json::to_value(e).expect("entry serialises"),
            );
        }
        Value::Object(m)
    }

    /// The entry of `key`, created empty when missing.
    pub fn entry_mut(&mut self, key: &str) -> &mut SessionEntry {
        self.unparsed.remove(key);
        self.entries.entry(key.to_string()).or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // R11.1: unknown fields and unparsable entries survive a write.
    #[test]
    fn r11_1_keeps_fields_it_does_not_own() {
        let src = json!({
            "agent:main:telegram:1": {"sessionId": "s1", "updatedAt": 5, "modelOverride": "gpt-5",
                                       "modelOverrideSource": "auto", "compactionCount": 2,
                                       "deliveryContext": {"channel": "telegram"}},
            "broken": {"modelOverride": 7, "other": true}
        });
        let mut problems = Vec::new();
        let mut s =
            SessionStore::from_json(src, Path::new("sessions.json"), &mut problems).unwrap();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].to_string().contains("session `broken` ignored"));
        s.entry_mut("agent:main:telegram:1").model_override = None;
        let back = s.to_json();
        assert_eq!(back["broken"], json!({"modelOverride": 7, "other": true}));
        let e = &back["agent:main:telegram:1"];
        assert_eq!(e["deliveryContext"], json!({"channel": "telegram"}));
        assert_eq!(e["sessionId"], json!("s1"));
        assert!(e.get("modelOverride").is_none());
        assert_eq!(e["compactionCount"], json!(2));
    }

    // R11.4: rollback restores only fields that still hold the runner's value.
    #[test]
    fn r11_4_rollback_is_narrow() {
        let mut e = SessionEntry {
            model_override: Some("a".into()),
            ..Default::default()
        };
        let ours = OverrideFields {
            provider_override: Some("openai".into()),
            model_override: Some("b".into()),
            model_override_source: Some("auto".into()),
            ..Default::default()
        };
        let before = ours.write(&mut e);
        e.model_override = Some("c".into()); // a concurrent /model
        let n = ours.rollback(&before, &mut e);
        assert_eq!(n, 2);
        assert_eq!(e.model_override.as_deref(), Some("c"));
        assert_eq!(e.provider_override, None);
        assert_eq!(e.model_override_source, None);
    }

    // R11.4: with no other writer, a rollback puts back every value the
    // entry held before the write — not only clears what was written.
    #[test]
    fn r11_4_rollback_restores_the_previous_values() {
        let mut e = SessionEntry {
            provider_override: Some("anthropic".into()),
            model_override: Some("claude".into()),
            model_override_source: Some("auto".into()),
            auth_profile_override: Some("anthropic:a".into()),
            auth_profile_override_source: Some("auto".into()),
            auth_profile_override_compaction_count: Some(3),
            ..Default::default()
        };
        let original = e.clone();
        let ours = OverrideFields {
            provider_override: Some("openai".into()),
            model_override: Some("gpt".into()),
            model_override_source: Some("auto".into()),
            auth_profile_override: Some("openai:b".into()),
            auth_profile_override_source: Some("auto".into()),
            ..Default::default()
        };
        let before = ours.write(&mut e);
        assert_eq!(before, OverrideFields::read(&original));
        assert_eq!(e.model_override.as_deref(), Some("gpt"));
        assert_eq!(ours.rollback(&before, &mut e), 4);
        assert_eq!(e, original);
    }

    // R3, R6.5: a source is read by name; `status` lists entries that hold
    // an override of either kind.
    #[test]
    fn sources_by_name_and_entries_with_overrides() {
        assert_eq!(
            OverrideSource::from_name("user"),
            Some(OverrideSource::User)
        );
        assert_eq!(
            OverrideSource::from_name("auto"),
            Some(OverrideSource::Auto)
        );
        assert_eq!(OverrideSource::from_name("User"), None);
        // A stated `user` wins over the legacy rule (a compaction count
        // stored with the pin would otherwise make it `auto`).
        let pinned = SessionEntry {
            auth_profile_override: Some("openai:a".into()),
            auth_profile_override_source: Some("user".into()),
            auth_profile_override_compaction_count: Some(2),
            ..Default::default()
        };
        assert_eq!(
            pinned.auth_profile_override_source(),
            Some(OverrideSource::User)
        );
        assert!(pinned.has_overrides());
        assert!(!SessionEntry::default().has_overrides());
        for e in [
            SessionEntry {
                provider_override: Some("openai".into()),
                ..Default::default()
            },
            SessionEntry {
                model_override: Some("gpt".into()),
                ..Default::default()
            },
        ] {
            assert!(e.has_overrides(), "{e:?}");
        }
    }

    // R3 legacy row and REFERENCE b: sources of legacy entries.
    #[test]
    fn legacy_sources() {
        let mut e = SessionEntry {
            model_override: Some("m".into()),
            auth_profile_override: Some("openai:a".into()),
            ..Default::default()
        };
        assert_eq!(e.model_override_source(), Some(OverrideSource::User));
        assert_eq!(e.auth_profile_override_source(), Some(OverrideSource::User));
        e.auth_profile_override_compaction_count = Some(0);
        assert_eq!(e.auth_profile_override_source(), Some(OverrideSource::Auto));
    }
}
