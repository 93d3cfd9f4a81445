//! OpenAI Chat Completions (`openai-completions`): `POST
//! {baseUrl}/chat/completions`, `data:` chunks ending in `data: [DONE]`.

use std::collections::HashSet;

use serde_json::{json, Map, Value};

use super::{
    no_equivalent, now_secs, opt, prefixed, str_of, Image, Message, Part, Refusal, Request,
    Response, Role, SamplingNames, StopReason, StreamEvent, Tool, ToolChoice, Usage,
};
use crate::sse::Event;

/// The protocol's name in refusals.
pub(crate) const NAME: &str = "OpenAI Chat Completions";

// ---- request in ------------------------------------------------------------

/// A client's Chat Completions body, in canonical form.
pub(crate) fn request_in(body: &Map<String, Value>) -> Result<Request, Refusal> {
    let mut r = Request::default();
    for (k, v) in body {
        match k.as_str() {
            "model" | "messages" | "stream_options" => {}
            "max_tokens" | "max_completion_tokens" => r.max_tokens = v.as_u64(),
            "temperature" => r.temperature = v.as_number().cloned(),
            "top_p" => r.top_p = v.as_number().cloned(),
            "stream" => r.stream = v.as_bool(),
            "stop" => {
                let list = match v {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(a) => a
                        .iter()
                        .map(|s| s.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| no_equivalent("stop"))?,
                    Value::Null => continue,
                    _ => return Err(no_equivalent("stop")),
                };
                r.stop = Some(list);
            }
            "n" if v.as_u64() == Some(1) => {}
            "user" => match v.as_str() {
                Some(u) => r.user = Some(u.to_string()),
                None => return Err(no_equivalent("user")),
            },
            "tools" => {
                let mut tools = Vec::new();
                for t in v.as_array().into_iter().flatten() {
                    let f = t
                        .get("function")
                        .filter(|_| t.get("type").and_then(Value::as_str) == Some("function"))
                        .ok_or_else(|| "a tool that is not a `function` tool".to_string())?;
                    tools.push(Tool {
                        name: str_of(f, "name"),
                        description: str_of(f, "description"),
                        parameters: f.get("parameters").cloned(),
                    });
                }
                r.tools = Some(tools);
            }
            "tool_choice" => {
                r.tool_choice = Some(match v {
                    Value::String(s) if s == "auto" => ToolChoice::Auto,
                    Value::String(s) if s == "required" => ToolChoice::Any,
                    Value::String(s) if s == "none" => ToolChoice::None,
                    Value::Object(o) => match o.get("function").and_then(|f| f.get("name")) {
                        Some(n) => ToolChoice::Tool(n.as_str().map(str::to_string)),
                        None => return Err(no_equivalent("tool_choice")),
                    },
                    _ => return Err(no_equivalent("tool_choice")),
                });
            }
            "parallel_tool_calls" => {
                if v.as_bool() == Some(false) {
                    r.parallel_tool_calls = Some(false);
                }
            }
            _ if v.is_null() => {}
            other => return Err(no_equivalent(other)),
        }
    }
    for (i, m) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "system" | "developer" => r.system.push(text_of_content(m.get("content"), i)?),
            "user" => r.messages.push(Message {
                role: Role::User,
                content: parts_in(m.get("content"), i)?,
            }),
            "assistant" => {
                let mut parts = match m.get("content") {
                    None | Some(Value::Null) => Vec::new(),
                    c => parts_in(c, i)?,
                };
                for call in m
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let f = call.get("function").cloned().unwrap_or(Value::Null);
                    let args = f.get("arguments").and_then(Value::as_str).unwrap_or("{}");
                    let input: Value = serde_json::from_str(args).map_err(|_| {
                        format!("`messages[{i}].tool_calls`: arguments are not a JSON object")
                    })?;
                    parts.push(Part::ToolCall {
                        id: str_of(call, "id"),
                        name: str_of(&f, "name"),
                        input,
                    });
                }
                r.messages.push(Message {
                    role: Role::Assistant,
                    content: parts,
                });
            }
            "tool" => {
                let content = text_of_content(m.get("content"), i)?;
                r.messages.push(Message {
                    role: Role::User,
                    content: vec![Part::ToolResult {
                        id: str_of(m, "tool_call_id"),
                        name: None,
                        content,
                    }],
                });
            }
            other => {
                return Err(format!(
                    "message role `{}` has no {{to}} equivalent",
                    super::quoted(other)
                ))
            }
        }
    }
    Ok(r)
}

