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
//! * [`is_available`], [`block_for`], [`ProfileOrder::soonest_expiry`] —
//!   the questions the executor asks before trying or skipping a candidate
//!   (R10, R14);
//!   [`probe_window_open`], [`disabled_probe_allowed`],
//!   [`probe_uses_transient_slot`], [`ProbeThrottle`] — when a blocked
//!   primary may be probed anyway (R16.1–R16.3).
//!
//! Config inputs arrive as plain values ([`AuthRouting`],
//! [`CooldownPolicy`], [`ProfileMeta`]) valid by construction; the
//! config-file reader builds them directly. [`mark_failure`] and [`mark_success`] apply the arithmetic to
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
mod policy;
mod probe;
mod sticky;

use std::collections::BTreeMap;

#[cfg(test)]
pub(crate) use cooldown::is_available;
pub(crate) use cooldown::record_failure;
pub(crate) use cooldown::record_success;
pub(crate) use cooldown::Failure;
pub(crate) use cooldown::FailureEffect;
pub use cooldown::{block_for, Block};
pub use order::{order_profiles, Excluded, ProfileOrder};
pub(crate) use policy::DEFAULT_OVERLOADED_BACKOFF;
pub(crate) use policy::DEFAULT_OVERLOADED_PROFILE_ROTATIONS;
pub(crate) use policy::DEFAULT_RATE_LIMITED_PROFILE_ROTATIONS;
pub use policy::{CooldownPolicy, PolicyError};
pub(crate) use probe::disabled_probe_allowed;
pub(crate) use probe::probe_uses_transient_slot;
pub(crate) use probe::probe_window_open;
pub(crate) use probe::ProbeThrottle;
pub(crate) use probe::PROBE_THROTTLE_MS;
pub(crate) use sticky::apply_pin_change;
pub(crate) use sticky::choose_session_profile;
pub(crate) use sticky::pin_user_profile;
pub(crate) use sticky::PinChange;

pub(crate) use crate::store::CredentialKind;
use crate::store::{normalize_provider, provider_of_id};
#[cfg(test)]
use crate::store::{Store, StoreError, StoreExt};

/// Why the config's `auth.profiles` (or a [`ProfileMeta`] from an id) were refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RoutingError {
    /// The profile names no provider (and its id has no `provider:` part).
    #[error("auth profile `{id}` has no provider: set `provider` or name it `provider:name`")]
    NoProvider {
        /// The profile id.
        id: String,
    },
    /// Two `auth.profiles` entries share an id.
    #[error("auth profile `{id}` is configured twice")]
    DuplicateProfile {
        /// The profile id.
        id: String,
    },
}

/// One `auth.profiles` entry: metadata only, never a secret (R5.3). The
/// config file's reader builds it; in code, [`ProfileMeta::new`] or
/// [`ProfileMeta::from_id`] and the `with_*` methods.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ProfileMeta {
    /// `provider:default` or `provider:<email>` (SPEC R2.2).
    pub id: String,
    /// The provider id, lower-cased.
    pub provider: String,
    /// `mode` (or `type`): the credential type this profile must have.
    /// `oauth` also accepts a `token` credential (REFERENCE b).
    pub mode: Option<CredentialKind>,
    /// `email`, informational.
    pub email: Option<String>,
}

impl ProfileMeta {
    /// A profile `id` of `provider`, any credential type.
    pub fn new(id: impl Into<String>, provider: impl Into<String>) -> Self {
        ProfileMeta {
            id: id.into(),
            provider: provider.into(),
            mode: None,
            email: None,
        }
    }

    /// A profile whose provider is the id's prefix (`openai:default`).
    pub fn from_id(id: &str) -> Result<Self, RoutingError> {
        let provider = provider_of_id(id).ok_or_else(|| no_provider(id))?;
        Ok(ProfileMeta::new(id, provider))
    }

    /// Requires a credential of `mode` (see [`ProfileMeta::accepts`]).
    pub fn with_mode(mut self, mode: Option<CredentialKind>) -> Self {
        self.mode = mode;
        self
    }

    /// Sets the informational e-mail address.
    pub fn with_email(mut self, email: Option<String>) -> Self {
        self.email = email;
        self
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

fn no_provider(id: &str) -> RoutingError {
    RoutingError::NoProvider { id: id.into() }
}

/// `auth.profiles` and `auth.order` (R5.3, R6.1).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct AuthRouting {
    /// `auth.profiles`: per-profile metadata (provider, mode, e-mail), never secrets.
    pub profiles: Vec<ProfileMeta>,
    /// Explicit order per provider; an empty list disables the provider.
    pub order: BTreeMap<String, Vec<String>>,
}

impl AuthRouting {
    /// Builds and validates: every profile has a provider, no id twice.
    pub fn new(
        profiles: Vec<ProfileMeta>,
        order: BTreeMap<String, Vec<String>>,
    ) -> Result<Self, RoutingError> {
        let mut seen = std::collections::BTreeSet::new();
        for p in &profiles {
            if p.provider.trim().is_empty() {
                return Err(no_provider(&p.id));
            }
            if !seen.insert(p.id.as_str()) {
                return Err(RoutingError::DuplicateProfile { id: p.id.clone() });
            }
        }
        Ok(AuthRouting { profiles, order })
    }

    /// The `auth.profiles` entry for profile `id`, if one is configured.
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

/// [`record_failure`] as one locked update of the store (tests of the
/// whole-document stores; the runner updates per record).
#[cfg(test)]
pub(crate) fn mark_failure(
    store: &dyn Store,
    profile_id: &str,
    provider: &str,
    failure: &Failure<'_>,
    policy: &CooldownPolicy,
    now_ms: u64,
) -> Result<FailureEffect, StoreError> {
    store.update_state(|s| record_failure(s, profile_id, provider, failure, policy, now_ms))
}

/// [`record_success`] as one locked update of the store (tests).
#[cfg(test)]
pub(crate) fn mark_success(
    store: &dyn Store,
    profile_id: &str,
    provider: &str,
    model: Option<&str>,
    now_ms: u64,
) -> Result<(), StoreError> {
    store.update_state(|s| record_success(s, profile_id, provider, model, now_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bad input: a configured profile id without a provider.
    #[test]
    fn profile_without_provider_is_refused() {
        let e = ProfileMeta::from_id("lonely").unwrap_err().to_string();
        assert_eq!(
            e,
            "auth profile `lonely` has no provider: set `provider` or name it `provider:name`"
        );
        let meta = ProfileMeta::new("x", " ");
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
