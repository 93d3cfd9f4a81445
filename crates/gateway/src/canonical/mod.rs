//! The canonical form: one typed request, answer and stream-event model
//! that every protocol converts into and out of (hub and spoke, issue 33).
//!
//! Each protocol is a module of its own with its converters:
//!
//! | module | `api` | request | answer | stream |
//! |---|---|---|---|---|
//! | [`openai_chat`] | `openai-completions` | in, out | in, out | in, out |
//! | [`anthropic`] | `anthropic-messages` | in, out | in, out | in, out |
//! | [`responses`] | `openai-responses`, `azure-openai-responses` | in, out | in, out | in, out |
//! | [`gemini`] | `google-generative-ai` | in, out | in, out | in |
//! | [`bedrock`] | `bedrock-converse-stream` | in, out | in, out | in, out |
//!
//! A request field a parser does not know, or a canonical value a renderer
//! cannot say, has no faithful translation: the converter refuses with
//! the field named (`request field `logprobs` has no {to} equivalent`;
//! `{to}` is replaced by the target protocol's name), and the runner
//! skips that candidate. Nothing is silently dropped.
//!
//! What the canonical form carries: the system prompt, messages of two
//! roles whose content is text, images (base64 or URL), tool calls (id,
//! name, JSON input) and tool results (id, text); max tokens,
//! temperature, top_p, stop sequences, stream; tools (name, description,
//! JSON Schema), tool choice, parallel tool calls, the end user's id; an
//! answer's content, stop reason and usage; a stream as
//! [`StreamEvent`]s. Same-protocol calls never come here: the client's
//! body goes upstream with only `model` replaced.

use serde_json::{json, Map, Number, Value};

pub(crate) mod anthropic;
pub(crate) mod bedrock;
pub(crate) mod gemini;
pub(crate) mod openai_chat;
pub(crate) mod responses;

/// Why a request cannot be said in a protocol. `{to}` stands for the
/// target protocol's name (see [`Refusal::for_target`]).
pub(crate) type Refusal = String;

/// `request field `f` has no {to} equivalent`.
pub(crate) fn no_equivalent(field: &str) -> Refusal {
    format!("request field `{}` has no {{to}} equivalent", quoted(field))
}

/// A client's string as a refusal quotes it: at most 64 characters (then
/// `…`), control characters escaped. A refusal never grows with what the
/// client sent (issue 44 item 4: an 8 MiB `role` came back twice).
pub(crate) fn quoted(s: &str) -> String {
    const MAX: usize = 64;
    let mut out: String = s
        .chars()
        .take(MAX)
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect();
    if s.chars().nth(MAX).is_some() {
        out.push('…');
    }
    out
}

/// A refusal with its target named.
pub(crate) fn for_target(r: Refusal, to: &str) -> String {
    r.replace("{to}", to)
}

/// Who said a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Role {
    User,
    Assistant,
}

/// An image, inline or by URL.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Image {
    Base64 { media_type: String, data: String },
    Url(String),
}

impl Image {
    /// A data URL (`data:image/png;base64,…`) or an http(s) URL.
    pub(crate) fn from_url(url: &str) -> Option<Image> {
        if let Some(rest) = url.strip_prefix("data:") {
            let (meta, data) = rest.split_once(',')?;
            let media = meta.strip_suffix(";base64")?;
            return Some(Image::Base64 {
                media_type: media.to_string(),
                data: data.to_string(),
            });
        }
        (url.starts_with("http://") || url.starts_with("https://"))
            .then(|| Image::Url(url.to_string()))
    }

    /// The image as one URL (a data URL when inline).
    pub(crate) fn to_url(&self) -> String {
        match self {
            Image::Base64 { media_type, data } => format!("data:{media_type};base64,{data}"),
            Image::Url(u) => u.clone(),
        }
    }
}

/// One piece of a message's content.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Part {
    Text(String),
    Image(Image),
    /// A call of a tool by the assistant; `input` is the JSON arguments.
    ToolCall {
        id: Option<String>,
        name: Option<String>,
        input: Value,
    },
    /// The result of a tool call, as text. `name` is known to protocols
    /// that match results by name (Gemini).
    ToolResult {
        id: Option<String>,
        name: Option<String>,
        content: String,
    },
}

/// One message.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Message {
    pub role: Role,
    pub content: Vec<Part>,
}

/// A tool the model may call.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Tool {
    pub name: Option<String>,
    pub description: Option<String>,
    /// The JSON Schema of the input; each protocol has its default when
    /// absent.
    pub parameters: Option<Value>,
}

/// Which tool the model must (or must not) call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum ToolChoice {
    Auto,
    /// Some tool (OpenAI `required`, Anthropic `any`).
    Any,
    None,
    /// This tool.
    Tool(Option<String>),
}

