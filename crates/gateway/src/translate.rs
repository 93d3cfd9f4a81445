//! Cross-protocol translation through the canonical form
//! ([`crate::canonical`]): a client request of one protocol, parsed into
//! canonical form and rendered in the upstream's; the answer and the
//! stream back the same way. Same-protocol calls are not translated: the
//! client's body goes upstream with only `model` replaced, and the answer
//! comes back as it was sent.
//!
//! What crosses: text and image content, the system prompt, stop
//! sequences, max tokens, temperature / top_p, tool definitions, tool
//! choice, tool calls and tool results, finish reasons and usage. A
//! request field outside that list has no faithful translation, so the
//! request is refused *for that candidate* with the field named (the
//! runner records it as a skipped candidate and moves on), never sent
//! without it. The one exception is `cache_control` on Anthropic blocks:
//! a caching hint that changes cost, not the answer.
//!
//! Worked example (Anthropic client, OpenAI upstream):
//!
//! ```text
//! {"model": "m", "max_tokens": 64, "system": "be brief",
//!  "messages": [{"role": "user", "content": "hi"}], "stop_sequences": ["END"]}
//!   →
//! {"model": "gpt", "max_tokens": 64, "stop": ["END"],
//!  "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
//! ```
//!
//! and the answer `choices[0].message.content = "Hello"`, `finish_reason:
//! "stop"`, `usage {prompt_tokens: 5, completion_tokens: 1}` comes back as
//! `content: [{"type": "text", "text": "Hello"}]`, `stop_reason:
//! "end_turn"`, `usage {input_tokens: 5, output_tokens: 1}`.

use serde_json::{Map, Value};

use super::canonical::{self, anthropic, bedrock, gemini, openai_chat, responses, StreamEvent};
use super::protocol::Protocol;
pub(crate) use super::sse::Event;

/// Why a request cannot go to an upstream of the other protocol.
pub(crate) type Untranslatable = String;

/// The protocol's name in refusals.
fn display(p: Protocol) -> &'static str {
    match p {
        Protocol::OpenAi => openai_chat::NAME,
        Protocol::Anthropic => anthropic::NAME,
        Protocol::Responses => responses::NAME,
        Protocol::Gemini => gemini::NAME,
        Protocol::Bedrock => bedrock::NAME,
    }
}

/// A client body of protocol `from`, in canonical form.
pub(crate) fn parse_request(
    from: Protocol,
    body: &Map<String, Value>,
) -> Result<canonical::Request, canonical::Refusal> {
    match from {
        Protocol::OpenAi => openai_chat::request_in(body),
        Protocol::Anthropic => anthropic::request_in(body),
        Protocol::Responses => responses::request_in(body),
        Protocol::Gemini => gemini::request_in(body),
        Protocol::Bedrock => bedrock::request_in(body),
    }
}

/// A canonical request in protocol `to`, asking for `model` (Gemini's
/// model is in the URL, not the body).
pub(crate) fn render_request(
    to: Protocol,
    r: &canonical::Request,
    model: &str,
) -> Result<Map<String, Value>, Untranslatable> {
    let mut out = match to {
        Protocol::OpenAi => openai_chat::request_out(r),
        Protocol::Anthropic => anthropic::request_out(r),
        Protocol::Responses => responses::request_out(r),
        Protocol::Gemini => gemini::request_out(r),
        Protocol::Bedrock => bedrock::request_out(r),
    }
    .map_err(|e| canonical::for_target(e, display(to)))?;
    if !matches!(to, Protocol::Gemini | Protocol::Bedrock) {
        out.insert("model".into(), Value::String(model.into()));
    }
    Ok(out)
}

/// The request for an upstream speaking `to`, from a client request
/// `body` of protocol `from`, asking for `model`.
pub(crate) fn request(
    from: Protocol,
    to: Protocol,
    body: &Map<String, Value>,
    model: &str,
) -> Result<Map<String, Value>, Untranslatable> {
    if from == to {
        let mut out = body.clone();
        out.insert("model".into(), Value::String(model.into()));
        return Ok(out);
    }
    let c = parse_request(from, body).map_err(|e| canonical::for_target(e, display(to)))?;
    render_request(to, &c, model)
}

