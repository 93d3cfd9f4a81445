//! Auth profiles: which credential of a provider to try, in what order, and
//! what a failure does to it (SPEC R6–R8, R16.1–R16.6).
//!
//! The first stage of failover (R1.1) happens inside one provider: the
//! runner tries the provider's auth profiles one after another before it
//! moves to the next model. This module answers the questions of that
//! stage, as pure functions over the stored documents and an explicit
//! `now_ms` (the executor owns the clock):
//!
//! * [`order_profiles`] — the rotation order (R6.1–R6.3): the explicit
//!   order, else the configured profiles, else the stored ones; usable
//!   profiles first (round-robin: OAuth, token, API key, least recently
//!   used first), blocked ones last by soonest expiry.
//! * [`choose_session_profile`] — session stickiness (R6.4–R6.6): which
//!   profile this session should start with and whether its pin changes.
//! * [`record_failure`] / [`record_success`] — the cooldown and disable
//!   arithmetic (R7, R8, R16.4–R16.6), driven by each reason's declared
//!   [`ReasonBehaviour`](crate::compile::ReasonBehaviour), never its name.
//! * [`is_available`], [`block_for`], [`soonest_expiry`] — the questions
//!   the executor asks before trying or skipping a candidate (R10, R14);
//!   [`probe_window_open`], [`disabled_probe_allowed`],
//!   [`probe_uses_transient_slot`], [`ProbeThrottle`] — when a blocked
//!   primary may be probed anyway (R16.1–R16.3).
//!
//! Config inputs arrive as plain values ([`AuthRouting`],
//! [`CooldownPolicy`]) validated when built; the config-file parser maps
//! onto them. [`mark_failure`] and [`mark_success`] apply the arithmetic to
//! a [`Store`] in one locked read-modify-write.
//!
//! Worked example: `auth.order.openai = ["openai:me@x.io",
//! "openai:backup"]`. The subscription hits its weekly limit with a reset
//! time three days out (R6.7): `mark_failure(…, reset_at: Some(t+3d))`
//! disables nothing but cools `openai:me@x.io` until then; the next
//! `order_profiles` puts `openai:backup` first, the subscription last; the
//! session's auto pin stays on the subscription (a preference, R6.6) and
//! `choose_session_profile` starts runs on the backup until the reset
//! passes, then on the subscription again.

mod cooldown;
mod order;
mod probe;
mod sticky;

use std::collections::BTreeMap;

pub use cooldown::{
    block_for, cooldown_ms, is_available, record_failure, record_success, soonest_expiry, Block,
    Failure, FailureEffect, COOLDOWN_BASE_MS, COOLDOWN_CAP_MS, COOLDOWN_FACTOR, DISABLE_FLOOR_MS,
};
pub use order::{order_profiles, Excluded, OrderSource, OrderedProfile, ProfileOrder};
pub use probe::{
    disabled_probe_allowed, probe_uses_transient_slot, probe_window_open, ProbeThrottle,
    PROBE_MARGIN_MS, PROBE_THROTTLE_KEYS, PROBE_THROTTLE_MS, PROBE_THROTTLE_TTL_MS,
};
pub use sticky::{
    apply_pin_change, choose_session_profile, pin_user_profile, PinChange, ProfileChoice,
};

use crate::compile::reasons::{DisableLane, RotationBudget};
use crate::store::{
    normalize_provider, provider_of_id, CredentialKind, Store, StoreError, StoreExt, HOUR_MS,
    MINUTE_MS,
};

/// A configuration problem in [`AuthRouting`] or [`CooldownPolicy`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

/// One `auth.profiles` entry: metadata only, never a secret (R5.3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProfileMeta {
    pub id: String,
    pub provider: String,
    /// `mode`: the credential type this profile must have. `oauth` also
    /// accepts a `token` credential (REFERENCE b).
    pub mode: Option<CredentialKind>,
    pub email: Option<String>,
}

impl ProfileMeta {
    /// A profile whose provider is the id's prefix (`openai:default`).
    pub fn from_id(id: &str) -> Result<Self, ConfigError> {
        let provider = provider_of_id(id).ok_or_else(|| no_provider(id))?;
        Ok(ProfileMeta {
            id: id.into(),
            provider: provider.into(),
            mode: None,
            email: None,
        })
    }

    /// Whether a stored credential of `kind` satisfies this profile's mode.
    pub fn accepts(&self, kind: CredentialKind) -> bool {
        match self.mode {
            None => true,
            Some(CredentialKind::OAuth) => {
                matches!(kind, CredentialKind::OAuth | CredentialKind::Token)
            }
            Some(m) => m == kind,
        }
    }
}

