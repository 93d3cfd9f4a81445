//! Server-sent events (`text/event-stream`): the [`Event`] every protocol's
//! stream is read into, and the upstream's byte stream split into events
//! (or, for Bedrock, AWS event-stream frames read as events). Below the
//! converters: `canonical` and `translate` use its `Event`, `upstream`
//! reads with it, `stream` relays.

use serde_json::Value;

use super::protocol::Protocol;

/// One server-sent event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Event {
    pub event: Option<String>,
    pub data: String,
}

impl Event {
    pub(crate) fn data(data: impl Into<String>) -> Self {
        Event {
            event: None,
            data: data.into(),
        }
    }

    pub(crate) fn named(event: &str, data: &Value) -> Self {
        Event {
            event: Some(event.into()),
            data: data.to_string(),
        }
    }

    /// The wire form (`event: …\ndata: …\n\n`).
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        if let Some(e) = &self.event {
            out.push_str("event: ");
            out.push_str(e);
            out.push('\n');
        }
        for line in self.data.split('\n') {
            out.push_str("data: ");
            out.push_str(line);
            out.push('\n');
        }
        out.push('\n');
        out
    }
}

/// One event may not grow past this without its blank line: a stream that
/// never ends an event is a broken upstream, not memory to spend.
const MAX_EVENT_BYTES: usize = 16 << 20;

/// Splits a byte stream into events (`text/event-stream`).
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// The events completed by `chunk`.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, String> {
        self.buf
            .extend(chunk.iter().copied().filter(|b| *b != b'\r'));
        let mut out = Vec::new();
        while let Some(end) = memchr::memmem::find(&self.buf, b"\n\n") {
            let block: Vec<u8> = self.buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block[..end]);
            let mut event = None;
            let mut data: Vec<&str> = Vec::new();
            for line in text.split('\n') {
                let (field, value) = match line.split_once(':') {
                    Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                    None => (line, ""),
                };
                match field {
                    "event" => event = Some(value.to_string()),
                    "data" => data.push(value),
                    _ => {}
                }
            }
            if !data.is_empty() {
                out.push(Event {
                    event,
                    data: data.join("\n"),
                });
            }
        }
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(format!(
                "upstream sent an event larger than {} MiB",
                MAX_EVENT_BYTES >> 20
            ));
        }
        Ok(out)
    }
}

/// How an upstream's stream is framed: server-sent events, or AWS
/// event-stream frames (Bedrock's `ConverseStream`), each read into
/// [`Event`]s: a frame's `:event-type` is the event's name and its payload
/// the data; an exception (or error) frame is an `error` event whose data
/// is `{"__type": "ThrottlingException", "message": "…"}` (the exception's
/// name with its first letter raised, as Bedrock's HTTP errors name it),
/// so that it is classified like any other error.
#[derive(Debug)]
pub(crate) enum Framing {
    Sse(SseParser),
    Aws(crate::aws::EventStreamDecoder),
}

impl Framing {
    /// The events completed by `chunk`.
    pub(crate) fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, String> {
        match self {
            Framing::Sse(p) => p.push(chunk),
            Framing::Aws(d) => {
                let messages = d
                    .push(chunk)
                    .map_err(|e| format!("upstream stream was aborted: {e}"))?;
                Ok(messages.into_iter().map(aws_event).collect())
            }
        }
    }
}

/// One event-stream message as an [`Event`] (see [`Framing`]).
fn aws_event(m: crate::aws::EventStreamMessage) -> Event {
    let payload = String::from_utf8_lossy(&m.payload).into_owned();
    if m.message_type == "event" {
        return Event {
            event: m.event_type,
            data: payload,
        };
    }
    let name: String = {
        let raw = m.event_type.unwrap_or_default();
        let mut c = raw.chars();
        match c.next() {
            Some(f) => f.to_ascii_uppercase().to_string() + c.as_str(),
            None => "UnknownException".into(),
        }
    };
    let mut body = match serde_json::from_str::<Value>(&payload) {
        Ok(Value::Object(o)) => o,
        _ => serde_json::Map::new(),
    };
    body.insert("__type".into(), Value::String(name));
    if let Some(msg) = m.error_message {
        body.entry("message").or_insert(Value::String(msg));
    }
    Event {
        event: Some("error".into()),
        data: Value::Object(body).to_string(),
    }
}

