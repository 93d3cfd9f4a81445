//! `auth.cooldowns` as one value: how long a disable lasts, when failure
//! counters reset, how many profile rotations a provider gets (SPEC R8.4,
//! R8.5, R16.4, R16.6).
//!
//! [`CooldownPolicy`] is built, not filled in: [`CooldownPolicy::new`] (or
//! `Default`) gives the SPEC defaults, stated once in the `DEFAULT_*`
//! constants below, and each `with_*` method replaces one setting. Every
//! length is a [`Duration`], so a negative or NaN length cannot be written;
//! a configuration that counts in (possibly fractional) hours or minutes
//! converts with [`CooldownPolicy::hours`] / [`CooldownPolicy::minutes`],
//! which refuse what is not a length. The config file's reader
//! ([`crate::config`]) builds this value directly, so a bad value is a
//! config problem with its line and column, never a policy that fails
//! later.
//!
//! The arithmetic works in whole milliseconds, the unit of every persisted
//! time (`disabledUntil`, `cooldownUntil`): a length is cut to whole
//! milliseconds, and an hours or minutes figure is rounded to the nearest
//! millisecond, as the original system does.
//!
//! ```
//! use std::time::Duration;
//! use failover::CooldownPolicy;
//!
//! let p = CooldownPolicy::new()
//!     .with_billing_backoff(CooldownPolicy::hours(2.5).unwrap())
//!     .with_billing_backoff_for("openrouter", Duration::from_secs(3600));
//! assert_eq!(p.billing_backoff_for("OpenRouter"), Duration::from_secs(3600));
//! assert_eq!(p.billing_backoff_for("openai"), Duration::from_secs(9000));
//! assert!(CooldownPolicy::hours(-1.0).is_err());
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use crate::compile::reasons::{DisableLane, RotationBudget};
use crate::store::{normalize_provider, HOUR_MS, MINUTE_MS};

/// Billing disables start at 5 h (R8.4).
pub(crate) const DEFAULT_BILLING_BACKOFF: Duration = Duration::from_secs(5 * 3600);
/// Billing disables stop doubling at 24 h (R8.4).
pub(crate) const DEFAULT_BILLING_MAX: Duration = Duration::from_secs(24 * 3600);
/// Failure counters reset after 24 h without a failure (R16.6).
pub(crate) const DEFAULT_FAILURE_WINDOW: Duration = Duration::from_secs(24 * 3600);
/// `auth_permanent` disables start at 10 min (R16.4).
pub(crate) const DEFAULT_AUTH_PERMANENT_BACKOFF: Duration = Duration::from_secs(10 * 60);
/// `auth_permanent` disables stop doubling at 60 min (R16.4).
pub(crate) const DEFAULT_AUTH_PERMANENT_MAX: Duration = Duration::from_secs(60 * 60);
/// A provider's own reset time (`Retry-After`, R6.7) cools a profile for
/// at most a day (`providerResetMaxHours`, issue 30).
pub(crate) const DEFAULT_PROVIDER_RESET_MAX: Duration = Duration::from_secs(24 * 3600);
/// One extra profile per provider for an overloaded reason (R8.5).
pub(crate) const DEFAULT_OVERLOADED_PROFILE_ROTATIONS: u32 = 1;
/// No pause before an overloaded rotation (R8.5).
pub(crate) const DEFAULT_OVERLOADED_BACKOFF: Duration = Duration::ZERO;
/// One extra profile per provider for a rate-limited reason (R8.5).
pub(crate) const DEFAULT_RATE_LIMITED_PROFILE_ROTATIONS: u32 = 1;

/// A length given in hours or minutes that is not a length.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    /// NaN, infinite or negative.
    #[error("expected a non-negative number of {unit}, found {amount}")]
    NotALength {
        /// The figure as given.
        amount: f64,
        /// `hours` or `minutes`.
        unit: &'static str,
    },
}

