//! Session stickiness: which profile a session starts with (SPEC R6.4–R6.6,
//! REFERENCE b).
//!
//! A session keeps using one profile so the provider's prompt cache stays
//! warm. The pin lives in the session entry (`authProfileOverride`,
//! `authProfileOverrideSource`, `authProfileOverrideCompactionCount`) and
//! comes in two strengths:
//!
//! * a **user** pin (`/model …@profile`, R6.5) is strict: the run uses that
//!   profile and nothing else; if it fails the runner moves to the next
//!   model, not the next profile. It lasts until a new session.
//! * an **auto** pin, written here, is a preference (R6.6). The pinned
//!   profile goes first while it is usable. While it is cooling or
//!   disabled the run starts on the first usable profile but the pin is
//!   kept, so new runs return to it once it recovers. A new session or a
//!   finished compaction (the session's `compactionCount` grew past the
//!   count stored with the pin) moves the pin to the next usable profile
//!   after it, wrapping — spreading sessions over the profiles. A pin to a
//!   profile that no longer exists or left the order is replaced by the
//!   first usable one.
//!
//! A pin to another provider's profile says nothing about this provider:
//! the run ignores it, and only an auto pin is overwritten.
//!
//! Worked example: order `[a, b, c]`, session pinned `a` (auto) at
//! compaction 2. A run with `compactionCount` 2 and `a` usable starts with
//! `[a, b, c]` and keeps the pin; with `a` cooling it starts `[b, c]` and
//! keeps the pin; after a compaction (`compactionCount` 3) it re-pins to
//! `b` at 3 and starts `[b, a, c]`.

use crate::store::{normalize_provider, provider_of_id, OverrideSource, SessionEntry};

use super::order::ProfileOrder;

/// What to do with the session's pin.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum PinChange {
    Keep,
    /// Pin `id` as an auto preference, at `compaction_count`.
    SetAuto {
        id: String,
        compaction_count: u64,
    },
}

/// The profiles a run should try inside one provider.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) struct ProfileChoice {
    /// In order; empty when nothing can be tried now (all blocked, or a
    /// user-pinned profile that is gone).
    pub attempts: Vec<String>,
    /// A user pin: try only `attempts`, then advance the model (R6.5).
    pub strict: bool,
    pub pin: PinChange,
}

/// Decides the session's profile for `order` (see the module docs).
/// `new_session` is true on the first run after `/new`, `/reset` or
/// `sessions.reset`.
pub(crate) fn choose_session_profile(
    entry: &SessionEntry,
    order: &ProfileOrder,
    new_session: bool,
) -> ProfileChoice {
    let available: Vec<&str> = order.available().collect();
    let compactions = entry.compaction_count.unwrap_or(0);
    let pinned = entry.auth_profile_override.as_deref();
    let source = entry.auth_profile_override_source();
    let ours = pinned.is_some_and(|id| {
        provider_of_id(id).map(normalize_provider).as_deref() == Some(order.provider.as_str())
            || order.position(id).is_some()
    });

    let fresh = |first: Option<&str>| -> ProfileChoice {
        let attempts = front(first, &available);
        let pin = match (first, source, ours) {
            // Never overwrite a user's pin to another provider.
            (_, Some(OverrideSource::User), false) => PinChange::Keep,
            (Some(id), _, _) => PinChange::SetAuto {
                id: id.into(),
                compaction_count: compactions,
            },
            (None, _, _) => PinChange::Keep,
        };
        ProfileChoice {
            attempts,
            strict: false,
            pin,
        }
    };

    let Some(id) = pinned.filter(|_| ours) else {
        return fresh(available.first().copied());
    };
    if new_session {
        return fresh(next_after(order, id, &available));
    }
    match source {
        Some(OverrideSource::User) => ProfileChoice {
            attempts: order
                .position(id)
                .map(|_| vec![id.to_string()])
                .unwrap_or_default(),
            strict: true,
            pin: PinChange::Keep,
        },
        _ => {
            let pinned_at = entry.auth_profile_override_compaction_count.unwrap_or(0);
            if order.position(id).is_none() {
                fresh(available.first().copied())
            } else if compactions > pinned_at {
                fresh(next_after(order, id, &available))
            } else {
                let usable = available.contains(&id);
                ProfileChoice {
                    attempts: front(usable.then_some(id), &available),
                    strict: false,
                    pin: PinChange::Keep,
                }
            }
        }
    }
}