fn no_provider(id: &str) -> ConfigError {
    ConfigError(format!(
        "auth profile `{id}` has no provider: set `provider` or name it `provider:name`"
    ))
}

/// `auth.profiles` and `auth.order` (R5.3, R6.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuthRouting {
    pub profiles: Vec<ProfileMeta>,
    /// Explicit order per provider; an empty list disables the provider.
    pub order: BTreeMap<String, Vec<String>>,
}

impl AuthRouting {
    /// Builds and validates: every profile has a provider, no id twice.
    pub fn new(
        profiles: Vec<ProfileMeta>,
        order: BTreeMap<String, Vec<String>>,
    ) -> Result<Self, ConfigError> {
        let mut seen = std::collections::BTreeSet::new();
        for p in &profiles {
            if p.provider.trim().is_empty() {
                return Err(no_provider(&p.id));
            }
            if !seen.insert(p.id.as_str()) {
                return Err(ConfigError(format!(
                    "auth profile `{}` is configured twice",
                    p.id
                )));
            }
        }
        Ok(AuthRouting { profiles, order })
    }

    pub fn meta(&self, id: &str) -> Option<&ProfileMeta> {
        self.profiles.iter().find(|p| p.id == id)
    }

    /// `auth.order[provider]`, keys compared after normalisation.
    pub fn order_for(&self, provider: &str) -> Option<&[String]> {
        let want = normalize_provider(provider);
        self.order
            .iter()
            .find(|(k, _)| normalize_provider(k) == want)
            .map(|(_, v)| v.as_slice())
    }
}

/// `auth.cooldowns` (R8.4, R8.5, R16.4, R16.6). Fractional hours and
/// minutes are allowed.
#[derive(Clone, Debug, PartialEq)]
pub struct CooldownPolicy {
    pub billing_backoff_hours: f64,
    pub billing_backoff_hours_by_provider: BTreeMap<String, f64>,
    pub billing_max_hours: f64,
    pub failure_window_hours: f64,
    pub auth_permanent_backoff_minutes: f64,
    pub auth_permanent_max_minutes: f64,
    pub overloaded_profile_rotations: u32,
    pub overloaded_backoff_ms: u64,
    pub rate_limited_profile_rotations: u32,
}

impl Default for CooldownPolicy {
    fn default() -> Self {
        CooldownPolicy {
            billing_backoff_hours: 5.0,
            billing_backoff_hours_by_provider: BTreeMap::new(),
            billing_max_hours: 24.0,
            failure_window_hours: 24.0,
            auth_permanent_backoff_minutes: 10.0,
            auth_permanent_max_minutes: 60.0,
            overloaded_profile_rotations: 1,
            overloaded_backoff_ms: 0,
            rate_limited_profile_rotations: 1,
        }
    }
}

fn to_ms(amount: f64, unit_ms: u64) -> u64 {
    (amount * unit_ms as f64).round() as u64
}

impl CooldownPolicy {
    /// Checks every duration is a finite, non-negative number.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut fields: Vec<(String, f64)> = vec![
            ("billingBackoffHours".into(), self.billing_backoff_hours),
            ("billingMaxHours".into(), self.billing_max_hours),
            ("failureWindowHours".into(), self.failure_window_hours),
            (
                "authPermanentBackoffMinutes".into(),
                self.auth_permanent_backoff_minutes,
            ),
            (
                "authPermanentMaxMinutes".into(),
                self.auth_permanent_max_minutes,
            ),
        ];
        for (p, h) in &self.billing_backoff_hours_by_provider {
            fields.push((format!("billingBackoffHoursByProvider.{p}"), *h));
        }
        for (name, v) in fields {
            if !v.is_finite() || v < 0.0 {
                return Err(ConfigError(format!(
                    "`auth.cooldowns.{name}` must be a non-negative number"
                )));
            }
        }
        Ok(())
    }

    pub fn failure_window_ms(&self) -> u64 {
        to_ms(self.failure_window_hours, HOUR_MS)
    }

    /// How long the `n`-th failure (1-based, within the failure window) on
    /// `lane` disables a profile of `provider`.
    pub fn disable_ms(&self, lane: DisableLane, provider: &str, n: u32) -> u64 {
        let (base, max) = match lane {
            DisableLane::Billing => {
                let want = normalize_provider(provider);
                let hours = self
                    .billing_backoff_hours_by_provider
                    .iter()
                    .find(|(k, _)| normalize_provider(k) == want)
                    .map_or(self.billing_backoff_hours, |(_, h)| *h);
                (
                    to_ms(hours, HOUR_MS),
                    to_ms(self.billing_max_hours, HOUR_MS),
                )
            }
            DisableLane::AuthPermanent => (
                to_ms(self.auth_permanent_backoff_minutes, MINUTE_MS),
                to_ms(self.auth_permanent_max_minutes, MINUTE_MS),
            ),
        };
        cooldown::lane_ms(base, max, n)
    }

    /// Profile rotations allowed inside a provider before model fallback
    /// (R8.5).
    pub fn rotations(&self, budget: RotationBudget) -> u32 {
        match budget {
            RotationBudget::Overloaded => self.overloaded_profile_rotations,
            RotationBudget::RateLimited => self.rate_limited_profile_rotations,
        }
    }

    /// Pause before a rotation under `budget` (R8.5).
    pub fn rotation_backoff_ms(&self, budget: RotationBudget) -> u64 {
        match budget {
            RotationBudget::Overloaded => self.overloaded_backoff_ms,
            RotationBudget::RateLimited => 0,
        }
    }
}

