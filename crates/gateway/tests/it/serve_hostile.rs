//! Issue 30: what a hostile or broken *upstream* sends cannot panic a
//! request, put a key in front of a client, cool a profile for decades or
//! take the gateway's memory; and what a client sends is bounded before
//! any upstream sees it. Real upstreams on 127.0.0.1, the real gateway.

use crate::serve_support::*;
use serde_json::{json, Value};

/// Every form of `key` a client could decode from a text, and the
/// decodings themselves: the raw text, its JSON strings, percent-decoded,
/// base64 at each alignment.
fn assert_no_key(text: &str, key: &str) {
    let piece = &key[..12];
    let mut views = vec![text.to_string()];
    if let Ok(v) = serde_json::from_str::<Value>(text) {
        fn strings(v: &Value, out: &mut Vec<String>) {
            match v {
                Value::String(s) => out.push(s.clone()),
                Value::Array(a) => a.iter().for_each(|v| strings(v, out)),
                Value::Object(o) => o.iter().for_each(|(k, v)| {
                    out.push(k.clone());
                    strings(v, out)
                }),
                _ => {}
            }
        }
        strings(&v, &mut views);
    }
    let decoded: Vec<String> = views.iter().map(|v| percent_decode(v)).collect();
    views.extend(decoded);
    for v in &views {
        assert!(
            !v.contains(piece),
            "a piece of the key reached the client: {v}"
        );
        for b64 in base64_forms(key) {
            assert!(
                !v.contains(&b64),
                "the key in base64 reached the client: {v}"
            );
        }
    }
}

/// The middle of the key's base64 at each alignment (what any base64 text
/// holding the key must contain).
fn base64_forms(key: &str) -> Vec<String> {
    (0..3)
        .map(|a| {
            let mut b = vec![b'x'; a];
            b.extend_from_slice(key.as_bytes());
            let e = base64(&b);
            e[4..e.len() - 4].to_string()
        })
        .collect()
}

/// The key as a provider might echo it back: JSON `\u` escapes, split
/// across an escape, percent-encoded, in base64 (`Basic user:key`).
fn echoes(key: &str) -> Vec<(&'static str, String)> {
    let escaped: String = key
        .chars()
        .map(|c| format!("\\u{:04x}", c as u32))
        .collect();
    let split = format!("{}\\u{:04x}{}", &key[..9], key.as_bytes()[9], &key[10..]);
    let percent: String = key.bytes().map(|b| format!("%{b:02X}")).collect();
    vec![
        ("json escapes", escaped),
        ("split across an escape", split),
        ("percent-encoded", percent),
        ("base64", base64(format!("user:{key}").as_bytes())),
    ]
}

fn echo_body(form: &str) -> String {
    // `form` is already JSON-string-safe (escapes, %, base64 characters).
    format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {form}. Check your key.","type":"invalid_request_error"}}}}"#
    )
}

// SPEC R7.5, R6.7, R17.1, issue 30 items 1 and 3: a `Retry-After` of any size is
// read into a bounded wait: the request still falls back, the primary's
// cooldown is recorded and capped by the policy (a day for a rate limit),
// and the client is later told the capped value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r7_5_a_retry_after_of_any_size_falls_back_and_is_capped() {
    for (name, value) in [
        ("retry-after", "1e308"),
        ("retry-after", "18446744073709551616"),
        ("retry-after", "999999999"),
        ("retry-after-ms", "1e308"),
        ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
    ] {
        let gw = Gw::start("retry-after", Setup::default()).await;
        gw.prim.always(Reply::Http {
            status: 429,
            headers: vec![(name.into(), value.into())],
            body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
        });
        gw.back.push(ok_openai("from back"));
        let t = now_ms();
        let r = gw.openai(chat("prim/model-a"), None).await;
        assert_eq!(r.status, 200, "{name}: {value}: {}", r.text);
        assert_eq!(
            r.header("x-failover-model").as_deref(),
            Some("back/model-b")
        );
        let until = gw.usage("prim:default")["cooldownUntil"].as_u64().unwrap();
        let day = 24 * 3600 * 1000;
        assert!(
            until >= t + day - 1000 && until <= now_ms() + day,
            "{name}: {value}: cooled until {until}, now {t}"
        );
        // Both candidates cooling now: the client is told the capped wait.
        gw.back.always(Reply::Http {
            status: 429,
            headers: vec![(name.into(), value.into())],
            body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
        });
        let r = gw.openai(chat("prim/model-a"), None).await;
        assert_eq!(r.status, 429, "{}", r.text);
        let told: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!(told <= 24 * 3600, "{name}: {value}: told to wait {told} s");
        gw.stop().await;
    }
}

