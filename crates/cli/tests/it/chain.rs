//! `failover chain` end to end: the binary against the configs shipped in
//! `examples/configs/`, snapshots of what an operator reads, and bad input.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

/// Runs `failover chain ARGS` from the repository root (so paths in messages are
/// stable); returns (exit code, stdout, stderr).
fn chain(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_failover"))
        .arg("chain")
        .args(args)
        .current_dir(crate::repo_root())
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    (
        out.status.code().expect("exited, not killed"),
        String::from_utf8(out.stdout).unwrap(),
        stderr,
    )
}

/// What a snapshot shows: the command, exit code, stdout and stderr.
fn transcript(args: &[&str]) -> String {
    let (code, stdout, stderr) = chain(args);
    let mut s = format!("$ failover chain {}\nexit: {code}\n", args.join(" "));
    if !stdout.is_empty() {
        s.push_str("--- stdout\n");
        s.push_str(&stdout);
    }
    if !stderr.is_empty() {
        s.push_str("--- stderr\n");
        s.push_str(&stderr);
    }
    s
}

fn json_of(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let (code, stdout, stderr) = chain(&all);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout.lines().count(), 1, "one JSON line: {stdout}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// A scratch directory for one test, removed first so reruns start clean.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("failover-chain-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

const GATEWAY: &str = "examples/configs/gateway.yaml";

/// (what the row shows, extra flags, source, strict, candidates).
type SourceRow = (
    &'static str,
    &'static [&'static str],
    &'static str,
    bool,
    &'static [&'static str],
);

// `--json` prints `{"source", "strict", "candidates"}` first; one row per R3
// source, through the real binary and the default ruleset.
#[test]
fn r3_each_source_through_the_cli() {
    let rows: &[SourceRow] = &[
        (
            "R3 configured default",
            &[],
            "configured_default",
            false,
            &[
                "anthropic/claude-opus-4-6",
                "openai/gpt-5.2",
                "openrouter/meta-llama/llama-3-70b",
                "ollama/qwen3.5:27b",
            ],
        ),
        (
            "R3 agent primary, model as a string: strict",
            &["--agent", "coder"],
            "agent_primary",
            true,
            &["anthropic/claude-sonnet-4-5"],
        ),
        (
            "R3 agent primary with its own fallbacks",
            &["--agent", "researcher"],
            "agent_primary",
            false,
            &[
                "google/gemini-3-pro",
                "openai/gpt-5.2",
                "anthropic/claude-opus-4-6",
            ],
        ),
        (
            "R3 agent primary, fallbacks: [] is explicitly strict",
            &["--agent", "auditor"],
            "agent_primary",
            true,
            &["openai/o3"],
        ),
        (
            "R3 agent without a model uses the configured default",
            &["--agent", "helper"],
            "configured_default",
            false,
            &[
                "anthropic/claude-opus-4-6",
                "openai/gpt-5.2",
                "openrouter/meta-llama/llama-3-70b",
                "ollama/qwen3.5:27b",
            ],
        ),
        (
            "R3 auto override keeps walking the configured chain",
            &["--session-override", "openai/gpt-5.2", "--source", "auto"],
            "auto_override",
            false,
            &[
                "openai/gpt-5.2",
                "openrouter/meta-llama/llama-3-70b",
                "ollama/qwen3.5:27b",
                "anthropic/claude-opus-4-6",
            ],
        ),
        (
            "R3 user override is strict",
            &["--session-override", "openai/gpt-5.2", "--source", "user"],
            "user_override",
            true,
            &["openai/gpt-5.2"],
        ),
        (
            "R3 legacy override is strict",
            &["--session-override", "openai/gpt-5.2", "--source", "legacy"],
            "legacy_override",
            true,
            &["openai/gpt-5.2"],
        ),
        (
            "R3 cron payload without payload.fallbacks: configured chain",
            &["--cron-model", "google/z"],
            "cron_payload",
            false,
            &[
                "google/z",
                "openai/gpt-5.2",
                "openrouter/meta-llama/llama-3-70b",
                "ollama/qwen3.5:27b",
                "anthropic/claude-opus-4-6",
            ],
        ),
        (
            "R3 cron payload with payload.fallbacks",
            &[
                "--cron-model",
                "google/z",
                "--cron-fallbacks",
                "mistral/m, groq/g",
            ],
            "cron_payload",
            false,
            &["google/z", "mistral/m", "groq/g"],
        ),
        (
            "R3 cron payload.fallbacks: [] is strict",
            &["--cron-model", "google/z", "--cron-fallbacks", ""],
            "cron_payload",
            true,
            &["google/z"],
        ),
        (
            "R3 one-shot CLI override is strict",
            &["--model", "google/z"],
            "cli_override",
            true,
            &["google/z"],
        ),
        (
            "R15 image model chain",
            &["--image"],
            "configured_default",
            false,
            &["openai/gpt-image-1", "google/imagen-4"],
        ),
    ];
    for (name, args, source, strict, candidates) in rows {
        let mut all = vec!["--config", GATEWAY];
        all.extend_from_slice(args);
        let got = json_of(&all);
        assert_eq!(got["source"], json!(source), "{name}");
        assert_eq!(got["strict"], json!(strict), "{name}");
        assert_eq!(got["candidates"], json!(candidates), "{name}");
    }
}

