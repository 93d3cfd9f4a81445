//! `failover serve`: hot reload (a bad set refused while the old one
//! serves, a good one taking effect, requests in flight finishing on their
//! set), `--watch`, and the binary's SIGHUP, SIGTERM and JSON logs.

mod serve_support;

use std::io::BufRead;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serve_support::*;

const TEAPOT: &str = r#"{"error":{"message":"I'm a teapot"}}"#;
const GOOD: &str = "rule ops.teapot when status == 418 => billing\n";
const BAD: &str = "rule ops.teapot when status == 418 => biling\n";

async fn ready_hash(gw: &Gw) -> String {
    let r = Resp::from(gw.http.get(gw.url("/readyz")).send().await.unwrap()).await;
    r.json()["ruleset"].as_str().unwrap().to_string()
}

// Issue 12 item 9: a set with errors is refused with its diagnostics and
// the old set keeps serving; a good one takes effect; a request in flight
// during the reload finishes on the set it started with.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_refuses_bad_sets_and_in_flight_requests_keep_their_set() {
    let rules = temp_dir("reload-rules");
    std::fs::write(rules.join("ops.rules"), "# no rules yet\n").unwrap();
    let gw = Gw::start(
        "reload",
        Setup {
            rules: vec![rules.clone()],
            ..Setup::default()
        },
    )
    .await;
    let gateway = gw.running.as_ref().unwrap().gateway.clone();
    let h0 = ready_hash(&gw).await;

    std::fs::write(rules.join("ops.rules"), BAD).unwrap();
    let diag = gateway.reload().unwrap_err();
    assert!(
        diag.contains("error[E002]: unknown reason `biling`"),
        "{diag}"
    );
    assert_eq!(ready_hash(&gw).await, h0);
    gw.prim.push(ok_openai("still serving"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200);

    // In flight on the old set (418 is not billing there): the upstream
    // answers 418 only after the good set is active.
    gw.prim.push(Reply::Slow(
        Duration::from_millis(600),
        Box::new(error(418, TEAPOT)),
    ));
    gw.back.push(ok_openai("fallback"));
    let in_flight = gw.openai(chat("prim/model-a"), None);
    let reload = async {
        eventually("the slow call to start", || gw.prim.hits() == 2).await;
        std::fs::write(rules.join("ops.rules"), GOOD).unwrap();
        gateway.reload().unwrap()
    };
    let (r, h1) = tokio::join!(in_flight, reload);
    assert_eq!(r.status, 200);
    assert_ne!(h1, h0);
    assert_eq!(ready_hash(&gw).await, h1);
    assert!(
        gw.usage("prim:default")["disabledUntil"].is_null(),
        "the old set classified the in-flight failure"
    );
    // A new request runs on the new set: 418 is billing now.
    gw.prim.push(error(418, TEAPOT));
    gw.back.push(ok_openai("fallback"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200);
    assert_eq!(gw.usage("prim:default")["disabledReason"], "billing");
    let m = Resp::from(gw.http.get(gw.url("/metrics")).send().await.unwrap()).await;
    assert!(m.text.contains(r#"failover_reloads_total{outcome="ok"} 1"#));
    assert!(m
        .text
        .contains(r#"failover_reloads_total{outcome="refused"} 1"#));
    gw.stop().await;
    let _ = std::fs::remove_dir_all(rules);
}

// Issue 12 item 9: `--watch` reloads on a file change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reloads_on_change() {
    let rules = temp_dir("watch-rules");
    std::fs::write(rules.join("ops.rules"), "# none\n").unwrap();
    let gw = Gw::start(
        "watch",
        Setup {
            rules: vec![rules.clone()],
            watch: true,
            ..Setup::default()
        },
    )
    .await;
    let h0 = ready_hash(&gw).await;
    std::fs::write(rules.join("ops.rules"), GOOD).unwrap();
    let gateway = gw.running.as_ref().unwrap().gateway.clone();
    eventually("the watcher to reload", || gateway.active().hash != h0).await;
    gw.stop().await;
    let _ = std::fs::remove_dir_all(rules);
}

/// Kills the gateway if the test fails before it stops it.
struct Guard(Option<std::process::Child>);

impl Drop for Guard {
    fn drop(&mut self) {
        if let Some(c) = self.0.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

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
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let stderr = child.stderr.take().unwrap();
    let pid = child.id();
    let mut guard = Guard(Some(child));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            sink.lock().unwrap().push(l);
        }
    });
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

// The README's quick start: examples/gateway.yaml is a set `serve` accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_example_config_is_serve_ready() {
    let dir = temp_dir("example");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let gw = failover::serve::Gateway::new(failover::serve::reload::Sources {
        config: root.join("examples/gateway.yaml"),
        state: dir.clone(),
        rules: vec![],
        no_defaults: false,
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let set = gw.active();
    assert_eq!(set.upstreams.providers.len(), 3);
    assert_eq!(
        set.upstreams.get("anthropic").unwrap().endpoint(),
        "https://api.anthropic.com/v1/messages"
    );
    assert!(set.models.contains(&"coder".to_string()));
    let _ = std::fs::remove_dir_all(dir);
}
