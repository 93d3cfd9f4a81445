//! Rotation order inside a provider (SPEC R6.1–R6.3, REFERENCE b).
//!
//! The base list comes from the first source that applies: an order stored
//! in `auth-state.json` (`order[provider]`, written by operator tooling),
//! then config `auth.order[provider]`, then config `auth.profiles` of the
//! provider, then every stored profile of the provider. An explicit order
//! that is empty disables the provider: no profile is tried.
//!
//! Each listed profile must exist in `auth-profiles.json`, belong to the
//! provider, satisfy its configured `mode`, and be usable (a key present,
//! a token not expired, an OAuth login with an access or refresh token);
//! the others are set aside with the reason, for `failover status`.
//!
//! An explicit order is kept as written. Without one, profiles rotate
//! round-robin: OAuth logins, then tokens, then API keys (subscriptions
//! before metered keys); an OAuth login whose access token has expired
//! after live ones; then least recently used first (`lastUsed`, missing
//! counts as never). Either way, profiles blocked for the model (cooling or
//! disabled) move to the end, soonest expiry first.
//!
//! Worked example, no explicit order, at `now`:
//!
//! | id                  | type    | lastUsed | blocked until |
//! |---------------------|---------|----------|---------------|
//! | `openai:key`        | api_key | 1        |               |
//! | `openai:me@x.io`    | oauth   | 9        |               |
//! | `openai:team@x.io`  | oauth   | 5        |               |
//! | `openai:old`        | api_key | 0        | now + 1 min   |
//!
//! gives `openai:team@x.io`, `openai:me@x.io`, `openai:key`, `openai:old`.

use std::fmt;

use crate::store::{
    normalize_provider, AuthProfiles, AuthState, CredentialKind, Unusable, UsageStats,
};

use super::cooldown::{block_for, Block};
use super::AuthRouting;

/// Where the base list came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum OrderSource {
    /// `order[provider]` in `auth-state.json`.
    StoredOrder,
    /// Config `auth.order[provider]`.
    ConfigOrder,
    /// Config `auth.profiles` of the provider.
    ConfigProfiles,
    /// Every stored profile of the provider.
    StoredProfiles,
}

impl OrderSource {
    pub fn is_explicit(self) -> bool {
        matches!(self, OrderSource::StoredOrder | OrderSource::ConfigOrder)
    }

    pub fn describe(self) -> &'static str {
        match self {
            OrderSource::StoredOrder => "stored order",
            OrderSource::ConfigOrder => "auth.order",
            OrderSource::ConfigProfiles => "auth.profiles, round-robin",
            OrderSource::StoredProfiles => "stored profiles, round-robin",
        }
    }
}

/// One profile in the order.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct OrderedProfile {
    pub id: String,
    pub kind: CredentialKind,
    /// `Some` when the profile is cooling or disabled for the model.
    pub block: Option<Block>,
}

/// A listed profile left out of the order, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Excluded {
    /// Listed, but `auth-profiles.json` holds no credential for it.
    Missing {
        /// The listed profile id.
        id: String,
    },
    /// Its stored credential belongs to another provider.
    OtherProvider {
        /// The listed profile id.
        id: String,
        /// The provider the stored credential belongs to.
        provider: String,
    },
    /// Its stored credential does not satisfy the profile's configured `mode`.
    ModeMismatch {
        /// The listed profile id.
        id: String,
        /// The credential type configured in `auth.profiles`.
        mode: CredentialKind,
        /// The type of the stored credential.
        kind: CredentialKind,
    },
    /// The stored credential cannot be used (no key, token expired, …).
    Unusable {
        /// The listed profile id.
        id: String,
        /// Why the credential cannot be used.
        why: Unusable,
    },
}

impl Excluded {
    /// The id of the profile left out.
    pub fn id(&self) -> &str {
        match self {
            Excluded::Missing { id }
            | Excluded::OtherProvider { id, .. }
            | Excluded::ModeMismatch { id, .. }
            | Excluded::Unusable { id, .. } => id,
        }
    }
}

