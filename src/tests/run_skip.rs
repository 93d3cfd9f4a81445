//! `AttemptError::Skip`: a candidate the caller cannot call (a gateway
//! without an upstream for it, a request its protocol cannot express).

use super::run_common::*;
use crate::run::{AttemptError, AttemptOutcome, DecisionKind, RunError, StepOutcome};

// SPEC R14.1: a skip is recorded with its reason and holds nothing
// against the profile; the run moves to the next candidate, and the
// override it wrote first is rolled back (R11.4).
#[tokio::test(start_paused = true)]
async fn skip_records_the_reason_and_moves_on() {
    let h = setup(THREE, KEYS);
    let s = Script::default().on(
        "openai/gpt",
        vec![Err(AttemptError::Skip(
            "cannot translate `logprobs`".into(),
        ))],
    );
    let s = s.on("anthropic/claude", vec![http(429, "rate limited")]);
    let out = h.runner.run(&req(), s.f()).await.unwrap();
    assert_eq!(out.model_ref(), "google/gemini");
    let skipped = &out.attempts[1];
    assert_eq!(skipped.outcome, AttemptOutcome::Skipped);
    assert_eq!(
        skipped.error.as_deref(),
        Some("cannot translate `logprobs`")
    );
    assert_eq!(skipped.reason, None);
    let d = &out.decisions[1];
    assert_eq!(d.decision, DecisionKind::SkipCandidate);
    assert_eq!(d.to_model.as_deref(), Some("google/gemini"));
    assert_eq!(d.position, 2, "R14.2: the candidate's place in the chain");
    assert_eq!(d.outcome, StepOutcome::NextFallback);
    assert_eq!(h.stats("openai:default").error_count, 0);
    assert!(h.stats("openai:default").cooldown_until.is_none());

    // Alone, a skip ends the run as a summary with that one record.
    let h = setup(BASIC, KEYS);
    let s = Script::default()
        .on("anthropic/claude", vec![http(429, "rate limited")])
        .on(
            "openai/gpt",
            vec![Err(AttemptError::Skip("no upstream".into()))],
        );
    match h.runner.run(&req(), s.f()).await {
        Err(RunError::Summary(sum)) => {
            assert_eq!(sum.attempts.len(), 2);
            assert_eq!(sum.attempts[1].outcome, AttemptOutcome::Skipped);
        }
        other => panic!("{other:?}"),
    }
    assert!(h.entry("s1").model_override.is_none(), "rolled back");
}
