//! `failover classify` end to end: the README's command, bad lines, one
//! message with `--explain`, standard input.

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .current_dir(crate::repo_root())
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
    let input = std::fs::read_to_string(crate::repo_root().join("examples/errors.jsonl")).unwrap();
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
        r#"{"reason":"overloaded","rule":"overloaded.text","decided_by":"rule","failover":true}"#
    );

    let o = failover(&["classify", "no/such/file.jsonl"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`no/such/file.jsonl`"));
}

/// Issue 11: `--explain` shows the deciding rule's comment (its meaning and
/// sources); issue 16: a comment line that may hold a pasted key is not
/// echoed.
#[test]
fn explain_shows_the_rule_comment_without_secrets() {
    let o = failover(&[
        "classify",
        "--explain",
        "--status",
        "403",
        "--provider",
        "google",
        "--message",
        "Your API key was reported as leaked. Please use another API key.",
    ]);
    let out = stdout(&o);
    assert!(
        out.contains("rule:     auth_permanent.key_revoked"),
        "{out}"
    );
    assert!(out.contains("# Keys reported as leaked"), "{out}");

    let dir = std::env::temp_dir().join(format!("failover-explain-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let key = "sk-proj-AbCdEf0123456789AbCdEf0123456789xyz";
    std::fs::write(
        dir.join("a.rules"),
        format!(
            "reason unclassified {{ failover }}\nreason x {{ failover }}\n# Boom texts.\n# pasted {key}\nrule x.y when message has \"boom\" => x\n"
        ),
    )
    .unwrap();
    let o = failover(&[
        "classify",
        "--no-defaults",
        "--rules",
        dir.to_str().unwrap(),
        "--explain",
        "--message",
        "boom",
    ]);
    let out = stdout(&o);
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(out.contains("# Boom texts."), "{out}");
    assert!(out.contains("line not shown"), "{out}");
    assert!(!out.contains(key) && !out.contains("AbCdEf0123"), "{out}");
}
