//! `failover serve` against scripted real upstreams on 127.0.0.1: each
//! provider failure a gateway meets, and what the client and the state see.

use std::time::{Duration, Instant};

use crate::serve_support::*;
use serde_json::json;

// SPEC R7.1, R6.7, R1.2, R13.1, issue 12 item 7: a 429 with Retry-After
// cools the primary until the provider's reset and the fallback answers,
// with the gateway's headers and the notice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_429_with_retry_after_falls_back() {
    let gw = Gw::start("429", Setup::default()).await;
    gw.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "30".into())],
        body: r#"{"error":{"message":"Rate limit reached for requests","type":"requests"}}"#.into(),
    });
    gw.back.push(ok_openai("from back"));
    let t = now_ms();
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "from back");
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(
        r.header("x-failover-profile").as_deref(),
        Some("back:default")
    );
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    let own: u64 = r.header("x-failover-overhead-us").unwrap().parse().unwrap();
    assert!(own < 5_000_000);
    // Issue 48 item 1: ASCII, with the whole notice in RFC 8187 form.
    assert_eq!(
        r.header("x-failover-notice").as_deref(),
        Some("Model Fallback: back/model-b (selected prim/model-a; rate limit); text*=UTF-8''%E2%86%AA%EF%B8%8F%20Model%20Fallback%3A%20back%2Fmodel-b%20%28selected%20prim%2Fmodel-a%3B%20rate%20limit%29")
    );
    // The upstreams got the candidate's model and their own key.
    let seen = gw.prim.seen();
    assert_eq!(seen[0].path, "/v1/chat/completions");
    assert_eq!(seen[0].body["model"], "model-a");
    assert_eq!(
        seen[0].headers["authorization"].to_str().unwrap(),
        format!("Bearer {}", SECRETS[0])
    );
    assert_eq!(gw.back.seen()[0].body["model"], "model-b");
    let u = gw.usage("prim:default");
    assert_eq!(u["cooldownReason"], "rate_limit");
    let until = u["cooldownUntil"].as_u64().unwrap();
    assert!(
        until >= t + 29_000 && until <= now_ms() + 31_000,
        "{until} vs {t}"
    );
    gw.stop().await;
}

