//! Issue 11: status is evidence, not the verdict (SPEC R16.7). A rule that
//! reads the message, the code or the type and matches always beats a
//! rule that guesses from the status alone, because every status guess of
//! the default ruleset comes after every text rule.

use crate::compile::{Expr, TextField, TextTest};
use crate::{Engine, ProviderError};

/// Whether the condition holds only because of something the message,
/// code, type or body says (a `not …` exclusion or `is empty` does not
/// count; provider and model scope a rule, they do not explain an error).
fn reads_text(e: &Expr) -> bool {
    match e {
        Expr::And(p) | Expr::Or(p) => p.iter().any(reads_text),
        Expr::Not(_) | Expr::Status(_) | Expr::StatusEmpty => false,
        Expr::Text(TextField::Provider | TextField::Model, _) => false,
        Expr::Text(_, TextTest::IsEmpty) => false,
        Expr::Text(_, _) => true,
    }
}

fn reads_status(e: &Expr) -> bool {
    match e {
        Expr::And(p) | Expr::Or(p) => p.iter().any(reads_status),
        Expr::Not(_) | Expr::Text(..) | Expr::StatusEmpty => false,
        Expr::Status(_) => true,
    }
}

#[test]
fn every_status_guess_comes_after_every_text_rule() {
    let engine = Engine::builtin();
    let rs = engine.ruleset();
    let file = |i: usize| {
        engine
            .sources()
            .get(rs.rules[i].span.file)
            .name()
            .to_string()
    };
    let guesses: Vec<usize> = (0..rs.rules.len())
        .filter(|&i| reads_status(&rs.rules[i].cond) && !reads_text(&rs.rules[i].cond))
        .collect();
    assert!(guesses.len() >= 10, "{} status guesses", guesses.len());
    let first_guess = guesses[0];
    for &g in &guesses {
        let f = file(g);
        assert!(
            f.ends_with("80-status.rules") || f.ends_with("90-fallbacks.rules"),
            "status guess `{}` in {f}",
            rs.rules[g].id
        );
    }
    // Text rules after the first guess: only the status table's own
    // refinements (which name statuses the earlier guesses do not) and
    // the detail-poor fallbacks.
    for (i, r) in rs.rules.iter().enumerate().skip(first_guess) {
        if reads_text(&r.cond) {
            let f = file(i);
            assert!(
                f.ends_with("80-status.rules") || f.ends_with("90-fallbacks.rules"),
                "text rule `{}` ({f}) comes after the status guess `{}`",
                r.id,
                rs.rules[first_guess].id
            );
        }
    }
}

fn verdict(status: u16, message: &str) -> (String, Option<String>) {
    let engine = Engine::builtin();
    let c = engine.classify(&ProviderError {
        status: Some(status),
        message: Some(message),
        ..Default::default()
    });
    (c.reason.to_string(), c.rule.map(str::to_string))
}

#[test]
fn a_matching_text_beats_the_status_table() {
    // Each status alone would say something else (R16.7).
    for (status, message, want) in [
        (
            403,
            "Country, region, or territory not supported",
            "auth_permanent",
        ),
        (
            401,
            "This key is associated with a deactivated account.",
            "auth_permanent",
        ),
        (
            400,
            "The provided model identifier is invalid.",
            "model_not_found",
        ),
        (
            429,
            "The engine is currently overloaded, please try again later",
            "overloaded",
        ),
        (500, "Context size has been exceeded.", "context_overflow"),
        (404, "Invalid URL (POST /v1/chat/completion)", "format"),
        (403, "Rate limit exceeded", "rate_limit"),
        (
            402,
            "Your credit balance is too low to access the API",
            "billing",
        ),
    ] {
        let (reason, rule) = verdict(status, message);
        assert_eq!(reason, want, "{status} {message:?} (rule {rule:?})");
        let rule = rule.unwrap();
        assert!(
            !rule.contains(".status_"),
            "{status} {message:?} decided by {rule}"
        );
    }
    // With nothing to read, the table decides.
    assert_eq!(verdict(403, "").1.as_deref(), Some("auth.status_401_403"));
    assert_eq!(
        verdict(404, "").1.as_deref(),
        Some("model_not_found.status_404")
    );
    assert_eq!(verdict(402, "").1.as_deref(), Some("billing.402_default"));
}

// R16.7 and REFERENCE a ("inferredStatus"): the status a classification
// uses is the caller's, else one the body states, else one leading the
// text — whichever form the body comes in. The message text is neutral so
// that the status alone decides the reason.
#[test]
fn r16_7_callers_status_beats_the_bodys_which_beats_the_texts() {
    use crate::Body;
    let engine = Engine::builtin_rules();
    let json = serde_json::json!({"error": {"code": 429, "message": "HTTP 401: quux zzyzx"}});
    let text = json.to_string();
    for body in [Body::Json(&json), Body::Text(&text)] {
        let caller = engine.classify(&ProviderError {
            status: Some(503),
            body: Some(body),
            ..Default::default()
        });
        assert_eq!(caller.status, Some(503), "the caller's status wins");
        assert_eq!(caller.reason, verdict(503, "quux zzyzx").0);
        let from_body = engine.classify(&ProviderError {
            body: Some(body),
            ..Default::default()
        });
        assert_eq!(
            from_body.status,
            Some(429),
            "the body's status beats the text's"
        );
        assert_eq!(from_body.reason, "rate_limit");
    }
    let from_text = engine.classify(&ProviderError::message("HTTP 401: quux zzyzx"));
    assert_eq!(from_text.status, Some(401));
    assert_eq!(from_text.reason, verdict(401, "quux zzyzx").0);
    assert_ne!(verdict(503, "quux zzyzx").0, "rate_limit");
    assert_ne!(verdict(401, "quux zzyzx").0, "rate_limit");
}
