//! The upstream protocols beyond Chat Completions and Messages (issue
//! 33): OpenAI Responses, Google Gemini and Azure OpenAI, each a scripted
//! upstream on loopback in the provider's own shapes, and the client
//! endpoint `POST /v1/responses`. Translation goes through the canonical
//! form (`src/canonical/`).

use crate::serve_support::*;
use serde_json::{json, Value};

/// A Responses stream's events, as OpenAI sends them (docs/protocols.md
/// §1.3): created, a message item with `parts` as deltas, completed.
pub(crate) fn responses_events(parts: &[&str]) -> Vec<String> {
    let ev = |v: Value| format!("event: {}\ndata: {v}\n\n", v["type"].as_str().unwrap());
    let r = json!({"id": "resp_1", "object": "response", "created_at": 1, "status": "in_progress",
        "error": null, "incomplete_details": null, "model": "gpt-up", "output": [],
        "parallel_tool_calls": true, "tool_choice": "auto", "tools": [], "usage": null});
    let text: String = parts.concat();
    let mut out = vec![
        ev(json!({"type": "response.created", "sequence_number": 0, "response": r})),
        ev(json!({"type": "response.in_progress", "sequence_number": 1, "response": r})),
        ev(
            json!({"type": "response.output_item.added", "sequence_number": 2, "output_index": 0,
            "item": {"id": "msg_1", "type": "message", "status": "in_progress", "role": "assistant", "content": []}}),
        ),
        ev(
            json!({"type": "response.content_part.added", "sequence_number": 3, "item_id": "msg_1",
            "output_index": 0, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}}),
        ),
    ];
    for (i, p) in parts.iter().enumerate() {
        out.push(ev(
            json!({"type": "response.output_text.delta", "sequence_number": 4 + i,
            "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": p, "logprobs": [],
            "obfuscation": "xyz"}),
        ));
    }
    let n = 4 + parts.len();
    let item = json!({"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
        "content": [{"type": "output_text", "text": text, "annotations": []}]});
    out.push(ev(
        json!({"type": "response.output_text.done", "sequence_number": n, "item_id": "msg_1",
        "output_index": 0, "content_index": 0, "text": text, "logprobs": []}),
    ));
    out.push(ev(json!({"type": "response.output_item.done", "sequence_number": n + 1, "output_index": 0, "item": item})));
    let mut done = r.clone();
    done["status"] = json!("completed");
    done["output"] = json!([item]);
    done["usage"] = json!({"input_tokens": 9, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": 2, "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 11});
    out.push(ev(
        json!({"type": "response.completed", "sequence_number": n + 2, "response": done}),
    ));
    out
}

