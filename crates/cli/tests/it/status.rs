//! `failover status` over the fixture state directory `tests/fixtures/state`
//! (SPEC R5 layout, fake secrets), evaluated at a fixed instant.

use std::process::{Command, Output};

use serde_json::Value;

/// 2026-01-01T00:00:00Z, the fixture's reference instant.
const NOW: &str = "1767225600000";

fn status(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .current_dir(crate::repo_root())
        .args(["status", "--state", "tests/fixtures/state", "--now", NOW])
        .args(args)
        .output()
        .expect("run failover")
}

fn text(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

#[test]
fn status_main_agent() {
    let o = status(&[]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    insta::assert_snapshot!("status_main", text(&o));
}

#[test]
fn status_main_agent_json() {
    let o = status(&["--json"]);
    assert_eq!(o.status.code(), Some(0));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    insta::assert_snapshot!(
        "status_main_json",
        serde_json::to_string_pretty(&v).unwrap()
    );
}

// Damaged files: reported with their paths, exit 1, nothing moved (status
// is read-only).
#[test]
fn status_damaged_agent() {
    let o = status(&["--agent", "ops"]);
    assert_eq!(o.status.code(), Some(1));
    insta::assert_snapshot!("status_ops", text(&o));
    let state = crate::repo_root().join("tests/fixtures/state/agents/ops/agent/auth-state.json");
    assert!(state.exists(), "status must not move files aside");
}

/// Every credential string in the fixture's secrets files.
fn fixture_secrets() -> Vec<String> {
    let root = crate::repo_root().join("tests/fixtures/state/agents");
    let mut out = Vec::new();
    for agent in ["main", "ops"] {
        let text =
            std::fs::read_to_string(root.join(agent).join("agent/auth-profiles.json")).unwrap();
        let v: Value = serde_json::from_str(&text).unwrap();
        for p in v["profiles"].as_object().unwrap().values() {
            for field in ["key", "access", "refresh", "token"] {
                if let Some(s) = p.get(field).and_then(Value::as_str) {
                    out.push(s.to_string());
                }
            }
        }
    }
    assert!(out.len() >= 8);
    out
}

// R16.11: no secret in any output form, for either agent.
#[test]
fn r16_11_status_never_prints_secrets() {
    let secrets = fixture_secrets();
    for args in [
        &[][..],
        &["--json"],
        &["--agent", "ops"],
        &["--agent", "ops", "--json"],
    ] {
        let o = status(args);
        let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
        for s in &secrets {
            assert!(!all.contains(s.as_str()), "secret shown with {args:?}");
            // Not even a long middle part of one.
            let middle: String = s.chars().skip(4).take(12).collect();
            assert!(
                !all.contains(&middle),
                "part of a secret shown with {args:?}"
            );
        }
    }
}

// With the gateway config, the order shown is the one the runner uses
// (its `auth.order`), and stored profiles it leaves out are listed as not
// used (blocked profiles still go last, soonest free first).
#[test]
fn status_with_config_shows_the_runners_order() {
    let o = status(&["--config", "tests/fixtures/status-order.yaml"]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let out = text(&o);
    assert!(out.contains("openai (auth.order)"), "{out}");
    assert!(out.contains("not used: not in auth.order"), "{out}");
    insta::assert_snapshot!("status_main_config", out);
    let o = status(&["--config", "tests/fixtures/status-order.yaml", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let openai = v["providers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["provider"] == "openai")
        .unwrap();
    assert_eq!(openai["orderSource"], "auth.order");
    let left_out: Vec<&str> = openai["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["why"] == "not in auth.order")
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert_eq!(left_out, ["openai:old@example.com"]);
}

#[test]
fn status_usage_errors_exit_2() {
    let o = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["status", "--state", "/nonexistent/failover-state"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "error: cannot read state directory `/nonexistent/failover-state`: no such file or directory\n"
    );
    let o = status(&["--agent", "../main"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid agent id `../main`"));
    let o = status(&["--config", "tests/fixtures/missing.yaml"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("cannot read config"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Issue 16 item 8: `status` and `chain` printed secret-looking ids
/// verbatim — a profile id that is a pasted key, a stored order entry, a
/// session's model override, a model name shaped like a key. They are
/// masked as stored secrets are (`sk-…`), in text and JSON.
#[test]
fn secret_shaped_ids_are_masked_in_status_and_chain() {
    let key = "sk-proj-FAKEq8Kd93jLqP0xZ7vB2nM4cT6yW1eR5uI";
    let root = std::env::temp_dir().join(format!("failover-status-ids-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let agent = root.join("agents/main/agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::create_dir_all(root.join("agents/main/sessions")).unwrap();
    std::fs::write(
        agent.join("auth-profiles.json"),
        format!(
            r#"{{"version": 1, "profiles": {{
                "openai:{key}": {{"type": "api_key", "provider": "openai", "key": "sk-FAKE-stored-key-0000000000"}},
                "{key}": {{"type": "api_key", "provider": "openai", "key": "sk-FAKE-stored-key-1111111111"}}
            }}}}"#
        ),
    )
    .unwrap();
    std::fs::write(
        agent.join("auth-state.json"),
        format!(
            r#"{{"version": 1, "order": {{"openai": ["openai:{key}", "{key}x"]}},
                "usageStats": {{"openai:{key}": {{"lastUsed": 1, "cooldownUntil": 1767225660000, "cooldownModel": "{key}"}}}}}}"#
        ),
    )
    .unwrap();
    std::fs::write(
        root.join("agents/main/sessions/sessions.json"),
        format!(r#"{{"s1": {{"providerOverride": "openai", "modelOverride": "{key}", "modelOverrideSource": "user"}}}}"#),
    )
    .unwrap();
    for json in [false, true] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_failover"));
        c.args(["status", "--now", NOW, "--state"]).arg(&root);
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
        assert!(!all.contains("FAKE"), "{all}");
        assert!(all.contains("sk-…"), "{all}");
        if json {
            let _: Value = serde_json::from_slice(&o.stdout).expect("still JSON");
        }
    }
    let config = root.join("gateway.yaml");
    std::fs::write(
        &config,
        format!("agents: {{defaults: {{model: {{primary: openai/{key}, fallbacks: [anthropic/{key}]}}}}}}\n"),
    )
    .unwrap();
    for json in [false, true] {
        let mut c = Command::new(env!("CARGO_BIN_EXE_failover"));
        c.args(["chain", "--config"]).arg(&config);
        if json {
            c.arg("--json");
        }
        let o = c.output().unwrap();
        let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
        assert_eq!(o.status.code(), Some(0), "{all}");
        assert!(!all.contains("FAKE"), "{all}");
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `status` was quadratic in stored profiles: each was looked up in the
/// provider's order by a scan (150,000 profiles: 47 s). Found by the
/// issue 16 reader measurements; now a set lookup.
#[test]
fn status_is_linear_in_stored_profiles() {
    let root = std::env::temp_dir().join(format!("failover-status-many-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let agent = root.join("agents/main/agent");
    std::fs::create_dir_all(&agent).unwrap();
    let profiles: serde_json::Map<String, Value> = (0..100_000)
        .map(|i| {
            (
                format!("openai:u{i}@example.com"),
                serde_json::json!({"type": "api_key", "provider": "openai", "key": format!("sk-FAKE-{i:020}")}),
            )
        })
        .collect();
    std::fs::write(
        agent.join("auth-profiles.json"),
        serde_json::json!({"version": 1, "profiles": profiles}).to_string(),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["status", "--now", NOW, "--state"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    std::fs::remove_dir_all(&root).unwrap();
}

// Issue 48 item 2: a profile whose key the config holds in memory
// (`apiKey: "${VAR}"`) is in the state file but not in
// `auth-profiles.json`. `status` shows it cooling: in its order with
// `--config` (masked as a stored key is), and as a profile known only
// from its state without it.
#[test]
fn i48_2_a_profile_keyed_from_the_config_is_shown() {
    let root = std::env::temp_dir().join(format!("failover-status-env-{}", std::process::id()));
    let agent = root.join("agents/main/agent");
    std::fs::create_dir_all(&agent).unwrap();
    std::fs::write(
        agent.join("auth-state.json"),
        r#"{"version":1,"usageStats":{"back:default":{"cooldownUntil":1767225660000,"cooldownReason":"rate_limit","errorCount":1,"lastFailureAt":1767225600000}}}"#,
    )
    .unwrap();
    let config = root.join("gateway.yaml");
    std::fs::write(
        &config,
        "agents: {defaults: {model: {primary: back/model-b}}}\nmodels:\n  providers:\n    back:\n      baseUrl: http://127.0.0.1:9/v1\n      api: openai-completions\n      apiKey: \"${FAILOVER_I48_BACK_KEY}\"\n",
    )
    .unwrap();
    let run = |with_config: bool| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_failover"));
        c.args(["status", "--now", NOW, "--state"])
            .arg(&root)
            .env("FAILOVER_I48_BACK_KEY", "sk-i48-SECRET-VALUE-abcd");
        if with_config {
            c.arg("--config").arg(&config);
        }
        let o = c.output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let all = format!("{}{}", text(&o), String::from_utf8_lossy(&o.stderr));
        assert!(!all.contains("SECRET-VALUE"), "{all}");
        text(&o)
    };
    let with = run(true);
    let row = with
        .lines()
        .find(|l| l.contains("back:default"))
        .unwrap_or_else(|| panic!("{with}"));
    assert!(row.trim_start().starts_with("1 "), "in the order: {row}");
    assert!(row.contains("cooling until 2026-01-01T00:01:00Z"), "{row}");
    assert!(row.contains("sk-…abcd"), "masked as a stored key: {row}");
    let without = run(false);
    let row = without
        .lines()
        .find(|l| l.contains("back:default"))
        .unwrap_or_else(|| panic!("{without}"));
    assert!(row.contains("cooling until 2026-01-01T00:01:00Z"), "{row}");
    assert!(row.contains("key not stored"), "{row}");
    std::fs::remove_dir_all(&root).unwrap();
}
