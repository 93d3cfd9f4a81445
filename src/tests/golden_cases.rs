//! The golden cases of the default ruleset: every case passes, every rule
//! is decided by some case, and each cases file has a reviewed snapshot of
//! its verdicts (`cargo insta review` is the operator's review screen).

use super::{default_cases, repo_root};
use crate::golden::{self, parse_cases};
use crate::Engine;

#[test]
fn default_cases_pass_and_cover_every_rule() {
    let engine = Engine::builtin();
    let files: Vec<_> = default_cases()
        .iter()
        .map(|(n, t)| parse_cases(n, t).unwrap())
        .collect();
    let report = golden::run(&engine, &files);
    assert!(report.passed(), "{}", golden::render_report(&report));
    let total: usize = files.iter().map(|f| f.cases.len()).sum();
    assert!(total >= 250, "only {total} golden cases");
    for (reason, tally) in &report.by_reason {
        assert!(
            tally.cases >= 5,
            "reason `{reason}` has only {} cases",
            tally.cases
        );
    }
}

#[test]
fn cases_files_snapshot_their_verdicts() {
    let engine = Engine::builtin();
    let root = repo_root();
    insta::glob!("../../rules", "**/*.cases.yaml", |path| {
        let name = crate::syntax::display_name(path.strip_prefix(&root).unwrap());
        let file = parse_cases(&name, &std::fs::read_to_string(path).unwrap()).unwrap();
        let report = golden::run(&engine, std::slice::from_ref(&file));
        insta::assert_snapshot!(golden::render_case_table(&report, &name));
    });
}

#[test]
fn a_wrong_expectation_is_reported_as_a_miss() {
    let engine = Engine::builtin();
    let file = parse_cases(
        "t.cases.yaml",
        "- {message: \"Too many requests\", status: 429, expect: billing, rule: billing.credits}\n",
    )
    .unwrap();
    let report = golden::run(&engine, &[file]);
    assert_eq!(report.failed(), 1);
    assert_eq!(report.by_reason["billing"].misses, 1);
    assert_eq!(report.by_reason["rate_limit"].false_alarms, 1);
    let text = golden::render_report(&report);
    assert!(
        text.contains("expected `billing`, got `rate_limit`"),
        "{text}"
    );
}

#[test]
fn malformed_cases_file_names_the_file_and_line() {
    let err = parse_cases(
        "x.cases.yaml",
        "- {message: \"a\", expect: billing, colour: red}\n",
    )
    .unwrap_err();
    let shown = err.render();
    assert!(
        shown.starts_with("error[E018]: unknown field `colour`"),
        "{shown}"
    );
    assert!(shown.contains(" --> x.cases.yaml:1:35"), "{shown}");
    let shown = parse_cases("y.cases.yaml", "- {message: \"a\"}\n")
        .unwrap_err()
        .render();
    assert!(shown.contains("error[E020]"), "{shown}");
    assert!(shown.contains("neither `expect` nor `not`"), "{shown}");
}