/// `auth.cooldowns` (R8.4, R8.5, R16.4, R16.6); see the module
/// documentation. Valid by construction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CooldownPolicy {
    billing_backoff: Duration,
    /// Normalised provider id → base billing backoff.
    billing_backoff_by_provider: BTreeMap<String, Duration>,
    billing_max: Duration,
    failure_window: Duration,
    auth_permanent_backoff: Duration,
    auth_permanent_max: Duration,
    provider_reset_max: Duration,
    overloaded_profile_rotations: u32,
    overloaded_backoff: Duration,
    rate_limited_profile_rotations: u32,
}

impl Default for CooldownPolicy {
    fn default() -> Self {
        Self::new()
    }
}

/// Whole milliseconds, saturating (a 1e16-hour backoff disables for ever).
fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn amount(amount: f64, unit_ms: u64, unit: &'static str) -> Result<Duration, PolicyError> {
    if !amount.is_finite() || amount < 0.0 {
        return Err(PolicyError::NotALength { amount, unit });
    }
    // Rounded to the millisecond as the original system does; a float
    // cast saturates, so a huge figure is the longest length.
    Ok(Duration::from_millis(
        (amount * unit_ms as f64).round() as u64
    ))
}

impl CooldownPolicy {
    /// The SPEC defaults.
    pub const fn new() -> Self {
        CooldownPolicy {
            billing_backoff: DEFAULT_BILLING_BACKOFF,
            billing_backoff_by_provider: BTreeMap::new(),
            billing_max: DEFAULT_BILLING_MAX,
            failure_window: DEFAULT_FAILURE_WINDOW,
            auth_permanent_backoff: DEFAULT_AUTH_PERMANENT_BACKOFF,
            auth_permanent_max: DEFAULT_AUTH_PERMANENT_MAX,
            provider_reset_max: DEFAULT_PROVIDER_RESET_MAX,
            overloaded_profile_rotations: DEFAULT_OVERLOADED_PROFILE_ROTATIONS,
            overloaded_backoff: DEFAULT_OVERLOADED_BACKOFF,
            rate_limited_profile_rotations: DEFAULT_RATE_LIMITED_PROFILE_ROTATIONS,
        }
    }

    /// `amount` hours (fractions allowed), rounded to the millisecond.
    pub fn hours(amount: f64) -> Result<Duration, PolicyError> {
        self::amount(amount, HOUR_MS, "hours")
    }

    /// `amount` minutes (fractions allowed), rounded to the millisecond.
    pub fn minutes(amount: f64) -> Result<Duration, PolicyError> {
        self::amount(amount, MINUTE_MS, "minutes")
    }

    /// `billingBackoffHours`: the first billing disable.
    pub fn with_billing_backoff(mut self, d: Duration) -> Self {
        self.billing_backoff = d;
        self
    }

    /// `billingBackoffHoursByProvider.<provider>`: the first billing
    /// disable for one provider (ids compared after normalisation).
    pub fn with_billing_backoff_for(mut self, provider: impl Into<String>, d: Duration) -> Self {
        self.billing_backoff_by_provider.insert(provider.into(), d);
        self
    }

    /// `billingMaxHours`: billing disables stop doubling here.
    pub fn with_billing_max(mut self, d: Duration) -> Self {
        self.billing_max = d;
        self
    }

    /// `failureWindowHours`: counters reset after this long without a
    /// failure (R16.6).
    pub fn with_failure_window(mut self, d: Duration) -> Self {
        self.failure_window = d;
        self
    }

    /// `authPermanentBackoffMinutes`: the first `auth_permanent` disable.
    pub fn with_auth_permanent_backoff(mut self, d: Duration) -> Self {
        self.auth_permanent_backoff = d;
        self
    }

    /// `providerResetMaxHours`: the longest cooldown a provider's own
    /// reset time (`Retry-After`, R6.7) may set; see
    /// [`CooldownPolicy::provider_reset_cap`].
    pub fn with_provider_reset_max(mut self, d: Duration) -> Self {
        self.provider_reset_max = d;
        self
    }

    /// `authPermanentMaxMinutes`: `auth_permanent` disables stop doubling
    /// here.
    pub fn with_auth_permanent_max(mut self, d: Duration) -> Self {
        self.auth_permanent_max = d;
        self
    }

