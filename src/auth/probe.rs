//! Cooldown probes: when a blocked provider may be tried anyway (SPEC
//! R16.1–R16.3).
//!
//! A provider whose every profile is cooling is not skipped forever: the
//! primary candidate is *probed* when its soonest expiry is near, so a
//! recovered provider is noticed without waiting for the full window. Two
//! brakes keep probes cheap. The window opens two minutes before the
//! soonest expiry (or at once when the expiry is unknown), and probes of
//! one (agent, provider) are at least 30 s apart. A billing-disabled
//! primary is probed only when it is the only candidate or inside that
//! window. A probe that fails with a reason declared `probe free` (the
//! model does not exist, the payload is malformed, the key is rejected)
//! says nothing about the cooldown, so it does not use up the provider's
//! one transient-probe slot of the run.
//!
//! Worked example: soonest expiry 12:10:00. At 12:07:59 no probe; at
//! 12:08:00 the window opens and [`ProbeThrottle::try_acquire`] grants one;
//! a second request at 12:08:20 is refused; at 12:08:30 it is granted.

use std::collections::HashMap;

use crate::compile::reasons::ReasonBehaviour;
use crate::store::DAY_MS;

/// A probe is due this long before the soonest expiry (R16.1): close
/// enough that it will probably succeed, early enough that recovery does
/// not wait for the next full window.
pub(crate) const PROBE_MARGIN_MS: u64 = 2 * 60_000;
/// Probes of one (agent, provider) are at least this far apart (R16.1).
pub(crate) const PROBE_THROTTLE_MS: u64 = 30_000;
/// The throttle remembers this many keys; the oldest is forgotten first
/// (REFERENCE e), so a gateway with many agents stays bounded.
pub(crate) const PROBE_THROTTLE_KEYS: usize = 256;
/// Throttle entries older than this are forgotten (REFERENCE e).
pub(crate) const PROBE_THROTTLE_TTL_MS: u64 = DAY_MS;

/// R16.1: the probe window is open when `now >= soonest − 2 min`, or when
/// the soonest expiry is unknown.
pub(crate) fn probe_window_open(soonest_expiry: Option<u64>, now_ms: u64) -> bool {
    soonest_expiry.is_none_or(|s| now_ms >= s.saturating_sub(PROBE_MARGIN_MS))
}

/// R16.2: a disabled (billing) primary may be probed only when it is the
/// only candidate, or inside the probe window.
pub(crate) fn disabled_probe_allowed(
    only_candidate: bool,
    soonest_expiry: Option<u64>,
    now_ms: u64,
) -> bool {
    only_candidate || probe_window_open(soonest_expiry, now_ms)
}

/// R16.3: whether a probe that failed with this reason uses up the
/// provider's one transient-probe slot for the run.
pub(crate) fn probe_uses_transient_slot(failure: &ReasonBehaviour) -> bool {
    !failure.probe_free
}

/// The per-(agent, provider) probe throttle (R16.1). In memory, like the
/// original: a restart may probe once more, which is harmless.
#[derive(Clone, Debug, Default)]
pub(crate) struct ProbeThrottle {
    last: HashMap<String, u64>,
}

impl ProbeThrottle {
    #[cfg(test)]
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Grants a probe of `provider` for `agent` at `now_ms` when none was
    /// granted in the last [`PROBE_THROTTLE_MS`], and records it.
    pub(crate) fn try_acquire(&mut self, agent: &str, provider: &str, now_ms: u64) -> bool {
        let key = format!("{agent}::{}", crate::store::normalize_provider(provider));
        if let Some(&t) = self.last.get(&key) {
            if now_ms.saturating_sub(t) < PROBE_THROTTLE_MS {
                return false;
            }
        }
        self.last
            .retain(|_, t| now_ms.saturating_sub(*t) < PROBE_THROTTLE_TTL_MS);
        if self.last.len() >= PROBE_THROTTLE_KEYS && !self.last.contains_key(&key) {
            if let Some(oldest) = self
                .last
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone())
            {
                self.last.remove(&oldest);
            }
        }
        self.last.insert(key, now_ms);
        true
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.last.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_767_225_600_000;

    // R16.1: the window opens 2 min before the soonest expiry.
    #[test]
    fn r16_1_probe_window() {
        let soonest = T + 10 * 60_000;
        assert!(!probe_window_open(
            Some(soonest),
            soonest - PROBE_MARGIN_MS - 1
        ));
        assert!(probe_window_open(Some(soonest), soonest - PROBE_MARGIN_MS));
        assert!(probe_window_open(None, T));
    }

    // R16.1: one probe per 30 s per (agent, provider): the worked example.
    #[test]
    fn r16_1_throttle() {
        let mut t = ProbeThrottle::new();
        assert!(t.try_acquire("main", "openai", T));
        assert!(!t.try_acquire("main", "OpenAI", T + 20_000));
        assert!(
            t.try_acquire("main", "anthropic", T + 20_000),
            "per provider"
        );
        assert!(t.try_acquire("ops", "openai", T + 20_000), "per agent");
        assert!(t.try_acquire("main", "openai", T + 30_000));
    }

    #[test]
    fn throttle_is_bounded() {
        let mut t = ProbeThrottle::new();
        for i in 0..(PROBE_THROTTLE_KEYS as u64 + 10) {
            assert!(t.try_acquire("main", &format!("p{i}"), T + i));
        }
        assert_eq!(t.len(), PROBE_THROTTLE_KEYS);
        // The oldest keys were forgotten, so they may probe again at once.
        assert!(t.try_acquire("main", "p0", T + 300));
        // Entries older than a day are dropped.
        t.try_acquire("main", "late", T + DAY_MS + 1000);
        assert_eq!(t.len(), 1);
        // A day old exactly counts as older than a day (REFERENCE e).
        let mut t = ProbeThrottle::new();
        t.try_acquire("main", "a", T);
        t.try_acquire("main", "b", T + DAY_MS);
        assert_eq!(t.len(), 1);
    }

    // R16.2: a disabled primary is probed only alone or near expiry.
    #[test]
    fn r16_2_disabled_primary() {
        let soonest = T + 5 * 3_600_000;
        assert!(!disabled_probe_allowed(false, Some(soonest), T));
        assert!(disabled_probe_allowed(true, Some(soonest), T));
        assert!(disabled_probe_allowed(
            false,
            Some(soonest),
            soonest - PROBE_MARGIN_MS
        ));
    }

    // R16.3: `probe free` reasons keep the transient-probe slot.
    #[test]
    fn r16_3_probe_free_keeps_slot() {
        let free = ReasonBehaviour {
            probe_free: true,
            ..Default::default()
        };
        assert!(!probe_uses_transient_slot(&free));
        assert!(probe_uses_transient_slot(&ReasonBehaviour::default()));
    }
}
