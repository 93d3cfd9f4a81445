//! Issue 32: the runner's part of a stream that broke after its first
//! byte (a continuation, `RunRequest::resume_after`). Paused time, every
//! state backend (`FAILOVER_TEST_BACKEND`).

use super::run_common::*;
use crate::policy::ModelRef;
use crate::run::{
    AttemptError, AttemptOutcome, DecisionKind, ProviderFailure, RetryBudget, RetryCap, RunRequest,
    StepOutcome,
};

fn resume(served: &[&str]) -> RunRequest {
    let mut r = req();
    r.resume_after = served.iter().map(|m| ModelRef::parse(m).unwrap()).collect();
    r
}

// Issue 32 item 2: the primary's stream broke after the first byte; the
// failure is recorded as the run would have (a cooldown), and the
// continuation starts at the next candidate of the chain, never the one
// that broke, with the usual rules (a failing fallback is left for the
// one after it).
#[tokio::test(start_paused = true)]
async fn a_continuation_starts_after_the_candidate_that_broke() {
    let h = setup(THREE, KEYS);
    let cut = ProviderFailure::message("upstream connection reset in the middle of the stream");
    let reason = h
        .runner
        .record_late_failure("anthropic", "claude", Some("anthropic:default"), &cut)
        .await;
    assert_eq!(reason, "timeout");
    assert!(h.stats("anthropic:default").cooldown_until.is_some());
    let s = Script::default();
    let out = h
        .runner
        .run(&resume(&["anthropic/claude"]), s.f())
        .await
        .unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(s.calls(), ["openai/gpt@openai:default"]);
    assert_eq!(out.attempts.len(), 1);
    assert_eq!(
        out.decisions
            .last()
            .map(|d| (d.decision, d.outcome, d.position)),
        Some((DecisionKind::CandidateSucceeded, StepOutcome::Succeeded, 2))
    );

    // The fallback broke too: the next continuation goes past it (the
    // session now follows its auto override, `openai/gpt` first) and
    // never back to a candidate that served this answer; a failure there
    // ends the run as any run's last candidate does.
    let s = Script::default().on("google/gemini", vec![http(503, "overloaded")]);
    let e = h
        .runner
        .run(&resume(&["anthropic/claude", "openai/gpt"]), s.f())
        .await
        .unwrap_err();
    assert_eq!(s.calls(), ["google/gemini@google:default"]);
    assert_eq!(e.attempts().len(), 1);

    // Every candidate served: nothing is left to continue with.
    let s = Script::default();
    let all = ["anthropic/claude", "openai/gpt", "google/gemini"];
    let e = h.runner.run(&resume(&all), s.f()).await.unwrap_err();
    assert!(s.calls().is_empty());
    assert!(e.attempts().is_empty());
}

fn with_budget(max: u32) -> impl FnOnce(crate::Runner) -> crate::Runner {
    with_budget_within(max, None)
}

fn with_budget_within(
    max: u32,
    within_ms: Option<u64>,
) -> impl FnOnce(crate::Runner) -> crate::Runner {
    move |r| {
        r.with_retries(
            [(
                "anthropic".to_string(),
                RetryBudget {
                    max,
                    within_ms,
                    ..RetryBudget::DEFAULT
                },
            )],
            RetryCap::default(),
        )
    }
}

fn rate_limited(retry_after: Option<&str>) -> Result<(), AttemptError> {
    let headers: Vec<(&str, &str)> = retry_after
        .map(|v| ("retry-after", v))
        .into_iter()
        .collect();
    Err(AttemptError::Provider(ProviderFailure::from_http(
        429,
        headers,
        r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#,
        T0,
    )))
}

fn outcomes(out: &[crate::run::AttemptRecord]) -> Vec<(String, AttemptOutcome)> {
    out.iter().map(|a| (a.model_ref(), a.outcome)).collect()
}