/// [`request`], serialised: the JSON body for the upstream. In the same
/// protocol the client's fields are written as they are with `model`
/// replaced, without copying the tree first.
pub(crate) fn request_body(
    from: Protocol,
    to: Protocol,
    body: &Map<String, Value>,
    model: &str,
) -> Result<Vec<u8>, Untranslatable> {
    if from == to {
        return Ok(serde_json::to_vec(&WithModel { body, model }).unwrap_or_default());
    }
    let out = request(from, to, body, model)?;
    Ok(serde_json::to_vec(&out).unwrap_or_default())
}

/// A request body with its `model` replaced (or added, last, as
/// [`Map::insert`] would).
struct WithModel<'a> {
    body: &'a Map<String, Value>,
    model: &'a str,
}

impl serde::Serialize for WithModel<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let has_model = self.body.contains_key("model");
        let mut m = s.serialize_map(Some(self.body.len() + usize::from(!has_model)))?;
        for (k, v) in self.body {
            if k == "model" {
                m.serialize_entry(k, self.model)?;
            } else {
                m.serialize_entry(k, v)?;
            }
        }
        if !has_model {
            m.serialize_entry("model", self.model)?;
        }
        m.end()
    }
}

/// A whole answer in canonical form.
pub(crate) fn parse_response(from: Protocol, v: &Value) -> canonical::Response {
    match from {
        Protocol::OpenAi => openai_chat::response_in(v),
        Protocol::Anthropic => anthropic::response_in(v),
        Protocol::Responses => responses::response_in(v),
        Protocol::Gemini => gemini::response_in(v),
        Protocol::Bedrock => bedrock::response_in(v),
    }
}

/// A canonical answer in protocol `to`.
pub(crate) fn render_response(to: Protocol, r: &canonical::Response) -> Value {
    match to {
        Protocol::OpenAi => openai_chat::response_out(r),
        Protocol::Anthropic => anthropic::response_out(r),
        Protocol::Responses => responses::response_out(r),
        Protocol::Gemini => gemini::response_out(r),
        Protocol::Bedrock => bedrock::response_out(r),
    }
}

/// A whole (non-streamed) upstream answer of protocol `from`, for a
/// client of protocol `to`.
pub(crate) fn response(from: Protocol, to: Protocol, v: Value) -> Value {
    if from == to {
        return v;
    }
    render_response(to, &parse_response(from, &v))
}

/// Upstream events → canonical events, per protocol.
#[derive(Debug)]
pub(crate) enum StreamIn {
    OpenAi(openai_chat::StreamIn),
    Anthropic(anthropic::StreamIn),
    Responses(responses::StreamIn),
    Gemini(gemini::StreamIn),
    Bedrock(bedrock::StreamIn),
}

impl StreamIn {
    pub(crate) fn new(p: Protocol) -> Self {
        match p {
            Protocol::OpenAi => StreamIn::OpenAi(Default::default()),
            Protocol::Anthropic => StreamIn::Anthropic(Default::default()),
            Protocol::Responses => StreamIn::Responses(Default::default()),
            Protocol::Gemini => StreamIn::Gemini(Default::default()),
            Protocol::Bedrock => StreamIn::Bedrock(Default::default()),
        }
    }

    pub(crate) fn push(&mut self, e: &Event) -> Vec<StreamEvent> {
        match self {
            StreamIn::OpenAi(t) => t.push(e),
            StreamIn::Anthropic(t) => t.push(e),
            StreamIn::Responses(t) => t.push(e),
            StreamIn::Gemini(t) => t.push(e),
            StreamIn::Bedrock(t) => t.push(e),
        }
    }
}

/// Canonical events → client events, per client protocol.
#[derive(Debug)]
pub(crate) enum StreamOut {
    OpenAi(openai_chat::StreamOut),
    Anthropic(anthropic::StreamOut),
    Responses(Box<responses::StreamOut>),
}

