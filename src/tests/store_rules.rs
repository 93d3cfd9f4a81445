//! The auth stage end to end: reason behaviour from the embedded default
//! rules (`rules/00-reasons.rules`), state in a real file store, time from
//! fixed instants. Plus property tests of the cooldown invariants.

use std::collections::BTreeMap;
use std::path::PathBuf;

use crate::auth::{
    apply_pin_change, choose_session_profile, is_available, mark_failure, mark_success,
    order_profiles, record_failure, record_success, AuthRouting, Block, CooldownPolicy, Failure,
    FailureEffect, PinChange,
};
use crate::compile::ReasonBehaviour;
use crate::store::{AuthState, FileStore, Profile, Store, StoreExt, DAY_MS, HOUR_MS, MINUTE_MS};
use crate::Engine;
use proptest::prelude::*;

const T0: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

fn temp_root(name: &str) -> PathBuf {
    failover_testkit::temp_root("rules", name)
}

/// The default ruleset, compiled once for the whole test binary.
static ENGINE: std::sync::LazyLock<Engine> = std::sync::LazyLock::new(Engine::builtin);

fn behaviour(name: &str) -> ReasonBehaviour {
    let rs = ENGINE.ruleset();
    let id = rs
        .reason_id(name)
        .unwrap_or_else(|| panic!("reason `{name}` declared"));
    rs.reason(id).behaviour.clone()
}

fn fail<'a>(reason: &'a str, b: &'a ReasonBehaviour, model: Option<&'a str>) -> Failure<'a> {
    Failure {
        reason,
        behaviour: b,
        model,
        reset_at: None,
        probe: false,
        outranks: None,
    }
}

// R7.1, R7.3, R8.1, R16.4 with the declared default behaviours.
#[test]
fn default_reasons_drive_the_windows() {
    let root = temp_root("defaults");
    let store = FileStore::open(&root, "main").unwrap();
    let policy = CooldownPolicy::default();
    let cases: [(&str, Option<&str>, FailureEffect); 6] = [
        (
            "rate_limit",
            Some("gpt-5"),
            FailureEffect::Started(Block::Cooling {
                until: T0 + MINUTE_MS,
                model: Some("gpt-5".into()),
                reason: Some("rate_limit".into()),
            }),
        ),
        (
            "auth",
            Some("gpt-5"),
            FailureEffect::Started(Block::Cooling {
                until: T0 + MINUTE_MS,
                model: None,
                reason: Some("auth".into()),
            }),
        ),
        (
            "billing",
            None,
            FailureEffect::Started(Block::Disabled {
                until: T0 + 5 * HOUR_MS,
                reason: Some("billing".into()),
            }),
        ),
        (
            "auth_permanent",
            None,
            FailureEffect::Started(Block::Disabled {
                until: T0 + 10 * MINUTE_MS,
                reason: Some("auth_permanent".into()),
            }),
        ),
        ("model_not_found", Some("gpt-6"), FailureEffect::Ignored),
        ("format", None, FailureEffect::Ignored),
    ];
    for (reason, model, want) in cases {
        let b = behaviour(reason);
        let id = format!("openai:{reason}");
        let got =
            mark_failure(&store, &id, "openai", &fail(reason, &b, model), &policy, T0).unwrap();
        assert_eq!(got, want, "{reason}");
    }
    let s = store.load_state().unwrap();
    assert!(
        is_available(&s, "openai:rate_limit", Some("gpt-5-mini"), T0 + 1),
        "R7.3 sibling"
    );
    assert!(!is_available(
        &s,
        "openai:rate_limit",
        Some("gpt-5"),
        T0 + 1
    ));
    assert!(
        !is_available(&s, "openai:billing", Some("gpt-5-mini"), T0 + 1),
        "disable blocks all"
    );
    assert!(is_available(
        &s,
        "openai:model_not_found",
        Some("gpt-6"),
        T0 + 1
    ));

    mark_success(
        &store,
        "openai:auth",
        "openai",
        Some("gpt-5"),
        T0 + MINUTE_MS,
    )
    .unwrap();
    let s = store.load_state().unwrap();
    assert_eq!(s.usage_stats["openai:auth"].error_count, 0);
    assert_eq!(s.last_good["openai"], "openai:auth");
    std::fs::remove_dir_all(root).unwrap();
}