// SPEC R14.3, issue 12 item 7: every candidate cooling → 429 with the
// soonest expiry as Retry-After and every attempt in the body, in the
// client protocol's error shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r14_3_exhausted_chain_is_429_with_retry_after() {
    let gw = Gw::start("exhausted", Setup::default()).await;
    for (m, secs) in [(&gw.prim, "40"), (&gw.back, "20")] {
        m.push(Reply::Http {
            status: 429,
            headers: vec![("retry-after".into(), secs.into())],
            body: r#"{"error":{"message":"Too many requests"}}"#.into(),
        });
    }
    let r = gw.anthropic(msg("prim/model-a"), None).await;
    assert_eq!(r.status, 429, "{}", r.text);
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((18..=20).contains(&retry), "{retry}");
    let v = r.json();
    assert_eq!(v["type"], "error");
    assert_eq!(v["error"]["type"], "rate_limit_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("All models failed (2): prim/model-a: "));
    let attempts = v["error"]["failover"]["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[1]["reason"], "rate_limit");
    gw.stop().await;
}

// Issue 35: an unreachable upstream is not the client's rate limit. Every
// candidate failing to connect is a 503 in the protocol's shape (with
// Retry-After: both cool down), the summary names each host and the
// cause, `x-failover-attempts` counts the attempts; the next request,
// with every candidate cooling, is still a 503.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_upstreams_are_503_naming_host_and_cause() {
    let closed = || {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let (p1, p2) = (closed(), closed());
    let dir = temp_dir("unreachable");
    write_profiles(&dir);
    let config = format!(
        r#"agents:
  defaults:
    model:
      primary: prim/model-a
      fallbacks: [back/model-b]
models:
  providers:
    prim:
      baseUrl: "http://127.0.0.1:{p1}/v1"
      api: openai-completions
      models: [model-a]
    back:
      baseUrl: "http://127.0.0.1:{p2}/v1"
      api: openai-completions
      models: [model-b]
"#
    );
    std::fs::write(dir.join("gateway.yaml"), config).unwrap();
    let running = failover_gateway::start(failover_gateway::Options {
        sources: failover_gateway::Sources {
            config: dir.join("gateway.yaml"),
            state: dir.join("state"),
            rules: Vec::new(),
            no_defaults: false,
            model: Default::default(),
        },
        listen: "127.0.0.1:0".into(),
        watch: false,
        workers: 0,
    })
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let http = reqwest::Client::new();
    let post = |path: &'static str, body: serde_json::Value| {
        let url = format!("http://{}{path}", running.addr);
        let req = http.post(url).json(&body);
        async move { Resp::from(req.send().await.unwrap()).await }
    };

    let r = post("/v1/chat/completions", chat("prim/model-a")).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.header("retry-after").is_some(), "{:?}", r.headers);
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    let v = r.json();
    assert_eq!(v["error"]["type"], "server_error");
    let message = v["error"]["message"].as_str().unwrap();
    for p in [p1, p2] {
        assert!(
            message.contains(&format!("127.0.0.1:{p}: connection refused")),
            "{message}"
        );
    }
    let attempts = v["error"]["failover"]["attempts"].as_array().unwrap();
    assert!(
        attempts.iter().all(|a| a["reason"] == "timeout"),
        "{attempts:?}"
    );
    // Issue 48 item 5: the reason stays the SPEC's `timeout`; the cause
    // says the connection was refused, in the attempt and in /metrics.
    assert!(
        attempts.iter().all(|a| a["cause"] == "connect"),
        "{attempts:?}"
    );
    let m = http
        .get(format!("http://{}/metrics", running.addr))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        m.contains(
            r#"failover_failure_causes_total{provider="prim",reason="timeout",cause="connect"} 1"#
        ),
        "{m}"
    );

    // Both cooling now: skipped, still not a rate limit (Anthropic's
    // overloaded type for its clients).
    let r = post("/v1/messages", msg("prim/model-a")).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.header("retry-after").is_some());
    assert_eq!(r.json()["error"]["type"], "overloaded_error");
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    running.shutdown().await;
}

// Issue 35: no keyless call by accident. An agent without a credential
// for a provider (here `strict-agent` once its profiles are gone) is
// refused before anything is sent, as `auth`, with the fix; a provider
// declared `auth: none` is called without one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_credential_is_refused_as_auth_not_sent() {
    let gw = Gw::start(
        "nocredential",
        Setup {
            workers: 0,
            ..Setup::default()
        },
    )
    .await;
    std::fs::remove_file(
        gw.dir
            .join("state/agents/strict-agent/agent/auth-profiles.json"),
    )
    .unwrap();
    gw.prim.always(ok_openai("should not be called"));
    let r = gw.openai(chat("strict-agent"), None).await;
    assert_eq!(r.status, 401, "{}", r.text);
    let v = r.json();
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no credential for provider `prim`"),
        "{message}"
    );
    assert!(message.contains("auth: none"), "{message}");
    assert_eq!(v["error"]["failover"]["reason"], "auth");
    assert_eq!(
        gw.prim.hits(),
        0,
        "nothing may be sent without a credential"
    );
    gw.stop().await;

    // Declared keyless: called, with no credential header.
    let gw = Gw::start(
        "keyless",
        Setup {
            workers: 0,
            ..Setup::default()
        },
    )
    .await;
    let text = std::fs::read_to_string(gw.dir.join("gateway.yaml")).unwrap();
    let text = text.replacen(
        "      models: [model-a]\n",
        "      models: [model-a]\n      auth: none\n",
        1,
    );
    std::fs::write(gw.dir.join("gateway.yaml"), text).unwrap();
    gw.running.as_ref().unwrap().gateway.reload().unwrap();
    std::fs::remove_file(
        gw.dir
            .join("state/agents/strict-agent/agent/auth-profiles.json"),
    )
    .unwrap();
    gw.prim.push(ok_openai("keyless answer"));
    let r = gw.openai(chat("strict-agent"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let seen = gw.prim.seen();
    assert!(seen[0].headers.get("authorization").is_none());
    gw.stop().await;
}

// Exhausted without a cooldown everywhere (a 500 then a format-free
// unknown error) is 503, no Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r14_3_exhausted_without_cooldowns_is_503() {
    let gw = Gw::start("exhausted503", Setup::default()).await;
    gw.prim.push(error(
        404,
        r#"{"error":{"message":"The model `model-a` does not exist","code":"model_not_found"}}"#,
    ));
    gw.back.push(error(
        404,
        r#"{"error":{"message":"The model `model-b` does not exist","code":"model_not_found"}}"#,
    ));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.header("retry-after").is_none());
    assert_eq!(r.json()["error"]["code"], "fallback_summary");
    gw.stop().await;
}

