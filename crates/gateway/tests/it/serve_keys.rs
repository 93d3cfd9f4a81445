//! Client keys (SPEC R18, issue 45): real HTTP on loopback against the real
//! gateway, keys made as `failover keys create` makes them (the gateway's
//! `generate_key` and the state backend's key table).

use std::time::Duration;

use crate::serve_support::*;
use failover::state::keys::{ClientKey, KeyStore};

/// Makes a key in `store`, as `failover keys create` does; returns it.
fn create(store: &dyn KeyStore, name: &str, edit: impl Fn(&mut ClientKey)) -> String {
    let new = failover_gateway::generate_key().unwrap();
    let mut rec = ClientKey::new(name, &new.hint, now_ms());
    edit(&mut rec);
    store
        .update_dyn(&mut |t| {
            t.keys.insert(new.hash.clone(), rec.clone());
        })
        .unwrap();
    new.key.expose().to_string()
}

fn revoke(store: &dyn KeyStore, name: &str) {
    store
        .update_dyn(&mut |t| {
            for k in t.keys.values_mut() {
                if k.name == name {
                    k.revoked_ms = Some(now_ms());
                }
            }
        })
        .unwrap();
}

/// Past the gateway's key cache (500 ms, R18.3).
async fn past_the_cache() {
    tokio::time::sleep(Duration::from_millis(700)).await;
}

async fn post_with(gw: &Gw, path: &str, body: serde_json::Value, headers: &[(&str, &str)]) -> Resp {
    let mut r = gw.http.post(gw.url(path)).json(&body);
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    Resp::from(r.send().await.unwrap()).await
}

fn assert_absent(what: &str, text: &str, keys: &[&str]) {
    for k in keys {
        // The key, its random part, and its whole hash never appear.
        assert!(!text.contains(k), "{what} holds a key: {text}");
        assert!(!text.contains(&k[3..20]), "{what} holds part of a key");
        let h = failover_gateway::key_hash(k);
        assert!(!text.contains(&h), "{what} holds a key's hash");
    }
}

