//! `failover test` driven from an operator's own directory (issue 15 item
//! 1): the layer view, failures with `file:line:col` and why, `--accept`
//! rewriting in place, `--add-from`, cases-file diagnostics; the `--json`
//! documents of `check` and `test` (item 2); and the terminal conventions
//! (item 6): exit codes in every `--help`, completions, the man page,
//! colour.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn failover_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .current_dir(dir)
        .env_remove("NO_COLOR")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A fresh working directory holding `ops/` with the given files.
fn workdir(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("failover-test-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("ops")).unwrap();
    for (name, body) in files {
        std::fs::write(dir.join("ops").join(name), body).unwrap();
    }
    dir
}

const ACME_RULES: &str = "provider acme {\n  rule overloaded.acme.queue_full\n    when message matches /\\bqueue (is )?full\\b/\n    => overloaded\n}\n";

/// Line 4 expects the wrong reason and rule; the comments and the flow
/// case must survive `--accept` byte for byte.
const ACME_CASES: &str = "# Acme's proxy errors.\n- {message: \"queue full\", provider: acme, expect: overloaded, rule: overloaded.acme.queue_full}\n# wrong on purpose:\n- message: \"upstream queue is full, retry later\"   # as logged\n  provider: acme\n  expect: rate_limit       # the reason\n  rule: \"rate_limit.acme\"  # the rule\n";

#[test]
fn the_layer_view_reports_only_the_operator_layer() {
    let dir = workdir(
        "layer",
        &[
            ("acme.rules", ACME_RULES),
            (
                "acme.cases.yaml",
                "- {message: \"queue full\", provider: acme, expect: overloaded, rule: overloaded.acme.queue_full}\n",
            ),
        ],
    );
    let o = failover_in(&dir, &["test", "--rules", "ops", "--no-field"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = stdout(&o);
    assert!(out.contains("overloaded.acme.queue_full"), "{out}");
    assert!(!out.contains("billing.credits"), "{out}");
    assert!(
        out.contains("1 passed, 0 failed; 1 of 1 rules decided by a case"),
        "{out}"
    );
    // `--all`: every layer's rules and cases, the defaults' too.
    let o = failover_in(&dir, &["test", "--rules", "ops", "--no-field", "--all"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = stdout(&o);
    assert!(out.contains("billing.credits"), "{out}");
    assert!(!out.contains(" 1 passed, "), "{out}");
}

#[test]
fn a_failing_case_names_its_place_expectation_and_why() {
    let dir = workdir(
        "fail",
        &[("acme.rules", ACME_RULES), ("acme.cases.yaml", ACME_CASES)],
    );
    let o = failover_in(&dir, &["test", "--rules", "ops", "--no-field"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = stdout(&o);
    assert!(
        out.contains("  ops/acme.cases.yaml:4:3: case #2: expected `rate_limit`, got `overloaded`; expected rule `rate_limit.acme`, got `overloaded.acme.queue_full`"),
        "{out}"
    );
    assert!(
        out.contains("    expected: rate_limit (rule rate_limit.acme)"),
        "{out}"
    );
    assert!(
        out.contains("    got:      overloaded (rule overloaded.acme.queue_full)"),
        "{out}"
    );
    // The `--explain` account, naming the deciding rule's place.
    assert!(
        out.contains("    why:\n      reason:   overloaded"),
        "{out}"
    );
    assert!(
        out.contains("overloaded.acme.queue_full at ops/acme.rules:2:8"),
        "{out}"
    );
}

#[test]
fn accept_shows_the_diff_refuses_without_a_terminal_and_rewrites_with_yes() {
    let dir = workdir(
        "accept",
        &[("acme.rules", ACME_RULES), ("acme.cases.yaml", ACME_CASES)],
    );
    let cases = dir.join("ops/acme.cases.yaml");
    // No terminal (stdin is not one here), no --yes: the diff, then a refusal.
    let o = failover_in(&dir, &["test", "--rules", "ops", "--accept"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let diff = "--- ops/acme.cases.yaml\n+++ ops/acme.cases.yaml\n@@ -6,2 +6,2 @@\n-  expect: rate_limit       # the reason\n-  rule: \"rate_limit.acme\"  # the rule\n+  expect: overloaded       # the reason\n+  rule: \"overloaded.acme.queue_full\"  # the rule\n";
    assert_eq!(stdout(&o), diff);
    assert!(text(&o).contains("run again with `--yes`"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&cases).unwrap(), ACME_CASES);
    // `--bless --yes`: written; only the two values changed.
    let o = failover_in(&dir, &["test", "--rules", "ops", "--bless", "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        stdout(&o).ends_with("wrote 1 accepted case to 1 file\n"),
        "{}",
        text(&o)
    );
    let want = ACME_CASES
        .replace("expect: rate_limit ", "expect: overloaded ")
        .replace("\"rate_limit.acme\"", "\"overloaded.acme.queue_full\"");
    assert_eq!(std::fs::read_to_string(&cases).unwrap(), want);
    let o = failover_in(&dir, &["test", "--rules", "ops"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = failover_in(&dir, &["test", "--rules", "ops", "--accept"]);
    assert_eq!(stdout(&o), "nothing to accept: every case passes\n");
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn add_from_appends_cases_with_their_current_verdicts() {
    let dir = workdir(
        "add",
        &[
            ("acme.rules", ACME_RULES),
            (
                "acme.cases.yaml",
                "- {message: \"queue full\", provider: acme, expect: overloaded, rule: overloaded.acme.queue_full}\n",
            ),
        ],
    );
    std::fs::write(
        dir.join("errors.jsonl"),
        "{\"provider\": \"acme\", \"message\": \"the queue is full\"}\n\n\
         {\"status\": \"429\", \"body\": {\"error\": {\"message\": \"Rate limit \\\"hit\\\"\\nretry\", \"code\": \"rate_limit_exceeded\"}}}\n\
         [1, 2]\n",
    )
    .unwrap();
    let o = failover_in(
        &dir,
        &[
            "test",
            "--rules",
            "ops",
            "--add-from",
            "errors.jsonl",
            "--yes",
        ],
    );
    // The bad line 4 is skipped and named; the others are added.
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("errors.jsonl:4: expected a JSON object per line"),
        "{}",
        text(&o)
    );
    let added = std::fs::read_to_string(dir.join("ops/added.cases.yaml")).unwrap();
    assert!(added.starts_with("# errors.jsonl:1 (added with its current verdict: review it)\n- provider: \"acme\"\n  message: \"the queue is full\"\n  expect: overloaded\n  rule: overloaded.acme.queue_full\n# errors.jsonl:3 "), "{added}");
    let o = failover_in(&dir, &["test", "--rules", "ops", "--no-field"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(stdout(&o).contains("3 passed, 0 failed"), "{}", stdout(&o));
}

#[test]
fn cases_file_problems_are_diagnostics_and_exit_1() {
    let dir = workdir(
        "diag",
        &[
            ("acme.rules", ACME_RULES),
            (
                "acme.cases.yaml",
                "- message: \"queue full\"\n  provider: acme\n  expcet: overloaded\n",
            ),
        ],
    );
    let o = failover_in(&dir, &["test", "--rules", "ops"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with(
            "error[E018]: unknown field `expcet` in a golden case\n --> ops/acme.cases.yaml:3:3\n"
        ),
        "{err}"
    );
    assert!(err.contains("3 |   expcet: overloaded\n  |   ^^^^^^ no case has this field\n  = help: did you mean `expect`?"), "{err}");
    let o = failover_in(&dir, &["test", "--rules", "ops", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["diagnostics"][0]["code"], "E018");
    assert_eq!(doc["diagnostics"][0]["line"], 3);
}

/// Explanations name lines of the default rules, which move as they are
/// edited: the snapshot shows that they are there, the test above what
/// they say.
fn stable_json(o: &Output) -> String {
    let mut doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    if let Some(failures) = doc["failures"].as_array_mut() {
        for f in failures {
            if f["explain"].is_string() {
                f["explain"] = "(the --explain text)".into();
            }
        }
    }
    serde_json::to_string_pretty(&doc).unwrap()
}

#[test]
fn test_json_has_a_stable_schema() {
    let dir = workdir(
        "json",
        &[("acme.rules", ACME_RULES), ("acme.cases.yaml", ACME_CASES)],
    );
    let o = failover_in(&dir, &["test", "--rules", "ops", "--no-field", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    insta::assert_snapshot!(stable_json(&o));
    // With the field corpus: its summary under `field`.
    let o = failover_in(&dir, &["test", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["schema"], "failover.test/2");
    assert_eq!(doc["scope"], "all");
    assert_eq!(doc["field"]["passed"], true);
    assert!(
        doc["field"]["items"].as_u64().unwrap() >= 600,
        "{}",
        doc["field"]
    );
    assert!(doc["field"]["exact_pct"].as_f64().unwrap() >= 80.0);
    // Issue 34: the evidence model's honest rows beside the rules'.
    let model = &doc["field"]["model"];
    assert_eq!(model["folds"], 10);
    for rows in ["cross_validated", "holdout"] {
        for row in ["rules", "model", "combined"] {
            assert!(
                model[rows][row]["items"].as_u64().unwrap() >= 150,
                "{model}"
            );
        }
    }
    // The costs' thresholds, then each single one of the sweep.
    assert_eq!(model["thresholds"].as_array().unwrap().len(), 10);
    assert!(doc["failures"].as_array().unwrap().is_empty());
}

#[test]
fn check_json_has_a_stable_schema() {
    let dir = workdir(
        "check-json",
        &[(
            "bad.rules",
            "rule ops.typo when status == 429 => rate_limt\nrule ops.slow when message matches /.*/ => rate_limit\n",
        )],
    );
    let o = failover_in(&dir, &["check", "--rules", "ops", "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let mut doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    // The defaults' file count moves as rules files are added.
    assert!(doc["files"].as_u64().unwrap() > 10);
    doc["files"] = "(the rules files read)".into();
    insta::assert_snapshot!(serde_json::to_string_pretty(&doc).unwrap());
    let o = failover_in(&dir, &["check", "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["schema"], "failover.check/1");
    assert_eq!(doc["ok"], true);
    assert!(doc["rules"].as_u64().unwrap() > 50);
}

#[test]
fn every_help_lists_its_exit_codes() {
    let dir = std::env::temp_dir();
    let top = failover_in(&dir, &["--help"]);
    let help = stdout(&top);
    assert!(help.contains("Exit codes:\n  0  success"), "{help}");
    let commands: Vec<String> = help
        .split("Commands:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.starts_with("  "))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .filter(|c| c != "help")
        .collect();
    assert!(commands.len() >= 9, "{commands:?}");
    for c in &commands {
        let o = failover_in(&dir, &[c, "--help"]);
        assert_eq!(o.status.code(), Some(0), "{c}");
        let out = stdout(&o);
        assert!(out.contains("Exit codes:\n  0  "), "`{c} --help`:\n{out}");
        assert!(out.contains("\n  2  usage errors"), "`{c} --help`:\n{out}");
    }
}

#[test]
fn completions_and_the_man_page_come_from_the_cli_definition() {
    let dir = workdir("man", &[]);
    let o = failover_in(&dir, &["completions", "bash"]);
    assert_eq!(o.status.code(), Some(0));
    let bash = stdout(&o);
    assert!(
        bash.contains("_failover()") && bash.contains("--accept"),
        "{bash}"
    );
    let o = failover_in(&dir, &["completions", "klingon"]);
    assert_eq!(o.status.code(), Some(2));
    // The pages in docs/man are what `failover man --dir` writes now.
    let o = failover_in(&dir, &["man", "--dir", "ops"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let shipped = crate::repo_root().join("docs/man");
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&dir.join("ops")),
        names(&shipped),
        "regenerate with `cargo run -- man --dir docs/man`"
    );
    for name in names(&shipped) {
        assert_eq!(
            std::fs::read_to_string(dir.join("ops").join(&name)).unwrap(),
            std::fs::read_to_string(shipped.join(&name)).unwrap(),
            "docs/man/{name} is stale: regenerate with `cargo run -- man --dir docs/man`"
        );
    }
    let page = std::fs::read_to_string(shipped.join("failover-test.1")).unwrap();
    assert!(
        page.contains("\\-\\-accept") && page.contains("Exit codes"),
        "{page}"
    );
}

#[test]
fn colour_on_request_and_never_when_piped_or_no_color() {
    let dir = workdir(
        "colour",
        &[(
            "bad.rules",
            "rule ops.typo when status == 429 => rate_limt\n",
        )],
    );
    let piped = failover_in(&dir, &["check", "--rules", "ops"]);
    assert!(!text(&piped).contains('\x1b'), "{}", text(&piped));
    let forced = failover_in(&dir, &["check", "--rules", "ops", "--color", "always"]);
    let out = stdout(&forced);
    assert!(out.contains("\x1b[1;31merror\x1b[0m"), "{out:?}");
    let stripped = regex::Regex::new("\x1b\\[[0-9;]*m")
        .unwrap()
        .replace_all(&out, "");
    assert_eq!(stripped, stdout(&piped));
    let never = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["check", "--rules", "ops", "--color=never"])
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    assert_eq!(stdout(&never), stdout(&piped));
}

/// Runs `failover ARGS` on a terminal (a pty from util-linux `script`),
/// typing `input`; returns what the terminal showed.
fn on_a_terminal(dir: &Path, args: &str, no_color: bool, input: &str) -> String {
    use std::io::Write;
    let mut c = Command::new("script");
    c.args([
        "-qec",
        &format!("{} {args}", env!("CARGO_BIN_EXE_failover")),
        "/dev/null",
    ])
    .current_dir(dir)
    .env_remove("NO_COLOR")
    .env("TERM", "xterm")
    .stdin(std::process::Stdio::piped())
    .stdout(std::process::Stdio::piped());
    if no_color {
        c.env("NO_COLOR", "1");
    }
    let mut child = c.spawn().expect("util-linux `script` runs the pty tests");
    // Held open until the command ends: `script` stops at end of input.
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    String::from_utf8_lossy(&out.stdout).replace("\r\n", "\n")
}

#[test]
fn colour_on_a_terminal_unless_no_color() {
    let dir = workdir(
        "tty",
        &[(
            "bad.rules",
            "rule ops.typo when status == 429 => rate_limt\n",
        )],
    );
    let tty = on_a_terminal(&dir, "check --rules ops", false, "");
    assert!(tty.contains("\x1b[1;31merror\x1b[0m"), "{tty:?}");
    let plain = on_a_terminal(&dir, "check --rules ops", true, "");
    assert!(
        plain.contains("error[E002]") && !plain.contains('\x1b'),
        "{plain:?}"
    );
}

#[test]
fn accept_on_a_terminal_asks_before_writing() {
    let dir = workdir(
        "ask",
        &[("acme.rules", ACME_RULES), ("acme.cases.yaml", ACME_CASES)],
    );
    let cases = dir.join("ops/acme.cases.yaml");
    let shown = on_a_terminal(
        &dir,
        "--color never test --rules ops --accept",
        false,
        "n\n",
    );
    assert!(
        shown.contains("write 1 accepted case to 1 file? [y/N]"),
        "{shown}"
    );
    assert!(shown.contains("nothing written"), "{shown}");
    assert_eq!(std::fs::read_to_string(&cases).unwrap(), ACME_CASES);
    let shown = on_a_terminal(
        &dir,
        "--color never test --rules ops --accept",
        false,
        "y\n",
    );
    assert!(shown.contains("wrote 1 accepted case to 1 file"), "{shown}");
    assert!(std::fs::read_to_string(&cases)
        .unwrap()
        .contains("expect: overloaded       # the reason"));
}

// Issue 35: with `--rules`, the operator's cases are followed by the field
// corpus's summary only (its totals); `--field-report` (or `--all`) prints
// the whole report, as a run on the defaults alone does.
#[test]
fn field_report_is_a_summary_under_rules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let short = failover_in(&root, &["test", "--rules", "examples/operator-rules"]);
    assert_eq!(short.status.code(), Some(0), "{}", text(&short));
    let out = stdout(&short);
    let field = &out[out.find("field corpus:").expect("a field summary")..];
    assert!(field.contains("exact agreement"), "{field}");
    assert!(field.contains("unsafe failovers"), "{field}");
    assert!(!field.contains("items    exact"), "no tables: {field}");
    assert!(field.contains("--field-report"), "{field}");
    assert!(field.lines().count() <= 9, "{field}");
    for flag in ["--field-report", "--all"] {
        let long = failover_in(&root, &["test", "--rules", "examples/operator-rules", flag]);
        assert_eq!(long.status.code(), Some(0), "{}", text(&long));
        assert!(
            stdout(&long).contains("items    exact"),
            "{flag}: {}",
            stdout(&long)
        );
    }
}
