//! `failover keys` (SPEC R18.1, R18.7) end to end: the binary against a
//! state directory — a key printed once and stored as its hash, listings
//! that never show it, rotation with a grace period, revocation, and what
//! `status` and `check --config` say about client keys.

use std::process::{Command, Output};

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .output()
        .unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("failover-keys-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every file under `dir`, as text.
fn all_files(dir: &std::path::Path) -> String {
    let mut text = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_file() {
            text.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
        }
    }
    text
}

// R18.1: the key is the last line of `create`, 192 random bits behind
// `fo-`, and nowhere else: not in the state, not in `list`, not in
// `status`. R18.7: rotate keeps the old key for its grace; revoke ends
// every key of the name.
#[test]
fn r18_keys_create_list_rotate_revoke() {
    let dir = temp_dir("cycle");
    let state = dir.join("state");
    let s = state.to_str().unwrap();
    let o = failover(&[
        "keys", "create", "--state", s, "--name", "ci", "--agent", "main", "--model", "gpt-*",
        "--rpm", "60",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let text = out(&o);
    let key = text.lines().last().unwrap().to_string();
    assert!(key.starts_with("fo-") && key.len() == 3 + 48, "{text}");
    assert!(key[3..].bytes().all(|b| b.is_ascii_hexdigit()));
    assert!(
        text.contains("agents: main; models: gpt-*; rpm: 60"),
        "{text}"
    );
    assert!(
        !all_files(&state).contains(&key[3..]),
        "the state holds the key"
    );

    // The same name again is refused; nothing is made.
    let o = failover(&["keys", "create", "--state", s, "--name", "ci"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("keys rotate ci"));

    let o = failover(&["keys", "list", "--state", s, "--json"]);
    assert_eq!(o.status.code(), Some(0));
    let list: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    let keys = list["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 1);
    assert_eq!(keys[0]["name"], "ci");
    assert_eq!(keys[0]["state"], "active");
    assert_eq!(keys[0]["rpm"], 60);
    assert_eq!(keys[0]["requestsPerMinute"], 0);
    assert_eq!(keys[0]["hint"], format!("{}…", &key[..7]));
    assert!(!out(&o).contains(&key[7..]), "list shows the key");

    let o = failover(&[
        "keys", "rotate", "--state", s, "ci", "--grace", "1h", "--json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", out(&o));
    let rotated: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
    let new_key = rotated["key"].as_str().unwrap().to_string();
    assert_ne!(new_key, key);
    assert_eq!(rotated["agents"], serde_json::json!(["main"]));
    let o = failover(&["keys", "list", "--state", s]);
    let text = out(&o);
    assert!(text.contains("grace") && text.contains("active"), "{text}");
    assert!(!text.contains(&key[7..]) && !text.contains(&new_key[7..]));

    let o = failover(&["keys", "revoke", "--state", s, "ci"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(out(&o).contains("(2 keys)"), "{}", out(&o));
    let o = failover(&["keys", "revoke", "--state", s, "ci"]);
    assert_eq!(o.status.code(), Some(1), "nothing left to revoke");

    // `status` lists the keys with their state and rate, never a key.
    let o = failover(&["status", "--state", s]);
    let text = out(&o);
    assert!(text.contains("client keys:"), "{text}");
    assert!(
        text.contains("revoked") && text.contains("/min now"),
        "{text}"
    );
    assert!(!text.contains(&key[7..]) && !text.contains(&new_key[7..]));
    std::fs::remove_dir_all(&dir).unwrap();
}

// R18.6: `check --config` says whether clients need a key, as written or
// as `serve` will decide it.
#[test]
fn r18_6_check_config_reports_the_client_auth_choice() {
    let dir = temp_dir("check");
    let config = dir.join("gw.yaml");
    for (extra, want) in [
        (
            "",
            "clientAuth: not written: required when serve listens off loopback",
        ),
        (
            "serve:\n  clientAuth: required\n",
            "clientAuth: required (serve.clientAuth)",
        ),
        (
            "serve:\n  clientAuth: off\n",
            "clientAuth: off (serve.clientAuth)",
        ),
    ] {
        std::fs::write(
            &config,
            format!("agents:\n  defaults:\n    model: {{ primary: openai/gpt-4o }}\n{extra}"),
        )
        .unwrap();
        let o = failover(&["check", "--config", config.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(0), "{}", out(&o));
        assert!(out(&o).contains(&format!("note: {want}")), "{}", out(&o));
        let o = failover(&["check", "--config", config.to_str().unwrap(), "--json"]);
        let doc: serde_json::Value = serde_json::from_str(&out(&o)).unwrap();
        let note = doc["notes"]["clientAuth"].as_str().unwrap();
        assert!(note.starts_with(&want["clientAuth: ".len()..]), "{note}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
