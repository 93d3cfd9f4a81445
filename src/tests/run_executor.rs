//! The fallback executor against scripted providers, one test per SPEC
//! bullet (ids in the names), on paused tokio time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::run_common::*;
use crate::policy::ModelRef;
use crate::run::{
    AttemptError, AttemptOutcome, DecisionKind, Notice, ProviderFailure, RunError, RunRequest,
};
use crate::store::{StoreExt, MINUTE_MS};

fn advance(ms: u64) -> impl std::future::Future<Output = ()> {
    tokio::time::advance(Duration::from_millis(ms))
}

// R1.2, R7.1, R9.1, R11.3, R13.1: a rate-limited primary falls back, the
// profile cools, the override is persisted as auto with its origin, and
// the turn carries the notice.
#[tokio::test(start_paused = true)]
async fn r1_2_rate_limited_primary_falls_back_with_notice() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on("anthropic/claude", vec![http(429, "Too many requests")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.value, "reply from openai/gpt");
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(out.attempts.len(), 2);
    assert_eq!(out.attempts[0].reason.as_deref(), Some("rate_limit"));
    assert!(
        out.attempts[0].rule.is_some(),
        "the deciding rule is recorded"
    );
    assert_eq!(out.attempts[0].status, Some(429));
    assert_eq!(
        out.notices,
        vec![Notice::FallbackStarted {
            selected: "anthropic/claude".into(),
            active: "openai/gpt".into(),
            reason: "rate limit".into()
        }]
    );
    assert_eq!(
        out.notices[0].to_string(),
        "↪️ Model Fallback: openai/gpt (selected anthropic/claude; rate limit)"
    );
    let e = h.entry("s1");
    assert_eq!(e.provider_override.as_deref(), Some("openai"));
    assert_eq!(e.model_override.as_deref(), Some("gpt"));
    assert_eq!(e.model_override_source.as_deref(), Some("auto"));
    assert_eq!(
        e.model_override_fallback_origin_provider.as_deref(),
        Some("anthropic")
    );
    assert_eq!(
        e.model_override_fallback_origin_model.as_deref(),
        Some("claude")
    );
    let st = h.stats("anthropic:default");
    assert_eq!(st.cooldown_until, Some(T0 + MINUTE_MS));
    assert_eq!(st.cooldown_model.as_deref(), Some("claude"));
    let kinds: Vec<DecisionKind> = out.decisions.iter().map(|d| d.decision).collect();
    assert_eq!(
        kinds,
        vec![
            DecisionKind::CandidateFailed,
            DecisionKind::CandidateSucceeded
        ]
    );
}

// R11.5, R13.2, R13.3: the auto override stays (no repeated notice), the
// primary is re-probed after 5 minutes, and recovery clears it.
#[tokio::test(start_paused = true)]
async fn r11_5_auto_override_persists_then_reprobe_clears() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on(
        "anthropic/claude",
        vec![http(429, "rate limit exceeded"), Ok(())],
    );
    let first = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(first.notices.len(), 1);
    s.clear_calls();

    advance(2 * MINUTE_MS).await;
    let second = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(second.model_ref(), "openai/gpt");
    assert!(second.notices.is_empty(), "persistent fallback: no repeat");
    assert_eq!(s.calls(), vec!["openai/gpt@openai:default"]);

    advance(3 * MINUTE_MS).await; // 5 min after the fallback
    s.clear_calls();
    let third = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(third.model_ref(), "anthropic/claude");
    assert_eq!(
        third.notices[0].to_string(),
        "↪️ Model Fallback cleared: anthropic/claude (was openai/gpt)"
    );
    let e = h.entry("s1");
    assert_eq!(e.model_override, None);
    assert_eq!(e.fallback_notice_active_model, None);
    let fourth = h.runner.run(&req(), s.f()).await.unwrap();
    assert!(fourth.notices.is_empty());
}

// R11.5: a re-probe that fails keeps the override and is not repeated for
// another 5 minutes.
#[tokio::test(start_paused = true)]
async fn r11_5_failed_reprobe_waits_another_five_minutes() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on("anthropic/claude", vec![http(503, "overloaded")]);
    h.runner.run(&req(), s.f()).await.unwrap();
    advance(5 * MINUTE_MS).await;
    s.clear_calls();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec![
            "anthropic/claude@anthropic:default",
            "openai/gpt@openai:default"
        ]
    );
    assert!(out.notices.is_empty(), "same fallback state");
    assert_eq!(h.entry("s1").model_override.as_deref(), Some("gpt"));
    advance(MINUTE_MS).await;
    s.clear_calls();
    h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(s.calls(), vec!["openai/gpt@openai:default"]);
}

// R3.2, R11.5: `/new` clears the auto override at once.
#[tokio::test(start_paused = true)]
async fn r11_5_reset_clears_auto_override() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on("anthropic/claude", vec![http(429, "rate limit"), Ok(())]);
    h.runner.run(&req(), s.f()).await.unwrap();
    h.runner.reset_session("s1").unwrap();
    assert_eq!(h.entry("s1").model_override, None);
    advance(2 * MINUTE_MS).await;
    let mut r = req();
    r.new_session = true;
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert!(out.notices.is_empty(), "the reset cleared the notice state");
}

// R11.3, R11.4: the classic race. A user `/model` lands while the fallback
// attempt is running; the fallback fails; the rollback leaves the user's
// choice alone.
#[tokio::test(start_paused = true)]
async fn r11_3_concurrent_user_model_change_survives_rollback() {
    let h = setup(THREE, KEYS);
    let runner = h.runner.clone();
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let f = move |a: crate::run::Attempt| {
        let runner = runner.clone();
        let seen = seen2.clone();
        async move {
            match (a.provider.as_str(), a.model.as_str()) {
                ("anthropic", _) => Err(ProviderFailure::message("overloaded")
                    .with_status(529)
                    .into()),
                ("openai", _) => {
                    // R11.3: the store already says openai/gpt.
                    let e = runner.store().load_sessions().unwrap().entries["s1"].clone();
                    *seen.lock().unwrap() = e.model_override.clone();
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    runner
                        .set_user_model("s1", &ModelRef::parse("google/gemini").unwrap(), None)
                        .unwrap();
                    Err(AttemptError::Provider(
                        ProviderFailure::message("upstream error").with_status(502),
                    ))
                }
                _ => Ok::<_, AttemptError>("gemini".to_string()),
            }
        }
    };
    let out = h.runner.run(&req(), f).await.unwrap();
    assert_eq!(seen.lock().unwrap().as_deref(), Some("gpt"));
    assert_eq!(out.model_ref(), "google/gemini");
    let e = h.entry("s1");
    assert_eq!(e.provider_override.as_deref(), Some("google"));
    assert_eq!(e.model_override.as_deref(), Some("gemini"));
    assert_eq!(e.model_override_source.as_deref(), Some("user"));
}