// R6.7 + R6.6: subscription with an API-key backup; an exact reset time
// moves runs to the backup and back once the reset passes, while the
// session's auto pin stays on the subscription.
#[test]
fn r6_7_subscription_with_backup() {
    let root = temp_root("r67");
    let store = FileStore::open(&root, "main").unwrap();
    store
        .update_profiles(|p| {
            p.profiles.insert(
                "openai:user@example.com".into(),
                Profile::oauth(
                    "openai",
                    "acc-0000000000000000",
                    "ref-0000000000000000",
                    T0 + 30 * DAY_MS,
                ),
            );
            p.profiles.insert(
                "openai:api-key-backup".into(),
                Profile::api_key("openai", "sk-backup-000000000000"),
            );
        })
        .unwrap();
    let routing = AuthRouting::new(
        Vec::new(),
        BTreeMap::from([(
            "openai".into(),
            vec![
                "openai:user@example.com".into(),
                "openai:api-key-backup".into(),
            ],
        )]),
    )
    .unwrap();
    let route = |now: u64| {
        let profiles = store.load_profiles().unwrap();
        let state = store.load_state().unwrap();
        let order = order_profiles(&routing, &profiles, &state, "openai", Some("gpt-5"), now);
        let entry = store
            .load_sessions()
            .unwrap()
            .entries
            .get("s1")
            .cloned()
            .unwrap_or_default();
        let choice = choose_session_profile(&entry, &order, false);
        store
            .update_session("s1", |e| apply_pin_change(e, &choice.pin))
            .unwrap();
        choice
    };

    let first = route(T0);
    assert_eq!(first.attempts[0], "openai:user@example.com");
    assert!(matches!(first.pin, PinChange::SetAuto { .. }));

    let reset = T0 + 3 * DAY_MS;
    let b = behaviour("rate_limit");
    let f = Failure {
        reset_at: Some(reset),
        ..fail("rate_limit", &b, Some("gpt-5"))
    };
    // A three-day reset, as the operator allows (R17.1: a day by default).
    let weekly = CooldownPolicy::default()
        .with_provider_reset_max(std::time::Duration::from_secs(7 * 24 * 3600));
    mark_failure(&store, "openai:user@example.com", "openai", &f, &weekly, T0).unwrap();

    let during = route(T0 + DAY_MS);
    assert_eq!(during.attempts, ["openai:api-key-backup"]);
    assert_eq!(
        during.pin,
        PinChange::Keep,
        "the subscription stays the preference"
    );
    let after = route(reset);
    assert_eq!(after.attempts[0], "openai:user@example.com");
    let entry = &store.load_sessions().unwrap().entries["s1"];
    assert_eq!(
        entry.auth_profile_override.as_deref(),
        Some("openai:user@example.com")
    );
    std::fs::remove_dir_all(root).unwrap();
}

/// A random event on one profile.
#[derive(Clone, Debug)]
enum Event {
    Fail {
        reason: usize,
        model: usize,
        after_ms: u64,
    },
    Succeed {
        model: usize,
        after_ms: u64,
    },
}

const REASONS: [&str; 5] = ["rate_limit", "auth", "billing", "auth_permanent", "timeout"];
const MODELS: [Option<&str>; 4] = [Some("gpt-5"), Some("gpt-5-mini"), Some("o3"), None];