// R18.2–R18.5, R18.8: no key, a wrong key, a revoked key → 401; a key
// outside its agents → 403; `rpm: 2` → the third request is a 429; a
// valid key → the answer. No refusal reaches an upstream, and no key
// reaches a log line, header, metric or error (R18.1).
#[tokio::test]
async fn r18_client_keys_admit_scope_limit_and_revoke() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Served on this test's own thread, so its log lines are captured.
    let gw = Gw::start(
        "keys",
        Setup {
            workers: 0,
            ..Setup::default()
        },
    )
    .await;
    gw.prim.always(ok_openai(r#"from prim"#));
    gw.back.always(ok_openai("from back"));
    // Before any key exists, loopback and `clientAuth` unwritten: open.
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let hits = gw.prim.hits();

    let store = failover::state::keys::open(None, &gw.dir.join("state")).unwrap();
    let ci = create(&*store, "ci", |k| {
        k.agents = vec!["main".into()];
        k.rpm = Some(2);
    });
    let other = create(&*store, "other", |k| k.agents = vec!["strict-agent".into()]);
    past_the_cache().await;

    // R18.3, R18.6: a key exists, so one is required now.
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("client key is required"));
    let r = post_with(
        &gw,
        "/v1/chat/completions",
        chat("prim/model-a"),
        &[(
            "authorization",
            "Bearer fo-000000000000000000000000000000000000000000000000",
        )],
    )
    .await;
    assert_eq!(r.status, 401);
    // Anthropic's SDK header, answered in Anthropic's shape.
    let r = post_with(
        &gw,
        "/v1/messages",
        msg("prim/model-a"),
        &[("x-api-key", "fo-wrong")],
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(r.json()["error"]["type"], "authentication_error");
    let r = gw.http.get(gw.url("/v1/models")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);

    // R18.4: `other` may use `strict-agent` only.
    let bearer_other = format!("Bearer {other}");
    let r = post_with(
        &gw,
        "/v1/chat/completions",
        chat("prim/model-a"),
        &[("authorization", &bearer_other)],
    )
    .await;
    assert_eq!(r.status, 403, "{}", r.text);
    let m = r.json()["error"]["message"].as_str().unwrap().to_string();
    assert!(m.contains("`other`") && m.contains("strict-agent"), "{m}");
    assert_eq!(
        gw.prim.hits(),
        hits,
        "a refused request reached an upstream"
    );

    // R18.5: two requests a minute.
    let bearer_ci = format!("Bearer {ci}");
    for _ in 0..2 {
        let r = post_with(
            &gw,
            "/v1/chat/completions",
            chat("prim/model-a"),
            &[("authorization", &bearer_ci)],
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_absent("a header", &format!("{:?}", r.headers), &[&ci, &other]);
    }
    assert_eq!(gw.prim.hits(), hits + 2);
    let r = post_with(
        &gw,
        "/v1/messages",
        msg("prim/model-a"),
        &[("x-api-key", &ci)],
    )
    .await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&wait));
    assert_eq!(
        gw.prim.hits(),
        hits + 2,
        "a refused request reached an upstream"
    );

    // R18.8: per-key counters by name.
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains(r#"failover_client_requests_total{key="ci",outcome="admitted"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"failover_client_requests_total{key="ci",outcome="rate_limited"} 1"#)
    );
    assert!(
        metrics.contains(r#"failover_client_requests_total{key="other",outcome="forbidden"} 1"#)
    );
    assert!(metrics.contains(r#"failover_client_tokens_total{key="ci",kind="prompt"}"#));

    // R18.3: revoked, refused within a second.
    revoke(&*store, "ci");
    past_the_cache().await;
    let r = post_with(
        &gw,
        "/v1/chat/completions",
        chat("prim/model-a"),
        &[("authorization", &bearer_ci)],
    )
    .await;
    assert_eq!(r.status, 401);
    assert!(r.text.contains("`ci` was revoked"), "{}", r.text);
    assert_eq!(gw.prim.hits(), hits + 2);

    // R18.8: the usage reaches the record, at the latest at shutdown.
    let mut gw = gw;
    gw.running.take().unwrap().shutdown().await;
    let t = store.load().unwrap();
    let rec = t.keys.values().find(|k| k.name == "ci").unwrap();
    assert_eq!(rec.usage.requests, 2);
    assert!(rec.usage.prompt_tokens > 0 || rec.usage.completion_tokens > 0);
    assert!(rec.last_used_ms.is_some());
    gw.stop().await;
    let text = logs.text();
    assert!(
        text.contains("key=\"ci\"") || text.contains("key=ci"),
        "{text}"
    );
    assert_absent("the log", &text, &[&ci, &other]);
    assert_absent("/metrics", &metrics, &[&ci, &other]);
}

// R18.2: `/metrics` with `serve.metricsToken`; `/healthz` and `/readyz`
// stay open while client keys are required.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r18_2_metrics_token_and_open_health() {
    std::env::set_var("FAILOVER_TEST_METRICS_TOKEN", "metrics-token-0123456789");
    let gw = Gw::start(
        "keys-metrics",
        Setup {
            extra: "serve:\n  clientAuth: required\n  metricsToken: \"${FAILOVER_TEST_METRICS_TOKEN}\"\n".into(),
            ..Setup::default()
        },
    )
    .await;
    for path in ["/healthz", "/readyz"] {
        let r = gw.http.get(gw.url(path)).send().await.unwrap();
        assert_eq!(r.status().as_u16(), 200, "{path}");
    }
    let r = gw.http.get(gw.url("/metrics")).send().await.unwrap();
    assert_eq!(r.status().as_u16(), 401);
    let r = gw
        .http
        .get(gw.url("/metrics"))
        .bearer_auth("metrics-token-0123456789")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    // `required` with no key at all: nobody is served.
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 401);
    assert_eq!(gw.prim.hits() + gw.back.hits(), 0);
    gw.stop().await;
}

// R18.3: two replicas on one Redis; a key revoked through the shared table
// is refused by both at once (the other backends: within the cache's
// 500 ms, shown by the first test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r18_3_a_revoked_key_is_refused_by_every_replica_at_once_on_redis() {
    let Some(server) = failover_testkit::RedisServer::start() else {
        return;
    };
    let setup = || {
        Setup {
        extra: format!(
            "state: {{ backend: redis, url: \"{}\", prefix: \"keys:\" }}\nserve:\n  clientAuth: required\n",
            server.url()
        ),
        ..Setup::default()
    }
    };
    let a = Gw::start("keys-a", setup()).await;
    let b = Gw::start("keys-b", setup()).await;
    for gw in [&a, &b] {
        gw.prim.always(ok_openai("from prim"));
    }
    // The table the replicas share, as `failover keys` opens it.
    let mut cfg = failover::StateConfig::new(failover::StateBackend::Redis);
    cfg.url = Some(server.url());
    cfg.prefix = Some("keys:".into());
    let store = failover::state::keys::open(Some(&cfg), &a.dir.join("state")).unwrap();
    let key = create(&*store, "fleet", |_| {});
    let bearer = format!("Bearer {key}");
    past_the_cache().await;
    for gw in [&a, &b] {
        let r = post_with(
            gw,
            "/v1/chat/completions",
            chat("prim/model-a"),
            &[("authorization", &bearer)],
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    // On Redis the record is read per request: the very next request
    // after the revocation is refused (R18.3), by either replica.
    revoke(&*store, "fleet");
    for gw in [&a, &b] {
        let r = post_with(
            gw,
            "/v1/chat/completions",
            chat("prim/model-a"),
            &[("authorization", &bearer)],
        )
        .await;
        assert_eq!(r.status, 401, "{}", r.text);
        assert!(r.text.contains("`fleet` was revoked"), "{}", r.text);
    }
    // Refused from then on, without reaching B's upstream.
    let hits = b.prim.hits();
    let r = post_with(
        &b,
        "/v1/chat/completions",
        chat("prim/model-a"),
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(r.status, 401);
    assert_eq!(b.prim.hits(), hits, "a revoked key reached B's upstream");
    a.stop().await;
    b.stop().await;
}

// R18.8: a stream's tokens are counted for its key as its events report
// them — Anthropic's `message_start` and `message_delta` relayed as they
// are, and the same answer translated for an OpenAI client that asked for
// a usage chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r18_8_stream_tokens_are_counted_for_the_key() {
    let gw = Gw::start(
        "keys-stream",
        Setup {
            prim_api: "anthropic-messages",
            extra: "serve:\n  clientAuth: required\n".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.always(Reply::Sse(
        anthropic_events(&["Hel", "lo"], true),
        Tail::End,
    ));
    let store = failover::state::keys::open(None, &gw.dir.join("state")).unwrap();
    let key = create(&*store, "streamer", |_| {});
    let mut m = msg("prim/model-a");
    m["stream"] = serde_json::json!(true);
    let r = post_with(&gw, "/v1/messages", m, &[("x-api-key", &key)]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("message_stop"), "{}", r.text);
    let mut c = chat("prim/model-a");
    c["stream"] = serde_json::json!(true);
    c["stream_options"] = serde_json::json!({"include_usage": true});
    let bearer = format!("Bearer {key}");
    let r = post_with(
        &gw,
        "/v1/chat/completions",
        c,
        &[("authorization", &bearer)],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("\"prompt_tokens\":3"), "{}", r.text);
    let metrics = metrics(&gw).await;
    assert!(
        metrics.contains(r#"failover_client_tokens_total{key="streamer",kind="prompt"} 6"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"failover_client_tokens_total{key="streamer",kind="completion"} 4"#),
        "{metrics}"
    );
    let mut gw = gw;
    gw.running.take().unwrap().shutdown().await;
    let t = store.load().unwrap();
    let rec = t.keys.values().find(|k| k.name == "streamer").unwrap();
    assert_eq!(rec.usage.requests, 2);
    assert_eq!(
        (rec.usage.prompt_tokens, rec.usage.completion_tokens),
        (6, 4)
    );
    // R18.7: the two requests are this minute's (or the last's) rate.
    assert_eq!(rec.recent.per_minute(now_ms()), 2);
    gw.stop().await;
}

// The official SDKs authenticate with a created key as their `api_key`
// (tests/sdk/keys.py): OpenAI's `Authorization: Bearer`, Anthropic's
// `x-api-key`; a wrong key is the SDKs' own AuthenticationError.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r18_2_official_sdks_authenticate_with_a_client_key() {
    let Some(python) = sdk_python("r18_2_official_sdks_authenticate_with_a_client_key") else {
        return;
    };
    let gw = Gw::start(
        "keys-sdk",
        Setup {
            prim_api: "anthropic-messages",
            extra: "serve:\n  clientAuth: required\n".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.back.always(ok_openai("hello openai"));
    gw.prim.always(ok_anthropic("hello anthropic"));
    let store = failover::state::keys::open(None, &gw.dir.join("state")).unwrap();
    let key = create(&*store, "sdk", |_| {});
    let (stdout, stderr) =
        run_sdk_script(python, "keys.py", gw.addr(), &[("FAILOVER_KEY", &key)]).await;
    assert!(stdout.contains("4 passed, 0 failed"), "{stdout}");
    // The wrong keys' refusals reached no upstream: one answer each.
    assert_eq!(gw.back.hits(), 1);
    assert_eq!(gw.prim.hits(), 1);
    assert!(!stderr.contains(&key));
    gw.stop().await;
}
