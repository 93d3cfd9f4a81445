//! `model_fallback_decision` events (R14.2, R16.11). The capture uses a
//! subscriber scoped to this thread; `tracing` may cache a log call site
//! as "never" when another test thread of the same process reaches it
//! first while this subscriber is the only one (that made this test lose
//! its first line now and then when it shared a binary with the other
//! executor tests): [`LogCapture`] keeps a second one alive.

use super::run_common::*;
use super::LogCapture;

// R14.2, R16.11: `model_fallback_decision` events carry the flat step
// fields, enough to rebuild the primary failure, and no secret.
#[tokio::test(start_paused = true)]
async fn r14_2_decision_events() {
    let capture = LogCapture::start();
    let h = setup(BASIC, KEYS);
    let s = Script::default()
        .on(
            "anthropic/claude",
            vec![http(401, "Incorrect API key provided: sk-ant-SECRET-0001")],
        )
        .on("openai/gpt", vec![http(503, "Service overloaded")]);
    let _ = h.runner.run(&req(), s.f()).await.unwrap_err();
    let log = capture.text();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 2, "{log}");
    assert!(lines[0].contains("model_fallback_decision"), "{log}");
    for field in [
        "decision=\"candidate_failed\"",
        "fallbackStepType=\"fallback_step\"",
        "fallbackStepFromModel=anthropic/claude",
        "fallbackStepToModel=\"openai/gpt\"",
        "fallbackStepFromFailureReason=\"auth\"",
        // Issue 48: the cause beside the reason (a 401 answer).
        "fallbackStepFromFailureCause=\"http_4xx\"",
        "fallbackStepFromFailureDetail=\"Incorrect API key provided: <redacted>\"",
        "fallbackStepChainPosition=1",
        "fallbackStepFinalOutcome=\"next_fallback\"",
    ] {
        assert!(lines[0].contains(field), "{field} missing in {}", lines[0]);
    }
    assert!(lines[1].contains("WARN"), "the final failure is a warning");
    assert!(lines[1].contains("fallbackStepFinalOutcome=\"chain_exhausted\""));
    assert!(!log.contains("SECRET"));
}