fn event() -> impl Strategy<Value = Event> {
    let after = prop_oneof![0..MINUTE_MS, 0..2 * HOUR_MS, 0..3 * DAY_MS];
    prop_oneof![
        4 => (0..REASONS.len(), 0..MODELS.len(), after.clone())
            .prop_map(|(reason, model, after_ms)| Event::Fail { reason, model, after_ms }),
        1 => (0..MODELS.len(), after).prop_map(|(model, after_ms)| Event::Succeed { model, after_ms }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    // R7.4, R8.4, R16.4, R16.5 as invariants over random event sequences.
    #[test]
    fn windows_are_bounded_and_never_extended(events in prop::collection::vec(event(), 1..40)) {
        let behaviours: Vec<ReasonBehaviour> = REASONS.iter().map(|r| behaviour(r)).collect();
        let policy = CooldownPolicy::default();
        let mut state = AuthState::default();
        let mut now = T0;
        for ev in events {
            match ev {
                Event::Succeed { model, after_ms } => {
                    now += after_ms;
                    record_success(&mut state, "p:a", "p", MODELS[model], now);
                }
                Event::Fail { reason, model, after_ms } => {
                    now += after_ms;
                    let before = state.stats("p:a").cloned().unwrap_or_default();
                    let f = fail(REASONS[reason], &behaviours[reason], MODELS[model]);
                    let effect = record_failure(&mut state, "p:a", "p", &f, &policy, now);
                    let after = state.stats("p:a").unwrap();
                    prop_assert!(after.error_count >= 1);
                    match effect {
                        FailureEffect::Ignored => prop_assert!(false, "every sampled reason records"),
                        FailureEffect::Kept { block, .. } => {
                            // R16.5: the active window keeps its end.
                            match block {
                                Block::Cooling { until, model: Some(m), .. } => prop_assert_eq!(Some(until), before.model_window(&m).map(|w| w.until)),
                                Block::Cooling { until, model: None, .. } => prop_assert_eq!(Some(until), before.profile_cooldown().map(|p| p.0)),
                                Block::Disabled { until, .. } => prop_assert_eq!(Some(until), before.disabled_until),
                            }
                        }
                        FailureEffect::Started(Block::Cooling { until, model, .. }) => {
                            prop_assert!(until > now && until - now <= HOUR_MS, "R7.4 cap");
                            let was = match &model {
                                Some(m) => before.model_window(m).map(|w| w.until),
                                None => before.profile_cooldown().map(|p| p.0),
                            };
                            prop_assert!(was.is_none_or(|u| u <= now));
                        }
                        FailureEffect::Started(Block::Disabled { until, reason }) => {
                            let cap = if reason.as_deref() == Some("billing") { 24 * HOUR_MS } else { HOUR_MS };
                            prop_assert!(until > now && until - now <= cap, "R8.4/R16.4 cap");
                            prop_assert!(before.disabled_until.is_none_or(|u| u <= now));
                        }
                    }
                }
            }
            // The document survives a JSON round trip.
            let mut problems = Vec::new();
            let back = AuthState::from_json(state.to_json(), std::path::Path::new("s"), &mut problems).unwrap();
            prop_assert!(problems.is_empty());
            prop_assert_eq!(back.usage_stats, state.usage_stats.clone());
        }
    }
}

/// A reference model of R7.3, R7.4, R8.1, R8.4, R16.4–R16.6 for one
/// profile and several models, written as tables rather than formulas so
/// that it shares no arithmetic with `auth::cooldown`: the default
/// policy's windows, exactly.
#[derive(Clone, Debug, Default)]
struct Reference {
    errors: u32,
    per_reason: BTreeMap<String, u32>,
    last_failure: Option<u64>,
    /// The profile-wide cooldown: `(until, reason)`.
    cooling: Option<(u64, String)>,
    /// Per model (R7.3): `(until, reason, errors, last failure)`.
    models: BTreeMap<String, (u64, String, u32, u64)>,
    /// `(until, reason)`.
    disabled: Option<(u64, String)>,
}

/// R7.4: 1, 5, 25 minutes, then an hour for ever.
const COOLDOWN_MINUTES: [u64; 4] = [1, 5, 25, 60];
/// R8.4: billing 5 h doubling to the 24 h cap.
const BILLING_HOURS: [u64; 4] = [5, 10, 20, 24];
/// R16.4: auth_permanent 10 min doubling to the 60 min cap.
const AUTH_PERMANENT_MINUTES: [u64; 4] = [10, 20, 40, 60];

fn nth(table: &[u64; 4], n: u32) -> u64 {
    table[(n as usize).clamp(1, 4) - 1]
}

impl Reference {
    /// The window a failure starts or keeps: `(until, started)`.
    fn fail(&mut self, reason: &str, model: Option<&str>, now: u64) -> (u64, bool) {
        let out = self.window(reason, model, now);
        // Model windows over and a day past their last failure are gone.
        self.models
            .retain(|_, (until, _, _, last)| *until > now || now - *last <= DAY_MS);
        out
    }

    fn window(&mut self, reason: &str, model: Option<&str>, now: u64) -> (u64, bool) {
        // R16.6: the counters restart after a day without a failure.
        if self.last_failure.is_some_and(|t| now - t > DAY_MS) {
            self.errors = 0;
            self.per_reason.clear();
        }
        self.errors += 1;
        *self.per_reason.entry(reason.into()).or_default() += 1;
        let of_reason = self.per_reason[reason];
        self.last_failure = Some(now);
        let lane = match reason {
            "billing" => Some(nth(&BILLING_HOURS, of_reason) * HOUR_MS),
            "auth_permanent" => Some(nth(&AUTH_PERMANENT_MINUTES, of_reason) * MINUTE_MS),
            _ => None,
        };
        if let Some(len) = lane {
            // R16.5: an active disable keeps its end.
            if let Some((until, _)) = self.disabled.as_ref().filter(|d| d.0 > now) {
                return (*until, false);
            }
            self.disabled = Some((now + len, reason.into()));
            return (now + len, true);
        }
        // Only rate_limit is declared `scope model` among the sampled
        // reasons: with the model known it cools that model only, on its
        // own count (R7.3, R7.4).
        if let Some(m) = model.filter(|_| reason == "rate_limit") {
            let w = self.models.entry(m.into()).or_default();
            if w.2 > 0 && now - w.3 > DAY_MS {
                w.2 = 0;
            }
            w.2 += 1;
            w.3 = now;
            if w.0 > now {
                return (w.0, false);
            }
            w.0 = now + nth(&COOLDOWN_MINUTES, w.2) * MINUTE_MS;
            w.1 = reason.into();
            return (w.0, true);
        }
        if let Some((until, _)) = self.cooling.as_ref().filter(|c| c.0 > now) {
            return (*until, false);
        }
        let until = now + nth(&COOLDOWN_MINUTES, self.errors) * MINUTE_MS;
        self.cooling = Some((until, reason.into()));
        (until, true)
    }

    fn succeed(&mut self, model: Option<&str>) {
        match model {
            Some(m) => {
                self.models.remove(m);
            }
            None => self.models.clear(),
        }
        *self = Reference {
            last_failure: self.last_failure,
            models: std::mem::take(&mut self.models),
            ..Reference::default()
        };
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(crate::tests::cases(300)))]

    // R7.3, R7.4, R8.4, R16.4, R16.5, R16.6: every window `record_failure`
    // starts or keeps, and every counter, equals the reference model's
    // exactly (not only within the caps).
    #[test]
    fn windows_equal_the_reference_model(events in prop::collection::vec(event(), 1..40)) {
        let behaviours: Vec<ReasonBehaviour> = REASONS.iter().map(|r| behaviour(r)).collect();
        let policy = CooldownPolicy::default();
        let mut state = AuthState::default();
        let mut reference = Reference::default();
        let mut now = T0;
        for ev in events {
            match ev {
                Event::Succeed { model, after_ms } => {
                    now += after_ms;
                    record_success(&mut state, "p:a", "p", MODELS[model], now);
                    reference.succeed(MODELS[model]);
                }
                Event::Fail { reason, model, after_ms } => {
                    now += after_ms;
                    let f = fail(REASONS[reason], &behaviours[reason], MODELS[model]);
                    let effect = record_failure(&mut state, "p:a", "p", &f, &policy, now);
                    let (until, started) = reference.fail(REASONS[reason], MODELS[model], now);
                    let got = match effect {
                        FailureEffect::Ignored => None,
                        FailureEffect::Started(b) => Some((b.until(), true)),
                        FailureEffect::Kept { block, .. } => Some((block.until(), false)),
                    };
                    prop_assert_eq!(got, Some((until, started)), "{} at {}", REASONS[reason], now - T0);
                }
            }
            let s = state.stats("p:a").cloned().unwrap_or_default();
            prop_assert_eq!(s.error_count, reference.errors);
            prop_assert_eq!(&s.failure_counts, &reference.per_reason);
            let active = |c: &Option<(u64, String)>| c.clone().filter(|c| c.0 > now);
            let cooling = s.profile_cooldown().map(|(u, r)| (u, r.unwrap_or_default().to_string()));
            prop_assert_eq!(active(&cooling), active(&reference.cooling));
            let models: BTreeMap<String, (u64, String, u32, u64)> = s.model_cooldowns.iter().map(|(m, c)| {
                (m.clone(), (c.cooldown_until.unwrap_or(0), c.cooldown_reason.clone().unwrap_or_default(), c.error_count, c.last_failure_at.unwrap_or(0)))
            }).collect();
            prop_assert_eq!(&models, &reference.models);
            // The original's fields copy the model window that ends last
            // while no profile-wide cooldown runs.
            let latest = reference.models.iter().filter(|(_, w)| w.0 > now).max_by_key(|(_, w)| w.0);
            if let (None, Some((m, w))) = (active(&reference.cooling), latest) {
                prop_assert_eq!(s.cooldown_model.as_deref(), Some(m.as_str()));
                prop_assert_eq!(s.cooldown_until, Some(w.0));
            }
            let disabled = s.disabled_until.map(|u| (u, s.disabled_reason.clone().unwrap_or_default()));
            prop_assert_eq!(disabled, reference.disabled.clone());
        }
    }
}