#[test]
fn json_field_order_is_source_strict_candidates() {
    let (_, stdout, _) = chain(&["--config", GATEWAY, "--agent", "coder", "--json"]);
    assert!(
        stdout.starts_with(
            r#"{"source":"agent_primary","strict":true,"candidates":["anthropic/claude-sonnet-4-5"],"#
        ),
        "{stdout}"
    );
}

// R4.4, the SPEC example: primary `anthropic/a`, fallbacks `[openai/b]`,
// requested `google/z` with no override → `google/z, openai/b, anthropic/a`.
// R4.6: with an override, exactly requested + list; empty disables both
// fallback and the hidden primary.
#[test]
fn r4_4_and_r4_6_spec_examples_through_the_cli() {
    let dir = scratch("r4");
    let cfg = write(
        &dir,
        "c.yaml",
        "agents:\n  defaults:\n    model: { primary: anthropic/a, fallbacks: [openai/b] }\n",
    );
    let rows: &[(&str, &[&str], &[&str])] = &[
        (
            "R4.4 auto override on another provider",
            &["--session-override", "google/z", "--source", "auto"],
            &["google/z", "openai/b", "anthropic/a"],
        ),
        (
            "R4.4 cron model on another provider",
            &["--cron-model", "google/z"],
            &["google/z", "openai/b", "anthropic/a"],
        ),
        (
            "R4.5 primary appended last, R4.2 repeats dropped",
            &["--session-override", "openai/b", "--source", "auto"],
            &["openai/b", "anthropic/a"],
        ),
        (
            "R4.6 override: exactly requested + list",
            &["--cron-model", "google/z", "--cron-fallbacks", "openai/c"],
            &["google/z", "openai/c"],
        ),
        (
            "R4.6 empty override: no fallback, no hidden primary",
            &["--cron-model", "google/z", "--cron-fallbacks", ""],
            &["google/z"],
        ),
    ];
    for (name, args, candidates) in rows {
        let mut all = vec!["--config", cfg.as_str()];
        all.extend_from_slice(args);
        assert_eq!(json_of(&all)["candidates"], json!(candidates), "{name}");
    }
    std::fs::remove_dir_all(dir).unwrap();
}

// `--help` documents the precedence of the selection flags.
#[test]
fn help_documents_precedence() {
    let (code, stdout, _) = chain(&["--help"]);
    assert_eq!(code, 0);
    for needle in [
        "1. --model",
        "2. --session-override",
        "3. --cron-model",
        "4. --agent",
        "5. the config",
    ] {
        assert!(stdout.contains(needle), "{needle}: {stdout}");
    }
}