impl StreamOut {
    pub(crate) fn new(client: Protocol, client_wants_usage: bool) -> Self {
        match client {
            Protocol::Anthropic => StreamOut::Anthropic(Default::default()),
            Protocol::Responses => StreamOut::Responses(Default::default()),
            // Gemini and Bedrock are never client protocols.
            Protocol::OpenAi | Protocol::Gemini | Protocol::Bedrock => {
                StreamOut::OpenAi(openai_chat::StreamOut::new(client_wants_usage))
            }
        }
    }

    pub(crate) fn push(&mut self, e: StreamEvent) -> Vec<Event> {
        match self {
            StreamOut::OpenAi(t) => t.push(e),
            StreamOut::Anthropic(t) => t.push(e),
            StreamOut::Responses(t) => t.push(e),
        }
    }
}

/// Streamed events of one protocol turned into the other's, one upstream
/// event at a time.
#[derive(Debug)]
pub(crate) enum StreamTranslator {
    /// Same protocol: events pass as they are.
    Same,
    /// Through the canonical form.
    Via(Box<(StreamIn, StreamOut)>),
}

impl StreamTranslator {
    pub(crate) fn new(upstream: Protocol, client: Protocol, client_wants_usage: bool) -> Self {
        if upstream == client {
            return StreamTranslator::Same;
        }
        StreamTranslator::Via(Box::new((
            StreamIn::new(upstream),
            StreamOut::new(client, client_wants_usage),
        )))
    }

