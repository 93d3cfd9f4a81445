//! Cooldown and disable arithmetic (SPEC R7.3, R7.4, R8.1, R8.4, R16.4–R16.6,
//! R6.7).
//!
//! A profile can be blocked three ways, recorded in its [`UsageStats`]:
//!
//! * a **model window** (`modelCooldowns.<model>`, R7.3), for reasons
//!   declared `cooldown; scope model` when the failing model is known: that
//!   model only, with its own count and step, so a sibling model of the
//!   same profile runs as an ordinary attempt;
//! * a **profile-wide cooldown** (`cooldownUntil` without `cooldownModel`)
//!   for every other reason declared `cooldown`. Both last
//!   `min(1 h, 60 s · 5^min(n−1, 3))` where `n` is the model's or the
//!   profile's error count: 1 min, 5 min, 25 min, then 1 h;
//! * a **disable** (`disabledUntil`, `disabledReason`), for reasons declared
//!   `disable LANE`: the billing lane starts at 5 h (per provider
//!   overridable) and the auth_permanent lane at 10 min; both double per
//!   failure of that reason and stop at their cap (24 h, 60 min). A disable
//!   blocks every model.
//!
//! Three rules keep the windows honest. An active window is never extended
//! by a failure inside it (R16.5) — a retry storm must not push recovery
//! further away — but it records a stronger reason, and a failed probe
//! (the window's own, throttled test) starts its next step. Counters reset
//! only after `failureWindowHours` without a failure (R16.6), or on a
//! success, which clears the profile-wide record and the window of the
//! model that answered, never a sibling's. An exact reset time reported by
//! the provider replaces the computed length of a new window (R6.7).
//!
//! Which reason does what is never decided here by name: the caller passes
//! the reason's declared [`ReasonBehaviour`].
//!
//! Worked example (default policy, reason `rate_limit` declared
//! `cooldown; scope model`), times in minutes from 0; `cooldownModel` and
//! `cooldownUntil` copy the model window that ends last, for the original's
//! readers:
//!
//! | t  | event                       | gpt-5 window | gpt-5-mini window | errorCount | cooldownModel |
//! |----|-----------------------------|-------------:|------------------:|-----------:|---------------|
//! | 0  | `gpt-5` rate-limited        | 1 (n=1)      |                   | 1          | `gpt-5`       |
//! | 0.5| `gpt-5-mini` rate-limited   | 1            | 1.5 (n=1)         | 2          | `gpt-5-mini`  |
//! | 0.6| `o3` answers                | 1            | 1.5               | 0          | `gpt-5-mini`  |
//! | 2  | `gpt-5` rate-limited again  | 7 (n=2)      | —                 | 1          | `gpt-5`       |

use crate::compile::reasons::ReasonBehaviour;
use crate::store::{AuthState, UsageStats, HOUR_MS, MINUTE_MS};

use super::CooldownPolicy;

/// The first cooldown step: one minute (R7.4).
pub(crate) const COOLDOWN_BASE_MS: u64 = MINUTE_MS;
/// Each further error multiplies the cooldown by five (R7.4).
pub(crate) const COOLDOWN_FACTOR: u64 = 5;
/// Cooldowns stop growing at one hour (R7.4).
pub(crate) const COOLDOWN_CAP_MS: u64 = HOUR_MS;
/// No disable window is shorter than a minute, whatever the config says
/// (REFERENCE c), so a zero base cannot make a disable meaningless.
pub(crate) const DISABLE_FLOOR_MS: u64 = MINUTE_MS;

/// The cooldown length after the `error_count`-th error (1-based).
pub(crate) fn cooldown_ms(error_count: u32) -> u64 {
    let steps = error_count.saturating_sub(1).min(3);
    (COOLDOWN_BASE_MS * COOLDOWN_FACTOR.pow(steps)).min(COOLDOWN_CAP_MS)
}

/// What blocks a profile for a model right now: a profile is cooling or
/// disabled, nothing else (a closed set).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Block {
    /// A cooldown (`cooldownUntil`, R7.3, R7.4) is active.
    Cooling {
        /// When the cooldown ends (epoch ms).
        until: u64,
        /// `Some` when only this model is blocked.
        model: Option<String>,
        /// The reason that started the cooldown (`cooldownReason`), when recorded.
        reason: Option<String>,
    },
    /// A disable (`disabledUntil`, R8.1, R16.4) is active; it blocks every model.
    Disabled {
        /// When the profile becomes usable again (epoch ms): the later of the
        /// disable and any cooldown active with it.
        until: u64,
        /// The recorded `disabledReason`, e.g. `billing`.
        reason: Option<String>,
    },
}

impl Block {
    /// When the profile becomes usable again (for the model asked about).
    pub fn until(&self) -> u64 {
        match self {
            Block::Cooling { until, .. } | Block::Disabled { until, .. } => *until,
        }
    }

    /// The failover reason recorded for the block, when known.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Block::Cooling { reason, .. } | Block::Disabled { reason, .. } => reason.as_deref(),
        }
    }
}