/// A request, in no protocol.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Request {
    /// System (and developer) prompts, in order.
    pub system: Vec<String>,
    pub messages: Vec<Message>,
    pub max_tokens: Option<u64>,
    pub temperature: Option<Number>,
    pub top_p: Option<Number>,
    pub stop: Option<Vec<String>>,
    pub stream: Option<bool>,
    pub tools: Option<Vec<Tool>>,
    pub tool_choice: Option<ToolChoice>,
    /// `Some(false)`: at most one tool call per turn.
    pub parallel_tool_calls: Option<bool>,
    /// The end user's id (OpenAI `user`, Anthropic `metadata.user_id`).
    pub user: Option<String>,
}

/// A protocol's names for the sampling fields every protocol has
/// (`temperature` is spelled alike in all). `None`: the converter writes
/// the field itself (Anthropic's required `max_tokens`) or has refused it
/// (Responses has no stop sequences).
pub(crate) struct SamplingNames {
    pub max_tokens: Option<&'static str>,
    pub top_p: &'static str,
    pub stop: Option<&'static str>,
}

impl Request {
    /// Writes max tokens, temperature, top_p and the stop sequences the
    /// request has into `out`, under the protocol's `names`.
    pub(crate) fn put_sampling(&self, out: &mut Map<String, Value>, names: &SamplingNames) {
        if let (Some(name), Some(n)) = (names.max_tokens, self.max_tokens) {
            out.insert(name.into(), json!(n));
        }
        if let Some(t) = &self.temperature {
            out.insert("temperature".into(), Value::Number(t.clone()));
        }
        if let Some(t) = &self.top_p {
            out.insert(names.top_p.into(), Value::Number(t.clone()));
        }
        if let (Some(name), Some(s)) = (names.stop, &self.stop) {
            out.insert(name.into(), json!(s));
        }
    }

    /// Adds blocks to the last message when it has `role`, else a new
    /// message (Anthropic and Bedrock want the roles to alternate).
    pub(crate) fn push_merged(messages: &mut Vec<Message>, role: Role, parts: Vec<Part>) {
        if let Some(last) = messages.last_mut() {
            if last.role == role {
                last.content.extend(parts);
                return;
            }
        }
        messages.push(Message {
            role,
            content: parts,
        });
    }
}

/// Why an answer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) enum StopReason {
    #[default]
    EndTurn,
    MaxTokens,
    ToolUse,
    StopSequence,
    ContentFilter,
}

/// Token counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    pub input: u64,
    pub output: u64,
}

/// A whole answer, in no protocol.
#[derive(Clone, Debug, PartialEq, Default)]
pub(crate) struct Response {
    /// The upstream's id (without any prefix a renderer adds).
    pub id: Option<String>,
    pub model: Option<String>,
    /// Text and tool calls, in order.
    pub content: Vec<Part>,
    pub stop: StopReason,
    pub usage: Usage,
}

impl Response {
    /// The text parts, joined.
    pub(crate) fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// One step of a streamed answer, in no protocol.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum StreamEvent {
    /// The answer began.
    Start {
        id: Option<String>,
        model: Option<String>,
        input_tokens: Option<u64>,
    },
    /// More text.
    Text(String),
    /// A tool call began; `index` numbers the calls of the answer.
    ToolStart {
        index: u64,
        id: Option<String>,
        name: Option<String>,
    },
    /// A fragment of a tool call's JSON arguments.
    ToolArgs { index: u64, fragment: String },
    /// Token counts; `None` leaves a count as it was.
    Usage {
        input: Option<u64>,
        output: Option<u64>,
    },
    /// Why the answer ended (usage may still follow).
    Finish(StopReason),
    /// The end of the stream.
    End,
}

/// The current time, in seconds since the epoch.
pub(crate) fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// A string field.
pub(crate) fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_string)
}

/// A `u64` field.
pub(crate) fn u64_of(v: &Value, pointer: &str) -> Option<u64> {
    v.pointer(pointer).and_then(Value::as_u64)
}

/// An id with a protocol's prefix (`chatcmpl-`, `msg_`, `resp_`): kept
/// when it has it, added when not; `gateway` when there is no id.
pub(crate) fn prefixed(prefix: &str, id: Option<&str>) -> String {
    match id {
        Some(id) if id.starts_with(prefix) => id.to_string(),
        Some(id) => format!("{prefix}{id}"),
        None => format!("{prefix}gateway"),
    }
}

/// `Some(s)` as a JSON string, `None` as `null`.
pub(crate) fn opt(s: &Option<String>) -> Value {
    s.as_ref().map_or(Value::Null, |s| Value::String(s.clone()))
}

#[cfg(test)]
mod proptests;