    /// The client events for one upstream event.
    pub(crate) fn push(&mut self, e: Event) -> Vec<Event> {
        match self {
            StreamTranslator::Same => vec![e],
            StreamTranslator::Via(t) => {
                let (i, o) = &mut **t;
                i.push(&e).into_iter().flat_map(|c| o.push(c)).collect()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    // The serialised body is the translated map, model replaced or added,
    // in every direction.
    #[test]
    fn request_body_is_the_serialised_request() {
        let with = obj(
            json!({"model": "x", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}),
        );
        let without =
            obj(json!({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}));
        for body in [&with, &without] {
            for (from, to) in [
                (Protocol::OpenAi, Protocol::OpenAi),
                (Protocol::Anthropic, Protocol::Anthropic),
                (Protocol::OpenAi, Protocol::Anthropic),
                (Protocol::Anthropic, Protocol::OpenAi),
            ] {
                let bytes = request_body(from, to, body, "gpt-x").unwrap();
                let parsed: Map<String, Value> = serde_json::from_slice(&bytes).unwrap();
                assert_eq!(
                    parsed,
                    request(from, to, body, "gpt-x").unwrap(),
                    "{from:?} → {to:?}"
                );
                assert_eq!(parsed["model"], "gpt-x");
                let text = String::from_utf8(bytes).unwrap();
                assert_eq!(text.matches("\"model\"").count(), 1, "{text}");
            }
        }
    }

    #[test]
    fn anthropic_request_to_openai() {
        let body = obj(json!({
            "model": "x", "max_tokens": 64, "system": "be brief", "stop_sequences": ["END"],
            "temperature": 0.5,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]}
            ],
            "tools": [{"name": "f", "description": "d", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"}
        }));
        let out = request(Protocol::Anthropic, Protocol::OpenAi, &body, "gpt").unwrap();
        assert_eq!(out["model"], "gpt");
        assert_eq!(out["stop"], json!(["END"]));
        assert_eq!(out["max_tokens"], 64);
        assert_eq!(out["tool_choice"], "required");
        let m = out["messages"].as_array().unwrap();
        assert_eq!(m[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(
            m[1]["content"][1]["image_url"]["url"],
            "data:image/png;base64,AAA"
        );
        assert_eq!(m[2]["tool_calls"][0]["function"]["arguments"], "{\"a\":1}");
        assert_eq!(
            m[3],
            json!({"role": "tool", "tool_call_id": "t1", "content": "42"})
        );
        assert_eq!(
            out["tools"][0]["function"]["parameters"],
            json!({"type": "object"})
        );
    }

    #[test]
    fn openai_request_to_anthropic() {
        let body = obj(json!({
            "model": "x", "max_completion_tokens": 10, "stop": "END",
            "messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{\"q\":1}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "r"}]
        }));
        let out = request(Protocol::OpenAi, Protocol::Anthropic, &body, "claude").unwrap();
        assert_eq!(out["system"], "sys");
        assert_eq!(out["max_tokens"], 10);
        assert_eq!(out["stop_sequences"], json!(["END"]));
        assert_eq!(out["messages"][1]["content"][0]["input"], json!({"q": 1}));
        assert_eq!(out["messages"][2]["content"][0]["type"], "tool_result");
    }

    // Issue 12 item 5: an untranslatable feature is named, never dropped.
    #[test]
    fn untranslatable_features_are_named() {
        let body = obj(
            json!({"model": "x", "messages": [{"role": "user", "content": "hi"}], "logprobs": true}),
        );
        let e = request(Protocol::OpenAi, Protocol::Anthropic, &body, "c").unwrap_err();
        assert_eq!(
            e,
            "request field `logprobs` has no Anthropic Messages equivalent"
        );
        let body = obj(
            json!({"model": "x", "max_tokens": 5, "thinking": {"type": "enabled"},
            "messages": [{"role": "user", "content": "hi"}]}),
        );
        let e = request(Protocol::Anthropic, Protocol::OpenAi, &body, "g").unwrap_err();
        assert!(e.contains("`thinking`"), "{e}");
    }

    #[test]
    fn responses_cross() {
        let oa = json!({"id": "1", "model": "gpt", "choices": [{"message": {"content": "Hello"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1}});
        let a = response(Protocol::OpenAi, Protocol::Anthropic, oa);
        assert_eq!(a["content"], json!([{"type": "text", "text": "Hello"}]));
        assert_eq!(a["stop_reason"], "end_turn");
        assert_eq!(a["usage"], json!({"input_tokens": 5, "output_tokens": 1}));
        let an = json!({"id": "m", "model": "c", "content": [{"type": "text", "text": "Hi"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 2, "output_tokens": 3}});
        let o = response(Protocol::Anthropic, Protocol::OpenAi, an);
        assert_eq!(o["choices"][0]["message"]["content"], "Hi");
        assert_eq!(o["choices"][0]["finish_reason"], "length");
        assert_eq!(o["usage"]["total_tokens"], 5);
    }

    #[test]
    fn streams_cross() {
        let mut t = StreamTranslator::new(Protocol::OpenAi, Protocol::Anthropic, false);
        let mut out = Vec::new();
        for d in [
            r#"{"id":"1","model":"g","choices":[{"delta":{"role":"assistant","content":"He"}}]}"#,
            r#"{"choices":[{"delta":{"content":"llo"},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}"#,
            "[DONE]",
        ] {
            out.extend(t.push(Event::data(d)));
        }
        let names: Vec<_> = out.iter().map(|e| e.event.clone().unwrap()).collect();
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
        assert!(out[5].data.contains("\"output_tokens\":2"));

        let mut t = StreamTranslator::new(Protocol::Anthropic, Protocol::OpenAi, true);
        let mut out = Vec::new();
        for (e, d) in [
            (
                "message_start",
                json!({"type":"message_start","message":{"id":"m","model":"c","usage":{"input_tokens":4}}}),
            ),
            (
                "content_block_start",
                json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            ),
            (
                "content_block_delta",
                json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hi"}}),
            ),
            (
                "message_delta",
                json!({"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":1}}),
            ),
            ("message_stop", json!({"type":"message_stop"})),
        ] {
            out.extend(t.push(Event::named(e, &d)));
        }
        assert_eq!(out.len(), 5);
        assert!(out[1].data.contains("\"content\":\"Hi\""));
        assert!(out[2].data.contains("\"finish_reason\":\"stop\""));
        assert!(out[3].data.contains("\"total_tokens\":5"));
        assert_eq!(out[4].data, "[DONE]");
    }
}
