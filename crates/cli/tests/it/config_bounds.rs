//! Issue 44 items 13–15: `check --config` loads what `serve` loads, warns
//! on every key of a provider it does not read, refuses a literal
//! credential wherever it is written, and `serve` prints a refused config
//! exactly as masked as `check` does.

use std::process::{Command, Output};

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("failover-cfgb-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const HEAD: &str = "agents:\n  defaults:\n    model: { primary: openai/gpt-4o }\nmodels:\n  providers:\n    openai:\n      baseUrl: https://api.openai.com/v1\n      api: openai-completions\n";

// Issue 44 item 14: a damaged, missing or non-regular model file fails
// `check --config` (rc 1, at `classify.model`), as it fails `serve`.
#[test]
fn i44_14_check_config_loads_the_model_file() {
    let dir = temp_dir("model");
    std::fs::write(dir.join("damaged.model"), b"FOMODEL\x00garbage").unwrap();
    for (file, want) in [
        ("damaged.model", "cannot use the model"),
        ("missing.model", "cannot read the model"),
        (".", "cannot read the model"),
    ] {
        let config = dir.join("gw.yaml");
        std::fs::write(
            &config,
            format!("{HEAD}      auth: none\nclassify:\n  model: {file}\n"),
        )
        .unwrap();
        let o = failover(&["check", "--config", config.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{file}: {t}");
        assert!(
            t.contains("classify.model") && t.contains(want),
            "{file}: {t}"
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// Issue 44 item 15: keys a provider's block does not have are warnings
// with a near miss; a literal credential under any name, or in a
// credential header, is refused — its value never shown.
#[test]
fn i44_15_unknown_provider_keys_warn_and_literal_secrets_are_refused() {
    let dir = temp_dir("keys");
    let config = dir.join("gw.yaml");
    std::fs::write(
        &config,
        format!("{HEAD}      auth: none\n      timeout: {{ totalMs: 5000 }}\n      apiKye: \"${{OPENAI_API_KEY}}\"\n"),
    )
    .unwrap();
    let o = failover(&["check", "--config", config.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "warnings only: {t}");
    assert!(t.contains("models.providers.openai.timeout"), "{t}");
    assert!(t.contains("did you mean `timeouts`?"), "{t}");
    assert!(t.contains("models.providers.openai.apiKye"), "{t}");
    assert!(t.contains("did you mean `apiKey`?"), "{t}");
    let o = failover(&[
        "check",
        "--config",
        config.to_str().unwrap(),
        "--deny-warnings",
    ]);
    assert_eq!(o.status.code(), Some(1));

    let secret = "sk-proj-Zq81LiteralSecretValue0042abcdXYZ";
    for block in [
        format!("      api_key: {secret}\n"),
        format!("      headers: {{ Authorization: \"Bearer {secret}\" }}\n"),
        format!("      headers:\n        x-api-key: {secret}\n"),
    ] {
        std::fs::write(&config, format!("{HEAD}{block}")).unwrap();
        let o = failover(&["check", "--config", config.to_str().unwrap()]);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(1), "{block}: {t}");
        assert!(t.contains("a literal API key is refused"), "{block}: {t}");
        assert!(!t.contains("Zq81LiteralSecret"), "the value was shown: {t}");
        let json = failover(&["check", "--config", config.to_str().unwrap(), "--json"]);
        assert!(
            !text(&json).contains("Zq81LiteralSecret"),
            "{}",
            text(&json)
        );
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

// Issue 44 item 13: `serve` refuses a config with the same masked text
// `check` prints: an unset `${VAR}` whose name is shaped like a key, and
// a key-shaped model file path, are never shown whole by either.
#[test]
fn i44_13_serve_masks_what_check_masks() {
    let dir = temp_dir("mask");
    let config = dir.join("gw.yaml");
    let state = dir.join("state");
    let shaped = "sk_live_0123456789abcdefghijklmnop";
    for body in [
        format!("{HEAD}      apiKey: \"${{{shaped}}}\"\n"),
        format!("{HEAD}      auth: none\nclassify:\n  model: {shaped}.model\n"),
    ] {
        std::fs::write(&config, &body).unwrap();
        let c = failover(&["check", "--config", config.to_str().unwrap()]);
        assert_eq!(c.status.code(), Some(1), "{}", text(&c));
        let s = failover(&[
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--state",
            state.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]);
        assert_ne!(s.status.code(), Some(0), "{}", text(&s));
        for (what, out) in [("check", text(&c)), ("serve", text(&s))] {
            assert!(
                !out.contains(shaped),
                "{what} showed the key-shaped text: {out}"
            );
            assert!(
                out.contains("classify.model") || out.contains("apiKey"),
                "{what}: {out}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