/// The failure text of an event whose data is not what either protocol
/// sends (issue 30): a broken stream, like a cut.
pub(crate) const MALFORMED_EVENT: &str =
    "upstream stream was aborted: it sent an event whose data is not JSON";

/// Whether an event's data is not what its protocol sends: every data
/// field of both protocols is one JSON value, but OpenAI's `[DONE]`.
pub(crate) fn is_malformed(e: &Event) -> bool {
    let d = e.data.trim();
    d != "[DONE]" && serde_json::from_str::<serde::de::IgnoredAny>(d).is_err()
}

/// An error event of any protocol: an `error` event or an object with a
/// top-level `error` (OpenAI, Anthropic, Gemini, Responses' `error`
/// event), or a Responses `response.failed`.
pub(crate) fn is_error_event(e: &Event) -> bool {
    if matches!(e.event.as_deref(), Some("error" | "response.failed")) {
        return true;
    }
    e.data.starts_with('{')
        && serde_json::from_str::<Value>(&e.data).is_ok_and(|v| {
            v.get("error").is_some_and(|x| !x.is_null())
                || matches!(
                    v.get("type").and_then(Value::as_str),
                    Some("error" | "response.failed")
                )
        })
}

/// The failure an error event stands for, classified like any other:
/// the event's data is the body, except a Responses `response.failed`,
/// whose `response` (with its `error {code, message}`) is.
pub(crate) fn error_event_failure(e: &Event) -> failover::ProviderFailure {
    let failed = serde_json::from_str::<Value>(&e.data)
        .ok()
        .filter(|v| v.get("type").and_then(Value::as_str) == Some("response.failed"))
        .and_then(|v| v.get("response").cloned());
    let body = match &failed {
        Some(r) => r.to_string(),
        None => e.data.clone(),
    };
    let mut failure = failover::ProviderFailure::default().with_body(body);
    failure.status = error_event_status(e);
    failure
}

/// Whether a Responses event says nothing of the answer yet: the
/// lifecycle's start, a message item or an empty text part being added.
fn responses_preamble(v: &Value) -> bool {
    match v.get("type").and_then(Value::as_str) {
        Some("response.created" | "response.in_progress" | "response.queued") => true,
        Some("response.output_item.added") => {
            v.pointer("/item/type").and_then(Value::as_str) == Some("message")
        }
        Some("response.content_part.added") => v
            .pointer("/part/text")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty),
        _ => false,
    }
}

/// Whether a Gemini chunk says nothing yet: no text, call or finish.
fn gemini_preamble(v: &Value) -> bool {
    if v.pointer("/candidates/0/finishReason")
        .is_some_and(|f| !f.is_null())
        || v.get("promptFeedback").is_some()
    {
        return false;
    }
    v.pointer("/candidates/0/content/parts")
        .and_then(Value::as_array)
        .is_none_or(|parts| {
            parts.iter().all(|p| {
                p.get("functionCall").is_none()
                    && p.get("text")
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty)
            })
        })
}

/// Whether an event says nothing of the answer yet (issue 32,
/// `firstTokenMs`): Anthropic's `message_start`, `ping` and the start of a
/// text or thinking block; an OpenAI chunk whose deltas hold at most a
/// role and empty content, with no finish and no usage. Anything else — a
/// text, tool-call or reasoning delta, a finish, usage — is content.
pub(crate) fn is_preamble(upstream: Protocol, e: &Event) -> bool {
    let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
        return false;
    };
    match upstream {
        Protocol::Responses => responses_preamble(&v),
        Protocol::Gemini => gemini_preamble(&v),
        Protocol::Bedrock => e.event.as_deref() == Some("messageStart"),
        Protocol::Anthropic => match v.get("type").and_then(Value::as_str) {
            Some("message_start" | "ping") => true,
            Some("content_block_start") => {
                let b = v.get("content_block");
                let ty = b.and_then(|b| b.get("type")).and_then(Value::as_str);
                match ty {
                    Some("text") => b
                        .and_then(|b| b.get("text"))
                        .and_then(Value::as_str)
                        .is_none_or(str::is_empty),
                    Some("thinking" | "redacted_thinking") => true,
                    _ => false,
                }
            }
            _ => false,
        },
        Protocol::OpenAi => {
            if v.get("usage").is_some_and(|u| !u.is_null()) {
                return false;
            }
            let Some(choices) = v.get("choices").and_then(Value::as_array) else {
                return false;
            };
            choices.iter().all(|c| {
                c.get("finish_reason").is_none_or(Value::is_null)
                    && c.get("delta").and_then(Value::as_object).is_none_or(|d| {
                        d.iter().all(|(k, v)| match k.as_str() {
                            "role" => true,
                            _ => {
                                v.is_null()
                                    || v.as_str() == Some("")
                                    || v.as_array().is_some_and(Vec::is_empty)
                            }
                        })
                    })
            })
        }
    }
}