/// What blocks `stats` for `model` at `now_ms` (`None`: usable): a
/// disable, the profile-wide cooldown, or the model's own window (R7.3);
/// another model's window never blocks. With `model` unknown, any model
/// window blocks (the safe answer), the one that ends last standing for
/// them. When several are active the later expiry counts.
pub fn block_for(stats: &UsageStats, model: Option<&str>, now_ms: u64) -> Option<Block> {
    let profile = stats
        .profile_cooldown()
        .filter(|(until, _)| *until > now_ms);
    let own = match model {
        Some(m) => stats.model_window(m),
        None => stats.model_windows().max_by_key(|w| w.until),
    }
    .filter(|w| w.until > now_ms);
    let profile_wide = |(until, reason): (u64, Option<&str>)| Block::Cooling {
        until,
        model: None,
        reason: reason.map(str::to_string),
    };
    let cooling = match (profile, own) {
        (Some(p), Some(w)) if w.until <= p.0 => Some(profile_wide(p)),
        (Some(p), None) => Some(profile_wide(p)),
        (_, Some(w)) => Some(Block::Cooling {
            until: w.until,
            model: Some(w.model.to_string()),
            reason: w.reason.map(str::to_string),
        }),
        (None, None) => None,
    };
    let cooling = cooling.map(|c| match c {
        // D4: a window without a recorded reason takes the reason the
        // profile failed with most (`failureCounts`), as the original does.
        Block::Cooling {
            until,
            model,
            reason: None,
        } => Block::Cooling {
            until,
            model,
            reason: most_counted(stats),
        },
        other => other,
    });
    let disabled = stats.disabled_until.filter(|u| *u > now_ms);
    match (disabled, cooling) {
        (Some(d), c) => Some(Block::Disabled {
            until: d.max(c.map_or(0, |c| c.until())),
            reason: stats.disabled_reason.clone(),
        }),
        (None, c) => c,
    }
}

/// The reason counted most in `failureCounts` (ties: the first by name),
/// when any is.
fn most_counted(stats: &UsageStats) -> Option<String> {
    let mut best: Option<(&String, u32)> = None;
    for (r, n) in &stats.failure_counts {
        if *n > 0 && best.is_none_or(|(_, b)| *n > b) {
            best = Some((r, *n));
        }
    }
    best.map(|(r, _)| r.clone())
}

#[cfg(test)]
/// Whether `profile_id` may be tried for `model` at `now_ms`.
pub(crate) fn is_available(
    state: &AuthState,
    profile_id: &str,
    model: Option<&str>,
    now_ms: u64,
) -> bool {
    state
        .stats(profile_id)
        .is_none_or(|s| block_for(s, model, now_ms).is_none())
}

#[cfg(test)]
/// The soonest moment one of `profile_ids` becomes usable for `model`, or
/// `None` when one is usable now or nothing is known. Cooldowns scoped to
/// other models are ignored (R14.4).
pub(crate) fn soonest_expiry<'a>(
    state: &AuthState,
    profile_ids: impl IntoIterator<Item = &'a str>,
    model: Option<&str>,
    now_ms: u64,
) -> Option<u64> {
    let mut soonest: Option<u64> = None;
    for id in profile_ids {
        match state.stats(id).and_then(|s| block_for(s, model, now_ms)) {
            None => return None,
            Some(b) => soonest = Some(soonest.map_or(b.until(), |s| s.min(b.until()))),
        }
    }
    soonest
}

/// One failed attempt, as the executor knows it.
#[derive(Clone, Copy)]
pub(crate) struct Failure<'a> {
    /// The reason's name (written to `cooldownReason` / `disabledReason`
    /// and counted in `failureCounts`).
    pub reason: &'a str,
    /// The reason's declared behaviour: decides cooldown, disable, scope.
    pub behaviour: &'a ReasonBehaviour,
    /// The model that failed, when known.
    pub model: Option<&'a str>,
    /// An exact reset time the provider reported (R6.7), epoch ms.
    pub reset_at: Option<u64>,
    /// The attempt was a cooldown probe (R10, R16.1): its failure starts
    /// the window's next step from now instead of keeping the window (R16.5).
    pub probe: bool,
    /// Whether this failure's reason outranks a recorded reason (by name):
    /// a window kept by R16.5 then records the stronger reason (an `auth`
    /// failure inside a `rate_limit` cooldown, R16.5). `None`: never.
    pub outranks: Option<&'a (dyn Fn(&str) -> bool + Sync)>,
}

impl Failure<'_> {
    fn outranks(&self, recorded: Option<&str>) -> bool {
        match (self.outranks, recorded) {
            (Some(f), Some(r)) => f(r),
            _ => false,
        }
    }
}

/// What [`record_failure`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum FailureEffect {
    /// The reason neither cools down nor disables: nothing recorded.
    Ignored,
    /// A new window started.
    Started(Block),
    /// A window was already active and was kept (R16.5).
    Kept { block: Block },
}