fn text_of_content(c: Option<&Value>, i: usize) -> Result<String, Refusal> {
    match c {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for p in parts {
                match p.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        out.push_str(p.get("text").and_then(Value::as_str).unwrap_or(""))
                    }
                    other => {
                        return Err(format!(
                            "`messages[{i}]`: content part `{}` cannot be translated here",
                            other.unwrap_or("?")
                        ))
                    }
                }
            }
            Ok(out)
        }
        Some(_) => Err(format!("`messages[{i}].content` has an unknown shape")),
    }
}

fn parts_in(c: Option<&Value>, i: usize) -> Result<Vec<Part>, Refusal> {
    match c {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![Part::Text(s.clone())]),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => Ok(Part::Text(
                    p.get("text").and_then(Value::as_str).unwrap_or("").to_string(),
                )),
                Some("image_url") => {
                    let url = p
                        .get("image_url")
                        .and_then(|u| u.get("url").or(Some(u)))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    Image::from_url(url).map(Part::Image).ok_or_else(|| {
                        format!(
                            "`messages[{i}]`: an image that is neither a data URL nor an http(s) URL"
                        )
                    })
                }
                other => Err(format!(
                    "`messages[{i}]`: content part `{}` has no {{to}} equivalent",
                    other.unwrap_or("?")
                )),
            })
            .collect(),
        Some(_) => Err(format!("`messages[{i}].content` has an unknown shape")),
    }
}

// ---- request out -----------------------------------------------------------

/// A canonical request as a Chat Completions body (without `model`).
pub(crate) fn request_out(r: &Request) -> Result<Map<String, Value>, Refusal> {
    let mut out = Map::new();
    r.put_sampling(
        &mut out,
        &SamplingNames {
            max_tokens: Some("max_tokens"),
            top_p: "top_p",
            stop: Some("stop"),
        },
    );
    if let Some(s) = r.stream {
        out.insert("stream".into(), Value::Bool(s));
        if s {
            out.insert("stream_options".into(), json!({"include_usage": true}));
        }
    }
    if let Some(u) = &r.user {
        out.insert("user".into(), json!(u));
    }
    if let Some(tools) = &r.tools {
        let list: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                f.insert("name".into(), opt(&t.name));
                if let Some(d) = &t.description {
                    f.insert("description".into(), json!(d));
                }
                f.insert(
                    "parameters".into(),
                    t.parameters.clone().unwrap_or(json!({"type": "object"})),
                );
                json!({"type": "function", "function": f})
            })
            .collect();
        out.insert("tools".into(), Value::Array(list));
    }
    if let Some(c) = &r.tool_choice {
        out.insert(
            "tool_choice".into(),
            match c {
                ToolChoice::Auto => json!("auto"),
                ToolChoice::Any => json!("required"),
                ToolChoice::None => json!("none"),
                ToolChoice::Tool(n) => json!({"type": "function", "function": {"name": opt(n)}}),
            },
        );
    }
    if r.parallel_tool_calls == Some(false) {
        out.insert("parallel_tool_calls".into(), Value::Bool(false));
    }
    let mut messages = Vec::new();
    if !r.system.is_empty() {
        messages.push(json!({"role": "system", "content": r.system.join("\n\n")}));
    }
    for m in &r.messages {
        match m.role {
            Role::User => {
                let mut parts = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => parts.push(json!({"type": "text", "text": t})),
                        Part::Image(img) => parts
                            .push(json!({"type": "image_url", "image_url": {"url": img.to_url()}})),
                        Part::ToolResult { id, content, .. } => messages.push(json!({
                            "role": "tool",
                            "tool_call_id": opt(id),
                            "content": content,
                        })),
                        Part::ToolCall { .. } => {
                            return Err("a tool call in a user turn has no {to} equivalent".into())
                        }
                    }
                }
                if !parts.is_empty() {
                    let all_text = parts.iter().all(|p| p["type"] == "text");
                    let content = if all_text {
                        Value::String(
                            parts
                                .iter()
                                .filter_map(|p| p["text"].as_str())
                                .collect::<Vec<_>>()
                                .join(""),
                        )
                    } else {
                        Value::Array(parts)
                    };
                    messages.push(json!({"role": "user", "content": content}));
                }
            }
            Role::Assistant => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => text.push_str(t),
                        Part::ToolCall { id, name, input } => calls.push(json!({
                            "id": opt(id),
                            "type": "function",
                            "function": {"name": opt(name), "arguments": input.to_string()},
                        })),
                        Part::Image(_) => {
                            return Err(
                                "an image in an assistant turn has no {to} equivalent".into()
                            )
                        }
                        Part::ToolResult { .. } => {
                            return Err(
                                "a tool result in an assistant turn has no {to} equivalent".into()
                            )
                        }
                    }
                }
                let content = if text.is_empty() && !calls.is_empty() {
                    Value::Null
                } else {
                    Value::String(text)
                };
                let mut msg = json!({"role": "assistant", "content": content});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
        }
    }
    out.insert("messages".into(), Value::Array(messages));
    Ok(out)
}