/// The HTTP status an error event stands for, when it says.
pub(crate) fn error_event_status(e: &Event) -> Option<u16> {
    let v: Value = serde_json::from_str(&e.data).ok()?;
    // Responses: `error {code, message}` at the top (the `error` event) or
    // under `response` (`response.failed`); codes named, not numbered.
    let responses_code = match v.get("type").and_then(Value::as_str) {
        Some("error") if v.get("error").is_none() => v.get("code"),
        Some("response.failed") => v.pointer("/response/error/code"),
        _ => None,
    };
    // Bedrock's exceptions, by name (their HTTP statuses in the service
    // model); a model stream error carries the model's own status.
    if let Some(t) = v.get("__type").and_then(Value::as_str) {
        return match t {
            "ThrottlingException" | "ModelNotReadyException" => Some(429),
            "ServiceUnavailableException" => Some(503),
            "InternalServerException" => Some(500),
            "ValidationException" => Some(400),
            "ModelTimeoutException" => Some(408),
            "AccessDeniedException" => Some(403),
            "ModelStreamErrorException" | "ModelErrorException" => v
                .get("originalStatusCode")
                .and_then(Value::as_u64)
                .and_then(|n| u16::try_from(n).ok())
                .filter(|s| (400..600).contains(s))
                .or(Some(424)),
            _ => None,
        };
    }
    if let Some(code) = responses_code {
        return match code.as_str()? {
            "rate_limit_exceeded" => Some(429),
            "server_error" => Some(500),
            "insufficient_quota" => Some(429),
            "invalid_prompt" | "invalid_request_error" | "context_length_exceeded" => Some(400),
            _ => None,
        };
    }
    let err = v.get("error")?;
    if let Some(n) = err.get("code").and_then(Value::as_u64) {
        return u16::try_from(n).ok().filter(|s| (100..600).contains(s));
    }
    Some(match err.get("type").and_then(Value::as_str)? {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "authentication_error" => 401,
        "permission_error" => 403,
        "invalid_request_error" => 400,
        "not_found_error" => 404,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_event_that_is_not_json_is_malformed() {
        assert!(is_malformed(&Event::data("{not json")));
        assert!(is_malformed(&Event::data("")));
        assert!(!is_malformed(&Event::data("[DONE]")));
        assert!(!is_malformed(&Event::data(r#"{"choices":[]}"#)));
    }

    // Issue 32 item 3: what counts as the first token.
    #[test]
    fn preambles_are_not_content() {
        let oa = |d: &str| Event::data(d);
        assert!(is_preamble(
            Protocol::OpenAi,
            &oa(
                r#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#
            )
        ));
        assert!(is_preamble(Protocol::OpenAi, &oa(r#"{"choices":[]}"#)));
        for content in [
            r#"{"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"hm"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0}]}}]}"#,
            "[DONE]",
        ] {
            assert!(!is_preamble(Protocol::OpenAi, &oa(content)), "{content}");
        }
        let an = |v: &str| Event::data(v);
        assert!(is_preamble(Protocol::Anthropic, &an(r#"{"type":"ping"}"#)));
        assert!(is_preamble(
            Protocol::Anthropic,
            &an(
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#
            )
        ));
        assert!(!is_preamble(
            Protocol::Anthropic,
            &an(
                r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"f","input":{}}}"#
            )
        ));
        assert!(!is_preamble(
            Protocol::Anthropic,
            &an(
                r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x"}}"#
            )
        ));
    }

    #[test]
    fn parses_events_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.push(b"event: message_start\r\nda").unwrap().is_empty());
        let ev = p
            .push(b"ta: {\"a\":1}\r\n\r\n: comment\n\ndata: [DONE]\n\n")
            .unwrap();
        assert_eq!(
            ev,
            [
                Event {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                },
                Event::data("[DONE]")
            ]
        );
    }
}
