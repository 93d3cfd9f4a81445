//! The input model: what a gateway knows about one provider error, and how
//! structured bodies are read.
//!
//! Providers put the useful parts in different places: OpenAI
//! `{"error":{"message","type","code"}}`, Anthropic
//! `{"type":"error","error":{"type":"overloaded_error","message"}}`, Google
//! `{"error":{"code":429,"message","status":"RESOURCE_EXHAUSTED"}}`,
//! Bedrock `{"message","__type":"…#ThrottlingException"}`, OpenRouter
//! `{"error":{"message":"Provider returned error","code":429,
//! "metadata":{"raw":"…"}}}`. [`extract`] reads all of these into one shape:
//! a numeric `error.code` in 100–599 is an HTTP status, any other code is a
//! code, `error.status` strings are codes, and OpenRouter's
//! `metadata.raw` joins the message text.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// One provider error, as much as the caller knows of it. All fields are
/// optional; borrowed, so building one costs nothing.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProviderError<'a> {
    /// The provider id (`openai`, `anthropic`, …), lower-case; `provider` rules test it.
    pub provider: Option<&'a str>,
    /// The model the call was for; `model` rules test it.
    pub model: Option<&'a str>,
    /// The HTTP status, when there was a response (a transport error has none).
    pub status: Option<u16>,
    /// Error code: `RESOURCE_EXHAUSTED`, `ETIMEDOUT`, `insufficient_quota`.
    pub code: Option<&'a str>,
    /// Error type: `overloaded_error`, `ThrottlingException`.
    pub error_type: Option<&'a str>,
    /// The error's message text (what `message has …` rules read).
    pub message: Option<&'a str>,
    /// The response body: its JSON is read for message, code, type and status.
    pub body: Option<Body<'a>>,
}

/// A response body: raw text (parsed when it is JSON) or parsed JSON.
#[derive(Clone, Copy, Debug)]
pub enum Body<'a> {
    /// A body as received; parsed as JSON when it is JSON.
    Text(&'a str),
    /// A body already parsed.
    Json(&'a Value),
}

impl<'a> ProviderError<'a> {
    /// An error with only a message; add the rest with the `with_` methods.
    pub fn message(message: &'a str) -> Self {
        ProviderError {
            message: Some(message),
            ..Default::default()
        }
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets the provider id.
    pub fn with_provider(mut self, provider: &'a str) -> Self {
        self.provider = Some(provider);
        self
    }

    /// Sets the model.
    pub fn with_model(mut self, model: &'a str) -> Self {
        self.model = Some(model);
        self
    }

    /// Sets the provider's error code (`rate_limit_exceeded`, `insufficient_quota`, …).
    pub fn with_code(mut self, code: &'a str) -> Self {
        self.code = Some(code);
        self
    }

    /// Sets the provider's error type (`invalid_request_error`, `overloaded_error`, …).
    pub fn with_type(mut self, error_type: &'a str) -> Self {
        self.error_type = Some(error_type);
        self
    }

    /// Sets the response body.
    pub fn with_body(mut self, body: Body<'a>) -> Self {
        self.body = Some(body);
        self
    }
}

/// What [`extract`] found in a JSON body.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Extracted<'v> {
    pub message: Option<Cow<'v, str>>,
    /// OpenRouter's upstream text (`error.metadata.raw`).
    pub raw: Option<Cow<'v, str>>,
    pub code: Option<Cow<'v, str>>,
    pub error_type: Option<Cow<'v, str>>,
    pub status: Option<u16>,
}

/// Reads message, code, type and status out of a provider's JSON error body.
/// Bodies of other shapes yield what they have (possibly nothing).
pub(crate) fn extract(v: &Value) -> Extracted<'_> {
    let v = match v {
        Value::Array(items) => match items.first() {
            Some(first) => first,
            None => return Extracted::default(),
        },
        other => other,
    };
    let mut out = Extracted::default();
    let Value::Object(top) = v else {
        return out;
    };
    match top.get("error") {
        Some(Value::Object(e)) => {
            out.message = e.get("message").and_then(Value::as_str).map(Cow::Borrowed);
            out.error_type = e.get("type").and_then(Value::as_str).map(Cow::Borrowed);
            read_code(e.get("code"), &mut out);
            if let Some(s) = e.get("status").and_then(Value::as_str) {
                if out.code.is_none() {
                    out.code = Some(Cow::Borrowed(s));
                }
            }
            out.raw = e
                .get("metadata")
                .and_then(|m| m.get("raw"))
                .and_then(Value::as_str)
                .map(Cow::Borrowed);
        }
        Some(Value::String(s)) => out.message = Some(Cow::Borrowed(s)),
        _ => {}
    }
    if out.message.is_none() {
        out.message = [
            "message",
            "Message",
            "detail",
            "error_message",
            "errorMessage",
        ]
        .iter()
        .find_map(|k| top.get(*k).and_then(Value::as_str))
        .map(Cow::Borrowed);
    }
    if out.error_type.is_none() {
        out.error_type = top
            .get("__type")
            .and_then(Value::as_str)
            .map(|t| t.rsplit('#').next().unwrap_or(t))
            .or_else(|| {
                top.get("type")
                    .and_then(Value::as_str)
                    .filter(|t| *t != "error")
            })
            .map(Cow::Borrowed);
    }
    if out.code.is_none() && out.status.is_none() {
        read_code(top.get("code"), &mut out);
    }
    if out.status.is_none() {
        out.status = top.get("status").and_then(as_status);
    }
    out
}