pub(crate) fn ok_responses(text: &str) -> Reply {
    Reply::Http {
        status: 200,
        headers: vec![],
        body: json!({"id": "resp_9", "object": "response", "created_at": 1, "status": "completed",
            "error": null, "incomplete_details": null, "model": "gpt-up",
            "output": [{"type": "message", "id": "msg_9", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 4, "output_tokens": 2, "total_tokens": 6}})
        .to_string(),
    }
}

pub(crate) fn ok_gemini(text: &str) -> Reply {
    Reply::Http {
        status: 200,
        headers: vec![],
        body: json!({"candidates": [{"content": {"parts": [{"text": text}], "role": "model"},
                "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 5, "totalTokenCount": 8},
            "modelVersion": "gemini-up", "responseId": "g-1"})
        .to_string(),
    }
}

/// Gemini's SSE chunks (`alt=sse`): text parts, the last with the finish.
pub(crate) fn gemini_events(parts: &[&str]) -> Vec<String> {
    let n = parts.len();
    parts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mut c = json!({"candidates": [{"content": {"parts": [{"text": p}], "role": "model"}, "index": 0}],
                "usageMetadata": {"promptTokenCount": 7, "totalTokenCount": 7}, "modelVersion": "gemini-up",
                "responseId": "g-2"});
            if i + 1 == n {
                c["candidates"][0]["finishReason"] = json!("STOP");
                c["usageMetadata"] = json!({"promptTokenCount": 7, "candidatesTokenCount": 4, "totalTokenCount": 11});
            }
            format!("data: {c}\r\n\r\n")
        })
        .collect()
}

/// Gemini's 429 as the API sends it (docs/protocols.md §2.5).
pub(crate) const GEMINI_429: &str = r#"{"error": {"code": 429, "message": "You exceeded your current quota, please check your plan.", "status": "RESOURCE_EXHAUSTED", "details": [{"@type": "type.googleapis.com/google.rpc.QuotaFailure", "violations": [{"quotaId": "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"}]}, {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "34.4s"}]}}"#;

fn sse_data(text: &str) -> Vec<Value> {
    text.split("\n\n")
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

// Issue 33: an `openai-responses` upstream for a Chat Completions client,
// whole and streamed; the upstream is asked at `{baseUrl}/responses` with
// a Bearer key, `input` and `instructions`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_responses_upstream_serves_chat_clients() {
    let gw = Gw::start(
        "resp-up",
        Setup {
            prim_api: "openai-responses",
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_responses("from responses"));
    let body = json!({"model": "prim/model-a", "max_tokens": 20,
        "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]});
    let r = gw.openai(body.clone(), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "from responses");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert_eq!(v["usage"]["total_tokens"], 6);
    let seen = gw.prim.seen();
    assert_eq!(seen[0].path, "/v1/responses");
    assert_eq!(
        seen[0].headers["authorization"],
        format!("Bearer {}", SECRETS[0])
    );
    assert_eq!(seen[0].body["instructions"], "be brief");
    assert_eq!(seen[0].body["max_output_tokens"], 20);
    assert_eq!(seen[0].body["model"], "model-a");
    assert_eq!(
        seen[0].body["input"],
        json!([{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}])
    );
    // Streamed.
    gw.prim
        .push(Reply::Sse(responses_events(&["Hel", "lo"]), Tail::End));
    let mut b = body;
    b["stream"] = json!(true);
    b["stream_options"] = json!({"include_usage": true});
    let r = gw.openai(b, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let chunks = sse_data(&r.text);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello");
    assert!(r.text.trim_end().ends_with("data: [DONE]"), "{}", r.text);
    assert!(chunks
        .iter()
        .any(|c| c["choices"][0]["finish_reason"] == "stop"));
    assert!(chunks.iter().any(|c| c["usage"]["total_tokens"] == 11));
    gw.stop().await;
}

// Issue 33: errors inside a 200 Responses stream (`error`,
// `response.failed`) are failures like any other: the chain moves on
// before the client has a byte, and the classifier reads the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_inside_a_responses_stream_fail_over() {
    let gw = Gw::start(
        "resp-err",
        Setup {
            prim_api: "openai-responses",
            ..Setup::default()
        },
    )
    .await;
    let created = responses_events(&[])[0].clone();
    gw.prim.push(Reply::Sse(
        vec![
            created.clone(),
            "event: error\ndata: {\"type\":\"error\",\"sequence_number\":1,\"code\":\"rate_limit_exceeded\",\"message\":\"Rate limit reached for gpt-up\",\"param\":null}\n\n".into(),
        ],
        Tail::End,
    ));
    let mut ev = openai_events(&["from ", "back"]);
    ev.extend(openai_stream_end());
    gw.back.push(Reply::Sse(ev.clone(), Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body.clone(), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    assert!(r.text.contains("back"), "{}", r.text);
    // Classified from the event as received.
    assert_eq!(gw.usage("prim:default")["cooldownReason"], "rate_limit");
    gw.stop_cooling();
    gw.prim.push(Reply::Sse(
        vec![
            created,
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"sequence_number\":1,\"response\":{\"id\":\"resp_1\",\"object\":\"response\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"An error occurred while processing your request. You can retry your request, or contact us through our help center at help.openai.com if the error persists.\"},\"output\":[]}}\n\n".into(),
        ],
        Tail::End,
    ));
    gw.back.push(Reply::Sse(ev, Tail::End));
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert!(!gw.usage("prim:default")["cooldownReason"].is_null());
    gw.stop().await;
}

// Issue 33: the client endpoint `POST /v1/responses`, whole and streamed,
// on a Chat Completions upstream (translated) and on a Responses upstream
// (the client's body with only `model` replaced).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_responses_endpoint_serves_clients() {
    let gw = Gw::start(
        "resp-client",
        Setup {
            back_api: "openai-responses",
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_openai("plain"));
    let r = gw
        .post(
            "/v1/responses",
            json!({"model": "prim/model-a", "input": "hi", "instructions": "be brief"}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["output"][0]["content"][0]["text"], "plain");
    assert_eq!(v["usage"]["input_tokens"], 3);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("prim/model-a")
    );
    let seen = gw.prim.seen();
    assert_eq!(
        seen[0].body["messages"],
        json!([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}])
    );
    // Streamed from a Chat Completions upstream: the full Responses
    // sequence.
    let mut ev = openai_events(&["Hel", "lo"]);
    ev.extend(openai_stream_end());
    gw.prim.push(Reply::Sse(ev, Tail::End));
    let r = gw
        .post(
            "/v1/responses",
            json!({"model": "prim/model-a", "input": "hi", "stream": true}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = sse_data(&r.text);
    let types: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        types,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let seq: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(seq, (0..10).collect::<Vec<u64>>());
    assert_eq!(
        events[9]["response"]["output"][0]["content"][0]["text"],
        "Hello"
    );
    assert_eq!(events[9]["response"]["id"], events[0]["response"]["id"]);
    // A Responses upstream: the body passes with only `model` replaced.
    gw.back.push(ok_responses("same protocol"));
    let body = json!({"model": "back/model-b", "input": [{"role": "user", "content": "hi"}],
        "reasoning": {"effort": "low"}, "store": true});
    let r = gw.post("/v1/responses", body.clone(), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["output"][0]["content"][0]["text"], "same protocol");
    let mut expected = body;
    expected["model"] = json!("model-b");
    assert_eq!(gw.back.seen()[0].body, expected);
    // A field with no Chat Completions equivalent refuses that candidate,
    // named; the Responses fallback answers.
    gw.back.push(ok_responses("fallback"));
    let r = gw
        .post(
            "/v1/responses",
            json!({"model": "prim/model-a", "input": "hi", "previous_response_id": "resp_0"}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(gw.prim.hits(), 2, "the refused candidate is never called");
    // Bad input is a 400 in OpenAI's shape.
    let r = gw
        .post("/v1/responses", json!({"model": "prim/model-a"}), None)
        .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .starts_with("`input`"));
    gw.stop().await;
}

// Issue 33: a `google-generative-ai` upstream: the model in the URL,
// `x-goog-api-key`, `alt=sse` streams; Gemini's error body reaches the
// classifier whole (a 429 RESOURCE_EXHAUSTED is a rate limit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gemini_upstream_serves_clients() {
    let gw = Gw::start(
        "gemini",
        Setup {
            prim_api: "google-generative-ai",
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_gemini("from gemini"));
    let r = gw
        .anthropic(
            json!({"model": "prim/model-a", "max_tokens": 32, "system": "be brief",
                   "messages": [{"role": "user", "content": "hi"}]}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["content"][0]["text"], "from gemini");
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(v["usage"], json!({"input_tokens": 3, "output_tokens": 5}));
    let seen = gw.prim.seen();
    assert_eq!(seen[0].path, "/v1beta/models/model-a:generateContent");
    assert_eq!(seen[0].headers["x-goog-api-key"], SECRETS[0]);
    assert!(seen[0].headers.get("authorization").is_none());
    assert_eq!(
        seen[0].body["systemInstruction"],
        json!({"parts": [{"text": "be brief"}]})
    );
    assert_eq!(seen[0].body["generationConfig"]["maxOutputTokens"], 32);
    assert!(seen[0].body.get("model").is_none());
    // Streamed, for an OpenAI client.
    gw.prim
        .push(Reply::Sse(gemini_events(&["Hel", "lo"]), Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body.clone(), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let chunks = sse_data(&r.text);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello");
    assert!(r.text.trim_end().ends_with("data: [DONE]"), "{}", r.text);
    let s = &gw.prim.seen()[1];
    assert_eq!(s.path, "/v1beta/models/model-a:streamGenerateContent");
    assert_eq!(s.query.as_deref(), Some("alt=sse"));
    // Gemini's 429: the fallback answers; the attempt is a rate limit.
    gw.prim.push(error(429, GEMINI_429));
    gw.back.push(ok_openai("from the fallback"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-failover-attempts").as_deref(), Some("2"));
    gw.stop_cooling();
    gw.prim.push(error(429, GEMINI_429));
    gw.back.push(error(429, GEMINI_429));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 429, "{}", r.text);
    let v = r.json();
    let attempts = v["error"]["failover"]["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["reason"], "rate_limit", "{v}");
    gw.stop().await;
}

// Issue 33: Azure OpenAI: a classic chat deployment URL (`api-version`,
// the deployment named by the model) and the v1 Responses URL, both
// with `api-key`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn azure_deployments_take_api_key_and_api_version() {
    let gw = Gw::start(
        "azure",
        Setup {
            prim_api: "azure-openai-completions",
            back_api: "azure-openai-responses",
            back_keys: "apiVersion: 2025-04-01-preview".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_openai("from azure chat"));
    let r = gw.openai(chat("prim/model-a"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let s = &gw.prim.seen()[0];
    assert_eq!(s.path, "/openai/deployments/model-a/chat/completions");
    assert_eq!(s.query.as_deref(), Some("api-version=2024-10-21"));
    assert_eq!(s.headers["api-key"], SECRETS[0]);
    assert!(s.headers.get("authorization").is_none());
    gw.back.push(ok_responses("from azure responses"));
    let r = gw.openai(chat("back/model-b"), None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let s = &gw.back.seen()[0];
    assert_eq!(s.path, "/openai/responses");
    assert_eq!(s.query.as_deref(), Some("api-version=2025-04-01-preview"));
    assert_eq!(s.headers["api-key"], SECRETS[1]);
    assert_eq!(s.body["model"], "model-b");
    gw.stop().await;
}

// Issue 33 with issue 32: a Responses upstream's stream that breaks after
// its first tokens is finished by the next candidate (a Chat Completions
// upstream, `restart`), in the client's protocol.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_responses_stream_is_continued() {
    let gw = Gw::start(
        "resp-cont",
        Setup {
            prim_api: "openai-responses",
            ..Setup::default()
        },
    )
    .await;
    // created, in_progress, item added, part added, two deltas: then a reset.
    let partial: Vec<String> = responses_events(&["The quick", " brown"])
        .into_iter()
        .take(6)
        .collect();
    gw.prim.push(Reply::Sse(partial, Tail::Cut));
    let mut ev = openai_events(&["The quick", " brown", " fox"]);
    ev.extend(openai_stream_end());
    gw.back.push(Reply::Sse(ev, Tail::End));
    let mut body = chat("prim/model-a");
    body["stream"] = json!(true);
    let r = gw.openai(body, None).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let chunks = sse_data(&r.text);
    assert!(
        chunks.iter().all(|c| c.get("error").is_none()),
        "{}",
        r.text
    );
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "The quick brown fox");
    assert!(
        r.text.contains(
            ": x-failover-continued: back/model-b (restart) after prim/model-a broke off"
        ),
        "{}",
        r.text
    );
    gw.stop().await;
}

// The README's cross-family example: examples/gateway-cross.yaml is a set
// `serve` accepts, each provider with its api's endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readme_cross_family_config_is_serve_ready() {
    let dir = temp_dir("example-cross");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let gw = failover_gateway::Gateway::new(failover_gateway::Sources {
        config: root.join("examples/gateway-cross.yaml"),
        state: dir.clone(),
        rules: vec![],
        no_defaults: false,
        model: Default::default(),
    })
    .unwrap_or_else(|e| panic!("{e}"));
    let set = gw.active();
    let apis: Vec<(&str, &str)> = set
        .upstreams
        .providers
        .values()
        .map(|u| (u.id.as_str(), u.api.name()))
        .collect();
    assert_eq!(
        apis,
        [
            ("bedrock", "bedrock-converse-stream"),
            ("gemini", "google-generative-ai"),
            ("openai", "openai-responses")
        ]
    );
    // No baseUrl: the region's endpoint.
    assert_eq!(
        set.upstreams
            .get("bedrock")
            .unwrap()
            .uri_for("us.anthropic.claude-sonnet-4-5-20250929-v1:0", true)
            .unwrap()
            .to_string(),
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    );
    assert_eq!(
        set.upstreams.get("openai").unwrap().endpoint(),
        "https://api.openai.com/v1/responses"
    );
    assert_eq!(
        set.upstreams
            .get("gemini")
            .unwrap()
            .uri_for("gemini-2.5-pro", true)
            .unwrap()
            .to_string(),
        "https://generativelanguage.googleapis.com/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// The secret of the test `aws` profile: the fake Bedrock checks each
/// request's signature with it.
pub(crate) const AWS_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYSECRET0123";
/// Its access key id.
pub(crate) const AWS_KEY_ID: &str = "AKIAIOSFODNN7EXAMPLE";

/// How the fake Bedrock answers one (correctly signed) request.
#[derive(Clone, Debug)]
pub(crate) enum BedrockReply {
    /// A status, extra headers and a JSON body.
    Json(u16, Vec<(String, String)>, String),
    /// A `ConverseStream` answer: these event-stream frames.
    Frames(Vec<Vec<u8>>),
}

/// A fake Bedrock Runtime on loopback: every request's SigV4 signature
/// is checked (failover_testkit's verifier, independent of the gateway's
/// signer) with [`AWS_SECRET`] for `us-east-1` and `bedrock`; a wrong one
/// is refused as AWS refuses it (403 `InvalidSignatureException`).
pub(crate) struct BedrockFake {
    pub(crate) addr: std::net::SocketAddr,
    script: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<BedrockReply>>>,
    /// (path and query, body) of every request, signed or not.
    seen: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>>,
    /// Requests refused for their signature.
    pub(crate) refused: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for BedrockFake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl BedrockFake {
    pub(crate) async fn start() -> BedrockFake {
        use axum::body::Body;
        use axum::response::Response;
        let script: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<BedrockReply>>> =
            Default::default();
        let seen: std::sync::Arc<std::sync::Mutex<Vec<(String, Value)>>> = Default::default();
        let refused: std::sync::Arc<std::sync::atomic::AtomicUsize> = Default::default();
        let (sc, se, re) = (script.clone(), seen.clone(), refused.clone());
        let app = axum::Router::new().fallback(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: axum::http::HeaderMap,
                  body: bytes::Bytes| {
                let (sc, se, re) = (sc.clone(), se.clone(), re.clone());
                async move {
                    let pq = uri.path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
                    se.lock().unwrap().push((
                        pq.clone(),
                        serde_json::from_slice(&body).unwrap_or(Value::Null),
                    ));
                    let hs: Vec<(String, String)> = headers
                        .iter()
                        .map(|(k, v)| (k.as_str().to_string(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
                        .collect();
                    if failover_testkit::aws::verify_sigv4(
                        method.as_str(), &pq, &hs, &body, AWS_SECRET, "us-east-1", "bedrock",
                    )
                    .is_err()
                    {
                        re.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        return Response::builder()
                            .status(403)
                            .header("content-type", "application/json")
                            .header("x-amzn-ErrorType", "InvalidSignatureException:http://internal.amazon.com/coral/com.amazon.coral.service/")
                            .body(Body::from(r#"{"message":"The request signature we calculated does not match the signature you provided. Check your AWS Secret Access Key and signing method. Consult the service documentation for details."}"#))
                            .unwrap();
                    }
                    let reply = sc.lock().unwrap().pop_front();
                    match reply {
                        Some(BedrockReply::Json(status, extra, body)) => {
                            let mut b = Response::builder()
                                .status(status)
                                .header("content-type", "application/json");
                            for (k, v) in extra {
                                b = b.header(k, v);
                            }
                            b.body(Body::from(body)).unwrap()
                        }
                        Some(BedrockReply::Frames(frames)) => Response::builder()
                            .status(200)
                            .header("content-type", "application/vnd.amazon.eventstream")
                            .body(Body::from_stream(futures_util::stream::iter(
                                frames.into_iter().map(|f| Ok::<_, std::io::Error>(bytes::Bytes::from(f))),
                            )))
                            .unwrap(),
                        None => Response::builder()
                            .status(500)
                            .header("x-amzn-ErrorType", "InternalServerException")
                            .body(Body::from(r#"{"message":"unscripted"}"#))
                            .unwrap(),
                    }
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        BedrockFake {
            addr,
            script,
            seen,
            refused,
            task,
        }
    }

    pub(crate) fn push(&self, r: BedrockReply) {
        self.script.lock().unwrap().push_back(r);
    }

    pub(crate) fn seen(&self) -> Vec<(String, Value)> {
        self.seen.lock().unwrap().clone()
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// ConverseStream frames of a text answer, as Bedrock sends them.
pub(crate) fn converse_frames(parts: &[&str]) -> Vec<Vec<u8>> {
    use failover_testkit::aws::encode_event;
    let mut out = vec![encode_event("messageStart", br#"{"role":"assistant"}"#)];
    for p in parts {
        out.push(encode_event(
            "contentBlockDelta",
            json!({"contentBlockIndex": 0, "delta": {"text": p}, "p": "abcdefgh"})
                .to_string()
                .as_bytes(),
        ));
    }
    out.push(encode_event(
        "contentBlockStop",
        br#"{"contentBlockIndex":0}"#,
    ));
    out.push(encode_event("messageStop", br#"{"stopReason":"end_turn"}"#));
    out.push(encode_event(
        "metadata",
        br#"{"usage":{"inputTokens":20,"outputTokens":9,"totalTokens":29},"metrics":{"latencyMs":812}}"#,
    ));
    out
}

/// One upstream of a chain: a scripted HTTP upstream, or the fake Bedrock.
enum Up {
    Mock(Mock),
    Bedrock(BedrockFake),
}

impl Up {
    fn url(&self, api: &str) -> String {
        match self {
            Up::Mock(m) => base(m, api),
            Up::Bedrock(b) => b.url(),
        }
    }

    fn paths(&self) -> Vec<String> {
        match self {
            Up::Mock(m) => m.seen().into_iter().map(|s| s.path).collect(),
            Up::Bedrock(b) => b.seen().into_iter().map(|s| s.0).collect(),
        }
    }
}

/// The upstreams of a chain, in its order, in front of a gateway.
struct Chain {
    running: Option<failover_gateway::Running>,
    dir: std::path::PathBuf,
    /// (provider id, api, upstream)
    ups: Vec<(&'static str, &'static str, Up)>,
    http: reqwest::Client,
}

impl Chain {
    /// A gateway whose chain is `family` in order (model `m` of each;
    /// the Bedrock one `us.anthropic.claude-sonnet-4-5-20250929-v1:0`),
    /// each with a key — an `aws` profile for Bedrock, signed with
    /// `aws_secret`.
    async fn start(name: &str, family: &[(&'static str, &'static str)], aws_secret: &str) -> Chain {
        let _env = PROXY_ENV.read().await;
        let mut ups = Vec::new();
        for (id, api) in family {
            let up = if *api == "bedrock-converse-stream" {
                Up::Bedrock(BedrockFake::start().await)
            } else {
                Up::Mock(Mock::start().await)
            };
            ups.push((*id, *api, up));
        }
        let dir = temp_dir(name);
        let agent = dir.join("state/agents/main/agent");
        std::fs::create_dir_all(&agent).unwrap();
        let profiles: serde_json::Map<String, Value> = ups
            .iter()
            .map(|(id, api, _)| {
                let p = if *api == "bedrock-converse-stream" {
                    json!({"type": "aws", "provider": id, "accessKeyId": AWS_KEY_ID,
                           "secretAccessKey": aws_secret, "region": "us-east-1"})
                } else {
                    json!({"type": "api_key", "provider": id, "key": format!("key-{id}-{}", SECRETS[0])})
                };
                (format!("{id}:default"), p)
            })
            .collect();
        std::fs::write(
            agent.join("auth-profiles.json"),
            json!({"version": 1, "profiles": profiles}).to_string(),
        )
        .unwrap();
        let model = |api: &str| {
            if api == "bedrock-converse-stream" {
                BEDROCK_MODEL
            } else {
                "m"
            }
        };
        let mut config = format!(
            "agents:\n  defaults:\n    model:\n      primary: {}/{}\n      fallbacks: [{}]\nmodels:\n  providers:\n",
            ups[0].0,
            model(ups[0].1),
            ups[1..]
                .iter()
                .map(|(id, api, _)| format!("\"{id}/{}\"", model(api)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        for (id, api, up) in &ups {
            config.push_str(&format!(
                "    {id}:\n      baseUrl: \"{}\"\n      api: {api}\n      timeouts: {{ connectMs: 1000, firstByteMs: 3000, totalMs: 10000 }}\n      models: [\"{}\"]\n",
                up.url(api),
                model(api),
            ));
        }
        std::fs::write(dir.join("gateway.yaml"), config).unwrap();
        let running = failover_gateway::start(failover_gateway::Options {
            sources: failover_gateway::Sources {
                config: dir.join("gateway.yaml"),
                state: dir.join("state"),
                rules: vec![],
                no_defaults: false,
                model: Default::default(),
            },
            listen: "127.0.0.1:0".into(),
            watch: false,
            workers: 2,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        Chain {
            running: Some(running),
            dir,
            ups,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        }
    }

    fn mock(&self, id: &str) -> &Mock {
        match &self.ups.iter().find(|u| u.0 == id).unwrap().2 {
            Up::Mock(m) => m,
            Up::Bedrock(_) => panic!("{id} is the Bedrock fake"),
        }
    }

    fn bedrock(&self) -> &BedrockFake {
        self.ups
            .iter()
            .find_map(|u| match &u.2 {
                Up::Bedrock(b) => Some(b),
                Up::Mock(_) => None,
            })
            .unwrap()
    }

    async fn post(&self, path: &str, body: Value) -> Resp {
        let url = format!("http://{}{path}", self.running.as_ref().unwrap().addr);
        let r = Resp::from(self.http.post(url).json(&body).send().await.unwrap()).await;
        assert!(!r.text.contains(AWS_SECRET), "{}", r.text);
        r
    }

    async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Bedrock model of the tests (its `:` goes as `%3A` in the path).
const BEDROCK_MODEL: &str = "us.anthropic.claude-sonnet-4-5-20250929-v1:0";

/// What a chain's upstreams answer: each family's failure in its own
/// shape, by provider id.
enum Failure {
    Http(Reply),
    Bedrock(BedrockReply),
}

/// Every family's failure in its own shape, then Anthropic answers; the
/// client, in each of its three protocols, gets its own protocol back.
async fn cross_family_chain(family: &[(&'static str, &'static str)], failures: &[(&str, Failure)]) {
    for client in ["/v1/chat/completions", "/v1/messages", "/v1/responses"] {
        let chain = Chain::start("chain", family, AWS_SECRET).await;
        for (id, f) in failures {
            match f {
                Failure::Http(reply) => {
                    chain.mock(id).push(reply.clone());
                }
                Failure::Bedrock(reply) => chain.bedrock().push(reply.clone()),
            }
        }
        chain
            .mock("anthropic")
            .push(ok_anthropic("from the last resort"));
        let first = format!("{}/m", family[0].0);
        let body = match client {
            "/v1/chat/completions" => chat(&first),
            "/v1/messages" => msg(&first),
            _ => json!({"model": first, "input": "hi"}),
        };
        let r = chain.post(client, body).await;
        assert_eq!(r.status, 200, "{client}: {}", r.text);
        let v = r.json();
        let text = match client {
            "/v1/chat/completions" => v["choices"][0]["message"]["content"].clone(),
            "/v1/messages" => v["content"][0]["text"].clone(),
            _ => v["output"][0]["content"][0]["text"].clone(),
        };
        assert_eq!(text, "from the last resort", "{client}: {v}");
        assert_eq!(r.header("x-failover-model").as_deref(), Some("anthropic/m"));
        assert_eq!(
            r.header("x-failover-attempts"),
            Some(family.len().to_string())
        );
        // Each upstream was asked once, in its own protocol's path.
        for (id, api, up) in &chain.ups {
            let paths = up.paths();
            assert_eq!(paths.len(), 1, "{id}: {paths:?}");
            let expect = match *api {
                "openai-responses" => "/v1/responses",
                "google-generative-ai" => "/v1beta/models/m:generateContent",
                "bedrock-converse-stream" => {
                    "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
                }
                _ => "/v1/messages",
            };
            assert_eq!(paths[0], expect, "{id}");
        }
        if family.iter().any(|f| f.1 == "bedrock-converse-stream") {
            assert_eq!(
                chain
                    .bedrock()
                    .refused
                    .load(std::sync::atomic::Ordering::SeqCst),
                0,
                "the signature was checked and accepted"
            );
        }
        eprintln!(
            "cross-family chain, {client} client: {} → answered by {}, {} attempts",
            family
                .iter()
                .map(|(id, api)| format!("{id} ({api})"))
                .collect::<Vec<_>>()
                .join(" → "),
            r.header("x-failover-model").unwrap_or_default(),
            r.header("x-failover-attempts").unwrap_or_default()
        );
        chain.stop().await;
    }
}

// Issue 33 "Tests": a chain that falls back across all four protocol
// families in one run — OpenAI Responses (429), Gemini (503 UNAVAILABLE),
// Bedrock (ThrottlingException, the request SigV4-signed and checked),
// then Anthropic answers — with the client's protocol preserved, for each
// of the three client protocols.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_falls_back_across_protocol_families() {
    cross_family_chain(
        &[
            ("openai", "openai-responses"),
            ("gemini", "google-generative-ai"),
            ("bedrock", "bedrock-converse-stream"),
            ("anthropic", "anthropic-messages"),
        ],
        &[
            (
                "openai",
                Failure::Http(error(
                    429,
                    r#"{"error":{"message":"Rate limit reached for gpt-5.2 in organization org-x on requests per min (RPM): Limit 500, Used 500, Requested 1.","type":"requests","param":null,"code":"rate_limit_exceeded"}}"#,
                )),
            ),
            (
                "gemini",
                Failure::Http(error(
                    503,
                    r#"{"error":{"code":503,"message":"The model is overloaded. Please try again later.","status":"UNAVAILABLE"}}"#,
                )),
            ),
            (
                "bedrock",
                Failure::Bedrock(BedrockReply::Json(
                    429,
                    vec![(
                        "x-amzn-ErrorType".into(),
                        "ThrottlingException:http://internal.amazon.com/coral/com.amazon.bedrock/".into(),
                    )],
                    r#"{"message":"Too many requests, please wait before trying again."}"#.into(),
                )),
            ),
        ],
    )
    .await;
}

/// A Converse answer as Bedrock sends it.
pub(crate) fn ok_converse(text: &str) -> Reply {
    Reply::Http {
        status: 200,
        headers: vec![],
        body: json!({"output": {"message": {"role": "assistant", "content": [{"text": text}]}},
            "stopReason": "end_turn", "usage": {"inputTokens": 30, "outputTokens": 12, "totalTokens": 42},
            "metrics": {"latencyMs": 412}})
        .to_string(),
    }
}

/// A Bedrock error: the status, `x-amzn-ErrorType` and `{"message"}`.
pub(crate) fn bedrock_error(status: u16, name: &str, message: &str) -> Reply {
    Reply::Http {
        status,
        headers: vec![
            (
                "x-amzn-ErrorType".into(),
                format!("{name}:http://internal.amazon.com/coral/com.amazon.bedrock/"),
            ),
            (
                "x-amzn-RequestId".into(),
                "0b1c2d3e-aaaa-bbbb-cccc-000000000000".into(),
            ),
        ],
        body: json!({ "message": message }).to_string(),
    }
}

// Issue 33: a `bedrock-converse-stream` upstream with a Bedrock API key
// (Bearer): `/model/{label}/converse` with the id percent-encoded as a
// Smithy label, the Converse body; an exception's name (the
// `x-amzn-ErrorType` header) reaches the classifier as the error type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bedrock_upstream_with_an_api_key() {
    let gw = Gw::start(
        "bedrock-bearer",
        Setup {
            prim_api: "bedrock-converse-stream",
            prim_models: "['us.anthropic.claude-sonnet-4-5-20250929-v1:0']".into(),
            prim_keys: "region: us-east-1".into(),
            ..Setup::default()
        },
    )
    .await;
    gw.prim.push(ok_converse("from bedrock"));
    let model = "prim/us.anthropic.claude-sonnet-4-5-20250929-v1:0";
    let r = gw
        .openai(
            json!({"model": model, "max_tokens": 64,
                   "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "from bedrock");
    assert_eq!(v["usage"]["total_tokens"], 42);
    let s = &gw.prim.seen()[0];
    assert_eq!(
        s.path,
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse"
    );
    assert_eq!(s.headers["authorization"], format!("Bearer {}", SECRETS[0]));
    assert_eq!(
        s.body,
        json!({"system": [{"text": "be brief"}],
               "messages": [{"role": "user", "content": [{"text": "hi"}]}],
               "inferenceConfig": {"maxTokens": 64}})
    );
    // ThrottlingException, named in the header: a rate limit.
    gw.prim.push(bedrock_error(
        429,
        "ThrottlingException",
        "Too many requests, please wait before trying again.",
    ));
    gw.back.push(error(500, r#"{"error":{"message":"boom"}}"#));
    let r = gw.openai(chat(model), None).await;
    let v = r.json();
    let attempts = v["error"]["failover"]["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["reason"], "rate_limit", "{v}");
    gw.stop().await;
}

// Issue 33: a `bedrock-converse-stream` upstream with an `aws` profile:
// each request SigV4-signed (the fake checks it with an independent
// verifier), Converse whole and ConverseStream's event-stream frames
// streamed; an exception frame before the first token fails over; a
// profile with the wrong secret is refused by the fake (403
// InvalidSignatureException), classified, and the chain moves on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bedrock_upstream_signs_and_streams() {
    let family = [
        ("bedrock", "bedrock-converse-stream"),
        ("anthropic", "anthropic-messages"),
    ];
    let chain = Chain::start("bedrock-sigv4", &family, AWS_SECRET).await;
    let b = chain.bedrock();
    b.push(BedrockReply::Json(
        200,
        vec![],
        json!({"output": {"message": {"role": "assistant", "content": [
                {"text": "Checking. "},
                {"toolUse": {"toolUseId": "tooluse_1", "name": "lookup", "input": {"query": "status"}}}]}},
            "stopReason": "tool_use", "usage": {"inputTokens": 20, "outputTokens": 9, "totalTokens": 29},
            "metrics": {"latencyMs": 812}})
        .to_string(),
    ));
    let model = format!("bedrock/{BEDROCK_MODEL}");
    let r = chain.post("/v1/messages", msg(&model)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["content"][1]["input"], json!({"query": "status"}));
    assert_eq!(v["usage"], json!({"input_tokens": 20, "output_tokens": 9}));
    // Streamed: frames with Bedrock's padding field, to an OpenAI client.
    b.push(BedrockReply::Frames(converse_frames(&["Hel", "lo"])));
    let mut body = chat(&model);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = chain.post("/v1/chat/completions", body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let chunks = sse_data(&r.text);
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "Hello");
    assert!(
        chunks.iter().any(|c| c["usage"]["total_tokens"] == 29),
        "{}",
        r.text
    );
    assert!(r.text.trim_end().ends_with("data: [DONE]"));
    let seen = b.seen();
    assert_eq!(
        seen[1].0,
        "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream"
    );
    assert_eq!(b.refused.load(std::sync::atomic::Ordering::SeqCst), 0);
    // An exception frame first: a failure like any other, before the
    // client has a byte; the fallback answers.
    b.push(BedrockReply::Frames(vec![
        failover_testkit::aws::encode_event("messageStart", br#"{"role":"assistant"}"#),
        failover_testkit::aws::encode_exception(
            "serviceUnavailableException",
            br#"{"message":"Bedrock is unable to process your request."}"#,
        ),
    ]));
    chain.mock("anthropic").push(Reply::Sse(
        anthropic_events(&["from ", "anthropic"], true),
        Tail::End,
    ));
    let r = chain.post("/v1/chat/completions", body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-failover-model").as_deref(), Some("anthropic/m"));
    assert!(r.text.contains("anthropic"), "{}", r.text);
    chain.stop().await;

    // The wrong secret: AWS's 403, classified from the exception's name;
    // the chain moves on.
    let chain = Chain::start("bedrock-badsig", &family, "not-the-secret").await;
    chain
        .mock("anthropic")
        .push(ok_anthropic("after the refusal"));
    let r = chain.post("/v1/messages", msg(&model)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["content"][0]["text"], "after the refusal");
    assert_eq!(
        chain
            .bedrock()
            .refused
            .load(std::sync::atomic::Ordering::SeqCst),
        1
    );
    chain.stop().await;
}

// Issue 44 item 9: a Responses client's stream that breaks (no
// continuation for Responses clients) ends with an `error` event whose
// `sequence_number` follows the events before it: every number increases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_9_the_responses_error_event_continues_the_sequence() {
    let gw = Gw::start("resp-seq", Setup::default()).await;
    let mut ev = openai_events(&["The quick", " brown"]);
    ev.truncate(2);
    gw.prim.push(Reply::Sse(ev, Tail::Cut));
    let r = gw
        .post(
            "/v1/responses",
            json!({"model": "prim/model-a", "input": "hi", "stream": true}),
            None,
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let events = sse_data(&r.text);
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(seqs.len() > 2, "{}", r.text);
    assert_eq!(events.last().unwrap()["type"], "error", "{}", r.text);
    assert!(
        seqs.windows(2).all(|w| w[1] > w[0]),
        "sequence numbers do not increase: {seqs:?}"
    );
    gw.stop().await;
}

// Issue 44 item 4: a refusal quotes at most 64 characters of what the
// client sent: an 8 MiB `role` no longer comes back (twice) in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_4_a_refusal_does_not_grow_with_the_request() {
    let gw = Gw::start("resp-role", Setup::default()).await;
    let role = "r".repeat(8 << 20);
    let r = gw
        .post(
            "/v1/responses",
            json!({"model": "prim/model-a", "input": [{"role": role, "content": "hi"}]}),
            None,
        )
        .await;
    assert!(r.status >= 400, "{}", r.status);
    assert!(r.text.len() < 8192, "a {} byte error", r.text.len());
    assert!(r.text.contains("has no"), "{}", r.text);
    assert_eq!(gw.prim.hits() + gw.back.hits(), 0);
    gw.stop().await;
}

// Issue 44 item 3: a request of 150,000 one-word messages (a few MiB,
// under the body limit) is refused by its structure before it is parsed
// into memory many times its size: a 400 that names the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_3_a_request_of_too_many_parts_is_refused_before_parsing() {
    let gw = Gw::start("many-msgs", Setup::default()).await;
    let messages: Vec<Value> = (0..150_000)
        .map(|_| json!({"role": "user", "content": "hi"}))
        .collect();
    let r = gw
        .openai(json!({"model": "prim/model-a", "messages": messages}), None)
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("100000 JSON objects and arrays"),
        "{}",
        r.text
    );
    assert_eq!(gw.prim.hits(), 0);
    gw.stop().await;
}