// SPEC R16.11, issue 30 item 2: a provider that echoes the key in any
// encoding a client could decode puts nothing of it in front of the
// client, on every status, both client protocols, streaming or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_11_an_echoed_key_in_any_encoding_never_reaches_a_client() {
    let gw = Gw::start("echo-encoded", Setup::default()).await;
    let key = SECRETS[0];
    for (what, form) in echoes(key) {
        for status in [400, 401, 429, 500, 503] {
            // The chain (both fail: the summary) and a single candidate
            // (its error is the run's: R16.8).
            for (model, anthropic, stream) in [
                ("prim/model-a", false, false),
                ("prim/model-a", true, true),
                ("strict-agent", false, false),
                ("strict-agent", false, true),
                ("strict-agent", true, false),
                ("strict-agent", true, true),
            ] {
                {
                    gw.prim.push(error(status, &echo_body(&form)));
                    gw.back.push(error(status, &echo_body(&form)));
                    let mut body = if anthropic { msg(model) } else { chat(model) };
                    body["stream"] = json!(stream);
                    let session = format!("s-{what}-{status}-{model}-{anthropic}-{stream}");
                    let r = if anthropic {
                        gw.anthropic(body, Some(&session)).await
                    } else {
                        gw.openai(body, Some(&session)).await
                    };
                    assert!(r.status >= 400, "{what} {status}: {}", r.text);
                    assert_no_key(&r.text, key);
                    for (_, v) in &r.headers {
                        assert_no_key(&String::from_utf8_lossy(v.as_bytes()), key);
                    }
                }
            }
            // Clear the cooldowns the failures left, so every call reaches
            // the upstreams.
            gw.stop_cooling();
        }
    }
    gw.stop().await;
}

// Issue 30 item 2, after the first byte: an error event mid-stream that
// echoes the key ends the client's stream without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_11_an_echoed_key_in_a_stream_error_event_never_reaches_a_client() {
    let gw = Gw::start("echo-stream", Setup::default()).await;
    let key = SECRETS[0];
    for (_, form) in echoes(key) {
        for anthropic in [false, true] {
            let mut events = openai_events(&["Hel", "lo"]);
            events.push(format!("data: {}\n\n", echo_body(&form)));
            gw.prim.push(Reply::Sse(events, Tail::End));
            let mut body = if anthropic {
                msg("prim/model-a")
            } else {
                chat("prim/model-a")
            };
            body["stream"] = json!(true);
            let r = if anthropic {
                gw.anthropic(body, None).await
            } else {
                gw.openai(body, None).await
            };
            assert_eq!(r.status, 200);
            assert!(r.text.contains("error"), "{}", r.text);
            assert_no_key(&r.text, key);
            for line in r.text.lines() {
                if let Some(d) = line.strip_prefix("data: ") {
                    assert_no_key(d, key);
                }
            }
            gw.stop_cooling();
        }
    }
    gw.stop().await;
}