/// Records a failure of `profile_id` (of `provider`) at `now_ms`.
///
/// A reason declared `scope model` with the model known cools that model
/// only (`modelCooldowns`, R7.3): its own window, count and step (R7.4).
/// Every other cooldown is profile-wide, every disable too. Either way the
/// profile's `errorCount` and `failureCounts` count the failure.
pub(crate) fn record_failure(
    state: &mut AuthState,
    profile_id: &str,
    provider: &str,
    failure: &Failure<'_>,
    policy: &CooldownPolicy,
    now_ms: u64,
) -> FailureEffect {
    let b = failure.behaviour;
    if !b.cooldown && b.disable.is_none() {
        return FailureEffect::Ignored;
    }
    let window_ms = policy.failure_window_ms();
    let s = state.stats_mut(profile_id);
    s.migrate_model_window();
    // R16.6: counters reset only after a quiet failure window.
    if let Some(last) = s.last_failure_at {
        if now_ms.saturating_sub(last) > window_ms {
            s.error_count = 0;
            s.failure_counts.clear();
        }
    }
    s.error_count = s.error_count.saturating_add(1);
    let n_reason = {
        let c = s
            .failure_counts
            .entry(failure.reason.to_string())
            .or_insert(0);
        *c = c.saturating_add(1);
        *c
    };
    s.last_failure_at = Some(now_ms);
    // R6.7: the provider's own reset time, capped by the operator's policy
    // for this reason (a `Retry-After` of 30 years is the provider's
    // wish, not the operator's).
    let exact = failure
        .reset_at
        .filter(|r| *r > now_ms)
        .map(|r| r.min(now_ms.saturating_add(policy.provider_reset_cap_ms(b.disable, provider))));

    let effect = if let Some(lane) = b.disable {
        if let Some(until) = s.disabled_until.filter(|u| *u > now_ms) {
            if failure.outranks(s.disabled_reason.as_deref()) {
                s.disabled_reason = Some(failure.reason.to_string());
            }
            FailureEffect::Kept {
                block: Block::Disabled {
                    until,
                    reason: s.disabled_reason.clone(),
                },
            }
        } else {
            // Saturating: a configured backoff of 1e16 hours must disable
            // for ever, not wrap around to "already over".
            let until =
                exact.unwrap_or(now_ms.saturating_add(policy.disable_ms(lane, provider, n_reason)));
            s.disabled_until = Some(until);
            s.disabled_reason = Some(failure.reason.to_string());
            FailureEffect::Started(Block::Disabled {
                until,
                reason: s.disabled_reason.clone(),
            })
        }
    } else if let Some(m) = failure.model.filter(|_| b.model_scoped) {
        let w = s.model_cooldowns.entry(m.to_string()).or_default();
        if w.last_failure_at
            .is_some_and(|last| now_ms.saturating_sub(last) > window_ms)
        {
            w.error_count = 0;
        }
        w.error_count = w.error_count.saturating_add(1);
        w.last_failure_at = Some(now_ms);
        match w.cooldown_until.filter(|u| *u > now_ms && !failure.probe) {
            Some(until) => {
                if failure.outranks(w.cooldown_reason.as_deref()) {
                    w.cooldown_reason = Some(failure.reason.to_string());
                }
                FailureEffect::Kept {
                    block: Block::Cooling {
                        until,
                        model: Some(m.to_string()),
                        reason: w.cooldown_reason.clone(),
                    },
                }
            }
            None => {
                let until = exact.unwrap_or(now_ms.saturating_add(cooldown_ms(w.error_count)));
                w.cooldown_until = Some(until);
                w.cooldown_reason = Some(failure.reason.to_string());
                FailureEffect::Started(Block::Cooling {
                    until,
                    model: Some(m.to_string()),
                    reason: w.cooldown_reason.clone(),
                })
            }
        }
    } else {
        let active = s
            .profile_cooldown()
            .map(|(u, _)| u)
            .filter(|u| *u > now_ms && !failure.probe);
        match active {
            Some(until) => {
                if failure.outranks(s.cooldown_reason.as_deref()) {
                    s.cooldown_reason = Some(failure.reason.to_string());
                }
                FailureEffect::Kept {
                    block: Block::Cooling {
                        until,
                        model: None,
                        reason: s.cooldown_reason.clone(),
                    },
                }
            }
            None => {
                let until = exact.unwrap_or(now_ms.saturating_add(cooldown_ms(s.error_count)));
                s.cooldown_until = Some(until);
                s.cooldown_reason = Some(failure.reason.to_string());
                s.cooldown_model = None;
                FailureEffect::Started(Block::Cooling {
                    until,
                    model: None,
                    reason: s.cooldown_reason.clone(),
                })
            }
        }
    };
    s.prune_model_windows(now_ms, window_ms);
    s.mirror_model_windows(now_ms);
    effect
}

/// Records a success of `profile_id` with `model` at `now_ms`: the profile
/// is marked used (round-robin, R6.2) and good for its provider, its
/// profile-wide record is cleared (counts, cooldown, disable) and so is the
/// window of the model that answered — never another model's window, which
/// a sibling's success says nothing about (R7.3). A success of an unknown
/// model clears every window.
pub(crate) fn record_success(
    state: &mut AuthState,
    profile_id: &str,
    provider: &str,
    model: Option<&str>,
    now_ms: u64,
) {
    state.last_good.insert(
        crate::store::normalize_provider(provider),
        profile_id.into(),
    );
    let s = state.stats_mut(profile_id);
    s.last_used = Some(now_ms);
    s.migrate_model_window();
    match model {
        Some(m) => {
            s.model_cooldowns.remove(m);
        }
        None => s.model_cooldowns.clear(),
    }
    s.error_count = 0;
    s.failure_counts.clear();
    s.cooldown_until = None;
    s.cooldown_reason = None;
    s.cooldown_model = None;
    s.disabled_until = None;
    s.disabled_reason = None;
    s.mirror_model_windows(now_ms);
}

