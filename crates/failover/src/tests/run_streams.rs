//! Issue 32: the runner's part of a stream that broke after its first
//! byte (a continuation, `RunRequest::resume_after`). Paused time, every
//! state backend (`FAILOVER_TEST_BACKEND`).

use super::run_common::*;
use crate::policy::ModelRef;
use crate::run::{DecisionKind, ProviderFailure, RunRequest, StepOutcome};

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