// Issue 30 item 5: an upstream stream event that is not JSON is a broken
// stream for both client protocols: before the first byte the chain moves
// on; after it the client's stream ends with an error event, and the
// attempt is counted as failed, never as a success.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_event_that_is_not_json_is_a_broken_stream() {
    let gw = Gw::start("bad-event", Setup::default()).await;
    // As the first event: the fallback answers.
    for anthropic in [false, true] {
        gw.prim
            .push(Reply::Sse(vec!["data: {not json\n\n".into()], Tail::End));
        let mut ev = openai_events(&["fine"]);
        ev.extend(openai_stream_end());
        gw.back.push(Reply::Sse(ev, Tail::End));
        let mut body = if anthropic {
            msg("prim/model-a")
        } else {
            chat("prim/model-a")
        };
        body["stream"] = json!(true);
        let r = if anthropic {
            gw.anthropic(body, None).await
        } else {
            gw.openai(body, None).await
        };
        assert_eq!(r.status, 200);
        assert_eq!(
            r.header("x-failover-model").as_deref(),
            Some("back/model-b")
        );
        assert!(r.text.contains("fine"), "{}", r.text);
        assert!(!r.text.contains("not json"), "{}", r.text);
        gw.stop_cooling();
    }
    // After the first byte: an error event, never the bytes as they came.
    for anthropic in [false, true] {
        let mut ev = openai_events(&["Hel"]);
        ev.push("data: {not json\n\n".into());
        ev.extend(openai_stream_end());
        gw.prim.push(Reply::Sse(ev, Tail::End));
        let mut body = if anthropic {
            msg("prim/model-a")
        } else {
            chat("prim/model-a")
        };
        body["stream"] = json!(true);
        let r = if anthropic {
            gw.anthropic(body, None).await
        } else {
            gw.openai(body, None).await
        };
        assert!(!r.text.contains("{not json"), "{}", r.text);
        if anthropic {
            assert!(r.text.contains("event: message_start"), "{}", r.text);
            assert!(r.text.contains("event: error"), "{}", r.text);
            assert!(!r.text.contains("event: message_stop"), "{}", r.text);
        } else {
            assert!(r.text.contains(r#""error""#), "{}", r.text);
            assert!(!r.text.contains("[DONE]"), "{}", r.text);
        }
        gw.stop_cooling();
    }
    let metrics = gw
        .http
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let failed_mid: u64 = metrics
        .lines()
        .filter(|l| {
            l.starts_with("failover_attempts_total") && l.contains(r#"outcome="failed_mid_stream""#)
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum();
    assert_eq!(failed_mid, 2, "{metrics}");
    gw.stop().await;
}

// Issue 30 item 6: a model name past the bound is a 400 in the client's
// protocol before any upstream call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_name_past_the_bound_is_refused_before_any_upstream_call() {
    let gw = Gw::start("long-model", Setup::default()).await;
    let long = format!("prim/{}", "m".repeat(300));
    let r = gw.openai(chat(&long), None).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    assert!(r.header("x-failover-model").is_none());
    assert!(r.text.len() < 400, "{}", r.text);
    let r = gw.anthropic(msg(&long), None).await;
    assert_eq!(r.status, 400);
    assert_eq!(r.json()["type"], "error");
    assert_eq!(gw.prim.hits() + gw.back.hits(), 0);
    gw.stop().await;
}

// Issue 30 item 7: a wrong method on a known path is a 405 with `Allow`
// and an error body in the path's protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_method_is_405_with_allow_and_an_error_body() {
    let gw = Gw::start("method", Setup::default()).await;
    for (path, allow) in [
        ("/v1/chat/completions", "POST"),
        ("/v1/messages", "POST"),
        ("/v1/models", "GET"),
        ("/metrics", "GET"),
    ] {
        let method = if allow == "POST" {
            reqwest::Method::GET
        } else {
            reqwest::Method::DELETE
        };
        let r = Resp::from(gw.http.request(method, gw.url(path)).send().await.unwrap()).await;
        assert_eq!(r.status, 405, "{path}");
        assert_eq!(r.header("allow").as_deref(), Some(allow), "{path}");
        let v = r.json();
        if path == "/v1/messages" {
            assert_eq!(v["type"], "error");
            assert!(v["error"]["message"].as_str().unwrap().contains(allow));
        } else {
            assert!(v["error"]["message"].as_str().unwrap().contains(allow));
        }
    }
    gw.stop().await;
}

// Issue 30 item 7: an HTTP/2 client with prior knowledge is told, in its
// own protocol, to use HTTP/1.1 (GOAWAY, HTTP_1_1_REQUIRED), instead of
// a connection closed without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_prior_knowledge_is_told_to_use_http_1_1() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let gw = Gw::start("h2c", Setup::default()).await;
    let mut s = tokio::net::TcpStream::connect(gw.addr()).await.unwrap();
    s.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .expect("the gateway answers and closes")
        .unwrap();
    // Frames: an empty SETTINGS, then GOAWAY (type 7) with error 0xd.
    assert_eq!(&got[..9], &[0, 0, 0, 4, 0, 0, 0, 0, 0]);
    let goaway = &got[9..];
    assert_eq!(goaway[3], 7, "{got:?}");
    let len = u32::from_be_bytes([0, goaway[0], goaway[1], goaway[2]]) as usize;
    let payload = &goaway[9..9 + len];
    assert_eq!(u32::from_be_bytes(payload[4..8].try_into().unwrap()), 0xd);
    assert!(String::from_utf8_lossy(&payload[8..]).contains("HTTP/1.1"));
    // HTTP/1.1 still works on a new connection.
    let r = gw.http.get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    gw.stop().await;
}

// Issue 30 item 7: upstream answers held in memory are bounded across
// requests (`serve.maxBufferedBytes`): an answer past the budget is not
// read, the candidate is skipped with the reason named (nothing held
// against its profile), and the chain goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buffer_budget_refuses_an_answer_past_it_with_a_clear_reason() {
    let gw = Gw::start(
        "budget",
        Setup {
            extra: "serve:\n  maxBufferedBytes: 65536\n".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_openai(&"x".repeat(200_000)));
    gw.back.push(ok_openai("small"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "small");
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    assert_eq!(gw.usage("prim:default")["cooldownUntil"], Value::Null);
    // With nothing else to try, the client is told why.
    gw.prim.push(ok_openai(&"x".repeat(200_000)));
    let r = gw.openai(chat("strict-agent"), None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(r.text.contains("serve.maxBufferedBytes"), "{}", r.text);
    // The budget was given back: a small answer still goes through.
    gw.prim.push(ok_openai("fits"));
    let r = gw.openai(chat("strict-agent"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    gw.stop().await;
}

// Issue 44 (a per-request share of the budget): with a 1 MiB budget of
// which one request may hold 256 KiB (`serve.maxRequestBufferedBytes`), a
// 400 KB answer is refused though the budget has room — named by the
// share's setting — and the chain goes on; an answer within the share
// passes. Unwritten, the share is half the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_2_one_request_holds_at_most_its_share_of_the_budget() {
    let gw = Gw::start(
        "share",
        Setup {
            extra: "serve:\n  maxBufferedBytes: 1048576\n  maxRequestBufferedBytes: 262144\n"
                .into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_openai(&"x".repeat(400_000)));
    gw.back.push(ok_openai("small"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "small");
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    gw.prim.push(ok_openai(&"x".repeat(400_000)));
    let r = gw.openai(chat("strict-agent"), None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert!(
        r.text.contains("serve.maxRequestBufferedBytes"),
        "{}",
        r.text
    );
    // Within the share: answered.
    gw.prim.push(ok_openai(&"y".repeat(100_000)));
    let r = gw.openai(chat("strict-agent"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    gw.stop().await;
}

// Issue 48 item 5: an HTML 502 page and a JSON 500 are both `timeout` by
// the SPEC's table, and their causes tell them apart: `html_page` and
// `http_5xx`, in the client's attempts (x-failover-attempts' records) and
// in /metrics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i48_5_the_cause_beside_the_reason() {
    let gw = Gw::start("cause", Setup::default()).await;
    gw.prim.push(Reply::Http {
        status: 502,
        headers: vec![("content-type".into(), "text/html".into())],
        body: "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center><hr><center>nginx</center></body></html>".into(),
    });
    gw.back.push(error(500, r#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error"}}"#));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 503, "{}", r.text);
    let attempts = r.json()["error"]["failover"]["attempts"].clone();
    let got: Vec<(String, String)> = attempts
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["reason"].as_str().unwrap_or("").to_string(),
                a["cause"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("timeout".to_string(), "html_page".to_string()),
            ("timeout".to_string(), "http_5xx".to_string())
        ],
        "{attempts}"
    );
    let m = metrics(&gw).await;
    assert!(m.contains(r#"cause="html_page""#), "{m}");
    assert!(m.contains(r#"cause="http_5xx""#), "{m}");
    gw.stop().await;
}

// Issue 30 (found by fuzz_upstream.rs): an error object under a 200
// is a failure, classified from its body, never an answer passed through
// as it came (it may echo the key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_object_under_a_200_is_a_failure() {
    let gw = Gw::start("error-200", Setup::default()).await;
    gw.prim.push(Reply::Http {
        status: 200,
        headers: vec![],
        body: r#"{"error":{"message":"Rate limit reached for requests","type":"requests"}}"#.into(),
    });
    gw.back.push(ok_openai("from back"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "from back");
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "rate_limit");
    gw.stop().await;
}
