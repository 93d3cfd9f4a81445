//! The client protocols: what a request must look like, and the shape
//! of an error in each.
//!
//! `POST /v1/responses` (OpenAI Responses) answers errors in OpenAI's
//! shape, as OpenAI's own Responses endpoint does.
//!
//! Requests are kept as JSON objects (a same-protocol upstream gets the
//! client's body with only `model` replaced, so fields this gateway does
//! not know still reach the provider), after a check of the fields whose
//! shape the gateway relies on. A wrong type is a 400 in the protocol's
//! own error shape:
//!
//! ```text
//! OpenAI     {"error": {"message": "…", "type": "invalid_request_error", "param": null, "code": null}}
//! Anthropic  {"type": "error", "error": {"type": "invalid_request_error", "message": "…"}}
//! ```

use serde_json::{json, Map, Value};

use super::upstreams::Api;

/// The protocol a client speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Protocol {
    /// `POST /v1/chat/completions`.
    OpenAi,
    /// `POST /v1/messages`.
    Anthropic,
    /// `POST /v1/responses` (OpenAI Responses).
    Responses,
    /// Google Gemini's `generateContent`: an upstream protocol only.
    Gemini,
    /// Amazon Bedrock's Converse: an upstream protocol only.
    Bedrock,
}

impl Protocol {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Protocol::OpenAi => "openai",
            Protocol::Anthropic => "anthropic",
            Protocol::Responses => "responses",
            Protocol::Gemini => "gemini",
            Protocol::Bedrock => "bedrock",
        }
    }

    /// The upstream `api` that speaks this protocol.
    pub(crate) fn api(self) -> Api {
        match self {
            Protocol::OpenAi => Api::OpenAiCompletions,
            Protocol::Anthropic => Api::AnthropicMessages,
            Protocol::Responses => Api::OpenAiResponses,
            Protocol::Gemini => Api::GoogleGenerativeAi,
            Protocol::Bedrock => Api::BedrockConverseStream,
        }
    }
}

/// The longest `model` a client may name (bytes): it is copied into the
/// `x-failover-model` header, log lines and metric labels, so a client
/// cannot make them as large as its body (issue 30). Real ids are under
/// 100 bytes (`openrouter/meta-llama/llama-3.1-405b-instruct:free`).
pub(crate) const MAX_MODEL_BYTES: usize = 256;

/// A checked client request.
#[derive(Clone, Debug)]
pub(crate) struct ClientRequest {
    pub protocol: Protocol,
    pub body: Map<String, Value>,
    pub model: String,
    pub stream: bool,
}

/// An error the gateway answers with, in either protocol's shape.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ClientError {
    pub status: u16,
    pub message: String,
    /// An error type from the upstream, passed through when known.
    pub error_type: Option<String>,
    pub code: Option<String>,
    /// Seconds, for `Retry-After`.
    pub retry_after: Option<u64>,
    /// Extra fields under `error.failover` (the attempts of a summary).
    pub detail: Option<Box<Value>>,
}

impl ClientError {
    pub(crate) fn new(status: u16, message: impl Into<String>) -> Self {
        ClientError {
            status,
            message: message.into(),
            error_type: None,
            code: None,
            retry_after: None,
            detail: None,
        }
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, message)
    }

    /// Removes every stored secret from what the client will read (the
    /// last of the redactions, on the final text: R16.11, issue 30).
    pub(crate) fn scrub(&mut self, redactor: &failover::Redactor) {
        if redactor.is_empty() {
            return;
        }
        self.message = redactor.scrub(&self.message).into_owned();
        for t in [&mut self.error_type, &mut self.code].into_iter().flatten() {
            *t = redactor.scrub(t).into_owned();
        }
        if let Some(d) = &mut self.detail {
            redactor.scrub_json(d);
        }
    }

    /// The error body in `protocol`'s shape.
    pub(crate) fn body(&self, protocol: Protocol) -> Value {
        let ty = self
            .error_type
            .clone()
            .unwrap_or_else(|| default_type(protocol, self.status).to_string());
        let mut err = match protocol {
            Protocol::OpenAi | Protocol::Responses | Protocol::Gemini | Protocol::Bedrock => {
                json!({
                    "message": self.message,
                    "type": ty,
                    "param": null,
                    "code": self.code,
                })
            }
            Protocol::Anthropic => json!({ "type": ty, "message": self.message }),
        };
        if let (Some(d), Some(o)) = (&self.detail, err.as_object_mut()) {
            o.insert("failover".into(), (**d).clone());
        }
        match protocol {
            Protocol::Anthropic => json!({ "type": "error", "error": err }),
            _ => json!({ "error": err }),
        }
    }
}

/// The error `type` a protocol's own servers use for a status.
fn default_type(protocol: Protocol, status: u16) -> &'static str {
    match (protocol, status) {
        (Protocol::Anthropic, 401) => "authentication_error",
        (Protocol::Anthropic, 403) => "permission_error",
        (Protocol::Anthropic, 404) => "not_found_error",
        (Protocol::Anthropic, 413) => "request_too_large",
        (Protocol::Anthropic, 429) => "rate_limit_error",
        (Protocol::Anthropic, 529 | 503) => "overloaded_error",
        (Protocol::Anthropic, 400..=499) => "invalid_request_error",
        (Protocol::Anthropic, _) => "api_error",
        (_, 401) => "authentication_error",
        (_, 404) => "not_found_error",
        (_, 429) => "rate_limit_error",
        (_, 400..=499) => "invalid_request_error",
        (_, _) => "server_error",
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

struct Check<'a> {
    body: &'a Map<String, Value>,
}

