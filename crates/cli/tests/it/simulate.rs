//! `failover simulate`: every shipped scenario holds its expectations, the
//! rate-limit-recovery timeline is snapshotted, mismatches and bad files
//! are reported.

use std::process::Command;
use std::sync::Arc;

use failover::scenario::simulate_file;
use failover::Engine;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_failover"))
}

// SPEC R6–R14: one scenario per section, each with `expect:`.
#[test]
fn every_scenario_holds() {
    let engine = Arc::new(Engine::builtin());
    let dir = crate::repo_root().join("examples/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    for f in files {
        let report = simulate_file(&f, engine.clone()).unwrap_or_else(|e| panic!("{e}"));
        let with_expect = std::fs::read_to_string(&f).unwrap().contains("expect:");
        assert!(with_expect, "{} has no expect:", f.display());
        assert_eq!(
            report.mismatches(),
            0,
            "{}:\n{}",
            f.display(),
            failover::scenario::render(&report)
        );
    }
}

#[test]
fn rate_limit_recovery_timeline() {
    let out = bin()
        .current_dir(crate::repo_root())
        .args(["simulate", "examples/scenarios/rate-limit-recovery.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    insta::assert_snapshot!("simulate_rate_limit_recovery", text);
}

#[test]
fn json_output_parses() {
    let out = bin()
        .current_dir(crate::repo_root())
        .args(["simulate", "examples/scenarios/r14-summary.yaml", "--json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["turns"][0]["result"]["ok"], false);
    assert_eq!(v["turns"][0]["attempts"][0]["reason"], "rate_limit");
    assert_eq!(v["turns"][0]["soonestCooldownExpiry"], "+1m");
}

fn scenario_file(name: &str, text: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("failover-sim-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

// A failed expectation exits 1 with a readable diff.
#[test]
fn mismatch_exits_1_with_a_diff() {
    let p = scenario_file(
        "mismatch.yaml",
        "
config: { agents: { defaults: { model: { primary: a/x, fallbacks: [b/y] } } } }
profiles: { 'a:default': sk-fake-aaaa, 'b:default': sk-fake-bbbb }
turns:
  - outcomes: [{ match: a/x, error: { status: 429, message: slow down } }]
    expect:
      attempts: [a/x failed overloaded, b/y succeeded]
      model: a/x
",
    );
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("MISMATCH  attempts differ:\n    - a/x failed overloaded\n    - b/y succeeded\n    + a/x failed rate_limit\n    + b/y succeeded"), "{text}");
    assert!(
        text.contains("MISMATCH  model: expected `a/x`, got `b/y`"),
        "{text}"
    );
    assert!(text.contains("failed: 2 expectation(s) did not hold"));
}

// Bad input: a missing file, an unknown key, a bad operation exit 2.
#[test]
fn bad_scenarios_exit_2() {
    let out = bin()
        .args(["simulate", "/nonexistent/x.yaml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let p = scenario_file(
        "bad.yaml",
        "config: { agents: { defaults: { model: { primary: a/x } } } }\nturns: [{ opp: /new }]\n",
    );
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown field `opp`"));
    let p = scenario_file(
        "badop.yaml",
        "config: { agents: { defaults: { model: { primary: a/x } } } }\nturns: [{ op: /frob }]\n",
    );
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown operation `/frob`"));
}

// Issue 16 item 1: a scenario whose prose has an apostrophe (the shipped
// r13 one says "attempt's") kept the former bracket guard off; deep
// nesting after it is now refused at once, with line:col, and an alias
// bomb is refused before any tree is built.
#[test]
fn deep_or_exploding_scenarios_are_refused_up_front() {
    let n = 100_000;
    let p = scenario_file(
        "deep.yaml",
        &format!(
            "# the attempt's reason\nnote: don't\nconfig: {}{}\nturns: []\n",
            "[".repeat(n),
            "]".repeat(n)
        ),
    );
    let started = std::time::Instant::now();
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("deep.yaml`:3:"), "{err}");
    assert!(err.contains("nested more than 64 deep"), "{err}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let mut bomb = String::from("note: don't\nconfig:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..9 {
        let refs = vec![format!("*a{}", i - 1); 10].join(", ");
        bomb.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
    }
    let p = scenario_file("bomb.yaml", &bomb);
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("aliases expand to more than"), "{err}");
}

// R16.11: fake secrets never reach the timeline.
#[test]
fn r16_11_no_secret_in_timeline() {
    let p = scenario_file(
        "secret.yaml",
        "
config: { agents: { defaults: { model: { primary: a/x, fallbacks: [b/y] } } } }
profiles: { 'a:default': sk-fake-SECRET-aaaa, 'b:default': sk-fake-SECRET-bbbb }
turns:
  - outcomes: [{ match: a/x, error: { status: 401, message: 'Incorrect API key provided: sk-fake-SECRET-aaaa' } }]
",
    );
    for json in [false, true] {
        let mut c = bin();
        c.arg("simulate").arg(&p);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("<redacted>"), "{text}");
        assert!(!text.contains("SECRET"), "{text}");
    }
}

// Issue 16 item 7: a provider error that echoes a stored key upper-cased,
// or only its first 30 characters, reached `simulate` output and notices
// (scrubbing removed exact matches only). R16.11.
#[test]
fn r16_11_partial_and_case_changed_echoes_are_scrubbed() {
    let key = "sk-fake-q8Kd93jLqP0xZ7vB2nM4cT6yW1eR5uI";
    let upper = key.to_ascii_uppercase();
    let head = &key[..30];
    let tail = &key[key.len() - 14..];
    let p = scenario_file(
        "secret-echo.yaml",
        &format!(
            "
config: {{ agents: {{ defaults: {{ model: {{ primary: a/x, fallbacks: [b/y, c/z] }} }} }} }}
profiles: {{ 'a:default': {key}, 'b:default': {key}, 'c:default': {key} }}
turns:
  - outcomes:
      - {{ match: a/x, error: {{ message: 'weird failure for {upper}' }} }}
      - {{ match: b/y, error: {{ status: 401, message: 'Incorrect API key provided: {head}…' }} }}
      - {{ match: c/z, error: {{ status: 401, message: 'key ending {tail} is revoked' }} }}
"
        ),
    );
    for json in [false, true] {
        let mut c = bin();
        c.arg("simulate").arg(&p);
        if json {
            c.arg("--json");
        }
        let out = c.output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("<redacted>"), "{text}");
        for piece in [&key[8..20], &upper[8..20], &key[20..32]] {
            assert!(!text.contains(piece), "`{piece}` in:\n{text}");
        }
    }
}

// Issue 16 item 11: a turn that goes back in time was accepted and run
// later than written; it is refused with the line and column of its `at`.
#[test]
fn a_turn_back_in_time_is_refused_with_its_position() {
    let p = scenario_file(
        "backwards.yaml",
        "config: { agents: { defaults: { model: { primary: a/x } } } }
profiles: { 'a:default': sk-fake-aaaa }
turns:
  - at: +10m
  - at: +5m
",
    );
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("backwards.yaml`:5:9: turn 2: `at: +5m` is before"),
        "{err}"
    );
    assert!(err.contains("+10m"), "{err}");
}
