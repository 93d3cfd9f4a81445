//! `failover serve`, the binary: SIGHUP reloads, one JSON log line per
//! decision, SIGTERM drains (moved from the gateway's serve_reload.rs,
//! whose in-process reload tests stay in crates/gateway/tests/it).

use std::time::Duration;

use crate::serve_process::{stderr_lines, Killed};
use crate::serve_support::*;

fn kill(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

// Issue 12 items 9–11: the binary reloads on SIGHUP, logs one JSON event
// per decision with the R14.2 fields and no secret, and on SIGTERM stops
// accepting, lets the request in flight finish and exits 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_sighup_sigterm_and_json_logs() {
    let prim = Mock::start().await;
    let back = Mock::start().await;
    let dir = temp_dir("binary");
    write_profiles(&dir);
    let cfg = dir.join("gateway.yaml");
    std::fs::write(&cfg, config_text(&Setup::default(), &prim, &back)).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--state")
        .arg(dir.join("state"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let pid = child.id();
    let mut guard = Killed(Some(child));
    let find = |msg: &str| -> Vec<serde_json::Value> {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["message"] == msg)
            .collect()
    };
    eventually("the gateway to listen", || !find("listening").is_empty()).await;
    let addr = find("listening")[0]["listen"].as_str().unwrap().to_string();
    let url = |p: &str| format!("http://{addr}{p}");
    let http = reqwest::Client::new();

    prim.push(error(429, r#"{"error":{"message":"Rate limit reached"}}"#));
    back.push(ok_openai("ok"));
    let r = http
        .post(url("/v1/chat/completions"))
        .json(&chat("prim/model-a"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    eventually("both decisions logged", || {
        find("model_fallback_decision").len() == 2
    })
    .await;
    let decisions = find("model_fallback_decision");
    assert_eq!(decisions[0]["fallbackStepFromModel"], "prim/model-a");
    assert_eq!(decisions[0]["fallbackStepToModel"], "back/model-b");
    assert_eq!(decisions[0]["fallbackStepFromFailureReason"], "rate_limit");
    assert_eq!(decisions[0]["fallbackStepFinalOutcome"], "next_fallback");
    assert_eq!(decisions[1]["fallbackStepFinalOutcome"], "succeeded");

    // SIGHUP with a changed config: a new set.
    let before = find("listening")[0]["ruleset"].clone();
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("# changed\n");
    std::fs::write(&cfg, text).unwrap();
    kill(pid, "-HUP");
    eventually("the reload", || !find("reload_ok").is_empty()).await;
    assert_ne!(find("reload_ok")[0]["ruleset"], before);

    // SIGTERM while a request is in flight: it finishes.
    prim.push(Reply::Slow(
        Duration::from_millis(700),
        Box::new(ok_openai("finished")),
    ));
    let pending = http
        .post(url("/v1/chat/completions"))
        .json(&chat("prim/model-a"))
        .send();
    let term = async {
        eventually("the slow call to start", || prim.hits() == 2).await;
        kill(pid, "-TERM");
    };
    let (r, ()) = tokio::join!(pending, term);
    let r = r.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.text().await.unwrap().contains("finished"));
    let mut child = guard.0.take().unwrap();
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success());
    let all = lines.lock().unwrap().join("\n");
    assert!(all.contains("\"stopped\""), "{all}");
    for s in SECRETS {
        assert!(!all.contains(s), "secret in the logs");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 48: `--log-format text` writes tracing-subscriber's lines, and
// `--log-level` wins over `RUST_LOG`: with `RUST_LOG=error` and
// `--log-level info,failover::serve=debug` the INFO lines are written (the
// flag's directives), as text; a request's access line too. Bad
// directives: exit 2 with the error, before anything starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i48_log_level_and_text_format() {
    let prim = Mock::start().await;
    let back = Mock::start().await;
    let dir = temp_dir("logging");
    write_profiles(&dir);
    let cfg = dir.join("gateway.yaml");
    std::fs::write(&cfg, config_text(&Setup::default(), &prim, &back)).unwrap();
    let serve = |extra: &[&str]| {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_failover"));
        c.args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&cfg)
            .arg("--state")
            .arg(dir.join("state"))
            .args(extra)
            .env("RUST_LOG", "error")
            .stderr(std::process::Stdio::piped());
        c
    };
    let bad = serve(&["--log-level", "info,failover=notalevel"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("log level `info,failover=notalevel`"), "{err}");

    let mut child = serve(&[
        "--log-level",
        "info,failover::serve=debug",
        "--log-format",
        "text",
    ])
    .spawn()
    .unwrap();
    let lines = stderr_lines(&mut child);
    let _guard = Killed(Some(child));
    let listening = || {
        lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("listening"))
            .cloned()
    };
    eventually("the gateway to listen", || listening().is_some()).await;
    let line = listening().unwrap();
    assert!(
        !line.trim_start().starts_with('{'),
        "text, not JSON: {line}"
    );
    assert!(line.contains("INFO"), "{line}");
    let addr = line
        .split_whitespace()
        .find_map(|w| w.strip_prefix("listen="))
        .map(|a| a.trim_matches('"').to_string())
        .unwrap_or_else(|| panic!("{line}"));
    back.push(ok_openai("ok"));
    let r = reqwest::Client::new()
        .post(format!("http://{addr}/v1/chat/completions"))
        .json(&chat("back/model-b"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    eventually("the access line", || {
        lines
            .lock()
            .unwrap()
            .iter()
            .any(|l| l.contains("INFO") && l.contains(" request") && l.contains("protocol="))
    })
    .await;
}