/// The fields [`extract`] reads, borrowed from a body's text.
#[derive(Deserialize)]
struct TopFields<'a> {
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "Message")]
    message_upper: Option<&'a RawValue>,
    #[serde(borrow, default)]
    detail: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error_message: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "errorMessage")]
    error_message_camel: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "__type")]
    aws_type: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    code: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ErrorFields<'a> {
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "type")]
    kind: Option<&'a RawValue>,
    #[serde(borrow, default)]
    code: Option<&'a RawValue>,
    #[serde(borrow, default)]
    status: Option<&'a RawValue>,
    #[serde(borrow, default)]
    metadata: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct MetadataFields<'a> {
    #[serde(borrow, default)]
    raw: Option<&'a RawValue>,
}

/// [`extract`] straight from a body's text, without building a JSON tree:
/// the fields are read as borrowed slices and only the few that matter are
/// decoded. Returns `None` when the text is not a JSON object this fast
/// path reads exactly as [`extract`] would (arrays, duplicate keys,
/// non-integer codes); the caller then parses the tree.
pub(crate) fn extract_text(text: &str) -> Option<Extracted<'_>> {
    if !text.trim_start().starts_with('{') {
        return None;
    }
    let top: TopFields = serde_json::from_str(text).ok()?;
    let mut out = Extracted::default();
    match top.error.map(|e| (e, e.get().as_bytes()[0])) {
        Some((e, b'{')) => {
            let e: ErrorFields = serde_json::from_str(e.get()).ok()?;
            out.message = e.message.and_then(raw_str);
            out.error_type = e.kind.and_then(raw_str);
            read_raw_code(e.code, &mut out)?;
            if let Some(s) = e.status.and_then(raw_str) {
                if out.code.is_none() {
                    out.code = Some(s);
                }
            }
            if let Some(m) = e.metadata.filter(|m| m.get().starts_with('{')) {
                let m: MetadataFields = serde_json::from_str(m.get()).ok()?;
                out.raw = m.raw.and_then(raw_str);
            }
        }
        Some((e, b'"')) => out.message = raw_str(e),
        _ => {}
    }
    if out.message.is_none() {
        out.message = [
            top.message,
            top.message_upper,
            top.detail,
            top.error_message,
            top.error_message_camel,
        ]
        .into_iter()
        .flatten()
        .find_map(raw_str);
    }
    if out.error_type.is_none() {
        out.error_type = match top.aws_type.and_then(raw_str) {
            Some(Cow::Borrowed(t)) => Some(Cow::Borrowed(t.rsplit('#').next().unwrap_or(t))),
            Some(Cow::Owned(t)) => Some(Cow::Owned(t.rsplit('#').next().unwrap_or(&t).to_string())),
            None => top.kind.and_then(raw_str).filter(|t| t != "error"),
        };
    }
    if out.code.is_none() && out.status.is_none() {
        read_raw_code(top.code, &mut out)?;
    }
    if out.status.is_none() {
        out.status = match top.status {
            Some(raw) if raw.get().starts_with('"') => raw_str(raw)?.parse::<u16>().ok(),
            Some(raw) => plain_integer(raw.get()).and_then(|n| u16::try_from(n).ok()),
            None => None,
        }
        .filter(|s| (100..=599).contains(s));
    }
    Some(out)
}