impl Check<'_> {
    fn wrong(&self, field: &str, expected: &str) -> ClientError {
        let found = self.body.get(field).map_or("nothing", kind);
        ClientError::bad_request(format!("`{field}`: expected {expected}, found {found}"))
    }

    fn opt(
        &self,
        field: &str,
        expected: &str,
        ok: impl Fn(&Value) -> bool,
    ) -> Result<(), ClientError> {
        match self.body.get(field) {
            None | Some(Value::Null) => Ok(()),
            Some(v) if ok(v) => Ok(()),
            Some(_) => Err(self.wrong(field, expected)),
        }
    }
}

fn is_string_list(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(Value::is_string))
}

/// Parses and checks a request body.
/// The most JSON objects and arrays a request body may hold (issue 44
/// item 3): each costs the parsed tree (and every translated copy) far
/// more than its bytes — 541,190 one-word messages in 15.5 MiB took
/// 1.25 GB — while a long agent conversation (thousands of messages with
/// tool calls) holds tens of thousands.
pub(crate) const MAX_CONTAINERS: usize = 100_000;

/// The objects and arrays of a JSON text, counted without parsing it
/// (brackets outside strings); stops counting past `limit`.
fn containers(bytes: &[u8], limit: usize) -> usize {
    let (mut n, mut in_str, mut escaped) = (0usize, false, false);
    for &b in bytes {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'{' | b'[' => {
                n += 1;
                if n > limit {
                    return n;
                }
            }
            _ => {}
        }
    }
    n
}

pub(crate) fn parse_request(
    protocol: Protocol,
    bytes: &[u8],
) -> Result<ClientRequest, ClientError> {
    if containers(bytes, MAX_CONTAINERS) > MAX_CONTAINERS {
        return Err(ClientError::bad_request(format!(
            "the request holds more than {MAX_CONTAINERS} JSON objects and arrays (messages, content parts, tools): the gateway's limit on one request's structure"
        )));
    }
    let value: Value = serde_json::from_slice(bytes).map_err(|e| {
        // serde_json's message gives a position and a category, never
        // the input text.
        ClientError::bad_request(format!("the request body is not valid JSON: {e}"))
    })?;
    let Value::Object(body) = value else {
        return Err(ClientError::bad_request(format!(
            "the request body must be a JSON object, found {}",
            kind(&value)
        )));
    };
    let c = Check { body: &body };
    let model = match body.get("model") {
        Some(Value::String(s)) if s.trim().len() > MAX_MODEL_BYTES => {
            return Err(ClientError::bad_request(format!(
                "`model`: a model name is at most {MAX_MODEL_BYTES} bytes, found {}",
                s.trim().len()
            )))
        }
        Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
        _ => return Err(c.wrong("model", "a model name string")),
    };
    if !matches!(protocol, Protocol::OpenAi | Protocol::Anthropic) {
        return parse_responses(body, model);
    }
    let messages = match body.get("messages") {
        Some(Value::Array(a)) if !a.is_empty() => a,
        Some(Value::Array(_)) => {
            return Err(ClientError::bad_request(
                "`messages`: at least one message is required",
            ))
        }
        _ => return Err(c.wrong("messages", "an array of messages")),
    };
    for (i, m) in messages.iter().enumerate() {
        let Some(obj) = m.as_object() else {
            return Err(ClientError::bad_request(format!(
                "`messages[{i}]`: expected an object, found {}",
                kind(m)
            )));
        };
        if !obj.get("role").is_some_and(Value::is_string) {
            return Err(ClientError::bad_request(format!(
                "`messages[{i}].role`: expected a string"
            )));
        }
        match obj.get("content") {
            None | Some(Value::Null | Value::String(_) | Value::Array(_)) => {}
            Some(other) => {
                return Err(ClientError::bad_request(format!(
                    "`messages[{i}].content`: expected a string or an array of parts, found {}",
                    kind(other)
                )))
            }
        }
    }
    c.opt("stream", "true or false", Value::is_boolean)?;
    c.opt("temperature", "a number", Value::is_number)?;
    c.opt("top_p", "a number", Value::is_number)?;
    c.opt("tools", "an array of tools", Value::is_array)?;
    match protocol {
        Protocol::OpenAi => {
            c.opt("max_tokens", "a whole number", Value::is_u64)?;
            c.opt("max_completion_tokens", "a whole number", Value::is_u64)?;
            c.opt("n", "a whole number", Value::is_u64)?;
            c.opt("stop", "a string or an array of strings", |v| {
                v.is_string() || is_string_list(v)
            })?;
            c.opt("stream_options", "an object", Value::is_object)?;
        }
        Protocol::Responses | Protocol::Gemini | Protocol::Bedrock => {}
        Protocol::Anthropic => {
            if !body.get("max_tokens").is_some_and(Value::is_u64) {
                return Err(c.wrong("max_tokens", "a whole number"));
            }
            c.opt("system", "a string or an array of text blocks", |v| {
                v.is_string() || v.is_array()
            })?;
            c.opt("top_k", "a whole number", Value::is_u64)?;
            c.opt("stop_sequences", "an array of strings", is_string_list)?;
            c.opt("metadata", "an object", Value::is_object)?;
        }
    }
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok(ClientRequest {
        protocol,
        body,
        model,
        stream,
    })
}