// Issue 32 item 4: a 429 with `Retry-After: 2` is asked again of the same
// candidate after exactly the 2 s it asked for (within the R7.5 cap);
// the retry is an attempt and a decision; no cooldown is recorded
// because the budget was not spent.
#[tokio::test(start_paused = true)]
async fn retry_budget_honours_retry_after() {
    let h = setup_with(BASIC, KEYS, with_budget(2));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("2")), ok()]);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(t.elapsed(), std::time::Duration::from_secs(2));
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert_eq!(
        outcomes(&out.attempts),
        [
            ("anthropic/claude".into(), AttemptOutcome::Retried),
            ("anthropic/claude".into(), AttemptOutcome::Succeeded)
        ]
    );
    assert_eq!(out.attempts[0].reason.as_deref(), Some("rate_limit"));
    let d = &out.decisions[0];
    assert_eq!(
        (d.decision, d.outcome),
        (DecisionKind::RetrySameCandidate, StepOutcome::Retrying)
    );
    assert!(d
        .detail
        .as_deref()
        .unwrap()
        .starts_with("retry 1 of 2 in 2000 ms"));
    // R14.2: the retry's place in the chain; a rule decided it, so no
    // model probability is shown.
    assert_eq!(d.position, 1);
    assert_eq!(d.classified_by, Some("rule"));
    assert_eq!((d.probability, out.attempts[0].probability), (None, None));
    assert!(out.notices.is_empty(), "no fallback happened");
    assert_eq!(h.stats("anthropic:default").cooldown_until, None);
}

// R17.3, issue 44 item 7: `retries: {max: 3}` under a 2 s candidate budget
// (`totalMs`) and `Retry-After: 4`: the wait would end past the budget,
// so no retry is made and the run fails over at once (before: 12 s and
// four calls).
#[tokio::test(start_paused = true)]
async fn i44_7_a_retry_past_the_candidates_budget_is_not_made() {
    let h = setup_with(BASIC, KEYS, with_budget_within(3, Some(2_000)));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("4"))]);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(t.elapsed(), std::time::Duration::ZERO);
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(s.calls().len(), 2, "{:?}", s.calls());
    // Within the budget, the same wait is honoured.
    let h = setup_with(BASIC, KEYS, with_budget_within(3, Some(10_000)));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("4")), ok()]);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(t.elapsed(), std::time::Duration::from_secs(4));
    assert_eq!(out.model_ref(), "anthropic/claude");
    // A wait that ends exactly at the budget's end leaves no time for the
    // call: not made.
    let h = setup_with(BASIC, KEYS, with_budget_within(3, Some(4_000)));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("4")), ok()]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
}

// R17.3, issue 44 item 7: the request's deadline bounds the whole chain: no
// retry whose wait would pass it, and no candidate started after it (the
// rest are skipped as `timeout`, said in the attempts).
#[tokio::test(start_paused = true)]
async fn i44_7_the_request_deadline_bounds_the_chain() {
    let h = setup_with(BASIC, KEYS, with_budget(10));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("60"))]);
    let mut r = req();
    r.deadline_ms = Some(T0 + 30_000);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(t.elapsed(), std::time::Duration::ZERO, "no 60 s wait");
    assert_eq!(out.model_ref(), "openai/gpt");
    // A wait that would end exactly at the deadline is not made either
    // (a fresh state: nothing cooling).
    let h2 = setup_with(BASIC, KEYS, with_budget(10));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("60")), ok()]);
    let mut r = req();
    r.deadline_ms = Some(T0 + 60_000);
    let out = h2.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(s.calls()[0], "anthropic/claude@anthropic:default");
    // Past the deadline, nothing is started.
    let s = Script::default();
    let mut r = req();
    r.deadline_ms = Some(T0);
    let e = h.runner.run(&r, s.f()).await.unwrap_err();
    assert!(s.calls().is_empty(), "{:?}", s.calls());
    assert!(!e.attempts().is_empty());
    for a in e.attempts() {
        assert_eq!(a.outcome, AttemptOutcome::Skipped);
        assert_eq!(a.reason.as_deref(), Some("timeout"));
        assert_eq!(
            a.error.as_deref(),
            Some("the request's deadline passed 0 ms ago")
        );
    }
}

// R7.5: a `Retry-After` of exactly the cap (60 s) is still waited for;
// only a longer one fails over at once.
#[tokio::test(start_paused = true)]
async fn r7_5_a_wait_of_exactly_the_cap_is_retried() {
    let h = setup_with(BASIC, KEYS, with_budget(1));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(Some("60")), ok()]);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(t.elapsed(), std::time::Duration::from_secs(60));
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert_eq!(s.calls().len(), 2);
}

