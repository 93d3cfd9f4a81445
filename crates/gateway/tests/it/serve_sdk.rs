//! The official `openai` and `anthropic` Python SDKs against `failover
//! serve` (tests/sdk/clients.py). `.ci/run` installs them into
//! `.ci/venv`; a missing venv fails this test with how to get it, unless
//! `FAILOVER_SKIP_SDK=1` asks to skip it (never under CI).

use crate::serve_support::*;
use serde_json::json;

// Issue 12 "Tests": plain and streaming requests through both SDKs, a
// fallback across providers and protocols (SPEC R1.2, R13.1), and the
// error a client sees when the chain is exhausted (R14.3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_python_sdks_are_clients() {
    let Some(python) = sdk_python("official_python_sdks_are_clients") else {
        return;
    };
    let gw = Gw::start(
        "sdk",
        Setup {
            prim_api: "anthropic-messages",
            ..Setup::default()
        },
    )
    .await;
    // In the order of clients.py.
    gw.back.push(ok_openai("plain openai"));
    let mut ev = openai_events(&["Hel", "lo"]);
    ev.extend(openai_stream_end());
    gw.back.push(Reply::Sse(ev, Tail::End));
    gw.prim.push(ok_anthropic("plain anthropic"));
    gw.prim.push(Reply::Sse(
        anthropic_events(&["Hi", " there"], true),
        Tail::End,
    ));
    gw.prim.push(error(
        529,
        r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ));
    gw.back.push(ok_openai("from the fallback"));
    gw.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "60".into())],
        body: json!({"type":"error","error":{"type":"rate_limit_error","message":"Number of requests has exceeded your rate limit"}}).to_string(),
    });
    gw.back.always(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "30".into())],
        body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
    });
    let (stdout, stderr) = run_sdk_script(python, "clients.py", gw.addr(), &[]).await;
    assert!(stdout.contains("7 passed, 0 failed"), "{stdout}");
    for s in SECRETS {
        assert!(!stdout.contains(s) && !stderr.contains(s));
    }
    gw.stop().await;
}

// Issue 33: the official `openai` SDK's `responses.create` and
// `responses.stream` against `POST /v1/responses` (tests/sdk/responses.py):
// plain and streamed on a Responses upstream, a streamed fallback to a
// Chat Completions upstream, a tool call (plain and streamed) and an
// exhausted chain.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_openai_sdk_responses_create() {
    use crate::serve_protocols::{ok_responses, responses_events};
    let Some(python) = sdk_python("official_openai_sdk_responses_create") else {
        return;
    };
    let gw = Gw::start(
        "sdk-responses",
        Setup {
            prim_api: "openai-responses",
            ..Setup::default()
        },
    )
    .await;
    // In the order of responses.py.
    gw.prim.push(ok_responses("plain responses"));
    gw.prim
        .push(Reply::Sse(responses_events(&["Hel", "lo"]), Tail::End));
    gw.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "60".into())],
        body: r#"{"error":{"message":"Rate limit reached for requests","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#.into(),
    });
    let mut ev = openai_events(&["from ", "the fallback"]);
    ev.extend(openai_stream_end());
    gw.back.push(Reply::Sse(ev, Tail::End));
    gw.back.push(Reply::Http {
        status: 200,
        headers: vec![],
        body: json!({"id": "cmpl-t", "object": "chat.completion", "created": 1, "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "call_1", "type": "function",
                    "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 5, "total_tokens": 14}})
        .to_string(),
    });
    gw.back.push(ok_openai("It is 21C."));
    let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
        format!(
            "data: {}\n\n",
            json!({"id": "c2", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        )
    };
    gw.back.push(Reply::Sse(
        vec![
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_2", "type": "function",
                    "function": {"name": "get_weather", "arguments": ""}}]}),
                json!(null),
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "{\"city\":"}}]}),
                json!(null),
            ),
            chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": "\"Paris\"}"}}]}),
                json!(null),
            ),
            chunk(json!({}), json!("tool_calls")),
            "data: [DONE]\n\n".into(),
        ],
        Tail::End,
    ));
    for m in [&gw.prim, &gw.back] {
        m.always(Reply::Http {
            status: 429,
            headers: vec![("retry-after".into(), "30".into())],
            body: r#"{"error":{"message":"Rate limit reached","type":"requests"}}"#.into(),
        });
    }
    let (stdout, stderr) = run_sdk_script(python, "responses.py", gw.addr(), &[]).await;
    assert!(stdout.contains("6 passed, 0 failed"), "{stdout}");
    eprintln!("{stdout}");
    for s in SECRETS {
        assert!(!stdout.contains(s) && !stderr.contains(s));
    }
    gw.stop().await;
}