/// [`record_failure`] as one locked update of the store.
pub fn mark_failure(
    store: &dyn Store,
    profile_id: &str,
    provider: &str,
    failure: &Failure<'_>,
    policy: &CooldownPolicy,
    now_ms: u64,
) -> Result<FailureEffect, StoreError> {
    store.update_state(|s| record_failure(s, profile_id, provider, failure, policy, now_ms))
}

/// [`record_success`] as one locked update of the store.
pub fn mark_success(
    store: &dyn Store,
    profile_id: &str,
    provider: &str,
    model: Option<&str>,
    now_ms: u64,
) -> Result<(), StoreError> {
    store.update_state(|s| record_success(s, profile_id, provider, model, now_ms))
}

/// Notes a cooldown probe of `profile_id` (`lastProbeAt`, R16.1).
pub fn mark_probe(store: &dyn Store, profile_id: &str, now_ms: u64) -> Result<(), StoreError> {
    store.update_state(|s| s.stats_mut(profile_id).last_probe_at = Some(now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn r8_4_r8_5_defaults() {
        let p = CooldownPolicy::default();
        assert!(p.validate().is_ok());
        assert_eq!(p.disable_ms(DisableLane::Billing, "x", 1), 5 * HOUR_MS);
        assert_eq!(
            p.disable_ms(DisableLane::AuthPermanent, "x", 1),
            10 * MINUTE_MS
        );
        assert_eq!(p.failure_window_ms(), 24 * HOUR_MS);
        assert_eq!(p.rotations(RotationBudget::Overloaded), 1);
        assert_eq!(p.rotations(RotationBudget::RateLimited), 1);
        assert_eq!(p.rotation_backoff_ms(RotationBudget::Overloaded), 0);
    }

    #[test]
    fn invalid_policy_is_refused_with_the_key() {
        let p = CooldownPolicy {
            billing_max_hours: f64::NAN,
            ..Default::default()
        };
        assert_eq!(
            p.validate().unwrap_err().to_string(),
            "`auth.cooldowns.billingMaxHours` must be a non-negative number"
        );
    }

    #[test]
    fn zero_base_is_floored() {
        let p = CooldownPolicy {
            billing_backoff_hours: 0.0,
            ..Default::default()
        };
        assert_eq!(p.disable_ms(DisableLane::Billing, "x", 1), DISABLE_FLOOR_MS);
    }

    // Bad input: a configured profile id without a provider.
    #[test]
    fn profile_without_provider_is_refused() {
        let e = ProfileMeta::from_id("lonely").unwrap_err().to_string();
        assert_eq!(
            e,
            "auth profile `lonely` has no provider: set `provider` or name it `provider:name`"
        );
        let meta = ProfileMeta {
            id: "x".into(),
            provider: " ".into(),
            mode: None,
            email: None,
        };
        assert!(AuthRouting::new(vec![meta], BTreeMap::new()).is_err());
        let a = ProfileMeta::from_id("openai:a").unwrap();
        assert!(AuthRouting::new(vec![a.clone(), a], BTreeMap::new())
            .unwrap_err()
            .to_string()
            .contains("configured twice"));
    }

    #[test]
    fn modes() {
        let mut m = ProfileMeta::from_id("anthropic:me").unwrap();
        m.mode = Some(CredentialKind::OAuth);
        assert!(m.accepts(CredentialKind::Token));
        assert!(!m.accepts(CredentialKind::ApiKey));
        m.mode = Some(CredentialKind::Token);
        assert!(!m.accepts(CredentialKind::OAuth));
    }
}