// ---- answers ---------------------------------------------------------------

fn finish_in(finish: Option<&str>) -> StopReason {
    match finish {
        Some("length") => StopReason::MaxTokens,
        Some("tool_calls" | "function_call") => StopReason::ToolUse,
        Some("content_filter") => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

pub(crate) fn finish_out(stop: StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens => "length",
        StopReason::ToolUse => "tool_calls",
        StopReason::ContentFilter => "content_filter",
        StopReason::EndTurn | StopReason::StopSequence => "stop",
    }
}

/// A whole answer, in canonical form.
pub(crate) fn response_in(v: &Value) -> Response {
    let choice = v.pointer("/choices/0").cloned().unwrap_or(Value::Null);
    let msg = choice.get("message").cloned().unwrap_or(Value::Null);
    let mut content = Vec::new();
    if let Some(t) = msg.get("content").and_then(Value::as_str) {
        if !t.is_empty() {
            content.push(Part::Text(t.to_string()));
        }
    }
    for c in msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let args = c
            .pointer("/function/arguments")
            .and_then(Value::as_str)
            .unwrap_or("{}");
        content.push(Part::ToolCall {
            id: str_of(c, "id"),
            name: c
                .pointer("/function/name")
                .and_then(Value::as_str)
                .map(str::to_string),
            input: serde_json::from_str::<Value>(args).unwrap_or_else(|_| json!({})),
        });
    }
    Response {
        id: str_of(v, "id"),
        model: str_of(v, "model"),
        content,
        stop: finish_in(choice.get("finish_reason").and_then(Value::as_str)),
        usage: Usage {
            input: super::u64_of(v, "/usage/prompt_tokens").unwrap_or(0),
            output: super::u64_of(v, "/usage/completion_tokens").unwrap_or(0),
        },
    }
}

/// A canonical answer as a Chat Completions answer.
pub(crate) fn response_out(r: &Response) -> Value {
    let mut calls = Vec::new();
    for p in &r.content {
        if let Part::ToolCall { id, name, input } = p {
            calls.push(json!({
                "id": opt(id),
                "type": "function",
                "function": {"name": opt(name), "arguments": input.to_string()},
            }));
        }
    }
    let mut message = json!({"role": "assistant", "content": r.text()});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    let (input, output) = (r.usage.input, r.usage.output);
    json!({
        "id": prefixed("chatcmpl-", r.id.as_deref()),
        "object": "chat.completion",
        "created": now_secs(),
        "model": opt(&r.model),
        "choices": [{"index": 0, "message": message, "finish_reason": finish_out(r.stop)}],
        "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input.saturating_add(output)},
    })
}