impl fmt::Display for Excluded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Excluded::Missing { id } => {
                write!(f, "profile `{id}` is listed but has no stored credential")
            }
            Excluded::OtherProvider { id, provider } => {
                write!(f, "profile `{id}` belongs to provider `{provider}`")
            }
            Excluded::ModeMismatch { id, mode, kind } => write!(
                f,
                "profile `{id}` is configured as `{}` but its stored credential is `{}`",
                mode.name(),
                kind.name()
            ),
            Excluded::Unusable { id, why } => write!(f, "profile `{id}`: {why}"),
        }
    }
}

/// The rotation order of one provider.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProfileOrder {
    /// The provider, normalised.
    pub provider: String,
    /// Where the base list came from (R6.1).
    pub source: OrderSource,
    /// Usable profiles first, then blocked ones by soonest expiry.
    pub entries: Vec<OrderedProfile>,
    /// Listed profiles left out of the order, with the reason, for `failover status`.
    pub excluded: Vec<Excluded>,
}

impl ProfileOrder {
    /// An explicit empty order: the provider is switched off.
    pub fn is_disabled(&self) -> bool {
        self.source.is_explicit() && self.entries.is_empty() && self.excluded.is_empty()
    }

    #[cfg(test)]
    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.entries.iter().map(|e| e.id.as_str())
    }

    /// Profiles usable now, in order.
    pub fn available(&self) -> impl Iterator<Item = &str> {
        self.entries
            .iter()
            .filter(|e| e.block.is_none())
            .map(|e| e.id.as_str())
    }

    /// The index of profile `id` in [`entries`](Self::entries), or `None` when
    /// it is not in the order.
    pub fn position(&self, id: &str) -> Option<usize> {
        self.entries.iter().position(|e| e.id == id)
    }

    #[cfg(test)]
    pub(crate) fn get(&self, id: &str) -> Option<&OrderedProfile> {
        self.entries.iter().find(|e| e.id == id)
    }

    /// When every profile is blocked, the soonest expiry.
    pub fn soonest_expiry(&self) -> Option<u64> {
        if self.entries.iter().any(|e| e.block.is_none()) {
            return None;
        }
        self.entries
            .iter()
            .filter_map(|e| e.block.as_ref())
            .map(Block::until)
            .min()
    }
}