/// The checks of a `POST /v1/responses` body: `input` is a string or a
/// non-empty list of items (objects), the rest as for chat completions.
fn parse_responses(body: Map<String, Value>, model: String) -> Result<ClientRequest, ClientError> {
    let c = Check { body: &body };
    match body.get("input") {
        Some(Value::String(_)) => {}
        Some(Value::Array(a)) if !a.is_empty() => {
            for (i, item) in a.iter().enumerate() {
                if !item.is_object() {
                    return Err(ClientError::bad_request(format!(
                        "`input[{i}]`: expected an object, found {}",
                        kind(item)
                    )));
                }
            }
        }
        Some(Value::Array(_)) => {
            return Err(ClientError::bad_request(
                "`input`: at least one input item is required",
            ))
        }
        _ => return Err(c.wrong("input", "a string or an array of input items")),
    }
    c.opt("instructions", "a string", Value::is_string)?;
    c.opt("stream", "true or false", Value::is_boolean)?;
    c.opt("temperature", "a number", Value::is_number)?;
    c.opt("top_p", "a number", Value::is_number)?;
    c.opt("tools", "an array of tools", Value::is_array)?;
    c.opt("max_output_tokens", "a whole number", Value::is_u64)?;
    let stream = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    Ok(ClientRequest {
        protocol: Protocol::Responses,
        body,
        model,
        stream,
    })
}

/// The text and type of an upstream error body, when it has the usual
/// `{"error": {"message", "type"}}` shape (both protocols use it); the
/// runner's own reading, so a summary and a client error agree.
pub(crate) fn upstream_message(body: &str) -> Option<(String, Option<String>)> {
    failover::ProviderFailure::body_message(body)
}

#[cfg(test)]
mod tests {
    // Issue 44 item 3: containers are counted outside strings only, and
    // the count stops at its limit.
    #[test]
    fn i44_3_containers_are_counted_outside_strings() {
        assert_eq!(super::containers(br#"{"a":[1,{"b":"[{\"x"}]}"#, 100), 3);
        assert_eq!(super::containers(br#""{{{[[[""#, 100), 0);
        assert_eq!(super::containers(&b"[".repeat(1000), 10), 11);
    }

    use super::*;

    #[test]
    fn bad_shapes_are_400_in_the_protocol_shape() {
        let e = parse_request(Protocol::OpenAi, b"{\"model\": 3, \"messages\": []}").unwrap_err();
        assert_eq!(e.status, 400);
        assert_eq!(
            e.message,
            "`model`: expected a model name string, found a number"
        );
        let b = e.body(Protocol::OpenAi);
        assert_eq!(b["error"]["type"], "invalid_request_error");
        let b = e.body(Protocol::Anthropic);
        assert_eq!(b["type"], "error");
        assert_eq!(b["error"]["type"], "invalid_request_error");
        let e = parse_request(
            Protocol::OpenAi,
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":"yes"}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.message,
            "`stream`: expected true or false, found a string"
        );
        let e = parse_request(
            Protocol::Anthropic,
            br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#,
        )
        .unwrap_err();
        assert!(e.message.starts_with("`max_tokens`"), "{}", e.message);
        let e = parse_request(Protocol::Anthropic, b"{not json").unwrap_err();
        assert!(e.message.starts_with("the request body is not valid JSON"));
        assert!(parse_request(Protocol::OpenAi, b"[1]").is_err());
    }

    // Issue 30: a model name longer than the bound is refused before any
    // upstream call, in the client's protocol.
    #[test]
    fn a_model_name_is_bounded() {
        let long = "m".repeat(MAX_MODEL_BYTES + 1);
        let body = format!(r#"{{"model":"{long}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        let e = parse_request(Protocol::OpenAi, body.as_bytes()).unwrap_err();
        assert_eq!(e.status, 400);
        assert!(e.message.contains("at most 256 bytes"), "{}", e.message);
        let ok = "m".repeat(MAX_MODEL_BYTES);
        let body = format!(r#"{{"model":"{ok}","messages":[{{"role":"user","content":"hi"}}]}}"#);
        assert!(parse_request(Protocol::OpenAi, body.as_bytes()).is_ok());
    }

    #[test]
    fn good_requests_parse() {
        let r = parse_request(
            Protocol::OpenAi,
            br#"{"model":" openai/gpt ","messages":[{"role":"user","content":"hi"}],"stream":true}"#,
        )
        .unwrap();
        assert_eq!((r.model.as_str(), r.stream), ("openai/gpt", true));
    }
}