// Issue 32 item 4: a single 500 is retried after a full-jitter backoff
// (at most the 500 ms base).
#[tokio::test(start_paused = true)]
async fn retry_budget_retries_a_server_error_with_jitter() {
    let h = setup_with(BASIC, KEYS, with_budget(1));
    let s = Script::default().on(
        "anthropic/claude",
        vec![http(500, "Internal server error"), ok()],
    );
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert!(
        t.elapsed() <= std::time::Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert_eq!(s.calls().len(), 2);
}

// Issue 32 item 4: the backoff's ceiling doubles per retry (0.5, 1, 2, 4,
// 8, 8 s with the 8 s cap), each wait drawn in full jitter under it. Six
// waits summing to 0.5 s or less happen with a probability under 1e-7; a
// ceiling that fell to 0 after the first retry (`1 >> n` for `1 << n`)
// would give at most 0.5 s in all.
#[tokio::test(start_paused = true)]
async fn retry_backoff_ceilings_double() {
    let h = setup_with(BASIC, KEYS, with_budget(6));
    let s = Script::default().on("anthropic/claude", vec![http(500, "Internal server error")]);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    let waited = t.elapsed();
    assert!(waited > std::time::Duration::from_millis(500), "{waited:?}");
    assert!(
        waited <= std::time::Duration::from_millis(23_500),
        "{waited:?}"
    );
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(s.calls().len(), 8, "1 + 6 retries, then the fallback");
}

// Issue 32 item 4: a persistent 429 is bounded: 1 + `max` calls, the
// backoffs under their ceilings (0.5 + 1 + 2 s: at most 4 calls in the
// first 3.5 s, never hammering), then the cooldown is recorded once and
// the run fails over.
#[tokio::test(start_paused = true)]
async fn a_spent_retry_budget_cools_and_fails_over() {
    let h = setup_with(BASIC, KEYS, with_budget(3));
    let s = Script::default().on("anthropic/claude", vec![rate_limited(None)]);
    let t = tokio::time::Instant::now();
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert!(
        t.elapsed() <= std::time::Duration::from_millis(3_500),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(out.model_ref(), "openai/gpt");
    let claude = s
        .calls()
        .iter()
        .filter(|c| c.starts_with("anthropic/"))
        .count();
    assert_eq!(claude, 4);
    assert_eq!(
        outcomes(&out.attempts)
            .iter()
            .map(|(_, o)| *o)
            .collect::<Vec<_>>(),
        [
            AttemptOutcome::Retried,
            AttemptOutcome::Retried,
            AttemptOutcome::Retried,
            AttemptOutcome::Failed,
            AttemptOutcome::Succeeded
        ]
    );
    let st = h.stats("anthropic:default");
    assert!(st.cooldown_until.is_some());
    assert_eq!(st.error_count, 1, "one failure recorded, not four");
}

// Issue 32 item 4: never retried: a wait past the R7.5 cap (fail over at
// once), a deadline (a silent upstream), a reason that is not a rate
// limit, overload or server error; and with no budget (the default).
#[tokio::test(start_paused = true)]
async fn what_the_retry_budget_never_retries() {
    let timeout = Err(AttemptError::Provider(ProviderFailure::timeout(
        "no first byte",
        std::time::Duration::from_secs(30),
    )));
    for (what, outcome) in [
        ("retry-after past the cap", rate_limited(Some("120"))),
        ("deadline", timeout),
        ("billing", http(402, "Your credit balance is too low")),
        ("format", http(400, "messages: field required")),
        // A status the budget never retries, whatever the reason.
        ("auth", http(401, "Incorrect API key provided")),
        // A retryable status, but a reason that is not retried: billing
        // disables (OpenAI's quota 429, rules/30-billing.cases.yaml), a
        // format error stops.
        (
            "billing under 429",
            Err(AttemptError::Provider(
                ProviderFailure::message(
                    "You exceeded your current quota, please check your plan and billing details.",
                )
                .with_status(429)
                .with_code("insufficient_quota"),
            )),
        ),
        (
            "format under 500",
            http(
                500,
                "max_tokens: 200000 > 64000, which is the maximum allowed number of output tokens",
            ),
        ),
    ] {
        let h = setup_with(BASIC, KEYS, with_budget(3));
        let s = Script::default().on("anthropic/claude", vec![outcome]);
        let t = tokio::time::Instant::now();
        let _ = h.runner.run(&req(), s.f()).await;
        let claude = s
            .calls()
            .iter()
            .filter(|c| c.starts_with("anthropic/"))
            .count();
        assert_eq!(claude, 1, "{what}");
        assert!(t.elapsed().is_zero(), "{what}: waited {:?}", t.elapsed());
    }
    let h = setup(BASIC, KEYS);
    let s = Script::default().on("anthropic/claude", vec![http(500, "boom")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
    assert_eq!(s.calls().len(), 2, "no budget: the original's behaviour");
}

fn windows<'a>(list: &'a [(&'a str, u64)]) -> impl FnOnce(crate::Runner) -> crate::Runner + 'a {
    move |r| r.with_context_windows(list.iter().map(|(m, w)| (ModelRef::parse(m).unwrap(), *w)))
}

const OVERFLOW: &str = "input token count exceeds the maximum number of input tokens";

// SPEC R9.8 (issue 32 item 5): a context overflow skips forward to the
// first later candidate with a larger declared window; the one between
// (smaller) is skipped with the reason, never called; the primary gets
// exactly one attempt and no cooldown.
#[tokio::test(start_paused = true)]
async fn r9_8_context_overflow_skips_to_a_larger_window() {
    let h = setup_with(
        THREE,
        KEYS,
        windows(&[
            ("anthropic/claude", 200_000),
            ("openai/gpt", 128_000),
            ("google/gemini", 1_000_000),
        ]),
    );
    let s = Script::default().on("anthropic/claude", vec![http(400, OVERFLOW)]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "google/gemini");
    assert_eq!(
        s.calls(),
        [
            "anthropic/claude@anthropic:default",
            "google/gemini@google:default"
        ]
    );
    assert_eq!(out.attempts[0].reason.as_deref(), Some("context_overflow"));
    assert_eq!(out.attempts[1].outcome, AttemptOutcome::Skipped);
    assert!(out.attempts[1].error.as_deref().unwrap().contains("128000"));
    assert_eq!(out.decisions[0].position, 1, "R14.2");
    assert_eq!(
        out.decisions[0].to_model.as_deref(),
        Some("google/gemini"),
        "{:?}",
        out.decisions
    );
    assert_eq!(h.stats("anthropic:default").cooldown_until, None);
}

// R9.3, R9.8: only an overflow skips forward to a larger window; a format
// error stops the run even when a larger window follows (the same payload
// fails the same way anywhere).
#[tokio::test(start_paused = true)]
async fn r9_3_a_format_error_stops_before_a_larger_window() {
    let h = setup_with(
        BASIC,
        KEYS,
        windows(&[("anthropic/claude", 200_000), ("openai/gpt", 1_000_000)]),
    );
    let s = Script::default().on(
        "anthropic/claude",
        vec![http(400, "messages: field required")],
    );
    let err = h.runner.run(&req(), s.f()).await.unwrap_err();
    assert_eq!(s.calls(), ["anthropic/claude@anthropic:default"]);
    assert_eq!(err.attempts()[0].reason.as_deref(), Some("format"));
}

// SPEC R9.8 / R9.2: with the failed model's window unknown, or no later
// window larger, the run stops with the overflow as it is.
#[tokio::test(start_paused = true)]
async fn r9_8_without_a_larger_window_the_overflow_stops_the_run() {
    for list in [
        &[("openai/gpt", 1_000_000u64)][..],
        &[("anthropic/claude", 200_000), ("openai/gpt", 100_000)][..],
        // The same window is not a larger one.
        &[("anthropic/claude", 200_000), ("openai/gpt", 200_000)][..],
        &[][..],
    ] {
        let h = setup_with(BASIC, KEYS, windows(list));
        let s = Script::default().on("anthropic/claude", vec![http(400, OVERFLOW)]);
        let e = h.runner.run(&req(), s.f()).await.unwrap_err();
        assert_eq!(s.calls().len(), 1, "{list:?}");
        assert_eq!(e.reason(), Some("context_overflow"));
    }
}

use super::LogCapture;

// Issue 32 items 2 and 4, R14.2: a continuation's decisions are steps of
// type `continuation`; a retry is a `retry_same_candidate` decision.
#[tokio::test(start_paused = true)]
async fn continuation_and_retry_steps_in_the_decision_log() {
    let capture = LogCapture::start();
    let h = setup_with(THREE, KEYS, with_budget(1));
    let mut r = resume(&["anthropic/claude"]);
    r.resume_reason = Some("timeout".into());
    let s = Script::default().on("openai/gpt", vec![http(503, "overloaded")]);
    let out = h.runner.run(&r, s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "google/gemini");
    let log = capture.text();
    let decisions: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("model_fallback_decision"))
        .collect();
    assert_eq!(decisions.len(), 2, "{log}");
    assert!(
        decisions
            .iter()
            .all(|l| l.contains("fallbackStepType=\"continuation\"")),
        "{log}"
    );
    assert!(
        decisions[1].contains("decision=\"candidate_succeeded\""),
        "{log}"
    );
    assert_eq!(
        out.notices[0].to_string(),
        "↪️ Model Fallback: google/gemini (selected anthropic/claude; overloaded)"
    );

    // A retry on the primary, in an ordinary run.
    drop(capture);
    let capture = LogCapture::start();
    let h = setup_with(BASIC, KEYS, with_budget(1));
    let s = Script::default().on("anthropic/claude", vec![http(529, "Overloaded"), ok()]);
    h.runner.run(&req(), s.f()).await.unwrap();
    let log = capture.text();
    let first = log
        .lines()
        .find(|l| l.contains("model_fallback_decision"))
        .unwrap();
    assert!(
        first.contains("decision=\"retry_same_candidate\""),
        "{first}"
    );
    assert!(
        first.contains("fallbackStepFinalOutcome=\"retrying\""),
        "{first}"
    );
}

// Issue 32 item 2: a continuation that saw no failure itself names the
// break in its notice (R13).
#[tokio::test(start_paused = true)]
async fn a_continuation_notice_names_the_break() {
    let h = setup(BASIC, KEYS);
    let mut r = resume(&["anthropic/claude"]);
    r.resume_reason = Some("rate_limit".into());
    let out = h.runner.run(&r, Script::default().f()).await.unwrap();
    assert_eq!(
        out.notices[0].to_string(),
        "↪️ Model Fallback: openai/gpt (selected anthropic/claude; rate limit)"
    );
}

// Issue 32 item 4: a connection reset before the response head (code
// `ECONNRESET`) is retried; a refused connection (no code: the host is
// not there) is not.
#[tokio::test(start_paused = true)]
async fn a_reset_before_the_head_is_retried_a_refused_connection_is_not() {
    let reset = Err(AttemptError::Provider(
        ProviderFailure::transport("network error (127.0.0.1:9)").with_code("ECONNRESET"),
    ));
    let h = setup_with(BASIC, KEYS, with_budget(1));
    let s = Script::default().on("anthropic/claude", vec![reset, ok()]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "anthropic/claude");
    assert_eq!(out.attempts[0].outcome, AttemptOutcome::Retried);
    let refused = Err(AttemptError::Provider(ProviderFailure::transport(
        "connection refused or failed (127.0.0.1:9: connection refused)",
    )));
    let h = setup_with(BASIC, KEYS, with_budget(1));
    let s = Script::default().on("anthropic/claude", vec![refused, ok()]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "openai/gpt");
}

// R14.2: a retry the evidence model decided shows the model's probability
// in its record and its decision, as every other step does. (The shipped
// model decides at 0.9; here any confidence does, so a 501 no rule knows
// is the model's.)
#[tokio::test(start_paused = true)]
async fn r14_2_a_retry_the_model_decided_shows_its_probability() {
    let eager = std::sync::Arc::new(
        crate::Engine::builtin_rules().with_model(crate::evidence::builtin(), 0.0),
    );
    let h = setup_on(eager, BASIC, KEYS, with_budget(1));
    let s = Script::default().on("anthropic/claude", vec![http(501, "zorp fnord quux"), ok()]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    let (a, d) = (&out.attempts[0], &out.decisions[0]);
    assert_eq!(a.outcome, AttemptOutcome::Retried, "{out:?}");
    assert_eq!(
        (a.decided_by, d.classified_by),
        (Some("model"), Some("model"))
    );
    let p = a.probability.expect("the model's probability");
    assert_eq!(d.probability, Some(p));
}

// R10.1, issue 32 item 4: a reason that skips the provider is never
// retried, even one an operator declares without a disable (the shipped
// `auth_permanent` has both, so an operator layer tells them apart).
#[tokio::test(start_paused = true)]
async fn a_reason_that_skips_the_provider_is_not_retried() {
    let dir = failover_testkit::temp_root("run", "skip-provider");
    std::fs::write(
        dir.join("gone.rules"),
        "reason gone { failover; skip provider }\nrule gone.text when message has \"provider gone\" => gone\n",
    )
    .unwrap();
    let build = crate::load::build_unlinted(std::slice::from_ref(&dir), true).unwrap();
    let engine = std::sync::Arc::new(crate::Engine::from_build(build).unwrap());
    let _ = std::fs::remove_dir_all(&dir);
    let h = setup_on(engine, BASIC, KEYS, with_budget(3));
    let s = Script::default().on(
        "anthropic/claude",
        vec![http(503, "provider gone for good")],
    );
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.attempts[0].reason.as_deref(), Some("gone"));
    assert_eq!(
        s.calls(),
        [
            "anthropic/claude@anthropic:default",
            "openai/gpt@openai:default"
        ]
    );
}