// SPEC R14.3: Retry-After says when waiting helps, so only when every
// candidate is cooling: one rate-limited (and cooling) and one whose model
// does not exist is a 503 without it (issue 36: a mutant that gave it
// whenever any attempt was made survived).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r14_3_a_partly_cooling_chain_has_no_retry_after() {
    let gw = Gw::start("partlycooling", Setup::default()).await;
    gw.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "20".into())],
        body: r#"{"error":{"message":"Too many requests"}}"#.into(),
    });
    gw.back.push(error(
        404,
        r#"{"error":{"message":"The model `model-b` does not exist","code":"model_not_found"}}"#,
    ));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.header("retry-after").is_none(), "{:?}", r.headers);
    let v = r.json();
    let attempts = v["error"]["failover"]["attempts"].as_array().unwrap();
    let reasons: Vec<_> = attempts.iter().map(|a| a["reason"].clone()).collect();
    assert_eq!(reasons, ["rate_limit", "model_not_found"]);
    gw.stop().await;
}

// SPEC R8.5, R16.7: Anthropic's 529 overloaded moves on (one profile, so
// to the next model) and cools the profile; cross-protocol here: an
// Anthropic client answered by an OpenAI-compatible fallback.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_7_anthropic_529_overloaded_falls_back_across_protocols() {
    let gw = Gw::start(
        "529",
        Setup {
            prim_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(error(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ));
    gw.back.push(ok_openai("translated"));
    let r = gw.anthropic(msg("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["type"], "message");
    assert_eq!(v["content"][0]["text"], "translated");
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"]["output_tokens"], 2);
    let p = gw.prim.seen();
    assert_eq!(p[0].path, "/v1/messages");
    assert_eq!(p[0].headers["x-api-key"].to_str().unwrap(), SECRETS[0]);
    assert_eq!(
        p[0].headers["anthropic-version"].to_str().unwrap(),
        "2023-06-01"
    );
    // The OpenAI upstream got an OpenAI request.
    let b = gw.back.seen();
    assert_eq!(
        b[0].body["messages"][0],
        json!({"role": "user", "content": "hi"})
    );
    assert_eq!(b[0].body["max_tokens"], 32);
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "overloaded");
    gw.stop().await;
}

// SPEC R8.1: a 402 billing body disables the profile (long lane).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r8_1_billing_402_disables_and_falls_back() {
    let gw = Gw::start("402", Setup::default()).await;
    gw.prim.push(error(
        402,
        r#"{"error":{"message":"Insufficient credits. Add more using https://example.com/credits","code":402}}"#,
    ));
    gw.back.push(ok_openai("ok"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let u = gw.usage("prim:default");
    assert_eq!(u["disabledReason"], "billing");
    assert!(u["disabledUntil"].as_u64().unwrap() > now_ms() + 4 * 3_600_000);
    gw.stop().await;
}

// SPEC R9.2: a context overflow stops the run: the upstream's status and
// message pass through, and the fallback is never called.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_2_context_overflow_stops_and_passes_through() {
    let gw = Gw::start("overflow", Setup::default()).await;
    gw.prim.push(error(
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
    ));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let v = r.json();
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("This model's maximum context length is 8192 tokens"));
    assert_eq!(v["error"]["type"], "invalid_request_error");
    assert_eq!(v["error"]["failover"]["reason"], "context_overflow");
    assert_eq!(gw.back.hits(), 0);
    assert!(gw.usage("prim:default")["cooldownUntil"].is_null());
    gw.stop().await;
}

// SPEC R9.1, R16.7: a decommissioned model (OpenAI's 404 model_not_found)
// advances to the next model without cooling the profile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_1_decommissioned_model_advances_without_cooldown() {
    let gw = Gw::start("decommissioned", Setup::default()).await;
    gw.prim.push(error(
        404,
        r#"{"error":{"message":"The model `model-a` has been deprecated, learn more here: https://platform.openai.com/docs/deprecations","type":"invalid_request_error","code":"model_not_found"}}"#,
    ));
    gw.back.push(ok_openai("ok"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(gw.usage("prim:default")["cooldownUntil"].is_null());
    gw.stop().await;
}

// Issue 12 item 6: a first byte slower than `firstByteMs` is a `timeout`
// (cooldown) and the chain goes on, without waiting for the slow upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_first_byte_times_out_as_timeout() {
    let gw = Gw::start(
        "ttfb",
        Setup {
            first_byte_ms: 300,
            ..Setup::default()
        },
    )
    .await;
    // The primary would answer after 60 s: a client served in less than
    // half of that was served by the deadline (300 ms), not by the wait;
    // the bound is loose because a loaded runner is slow (issue 36).
    gw.prim.push(Reply::Slow(
        Duration::from_secs(60),
        Box::new(ok_openai("late")),
    ));
    gw.back.push(ok_openai("on time"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("on time"), "{}", r.text);
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "timeout");
    // The abandoned upstream call was cancelled, not left running.
    eventually("the slow call to be cancelled", || gw.prim.cancelled() == 1).await;
    gw.stop().await;
}

// SPEC R16.7: an HTML 502 page is classified from status and body as
// received, and the chain goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_7_html_502_page_falls_back() {
    let gw = Gw::start("html502", Setup::default()).await;
    gw.prim.push(Reply::Http {
        status: 502,
        headers: vec![("content-type".into(), "text/html".into())],
        body: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>".into(),
    });
    gw.back.push(ok_openai("ok"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "timeout");
    gw.stop().await;
}

// Issue 12 "Bad input and faults": an error body is read only up to the
// 1 MiB head; an endless one does not hold the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endless_error_body_is_read_to_its_head_only() {
    let gw = Gw::start("endless", Setup::default()).await;
    gw.prim.push(Reply::Endless(500));
    gw.back.push(ok_openai("ok"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The body never ends: any answer at all proves the head limit; the
    // bound is a hang detector, loose for a loaded runner (issue 36).
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    gw.stop().await;
}

// Streaming, same protocol, both clients: events pass through and the
// gateway's headers come first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_pass_through_in_both_protocols() {
    let gw = Gw::start(
        "stream",
        Setup {
            back_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    let mut ev = openai_events(&["Hel", "lo"]);
    ev.extend(openai_stream_end());
    gw.prim.push(Reply::Sse(ev, Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("prim/model-a")
    );
    assert!(r.text.contains("\"Hel\"") && r.text.contains("\"lo\""));
    assert!(r.text.trim_end().ends_with("data: [DONE]"), "{}", r.text);
    gw.back
        .push(Reply::Sse(anthropic_events(&["Hi"], true), Tail::End));
    let mut body = msg("back/model-b");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    assert_eq!(r.status, 200);
    assert!(r.text.starts_with("event: message_start\n"), "{}", r.text);
    assert!(
        r.text
            .trim_end()
            .ends_with("data: {\"type\":\"message_stop\"}"),
        "{}",
        r.text
    );
    gw.stop().await;
}

// Issue 12 item 6: an error as the stream's first event comes before any
// byte reached the client, so the chain goes on (here across protocols:
// Anthropic upstream error → OpenAI-compatible fallback, streamed to the
// Anthropic client as Anthropic events).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_error_before_first_byte_falls_back_translated() {
    let gw = Gw::start(
        "stream-first-error",
        Setup {
            prim_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(Reply::Sse(
        vec!["event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n".into()],
        Tail::End,
    ));
    let mut ev = openai_events(&["Trans", "lated"]);
    ev.extend(openai_stream_end());
    gw.back.push(Reply::Sse(ev, Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    let names: Vec<&str> = r
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    assert_eq!(
        gw.back.seen()[0].body["stream_options"]["include_usage"],
        true
    );
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "overloaded");
    gw.stop().await;
}

// Issue 12 item 6: a stream cut after the first byte ends with an error
// event in the client's shape, and the failure is still recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_cut_midway_ends_with_error_event_and_cools() {
    let gw = Gw::start("stream-cut", Setup::default()).await;
    gw.prim
        .push(Reply::Sse(openai_events(&["Hel", "lo"]), Tail::Cut));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 200);
    assert!(r.text.contains("\"Hel\""));
    let last = r.text.trim_end().lines().last().unwrap();
    let v: serde_json::Value = serde_json::from_str(last.strip_prefix("data: ").unwrap()).unwrap();
    assert_eq!(v["error"]["type"], "server_error");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("connection reset"));
    // Issue 32: the fallback was asked to finish the answer; it could not
    // (unscripted: 500), so the client gets the error of the cut itself.
    assert_eq!(gw.back.hits(), 1);
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "timeout");

    // The Anthropic shape, for a stream that stalls past the timeout.
    let gw2 = Gw::start(
        "stream-stall",
        Setup {
            prim_api: "anthropic-messages",
            first_byte_ms: 300,
            ..Setup::default()
        },
    )
    .await;
    gw2.prim
        .push(Reply::Sse(anthropic_events(&["Hi"], false), Tail::Hang));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw2.anthropic(body, None).await;
    assert!(r.text.contains("\"Hi\""));
    let mut lines = r.text.trim_end().lines().rev();
    let data = lines.next().unwrap().strip_prefix("data: ").unwrap();
    assert_eq!(lines.next(), Some("event: error"), "{}", r.text);
    let v: serde_json::Value = serde_json::from_str(data).unwrap();
    assert_eq!(
        (v["type"].as_str(), v["error"]["type"].as_str()),
        (Some("error"), Some("api_error"))
    );
    assert!(v["error"]["message"].as_str().unwrap().contains("stalled"));
    assert_eq!(gw2.usage("prim:default")["cooldownReason"], "timeout");
    gw2.stop().await;
    gw.stop().await;
}

// Issue 12 item 5: a feature the other protocol cannot express skips that
// candidate with the reason recorded; nothing is sent to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn untranslatable_request_skips_the_candidate() {
    let gw = Gw::start(
        "untranslatable",
        Setup {
            prim_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.back.push(ok_openai("plain"));
    let mut body = chat("prim/model-a");
    body["logprobs"] = json!(true);
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    assert_eq!(gw.prim.hits(), 0);
    assert!(gw.usage("prim:default").is_null());
    // Alone (a strict agent), the skip is the error the client sees.
    let mut body = chat("strict-agent");
    body["logprobs"] = json!(true);
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    let v = r.json();
    let a = &v["error"]["failover"]["attempts"][0];
    assert_eq!(a["outcome"], "skipped");
    assert!(a["error"]
        .as_str()
        .unwrap()
        .contains("`logprobs` has no Anthropic Messages equivalent"));
    gw.stop().await;
}

// SPEC R16.11: a provider that echoes the key in its error: the client's
// error has it redacted, and no header carries it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_11_echoed_key_never_reaches_the_client() {
    let gw = Gw::start("echo", Setup::default()).await;
    gw.prim.push(error(
        401,
        &format!(r#"{{"error":{{"message":"Incorrect API key provided: {}. You can find your API key at …","type":"invalid_request_error","code":"invalid_api_key"}}}}"#, SECRETS[0]),
    ));
    // A one-shot model (strict, SPEC R3): the single attempt's error is
    // surfaced as it is, scrubbed.
    let r = gw.openai(chat("prim/model-x"), None).await; // Resp checks every secret
    assert_eq!(r.status, 401, "{}", r.text);
    assert!(r.text.contains("<redacted>"), "{}", r.text);
    gw.stop().await;
}

// Issue 12 "Bad input": upstream headers are never copied to the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_headers_are_not_copied() {
    let gw = Gw::start("headers", Setup::default()).await;
    gw.prim.push(Reply::Http {
        status: 200,
        headers: vec![
            ("set-cookie".into(), "s=1".into()),
            ("x-api-key".into(), "upstream-echo".into()),
            ("www-authenticate".into(), "Bearer".into()),
            ("x-request-id".into(), "req-1".into()),
            ("keep-alive".into(), "timeout=5".into()),
        ],
        body: match ok_openai("ok") {
            Reply::Http { body, .. } => body,
            _ => unreachable!(),
        },
    });
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200);
    for h in [
        "set-cookie",
        "x-api-key",
        "www-authenticate",
        "x-request-id",
        "keep-alive",
    ] {
        assert!(r.header(h).is_none(), "{h} copied");
    }
    gw.stop().await;
}

// Issue 12 item 5, streaming: an OpenAI client streaming from an Anthropic
// upstream gets OpenAI chunks, usage included when it asked for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_client_streams_from_an_anthropic_upstream() {
    let gw = Gw::start(
        "stream-translate",
        Setup {
            prim_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(Reply::Sse(
        anthropic_events(&["Hi", " there"], true),
        Tail::End,
    ));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let sent = &gw.prim.seen()[0].body;
    assert_eq!(sent["stream"], true);
    assert!(sent.get("stream_options").is_none(), "{sent}");
    let chunks: Vec<serde_json::Value> = r
        .text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hi there");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "stop"));
    assert_eq!(chunks.last().unwrap()["usage"]["completion_tokens"], 2);
    assert!(r.text.trim_end().ends_with("data: [DONE]"));
    gw.stop().await;
}

// A whole answer in the client's own protocol is passed on as the upstream
// sent it (bytes, spacing and key order kept); a 200 whose body is not one
// JSON object is a failure of that upstream, and the chain goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_protocol_answers_pass_through_and_a_non_json_200_falls_back() {
    let gw = Gw::start("passthrough", Setup::default()).await;
    let body = "{ \"z_last_first\": 1,\n  \"id\": \"cmpl-9\", \"object\": \"chat.completion\", \"model\": \"m\",\n  \"choices\": [{\"index\": 0, \"message\": {\"role\": \"assistant\", \"content\": \"as sent\"}, \"finish_reason\": \"stop\"}] }\n";
    gw.prim.push(Reply::Http {
        status: 200,
        headers: vec![],
        body: body.into(),
    });
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.text, body);
    assert_eq!(
        r.header("content-type").as_deref(),
        Some("application/json")
    );

    gw.prim.push(Reply::Http {
        status: 200,
        headers: vec![],
        body: "{\"id\": \"cmpl-10\", \"choices\": [".into(),
    });
    gw.back.push(ok_openai("from back"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "from back");
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    gw.stop().await;
}

// SPEC R6.2: the success record of a request without `x-session-id` (the
// profile's `lastUsed`, which orders the round-robin) is written after the
// answer has gone out, not lost; with a session whose entry changes (its
// first turn pins the profile) it is written before, in the session's own
// transaction; a later turn with nothing to settle writes it after again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r6_2_success_record_without_a_session_is_written_after_the_answer() {
    let gw = Gw::start("deferred-record", Setup::default()).await;
    gw.prim.always(ok_openai("ok"));
    let before = now_ms();
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("x-failover-profile").as_deref(),
        Some("prim:default")
    );
    eventually("the success record", || {
        gw.usage("prim:default")["lastUsed"]
            .as_u64()
            .is_some_and(|t| t >= before)
    })
    .await;
    let with_session = now_ms() + 1;
    tokio::time::sleep(Duration::from_millis(2)).await;
    let r = gw.openai(chat("prim/model-a"), Some("s-record")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let used = gw.usage("prim:default")["lastUsed"].as_u64().unwrap();
    assert!(used >= with_session, "written before the answer: {used}");
    let entry = gw.session("s-record");
    assert_eq!(entry["authProfileOverride"], "prim:default", "{entry}");
    tokio::time::sleep(Duration::from_millis(2)).await;
    let next_turn = now_ms();
    let r = gw.openai(chat("prim/model-a"), Some("s-record")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    eventually("the next turn's success record", || {
        gw.usage("prim:default")["lastUsed"]
            .as_u64()
            .is_some_and(|t| t >= next_turn)
    })
    .await;
    assert_eq!(gw.session("s-record"), entry, "nothing of it to settle");
    // A drain right after an answer: its record is written before the
    // gateway stops (the ones before it are older by the pause).
    tokio::time::sleep(Duration::from_millis(20)).await;
    let last = now_ms();
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let dir = gw.dir.clone();
    let mut gw = gw;
    gw.running.take().unwrap().shutdown().await;
    let (docs, _) = failover::state::open_docs(None, &dir.join("state"), "main").unwrap();
    let used = docs.load_state().unwrap().usage_stats["prim:default"]
        .last_used
        .unwrap();
    assert!(used >= last, "the last answer's record: {used} < {last}");
    let _ = std::fs::remove_dir_all(&dir);
}

// SPEC R5.1, R2.3: the secrets are read at each run's start, so an edit of
// `auth-profiles.json` while the gateway serves (a rotated key written in
// place, then one renamed into place, as editors and secret tools do) is
// used by the very next request, with no reload and no wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r5_1_an_edited_secrets_file_is_used_by_the_next_request() {
    let gw = Gw::start("edited-secrets", Setup::default()).await;
    gw.prim.always(ok_openai("ok"));
    let file = gw.dir.join("state/agents/main/agent/auth-profiles.json");
    let doc = |key: &str| {
        json!({"version": 1, "profiles": {
            "prim:default": {"type": "api_key", "provider": "prim", "key": key},
        }})
        .to_string()
    };
    let keys = ["sk-prim-ROTATED-1111111111", "sk-prim-ROTATED-2222222222"];
    // Two requests after each edit: the first reads it, the second is
    // served from what the first read.
    let two = || async {
        for _ in 0..2 {
            let r = gw.openai(chat("prim/model-a"), None).await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert!(!r.text.contains("ROTATED"));
        }
    };
    two().await;
    std::fs::write(&file, doc(keys[0])).unwrap();
    two().await;
    let next = file.with_file_name("auth-profiles.json.new");
    std::fs::write(&next, doc(keys[1])).unwrap();
    std::fs::rename(&next, &file).unwrap();
    two().await;
    let sent: Vec<String> = gw
        .prim
        .seen()
        .iter()
        .map(|s| s.headers["authorization"].to_str().unwrap().to_string())
        .collect();
    let want: Vec<String> = [SECRETS[0], SECRETS[0], keys[0], keys[0], keys[1], keys[1]]
        .iter()
        .map(|k| format!("Bearer {k}"))
        .collect();
    assert_eq!(sent, want);
    gw.stop().await;
}