// R11.4, the same race when the user's `/model` stays with the fallback's
// provider: `provider_override` still equals what the runner wrote, but it
// belongs to the user's choice now. Rolling back field by field would tear
// the entry (no provider, the user's model); the model fields go back only
// as a group, and the group is the user's.
#[tokio::test(start_paused = true)]
async fn r11_4_concurrent_same_provider_change_is_not_torn() {
    let h = setup(THREE, KEYS);
    let runner = h.runner.clone();
    let f = move |a: crate::run::Attempt| {
        let runner = runner.clone();
        async move {
            match (a.provider.as_str(), a.model.as_str()) {
                ("anthropic", _) => Err(ProviderFailure::message("overloaded")
                    .with_status(529)
                    .into()),
                ("openai", "gpt") => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    runner
                        .set_user_model("s1", &ModelRef::parse("openai/o3").unwrap(), None)
                        .unwrap();
                    Err(AttemptError::Provider(
                        ProviderFailure::message("upstream error").with_status(502),
                    ))
                }
                _ => Ok::<_, AttemptError>(a.model.clone()),
            }
        }
    };
    h.runner.run(&req(), f).await.unwrap();
    let e = h.entry("s1");
    assert_eq!(
        (
            e.provider_override.as_deref(),
            e.model_override.as_deref(),
            e.model_override_source.as_deref()
        ),
        (Some("openai"), Some("o3"), Some("user")),
        "{e:?}"
    );
}

// R11.4: without a concurrent change, a failed fallback's fields are
// rolled back to what they were.
#[tokio::test(start_paused = true)]
async fn r11_4_failed_fallback_rolls_back() {
    let h = setup(THREE, KEYS);
    let s = Script::default()
        .on("anthropic/claude", vec![http(529, "overloaded")])
        .on("openai/gpt", vec![http(529, "overloaded")])
        .on("google/gemini", vec![http(529, "overloaded")]);
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert!(matches!(err, RunError::Summary(_)));
    let e = h.entry("s1");
    assert_eq!(e.model_override, None);
    assert_eq!(e.provider_override, None);
    assert_eq!(e.model_override_source, None);
    assert_eq!(e.auth_profile_override, None);
}

// R3.1, R11.4: a user override is strict and never rewritten.
#[tokio::test(start_paused = true)]
async fn r3_1_user_override_is_strict() {
    let h = setup(BASIC, KEYS);
    h.runner
        .set_user_model("s1", &ModelRef::parse("openai/gpt").unwrap(), None)
        .unwrap();
    let s = Script::default().on("openai/gpt", vec![http(429, "rate limit reached")]);
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(s.calls(), vec!["openai/gpt@openai:default"]);
    // R16.8: one attempt — the error itself.
    assert_eq!(err.to_string(), "rate limit reached");
    assert_eq!(h.entry("s1").model_override_source.as_deref(), Some("user"));
}

// R9.2: context overflow is handed to compaction, never falls back.
#[tokio::test(start_paused = true)]
async fn r9_2_context_overflow_is_handed_off() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on(
        "anthropic/claude",
        vec![http(
            400,
            "prompt is too long: 250000 tokens > 200000 maximum",
        )],
    );
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    let RunError::Provider { error } = err else {
        panic!("expected the original error")
    };
    assert_eq!(error.handoff.as_deref(), Some("compaction"));
    assert_eq!(s.calls().len(), 1);
}

// R9.3: a format error is terminal.
#[tokio::test(start_paused = true)]
async fn r9_3_format_error_is_surfaced() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on(
        "anthropic/claude",
        vec![http(
            400,
            "messages.1.content.1.tool_use.id: String should match pattern",
        )],
    );
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(err.reason(), Some("format"));
    assert_eq!(s.calls().len(), 1);
}

// R16.8: an unrecognised error advances while candidates remain; on the
// last candidate the original error is returned as it is.
#[tokio::test(start_paused = true)]
async fn r16_8_unclassified_advances_then_surfaces() {
    // The rules alone: what R16.8 pins is what happens to an error no
    // rule reads (the model may put another failover label on a text
    // this vague; the runner's path is the same).
    let h = setup_on(Arc::new(crate::Engine::builtin_rules()), BASIC, KEYS, |r| r);
    let s = Script::default()
        .on("anthropic/claude", vec![msg("something odd happened")])
        .on("openai/gpt", vec![msg("another odd thing")]);
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(s.calls().len(), 2);
    let RunError::Provider { error } = err else {
        panic!("expected the original error")
    };
    assert_eq!(error.failure, ProviderFailure::message("another odd thing"));
    assert_eq!(error.reason, "unclassified");
    assert_eq!(error.attempts.len(), 2);
}

// R14.3, R14.4, R16.9: every candidate failed — the summary lists them
// and the soonest expiry.
#[tokio::test(start_paused = true)]
async fn r16_9_summary_message_and_soonest_expiry() {
    let h = setup(BASIC, KEYS);
    let s = Script::default()
        .on("anthropic/claude", vec![http(429, "Too many requests")])
        .on("openai/gpt", vec![http(503, "Service overloaded")]);
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "All models failed (2): anthropic/claude: Too many requests (rate_limit) | \
         openai/gpt: Service overloaded (overloaded)"
    );
    let RunError::Summary(sum) = err else {
        panic!()
    };
    assert_eq!(sum.soonest_cooldown_expiry, Some(T0 + MINUTE_MS));
    let last = sum.decisions.last().unwrap();
    assert_eq!(last.outcome, crate::run::StepOutcome::ChainExhausted);
}

// R14.4: when every profile is blocked for this model, the summary reports
// the latest matching expiry. (That a cooldown scoped to another model is
// ignored is pinned by the auth unit tests `soonest_expiry_over_profiles`
// and `model_scoped_block_depends_on_model`.)
#[tokio::test(start_paused = true)]
async fn r14_4_model_aware_soonest_expiry() {
    let h = setup(
        "agents: { defaults: { model: { primary: openai/gpt, fallbacks: [] } } }",
        &[("openai:a", "k-aaaaaaaa"), ("openai:b", "k-bbbbbbbb")],
    );
    h.store
        .update_state(|s| {
            let a = s.stats_mut("openai:a");
            a.cooldown_until = Some(T0 + 10 * MINUTE_MS);
            a.cooldown_model = Some("gpt".into());
            a.cooldown_reason = Some("rate_limit".into());
            let b = s.stats_mut("openai:b");
            b.cooldown_until = Some(T0 + 20 * MINUTE_MS);
            b.cooldown_model = Some("gpt".into());
            b.cooldown_reason = Some("rate_limit".into());
        })
        .unwrap();
    let s = Script::default();
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert!(s.calls().is_empty(), "outside the probe window: skipped");
    let RunError::Summary(sum) = err else {
        panic!("{err:?}")
    };
    assert_eq!(sum.soonest_cooldown_expiry, Some(T0 + 20 * MINUTE_MS));
    assert_eq!(
        sum.to_string(),
        "Provider openai is in cooldown (all profiles unavailable)"
    );
}