    /// `overloadedProfileRotations` (R8.5).
    pub fn with_overloaded_profile_rotations(mut self, n: u32) -> Self {
        self.overloaded_profile_rotations = n;
        self
    }

    /// `overloadedBackoffMs`: the pause before an overloaded rotation.
    pub fn with_overloaded_backoff(mut self, d: Duration) -> Self {
        self.overloaded_backoff = d;
        self
    }

    /// `rateLimitedProfileRotations` (R8.5).
    pub fn with_rate_limited_profile_rotations(mut self, n: u32) -> Self {
        self.rate_limited_profile_rotations = n;
        self
    }

    /// The first billing disable for `provider` (its own setting, else
    /// the general one).
    pub fn billing_backoff_for(&self, provider: &str) -> Duration {
        let want = normalize_provider(provider);
        self.billing_backoff_by_provider
            .iter()
            .find(|(k, _)| normalize_provider(k) == want)
            .map_or(self.billing_backoff, |(_, d)| *d)
    }

    /// `billingBackoffHours`.
    pub fn billing_backoff(&self) -> Duration {
        self.billing_backoff
    }

    /// `billingBackoffHoursByProvider`, by provider id.
    pub fn billing_backoff_by_provider(&self) -> impl Iterator<Item = (&str, Duration)> {
        self.billing_backoff_by_provider
            .iter()
            .map(|(k, d)| (k.as_str(), *d))
    }

    /// `billingMaxHours`.
    pub fn billing_max(&self) -> Duration {
        self.billing_max
    }

    /// `failureWindowHours`.
    pub fn failure_window(&self) -> Duration {
        self.failure_window
    }

    /// `authPermanentBackoffMinutes`.
    pub fn auth_permanent_backoff(&self) -> Duration {
        self.auth_permanent_backoff
    }

    /// `authPermanentMaxMinutes`.
    pub fn auth_permanent_max(&self) -> Duration {
        self.auth_permanent_max
    }

    /// `providerResetMaxHours`.
    pub fn provider_reset_max(&self) -> Duration {
        self.provider_reset_max
    }

