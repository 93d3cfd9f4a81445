//! Issue 11: the default rules on real provider errors. The field corpus
//! (`tests/field`, embedded, what `failover test` reports) holds its floor
//! with no unsafe stop; the original implementation's own test vectors
//! (`tests/vectors/openclaw.yaml`) agree at 95% or more; the held-out set
//! (`tests/holdout`, collected after the rules) keeps its measured level.
//! The vectors and the holdout are judged by the rules and the embedded
//! model together (neither was trained on them); the field corpus by the
//! rules alone.

use std::path::{Path, PathBuf};

use failover::field::{self, FieldFile};
use failover::Engine;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn load(path: &str) -> Vec<FieldFile> {
    let text = std::fs::read_to_string(root().join(path)).unwrap();
    vec![field::parse(path, &text).unwrap()]
}

/// The field corpus (`tests/field/*.yaml`) as (path from the root, text),
/// in path order: what the command line embeds for `failover test`.
fn default_field() -> Vec<(String, String)> {
    let root = root();
    failover::rules::files_with_suffix(&root.join("tests/field"), ".yaml")
        .unwrap()
        .into_iter()
        .map(|p| {
            let name = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

#[test]
fn the_field_corpus_holds_its_floor_with_no_unsafe_stop() {
    // The rules alone: the embedded model learned from this corpus, so
    // its verdicts here would be training-set accuracy (issue 34; it is
    // measured by cross-validation in `failover test`).
    let engine = Engine::builtin_rules();
    let files: Vec<FieldFile> = default_field()
        .iter()
        .map(|(n, t)| field::parse(n, t).unwrap())
        .collect();
    let items: usize = files.iter().map(|f| f.items.len()).sum();
    assert!(items >= 1000, "{items} items");
    let providers: std::collections::BTreeSet<_> = files
        .iter()
        .flat_map(|f| f.items.iter().filter_map(|i| i.provider.clone()))
        .collect();
    assert!(providers.len() >= 50, "{} providers", providers.len());
    let report = field::run(&engine, &files, field::DEFAULT_FLOOR_PCT);
    assert!(report.passed(), "{}", field::render(&report));
}

#[test]
fn the_original_implementations_vectors_agree() {
    let report = field::run(
        &Engine::builtin(),
        &load("tests/vectors/openclaw.yaml"),
        95.0,
    );
    assert!(
        report.total.exact_pct() >= 95.0,
        "{}",
        field::render(&report)
    );
    assert!(
        report.unsafe_stops().count() <= 1,
        "{}",
        field::render(&report)
    );
    // Issue 34: the model at its default threshold costs none of them.
    let rules = field::run(
        &Engine::builtin_rules(),
        &load("tests/vectors/openclaw.yaml"),
        95.0,
    );
    assert!(
        report.total.exact >= rules.total.exact,
        "rules + model {} < rules {}",
        report.total.exact,
        rules.total.exact
    );
}

#[test]
fn the_held_out_set_keeps_its_level() {
    let report = field::run(
        &Engine::builtin(),
        &load("tests/holdout/holdout-2026-12-01.yaml"),
        85.0,
    );
    // Issue 11 targets on unseen errors: >= 85% exact, >= 93% decision,
    // <= 1% unsafe stops.
    assert!(
        report.total.exact_pct() >= 85.0,
        "{}",
        field::render(&report)
    );
    assert!(
        report.total.decision_pct() >= 93.0,
        "{}",
        field::render(&report)
    );
    let stops = report.unsafe_stops().count() as f64 / report.total.items as f64;
    assert!(stops <= 0.01, "{}", field::render(&report));
    // Issue 34: the rules and the model together on what nothing trained
    // on: 90.7% exact, 95.3% decision, no unsafe stop (the rules alone:
    // 90.0%, 94.7%, one).
    assert!(
        report.total.exact_pct() >= 90.5,
        "{}",
        field::render(&report)
    );
    assert!(
        report.total.decision_pct() >= 95.0,
        "{}",
        field::render(&report)
    );
    assert_eq!(
        report.unsafe_stops().count(),
        0,
        "{}",
        field::render(&report)
    );
}
