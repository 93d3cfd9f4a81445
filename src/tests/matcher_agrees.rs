//! The matcher's shortcuts (atom scan, table lookups, hit bitset) never
//! change a verdict: on the golden cases and 20,000 generated variants,
//! with and without 1,000 operator rules, the fast path decides exactly
//! what verifying every rule in order decides.

use crate::classify::{Body, ProviderError};
use crate::load::build_layers;
use crate::Engine;

#[path = "../../benches/support/corpus.rs"]
mod corpus;

fn check(engine: &Engine, samples: &[corpus::Sample]) {
    for s in samples {
        let e = s.as_error();
        let fast = engine.classify(&e);
        let slow = engine.classify_exhaustive(&e);
        assert_eq!(
            (fast.reason, fast.rule),
            (slow.reason, slow.rule),
            "fast path disagrees on {:?}",
            s
        );
    }
}

#[test]
fn fast_path_agrees_with_exhaustive_verification() {
    let engine = Engine::builtin_rules();
    check(&engine, &corpus::golden_samples());
    check(&engine, &corpus::corpus(20_000, 7));
}

#[test]
fn fast_path_agrees_with_many_operator_rules() {
    let mut rules = corpus::operator_rules(1_000);
    // Some operator rules that do fire on the corpus.
    rules.push_str(
        "rule ops.hit.a when message has \"try again later\" and status == 503 => overloaded\n",
    );
    rules.push_str("rule ops.hit.b when message matches /request id: req_[0-9a-f]{4}/ and provider == \"openai\" => timeout\n");
    let build = build_layers(
        vec![("ops".into(), vec![("ops.rules".into(), rules.into_bytes())])],
        true,
    );
    let engine = Engine::from_build(build).expect("rules compile");
    check(&engine, &corpus::corpus(5_000, 11));
}

#[path = "../../benches/support/naive.rs"]
mod naive;

/// The naive baseline of the benchmarks decides the same reasons as the
/// engine on plain-message inputs (so the comparison is apples to apples).
#[test]
fn naive_baseline_agrees_on_plain_messages() {
    let engine = Engine::builtin_rules();
    let naive = naive::Naive::new(engine.ruleset());
    let mut compared = 0;
    for s in corpus::corpus(5_000, 3) {
        // The naive baseline does not read JSON bodies; skip those inputs.
        if s.message.contains('{') {
            continue;
        }
        let fast = engine.classify(&s.as_error());
        let want = naive
            .classify(&s)
            .map(|r| engine.ruleset().reasons[r].name.as_str())
            .unwrap_or("unclassified");
        assert_eq!(fast.reason, want, "on {s:?}");
        compared += 1;
    }
    assert!(compared > 4_000);
}

/// Reading a JSON body's fields straight from its text (the default) and
/// from the parsed tree (used when some rule reads `body.PATH`) give the
/// same verdicts.
#[test]
fn body_fields_read_from_text_or_tree_agree() {
    let fast = Engine::builtin_rules();
    let rules = "rule ops.tree when body.never.there == \"x\" => timeout\n".to_string();
    let build = build_layers(
        vec![("ops".into(), vec![("ops.rules".into(), rules.into_bytes())])],
        true,
    );
    let tree = Engine::from_build(build).expect("rules compile");
    let mut json = 0;
    let mut samples = corpus::golden_samples();
    samples.extend(corpus::corpus(5_000, 13));
    for s in &samples {
        json += usize::from(s.message.contains('{'));
        let (a, b) = (fast.classify(&s.as_error()), tree.classify(&s.as_error()));
        assert_eq!(
            (a.reason, a.rule, a.status),
            (b.reason, b.rule, b.status),
            "on {s:?}"
        );
    }
    assert!(json > 400, "only {json} samples carry JSON");
}

/// Inputs no gateway should send, built at random from fragments of real
/// error texts, JSON punctuation, characters that fold unusually (`ſ`, the
/// Kelvin sign), CJK text and any status a `u16` holds: nothing panics,
/// and the fast path still decides what verifying every rule decides.
#[test]
fn arbitrary_inputs_do_not_panic_and_agree() {
    const PIECES: &[&str] = &[
        "rate limit",
        " exceeded",
        "HTTP 429: ",
        "429",
        "  ",
        "\n",
        "\t",
        "{",
        "}",
        "\"",
        ":",
        ",",
        "[",
        "]",
        "{\"error\":{\"message\":\"",
        "\"code\":",
        "\"type\":\"",
        "metadata",
        "raw",
        "insufficient credits",
        "ſ",
        "\u{212A}",
        "欠费",
        "余额不足",
        "—",
        "overloaded",
        "context length",
        "prompt is too long",
        "tokens",
        "tpm",
        "402",
        "error:",
        "quota",
        "billing",
        "invalid api key",
        "session not found",
        "é",
        "\u{0}",
        "🙂",
        "Request ID: req_1",
        "unknown error (no error details in response)",
    ];
    let engine = Engine::builtin_rules();
    let mut x = 0x853c_49e6_748f_ea9bu64;
    let mut next = move || {
        x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut text = |n: u64| -> String {
        (0..n)
            .map(|_| PIECES[(next() % PIECES.len() as u64) as usize])
            .collect()
    };
    let mut seen_rules = std::collections::HashSet::new();
    for i in 0..20_000u64 {
        let message = text(i % 13);
        let body = text(i % 7);
        let provider = ["openrouter", "OpenAI", "", "ollama", "ſ"][(i % 5) as usize];
        let code = ["1311", "RESOURCE_EXHAUSTED", "", "insufficient_quota"][(i % 4) as usize];
        let status = [
            None,
            Some(429),
            Some(402),
            Some(0),
            Some(99),
            Some(600),
            Some(u16::MAX),
            Some((i % 700) as u16),
        ][(i % 8) as usize];
        let err = ProviderError {
            provider: (i % 3 != 0).then_some(provider),
            model: (i % 4 == 0).then_some("gpt-4o"),
            status,
            code: (i % 5 == 0).then_some(code),
            error_type: (i % 6 == 0).then_some("overloaded_error"),
            message: (i % 9 != 0).then_some(message.as_str()),
            body: (i % 4 == 1).then_some(Body::Text(body.as_str())),
        };
        let fast = engine.classify(&err);
        let slow = engine.classify_exhaustive(&err);
        assert_eq!(
            (fast.reason, fast.rule),
            (slow.reason, slow.rule),
            "fast path disagrees on {err:?}"
        );
        seen_rules.insert(fast.rule);
    }
    // The inputs reach many rules, not one fallback.
    assert!(
        seen_rules.len() > 20,
        "{} distinct verdicts",
        seen_rules.len()
    );
}
