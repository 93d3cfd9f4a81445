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

/// Splits a byte stream into events (`text/event-stream`), to the letter
/// of the HTML standard's grammar: lines end with CRLF, LF or CR (a CRLF
/// split across two chunks is one line end); a blank line ends an event;
/// `:` starts a comment; a field without a colon has an empty value; one
/// space after the colon is dropped; `data` lines join with LF; a leading
/// byte-order mark is skipped. An event with no `data` line is not
/// dispatched. Each byte is looked at once (a line's end is found with
/// `memchr`), whatever the chunking.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    /// The line under way (bytes after the last line end).
    line: Vec<u8>,
    /// The last chunk ended with CR: an LF first in the next is its pair.
    after_cr: bool,
    /// The stream's first bytes were looked at for a byte-order mark.
    started: bool,
    /// The event under way: its name and its data lines, joined.
    event: Option<String>,
    data: Option<String>,
    /// Bytes of the event under way (its lines so far and the line under
    /// way), bounded by [`MAX_EVENT_BYTES`].
    held: usize,
}

impl SseParser {
    /// The events completed by `chunk`.
    pub(crate) fn push(&mut self, mut chunk: &[u8]) -> Result<Vec<Event>, String> {
        let mut out = Vec::new();
        if self.after_cr && !chunk.is_empty() {
            self.after_cr = false;
            if chunk[0] == b'\n' {
                chunk = &chunk[1..];
            }
        }
        while let Some(i) = memchr::memchr2(b'\n', b'\r', chunk) {
            let end = chunk[i];
            if self.line.is_empty() {
                self.line_done(&chunk[..i], &mut out);
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&chunk[..i]);
                self.line_done(&line, &mut out);
                line.clear();
                self.line = line;
            }
            chunk = &chunk[i + 1..];
            if end == b'\r' {
                match chunk.first() {
                    Some(b'\n') => chunk = &chunk[1..],
                    Some(_) => {}
                    None => self.after_cr = true,
                }
            }
        }
        self.line.extend_from_slice(chunk);
        if self.held + self.line.len() > MAX_EVENT_BYTES {
            return Err(format!(
                "upstream sent an event larger than {} MiB",
                MAX_EVENT_BYTES >> 20
            ));
        }
        Ok(out)
    }

    /// Bytes held for the event under way (its lines and the line under
    /// way), charged to the gateway's budget by the relay.
    pub(crate) fn buffered(&self) -> usize {
        self.line.len()
            + self.data.as_ref().map_or(0, String::len)
            + self.event.as_ref().map_or(0, String::len)
    }

    /// One whole line (without its end).
    fn line_done(&mut self, mut line: &[u8], out: &mut Vec<Event>) {
        if !self.started {
            self.started = true;
            line = line.strip_prefix(b"\xEF\xBB\xBF").unwrap_or(line);
        }
        if line.is_empty() {
            self.held = 0;
            let event = self.event.take();
            if let Some(data) = self.data.take() {
                out.push(Event { event, data });
            }
            return;
        }
        if line[0] == b':' {
            return;
        }
        self.held += line.len() + 1;
        let (field, value) = match memchr::memchr(b':', line) {
            Some(c) => {
                let v = &line[c + 1..];
                (&line[..c], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"data" => {
                let value = String::from_utf8_lossy(value);
                match &mut self.data {
                    Some(d) => {
                        d.push('\n');
                        d.push_str(&value);
                    }
                    None => self.data = Some(value.into_owned()),
                }
            }
            _ => {}
        }
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
    /// Bytes held for an event not yet whole.
    pub(crate) fn buffered(&self) -> usize {
        match self {
            Framing::Sse(p) => p.buffered(),
            Framing::Aws(d) => d.buffered(),
        }
    }

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

    // Issue 44 item 10: CR, LF and CRLF line ends, mixed, split anywhere;
    // comments, multi-line data, fields without a colon, a BOM.
    #[test]
    fn sse_line_ends_to_the_letter() {
        let want = vec![
            Event {
                event: Some("message_start".into()),
                data: "{\"a\":1}".into(),
            },
            Event::data("line one\nline two"),
            Event::data(""),
            Event::data("[DONE]"),
        ];
        let streams: [&[u8]; 4] = [
            b"\xEF\xBB\xBFevent: message_start\ndata: {\"a\":1}\n\n: c\n\ndata: line one\ndata:line two\n\ndata\n\ndata: [DONE]\n\n",
            b"event: message_start\rdata: {\"a\":1}\r\r: c\r\rdata: line one\rdata:line two\r\rdata\r\rdata: [DONE]\r\r",
            b"event: message_start\r\ndata: {\"a\":1}\r\n\r\n: c\r\n\r\ndata: line one\r\ndata:line two\r\n\r\ndata\r\n\r\ndata: [DONE]\r\n\r\n",
            b"event: message_start\r\ndata: {\"a\":1}\r\n\n: c\r\rdata: line one\ndata:line two\r\n\rdata\n\r\ndata: [DONE]\r\n\r",
        ];
        for bytes in streams {
            // Whole, and in every split into two chunks, and byte by byte.
            let mut p = SseParser::default();
            assert_eq!(
                p.push(bytes).unwrap(),
                want,
                "{}",
                String::from_utf8_lossy(bytes)
            );
            for cut in 0..=bytes.len() {
                let mut p = SseParser::default();
                let mut got = p.push(&bytes[..cut]).unwrap();
                got.extend(p.push(&bytes[cut..]).unwrap());
                assert_eq!(
                    got,
                    want,
                    "cut at {cut}: {}",
                    String::from_utf8_lossy(bytes)
                );
            }
            let mut p = SseParser::default();
            let mut got = Vec::new();
            for b in bytes {
                got.extend(p.push(std::slice::from_ref(b)).unwrap());
            }
            assert_eq!(got, want);
        }
        // An event with no data is not dispatched; a BOM is skipped only
        // first in the stream (later, it is part of a field's name).
        let mut p = SseParser::default();
        assert!(p.push(b"event: ping\n\n").unwrap().is_empty());
        assert!(p.push(b"\xEF\xBB\xBFdata: x\n\n").unwrap().is_empty());
    }

    #[test]
    fn an_event_that_never_ends_is_bounded() {
        let mut p = SseParser::default();
        let line = vec![b'x'; 1 << 20];
        let mut failed = false;
        for _ in 0..20 {
            p.push(b"data: ").unwrap();
            if p.push(&line).is_err() || p.push(b"\n").is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed, "an unfinished event grew past the bound");
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