/// A JSON string value, decoded (borrowed when it has no escapes).
fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    let text = raw.get();
    if !text.starts_with('"') {
        return None;
    }
    match serde_json::from_str::<&str>(text) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(text).ok().map(Cow::Owned),
    }
}

/// A JSON number written as a plain non-negative integer.
fn plain_integer(text: &str) -> Option<u64> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse().ok())
        .flatten()
}

/// Like `read_code`; `None` when the code is a number this path does not
/// read exactly as `serde_json` would print it (negative, fraction, exponent).
fn read_raw_code<'v>(code: Option<&'v RawValue>, out: &mut Extracted<'v>) -> Option<()> {
    let Some(raw) = code else { return Some(()) };
    let text = raw.get();
    match text.as_bytes()[0] {
        b'"' => {
            if let Some(s) = raw_str(raw).filter(|s| !s.is_empty()) {
                out.code = Some(s);
            }
        }
        b'0'..=b'9' | b'-' => match plain_integer(text)? {
            s @ 100..=599 => out.status = Some(s as u16),
            // As serde_json prints it: the digits as written.
            _ => out.code = Some(Cow::Borrowed(text)),
        },
        _ => {}
    }
    Some(())
}

fn read_code<'v>(code: Option<&'v Value>, out: &mut Extracted<'v>) {
    match code {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(s @ 100..=599) => out.status = Some(s as u16),
            _ => out.code = Some(Cow::Owned(n.to_string())),
        },
        Some(Value::String(s)) if !s.is_empty() => out.code = Some(Cow::Borrowed(s)),
        _ => {}
    }
}

fn as_status(v: &Value) -> Option<u16> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .filter(|s| (100..=599).contains(s))
            .map(|s| s as u16),
        Value::String(s) => s.parse::<u16>().ok().filter(|s| (100..=599).contains(s)),
        _ => None,
    }
}

/// A leading HTTP status in an error text: `HTTP 429: …`, `429 Too Many
/// Requests`, `Error: 503 …`, `http 500` (REFERENCE a.4 step 1). Returns the
/// status and the rest of the text.
///
/// A bare number followed by ordinary words (`402 records processed`) is
/// not a status: without an `HTTP` or `Error:` prefix or a colon after the
/// number, the rest must start like an error does — a capital letter, a
/// JSON or HTML body, punctuation — or with a word of an HTTP reason
/// phrase (`429 too many requests`).
pub(crate) fn leading_status(text: &str) -> Option<(u16, &str)> {
    let mut s = text.trim_start();
    let mut marked = false;
    if let Some(rest) = strip_prefix_ci(s, "error") {
        if let Some(rest) = rest.trim_start().strip_prefix(':') {
            s = rest.trim_start();
            marked = true;
        }
    }
    if let Some(rest) = strip_prefix_ci(s, "http") {
        s = rest.trim_start();
        marked = true;
    }
    let b = s.as_bytes();
    if b.len() < 3 || !b[..3].iter().all(u8::is_ascii_digit) {
        return None;
    }
    let rest = &s[3..];
    let next = rest.as_bytes().first();
    if !matches!(next, None | Some(b':' | b' ' | b'\t' | b'\n' | b'\r')) {
        return None;
    }
    let status: u16 = s[..3].parse().ok()?;
    if !(100..=599).contains(&status) {
        return None;
    }
    let rest = rest.trim_start();
    let colon = rest.starts_with(':');
    let rest = rest.strip_prefix(':').unwrap_or(rest).trim_start();
    if !(marked || colon || looks_like_error_text(rest)) {
        return None;
    }
    Some((status, rest))
}