/// `first` followed by the other available profiles in order.
fn front(first: Option<&str>, available: &[&str]) -> Vec<String> {
    first
        .into_iter()
        .chain(available.iter().copied().filter(|a| Some(*a) != first))
        .map(str::to_string)
        .collect()
}

/// The first available profile after `id` in the order, wrapping; `id`
/// itself when it is the only one available.
fn next_after<'a>(order: &ProfileOrder, id: &str, available: &[&'a str]) -> Option<&'a str> {
    let Some(pos) = order.position(id) else {
        return available.first().copied();
    };
    let n = order.entries.len();
    (1..=n)
        .map(|k| order.entries[(pos + k) % n].id.as_str())
        .find_map(|cand| available.iter().copied().find(|a| *a == cand))
}

/// Writes `change` into `entry`.
pub(crate) fn apply_pin_change(entry: &mut SessionEntry, change: &PinChange) {
    if let PinChange::SetAuto {
        id,
        compaction_count,
    } = change
    {
        entry.auth_profile_override = Some(id.clone());
        entry.auth_profile_override_source = Some(OverrideSource::Auto.name().into());
        entry.auth_profile_override_compaction_count = Some(*compaction_count);
    }
}

/// `/model …@profile`: a strict user pin for the session (R6.5).
pub(crate) fn pin_user_profile(entry: &mut SessionEntry, profile_id: &str) {
    entry.auth_profile_override = Some(profile_id.into());
    entry.auth_profile_override_source = Some(OverrideSource::User.name().into());
    entry.auth_profile_override_compaction_count = None;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::order::{OrderSource, OrderedProfile};
    use crate::auth::Block;
    use crate::store::CredentialKind;

    fn order(ids: &[(&str, bool)]) -> ProfileOrder {
        ProfileOrder {
            provider: "openai".into(),
            source: OrderSource::ConfigOrder,
            entries: ids
                .iter()
                .map(|(id, blocked)| OrderedProfile {
                    id: (*id).into(),
                    kind: CredentialKind::ApiKey,
                    block: blocked.then(|| Block::Cooling {
                        until: 99,
                        model: None,
                        reason: None,
                    }),
                })
                .collect(),
            excluded: vec![],
        }
    }

    fn auto(id: &str, at: u64, now: u64) -> SessionEntry {
        SessionEntry {
            auth_profile_override: Some(id.into()),
            auth_profile_override_source: Some("auto".into()),
            auth_profile_override_compaction_count: Some(at),
            compaction_count: Some(now),
            ..Default::default()
        }
    }

    // R6.4: no pin yet → first available, pinned auto.
    #[test]
    fn r6_4_first_run_pins_first_available() {
        let o = order(&[("openai:a", true), ("openai:b", false), ("openai:c", false)]);
        let c = choose_session_profile(&SessionEntry::default(), &o, false);
        assert_eq!(c.attempts, ["openai:b", "openai:c"]);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:b".into(),
                compaction_count: 0
            }
        );
        let mut e = SessionEntry::default();
        apply_pin_change(&mut e, &c.pin);
        assert_eq!(e.auth_profile_override_source.as_deref(), Some("auto"));
        assert_eq!(e.auth_profile_override_compaction_count, Some(0));
    }

    // R6.4: the pin is reused while usable, even when it is not first.
    #[test]
    fn r6_4_pin_reused() {
        let o = order(&[
            ("openai:a", false),
            ("openai:b", false),
            ("openai:c", false),
        ]);
        let c = choose_session_profile(&auto("openai:b", 2, 2), &o, false);
        assert_eq!(c.attempts, ["openai:b", "openai:a", "openai:c"]);
        assert_eq!(c.pin, PinChange::Keep);
    }

    // R6.4: a compaction moves the pin to the next profile.
    #[test]
    fn r6_4_compaction_rotates() {
        let o = order(&[
            ("openai:a", false),
            ("openai:b", false),
            ("openai:c", false),
        ]);
        let c = choose_session_profile(&auto("openai:a", 2, 3), &o, false);
        assert_eq!(c.attempts, ["openai:b", "openai:a", "openai:c"]);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:b".into(),
                compaction_count: 3
            }
        );
    }

    // R6.4: a new session rotates, wrapping, skipping blocked profiles.
    #[test]
    fn r6_4_new_session_rotates_with_wrap() {
        let o = order(&[("openai:a", false), ("openai:b", true), ("openai:c", false)]);
        let c = choose_session_profile(&auto("openai:c", 0, 0), &o, true);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:a".into(),
                compaction_count: 0
            }
        );
        let c = choose_session_profile(&auto("openai:a", 0, 0), &o, true);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:c".into(),
                compaction_count: 0
            }
        );
    }

    // R6.6: a cooling auto pin is skipped this run but kept as preference.
    #[test]
    fn r6_6_cooling_auto_pin_kept_as_preference() {
        let cooling = order(&[("openai:a", true), ("openai:b", false)]);
        let e = auto("openai:a", 0, 0);
        let c = choose_session_profile(&e, &cooling, false);
        assert_eq!(c.attempts, ["openai:b"]);
        assert_eq!(c.pin, PinChange::Keep);
        let recovered = order(&[("openai:a", false), ("openai:b", false)]);
        let c = choose_session_profile(&e, &recovered, false);
        assert_eq!(c.attempts[0], "openai:a");
    }

    // R6.5: a user pin is strict, even while blocked; a new session ends it.
    #[test]
    fn r6_5_user_pin_strict_until_new_session() {
        let o = order(&[("openai:a", false), ("openai:b", true)]);
        let mut e = SessionEntry::default();
        pin_user_profile(&mut e, "openai:b");
        let c = choose_session_profile(&e, &o, false);
        assert_eq!(
            (c.attempts.clone(), c.strict, c.pin.clone()),
            (vec!["openai:b".into()], true, PinChange::Keep)
        );
        // A user pin to a profile that is gone: nothing to try (advance model).
        pin_user_profile(&mut e, "openai:gone");
        let c = choose_session_profile(&e, &o, false);
        assert!(c.strict && c.attempts.is_empty());
        // New session: auto rotation again.
        pin_user_profile(&mut e, "openai:b");
        let c = choose_session_profile(&e, &o, true);
        assert!(!c.strict);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:a".into(),
                compaction_count: 0
            }
        );
    }

    // A pin to another provider: ignored; a user's is never overwritten.
    #[test]
    fn foreign_pins() {
        let o = order(&[("openai:a", false)]);
        let mut e = SessionEntry::default();
        pin_user_profile(&mut e, "anthropic:me");
        let c = choose_session_profile(&e, &o, false);
        assert_eq!(
            (c.attempts.clone(), c.strict, c.pin),
            (vec!["openai:a".into()], false, PinChange::Keep)
        );
        let c = choose_session_profile(&auto("anthropic:me", 0, 0), &o, false);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:a".into(),
                compaction_count: 0
            }
        );
    }

    // An auto pin that left the order is replaced by the first available.
    #[test]
    fn stale_auto_pin_replaced() {
        let o = order(&[("openai:a", false), ("openai:b", false)]);
        let c = choose_session_profile(&auto("openai:gone", 0, 0), &o, false);
        assert_eq!(
            c.pin,
            PinChange::SetAuto {
                id: "openai:a".into(),
                compaction_count: 0
            }
        );
    }

    #[test]
    fn nothing_available() {
        let o = order(&[("openai:a", true)]);
        let c = choose_session_profile(&SessionEntry::default(), &o, false);
        assert!(c.attempts.is_empty());
        assert_eq!(c.pin, PinChange::Keep);
    }
}
