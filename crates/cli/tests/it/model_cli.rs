//! `failover model` (issue 34): the embedded model is what `model train`
//! makes of this repository's labelled errors, byte for byte; a damaged
//! or foreign model file is a clear error.

use std::process::{Command, Output};

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .current_dir(crate::repo_root())
        .output()
        .unwrap()
}

#[test]
fn model_train_reproduces_the_embedded_model_byte_for_byte() {
    let dir = failover_testkit::temp_root("model", "train");
    let out = dir.join("model.bin");
    let o = failover(&["model", "train", "--out", out.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let trained = std::fs::read(&out).unwrap();
    let embedded = std::fs::read(crate::repo_root().join("models/default.model")).unwrap();
    assert!(
        trained == embedded,
        "models/default.model is stale: the field corpus or a golden case changed. Retrain it:\n  \
         cargo run --release -p failover-cli -- model train --out models/default.model"
    );
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.starts_with("trained on "), "{stdout}");
    // Issue 48: `model info --json`, the same facts as the text.
    let o = failover(&["model", "info", "--json", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], failover::evidence::FORMAT_VERSION);
    let reasons = v["reasons"].as_array().unwrap();
    assert!(reasons.iter().any(|r| r == "rate_limit"), "{v}");
    assert!(v["trained"]["items"].as_u64().unwrap() > 100, "{v}");
    let text = String::from_utf8_lossy(&failover(&["model", "info", out.to_str().unwrap()]).stdout)
        .to_string();
    assert!(
        text.contains(&format!(
            "trained on  {} labelled errors",
            v["trained"]["items"]
        )),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_damaged_or_foreign_model_is_a_clear_error() {
    let dir = failover_testkit::temp_root("model", "damaged");
    let mut bytes = std::fs::read(crate::repo_root().join("models/default.model")).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 1;
    let damaged = dir.join("damaged.bin");
    std::fs::write(&damaged, &bytes).unwrap();
    let foreign = dir.join("foreign.bin");
    std::fs::write(&foreign, b"{\"weights\": []}").unwrap();
    for (file, says) in [
        (
            &damaged,
            "the model file is damaged: its checksum does not match",
        ),
        (&foreign, "not a failover model file"),
    ] {
        let o = failover(&[
            "classify",
            "--model-file",
            file.to_str().unwrap(),
            "--message",
            "x",
        ]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_model_restores_the_rules_verdict_and_explain_shows_the_model() {
    // A gate under a 400 that no text rule reads: the status rule says
    // `format` (stop); the model reads the text.
    let args = [
        "classify",
        "--status",
        "400",
        "--message",
        "Your organization must be verified to stream this model",
    ];
    let rules = failover(&[&args[..], &["--no-model"]].concat());
    let rules = String::from_utf8_lossy(&rules.stdout).into_owned();
    assert!(rules.contains("\"decided_by\":\"status rule\""), "{rules}");
    let explained = failover(&[&args[..], &["--explain", "--min-confidence", "0"]].concat());
    let text = String::from_utf8_lossy(&explained.stdout);
    assert!(text.contains("decided by: model"), "{text}");
    assert!(text.contains("features that weighed most"), "{text}");
    assert!(text.contains("nearest labelled examples:"), "{text}");
}
