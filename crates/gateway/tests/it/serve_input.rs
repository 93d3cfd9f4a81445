//! `failover serve`: untrusted clients (bad bodies, disconnects, floods),
//! the side endpoints, sessions, and credentials from the config.

use std::time::{Duration, Instant};

use crate::serve_support::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn raw(addr: std::net::SocketAddr, head: &str, body: &[u8]) -> String {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(body).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
        .await
        .expect("the gateway answered in time")
        .unwrap();
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

// Issue 12 "Bad input": a body over the limit is refused with 413 before
// it is read whole — by its Content-Length, and when chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_the_limit_is_413_before_it_is_read() {
    let gw = Gw::start(
        "413",
        Setup {
            extra: "serve: { maxBodyBytes: 4096 }\n".into(),
            ..Setup::default()
        },
    )
    .await;
    // 10 MB declared, 100 bytes sent: the answer comes without the rest.
    let head = "POST /v1/messages HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 10000000\r\n\r\n";
    let answer = raw(gw.addr(), head, &[b' '; 100]).await;
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"request_too_large\""), "{answer}");
    // Chunked, no length: refused once the limit is passed.
    let chunks = futures_util::stream::iter(
        (0..64).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 1024]))),
    );
    let r = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await;
    if let Ok(r) = r {
        assert_eq!(r.status().as_u16(), 413);
    } // else: the gateway closed the connection mid-upload, also a refusal
    assert_eq!(gw.prim.hits() + gw.back.hits(), 0);
    gw.stop().await;
}

// Issue 12 item 7: malformed JSON and wrong shapes are 400 in the
// protocol's own error shape; an unknown model is 404.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_are_400_unknown_models_404() {
    let gw = Gw::start("400", Setup::default()).await;
    let r = Resp::from(
        gw.http
            .post(gw.url("/v1/chat/completions"))
            .body("{\"model\": \"prim/model-a\", ")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = Resp::from(
        gw.http
            .post(gw.url("/v1/messages"))
            .body(vec![0xff, 0xfe, 0x00])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "error");
    let r = gw
        .openai(json!({"model": "prim/model-a", "messages": "hi"}), None)
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(
        r.json()["error"]["message"],
        "`messages`: expected an array of messages, found a string"
    );
    let r = gw
        .anthropic(json!({"model": "prim/model-a", "max_tokens": "9", "messages": [{"role": "user", "content": "x"}]}), None)
        .await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = gw.openai(chat("nobody/knows"), None).await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("unknown model `nobody/knows`"));
    let r = gw.openai(chat("prim/model-a"), Some("")).await;
    assert_eq!(r.status, 400);
    assert_eq!(gw.prim.hits() + gw.back.hits(), 0);
    gw.stop().await;
}

// SPEC R11.3, R11.4, issue 12 "Bad input": a client that disconnects in
// the middle of a fallback attempt cancels the upstream call, and the
// override written before the attempt is rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_4_client_disconnect_cancels_upstream_and_rolls_back() {
    let gw = Gw::start("disconnect", Setup::default()).await;
    gw.prim.push(error(
        500,
        r#"{"error":{"message":"internal server error","type":"api_error"}}"#,
    ));
    gw.back.push(Reply::Slow(
        Duration::from_secs(20),
        Box::new(ok_openai("late")),
    ));
    let client = reqwest::Client::builder()
        .timeout(Duration::from_millis(200))
        .build()
        .unwrap();
    let slow = client
        .post(gw.url("/v1/chat/completions"))
        .header("x-session-id", "s1")
        .json(&chat("prim/model-a"))
        .send();
    // While the fallback runs, the session shows it (R11.3).
    let watcher = async {
        eventually("the override to be written", || {
            gw.session("s1")["modelOverride"] == "model-b"
        })
        .await;
    };
    let (res, ()) = tokio::join!(slow, watcher);
    assert!(res.is_err(), "the client gave up");
    eventually("the upstream call to be cancelled", || {
        gw.back.cancelled() == 1
    })
    .await;
    eventually("the override to be rolled back", || {
        gw.session("s1")["modelOverride"].is_null()
    })
    .await;
    gw.stop().await;
}