// R8.5: overloaded allows one profile rotation, then model fallback.
#[tokio::test(start_paused = true)]
async fn r8_5_overloaded_rotates_once_then_falls_back() {
    let h = setup(
        BASIC,
        &[
            ("anthropic:a", "sk-ant-aaaaaaaa"),
            ("anthropic:b", "sk-ant-bbbbbbbb"),
            ("anthropic:c", "sk-ant-cccccccc"),
            ("openai:default", "sk-oai-dddddddd"),
        ],
    );
    let s = Script::default().on("anthropic/claude", vec![http(529, "overloaded")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec![
            "anthropic/claude@anthropic:a",
            "anthropic/claude@anthropic:b",
            "openai/gpt@openai:default"
        ]
    );
    assert_eq!(out.model_ref(), "openai/gpt");
}

// R8.5: `overloadedProfileRotations` and `overloadedBackoffMs` are read
// from the config; the backoff sleeps on the injected sleeper.
#[tokio::test(start_paused = true)]
async fn r8_5_rotation_budget_and_backoff_from_config() {
    let h = setup(
        "
agents: { defaults: { model: { primary: anthropic/claude, fallbacks: [openai/gpt] } } }
auth:
  cooldowns: { overloadedProfileRotations: 2, overloadedBackoffMs: 1500 }
",
        &[
            ("anthropic:a", "sk-ant-aaaaaaaa"),
            ("anthropic:b", "sk-ant-bbbbbbbb"),
            ("anthropic:c", "sk-ant-cccccccc"),
            ("openai:default", "sk-oai-dddddddd"),
        ],
    );
    let s = Script::default().on("anthropic/claude", vec![http(529, "overloaded")]);
    let start = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(s.calls().len(), 4);
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(start.elapsed(), Duration::from_millis(3000));
}

// R6.5: a user-pinned profile that fails moves to the next model, not the
// next profile.
#[tokio::test(start_paused = true)]
async fn r6_5_user_pin_advances_the_model() {
    let h = setup(
        BASIC,
        &[
            ("anthropic:a", "sk-ant-aaaaaaaa"),
            ("anthropic:b", "sk-ant-bbbbbbbb"),
            ("openai:default", "sk-oai-dddddddd"),
        ],
    );
    h.store
        .update_session("s1", |e| crate::auth::pin_user_profile(e, "anthropic:b"))
        .unwrap();
    let s = Script::default().on("anthropic/claude", vec![http(429, "rate limit")]);
    h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec!["anthropic/claude@anthropic:b", "openai/gpt@openai:default"]
    );
    let e = h.entry("s1");
    assert_eq!(e.auth_profile_override.as_deref(), Some("anthropic:b"));
    assert_eq!(e.auth_profile_override_source.as_deref(), Some("user"));
}

// R10.1: `auth_permanent` skips every model of the provider.
#[tokio::test(start_paused = true)]
async fn r10_1_auth_permanent_skips_the_provider() {
    let h = setup(
        "agents: { defaults: { model: { primary: openai/gpt, fallbacks: [openai/gpt-mini, google/gemini] } } }",
        KEYS,
    );
    let s = Script::default().on("openai/gpt", vec![http(401, "API key revoked")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec!["openai/gpt@openai:default", "google/gemini@google:default"]
    );
    assert_eq!(out.attempts[1].outcome, AttemptOutcome::Skipped);
    assert_eq!(
        out.attempts[1].error.as_deref(),
        Some("Provider openai has auth_permanent issue (skipping all models)")
    );
    assert!(h.stats("openai:default").disabled_until.is_some());
    // The next run reads the recorded disable and its reason: the whole
    // provider is skipped before any call.
    s.clear_calls();
    let out = h
        .runner
        .run(&RunRequest::session("s2"), s.f())
        .await
        .unwrap();
    assert_eq!(s.calls(), vec!["google/gemini@google:default"]);
    for a in &out.attempts[..2] {
        assert_eq!(a.outcome, AttemptOutcome::Skipped);
        assert_eq!(a.reason.as_deref(), Some("auth_permanent"));
        assert_eq!(
            a.error.as_deref(),
            Some("Provider openai has auth_permanent issue (skipping all models)")
        );
    }
    // R14.2: each skip is a decision at its 1-based chain position.
    let skips: Vec<(DecisionKind, usize, Option<&str>)> = out
        .decisions
        .iter()
        .map(|d| (d.decision, d.position, d.to_model.as_deref()))
        .collect();
    assert_eq!(
        &skips[..2],
        [
            (DecisionKind::SkipCandidate, 1, Some("openai/gpt-mini")),
            (DecisionKind::SkipCandidate, 2, Some("google/gemini")),
        ]
    );
}

// R11.4: another run of the same session wrote its own auto fallback
// while this attempt ran (same source, `auto`, another model): the model
// group is the other run's, and the rollback leaves it whole — not its
// source cleared, which would read as a legacy user override (R3).
#[tokio::test(start_paused = true)]
async fn r11_4_a_concurrent_auto_fallback_is_not_torn() {
    let h = setup(THREE, KEYS);
    let runner = h.runner.clone();
    let f = move |a: crate::run::Attempt| {
        let runner = runner.clone();
        async move {
            match a.provider.as_str() {
                "anthropic" => Err(ProviderFailure::message("overloaded")
                    .with_status(529)
                    .into()),
                "openai" => {
                    runner
                        .store()
                        .update_session("s1", |e| {
                            e.provider_override = Some("google".into());
                            e.model_override = Some("gemini".into());
                            e.model_override_source = Some("auto".into());
                        })
                        .unwrap();
                    Err(AttemptError::Provider(
                        ProviderFailure::message("upstream error").with_status(502),
                    ))
                }
                _ => Err::<String, _>(AttemptError::Provider(
                    ProviderFailure::message("upstream error").with_status(502),
                )),
            }
        }
    };
    h.runner.run(&req(), f).await.unwrap_err();
    let e = h.entry("s1");
    assert_eq!(
        (
            e.provider_override.as_deref(),
            e.model_override.as_deref(),
            e.model_override_source.as_deref()
        ),
        (Some("google"), Some("gemini"), Some("auto")),
        "{e:?}"
    );
}

// R10.3, R16.1: a cooling primary is skipped outside its probe window,
// probed inside it, at most once per 30 s per provider.
#[tokio::test(start_paused = true)]
async fn r16_1_primary_probe_window_and_throttle() {
    let h = setup(BASIC, KEYS);
    h.store
        .update_state(|s| {
            let a = s.stats_mut("anthropic:default");
            a.cooldown_until = Some(T0 + 10 * MINUTE_MS);
            a.cooldown_reason = Some("rate_limit".into());
            a.error_count = 3;
        })
        .unwrap();
    let s = Script::default().on("anthropic/claude", vec![http(429, "rate limit")]);
    let r = RunRequest::session("a");
    h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec!["openai/gpt@openai:default"],
        "far from expiry"
    );

    advance(8 * MINUTE_MS).await; // now = soonest − 2 min
    s.clear_calls();
    let out = h
        .runner
        .run(&RunRequest::session("b"), s.f())
        .await
        .unwrap();
    assert_eq!(s.calls()[0], "anthropic/claude@anthropic:default");
    assert!(out.attempts[0].probe);
    assert!(out
        .decisions
        .iter()
        .any(|d| d.decision == DecisionKind::ProbeCooldownCandidate));

    advance(20_000).await;
    s.clear_calls();
    h.runner
        .run(&RunRequest::session("c"), s.f())
        .await
        .unwrap();
    assert_eq!(s.calls(), vec!["openai/gpt@openai:default"], "throttled");
    advance(10_000).await;
    s.clear_calls();
    h.runner
        .run(&RunRequest::session("d"), s.f())
        .await
        .unwrap();
    assert_eq!(s.calls()[0], "anthropic/claude@anthropic:default");
}

// R10.2, R16.2: a billing-disabled primary is probed only alone or near
// expiry.
#[tokio::test(start_paused = true)]
async fn r16_2_billing_disabled_primary() {
    let h = setup(BASIC, KEYS);
    h.store
        .update_state(|s| {
            let a = s.stats_mut("anthropic:default");
            a.disabled_until = Some(T0 + 5 * 60 * MINUTE_MS);
            a.disabled_reason = Some("billing".into());
        })
        .unwrap();
    let s = Script::default();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(s.calls(), vec!["openai/gpt@openai:default"]);
    assert_eq!(out.attempts[0].outcome, AttemptOutcome::Skipped);
    assert_eq!(out.attempts[0].reason.as_deref(), Some("billing"));
    assert_eq!(
        out.attempts[0].error.as_deref(),
        Some("Provider anthropic is disabled (billing)")
    );

    // Alone (a strict one-shot run): probed.
    s.clear_calls();
    let mut r = RunRequest::session("solo");
    r.one_shot = Some(ModelRef::parse("anthropic/claude").unwrap());
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert!(out.attempts[0].probe);
}

