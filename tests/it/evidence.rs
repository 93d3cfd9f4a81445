//! Issue 34: the precedence of a verdict (docs/model.md) with a model
//! trained here on a handful of labelled errors: a text rule always beats
//! the model; the model beats a status rule only at or above its
//! threshold; `without_model` gives the rules' verdicts exactly.

use std::sync::Arc;

use failover::evidence::train::Options;
use failover::evidence::Model;
use failover::field::{self, FieldFile};
use failover::learn;
use failover::{Decider, Engine, ProviderError};

/// Region blocks under a 400 (labelled `model_not_found`) and quota
/// texts (`billing`), in wording no default text rule reads.
const CORPUS: &str = r#"
- {status: 400, body: "zorblat region gate: quux not offered here", expected: model_not_found, why: test, source: test}
- {status: 400, body: "zorblat region gate: flim not offered in this zone", expected: model_not_found, why: test, source: test}
- {status: 400, body: "region gate zorblat blocks quux for your zone", expected: model_not_found, why: test, source: test}
- {status: 400, body: "schema mismatch in field frob", expected: format, why: test, source: test}
- {status: 400, body: "schema mismatch: field glorp is malformed", expected: format, why: test, source: test}
- {status: 429, body: "slow down, glorp window full", expected: rate_limit, why: test, source: test}
"#;

fn model() -> Arc<Model> {
    let files: Vec<FieldFile> = vec![field::parse("test.yaml", CORPUS).unwrap()];
    let items = learn::labelled(&files, &[]);
    let rules = Engine::builtin_rules();
    Arc::new(learn::train(&rules, &items, Options::default()).unwrap())
}

#[test]
fn the_model_overrules_a_status_rule_only_at_or_above_its_threshold() {
    let m = model();
    let err = ProviderError::message("zorblat region gate: quux not offered in your zone")
        .with_status(400);
    let rules = Engine::builtin_rules();
    let c = rules.classify(&err);
    assert_eq!(
        (c.reason, c.rule, c.decided_by),
        ("format", Some("format.status_400_422"), Decider::StatusRule)
    );

    let p = Engine::builtin_rules()
        .with_model(m.clone(), 0.0)
        .classify(&err)
        .probability
        .unwrap();
    assert!(p > 0.5, "the toy model reads the family: {p}");

    let at = Engine::builtin_rules().with_model(m.clone(), p);
    let c = at.classify(&err);
    assert_eq!(
        c.reason, "model_not_found",
        "R9.1: at its threshold the model decides"
    );
    assert_eq!(
        (c.decided_by, c.rule, c.overruled),
        (Decider::Model, None, Some("format.status_400_422"))
    );
    assert!(c.failover);

    let above = Engine::builtin_rules().with_model(m, (p + 0.001).min(1.0));
    let c = above.classify(&err);
    assert_eq!(
        (c.reason, c.decided_by),
        ("format", Decider::StatusRule),
        "below its threshold the status rule stands"
    );
    assert_eq!(c.probability, Some(p));
}

#[test]
fn a_text_rule_always_beats_the_model() {
    // `too many requests` is a text rule (rate_limit, not `weak`); the
    // model, at threshold 0, is not even consulted.
    let engine = Engine::builtin_rules().with_model(model(), 0.0);
    let c = engine.classify(
        &ProviderError::message("zorblat region gate: too many requests").with_status(400),
    );
    assert_eq!(c.decided_by, Decider::Rule);
    assert_eq!(
        c.probability, None,
        "a text-rule verdict does not pay for the model"
    );
    assert!(c.rule.is_some());
}

#[test]
fn where_no_rule_matches_the_model_decides_and_unclassified_is_no_evidence() {
    let m = model();
    let engine = Engine::builtin_rules().with_model(m, 0.0);
    let c = engine.classify(&ProviderError::message("zorblat region gate for quux"));
    assert_eq!(
        (c.reason, c.decided_by),
        ("model_not_found", Decider::Model)
    );
    // A model whose top reason is `unclassified` never decides: it says
    // nothing against a status rule.
    assert!(!engine.model_may_give("unclassified"));
    assert!(engine.model_may_give("billing"));
}

#[test]
fn without_the_model_every_verdict_is_the_rules_verdict_exactly() {
    // `--no-model` restores today's verdicts: over the whole field corpus,
    // the engine without a model and the rules' own verdict agree on
    // reason and rule; with the embedded model only non-text verdicts move.
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let with = Engine::builtin();
    let without = Engine::builtin().without_model();
    let mut moved = 0;
    for path in failover::rules::files_with_suffix(&root.join("tests/field"), ".yaml").unwrap() {
        let text = std::fs::read_to_string(&path).unwrap();
        let file = field::parse("f.yaml", &text).unwrap();
        for item in &file.items {
            let err = item.input();
            let a = without.classify(&err);
            let r = with.classify_rules(&err);
            assert_eq!(
                (a.reason, a.rule, a.decided_by),
                (r.reason, r.rule, r.decided_by)
            );
            assert_eq!(a.probability, None);
            let b = with.classify(&err);
            if b.reason != a.reason {
                moved += 1;
                assert_eq!(b.decided_by, Decider::Model);
                assert_ne!(
                    a.decided_by,
                    Decider::Rule,
                    "a text rule's verdict never moves"
                );
            }
        }
    }
    assert!(moved > 0, "the embedded model decides somewhere");
}