/// The rotation order of `provider` for `model` at `now_ms` (see the module
/// documentation).
pub fn order_profiles(
    routing: &AuthRouting,
    profiles: &AuthProfiles,
    state: &AuthState,
    provider: &str,
    model: Option<&str>,
    now_ms: u64,
) -> ProfileOrder {
    let want = normalize_provider(provider);
    let stored_order = state
        .order
        .iter()
        .find(|(k, _)| normalize_provider(k) == want)
        .map(|(_, v)| v.clone());
    let (source, listed): (OrderSource, Vec<String>) = if let Some(list) = stored_order {
        (OrderSource::StoredOrder, list)
    } else if let Some(list) = routing.order_for(provider) {
        (OrderSource::ConfigOrder, list.to_vec())
    } else {
        let configured: Vec<String> = routing
            .profiles
            .iter()
            .filter(|p| normalize_provider(&p.provider) == want)
            .map(|p| p.id.clone())
            .collect();
        if configured.is_empty() {
            let stored = profiles
                .for_provider(provider)
                .map(|(id, _)| id.to_string());
            (OrderSource::StoredProfiles, stored.collect())
        } else {
            (OrderSource::ConfigProfiles, configured)
        }
    };

    let mut usable = Vec::new();
    let mut excluded = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for id in listed {
        if !seen.insert(id.clone()) {
            continue;
        }
        let Some(p) = profiles.profiles.get(&id) else {
            excluded.push(Excluded::Missing { id });
            continue;
        };
        if normalize_provider(&p.provider) != want {
            excluded.push(Excluded::OtherProvider {
                id,
                provider: p.provider.clone(),
            });
            continue;
        }
        if let Some(meta) = routing.meta(&id) {
            if !meta.accepts(p.kind()) {
                excluded.push(Excluded::ModeMismatch {
                    mode: meta.mode.expect("a mode rejected it"),
                    kind: p.kind(),
                    id,
                });
                continue;
            }
        }
        if let Some(why) = p.unusable(now_ms) {
            excluded.push(Excluded::Unusable { id, why });
            continue;
        }
        usable.push((id, p));
    }

    let empty = UsageStats::default();
    let mut ready = Vec::new();
    let mut blocked = Vec::new();
    for (i, (id, p)) in usable.into_iter().enumerate() {
        let stats = state.stats(&id).unwrap_or(&empty);
        let entry = OrderedProfile {
            kind: p.kind(),
            block: block_for(stats, model, now_ms),
            id,
        };
        let rr_key = (
            p.kind().rank(),
            p.oauth_expired(now_ms),
            stats.last_used.unwrap_or(0),
        );
        match &entry.block {
            None => ready.push((rr_key, i, entry)),
            Some(b) => blocked.push((b.until(), i, entry)),
        }
    }
    if !source.is_explicit() {
        ready.sort_by_key(|(k, i, _)| (*k, *i));
    }
    blocked.sort_by_key(|(until, i, _)| (*until, *i));
    let entries = ready
        .into_iter()
        .map(|(_, _, e)| e)
        .chain(blocked.into_iter().map(|(_, _, e)| e))
        .collect();
    ProfileOrder {
        provider: want,
        source,
        entries,
        excluded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::ProfileMeta;
    use crate::store::{Credential, Profile, Secret, MINUTE_MS};
    use std::collections::BTreeMap;

    const NOW: u64 = 1_767_225_600_000;

    fn oauth(provider: &str) -> Profile {
        Profile::oauth(provider, "acc", "ref", NOW + 3_600_000)
    }

    fn store(list: &[(&str, Profile)]) -> AuthProfiles {
        let mut p = AuthProfiles::default();
        for (id, prof) in list {
            p.profiles.insert((*id).into(), prof.clone());
        }
        p
    }

    fn used(state: &mut AuthState, id: &str, at: u64) {
        state.stats_mut(id).last_used = Some(at);
    }

    fn ids(o: &ProfileOrder) -> Vec<&str> {
        o.ids().collect()
    }

    // R6.2, R6.3: the module's worked example.
    #[test]
    fn r6_2_r6_3_round_robin_then_blocked() {
        let p = store(&[
            ("openai:key", Profile::api_key("openai", "k1")),
            ("openai:me@x.io", oauth("openai")),
            ("openai:team@x.io", oauth("openai")),
            ("openai:old", Profile::api_key("openai", "k2")),
            ("anthropic:x", Profile::api_key("anthropic", "k3")),
        ]);
        let mut s = AuthState::default();
        used(&mut s, "openai:key", 1);
        used(&mut s, "openai:me@x.io", 9);
        used(&mut s, "openai:team@x.io", 5);
        s.stats_mut("openai:old").cooldown_until = Some(NOW + MINUTE_MS);
        let o = order_profiles(&AuthRouting::default(), &p, &s, "OpenAI", None, NOW);
        assert_eq!(o.source, OrderSource::StoredProfiles);
        assert_eq!(
            ids(&o),
            [
                "openai:team@x.io",
                "openai:me@x.io",
                "openai:key",
                "openai:old"
            ]
        );
        assert_eq!(o.available().count(), 3);
        assert_eq!(o.soonest_expiry(), None);
    }

    // R6.2: a profile never used counts as the oldest use, so within its
    // type it comes first — before one used at the clock's very start.
    #[test]
    fn r6_2_never_used_comes_first() {
        let p = store(&[
            ("openai:a", Profile::api_key("openai", "k1")),
            ("openai:b", Profile::api_key("openai", "k2")),
            ("openai:c", Profile::api_key("openai", "k3")),
        ]);
        let mut s = AuthState::default();
        used(&mut s, "openai:a", 1);
        used(&mut s, "openai:c", 7);
        let o = order_profiles(&AuthRouting::default(), &p, &s, "openai", None, NOW);
        assert_eq!(ids(&o), ["openai:b", "openai:a", "openai:c"]);
    }

    // R6.2: tokens between OAuth and API keys; expired OAuth after live OAuth.
    #[test]
    fn r6_2_type_ranks_and_expired_oauth() {
        let mut expired = oauth("anthropic");
        expired.credential = Credential::OAuth {
            access: Some(Secret::new("a")),
            refresh: Some(Secret::new("r")),
            expires: Some(NOW - 1),
        };
        let token = Profile {
            credential: Credential::Token {
                token: Some(Secret::new("t")),
                token_ref: None,
                expires: None,
            },
            ..Profile::api_key("anthropic", "")
        };
        let p = store(&[
            ("anthropic:a-key", Profile::api_key("anthropic", "k")),
            ("anthropic:b-expired", expired),
            ("anthropic:c-live", oauth("anthropic")),
            ("anthropic:d-token", token),
        ]);
        let o = order_profiles(
            &AuthRouting::default(),
            &p,
            &AuthState::default(),
            "anthropic",
            None,
            NOW,
        );
        assert_eq!(
            ids(&o),
            [
                "anthropic:c-live",
                "anthropic:b-expired",
                "anthropic:d-token",
                "anthropic:a-key"
            ]
        );
    }

    // R6.1: explicit order kept as written, blocked moved last by expiry.
    #[test]
    fn r6_1_explicit_order_kept_blocked_last() {
        let p = store(&[
            ("openai:a", Profile::api_key("openai", "k")),
            ("openai:b", oauth("openai")),
            ("openai:c", Profile::api_key("openai", "k")),
            ("openai:d", Profile::api_key("openai", "k")),
        ]);
        let mut s = AuthState::default();
        s.stats_mut("openai:a").disabled_until = Some(NOW + 10 * MINUTE_MS);
        s.stats_mut("openai:c").cooldown_until = Some(NOW + MINUTE_MS);
        let routing = AuthRouting {
            order: BTreeMap::from([(
                "openai".into(),
                vec![
                    "openai:a".into(),
                    "openai:d".into(),
                    "openai:c".into(),
                    "openai:b".into(),
                    "openai:ghost".into(),
                ],
            )]),
            ..Default::default()
        };
        let o = order_profiles(&routing, &p, &s, "openai", None, NOW);
        assert_eq!(o.source, OrderSource::ConfigOrder);
        assert_eq!(ids(&o), ["openai:d", "openai:b", "openai:c", "openai:a"]);
        assert_eq!(
            o.excluded,
            vec![Excluded::Missing {
                id: "openai:ghost".into()
            }]
        );
        assert_eq!(
            o.excluded[0].to_string(),
            "profile `openai:ghost` is listed but has no stored credential"
        );
    }

    // R6.1: config profiles before stored ones; stored order before config.
    #[test]
    fn r6_1_sources_in_precedence() {
        let p = store(&[
            ("openai:a", Profile::api_key("openai", "k")),
            ("openai:b", Profile::api_key("openai", "k")),
        ]);
        let mut routing = AuthRouting::new(
            vec![ProfileMeta::from_id("openai:b").unwrap()],
            BTreeMap::new(),
        )
        .unwrap();
        let mut s = AuthState::default();
        let o = order_profiles(&routing, &p, &s, "openai", None, NOW);
        assert_eq!(
            (o.source, ids(&o)),
            (OrderSource::ConfigProfiles, vec!["openai:b"])
        );
        routing
            .order
            .insert("openai".into(), vec!["openai:a".into()]);
        let o = order_profiles(&routing, &p, &s, "openai", None, NOW);
        assert_eq!(
            (o.source, ids(&o)),
            (OrderSource::ConfigOrder, vec!["openai:a"])
        );
        s.order
            .insert("openai".into(), vec!["openai:b".into(), "openai:a".into()]);
        let o = order_profiles(&routing, &p, &s, "openai", None, NOW);
        assert_eq!(
            (o.source, ids(&o)),
            (OrderSource::StoredOrder, vec!["openai:b", "openai:a"])
        );
    }

    // R6.1: an explicitly empty order disables the provider.
    #[test]
    fn r6_1_empty_order_disables_provider() {
        let p = store(&[("xai:a", Profile::api_key("xai", "k"))]);
        let routing = AuthRouting {
            order: BTreeMap::from([("xai".into(), vec![])]),
            ..Default::default()
        };
        let o = order_profiles(&routing, &p, &AuthState::default(), "xai", None, NOW);
        assert!(o.is_disabled());
        assert!(o.entries.is_empty());
    }

    // R7.3 in ordering: a cooldown scoped to another model does not demote.
    #[test]
    fn model_scoped_block_depends_on_model() {
        let p = store(&[
            ("openai:a", Profile::api_key("openai", "k")),
            ("openai:b", Profile::api_key("openai", "k")),
        ]);
        let mut s = AuthState::default();
        s.stats_mut("openai:a").cooldown_until = Some(NOW + MINUTE_MS);
        s.stats_mut("openai:a").cooldown_model = Some("gpt-5".into());
        used(&mut s, "openai:b", 5);
        let r = AuthRouting::default();
        assert_eq!(
            ids(&order_profiles(&r, &p, &s, "openai", Some("gpt-5"), NOW)),
            ["openai:b", "openai:a"]
        );
        assert_eq!(
            ids(&order_profiles(&r, &p, &s, "openai", Some("o3"), NOW)),
            ["openai:a", "openai:b"]
        );
        let o = order_profiles(&r, &p, &s, "openai", Some("gpt-5"), NOW);
        assert_eq!(
            o.get("openai:a").unwrap().block.as_ref().unwrap().until(),
            NOW + MINUTE_MS
        );
    }

    // Filters: mode mismatch, other provider, unusable credentials.
    #[test]
    fn filters_report_why() {
        let mut bad_oauth = oauth("anthropic");
        bad_oauth.credential = Credential::OAuth {
            access: Some(Secret::new("a")),
            refresh: None,
            expires: Some(NOW - 1),
        };
        let p = store(&[
            ("anthropic:key", Profile::api_key("anthropic", "k")),
            ("anthropic:expired", bad_oauth),
            ("openai:x", Profile::api_key("openai", "k")),
        ]);
        let mut meta = ProfileMeta::from_id("anthropic:key").unwrap();
        meta.mode = Some(CredentialKind::OAuth);
        let routing = AuthRouting {
            profiles: vec![meta],
            order: BTreeMap::from([(
                "anthropic".into(),
                vec![
                    "anthropic:key".into(),
                    "anthropic:expired".into(),
                    "openai:x".into(),
                ],
            )]),
        };
        let o = order_profiles(&routing, &p, &AuthState::default(), "anthropic", None, NOW);
        assert!(o.entries.is_empty());
        assert!(!o.is_disabled());
        let msgs: Vec<String> = o.excluded.iter().map(ToString::to_string).collect();
        assert_eq!(msgs, [
            "profile `anthropic:key` is configured as `oauth` but its stored credential is `api_key`",
            "profile `anthropic:expired`: oauth access token expired at 2025-12-31T23:59:59Z and there is no refresh token; log in again",
            "profile `openai:x` belongs to provider `openai`",
        ]);
        // `failover status` lists them by id, under the order's source.
        let ids: Vec<&str> = o.excluded.iter().map(Excluded::id).collect();
        assert_eq!(ids, ["anthropic:key", "anthropic:expired", "openai:x"]);
        assert_eq!(o.source.describe(), "auth.order");
        assert_eq!(
            [
                OrderSource::StoredOrder,
                OrderSource::ConfigProfiles,
                OrderSource::StoredProfiles
            ]
            .map(OrderSource::describe),
            [
                "stored order",
                "auth.profiles, round-robin",
                "stored profiles, round-robin"
            ]
        );
    }

    #[test]
    fn all_blocked_reports_soonest() {
        let p = store(&[
            ("openai:a", Profile::api_key("openai", "k")),
            ("openai:b", Profile::api_key("openai", "k")),
        ]);
        let mut s = AuthState::default();
        s.stats_mut("openai:a").cooldown_until = Some(NOW + 5);
        s.stats_mut("openai:b").disabled_until = Some(NOW + 3);
        let o = order_profiles(&AuthRouting::default(), &p, &s, "openai", None, NOW);
        assert_eq!(ids(&o), ["openai:b", "openai:a"]);
        assert_eq!(o.soonest_expiry(), Some(NOW + 3));
    }
}
