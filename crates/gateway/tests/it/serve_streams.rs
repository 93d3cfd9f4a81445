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
        let r = gw.openai(body, None).await;
        assert_eq!(r.status, 200);
        no_error(&r.text);
        assert_eq!(openai_text(&r.text), "Hello");
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
