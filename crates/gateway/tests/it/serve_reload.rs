//! `failover serve`: hot reload (a bad set refused while the old one
//! serves, a good one taking effect, requests in flight finishing on their
//! set) and `--watch`. The binary's SIGHUP, SIGTERM and JSON logs are
//! tested with the binary (crates/cli/tests/it/serve_reload_cli.rs).

use std::time::Duration;

use crate::serve_support::*;

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
    let diag = gateway.reload().unwrap_err().to_string();
    assert!(
        diag.contains("error[E002]: unknown reason `biling`"),
        "{diag}"
    );
    assert_eq!(ready_hash(&gw).await, h0);
    // Issue 48: `/readyz` stays ready (the last good set serves) and says
    // the reload was refused, with the diagnostics' first line; so does
    // `/metrics` until a reload succeeds.
    let ready = Resp::from(gw.http.get(gw.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(ready.status, 200);
    assert_eq!(ready.json()["status"], "ready");
    assert_eq!(
        ready.json()["reload"]["status"],
        "refused",
        "{}",
        ready.text
    );
    assert!(
        ready.json()["reload"]["error"]
            .as_str()
            .is_some_and(|e| e.contains("unknown reason `biling`")),
        "{}",
        ready.text
    );
    let m = Resp::from(gw.http.get(gw.url("/metrics")).send().await.unwrap()).await;
    assert!(m.text.contains("failover_reload_refused 1\n"), "{}", m.text);
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
    let ready = Resp::from(gw.http.get(gw.url("/readyz")).send().await.unwrap()).await;
    assert!(ready.json()["reload"].is_null(), "cleared: {}", ready.text);
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

// The README's quick start: examples/gateway.yaml is a set `serve` accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_example_config_is_serve_ready() {
    let dir = temp_dir("example");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gw = failover_gateway::Gateway::new(failover_gateway::Sources {
        config: root.join("examples/gateway.yaml"),
        state: dir.clone(),
        rules: vec![],
        no_defaults: false,
        model: Default::default(),
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

// Issue 34: the config's `classify:` block chooses the evidence model
// and its threshold; a model file that cannot be used refuses the set
// with its key path and the file named (docs/model.md).
#[test]
fn classify_block_chooses_the_model_and_refuses_a_bad_file() {
    let dir = temp_dir("classify");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let base = std::fs::read_to_string(root.join("examples/gateway.yaml")).unwrap();
    let open = |classify: &str, flags: failover_gateway::ModelFlags| {
        let config = dir.join("gateway.yaml");
        std::fs::write(&config, format!("{base}\n{classify}\n")).unwrap();
        failover_gateway::Gateway::new(failover_gateway::Sources {
            config,
            state: dir.clone(),
            rules: vec![],
            no_defaults: false,
            model: flags,
        })
    };
    let threshold =
        |gw: &std::sync::Arc<failover_gateway::Gateway>| gw.active().engine.model().map(|(_, t)| t);
    let flags = failover_gateway::ModelFlags::default;

    let gw = open("", flags()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        threshold(&gw),
        Some(failover::evidence::Confidence::Costs),
        "the embedded model by default, at the thresholds the costs give"
    );
    let gw = open("classify: {model: off}", flags()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(threshold(&gw), None);
    let gw = open("classify: {minConfidence: 0.7}", flags()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        threshold(&gw),
        Some(failover::evidence::Confidence::Min(0.7))
    );
    let over = failover_gateway::ModelFlags {
        min_confidence: Some(0.8),
        ..flags()
    };
    let gw = open("classify: {minConfidence: 0.7}", over).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        threshold(&gw),
        Some(failover::evidence::Confidence::Min(0.8)),
        "the command line wins"
    );
    let off = failover_gateway::ModelFlags {
        no_model: true,
        ..flags()
    };
    let gw = open("classify: {model: builtin}", off).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(threshold(&gw), None);

    // A model file beside the config, by a relative path.
    std::fs::copy(root.join("models/default.model"), dir.join("ops.model")).unwrap();
    let gw = open("classify: {model: ops.model}", flags()).unwrap_or_else(|e| panic!("{e}"));
    assert!(threshold(&gw).is_some());

    let err = open("classify: {model: missing.model}", flags())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("classify.model: cannot read the model `") && err.contains("missing.model"),
        "{err}"
    );
    std::fs::write(dir.join("bad.model"), b"FOVMODEL\x04\x00\x00\x00garbage").unwrap();
    let err = open("classify: {model: bad.model}", flags())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("classify.model: cannot use the model") && err.contains("damaged"),
        "{err}"
    );
    // A model of an older format (trained on other features) is refused
    // with what to do (issue 47: formats 3 and 4).
    std::fs::write(dir.join("old.model"), b"FOVMODEL\x01\x00\x00\x00garbage").unwrap();
    let err = open("classify: {model: old.model}", flags())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("model format version 1") && err.contains("retrain"),
        "{err}"
    );
    let err = open("classify: {minConfidence: 2}", flags())
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("classify.minConfidence") && err.contains("between 0 and 1"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(dir);
}