// Issue 12 "Bad input": a client that goes away in the middle of a stream
// closes the upstream's stream too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_disconnect_mid_stream_cancels_upstream() {
    let gw = Gw::start("disconnect-stream", Setup::default()).await;
    gw.prim
        .push(Reply::Sse(openai_events(&["Hel"]), Tail::Hang));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let mut r = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let first = r.chunk().await.unwrap().unwrap();
    assert!(String::from_utf8_lossy(&first).contains("Hel"));
    drop(r);
    eventually("the upstream stream to be closed", || {
        gw.prim.cancelled() == 1
    })
    .await;
    let gateway = gw.running.as_ref().unwrap().gateway.clone();
    eventually("the permit to be returned", || gateway.in_flight() == 0).await;
    gw.stop().await;
}

// SPEC R6.4, R11.5: with `x-session-id` the fallback is persisted as an
// auto override and the next turn stays on it; without the header nothing
// is persisted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_5_sessions_are_sticky_only_with_the_header() {
    let gw = Gw::start("sticky", Setup::default()).await;
    gw.prim
        .push(error(429, r#"{"error":{"message":"Rate limit"}}"#));
    gw.back.always(ok_openai("back"));
    let r = gw.openai(chat("prim/model-a"), Some("chat-42")).await;
    assert_eq!(r.status, 200);
    let s = gw.session("chat-42");
    assert_eq!(s["modelOverride"], "model-b");
    assert_eq!(s["modelOverrideSource"], "auto");
    let r = gw.openai(chat("prim/model-a"), Some("chat-42")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("1"));
    assert!(
        r.header("x-failover-notice").is_none(),
        "R13.3: once per change"
    );
    assert_eq!(gw.prim.hits(), 1);
    // Anonymous requests persist no session at all.
    let text = gw.sessions_text();
    assert!(text.contains("chat-42"), "{text}");
    assert!(!text.contains("anonymous"), "{text}");
    gw.stop().await;
}

// Issue 12 "Bad input": past the concurrency limit the gateway answers
// 503 with Retry-After at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saturated_gateway_answers_503_with_retry_after() {
    let gw = Gw::start(
        "saturated",
        Setup {
            extra: "serve: { maxConcurrentRequests: 1 }\n".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(Reply::Slow(
        Duration::from_millis(1200),
        Box::new(ok_openai("slow")),
    ));
    let first = gw.openai(chat("prim/model-a"), None);
    let second = async {
        eventually("the first request to reach the upstream", || {
            gw.prim.hits() == 1
        })
        .await;
        let t = Instant::now();
        let r = gw.anthropic(msg("prim/model-a"), None).await;
        (r, t.elapsed())
    };
    let (a, (b, took)) = tokio::join!(first, second);
    assert_eq!(a.status, 200);
    assert_eq!(b.status, 503);
    assert_eq!(b.header("retry-after").as_deref(), Some("1"));
    assert_eq!(b.json()["error"]["type"], "overloaded_error");
    assert!(took < Duration::from_secs(1));
    gw.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_health_ready_and_metrics() {
    let gw = Gw::start("side", Setup::default()).await;
    let models = Resp::from(gw.http.get(gw.url("/v1/models")).send().await.unwrap()).await;
    let ids: Vec<String> = models.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(ids, ["strict-agent", "prim/model-a", "back/model-b"]);
    let h = Resp::from(gw.http.get(gw.url("/healthz")).send().await.unwrap()).await;
    assert_eq!((h.status, h.text.as_str()), (200, "ok\n"));
    let ready = Resp::from(gw.http.get(gw.url("/readyz")).send().await.unwrap()).await;
    assert_eq!(ready.json()["status"], "ready");
    assert_eq!(ready.json()["ruleset"].as_str().unwrap().len(), 16);

    gw.prim
        .push(error(429, r#"{"error":{"message":"Rate limit"}}"#));
    gw.back.push(ok_openai("ok"));
    gw.openai(chat("prim/model-a"), None).await;
    let m = Resp::from(gw.http.get(gw.url("/metrics")).send().await.unwrap()).await;
    for line in [
        r#"failover_requests_total{protocol="openai",outcome="ok"} 1"#,
        r#"failover_attempts_total{provider="prim",model="model-a",outcome="failed",reason="rate_limit"} 1"#,
        r#"failover_attempts_total{provider="back",model="model-b",outcome="succeeded",reason="none"} 1"#,
        "failover_fallbacks_total 1",
        r#"failover_windows_started_total{kind="cooldown"} 1"#,
        r#"failover_profiles_cooling{provider="prim"} 1"#,
        r#"failover_upstream_latency_seconds_count{provider="back"} 1"#,
        r#"failover_upstream_first_byte_seconds_count{provider="prim"} 1"#,
    ] {
        assert!(m.text.contains(line), "missing {line}:\n{}", m.text);
    }
    let nf = Resp::from(gw.http.get(gw.url("/nope")).send().await.unwrap()).await;
    assert_eq!(nf.status, 404);
    gw.stop().await;
}

// SPEC R5: a literal apiKey refuses to start, without echoing it; an
// environment reference is resolved and sent as the provider's default
// profile, never written to the state directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_api_key_literal_refused_env_reference_used() {
    let prim = Mock::start().await;
    let back = Mock::start().await;
    let dir = temp_dir("apikey");
    let literal = format!(
        "{}    back2:\n      baseUrl: http://127.0.0.1:9/v1\n      api: openai-completions\n      apiKey: sk-LITERAL-LEAK-123456\n",
        config_text(&Setup::default(), &prim, &back)
    );
    std::fs::write(dir.join("g.yaml"), &literal).unwrap();
    let opts = |file: &str| failover_gateway::Options {
        sources: failover_gateway::Sources {
            config: dir.join(file),
            state: dir.join("state"),
            rules: vec![],
            no_defaults: false,
            model: Default::default(),
        },
        listen: "127.0.0.1:0".into(),
        watch: false,
        workers: 0,
    };
    let err = match failover_gateway::start(opts("g.yaml")).await {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a literal key must be refused"),
    };
    assert!(
        err.contains("models.providers.back2.apiKey: a literal API key is refused"),
        "{err}"
    );
    assert!(!err.contains("LITERAL-LEAK"));

    std::env::set_var("FAILOVER_TEST_PRIM_KEY", "sk-env-SECRET-55555555");
    let text = config_text(&Setup::default(), &prim, &back).replace(
        "      models: [model-a]\n",
        "      models: [model-a]\n      apiKey: \"${FAILOVER_TEST_PRIM_KEY}\"\n",
    );
    std::fs::write(dir.join("e.yaml"), text).unwrap();
    let running = failover_gateway::start(opts("e.yaml")).await.unwrap();
    prim.push(ok_openai("env"));
    let r = reqwest::Client::new()
        .post(format!("http://{}/v1/chat/completions", running.addr))
        .json(&chat("prim/model-a"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-failover-profile"], "prim:default");
    assert!(!r.text().await.unwrap().contains("sk-env"));
    assert_eq!(
        prim.seen()[0].headers["authorization"],
        "Bearer sk-env-SECRET-55555555"
    );
    running.shutdown().await;
    let on_disk = dir.join("state/agents/main/agent/auth-profiles.json");
    assert!(!on_disk.exists() || !std::fs::read_to_string(on_disk).unwrap().contains("sk-env"));
    let _ = std::fs::remove_dir_all(&dir);
}

// Issue 44 item 15: a key of a provider the gateway does not read is
// logged at start as `check --config` reports it: a warning with its
// near miss (a `timeout:` for `timeouts:` would otherwise set nothing,
// silently).
#[tokio::test]
async fn i44_15_serve_warns_of_unknown_provider_keys() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let gw = Gw::start(
        "unknown-keys",
        Setup {
            workers: 0,
            prim_keys: "timeout: { totalMs: 5000 }".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.stop().await;
    let text = logs.text();
    assert!(text.contains("models.providers.prim.timeout"), "{text}");
    assert!(text.contains("did you mean `timeouts`?"), "{text}");
}
