//! Issue 32: streams. Completion by the protocol's own markers (item 1),
//! the stream deadlines (item 3), continuation after the first byte
//! (item 2). Real HTTP on loopback: a scripted upstream per case.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::serve_support::*;

fn oa_chunk(delta: Value, finish: Option<&str>) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    )
}

fn oa_usage(prompt: u64, completion: u64) -> String {
    format!(
        "data: {}\n\n",
        json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m", "choices": [],
               "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}})
    )
}

/// `Hel` `lo`, a finish, optionally a usage chunk; never `[DONE]`.
fn oa_without_done(usage: bool) -> Vec<String> {
    let mut ev = openai_events(&["Hel", "lo"]);
    ev.push(oa_chunk(json!({}), Some("stop")));
    if usage {
        ev.push(oa_usage(7, 2));
    }
    ev
}

/// The `data:` payloads of an SSE text, JSON-parsed where they are JSON.
fn datas(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

fn event_names(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect()
}

/// The text an OpenAI client assembles from the chunks.
fn openai_text(text: &str) -> String {
    datas(text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

/// The text an Anthropic client assembles from the text deltas.
fn anthropic_text(text: &str) -> String {
    datas(text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v["type"] == "content_block_delta")
        .filter_map(|v| {
            v.pointer("/delta/text")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect()
}

fn no_error(text: &str) {
    assert!(
        !text.contains("\"error\""),
        "an error event reached the client: {text}"
    );
}

// Issue 32 item 1: an OpenAI stream that ends after its finish_reason
// (and usage) without `data: [DONE]` is complete: the client gets `[DONE]`
// and the usage, no error event, and the profile is not cooled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openai_stream_without_done_is_complete_for_openai_clients() {
    let gw = Gw::start("no-done-oa", Setup::default()).await;
    for usage in [true, false] {
        gw.prim.push(Reply::Sse(oa_without_done(usage), Tail::End));
        let mut body = chat("prim/model-a");
        body["stream"] = json!(true);
        if usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let t = Instant::now();
        let r = gw.openai(body, None).await;
        let took = t.elapsed();
        assert_eq!(r.status, 200);
        no_error(&r.text);
        assert_eq!(openai_text(&r.text), "Hello");
        eprintln!(
            "no [DONE] (usage {usage}): 1 attempt, {took:?}, client got \"Hello\" and [DONE]"
        );
        let d = datas(&r.text);
        assert_eq!(d.last().map(String::as_str), Some("[DONE]"), "{}", r.text);
        assert_eq!(
            d.iter().any(|x| x.contains("\"completion_tokens\":2")),
            usage,
            "{}",
            r.text
        );
    }
    assert_eq!(gw.back.hits(), 0);
    assert_eq!(gw.usage("prim:default")["cooldownReason"], Value::Null);
    gw.stop().await;
}

// Issue 32 item 1, translated: OpenAI upstream without `[DONE]` to an
// Anthropic client (usage asked of the upstream by the gateway, then
// without a usage chunk), and an Anthropic upstream to an OpenAI client
// with and without `include_usage`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_without_done_are_complete_across_protocols() {
    let gw = Gw::start(
        "no-done-cross",
        Setup {
            back_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    for usage in [true, false] {
        gw.prim.push(Reply::Sse(oa_without_done(usage), Tail::End));
        let mut body = msg("prim/model-a");
        body["stream"] = json!(true);
        let r = gw.anthropic(body, None).await;
        assert_eq!(r.status, 200);
        no_error(&r.text);
        assert_eq!(anthropic_text(&r.text), "Hello");
        assert_eq!(
            event_names(&r.text).last().copied(),
            Some("message_stop"),
            "{}",
            r.text
        );
        let delta: Value = datas(&r.text)
            .iter()
            .filter_map(|d| serde_json::from_str::<Value>(d).ok())
            .find(|v| v["type"] == "message_delta")
            .unwrap();
        assert_eq!(delta["delta"]["stop_reason"], "end_turn");
        assert_eq!(
            delta["usage"]["output_tokens"],
            if usage { 2 } else { 0 },
            "{}",
            r.text
        );
    }
    assert_eq!(gw.usage("prim:default")["cooldownReason"], Value::Null);
    // Anthropic upstream → OpenAI client: `message_stop` is the end.
    for usage in [true, false] {
        gw.back
            .push(Reply::Sse(anthropic_events(&["Hi", "!"], true), Tail::End));
        let mut body = chat("back/model-b");
        body["stream"] = json!(true);
        if usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let r = gw.openai(body, None).await;
        no_error(&r.text);
        assert_eq!(openai_text(&r.text), "Hi!");
        let d = datas(&r.text);
        assert_eq!(d.last().map(String::as_str), Some("[DONE]"));
        assert_eq!(d.iter().any(|x| x.contains("\"usage\"")), usage);
    }
    gw.stop().await;
}

// Issue 32 item 1: a body that ends before the protocol's end is broken,
// both protocols: an OpenAI stream without a finish_reason, an Anthropic
// stream after `message_delta` but before `message_stop`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_ending_before_the_protocols_end_is_broken() {
    let gw = Gw::start(
        "early-end",
        Setup {
            prim_api: "anthropic-messages",
            back_api: "openai-completions",
            ..Setup::default()
        },
    )
    .await;
    gw.back
        .push(Reply::Sse(openai_events(&["Hel", "lo"]), Tail::End));
    let mut body = chat("back/model-b");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    let last = datas(&r.text).pop().unwrap();
    assert!(
        last.contains("ended before the answer was complete"),
        "{last}"
    );
    let mut ev = anthropic_events(&["Hi"], true);
    ev.pop(); // message_stop
    gw.prim.push(Reply::Sse(ev, Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    assert_eq!(
        event_names(&r.text).last().copied(),
        Some("error"),
        "{}",
        r.text
    );
    gw.stop().await;
}

// Issue 32 item 1: an upstream that keeps the connection open after the
// finish_reason is finished after a short grace (2 s), not the idle
// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_left_open_after_the_finish_is_finished() {
    let gw = Gw::start(
        "finish-grace",
        Setup {
            first_byte_ms: 8000,
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(Reply::Sse(oa_without_done(false), Tail::Hang));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let t = Instant::now();
    let r = gw.openai(body, None).await;
    let took = t.elapsed();
    no_error(&r.text);
    assert_eq!(datas(&r.text).last().map(String::as_str), Some("[DONE]"));
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert_eq!(gw.usage("prim:default")["cooldownReason"], Value::Null);
    gw.stop().await;
}

// Issue 32 item 3: `firstTokenMs` runs to the first *content*: a stream
// whose head and role chunk come at once but whose first token would
// come after 3 s fails over at 500 ms, before the client has a byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_first_token_fails_over_before_the_client_has_a_byte() {
    let gw = Gw::start(
        "first-token",
        Setup {
            timeouts: "firstTokenMs: 500".into(),
            ..Setup::default()
        },
    )
    .await;
    let mut late = vec![(
        Duration::ZERO,
        oa_chunk(json!({"role": "assistant", "content": ""}), None),
    )];
    late.push((
        Duration::from_secs(3),
        oa_chunk(json!({"content": "late"}), Some("stop")),
    ));
    gw.prim.push(Reply::SseTimed(late, Tail::End));
    let mut ev = openai_events(&["From ", "back"]);
    ev.extend(openai_stream_end());
    gw.back.push(Reply::Sse(ev, Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let t = Instant::now();
    let r = gw.openai(body, None).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200);
    no_error(&r.text);
    assert_eq!(openai_text(&r.text), "From back");
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    assert!(took < Duration::from_millis(2000), "{took:?}");
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "timeout");
    eprintln!("slow first token: 2 attempts, {took:?}, client got the fallback's answer");
    gw.stop().await;
}

/// The whole answer of the continuation cases, in the pieces upstreams
/// stream it in.
const ANSWER: &[&str] = &[
    "The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog.",
];

fn whole() -> String {
    ANSWER.concat()
}

/// An OpenAI stream of `parts`, its finish, a usage chunk and `[DONE]`.
fn oa_full(parts: &[&str]) -> Vec<String> {
    let mut ev = openai_events(parts);
    ev.push(oa_chunk(json!({}), Some("stop")));
    ev.push(oa_usage(11, parts.len() as u64));
    ev.push("data: [DONE]\n\n".into());
    ev
}

// Issue 32 item 2 (restart, the default of `openai-completions`): a
// stream cut after 4 tokens is finished by the fallback: it is sent the
// original request, its first 4 tokens are checked against what the
// client already has and dropped, the rest forwarded. The client gets
// one answer equal to the upstream's whole answer, with usage; the cut
// is recorded on the primary as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_stream_is_finished_by_the_fallback_restart() {
    let gw = Gw::start("cont-restart", Setup::default()).await;
    gw.prim
        .push(Reply::Sse(openai_events(&ANSWER[..4]), Tail::Cut));
    gw.back.push(Reply::Sse(oa_full(ANSWER), Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let t = Instant::now();
    let r = gw.openai(body, None).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200);
    no_error(&r.text);
    assert_eq!(openai_text(&r.text), whole(), "{}", r.text);
    let d = datas(&r.text);
    assert_eq!(d.last().map(String::as_str), Some("[DONE]"));
    assert!(
        d.iter().any(|x| x.contains("\"completion_tokens\":9")),
        "{}",
        r.text
    );
    // One answer: the original id throughout, one role chunk.
    let ids: std::collections::BTreeSet<String> = d
        .iter()
        .filter_map(|x| serde_json::from_str::<Value>(x).ok())
        .map(|v| v["id"].to_string())
        .collect();
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(r.text.matches("\"role\"").count(), 1);
    assert!(
        r.text.contains(
            ": x-failover-continued: back/model-b (restart) after prim/model-a broke off"
        ),
        "{}",
        r.text
    );
    // The notice (R13) names the break's reason.
    assert!(
        r.text.contains(
            ": x-failover-notice: ↪️ Model Fallback: back/model-b (selected prim/model-a; timeout)"
        ),
        "{}",
        r.text
    );
    // The fallback was sent the original request.
    let seen = gw.back.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        seen[0].body["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "timeout");
    let m = metrics(&gw).await;
    assert!(
        m.contains(r#"failover_continuations_total{mode="restart",outcome="completed"} 1"#),
        "{m}"
    );
    eprintln!(
        "cut after 4 tokens (restart): 2 upstream calls, {took:?}, client got {:?}",
        openai_text(&r.text)
    );
    gw.stop().await;
}

// Issue 32 item 2 (restart): a fallback whose restarted answer differs
// from what the client already has is never spliced: the stream ends
// with the error event of the cut, and nothing of the fallback's text
// reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_answer_that_differs_ends_with_the_error() {
    let gw = Gw::start("cont-mismatch", Setup::default()).await;
    gw.prim
        .push(Reply::Sse(openai_events(&ANSWER[..4]), Tail::Cut));
    gw.back.push(Reply::Sse(
        oa_full(&["The", " quick", " red", " fox", " naps."]),
        Tail::End,
    ));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let t = Instant::now();
    let r = gw.openai(body, None).await;
    eprintln!(
        "restarted answer differs: 2 upstream calls, {:?}, client got {:?} then the error event",
        t.elapsed(),
        openai_text(&r.text)
    );
    assert_eq!(openai_text(&r.text), ANSWER[..4].concat());
    assert!(!r.text.contains("red") && !r.text.contains("naps"));
    let last: Value = serde_json::from_str(&datas(&r.text).pop().unwrap()).unwrap();
    assert!(
        last["error"]["message"]
            .as_str()
            .unwrap()
            .contains("connection reset"),
        "{last}"
    );
    let m = metrics(&gw).await;
    assert!(
        m.contains(r#"failover_continuations_total{mode="restart",outcome="mismatch"} 1"#),
        "{m}"
    );
    gw.stop().await;
}

/// An Anthropic stream of `parts` in one text block, finished.
fn an_full(parts: &[&str]) -> Vec<String> {
    anthropic_events(parts, true)
}

// Issue 32 item 2 (prefill, the default of `anthropic-messages`): an
// Anthropic stream cut mid-text; the Anthropic fallback is sent the
// delivered text, trailing whitespace trimmed, as a trailing assistant
// message and answers with the continuation only. The Anthropic client
// sees one message: one `message_start`, the text in the same block, one
// `message_stop`, the whole answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_anthropic_stream_is_finished_by_a_prefill() {
    let gw = Gw::start(
        "cont-prefill",
        Setup {
            prim_api: "anthropic-messages",
            back_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(an_full(&ANSWER[..5])[..7].to_vec(), Tail::Cut));
    // The prefill is "The quick brown fox jumps"; the continuation
    // begins with the space.
    gw.back.push(Reply::Sse(an_full(&ANSWER[5..]), Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    no_error(&r.text);
    assert_eq!(anthropic_text(&r.text), whole(), "{}", r.text);
    let names = event_names(&r.text);
    assert_eq!(names.iter().filter(|n| **n == "message_start").count(), 1);
    assert_eq!(names.iter().filter(|n| **n == "message_stop").count(), 1);
    assert_eq!(
        names
            .iter()
            .filter(|n| **n == "content_block_start")
            .count(),
        1
    );
    assert_eq!(names.last().copied(), Some("message_stop"));
    let indices: Vec<u64> = datas(&r.text)
        .iter()
        .filter_map(|x| serde_json::from_str::<Value>(x).ok())
        .filter_map(|v| v["index"].as_u64())
        .collect();
    assert!(indices.iter().all(|i| *i == 0), "{indices:?}");
    let sent = &gw.back.seen()[0].body;
    let msgs = sent["messages"].as_array().unwrap();
    assert_eq!(
        msgs.last().unwrap(),
        &json!({"role": "assistant", "content": "The quick brown fox jumps"})
    );
    assert!(sent["max_tokens"].as_u64().unwrap() < 32, "{sent}");
    gw.stop().await;
}

// Issue 32 item 2: a fallback that rejects the prefill (a model that
// does not support it) is asked again at once with the original request
// (restart); the rejection is classified and counted, never the
// client's error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_prefill_is_retried_as_a_restart() {
    let gw = Gw::start(
        "cont-prefill-rejected",
        Setup {
            prim_api: "anthropic-messages",
            back_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(an_full(&ANSWER[..5])[..7].to_vec(), Tail::Cut));
    gw.back.push(error(
        400,
        r#"{"type":"error","error":{"type":"invalid_request_error","message":"This model does not support assistant message prefill. The conversation must end with a user message."}}"#,
    ));
    gw.back.push(Reply::Sse(an_full(ANSWER), Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let t = Instant::now();
    let r = gw.anthropic(body, None).await;
    let took = t.elapsed();
    no_error(&r.text);
    assert_eq!(anthropic_text(&r.text), whole(), "{}", r.text);
    let seen = gw.back.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0].body["messages"].as_array().unwrap().last().unwrap()["role"],
        "assistant"
    );
    assert_eq!(
        seen[1].body["messages"],
        json!([{"role": "user", "content": "hi"}])
    );
    // The rejection is not held against the fallback.
    assert_eq!(gw.usage("back:default")["cooldownReason"], Value::Null);
    let m = metrics(&gw).await;
    assert!(
        m.contains(r#"failover_continuations_total{mode="prefill",outcome="prefill_rejected"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"failover_continuations_total{mode="restart",outcome="completed"} 1"#),
        "{m}"
    );
    eprintln!(
        "cut, fallback rejects the prefill: 3 upstream calls, {took:?}, client got {:?}",
        anthropic_text(&r.text)
    );
    gw.stop().await;
}

// Issue 32 items 2 and 3: a stream that stalls past `idleMs` after its
// first bytes is finished by the fallback, across protocols (OpenAI
// upstream cut, Anthropic fallback by prefill, OpenAI client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_stream_is_finished_across_protocols() {
    let gw = Gw::start(
        "cont-stall",
        Setup {
            back_api: "anthropic-messages",
            timeouts: "idleMs: 400".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(openai_events(&ANSWER[..3]), Tail::Hang));
    gw.back.push(Reply::Sse(an_full(&ANSWER[3..]), Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let t = Instant::now();
    let r = gw.openai(body, None).await;
    let took = t.elapsed();
    no_error(&r.text);
    assert_eq!(openai_text(&r.text), whole(), "{}", r.text);
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!(datas(&r.text).last().map(String::as_str), Some("[DONE]"));
    assert!(r.text.contains("\"usage\""), "{}", r.text);
    let sent = &gw.back.seen()[0].body;
    assert_eq!(
        sent["messages"].as_array().unwrap().last().unwrap(),
        &json!({"role": "assistant", "content": "The quick brown"})
    );
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "timeout");
    assert_eq!(gw.prim.cancelled(), 1, "the stalled upstream was closed");
    eprintln!(
        "stall after 3 tokens (idleMs 400): 2 upstream calls, {took:?}, client got {:?}",
        openai_text(&r.text)
    );
    gw.stop().await;
}

// Issue 32 item 2: an in-band error event after the first bytes is a
// break like a cut: the fallback finishes the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_event_mid_stream_is_continued() {
    let gw = Gw::start("cont-error-event", Setup::default()).await;
    let mut ev = openai_events(&ANSWER[..2]);
    ev.push("data: {\"error\":{\"message\":\"overloaded\",\"code\":529}}\n\n".into());
    gw.prim.push(Reply::Sse(ev, Tail::End));
    gw.back.push(Reply::Sse(oa_full(ANSWER), Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    no_error(&r.text);
    assert_eq!(openai_text(&r.text), whole());
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "overloaded");
    gw.stop().await;
}

// Issue 32 item 2: only text is continued: a stream that breaks inside a
// tool call ends with the error event; the fallback is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_break_inside_a_tool_call_ends_with_the_error() {
    let gw = Gw::start("cont-tool", Setup::default()).await;
    let ev = vec![
        oa_chunk(
            json!({"role": "assistant", "content": null, "tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "get", "arguments": ""}}]}),
            None,
        ),
        oa_chunk(
            json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"ci"}}]}),
            None,
        ),
    ];
    gw.prim.push(Reply::Sse(ev, Tail::Cut));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    let last: Value = serde_json::from_str(&datas(&r.text).pop().unwrap()).unwrap();
    assert!(last["error"]["message"].is_string(), "{}", r.text);
    assert_eq!(gw.back.hits(), 0);
    let m = metrics(&gw).await;
    assert!(
        m.contains(r#"failover_continuations_total{mode="none",outcome="not_continuable"} 1"#),
        "{m}"
    );
    gw.stop().await;
}

// Issue 32 "Tests": the official `openai` and `anthropic` Python SDKs as
// clients of continued streams: the text each assembles equals the
// upstream's whole answer, with usage (tests/sdk/continuation.py). The
// venv is found by `sdk_python`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_sdks_read_continued_streams() {
    let Some(python) = sdk_python("official_sdks_read_continued_streams") else {
        return;
    };
    let gw = Gw::start(
        "cont-sdk",
        Setup {
            prim_api: "anthropic-messages",
            back_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    for _ in 0..2 {
        gw.prim
            .push(Reply::Sse(an_full(&ANSWER[..5])[..7].to_vec(), Tail::Cut));
        gw.back.push(Reply::Sse(an_full(&ANSWER[5..]), Tail::End));
    }
    let (stdout, _) = run_sdk_script(python, "continuation.py", gw.addr(), &[]).await;
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert_eq!(lines[0]["text"], whole(), "{stdout}");
    // The fallback's usage (anthropic_events reports 3 in, 2 out).
    assert_eq!(lines[0]["usage"]["prompt_tokens"], 3, "{stdout}");
    assert_eq!(lines[0]["usage"]["completion_tokens"], 2, "{stdout}");
    assert_eq!(lines[1]["text"], whole(), "{stdout}");
    assert_eq!(lines[1]["final_text"], whole(), "{stdout}");
    assert_eq!(lines[1]["blocks"], 1);
    assert_eq!(lines[1]["stop_reason"], "end_turn");
    assert_eq!(lines[1]["usage"]["output_tokens"], 2, "{stdout}");
    eprintln!("SDKs on continued streams: {stdout}");
    gw.stop().await;
}

fn retrying(max: u32) -> Setup {
    Setup {
        prim_keys: format!("retries: {{ max: {max}, baseDelayMs: 500, maxDelayMs: 8000 }}"),
        ..Setup::default()
    }
}

// Issue 32 item 4: a 429 with `Retry-After: 2`, then 200: with a retry
// budget the same candidate is asked again after the 2 s it asked for;
// no fallback, no cooldown.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_with_retry_after_is_retried_on_the_same_candidate() {
    let gw = Gw::start("retry-after", retrying(2)).await;
    gw.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "2".into())],
        body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
    });
    gw.prim.push(ok_openai("after the wait"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "after the wait"
    );
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("prim/model-a")
    );
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert_eq!((gw.prim.hits(), gw.back.hits()), (2, 0));
    assert_eq!(gw.usage("prim:default")["cooldownReason"], Value::Null);
    let m = metrics(&gw).await;
    assert!(
        m.contains(r#"failover_attempts_total{provider="prim",model="model-a",outcome="retried",reason="rate_limit"} 1"#),
        "{m}"
    );
    assert!(!m.contains("failover_fallbacks_total 1"), "{m}");
    eprintln!("429 Retry-After 2 then 200: 2 attempts, {took:?}, client got the primary's answer");
    gw.stop().await;
}

// Issue 32 item 4: a single 500 is retried after a jittered backoff.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_500_is_retried() {
    let gw = Gw::start("retry-500", retrying(1)).await;
    gw.prim
        .push(error(500, r#"{"error":{"message":"internal error"}}"#));
    gw.prim.push(ok_openai("second time"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert_eq!(r.json()["choices"][0]["message"]["content"], "second time");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    assert_eq!((gw.prim.hits(), gw.back.hits()), (2, 0));
    eprintln!("500 once: 2 attempts, {took:?}, client got the primary's answer");
    gw.stop().await;
}

// Issue 32 item 4: a persistent 429 is bounded (no hammering: 1 + max
// calls, at most 4 in the first 3.5 s), then cools and fails over; a
// silent upstream is never asked again (one attempt, then the fallback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_are_bounded_and_never_wait_out_a_silent_upstream() {
    let gw = Gw::start(
        "retry-bounded",
        Setup {
            first_byte_ms: 500,
            ..retrying(3)
        },
    )
    .await;
    gw.prim.always(error(
        429,
        r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#,
    ));
    gw.back.push(ok_openai("fallback"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert_eq!(r.json()["choices"][0]["message"]["content"], "fallback");
    assert_eq!(gw.prim.hits(), 4);
    assert!(took < Duration::from_millis(3600), "{took:?}");
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "rate_limit");
    assert_eq!(gw.usage("prim:default")["errorCount"], 1);
    eprintln!("persistent 429, retries.max 3: 4 primary attempts + 1 fallback, {took:?}");

    gw.stop_cooling();
    gw.prim.push(Reply::Slow(
        Duration::from_secs(5),
        Box::new(ok_openai("too late")),
    ));
    gw.back.push(ok_openai("fallback again"));
    let hits = gw.prim.hits();
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "fallback again"
    );
    assert_eq!(gw.prim.hits() - hits, 1, "a deadline is never retried");
    assert!(took < Duration::from_millis(1500), "{took:?}");
    eprintln!("silent upstream (firstByteMs 500): 1 primary attempt + 1 fallback, {took:?}");
    gw.stop().await;
}

// SPEC R9.8 (issue 32 item 5): with `contextWindow` declared, a context
// overflow on the primary (8k) goes to the fallback (200k): one attempt
// on the primary, no cooldown; the client gets the answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r9_8_context_overflow_goes_to_a_larger_window() {
    let gw = Gw::start(
        "overflow-window",
        Setup {
            prim_models: "[{ id: model-a, contextWindow: 8192 }]".into(),
            back_models: "[{ id: model-b, contextWindow: 200000 }]".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(error(
        400,
        r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
    ));
    gw.back.push(ok_openai("a larger window"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "a larger window"
    );
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!((gw.prim.hits(), gw.back.hits()), (1, 1));
    assert!(gw.usage("prim:default")["cooldownUntil"].is_null());
    eprintln!("context overflow, windows 8192 → 200000: 2 attempts, {took:?}, client got the fallback's answer");
    gw.stop().await;
}

// Issue 32 item 2, across protocols: an Anthropic client, an Anthropic
// primary cut mid-text, an OpenAI-compatible fallback (restart): one
// Anthropic message with the whole text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_anthropic_client_is_finished_by_an_openai_restart() {
    let gw = Gw::start(
        "cont-cross-restart",
        Setup {
            prim_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(an_full(&ANSWER[..5])[..7].to_vec(), Tail::Cut));
    gw.back.push(Reply::Sse(oa_full(ANSWER), Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    no_error(&r.text);
    assert_eq!(anthropic_text(&r.text), whole(), "{}", r.text);
    let names = event_names(&r.text);
    assert_eq!(names.iter().filter(|n| **n == "message_start").count(), 1);
    assert_eq!(
        names
            .iter()
            .filter(|n| **n == "content_block_start")
            .count(),
        1
    );
    assert_eq!(names.last().copied(), Some("message_stop"), "{}", r.text);
    let delta: Value = datas(&r.text)
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .find(|v| v["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["usage"]["output_tokens"], 9, "the fallback's usage");
    gw.stop().await;
}

// Issue 32 item 2 (restart): while the restarted answer's first 6 s are
// held back (they repeat what the client has), the client gets an SSE
// comment to keep reading; the answer is whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_restart_keeps_the_client_reading() {
    let gw = Gw::start(
        "cont-keepalive",
        Setup {
            timeouts: "idleMs: 8000".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(openai_events(&ANSWER[..4]), Tail::Cut));
    let ev: Vec<(Duration, String)> = oa_full(ANSWER)
        .into_iter()
        .enumerate()
        .map(|(i, e)| {
            (
                Duration::from_millis(if (1..=2).contains(&i) { 3_000 } else { 0 }),
                e,
            )
        })
        .collect();
    gw.back.push(Reply::SseTimed(ev, Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    no_error(&r.text);
    assert_eq!(openai_text(&r.text), whole());
    assert_eq!(r.text.matches(": continuing\n").count(), 1, "{}", r.text);
    gw.stop().await;
}

/// `: keepalive` comments every `every`, for `for_`.
fn comments(every: Duration, for_: Duration) -> Vec<(Duration, String)> {
    let n = (for_.as_millis() / every.as_millis()) as usize;
    vec![(every, ": keepalive\n\n".to_string()); n]
}

// Issue 44 item 5 (the benchmark's slow-first-token scenario): an
// upstream that sends its head at once and then only comments is left at
// `firstTokenMs` (1 s), not at `firstByteMs` (20 s) or when its late
// answer comes (after 8 s): a timer from the request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_5_first_token_ms_is_a_timer_from_the_request() {
    let gw = Gw::start(
        "first-token-timer",
        Setup {
            first_byte_ms: 20_000,
            timeouts: "firstTokenMs: 1000".into(),
            ..Setup::default()
        },
    )
    .await;
    for role_first in [false, true] {
        let mut late = Vec::new();
        if role_first {
            late.push((
                Duration::ZERO,
                oa_chunk(json!({"role": "assistant", "content": ""}), None),
            ));
        }
        late.extend(comments(Duration::from_millis(250), Duration::from_secs(8)));
        late.push((
            Duration::ZERO,
            oa_chunk(json!({"content": "late"}), Some("stop")),
        ));
        gw.prim.push(Reply::SseTimed(late, Tail::End));
        let mut ev = openai_events(&["From ", "back"]);
        ev.extend(openai_stream_end());
        gw.back.push(Reply::Sse(ev, Tail::End));
        let mut body = chat("prim/model-a");
        body["stream"] = json!(true);
        let t = Instant::now();
        let r = gw.openai(body, Some(&format!("s-{role_first}"))).await;
        let took = t.elapsed();
        assert_eq!(r.status, 200);
        no_error(&r.text);
        assert_eq!(openai_text(&r.text), "From back");
        assert!(
            took < Duration::from_millis(3000),
            "role chunk first: {role_first}; left after {took:?}"
        );
        eprintln!("comments only, role chunk first {role_first}: failed over after {took:?}");
        gw.stop_cooling();
    }
    gw.stop().await;
}

// Issue 44 item 6: after the first token, comments (and Anthropic pings)
// do not reset `idleMs`: a stream that delivers nothing for 1 s is cut,
// and the answer is finished by the next candidate, not held until
// `totalMs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_6_comments_do_not_reset_idle_ms() {
    let gw = Gw::start(
        "idle-comments",
        Setup {
            timeouts: "idleMs: 1000".into(),
            ..Setup::default()
        },
    )
    .await;
    let mut ev: Vec<(Duration, String)> = openai_events(&["The", " quick"])
        .into_iter()
        .map(|e| (Duration::ZERO, e))
        .collect();
    ev.extend(comments(Duration::from_millis(200), Duration::from_secs(6)));
    gw.prim.push(Reply::SseTimed(ev, Tail::Hang));
    let mut rest = openai_events(&["The quick", " brown fox"]);
    rest.extend(openai_stream_end());
    gw.back.push(Reply::Sse(rest, Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let t = Instant::now();
    let r = gw.openai(body, None).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200);
    assert!(took < Duration::from_millis(4000), "held for {took:?}");
    assert!(
        r.text.contains("stalled for 1000 ms") || gw.back.hits() == 1,
        "{}",
        r.text
    );
    assert_eq!(gw.back.hits(), 1, "the next candidate was not asked");
    eprintln!("comments after the first token: cut after {took:?}");
    gw.stop().await;
}

// Issue 44 item 10: events ended by CR CR (and CRLF, and mixes), valid
// SSE line ends, from OpenAI and Anthropic upstreams reach the client
// whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_10_cr_line_ends_from_upstreams() {
    let events = |api: &str, end: &str| {
        let mut e = if api == "anthropic-messages" {
            anthropic_events(&["Hel", "lo"], true)
        } else {
            let mut e = openai_events(&["Hel", "lo"]);
            e.extend(openai_stream_end());
            e
        };
        for x in &mut e {
            *x = x.replace('\n', end);
        }
        e
    };
    for (api, end) in [
        ("openai-completions", "\r"),
        ("openai-completions", "\r\n"),
        ("anthropic-messages", "\r"),
        ("anthropic-messages", "\r\n"),
    ] {
        let gw = Gw::start(
            "cr-ends",
            Setup {
                prim_api: api,
                ..Setup::default()
            },
        )
        .await;
        gw.prim.always(Reply::Sse(events(api, end), Tail::End));
        let mut body = chat("prim/model-a");
        body["stream"] = json!(true);
        let r = gw.openai(body, None).await;
        assert_eq!(r.status, 200, "{api} {end:?} → openai: {}", r.text);
        no_error(&r.text);
        assert_eq!(openai_text(&r.text), "Hello", "{api} {end:?}: {}", r.text);
        let mut body = msg("prim/model-a");
        body["stream"] = json!(true);
        let r = gw.anthropic(body, None).await;
        assert_eq!(r.status, 200, "{api} {end:?} → anthropic: {}", r.text);
        no_error(&r.text);
        assert_eq!(
            anthropic_text(&r.text),
            "Hello",
            "{api} {end:?}: {}",
            r.text
        );
        assert_eq!(gw.back.hits(), 0, "{api} {end:?}: a fallback was needed");
        gw.stop().await;
    }
}

// Issue 44 item 7: retries end within the candidate's `totalMs` (10 s
// here): a `Retry-After: 12` is not waited for, three times over; the run
// fails over at once (before: 36 s and four calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_7_retries_end_within_total_ms() {
    let gw = Gw::start("retry-total", retrying(3)).await;
    gw.prim.always(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "12".into())],
        body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
    });
    gw.back.always(ok_openai("from back"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "from back");
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert_eq!((gw.prim.hits(), gw.back.hits()), (1, 1));
    eprintln!("429 Retry-After 12 under totalMs 10 s: failed over after {took:?}");
    gw.stop().await;
}

// Issue 44 item 7: `serve.requestTimeoutMs` bounds the whole chain: a
// primary that would answer after 5 s is left when the request's 1.5 s
// are up, and the fallback is not started past the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_7_request_timeout_bounds_the_chain() {
    let gw = Gw::start(
        "request-timeout",
        Setup {
            first_byte_ms: 8000,
            extra: "serve:\n  requestTimeoutMs: 1500\n".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.always(Reply::Slow(
        Duration::from_secs(5),
        Box::new(ok_openai("too late")),
    ));
    gw.back.always(ok_openai("from back"));
    let t = Instant::now();
    let r = gw.openai(chat("prim/model-a"), None).await;
    let took = t.elapsed();
    assert!(r.status >= 500, "{} {}", r.status, r.text);
    assert!(
        took >= Duration::from_millis(1400) && took < Duration::from_millis(3000),
        "{took:?}"
    );
    assert_eq!(
        gw.back.hits(),
        0,
        "the fallback was started past the deadline"
    );
    assert!(r.text.contains("deadline"), "{}", r.text);
    eprintln!(
        "requestTimeoutMs 1500, a 5 s primary: {} after {took:?}",
        r.status
    );
    gw.stop().await;
}

// Issue 44 item 8: a fallback that ignores the prefill and starts its
// answer over — its first letter in another case — is not repeated: the
// client reads the answer once, and its first continued event carries a
// `failover.continued` object (the SDKs keep unknown fields) naming the
// candidates and the mode.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_8_a_restarted_answer_is_not_repeated_and_is_marked() {
    let gw = Gw::start(
        "cont-restart-echo",
        Setup {
            prim_api: "anthropic-messages",
            back_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(an_full(&ANSWER[..5])[..7].to_vec(), Tail::Cut));
    // Ignores the prefill "The quick brown fox jumps": starts over.
    let mut again: Vec<&str> = vec!["the", " quick"];
    again.extend(&ANSWER[2..]);
    gw.back.push(Reply::Sse(an_full(&again), Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    no_error(&r.text);
    assert_eq!(anthropic_text(&r.text), whole(), "{}", r.text);
    let marked: Vec<Value> = datas(&r.text)
        .iter()
        .filter_map(|x| serde_json::from_str::<Value>(x).ok())
        .filter(|v| v.get("failover").is_some())
        .collect();
    assert_eq!(marked.len(), 1, "{}", r.text);
    let c = &marked[0]["failover"]["continued"];
    assert_eq!(c["from"], "prim/model-a");
    assert_eq!(c["by"], "back/model-b");
    assert_eq!(c["mode"], "prefill");
    gw.stop().await;
}

// Issue 44 item 1: past `serve.continuation.maxBytes` of text a stream is
// relayed but no longer continuable: a cut then ends it with the error
// event, and nothing (no prefill of the whole text) is sent to another
// upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_1_a_stream_past_its_continuation_budget_is_not_continued() {
    let gw = Gw::start(
        "cont-budget",
        Setup {
            prim_api: "anthropic-messages",
            back_api: "anthropic-messages",
            extra: "serve:\n  continuation: { maxBytes: 16 }\n".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim
        .push(Reply::Sse(an_full(&ANSWER[..5])[..7].to_vec(), Tail::Cut));
    gw.back.push(Reply::Sse(an_full(&ANSWER[5..]), Tail::End));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.anthropic(body, None).await;
    assert!(r.text.contains("event: error"), "{}", r.text);
    assert_eq!(gw.back.hits(), 0, "a continuation was asked for");
    let m = metrics(&gw).await;
    assert!(
        m.contains(r#"failover_continuations_total{mode="none",outcome="over_budget"} 1"#),
        "{m}"
    );
    gw.stop().await;
}

// Issue 44 item 17: an upstream that echoes the key it was sent inside a
// 200 answer — the whole answer's text, a stream's event — does not hand
// it to the client: the exact copy is `<redacted>` (the answer is
// otherwise the provider's, as it was written).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_17_a_key_echoed_in_an_answer_is_masked() {
    let gw = Gw::start("echo-200", Setup::default()).await;
    let key = SECRETS[0];
    gw.prim
        .push(ok_openai(&format!("your key is {key}, keep it safe")));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains(key), "{}", r.text);
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "your key is <redacted>, keep it safe"
    );
    let mut ev = openai_events(&["your key is ", key, " ok"]);
    ev.extend(openai_stream_end());
    gw.prim.push(Reply::Sse(ev, Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    assert!(!r.text.contains(key), "{}", r.text);
    assert_eq!(openai_text(&r.text), "your key is <redacted> ok");
    gw.stop().await;
}

// Issue 44 item 2: what a translation holds and an event not yet whole
// are charged to `serve.maxBufferedBytes`: past it, a whole answer is not
// translated (its candidate is skipped, the next one answers) and a
// stream whose unfinished event outgrows the budget ends with the error
// event instead of holding it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_2_translations_and_unfinished_events_are_charged_to_the_budget() {
    let gw = Gw::start(
        "budget-charged",
        Setup {
            prim_api: "anthropic-messages",
            extra: "serve:\n  maxBufferedBytes: 2097152\n".into(),
            ..Setup::default()
        },
    )
    .await;
    // 700 KiB to translate: charged 4.2 MiB, over the 2 MiB.
    gw.prim.push(ok_anthropic(&"x".repeat(700 << 10)));
    gw.back.push(ok_openai("from back"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", &r.text[..r.text.len().min(400)]);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "from back");
    assert_eq!((gw.prim.hits(), gw.back.hits()), (1, 1));
    // A stream that starts an event it never ends, 6 MiB long.
    let mut ev = anthropic_events(&["Hel", "lo"], false);
    ev.push(format!(
        "event: content_block_delta\ndata: {}",
        "y".repeat(6 << 20)
    ));
    gw.prim.push(Reply::Sse(ev, Tail::Hang));
    let mut body = msg("prim/model-a");
    body["stream"] = json!(true);
    let t = Instant::now();
    let r = gw.anthropic(body, None).await;
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        r.text.contains("event: error"),
        "{}",
        &r.text[..r.text.len().min(400)]
    );
    assert!(
        r.text.contains("serve.maxBufferedBytes"),
        "{}",
        &r.text[..r.text.len().min(2000)]
    );
    assert_eq!(anthropic_text(&r.text), "Hello");
    gw.stop().await;
}