/// Words that start an HTTP reason phrase or an error text written in
/// lower case after a bare status (`503 service unavailable`).
const REASON_WORDS: &[&str] = &[
    "access",
    "account",
    "an",
    "api",
    "authentication",
    "bad",
    "billing",
    "conflict",
    "context",
    "credit",
    "deadline",
    "denied",
    "error",
    "exceeded",
    "failed",
    "failure",
    "file",
    "forbidden",
    "gateway",
    "gone",
    "insufficient",
    "internal",
    "invalid",
    "key",
    "limit",
    "method",
    "missing",
    "model",
    "no",
    "not",
    "overloaded",
    "page",
    "payment",
    "permission",
    "prompt",
    "quota",
    "rate",
    "request",
    "resource",
    "route",
    "server",
    "service",
    "status",
    "the",
    "timed",
    "timeout",
    "too",
    "unauthorized",
    "unavailable",
    "unprocessable",
    "upstream",
    "url",
];

fn looks_like_error_text(rest: &str) -> bool {
    let Some(&first) = rest.as_bytes().first() else {
        return true;
    };
    if !first.is_ascii_lowercase() {
        // A capital, a body (`{`, `[`, `<`), a quote, punctuation or a
        // non-ASCII letter (`503 服务器繁忙`).
        return !first.is_ascii_digit();
    }
    let word = rest
        .split(|c: char| !c.is_ascii_alphabetic())
        .next()
        .unwrap_or("");
    REASON_WORDS.contains(&word)
}