// ---- streams ---------------------------------------------------------------

/// Chat Completions chunks → canonical events.
#[derive(Debug, Default)]
pub(crate) struct StreamIn {
    started: bool,
    tools: HashSet<u64>,
}

impl StreamIn {
    pub(crate) fn push(&mut self, e: &Event) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if e.data.trim() == "[DONE]" {
            out.push(StreamEvent::End);
            return out;
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return out;
        };
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: str_of(&v, "id"),
                model: str_of(&v, "model"),
                input_tokens: None,
            });
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            out.push(StreamEvent::Usage {
                input: Some(u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0)),
                output: Some(
                    u.get("completion_tokens")
                        .and_then(Value::as_u64)
                        .unwrap_or(0),
                ),
            });
        }
        let Some(choice) = v.pointer("/choices/0") else {
            return out;
        };
        let delta = choice.get("delta").cloned().unwrap_or(Value::Null);
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            out.push(StreamEvent::Text(t.to_string()));
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let k = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            if self.tools.insert(k) {
                out.push(StreamEvent::ToolStart {
                    index: k,
                    id: str_of(call, "id"),
                    name: call
                        .pointer("/function/name")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                });
            }
            if let Some(a) = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
            {
                out.push(StreamEvent::ToolArgs {
                    index: k,
                    fragment: a.to_string(),
                });
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            out.push(StreamEvent::Finish(finish_in(Some(f))));
        }
        out
    }
}

/// Canonical events → Chat Completions chunks.
#[derive(Debug, Default)]
pub(crate) struct StreamOut {
    include_usage: bool,
    id: String,
    model: Option<String>,
    created: u64,
    /// Canonical tool index → OpenAI tool-call index.
    tools: std::collections::HashMap<u64, u64>,
    input_tokens: u64,
    output_tokens: u64,
    ended: bool,
}

impl StreamOut {
    /// A renderer; `include_usage`: the client asked for the usage chunk.
    pub(crate) fn new(include_usage: bool) -> Self {
        StreamOut {
            include_usage,
            ..Default::default()
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        Event::data(
            json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": opt(&self.model),
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            })
            .to_string(),
        )
    }

    pub(crate) fn push(&mut self, e: StreamEvent) -> Vec<Event> {
        match e {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
            } => {
                self.id = prefixed("chatcmpl-", id.as_deref());
                self.model = model;
                self.created = now_secs();
                self.input_tokens = input_tokens.unwrap_or(0);
                vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
            }
            StreamEvent::Text(t) => vec![self.chunk(json!({"content": t}), None)],
            StreamEvent::ToolStart { index, id, name } => {
                let k = self.tools.len() as u64;
                self.tools.insert(index, k);
                vec![self.chunk(
                    json!({"tool_calls": [{"index": k, "id": opt(&id), "type": "function",
                        "function": {"name": opt(&name), "arguments": ""}}]}),
                    None,
                )]
            }
            StreamEvent::ToolArgs { index, fragment } => {
                let k = self.tools.get(&index).copied().unwrap_or(0);
                vec![self.chunk(
                    json!({"tool_calls": [{"index": k, "function": {"arguments": fragment}}]}),
                    None,
                )]
            }
            StreamEvent::Usage { input, output } => {
                if let Some(i) = input {
                    self.input_tokens = i;
                }
                if let Some(o) = output {
                    self.output_tokens = o;
                }
                Vec::new()
            }
            StreamEvent::Finish(stop) => vec![self.chunk(json!({}), Some(finish_out(stop)))],
            StreamEvent::End => {
                if self.ended {
                    return Vec::new();
                }
                self.ended = true;
                let mut out = Vec::new();
                if self.include_usage {
                    out.push(Event::data(
                        json!({
                            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                            "model": opt(&self.model), "choices": [],
                            "usage": {"prompt_tokens": self.input_tokens, "completion_tokens": self.output_tokens,
                                      "total_tokens": self.input_tokens.saturating_add(self.output_tokens)},
                        })
                        .to_string(),
                    ));
                }
                out.push(Event::data("[DONE]"));
                out
            }
        }
    }
}