    /// How long the `n`-th failure (1-based, within the failure window) on
    /// `lane` disables a profile of `provider`: the base doubled per
    /// failure, capped (or the base, when the cap is lower), never under
    /// a minute (REFERENCE c).
    pub fn disable_for(&self, lane: DisableLane, provider: &str, n: u32) -> Duration {
        Duration::from_millis(self.disable_ms(lane, provider, n))
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
    pub fn rotation_backoff(&self, budget: RotationBudget) -> Duration {
        match budget {
            RotationBudget::Overloaded => self.overloaded_backoff,
            RotationBudget::RateLimited => Duration::ZERO,
        }
    }

    pub(crate) fn failure_window_ms(&self) -> u64 {
        ms(self.failure_window)
    }

    pub(crate) fn disable_ms(&self, lane: DisableLane, provider: &str, n: u32) -> u64 {
        let (base, max) = match lane {
            DisableLane::Billing => (self.billing_backoff_for(provider), self.billing_max),
            DisableLane::AuthPermanent => (self.auth_permanent_backoff, self.auth_permanent_max),
        };
        super::cooldown::lane_ms(ms(base), ms(max), n)
    }

    /// The longest window a provider's own reset time (`Retry-After`,
    /// R6.7) may set for a failure on `lane` (`None`: a cooldown): a
    /// disable lasts at most its lane's cap (`billingMaxHours`,
    /// `authPermanentMaxMinutes`), a cooldown at most
    /// `providerResetMaxHours` (24 h by default: a weekly window of R6.7 is
    /// then learnt again once a day, by one attempt that rotates on at
    /// once). A provider cannot lock a profile out for longer than the
    /// operator's own policy would.
    pub fn provider_reset_cap(&self, lane: Option<DisableLane>, provider: &str) -> Duration {
        Duration::from_millis(self.provider_reset_cap_ms(lane, provider))
    }

    pub(crate) fn provider_reset_cap_ms(&self, lane: Option<DisableLane>, provider: &str) -> u64 {
        match lane {
            Some(lane) => self.disable_ms(lane, provider, u32::MAX),
            None => ms(self.provider_reset_max),
        }
    }

    pub(crate) fn rotation_backoff_ms(&self, budget: RotationBudget) -> u64 {
        ms(self.rotation_backoff(budget))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::cooldown::DISABLE_FLOOR_MS;

    // R6.7: a provider's own reset time is capped by the operator's
    // policy for the lane (a disable's cap) or for cooldowns (24 h).
    #[test]
    fn r6_7_provider_reset_caps_by_lane() {
        let p = CooldownPolicy::default();
        let h = |n: u64| Duration::from_secs(n * 3600);
        assert_eq!(p.provider_reset_cap(None, "openai"), h(24));
        assert_eq!(
            p.provider_reset_cap(Some(DisableLane::Billing), "openai"),
            h(24)
        );
        assert_eq!(
            p.provider_reset_cap(Some(DisableLane::AuthPermanent), "openai"),
            h(1)
        );
        let weekly = p.with_provider_reset_max(h(7 * 24));
        assert_eq!(weekly.provider_reset_cap(None, "openai"), h(7 * 24));
    }

    #[test]
    fn r8_4_r8_5_defaults() {
        let p = CooldownPolicy::default();
        assert_eq!(p.disable_ms(DisableLane::Billing, "x", 1), 5 * HOUR_MS);
        assert_eq!(p.disable_ms(DisableLane::Billing, "x", 9), 24 * HOUR_MS);
        assert_eq!(
            p.disable_ms(DisableLane::AuthPermanent, "x", 1),
            10 * MINUTE_MS
        );
        assert_eq!(
            p.disable_for(DisableLane::AuthPermanent, "x", 2),
            Duration::from_secs(20 * 60)
        );
        assert_eq!(p.failure_window_ms(), 24 * HOUR_MS);
        assert_eq!(p.rotations(RotationBudget::Overloaded), 1);
        assert_eq!(p.rotations(RotationBudget::RateLimited), 1);
        assert_eq!(p.rotation_backoff_ms(RotationBudget::Overloaded), 0);
    }

    // Bad input: a figure that is not a length is refused, with its unit.
    #[test]
    fn not_a_length_is_refused() {
        for bad in [f64::NAN, f64::INFINITY, -0.5] {
            assert!(CooldownPolicy::hours(bad).is_err(), "{bad}");
        }
        assert_eq!(
            CooldownPolicy::minutes(-2.0).unwrap_err().to_string(),
            "expected a non-negative number of minutes, found -2"
        );
        assert_eq!(CooldownPolicy::hours(0.0), Ok(Duration::ZERO));
    }

    // Hours round to the nearest millisecond, as `(h · 3.6e6).round()`.
    #[test]
    fn fractional_hours_round_to_the_millisecond() {
        let h = 1.0 / 3.0;
        assert_eq!(
            CooldownPolicy::hours(h).unwrap(),
            Duration::from_millis((h * HOUR_MS as f64).round() as u64)
        );
        assert_eq!(
            CooldownPolicy::hours(1e16).unwrap(),
            Duration::from_millis(u64::MAX)
        );
    }

    #[test]
    fn zero_base_is_floored() {
        let p = CooldownPolicy::new().with_billing_backoff(Duration::ZERO);
        assert_eq!(p.disable_ms(DisableLane::Billing, "x", 1), DISABLE_FLOOR_MS);
    }

    // R8.4: the per-provider base, keys compared after normalisation.
    #[test]
    fn r8_4_billing_base_per_provider() {
        let p = CooldownPolicy::new().with_billing_backoff_for("OpenAI", Duration::from_secs(60));
        assert_eq!(p.billing_backoff_for("openai"), Duration::from_secs(60));
        assert_eq!(p.billing_backoff_for("anthropic"), DEFAULT_BILLING_BACKOFF);
        assert_eq!(p.billing_backoff_by_provider().count(), 1);
    }
}