fn strip_prefix_ci<'s>(s: &'s str, prefix: &str) -> Option<&'s str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn leading_status_forms() {
        assert_eq!(
            leading_status("HTTP 429: slow down"),
            Some((429, "slow down"))
        );
        assert_eq!(
            leading_status("429 Too Many Requests"),
            Some((429, "Too Many Requests"))
        );
        assert_eq!(
            leading_status("Error: 503 upstream"),
            Some((503, "upstream"))
        );
        assert_eq!(leading_status("http500"), Some((500, "")));
        assert_eq!(leading_status("4290 tokens"), None);
        assert_eq!(leading_status("the 429 was echoed"), None);
        assert_eq!(leading_status("999 nope"), None);
        // Issue 11 family 7: a count at the start of ordinary text is not
        // a status; reason phrases, bodies and marked statuses are.
        assert_eq!(leading_status("402 records processed"), None);
        assert_eq!(leading_status("500 tokens were generated"), None);
        assert_eq!(
            leading_status("429 too many requests"),
            Some((429, "too many requests"))
        );
        assert_eq!(
            leading_status("503 - 服务器繁忙"),
            Some((503, "- 服务器繁忙"))
        );
        assert_eq!(
            leading_status("400 {\"error\":1}"),
            Some((400, "{\"error\":1}"))
        );
        assert_eq!(leading_status("402: records"), Some((402, "records")));
        assert_eq!(leading_status("HTTP 402 records"), Some((402, "records")));
        assert_eq!(leading_status("500"), Some((500, "")));
    }

    /// The fast path reads exactly what the tree path reads, or declines.
    #[test]
    fn extract_text_agrees_with_extract() {
        let bodies = [
            r#"{"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}}"#,
            r#"{"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}}"#,
            r#"{"error": {"message": "Provider returned error", "code": 429, "metadata": {"raw": "rate limited \"upstream\"", "provider_name": "x"}}}"#,
            r#"{"error": {"code": 1311, "message": "套餐"}}"#,
            r#"{"error": {"code": "1113", "message": "a\nb"}}"#,
            r#"{"message": "Rate exceeded", "__type": "com.amazon.coral.service#ThrottlingException"}"#,
            r#"{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}"#,
            r#"{"error": "Unauthorized", "status": 401}"#,
            r#"{"detail": "Not found", "status": "404"}"#,
            r#"{"detail": {"code": "deactivated_workspace"}}"#,
            r#"{"Message": "User is not authorized", "code": -5}"#,
            r#"{"message": null, "errorMessage": "boom", "code": 7.5}"#,
            r#"{"error": 5, "type": "error"}"#,
            r#"{"error": {"message": 12, "metadata": [1]}, "status": 999}"#,
            r#"{"message": "a", "message": "b"}"#,
            r#"[{"error": {"code": 429, "message": "x"}}]"#,
            // A code inside the error: the top level's is not read.
            r#"{"error": {"message": "m", "code": "invalid_key"}, "code": 503}"#,
            // An empty code is no code.
            r#"{"error": {"message": "m", "code": ""}}"#,
            r#"{}"#,
        ];
        let mut fast = 0;
        for body in bodies {
            let tree: Value = serde_json::from_str(body).unwrap();
            let want = extract(&tree);
            if let Some(got) = extract_text(body) {
                assert_eq!(got, want, "{body}");
                fast += 1;
            }
        }
        assert!(fast >= 13, "the fast path declined too often: {fast}");
        // And the two cases above, as values.
        let e = extract_text(r#"{"error": {"message": "m", "code": "invalid_key"}, "code": 503}"#)
            .unwrap();
        assert_eq!((e.code.as_deref(), e.status), (Some("invalid_key"), None));
        let empty = json!({"error": {"message": "m", "code": ""}});
        let e = extract(&empty);
        assert_eq!((e.code.as_deref(), e.status), (None, None));
    }

    #[test]
    fn openai_shape() {
        let v = json!({"error": {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": "insufficient_quota"}});
        let e = extract(&v);
        assert_eq!(
            e.message.as_deref(),
            Some("You exceeded your current quota")
        );
        assert_eq!(e.error_type.as_deref(), Some("insufficient_quota"));
        assert_eq!(e.code.as_deref(), Some("insufficient_quota"));
    }

    #[test]
    fn google_shape_numeric_code_is_status() {
        let v = json!({"error": {"code": 429, "message": "Resource has been exhausted", "status": "RESOURCE_EXHAUSTED"}});
        let e = extract(&v);
        assert_eq!(e.status, Some(429));
        assert_eq!(e.code.as_deref(), Some("RESOURCE_EXHAUSTED"));
    }

    #[test]
    fn openrouter_raw_and_zai_code() {
        let v = json!({"error": {"message": "Provider returned error", "code": 429, "metadata": {"raw": "rate limited upstream"}}});
        assert_eq!(extract(&v).raw.as_deref(), Some("rate limited upstream"));
        let z = json!({"error": {"code": 1311, "message": "套餐"}});
        assert_eq!(extract(&z).code.as_deref(), Some("1311"));
    }

    #[test]
    fn bedrock_and_wrong_shapes() {
        let v = json!({"message": "Rate exceeded", "__type": "com.amazon.coral.service#ThrottlingException"});
        let e = extract(&v);
        assert_eq!(e.error_type.as_deref(), Some("ThrottlingException"));
        assert_eq!(e.message.as_deref(), Some("Rate exceeded"));
        assert_eq!(extract(&json!([1, 2])), Extracted::default());
        assert_eq!(extract(&json!("text")), Extracted::default());
        assert_eq!(extract(&json!({"error": 5})), Extracted::default());
    }
}