// Precedence through the CLI: `--model` > session override > cron > agent.
#[test]
fn precedence_of_selection_flags() {
    let all = [
        "--config",
        GATEWAY,
        "--agent",
        "researcher",
        "--cron-model",
        "cron/m",
        "--session-override",
        "session/m",
        "--source",
        "user",
        "--model",
        "cli/m",
    ];
    let steps = [
        (12, "cli_override", "cli/m"),
        (10, "user_override", "session/m"),
        (6, "cron_payload", "cron/m"),
        (4, "agent_primary", "google/gemini-3-pro"),
        (2, "configured_default", "anthropic/claude-opus-4-6"),
    ];
    for (len, source, first) in steps {
        let got = json_of(&all[..len]);
        assert_eq!(got["source"], json!(source), "{:?}", &all[..len]);
        assert_eq!(got["candidates"][0], json!(first));
    }
    let (_, _, stderr) = chain(&all);
    assert!(
        stderr.contains(
            "note: `--model` takes precedence; `--session-override` and `--cron-model` are ignored"
        ),
        "{stderr}"
    );
}

// The policy comes from the rules: an operator layer that lets user
// overrides fall back changes the chain.
#[test]
fn r3_policy_comes_from_the_rules() {
    let dir = scratch("rules");
    write(
        &dir,
        "selection.rules",
        "selection user_override => fallbacks configured\n",
    );
    let rules = dir.to_str().unwrap();
    let args = [
        "--config",
        GATEWAY,
        "--session-override",
        "google/z",
        "--source",
        "user",
    ];
    assert_eq!(json_of(&args)["strict"], json!(true));
    let mut layered = args.to_vec();
    layered.extend_from_slice(&["--rules", rules]);
    let got = json_of(&layered);
    assert_eq!(got["strict"], json!(false));
    assert_eq!(got["candidates"].as_array().unwrap().len(), 5);
    assert_eq!(got["policy"], json!("fallbacks configured"));

    // A rules layer with errors: exit 1 and the rules diagnostics.
    write(
        &dir,
        "selection.rules",
        "selection user_overide => strict\n",
    );
    let (code, stdout, stderr) = chain(&layered);
    assert_eq!(code, 1, "{stderr}");
    assert!(stdout.is_empty());
    assert!(
        stderr.contains("unknown selection source `user_overide`"),
        "{stderr}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn snapshots_of_shipped_configs() {
    let cases: &[(&str, &[&str])] = &[
        ("gateway_default", &["--config", GATEWAY]),
        (
            "gateway_agent_coder",
            &["--config", GATEWAY, "--agent", "coder"],
        ),
        (
            "gateway_agent_researcher",
            &["--config", GATEWAY, "--agent", "researcher"],
        ),
        (
            "gateway_auto_override",
            &[
                "--config",
                GATEWAY,
                "--session-override",
                "google/gemini-3-flash",
                "--source",
                "auto",
            ],
        ),
        (
            "gateway_user_override",
            &[
                "--config",
                GATEWAY,
                "--session-override",
                "google/gemini-3-flash",
                "--source",
                "user",
            ],
        ),
        (
            "gateway_cron_payload_fallbacks",
            &[
                "--config",
                GATEWAY,
                "--cron-model",
                "mistral/large",
                "--cron-fallbacks",
                "openai/gpt-5.2,groq/llama",
            ],
        ),
        ("gateway_image", &["--config", GATEWAY, "--image"]),
        ("gateway_json_output", &["--config", GATEWAY, "--json"]),
        (
            "json_config_agent",
            &[
                "--config",
                "examples/configs/gateway.json",
                "--agent",
                "ops",
            ],
        ),
        ("minimal", &["--config", "examples/configs/minimal.yaml"]),
        (
            "with_warnings",
            &["--config", "examples/configs/with-warnings.yaml"],
        ),
    ];
    for (name, args) in cases {
        insta::assert_snapshot!(*name, transcript(args));
    }
}

// Bad input: clear errors, exit code 2, no panic; secrets never echoed.
#[test]
fn bad_configs_exit_2_with_located_errors() {
    let cases: &[(&str, &str)] = &[
        ("bad_yaml_syntax", "examples/configs/bad/syntax.yaml"),
        ("bad_json_syntax", "examples/configs/bad/syntax.json"),
        ("bad_no_provider", "examples/configs/bad/no-provider.yaml"),
        (
            "bad_fallbacks_string",
            "examples/configs/bad/fallbacks-string.yaml",
        ),
    ];
    for (name, path) in cases {
        let (code, stdout, _) = chain(&["--config", path]);
        assert_eq!(code, 2, "{name}");
        assert!(stdout.is_empty(), "{name}: {stdout}");
        insta::assert_snapshot!(*name, transcript(&["--config", path]));
    }
    let (_, _, stderr) = chain(&["--config", "examples/configs/bad/syntax.yaml"]);
    assert!(
        stderr.contains("syntax.yaml:5:6"),
        "line and column: {stderr}"
    );
    let (_, _, stderr) = chain(&["--config", "examples/configs/bad/fallbacks-string.yaml"]);
    assert!(
        stderr.contains(
            "error[E023]: agents.list[2].model.fallbacks: expected a list of \"provider/model\" strings"
        ),
        "{stderr}"
    );
}

#[test]
fn bad_flags_and_agents_exit_2() {
    let rows: &[(&[&str], &str)] = &[
        (
            &["--config", GATEWAY, "--agent", "nobody"],
            "error: no agent `nobody` in `agents.list`; agents: coder, researcher, auditor, helper\n",
        ),
        (
            &["--config", GATEWAY, "--agent", "codr"],
            "error: no agent `codr` in `agents.list`; did you mean `coder`?\n",
        ),
        (
            &["--config", GATEWAY, "--model", "gpt-4o"],
            "error: `--model`: `gpt-4o` has no provider: write it as `provider/model`\n",
        ),
        (
            &["--config", GATEWAY, "--cron-model", "a/b", "--cron-fallbacks", "c/d,,e/f"],
            "error: `--cron-fallbacks`: empty model reference: expected `provider/model`\n",
        ),
        (
            &["--config", "examples/configs/none.yaml"],
            "error[E021]: cannot read config `examples/configs/none.yaml`: no such file or directory\n",
        ),
        (
            &["--config", "examples/configs"],
            "error[E021]: config `examples/configs` is a directory, not a file\n",
        ),
        (
            &["--config", GATEWAY, "--no-defaults"],
            "error: no rules to take the selection policy from: `--no-defaults` needs at least one `--rules` directory\n",
        ),
    ];
    for (args, stderr_expected) in rows {
        let (code, stdout, stderr) = chain(args);
        assert_eq!(code, 2, "{args:?}");
        assert!(stdout.is_empty(), "{args:?}");
        assert_eq!(&stderr, stderr_expected, "{args:?}");
    }
    // Flag combinations clap refuses are usage errors too.
    for args in [
        &["--config", GATEWAY, "--source", "user"][..],
        &["--config", GATEWAY, "--session-override", "a/b"][..],
        &["--config", GATEWAY, "--cron-fallbacks", "a/b"][..],
        &["--config", GATEWAY, "--image", "--agent", "coder"][..],
        &[
            "--config",
            GATEWAY,
            "--session-override",
            "a/b",
            "--source",
            "bot",
        ][..],
    ] {
        let (code, _, stderr) = chain(args);
        assert_eq!(code, 2, "{args:?}: {stderr}");
    }
}

#[test]
fn five_megabyte_config_is_refused() {
    let dir = scratch("big");
    let mut text = String::from("agents:\n  list:\n");
    let mut i = 0;
    while text.len() < 5 * 1024 * 1024 {
        text.push_str(&format!(
            "    - id: agent-{i}\n      model: openai/gpt-5.2\n"
        ));
        i += 1;
    }
    let path = write(&dir, "big.yaml", &text);
    let (code, stdout, stderr) = chain(&["--config", &path]);
    assert_eq!(code, 2);
    assert!(stdout.is_empty());
    assert!(
        stderr.starts_with("error[E021]: config `") && stderr.contains("is larger than 1024 KiB"),
        "{stderr}"
    );
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn secrets_in_the_config_are_never_printed() {
    for extra in [&[][..], &["--json"][..]] {
        let mut args = vec!["--config", "examples/configs/with-warnings.yaml"];
        args.extend_from_slice(extra);
        let (code, stdout, stderr) = chain(&args);
        assert_eq!(code, 0);
        assert!(stderr.contains("secrets do not belong in the config file"));
        // The line with the secret is not quoted back either.
        assert!(!stdout.contains("sk-never-printed"), "{stdout}");
        assert!(!stderr.contains("sk-never-printed"), "{stderr}");
    }
}
