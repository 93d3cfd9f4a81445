//! `failover classify` end to end: the README's command, bad lines, one
//! message with `--explain`, standard input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn readme_command_classifies_every_example_line() {
    let o = failover(&["classify", "examples/errors.jsonl"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let input = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/errors.jsonl"
    ))
    .unwrap();
    let out = stdout(&o);
    assert_eq!(out.lines().count(), input.lines().count());
    for line in out.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert!(
            v["reason"].is_string() && v.get("error").is_none(),
            "{line}"
        );
    }
    insta::assert_snapshot!(out);
}

#[test]
fn bad_lines_are_reported_in_place_and_exit_1() {
    let o = failover(&["classify", "examples/bad-lines.jsonl"]);
    assert_eq!(o.status.code(), Some(1));
    insta::assert_snapshot!(stdout(&o));
}

#[test]
fn one_message_explained() {
    let o = failover(&[
        "classify",
        "--message",
        "HTTP 402: Your weekly usage limit resets tomorrow",
        "--provider",
        "openai-codex",
        "--explain",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    assert!(text.contains("rules/30-billing.rules:"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn reads_standard_input_and_missing_files_are_usage_errors() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["classify", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"{\"message\": \"Overloaded\", \"provider\": \"anthropic\"}\n")
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(
        stdout(&o).trim(),
        r#"{"reason":"overloaded","rule":"overloaded.text","failover":true}"#
    );

    let o = failover(&["classify", "no/such/file.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`no/such/file.jsonl`"));
}