// R10.4, R10.5, R16.3: a cooling sibling is probed once per provider per
// run; a `probe free` failure keeps the slot.
#[tokio::test(start_paused = true)]
async fn r10_5_one_transient_probe_per_provider() {
    let h = setup(
        "agents: { defaults: { model: { primary: anthropic/claude, fallbacks: [openai/a, openai/b, openai/c, google/gemini] } } }",
        KEYS,
    );
    h.store
        .update_state(|s| {
            let o = s.stats_mut("openai:default");
            o.cooldown_until = Some(T0 + 30 * MINUTE_MS);
            o.cooldown_reason = Some("rate_limit".into());
        })
        .unwrap();
    let s = Script::default()
        .on("anthropic/claude", vec![http(529, "overloaded")])
        .on("openai/a", vec![http(404, "model not found: a")])
        .on("openai/b", vec![http(429, "rate limit")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec![
            "anthropic/claude@anthropic:default",
            "openai/a@openai:default",
            "openai/b@openai:default",
            "google/gemini@google:default"
        ],
        "openai/a failed probe-free so openai/b still probed; openai/c skipped"
    );
    let c = out.attempts.iter().find(|a| a.model == "c").unwrap();
    assert_eq!(
        c.error.as_deref(),
        Some("Provider openai is in cooldown (probe already attempted this run)")
    );
}

// R11.6: a live switch to a later candidate jumps there; to the current
// one it is a failed `unclassified` attempt.
#[tokio::test(start_paused = true)]
async fn r11_6_live_switch() {
    let h = setup(THREE, KEYS);
    let switch = |p: &str, m: &str| {
        Err(AttemptError::LiveSessionModelSwitch {
            provider: p.into(),
            model: m.into(),
        })
    };
    let s = Script::default().on("anthropic/claude", vec![switch("google", "gemini")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec![
            "anthropic/claude@anthropic:default",
            "google/gemini@google:default"
        ]
    );
    assert_eq!(out.attempts[0].outcome, AttemptOutcome::Switched);
    // R14.2: the decision is the first candidate's (1-based position).
    let d = &out.decisions[0];
    assert_eq!(
        (d.decision, d.position, d.to_model.as_deref()),
        (DecisionKind::LiveSwitch, 1, Some("google/gemini"))
    );

    let h = setup(THREE, KEYS);
    let s = Script::default().on("anthropic/claude", vec![switch("anthropic", "claude")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.attempts[0].outcome, AttemptOutcome::Failed);
    assert_eq!(out.attempts[0].reason.as_deref(), Some("unclassified"));
    assert_eq!(out.model_ref(), "openai/gpt");
    let d = &out.decisions[0];
    assert_eq!(
        (d.decision, d.position, d.reason.as_deref()),
        (DecisionKind::CandidateFailed, 1, Some("unclassified"))
    );
}

/// Once every cooldown is over, `session` is reset through the harness's
/// own runner (only the store's override is cleared; `runner` keeps what
/// it remembers): `runner`'s next turn of it tries openai again and skips
/// nothing, so `runner` holds no skip mark for it (R12).
async fn next_turn_tries_openai(h: &H, runner: &crate::run::Runner, s: &Script, session: &str) {
    advance(2 * MINUTE_MS).await;
    h.runner.reset_session(session).unwrap();
    s.clear_calls();
    let out = runner
        .run(&RunRequest::session(session), s.f())
        .await
        .unwrap();
    assert!(
        s.calls().contains(&"openai/gpt@openai:default".to_string()),
        "{:?}",
        s.calls()
    );
    assert!(out
        .attempts
        .iter()
        .all(|a| a.outcome != AttemptOutcome::Skipped));
}

// R12.1, R12.2: off by default; when on, a non-primary auth failure is
// skipped on the next turn, the primary never.
#[tokio::test(start_paused = true)]
async fn r12_skip_cache() {
    assert_eq!(crate::run::skip_ttl_from_value(Some("0")), None);
    assert_eq!(crate::run::skip_ttl_from_value(None), None);
    assert_eq!(crate::run::skip_ttl_from_value(Some("60s")), None);
    assert_eq!(crate::run::skip_ttl_from_value(Some("5")), Some(1000));
    assert_eq!(
        crate::run::skip_ttl_from_value(Some("99999999")),
        Some(600_000)
    );

    let script = || {
        Script::default()
            .on("anthropic/claude", vec![http(529, "overloaded")])
            .on("openai/gpt", vec![http(401, "invalid api key")])
    };
    // Off (R12.1, the default): a later turn retries openai once its
    // cooldown has passed. The session is reset through another runner, as
    // below, so that only the store's override is cleared and the running
    // runner keeps whatever it remembers.
    let h = setup(THREE, KEYS);
    let runner = crate::run::Runner::new(engine(), Arc::new(config(THREE)), h.store.clone())
        .unwrap()
        .with_clock(Arc::new(crate::run::TokioClock::starting_at(T0)));
    let s = script();
    runner.run(&req(), s.f()).await.unwrap();
    assert!(s.calls().contains(&"openai/gpt@openai:default".to_string()));
    next_turn_tries_openai(&h, &runner, &s, "s1").await;

    let h = setup(THREE, KEYS);
    let runner = crate::run::Runner::new(engine(), Arc::new(config(THREE)), h.store.clone())
        .unwrap()
        .with_clock(Arc::new(crate::run::TokioClock::starting_at(T0)))
        .with_skip_ttl_ms(Some(10 * MINUTE_MS));
    let s = script();
    runner.run(&req(), s.f()).await.unwrap();
    advance(2 * MINUTE_MS).await; // every cooldown over
    h.runner.reset_session("s1").unwrap();
    s.clear_calls();
    let out = runner.run(&req(), s.f()).await.unwrap();
    assert!(!s.calls().contains(&"openai/gpt@openai:default".to_string()));
    let skipped = out.attempts.iter().find(|a| a.model == "gpt").unwrap();
    assert_eq!(skipped.outcome, AttemptOutcome::Skipped);
    // Another session is not affected.
    s.clear_calls();
    runner.run(&RunRequest::session("s2"), s.f()).await.unwrap();
    assert!(s.calls().contains(&"openai/gpt@openai:default".to_string()));

    // R12.2: only auth failures are remembered; a rate-limited fallback
    // is tried again on the next turn once its cooldown is over.
    let h = setup(THREE, KEYS);
    let runner = crate::run::Runner::new(engine(), Arc::new(config(THREE)), h.store.clone())
        .unwrap()
        .with_clock(Arc::new(crate::run::TokioClock::starting_at(T0)))
        .with_skip_ttl_ms(Some(10 * MINUTE_MS));
    let s = Script::default()
        .on("anthropic/claude", vec![http(529, "overloaded")])
        .on("openai/gpt", vec![http(429, "rate limit reached")]);
    runner.run(&req(), s.f()).await.unwrap();
    next_turn_tries_openai(&h, &runner, &s, "s1").await;
}

// R12.2 with RunRequest::one_off: a run whose session ends with it (the
// gateway's requests without `x-session-id`, each a key of its own) marks
// nothing in the skip cache, which no later run could read: each mark
// would take one of the 16,384 places, or a key on a shared backend for
// up to ten minutes. Observed by running the same key again as a kept
// session: the fallback that failed on auth is tried, not skipped.
#[tokio::test(start_paused = true)]
async fn r12_a_one_off_run_marks_nothing_in_the_skip_cache() {
    let h = setup(THREE, KEYS);
    let runner = crate::run::Runner::new(engine(), Arc::new(config(THREE)), h.store.clone())
        .unwrap()
        .with_clock(Arc::new(crate::run::TokioClock::starting_at(T0)))
        .with_skip_ttl_ms(Some(10 * MINUTE_MS));
    let s = Script::default()
        .on("anthropic/claude", vec![http(529, "overloaded")])
        .on("openai/gpt", vec![http(401, "invalid api key")]);
    let mut one_off = RunRequest::session("anon-1");
    one_off.one_off = true;
    runner.run(&one_off, s.f()).await.unwrap();
    assert!(s.calls().contains(&"openai/gpt@openai:default".to_string()));
    next_turn_tries_openai(&h, &runner, &s, "anon-1").await;
}

// Cancel safety: dropping the run mid-attempt rolls back the override.
#[tokio::test(start_paused = true)]
async fn cancel_mid_attempt_leaves_state_consistent() {
    let h = setup(BASIC, KEYS);
    let f = |a: crate::run::Attempt| async move {
        if a.provider == "anthropic" {
            return Err(AttemptError::Provider(
                ProviderFailure::message("overloaded").with_status(529),
            ));
        }
        tokio::time::sleep(Duration::from_secs(3600)).await;
        Ok::<_, AttemptError>(())
    };
    let r = req();
    let run = h.runner.run(&r, f);
    let timed = tokio::time::timeout(Duration::from_secs(1), run).await;
    assert!(timed.is_err(), "the run was cancelled");
    let e = h.entry("s1");
    assert_eq!(e.model_override, None, "the override was rolled back");
    assert_eq!(e.fallback_notice_active_model, None);
}

// R16.11: secrets appear in no error, summary, notice, attempt or Debug.
#[tokio::test(start_paused = true)]
async fn r16_11_secrets_never_leak() {
    let h = setup(BASIC, KEYS);
    let seen_debug = Arc::new(Mutex::new(String::new()));
    let d2 = seen_debug.clone();
    let f = move |a: crate::run::Attempt| {
        d2.lock().unwrap().push_str(&format!("{a:?}"));
        let key = match a.profile.as_ref().map(|p| &p.credential) {
            Some(crate::store::Credential::ApiKey { key: Some(k), .. }) => k.expose().to_string(),
            _ => String::new(),
        };
        std::future::ready(Err::<(), _>(AttemptError::Provider(
            ProviderFailure::message(format!("Incorrect API key provided: {key}")).with_status(401),
        )))
    };
    let err = h.runner.run(&req(), f).await.unwrap_err();
    let all = format!("{err} {err:?} {}", seen_debug.lock().unwrap());
    assert!(all.contains("<redacted>"), "{all}");
    assert!(!all.contains("SECRET"), "{all}");

    // A single attempt surfaces the provider's own error (R16.8): its
    // message, body and code are scrubbed of the key as well.
    let echo = |a: crate::run::Attempt| {
        let key = match a.profile.as_ref().map(|p| &p.credential) {
            Some(crate::store::Credential::ApiKey { key: Some(k), .. }) => k.expose().to_string(),
            _ => String::new(),
        };
        assert!(key.contains("SECRET"));
        std::future::ready(Err::<(), _>(AttemptError::Provider(
            ProviderFailure::message(format!("Incorrect API key provided: {key}"))
                .with_status(401)
                .with_code(format!("bad_key_{key}"))
                .with_body(format!(r#"{{"error":{{"message":"key {key} is wrong"}}}}"#)),
        )))
    };
    let mut one = RunRequest::session("solo");
    one.one_shot = Some(ModelRef::parse("anthropic/claude").unwrap());
    let err = h.runner.run(&one, echo).await.unwrap_err();
    let RunError::Provider { error } = &err else {
        panic!("{err:?}")
    };
    let f = &error.failure;
    for part in [&f.message, &f.body, &f.code] {
        let part = part.as_deref().unwrap_or_default();
        assert!(!part.is_empty() && !part.contains("SECRET"), "{part}");
    }
    assert!(!format!("{err} {err:?}").contains("SECRET"));
}

/// An auto override of `model` whose origin is `origin` (both
/// `provider/model`), as a fallback writes it (R11.3), to plant in a
/// session.
fn auto_override(model: &str, origin: &str) -> impl Fn(&mut crate::store::SessionEntry) {
    let (model, origin) = (
        ModelRef::parse(model).unwrap(),
        ModelRef::parse(origin).unwrap(),
    );
    move |e| {
        e.provider_override = Some(model.provider().into());
        e.model_override = Some(model.model().into());
        e.model_override_source = Some("auto".into());
        e.model_override_fallback_origin_provider = Some(origin.provider().into());
        e.model_override_fallback_origin_model = Some(origin.model().into());
    }
}

// R3.2: a heartbeat clears an auto override whose origin is no longer the
// configured default; one whose origin still is stays.
#[tokio::test(start_paused = true)]
async fn r3_2_heartbeat_clears_stale_auto_override() {
    let h = setup(BASIC, KEYS);
    let auto = |origin: &str| auto_override("openai/gpt", origin);
    h.store
        .update_session("s1", auto("anthropic/claude-old"))
        .unwrap();
    let mut r = req();
    r.heartbeat = true;
    let s = Script::default();
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert_eq!(h.entry("s1").model_override, None);

    h.store
        .update_session("s2", auto("anthropic/claude"))
        .unwrap();
    let mut r = RunRequest::session("s2");
    r.heartbeat = true;
    advance(MINUTE_MS).await;
    // This process has no re-probe record for `s2`, so the origin is
    // re-probed once; it is cooling far from expiry and is skipped. The
    // heartbeat itself does not clear an override of the current default.
    h.store
        .update_state(|st| {
            let a = st.stats_mut("anthropic:default");
            a.cooldown_until = Some(T0 + 30 * MINUTE_MS);
            a.cooldown_reason = Some("rate_limit".into());
        })
        .unwrap();
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(h.entry("s2").model_override.as_deref(), Some("gpt"));
    // The next heartbeat, its re-probe spent, follows the override
    // straight to openai/gpt: the origin is not even looked at.
    advance(MINUTE_MS).await;
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    let seen: Vec<_> = out
        .decisions
        .iter()
        .map(|d| d.from_model.as_str())
        .collect();
    assert!(!seen.contains(&"anthropic/claude"), "{seen:?}");
    assert_eq!(h.entry("s2").model_override.as_deref(), Some("gpt"));
}

// R3.2, R11.5: only a heartbeat clears a stale auto override; an ordinary
// turn follows it, and falls back from its origin.
#[tokio::test(start_paused = true)]
async fn r3_2_an_ordinary_turn_keeps_a_stale_auto_override() {
    let h = setup(BASIC, KEYS);
    h.store
        .update_session("s1", auto_override("openai/gpt", "anthropic/claude-old"))
        .unwrap();
    let s = Script::default();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(s.calls(), ["openai/gpt@openai:default"]);
    let e = h.entry("s1");
    assert_eq!(e.model_override.as_deref(), Some("gpt"));
    assert_eq!(
        e.model_override_fallback_origin_model.as_deref(),
        Some("claude-old")
    );
}

// R7.3, R10.4: a model-scoped rate limit does not block a sibling model
// of the same profile.
#[tokio::test(start_paused = true)]
async fn r7_3_model_scoped_limit_spares_the_sibling() {
    let h = setup(
        "agents: { defaults: { model: { primary: openai/gpt, fallbacks: [openai/gpt-mini] } } }",
        KEYS,
    );
    let s = Script::default().on("openai/gpt", vec![http(429, "rate limit")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec![
            "openai/gpt@openai:default",
            "openai/gpt-mini@openai:default"
        ]
    );
    assert!(!out.attempts[1].probe, "not blocked for the sibling at all");
    assert_eq!(
        h.stats("openai:default").cooldown_model.as_deref(),
        Some("gpt")
    );
}

// R6.4, R6.6: the session pins its profile automatically; a rate limit
// rotates this run to the other profile but the pin is kept, so the
// session returns to it once it recovers.
#[tokio::test(start_paused = true)]
async fn r6_6_auto_pin_is_a_preference() {
    let h = setup(
        "agents: { defaults: { model: { primary: openai/gpt, fallbacks: [] } } }",
        &[
            ("openai:a", "sk-oai-aaaaaaaa"),
            ("openai:b", "sk-oai-bbbbbbbb"),
        ],
    );
    let s = Script::default();
    h.runner.run(&req(), s.f()).await.unwrap();
    let e = h.entry("s1");
    assert_eq!(e.auth_profile_override.as_deref(), Some("openai:a"));
    assert_eq!(e.auth_profile_override_source.as_deref(), Some("auto"));

    let s = Script::default().on("openai/gpt@openai:a", vec![http(429, "rate limit"), ok()]);
    h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec!["openai/gpt@openai:a", "openai/gpt@openai:b"]
    );
    assert_eq!(
        h.entry("s1").auth_profile_override.as_deref(),
        Some("openai:a")
    );
    advance(2 * MINUTE_MS).await;
    s.clear_calls();
    h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(s.calls(), vec!["openai/gpt@openai:a"]);
}

// R8.5: `rateLimitedProfileRotations: 0` sends a rate limit straight to the
// next model, and the decision log says so.
#[tokio::test(start_paused = true)]
async fn r8_5_zero_rate_limit_rotations() {
    let h = setup(
        "
agents: { defaults: { model: { primary: anthropic/claude, fallbacks: [openai/gpt] } } }
auth: { cooldowns: { rateLimitedProfileRotations: 0 } }
",
        &[
            ("anthropic:a", "sk-ant-aaaaaaaa"),
            ("anthropic:b", "sk-ant-bbbbbbbb"),
            ("openai:default", "sk-oai-dddddddd"),
        ],
    );
    let s = Script::default().on("anthropic/claude", vec![http(429, "rate limit")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(
        s.calls(),
        vec!["anthropic/claude@anthropic:a", "openai/gpt@openai:default"]
    );
    assert_eq!(out.decisions[0].to_model.as_deref(), Some("openai/gpt"));
}

// R1.2, R5, R11.1: the same walk on the file store — state lands in the
// files, and fields the runner does not own survive its writes.
#[tokio::test(start_paused = true)]
async fn r11_1_on_the_file_store() {
    use crate::store::{FileStore, Store};
    let dir = std::env::temp_dir().join(format!("failover-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(FileStore::open(&dir, "main").unwrap());
    store.update_profiles(|p| *p = profiles(KEYS)).unwrap();
    store
        .update_session("s1", |e| {
            e.extra
                .insert("sessionId".into(), serde_json::json!("abc-123"));
        })
        .unwrap();
    let runner = crate::run::Runner::new(engine(), Arc::new(config(BASIC)), store.clone())
        .unwrap()
        .with_clock(Arc::new(crate::run::TokioClock::starting_at(T0)));
    let s = Script::default().on("anthropic/claude", vec![http(429, "rate limit")]);
    let out = runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    let e = store.load_session("s1").unwrap().unwrap();
    assert_eq!(e.model_override.as_deref(), Some("gpt"));
    assert_eq!(e.extra["sessionId"], serde_json::json!("abc-123"));
    let st = store.load_state().unwrap();
    assert_eq!(
        st.usage_stats["anthropic:default"].cooldown_until,
        Some(T0 + MINUTE_MS)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// R6.2, R7.4 (a success marks the profile used for the round-robin and
// resets its error count), deferred: a run asked to hand the success
// record back does so when the record is its only write. A session that
// ends with the run (`one_off`) always; a kept session when it has nothing
// to settle, and then nothing of it is written; a session that changes
// (here: the fallback's notice) keeps the record and the session one
// atomic step before the run returns, as does a networked backend (Redis).
// `Runner::settle` writes the same record a run without deferral writes.
#[tokio::test(start_paused = true)]
async fn deferred_success_record_is_written_by_settle() {
    let script = || {
        Script::default().on(
            "anthropic/claude",
            vec![
                http(429, "Too many requests"),
                http(429, "Too many requests"),
            ],
        )
    };
    let plain = setup(BASIC, KEYS);
    let s = script();
    let out = plain.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.deferred, None, "not asked to defer");
    let written = plain.stats("openai:default");
    assert!(written.last_used.is_some());

    // A session that ends with the run: deferred, though it would change.
    let h = setup(BASIC, KEYS);
    let mut r = req();
    r.defer_success_record = true;
    r.one_off = true;
    let s = script();
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    let d = out.deferred.clone().expect("a profile answered");
    assert_eq!(
        (d.profile_id.as_str(), d.provider.as_str(), d.model.as_str()),
        ("openai:default", "openai", "gpt")
    );
    assert_eq!(h.stats("openai:default").last_used, None, "not yet written");
    assert_eq!(
        h.stats("anthropic:default").cooldown_until,
        Some(T0 + MINUTE_MS),
        "the failure is recorded at once"
    );
    h.runner.settle(d).await.unwrap();
    assert_eq!(h.stats("openai:default"), written);

    // A kept session whose fallback starts: the notice and the override
    // are settled with the record, at once.
    let h = setup(BASIC, KEYS);
    let mut r = req();
    r.defer_success_record = true;
    let s = script();
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(out.deferred, None, "the session changed");
    assert_eq!(out.notices.len(), 1, "the session is settled at once");
    assert_eq!(h.entry("s1").model_override.as_deref(), Some("gpt"));
    assert_eq!(h.stats("openai:default"), written);

    // The same session's next turn stays on the fallback with nothing to
    // settle: the record waits, the session is not written.
    advance(MINUTE_MS / 2).await;
    let entry = h.entry("s1");
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert!(out.notices.is_empty());
    assert_eq!(h.entry("s1"), entry, "nothing of the session written");
    if backend() == "redis" {
        assert_eq!(out.deferred, None, "networked: one atomic step");
        return;
    }
    let d = out.deferred.clone().expect("nothing to settle: deferred");
    assert_eq!(h.stats("openai:default"), written, "not yet written");
    h.runner.settle(d).await.unwrap();
    let after = h.stats("openai:default");
    assert_eq!(after.last_used, Some(T0 + MINUTE_MS / 2));
}

// R6.2: a profile never used counts as the oldest use: a second session
// is served by the key the first did not use, not by the one it did.
#[tokio::test(start_paused = true)]
async fn r6_2_a_never_used_profile_is_tried_first() {
    let h = setup(
        BASIC,
        &[
            ("anthropic:a", "sk-ant-aaaaaaaa"),
            ("anthropic:b", "sk-ant-bbbbbbbb"),
            ("openai:default", "sk-oai-dddddddd"),
        ],
    );
    let s = Script::default();
    h.runner.run(&req(), s.f()).await.unwrap();
    advance(1000).await;
    h.runner
        .run(&RunRequest::session("s2"), s.f())
        .await
        .unwrap();
    assert_eq!(
        s.calls(),
        vec![
            "anthropic/claude@anthropic:a",
            "anthropic/claude@anthropic:b"
        ]
    );
}

// R11.4, R6.5: the profile fields are one choice, like the model fields.
// A user's `/model openai/o3@openai:default` lands while the fallback runs
// on that same profile: the profile id equals what the runner wrote, but
// it is the user's pin now, and the rollback of the failed attempt leaves
// it whole (not the id cleared under a `user` source).
#[tokio::test(start_paused = true)]
async fn r11_4_concurrent_profile_pin_survives_rollback() {
    let h = setup(THREE, KEYS);
    let runner = h.runner.clone();
    let f = move |a: crate::run::Attempt| {
        let runner = runner.clone();
        async move {
            match a.provider.as_str() {
                "anthropic" => Err(ProviderFailure::message("overloaded")
                    .with_status(529)
                    .into()),
                "openai" => {
                    let e = runner.store().load_sessions().unwrap().entries["s1"].clone();
                    assert_eq!(e.auth_profile_override.as_deref(), Some("openai:default"));
                    assert_eq!(e.auth_profile_override_source.as_deref(), Some("auto"));
                    runner
                        .set_user_model(
                            "s1",
                            &ModelRef::parse("openai/o3").unwrap(),
                            Some("openai:default"),
                        )
                        .unwrap();
                    Err(AttemptError::Provider(
                        ProviderFailure::message("upstream error").with_status(502),
                    ))
                }
                _ => Ok::<_, AttemptError>(a.model.clone()),
            }
        }
    };
    let out = h.runner.run(&req(), f).await.unwrap();
    // R13: the model is the user's now: no fallback notice is told or
    // recorded for the run that answered on another model.
    assert!(out.notices.is_empty(), "{:?}", out.notices);
    let e = h.entry("s1");
    assert_eq!(
        (
            e.auth_profile_override.as_deref(),
            e.auth_profile_override_source.as_deref(),
            e.model_override.as_deref(),
            e.model_override_source.as_deref(),
        ),
        (
            Some("openai:default"),
            Some("user"),
            Some("o3"),
            Some("user")
        ),
        "{e:?}"
    );
    assert_eq!(e.fallback_notice_active_model, None, "{e:?}");
}

// R8.4, R16.6: the billing disable doubles per failure *of that reason*:
// a billing failure after one rate limit is the first billing failure,
// so it disables for the base five hours, not ten.
#[tokio::test(start_paused = true)]
async fn r8_4_billing_doubles_per_billing_failure_not_per_failure() {
    let h = setup(BASIC, KEYS);
    let s = Script::default().on(
        "anthropic/claude",
        vec![
            http(429, "rate limit reached"),
            http(
                400,
                "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing to upgrade or purchase credits.",
            ),
        ],
    );
    h.runner.run(&req(), s.f()).await.unwrap();
    let st = h.stats("anthropic:default");
    assert_eq!(
        (st.error_count, st.cooldown_until),
        (1, Some(T0 + MINUTE_MS))
    );
    advance(2 * MINUTE_MS).await;
    let out = h
        .runner
        .run(&RunRequest::session("s2"), s.f())
        .await
        .unwrap();
    assert_eq!(out.attempts[0].reason.as_deref(), Some("billing"));
    let st = h.stats("anthropic:default");
    assert_eq!(st.error_count, 2);
    assert_eq!(st.disabled_reason.as_deref(), Some("billing"));
    assert_eq!(
        st.disabled_until,
        Some(T0 + 2 * MINUTE_MS + 5 * 60 * MINUTE_MS)
    );
}

// R14.4: a candidate still usable on one of its profiles adds no expiry to
// the summary, though another of its profiles cools: only the fallback's
// cooldown tells when the chain is usable again. (Issue 36: a mutant that
// let the usable candidate's cooling profile count survived.)
#[tokio::test(start_paused = true)]
async fn r14_4_a_usable_candidate_adds_no_expiry() {
    // openai/gpt first, with a cooling profile and a usable one; the
    // anthropic fallback is cooling.
    let h = setup(
        "agents: { defaults: { model: { primary: openai/gpt, fallbacks: [anthropic/claude] } } }",
        &[
            ("openai:a", "k-aaaaaaaa"),
            ("openai:b", "k-bbbbbbbb"),
            ("anthropic:x", "k-xxxxxxxx"),
        ],
    );
    h.store
        .update_state(|s| {
            let a = s.stats_mut("openai:a");
            a.cooldown_until = Some(T0 + 4 * MINUTE_MS);
            a.cooldown_model = Some("gpt".into());
            a.cooldown_reason = Some("rate_limit".into());
            let x = s.stats_mut("anthropic:x");
            x.cooldown_until = Some(T0 + 10 * MINUTE_MS);
            x.cooldown_reason = Some("rate_limit".into());
        })
        .unwrap();
    // An unrecognised error continues the chain (R9.1) without cooling
    // openai:b, so openai/gpt stays usable.
    // The cooling fallback is probed (R10.5) and still rate-limited; its
    // window stands (R16.5).
    let s = Script::default()
        .on("openai/gpt", vec![msg("something odd happened")])
        .on("anthropic/claude", vec![http(429, "Too many requests")]);
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(
        s.calls(),
        ["openai/gpt@openai:b", "anthropic/claude@anthropic:x"]
    );
    assert!(h.stats("openai:b").cooldown_until.is_none());
    let RunError::Summary(sum) = err else {
        panic!("{err:?}")
    };
    assert_eq!(sum.soonest_cooldown_expiry, Some(T0 + 10 * MINUTE_MS));
    // R14.2: the probe's decision names the fallback's place in the chain.
    let probe = sum
        .decisions
        .iter()
        .find(|d| d.decision == DecisionKind::ProbeCooldownCandidate)
        .expect("a probe decision");
    assert_eq!(
        (probe.from_model.as_str(), probe.position),
        ("anthropic/claude", 2)
    );
}

// R7.1, R8.1, R11: each candidate plans on the state as it is when its
// turn comes, not as the run first read it: profiles disabled by the
// first candidate's billing failures are not tried again for a sibling
// model of the same provider.
#[tokio::test(start_paused = true)]
async fn r8_1_a_later_candidate_sees_the_disables_of_an_earlier_one() {
    let h = setup(
        "agents: { defaults: { model: { primary: openai/gpt, fallbacks: [openai/mini] } } }",
        &[("openai:a", "k-aaaaaaaa"), ("openai:b", "k-bbbbbbbb")],
    );
    let s = Script::default().on(
        "openai/gpt",
        vec![http(402, "You have insufficient credits")],
    );
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(s.calls(), ["openai/gpt@openai:a", "openai/gpt@openai:b"]);
    for p in ["openai:a", "openai:b"] {
        assert_eq!(
            h.stats(p).disabled_reason.as_deref(),
            Some("billing"),
            "{p}"
        );
    }
    assert!(matches!(err, RunError::Summary(_)), "{err:?}");
}

// R14.2, R5 (the evidence model): a failure the model decided carries the
// model's probability in its attempt record and its decision; a rule's
// decision carries none. (The shipped model decides at 0.9; here any
// confidence does, so an unknown text is the model's.)
#[tokio::test(start_paused = true)]
async fn r14_2_a_model_decision_shows_its_probability() {
    let eager =
        Arc::new(crate::Engine::builtin_rules().with_model(crate::evidence::builtin(), 0.0));
    let h = setup_on(eager, BASIC, KEYS, |r| r);
    let s = Script::default().on("anthropic/claude", vec![msg("zorp fnord quux")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    let (a, d) = (&out.attempts[0], &out.decisions[0]);
    assert_eq!(a.decided_by, Some("model"));
    assert_eq!(d.classified_by, Some("model"));
    let p = a.probability.expect("the model's probability");
    assert!((0.0..=1.0).contains(&p), "{p}");
    assert_eq!(d.probability, Some(p));

    let h = setup(BASIC, KEYS);
    let s = Script::default().on("anthropic/claude", vec![http(429, "Too many requests")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.attempts[0].decided_by, Some("rule"));
    assert_eq!(
        (out.attempts[0].probability, out.decisions[0].probability),
        (None, None)
    );
}

// R6.5, R11.3: a user's `/model …@profile` written during the run, naming
// the very profile the session was auto-pinned to when the run read it,
// is the user's pin now: the run's own new pin (after a compaction it
// moves on to the next profile, R6.6) does not replace it.
#[tokio::test(start_paused = true)]
async fn r6_5_a_user_pin_of_the_auto_pinned_profile_stays_the_users() {
    let h = setup(
        BASIC,
        &[("anthropic:a", "k-aaaaaaaa"), ("anthropic:b", "k-bbbbbbbb")],
    );
    // Pinned before a compaction: this run moves the auto pin on (R6.6).
    h.store
        .update_session("s1", |e| {
            e.auth_profile_override = Some("anthropic:a".into());
            e.auth_profile_override_source = Some("auto".into());
            e.auth_profile_override_compaction_count = Some(0);
            e.compaction_count = Some(1);
        })
        .unwrap();
    let runner = h.runner.clone();
    let f = move |a: crate::run::Attempt| {
        let runner = runner.clone();
        async move {
            assert_eq!(a.profile_id.as_deref(), Some("anthropic:b"));
            runner
                .set_user_model(
                    "s1",
                    &ModelRef::parse("anthropic/claude").unwrap(),
                    Some("anthropic:a"),
                )
                .unwrap();
            Ok::<_, AttemptError>(a.model.clone())
        }
    };
    h.runner.run(&req(), f).await.unwrap();
    let e = h.entry("s1");
    assert_eq!(
        (
            e.auth_profile_override.as_deref(),
            e.auth_profile_override_source.as_deref()
        ),
        (Some("anthropic:a"), Some("user")),
        "{e:?}"
    );
}

// R13.1, R13.3: a notice per state change: the same selection falling back
// to another model is a new state, told again.
#[tokio::test(start_paused = true)]
async fn r13_3_a_new_active_model_is_told_again() {
    let h = setup(THREE, KEYS);
    let s = Script::default().on("anthropic/claude", vec![http(429, "Too many requests")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(out.notices.len(), 1, "{:?}", out.notices);
    // The next turn: claude is still cooling, gpt fails, gemini answers.
    let s = Script::default().on("openai/gpt", vec![http(503, "Service overloaded")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "google/gemini");
    assert_eq!(
        out.notices,
        [Notice::FallbackStarted {
            selected: "anthropic/claude".into(),
            active: "google/gemini".into(),
            reason: "overloaded".into(),
        }]
    );
}

// R6.4, R11.3: a run whose success record waits for the answer (the
// gateway's kept sessions) still settles what the session needs now: the
// first run's auto pin is written at once.
#[tokio::test(start_paused = true)]
async fn r6_4_a_deferred_success_still_writes_the_first_pin() {
    let h = setup(BASIC, KEYS);
    let mut r = req();
    r.defer_success_record = true;
    let out = h.runner.run(&r, Script::default().f()).await.unwrap();
    assert_eq!(out.model_ref(), "anthropic/claude");
    let e = h.entry("s1");
    assert_eq!(
        (
            e.auth_profile_override.as_deref(),
            e.auth_profile_override_source.as_deref()
        ),
        (Some("anthropic:default"), Some("auto")),
        "{e:?}"
    );
    // Nothing else to settle on the next turn: only the success waits, on
    // a local backend (on Redis the settling step is one round trip
    // anyway, so nothing waits).
    let out = h.runner.run(&r, Script::default().f()).await.unwrap();
    assert_eq!(out.deferred.is_some(), backend() != "redis");
}

// R11.5, R11.3: a run that falls back to the origin of the session's auto
// override is returning to the session's selection, not falling back from
// it: like a re-probe, it leaves the override in place until the origin
// answers (then clears it) and never writes an override that points at
// its own origin. Here the origin, openai/gpt, is no longer the
// configured default (an earlier config's), and the run reaches it after
// the override and the default failed.
#[tokio::test(start_paused = true)]
async fn r11_5_falling_back_to_the_overrides_origin_keeps_it_until_it_answers() {
    let h = setup(THREE, KEYS);
    h.store
        .update_session("s1", auto_override("google/gemini", "openai/gpt"))
        .unwrap();
    let runner = h.runner.clone();
    let seen = Arc::new(Mutex::new(None));
    let seen2 = seen.clone();
    let f = move |a: crate::run::Attempt| {
        let (runner, seen) = (runner.clone(), seen2.clone());
        async move {
            if a.provider != "openai" {
                return Err(AttemptError::Provider(
                    ProviderFailure::message("upstream error").with_status(502),
                ));
            }
            let e = runner.store().load_sessions().unwrap().entries["s1"].clone();
            *seen.lock().unwrap() =
                Some((e.model_override, e.model_override_fallback_origin_model));
            Ok::<_, AttemptError>("gpt".to_string())
        }
    };
    let out = h.runner.run(&req(), f).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    let calls: Vec<_> = out.attempts.iter().map(|a| a.model_ref()).collect();
    assert_eq!(
        calls.last().map(String::as_str),
        Some("openai/gpt"),
        "{calls:?}"
    );
    assert_eq!(
        seen.lock().unwrap().clone(),
        Some((Some("gemini".into()), Some("gpt".into()))),
        "during the origin's attempt the override is still the one it came from"
    );
    let e = h.entry("s1");
    assert_eq!(e.model_override, None, "the origin answered: cleared");
    assert_eq!(e.model_override_source, None);
}

// R16.5 (issue 51, D3): which reason a kept window records, ranked by
// behaviour: `skip provider` (auth_permanent) over reasons that are not
// transient (auth, billing) over transient ones (rate_limit, overloaded);
// never a weaker or an equal one; a name the rules do not declare is
// outranked.
#[tokio::test(start_paused = true)]
async fn d3_stronger_reasons_outrank_weaker_ones() {
    let h = setup(BASIC, KEYS);
    let rs = h.runner.engine().ruleset();
    let b = |name: &str| rs.reason(rs.reason_id(name).unwrap()).behaviour.clone();
    let outranks = |new: &str, recorded: &str| (h.runner.outranks(&b(new)))(recorded);
    assert!(outranks("auth", "rate_limit"));
    assert!(outranks("auth_permanent", "auth"));
    assert!(outranks("auth_permanent", "rate_limit"));
    assert!(!outranks("rate_limit", "auth"));
    assert!(!outranks("auth", "auth_permanent"));
    assert!(!outranks("overloaded", "rate_limit"), "equal ranks");
    assert!(!outranks("auth", "billing"), "equal ranks");
    assert!(outranks("rate_limit", "no_such_reason"));
}