/// `base · 2^(n−1)`, capped at `max` (or `base` when the cap is lower),
/// never below [`DISABLE_FLOOR_MS`].
pub(super) fn lane_ms(base_ms: u64, max_ms: u64, n: u32) -> u64 {
    let doublings = n.saturating_sub(1).min(32);
    base_ms
        .saturating_mul(1u64 << doublings)
        .min(max_ms.max(base_ms))
        .max(DISABLE_FLOOR_MS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::reasons::DisableLane;

    const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    fn rate_limit() -> ReasonBehaviour {
        ReasonBehaviour {
            failover: true,
            cooldown: true,
            transient: true,
            model_scoped: true,
            ..Default::default()
        }
    }

    fn auth() -> ReasonBehaviour {
        ReasonBehaviour {
            failover: true,
            cooldown: true,
            ..Default::default()
        }
    }

    fn lane(l: DisableLane) -> ReasonBehaviour {
        ReasonBehaviour {
            failover: true,
            disable: Some(l),
            ..Default::default()
        }
    }

    fn fail(
        state: &mut AuthState,
        reason: &str,
        b: &ReasonBehaviour,
        model: Option<&str>,
        now: u64,
    ) -> FailureEffect {
        let f = Failure {
            reason,
            behaviour: b,
            model,
            reset_at: None,
            probe: false,
            outranks: None,
        };
        record_failure(
            state,
            "openai:a",
            "openai",
            &f,
            &CooldownPolicy::default(),
            now,
        )
    }

    // R7.4: 1 min, 5 min, 25 min, 1 h cap.
    #[test]
    fn r7_4_exponential_steps() {
        let got: Vec<u64> = (1..=6).map(cooldown_ms).collect();
        let m = MINUTE_MS;
        assert_eq!(got, vec![m, 5 * m, 25 * m, 60 * m, 60 * m, 60 * m]);
        assert_eq!(cooldown_ms(0), m);
    }

    // R7.4 through record_failure: each new window follows the ladder.
    #[test]
    fn r7_4_windows_grow_with_error_count() {
        let mut s = AuthState::default();
        let b = auth();
        let mut now = T0;
        for expect in [1, 5, 25, 60, 60] {
            let e = fail(&mut s, "auth", &b, None, now);
            let FailureEffect::Started(block) = e else {
                panic!("{e:?}")
            };
            assert_eq!(block.until(), now + expect * MINUTE_MS);
            now = block.until(); // the window has just expired
        }
    }

    // R16.5: a failure inside an active window does not extend it.
    #[test]
    fn r16_5_active_cooldown_not_extended() {
        let mut s = AuthState::default();
        let b = auth();
        fail(&mut s, "auth", &b, None, T0);
        let e = fail(&mut s, "auth", &b, None, T0 + 30_000);
        assert!(matches!(e, FailureEffect::Kept { .. }), "{e:?}");
        assert_eq!(
            s.usage_stats["openai:a"].cooldown_until,
            Some(T0 + MINUTE_MS)
        );
        assert_eq!(s.usage_stats["openai:a"].error_count, 2);
    }

    // R7.3: a model-scoped cooldown lets a sibling through; disables block all.
    #[test]
    fn r7_3_model_scoped_cooldown_lets_sibling_through() {
        let mut s = AuthState::default();
        fail(&mut s, "rate_limit", &rate_limit(), Some("gpt-5"), T0);
        let st = &s.usage_stats["openai:a"];
        assert_eq!(st.cooldown_model.as_deref(), Some("gpt-5"));
        assert!(!is_available(&s, "openai:a", Some("gpt-5"), T0 + 1));
        assert!(is_available(&s, "openai:a", Some("gpt-5-mini"), T0 + 1));
        assert!(
            !is_available(&s, "openai:a", None, T0 + 1),
            "unknown model: blocked"
        );
        assert!(is_available(&s, "openai:a", Some("gpt-5"), T0 + MINUTE_MS));

        fail(&mut s, "billing", &lane(DisableLane::Billing), None, T0 + 2);
        assert!(!is_available(&s, "openai:a", Some("gpt-5-mini"), T0 + 3));
    }

    // R7.3 (issue 51): another model failing records its own window, count
    // and step; neither blocks nor escalates the other, and a third model
    // of the profile stays usable (the original widened the first window
    // to the whole profile: openclaw/openclaw #141255, #141257).
    #[test]
    fn r7_3_each_model_has_its_own_window() {
        let mut s = AuthState::default();
        fail(&mut s, "rate_limit", &rate_limit(), Some("gpt-5"), T0);
        let e = fail(
            &mut s,
            "rate_limit",
            &rate_limit(),
            Some("gpt-5-mini"),
            T0 + 30_000,
        );
        assert!(matches!(e, FailureEffect::Started(_)), "{e:?}");
        let st = &s.usage_stats["openai:a"];
        assert_eq!(
            st.model_cooldowns["gpt-5"].cooldown_until,
            Some(T0 + MINUTE_MS)
        );
        assert_eq!(
            st.model_cooldowns["gpt-5-mini"].cooldown_until,
            Some(T0 + 30_000 + MINUTE_MS),
            "its own first step, not the profile's second"
        );
        assert_eq!(st.model_cooldowns["gpt-5-mini"].error_count, 1);
        assert_eq!(st.error_count, 2, "the profile counts both");
        // The original's fields copy the window that ends last.
        assert_eq!(st.cooldown_model.as_deref(), Some("gpt-5-mini"));
        assert_eq!(st.cooldown_until, Some(T0 + 30_000 + MINUTE_MS));
        assert!(is_available(&s, "openai:a", Some("o3"), T0 + 40_000));
        assert!(!is_available(&s, "openai:a", Some("gpt-5"), T0 + 40_000));
        assert!(!is_available(&s, "openai:a", None, T0 + 40_000));
        // gpt-5 expired, gpt-5-mini still cooling.
        assert!(is_available(&s, "openai:a", Some("gpt-5"), T0 + MINUTE_MS));
        assert!(!is_available(
            &s,
            "openai:a",
            Some("gpt-5-mini"),
            T0 + MINUTE_MS
        ));
        // gpt-5 fails again after its window: its own second step (5 min).
        let e = fail(
            &mut s,
            "rate_limit",
            &rate_limit(),
            Some("gpt-5"),
            T0 + MINUTE_MS,
        );
        assert_eq!(
            e,
            FailureEffect::Started(Block::Cooling {
                until: T0 + 6 * MINUTE_MS,
                model: Some("gpt-5".into()),
                reason: Some("rate_limit".into()),
            })
        );
    }

    // R7.3: a success clears the window of the model that answered, and
    // the profile's counters, never a sibling's window.
    #[test]
    fn r7_3_a_success_clears_its_own_model_only() {
        let mut s = AuthState::default();
        fail(&mut s, "rate_limit", &rate_limit(), Some("m1"), T0);
        fail(&mut s, "rate_limit", &rate_limit(), Some("m2"), T0 + 1);
        record_success(&mut s, "openai:a", "openai", Some("m2"), T0 + 2);
        let st = &s.usage_stats["openai:a"];
        assert!(!st.model_cooldowns.contains_key("m2"));
        assert_eq!(
            st.model_cooldowns["m1"].cooldown_until,
            Some(T0 + MINUTE_MS)
        );
        assert_eq!(st.error_count, 0);
        assert_eq!(
            (st.cooldown_model.as_deref(), st.cooldown_until),
            (Some("m1"), Some(T0 + MINUTE_MS)),
            "the original's fields now copy m1's window"
        );
        assert!(!is_available(&s, "openai:a", Some("m1"), T0 + 3));
        record_success(&mut s, "openai:a", "openai", Some("m1"), T0 + 4);
        let st = &s.usage_stats["openai:a"];
        assert!(st.model_cooldowns.is_empty());
        assert_eq!(
            (st.cooldown_model.as_deref(), st.cooldown_until),
            (None, None)
        );
    }

    // R16.5, R16.1: a failed probe restarts the window at the next step
    // from now; an ordinary failure inside the window keeps it.
    #[test]
    fn r16_5_a_failed_probe_steps_the_window_up() {
        let mut s = AuthState::default();
        fail(&mut s, "rate_limit", &rate_limit(), Some("m1"), T0);
        let f = Failure {
            reason: "rate_limit",
            behaviour: &rate_limit(),
            model: Some("m1"),
            reset_at: None,
            probe: true,
            outranks: None,
        };
        let e = record_failure(
            &mut s,
            "openai:a",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0 + 5_000,
        );
        assert_eq!(
            e.clone(),
            FailureEffect::Started(Block::Cooling {
                until: T0 + 5_000 + 5 * MINUTE_MS,
                model: Some("m1".into()),
                reason: Some("rate_limit".into()),
            }),
            "{e:?}"
        );
    }

    // R16.5 (issue 51, D3): a stronger reason inside an active window is
    // recorded, the window's end is kept.
    #[test]
    fn r16_5_a_stronger_reason_is_recorded_in_a_kept_window() {
        let mut s = AuthState::default();
        let b = auth();
        fail(&mut s, "rate_limit", &b, None, T0);
        let stronger = |r: &str| r == "rate_limit";
        let f = Failure {
            reason: "auth",
            behaviour: &b,
            model: None,
            reset_at: None,
            probe: false,
            outranks: Some(&stronger),
        };
        let e = record_failure(
            &mut s,
            "openai:a",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0 + 1,
        );
        assert!(matches!(e, FailureEffect::Kept { .. }), "{e:?}");
        let st = &s.usage_stats["openai:a"];
        assert_eq!(
            (st.cooldown_until, st.cooldown_reason.as_deref()),
            (Some(T0 + MINUTE_MS), Some("auth"))
        );
        // The weaker one after it changes nothing.
        let weaker = |_: &str| false;
        let f = Failure {
            reason: "rate_limit",
            outranks: Some(&weaker),
            ..f
        };
        record_failure(
            &mut s,
            "openai:a",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0 + 2,
        );
        assert_eq!(
            s.usage_stats["openai:a"].cooldown_reason.as_deref(),
            Some("auth")
        );
    }

    // Issue 51 migration: a file with the original's one model window (no
    // `modelCooldowns`) is read as that model's window and moved into the
    // map by the next update.
    #[test]
    fn a_cooldown_model_of_the_original_is_migrated() {
        let mut s = AuthState::default();
        {
            let st = s.stats_mut("openai:a");
            st.cooldown_until = Some(T0 + MINUTE_MS);
            st.cooldown_model = Some("gpt-5".into());
            st.cooldown_reason = Some("rate_limit".into());
            st.error_count = 1;
            st.last_failure_at = Some(T0);
        }
        assert!(!is_available(&s, "openai:a", Some("gpt-5"), T0 + 1));
        assert!(is_available(&s, "openai:a", Some("o3"), T0 + 1));
        fail(&mut s, "rate_limit", &rate_limit(), Some("o3"), T0 + 2);
        let st = &s.usage_stats["openai:a"];
        assert_eq!(
            st.model_cooldowns["gpt-5"].cooldown_until,
            Some(T0 + MINUTE_MS)
        );
        assert_eq!(
            st.model_cooldowns["o3"].cooldown_until,
            Some(T0 + 2 + MINUTE_MS)
        );
        assert_eq!(st.cooldown_model.as_deref(), Some("o3"));
        assert!(!is_available(&s, "openai:a", Some("gpt-5"), T0 + 3));
    }

    // R7.3, R7.4: a model's windows step 1, 5, 25, 60 minutes on its own
    // count, each starting at the previous one's expiry; a failure more
    // than the failure window after its last starts over at one minute
    // (R16.6, per model).
    #[test]
    fn r7_4_a_models_windows_step_on_its_own_count() {
        let mut s = AuthState::default();
        let mut now = T0;
        for expect in [1, 5, 25, 60, 60] {
            let e = fail(&mut s, "rate_limit", &rate_limit(), Some("m"), now);
            let FailureEffect::Started(block) = e else {
                panic!("{e:?}")
            };
            assert_eq!(block.until(), now + expect * MINUTE_MS);
            now = block.until();
        }
        let later = now + 25 * HOUR_MS;
        let e = fail(&mut s, "rate_limit", &rate_limit(), Some("m"), later);
        assert_eq!(
            e.clone(),
            FailureEffect::Started(Block::Cooling {
                until: later + MINUTE_MS,
                model: Some("m".into()),
                reason: Some("rate_limit".into()),
            }),
            "{e:?}"
        );
        assert_eq!(
            s.usage_stats["openai:a"].model_cooldowns["m"].error_count,
            1
        );
    }

    // R16.6 per model: the count resets only once the failure window
    // (24 h) has passed without a failure — at exactly 24 h it still counts.
    #[test]
    fn r16_6_a_models_count_resets_only_past_the_failure_window() {
        let day = 24 * HOUR_MS;
        for (after, step) in [(day, 5), (day + 1, 1)] {
            let mut s = AuthState::default();
            fail(&mut s, "rate_limit", &rate_limit(), Some("m"), T0);
            let e = fail(&mut s, "rate_limit", &rate_limit(), Some("m"), T0 + after);
            let FailureEffect::Started(b) = e else {
                panic!("{e:?}")
            };
            assert_eq!(b.until(), T0 + after + step * MINUTE_MS, "after {after} ms");
        }
    }

    // R16.5: a failed probe of a profile-wide window steps it up too.
    #[test]
    fn r16_5_a_failed_probe_steps_a_profile_wide_window_up() {
        let mut s = AuthState::default();
        let b = auth();
        fail(&mut s, "auth", &b, None, T0);
        let f = Failure {
            reason: "auth",
            behaviour: &b,
            model: None,
            reset_at: None,
            probe: true,
            outranks: None,
        };
        let e = record_failure(
            &mut s,
            "openai:a",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0 + 10,
        );
        assert!(matches!(e, FailureEffect::Started(_)), "{e:?}");
        assert_eq!(
            s.usage_stats["openai:a"].cooldown_until,
            Some(T0 + 10 + 5 * MINUTE_MS)
        );
    }

    // R7.3: with both running, the later of the profile-wide and the
    // model's window stands; on a tie, the profile-wide one (it blocks
    // every model).
    #[test]
    fn r7_3_the_later_window_stands_and_a_tie_is_profile_wide() {
        let mut st = UsageStats {
            cooldown_until: Some(T0 + MINUTE_MS),
            cooldown_reason: Some("auth".into()),
            ..Default::default()
        };
        st.model_cooldowns.insert(
            "m".into(),
            crate::store::ModelCooldown {
                cooldown_until: Some(T0 + MINUTE_MS),
                cooldown_reason: Some("rate_limit".into()),
                error_count: 1,
                ..Default::default()
            },
        );
        let b = block_for(&st, Some("m"), T0).unwrap();
        assert_eq!(
            b,
            Block::Cooling {
                until: T0 + MINUTE_MS,
                model: None,
                reason: Some("auth".into())
            }
        );
        st.model_cooldowns.get_mut("m").unwrap().cooldown_until = Some(T0 + 2 * MINUTE_MS);
        let b = block_for(&st, Some("m"), T0).unwrap();
        assert_eq!(b.until(), T0 + 2 * MINUTE_MS);
        assert_eq!(b.reason(), Some("rate_limit"));
        // Another model sees only the profile-wide one; at its end, nothing.
        assert_eq!(
            block_for(&st, Some("o"), T0).unwrap().until(),
            T0 + MINUTE_MS
        );
        assert_eq!(block_for(&st, Some("o"), T0 + MINUTE_MS), None);
        assert!(block_for(&st, Some("m"), T0 + 2 * MINUTE_MS - 1).is_some());
        assert_eq!(block_for(&st, Some("m"), T0 + 2 * MINUTE_MS), None);
    }

    // D4: a window without a recorded reason takes the most counted one.
    #[test]
    fn d4_a_block_without_reason_takes_the_most_counted() {
        let st = UsageStats {
            cooldown_until: Some(T0 + MINUTE_MS),
            failure_counts: [("overloaded".to_string(), 1), ("timeout".to_string(), 3)].into(),
            ..Default::default()
        };
        assert_eq!(
            block_for(&st, Some("m"), T0).unwrap().reason(),
            Some("timeout")
        );
        let bare = UsageStats {
            cooldown_until: Some(T0 + MINUTE_MS),
            ..Default::default()
        };
        assert_eq!(block_for(&bare, Some("m"), T0).unwrap().reason(), None);
        // A tie goes to the first by name; a zero count is no evidence.
        let tie = UsageStats {
            cooldown_until: Some(T0 + MINUTE_MS),
            failure_counts: [("overloaded".to_string(), 2), ("timeout".to_string(), 2)].into(),
            ..Default::default()
        };
        assert_eq!(
            block_for(&tie, Some("m"), T0).unwrap().reason(),
            Some("overloaded")
        );
        let zero = UsageStats {
            cooldown_until: Some(T0 + MINUTE_MS),
            failure_counts: [("timeout".to_string(), 0)].into(),
            ..Default::default()
        };
        assert_eq!(block_for(&zero, Some("m"), T0).unwrap().reason(), None);
    }

    #[test]
    fn r7_3_profile_wide_reason_is_not_scoped() {
        let mut s = AuthState::default();
        fail(&mut s, "auth", &auth(), Some("gpt-5"), T0);
        assert_eq!(s.usage_stats["openai:a"].cooldown_model, None);
    }

    // R7.3, R8.1: a window ends at its `until`: blocked the millisecond
    // before, usable at that instant — for a cooldown and a disable alike.
    #[test]
    fn a_window_ends_exactly_at_its_until() {
        let until = T0 + MINUTE_MS;
        let cooling = UsageStats {
            cooldown_until: Some(until),
            ..Default::default()
        };
        let disabled = UsageStats {
            disabled_until: Some(until),
            disabled_reason: Some("billing".into()),
            ..Default::default()
        };
        for s in [&cooling, &disabled] {
            assert_eq!(
                block_for(s, None, until - 1).map(|b| b.until()),
                Some(until)
            );
            assert_eq!(block_for(s, None, until), None);
        }
        // A disable with a longer cooldown under it lasts as long as both.
        let both = UsageStats {
            cooldown_until: Some(until + 5),
            ..disabled.clone()
        };
        let b = block_for(&both, None, until).unwrap();
        assert_eq!((b.until(), b.reason()), (until + 5, None));
        let b = block_for(&both, None, until - 1).unwrap();
        assert_eq!((b.until(), b.reason()), (until + 5, Some("billing")));
    }

    // R8.1, R8.4: billing disable 5 h doubling to a 24 h cap.
    #[test]
    fn r8_4_billing_doubles_to_cap() {
        let mut s = AuthState::default();
        let b = lane(DisableLane::Billing);
        let mut now = T0;
        for hours in [5, 10, 20, 24, 24] {
            let e = fail(&mut s, "billing", &b, None, now);
            let FailureEffect::Started(Block::Disabled { until, reason }) = e else {
                panic!("{e:?}")
            };
            assert_eq!(until, now + hours * HOUR_MS);
            assert_eq!(reason.as_deref(), Some("billing"));
            now = until;
        }
    }

    // A backoff too large to add to the clock disables for ever: it used
    // to wrap around to an instant in the past (no disable at all).
    #[test]
    fn huge_billing_backoff_saturates_instead_of_wrapping() {
        let huge = CooldownPolicy::hours(1e16).unwrap();
        let policy = CooldownPolicy::new()
            .with_billing_backoff(huge)
            .with_billing_max(huge);
        let mut s = AuthState::default();
        let f = Failure {
            reason: "billing",
            behaviour: &lane(DisableLane::Billing),
            model: None,
            reset_at: None,
            probe: false,
            outranks: None,
        };
        let e = record_failure(&mut s, "openai:a", "openai", &f, &policy, T0);
        let FailureEffect::Started(Block::Disabled { until, .. }) = e else {
            panic!("{e:?}")
        };
        assert_eq!(until, u64::MAX);
        assert!(!is_available(&s, "openai:a", None, T0 + 365 * 24 * HOUR_MS));
    }

    // R8.4: per-provider billing base.
    #[test]
    fn r8_4_billing_base_per_provider() {
        let policy = CooldownPolicy::new()
            .with_billing_backoff_for("OpenAI", CooldownPolicy::hours(1.0).unwrap());
        let mut s = AuthState::default();
        let b = lane(DisableLane::Billing);
        let f = Failure {
            reason: "billing",
            behaviour: &b,
            model: None,
            reset_at: None,
            probe: false,
            outranks: None,
        };
        let e = record_failure(&mut s, "openai:a", "openai", &f, &policy, T0);
        assert_eq!(
            e,
            FailureEffect::Started(Block::Disabled {
                until: T0 + HOUR_MS,
                reason: Some("billing".into())
            })
        );
        let e = record_failure(&mut s, "xai:a", "xai", &f, &policy, T0);
        assert_eq!(
            e,
            FailureEffect::Started(Block::Disabled {
                until: T0 + 5 * HOUR_MS,
                reason: Some("billing".into())
            })
        );
    }

    // R16.4: auth_permanent disable 10 min doubling to 60 min.
    #[test]
    fn r16_4_auth_permanent_lane() {
        let mut s = AuthState::default();
        let b = lane(DisableLane::AuthPermanent);
        let mut now = T0;
        for mins in [10, 20, 40, 60, 60] {
            let e = fail(&mut s, "auth_permanent", &b, None, now);
            assert_eq!(
                e,
                FailureEffect::Started(Block::Disabled {
                    until: now + mins * MINUTE_MS,
                    reason: Some("auth_permanent".into())
                })
            );
            now += mins * MINUTE_MS;
        }
    }

    // R16.5 for disables.
    #[test]
    fn r16_5_active_disable_not_extended() {
        let mut s = AuthState::default();
        let b = lane(DisableLane::Billing);
        fail(&mut s, "billing", &b, None, T0);
        let e = fail(&mut s, "billing", &b, None, T0 + HOUR_MS);
        assert!(matches!(e, FailureEffect::Kept { .. }));
        assert_eq!(
            s.usage_stats["openai:a"].disabled_until,
            Some(T0 + 5 * HOUR_MS)
        );
    }

    // R16.6: counters reset only after failureWindowHours without failure.
    #[test]
    fn r16_6_counters_reset_after_quiet_window() {
        let mut s = AuthState::default();
        let b = lane(DisableLane::Billing);
        fail(&mut s, "billing", &b, None, T0); // 5 h
        let second = T0 + 5 * HOUR_MS;
        fail(&mut s, "billing", &b, None, second); // 10 h: 5 h after the last failure
                                                   // 24 h after `second` exactly: still inside the window → 20 h.
        let third = second + 24 * HOUR_MS;
        let e = fail(&mut s, "billing", &b, None, third);
        assert_eq!(
            e,
            FailureEffect::Started(Block::Disabled {
                until: third + 20 * HOUR_MS,
                reason: Some("billing".into())
            })
        );
        // More than 24 h quiet → back to the 5 h base, error count 1.
        let fourth = third + 24 * HOUR_MS + 1;
        let e = fail(&mut s, "billing", &b, None, fourth);
        assert_eq!(
            e,
            FailureEffect::Started(Block::Disabled {
                until: fourth + 5 * HOUR_MS,
                reason: Some("billing".into())
            })
        );
        assert_eq!(s.usage_stats["openai:a"].error_count, 1);
    }

    // R16.6: an expired cooldown alone does not reset the ladder.
    #[test]
    fn r16_6_expiry_alone_keeps_counter() {
        let mut s = AuthState::default();
        fail(&mut s, "auth", &auth(), None, T0);
        let later = T0 + 2 * HOUR_MS;
        let e = fail(&mut s, "auth", &auth(), None, later);
        assert_eq!(
            e,
            FailureEffect::Started(Block::Cooling {
                until: later + 5 * MINUTE_MS,
                model: None,
                reason: Some("auth".into())
            })
        );
    }

    // R6.7: an exact reset time replaces the computed window, up to the
    // operator's cap (`providerResetMaxHours`, issue 30).
    #[test]
    fn r6_7_exact_reset_time_wins() {
        let mut s = AuthState::default();
        let b = rate_limit();
        let reset = T0 + 3 * 24 * HOUR_MS;
        let f = Failure {
            reason: "rate_limit",
            behaviour: &b,
            model: Some("gpt-5"),
            reset_at: Some(reset),
            probe: false,
            outranks: None,
        };
        let weekly = CooldownPolicy::default()
            .with_provider_reset_max(std::time::Duration::from_secs(7 * 24 * 3600));
        record_failure(&mut s, "openai:sub", "openai", &f, &weekly, T0);
        assert!(!is_available(&s, "openai:sub", Some("gpt-5"), reset - 1));
        assert!(is_available(&s, "openai:sub", Some("gpt-5"), reset));
        // With the default cap the same reset cools for a day.
        record_failure(
            &mut s,
            "openai:capped",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0,
        );
        assert_eq!(
            s.usage_stats["openai:capped"].cooldown_until,
            Some(T0 + 24 * HOUR_MS)
        );
        // A reset time in the past is ignored.
        let f = Failure {
            reset_at: Some(T0 - 1),
            ..f
        };
        let e = record_failure(
            &mut s,
            "openai:b",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0,
        );
        assert_eq!(
            e.clone(),
            FailureEffect::Started(Block::Cooling {
                until: T0 + MINUTE_MS,
                model: Some("gpt-5".into()),
                reason: Some("rate_limit".into())
            })
        );
        // So is one that is reached right now: a window of no length would
        // not cool the profile at all.
        let f = Failure {
            reset_at: Some(T0),
            ..f
        };
        let e = record_failure(
            &mut s,
            "openai:c",
            "openai",
            &f,
            &CooldownPolicy::default(),
            T0,
        );
        assert_eq!(
            e,
            FailureEffect::Started(Block::Cooling {
                until: T0 + MINUTE_MS,
                model: Some("gpt-5".into()),
                reason: Some("rate_limit".into())
            })
        );
    }

    #[test]
    fn reasons_without_cooldown_are_not_recorded() {
        let mut s = AuthState::default();
        let b = ReasonBehaviour {
            failover: true,
            advance_model: true,
            ..Default::default()
        };
        assert_eq!(
            fail(&mut s, "model_not_found", &b, Some("x"), T0),
            FailureEffect::Ignored
        );
        assert!(s.usage_stats.is_empty());
    }

    #[test]
    fn success_clears_record_unless_other_model_cooling() {
        let mut s = AuthState::default();
        fail(&mut s, "rate_limit", &rate_limit(), Some("gpt-5"), T0);
        record_success(&mut s, "openai:a", "openai", Some("gpt-5-mini"), T0 + 1);
        assert_eq!(
            s.usage_stats["openai:a"].cooldown_model.as_deref(),
            Some("gpt-5")
        );
        assert_eq!(s.usage_stats["openai:a"].last_used, Some(T0 + 1));
        record_success(&mut s, "openai:a", "openai", Some("gpt-5"), T0 + 2);
        let st = &s.usage_stats["openai:a"];
        assert_eq!((st.cooldown_until, st.error_count), (None, 0));
        assert_eq!(s.last_good["openai"], "openai:a");
        // A sibling's success the instant the scoped cooldown ends: nothing
        // is cooling any more, so the record is cleared.
        fail(&mut s, "rate_limit", &rate_limit(), Some("gpt-5"), T0 + 3);
        let until = s.usage_stats["openai:a"].cooldown_until.unwrap();
        record_success(&mut s, "openai:a", "openai", Some("gpt-5-mini"), until);
        let st = &s.usage_stats["openai:a"];
        assert_eq!((st.cooldown_until, st.error_count), (None, 0));
    }

    #[test]
    fn soonest_expiry_over_profiles() {
        let mut s = AuthState::default();
        s.stats_mut("a").cooldown_until = Some(T0 + 10);
        s.stats_mut("b").disabled_until = Some(T0 + 5);
        s.stats_mut("c").cooldown_until = Some(T0 + 1);
        s.stats_mut("c").cooldown_model = Some("other".into());
        assert_eq!(soonest_expiry(&s, ["a", "b"], Some("m"), T0), Some(T0 + 5));
        assert_eq!(
            soonest_expiry(&s, ["a", "c"], Some("m"), T0),
            None,
            "c is usable for m"
        );
        assert_eq!(soonest_expiry(&s, ["a", "new"], None, T0), None);
    }

    // R17.1, issue 30: a provider's reset time cannot disable or cool a profile
    // for longer than the operator's policy for that reason allows.
    #[test]
    fn a_providers_reset_time_is_capped_per_reason() {
        let p = CooldownPolicy::default();
        let far = T0 + 31 * 365 * 24 * HOUR_MS;
        let billing = ReasonBehaviour {
            failover: true,
            disable: Some(DisableLane::Billing),
            ..Default::default()
        };
        let auth_permanent = ReasonBehaviour {
            failover: true,
            disable: Some(DisableLane::AuthPermanent),
            ..Default::default()
        };
        for (b, reason, until) in [
            (rate_limit(), "rate_limit", T0 + 24 * HOUR_MS),
            (billing, "billing", T0 + 24 * HOUR_MS),
            (auth_permanent, "auth_permanent", T0 + 60 * MINUTE_MS),
        ] {
            let mut s = AuthState::default();
            let f = Failure {
                reason,
                behaviour: &b,
                model: None,
                reset_at: Some(far),
                probe: false,
                outranks: None,
            };
            record_failure(&mut s, "p:1", "p", &f, &p, T0);
            let st = &s.usage_stats["p:1"];
            assert_eq!(
                st.cooldown_until.or(st.disabled_until),
                Some(until),
                "{reason}"
            );
        }
    }
}
