//! Anthropic Messages (`anthropic-messages`): `POST {baseUrl}/v1/messages`,
//! named events from `message_start` to `message_stop`.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::{
    no_equivalent, opt, str_of, Image, Message, Part, Refusal, Request, Response, Role,
    SamplingNames, StopReason, StreamEvent, Tool, ToolChoice, Usage,
};
use crate::sse::Event;

/// The protocol's name in refusals.
pub(crate) const NAME: &str = "Anthropic Messages";

/// Anthropic asks for a limit; Chat Completions and others do not.
const DEFAULT_MAX_TOKENS: u64 = 4096;

// ---- request in ------------------------------------------------------------

/// A client's Messages body, in canonical form.
pub(crate) fn request_in(body: &Map<String, Value>) -> Result<Request, Refusal> {
    let mut r = Request::default();
    for (k, v) in body {
        match k.as_str() {
            "model" | "messages" | "system" => {}
            "max_tokens" => r.max_tokens = v.as_u64(),
            "temperature" => r.temperature = v.as_number().cloned(),
            "top_p" => r.top_p = v.as_number().cloned(),
            "stream" => r.stream = v.as_bool(),
            "stop_sequences" => {
                r.stop = Some(
                    v.as_array()
                        .into_iter()
                        .flatten()
                        .map(|s| s.as_str().map(str::to_string))
                        .collect::<Option<Vec<_>>>()
                        .ok_or_else(|| no_equivalent("stop_sequences"))?,
                )
            }
            "metadata" => {
                if let Some(u) = v.get("user_id") {
                    r.user = Some(
                        u.as_str()
                            .ok_or_else(|| no_equivalent("metadata"))?
                            .to_string(),
                    );
                }
                if v.as_object()
                    .is_some_and(|o| o.keys().any(|k| k != "user_id"))
                {
                    return Err(no_equivalent("metadata"));
                }
            }
            "tools" => {
                let mut tools = Vec::new();
                for t in v.as_array().into_iter().flatten() {
                    if t.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|ty| ty != "custom")
                    {
                        return Err(
                            "a server tool (web search, code execution, …) has no {to} equivalent"
                                .into(),
                        );
                    }
                    tools.push(Tool {
                        name: str_of(t, "name"),
                        description: str_of(t, "description"),
                        parameters: t.get("input_schema").cloned(),
                    });
                }
                r.tools = Some(tools);
            }
            "tool_choice" => {
                let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
                r.tool_choice = Some(match ty {
                    "auto" => ToolChoice::Auto,
                    "any" => ToolChoice::Any,
                    "none" => ToolChoice::None,
                    "tool" => ToolChoice::Tool(str_of(v, "name")),
                    _ => return Err(no_equivalent("tool_choice")),
                });
                if v.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
                    r.parallel_tool_calls = Some(false);
                }
            }
            _ if v.is_null() => {}
            other => return Err(no_equivalent(other)),
        }
    }
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => r.system.push(s.clone()),
        Some(Value::Array(blocks)) => r.system.push(text_of(blocks, "system")?),
        Some(_) => return Err("`system` has an unknown shape".into()),
    }
    for (i, m) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        let blocks: Vec<Value> = match m.get("content") {
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(a)) => a.clone(),
            _ => Vec::new(),
        };
        let role = match role {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            other => {
                return Err(format!(
                    "message role `{}` has no {{to}} equivalent",
                    super::quoted(other)
                ))
            }
        };
        let mut parts = Vec::new();
        for b in &blocks {
            let ty = b.get("type").and_then(Value::as_str);
            match (role, ty) {
                (_, Some("text")) => parts.push(Part::Text(
                    b.get("text")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                )),
                (Role::User, Some("image")) => {
                    let s = b.get("source").cloned().unwrap_or(Value::Null);
                    let img = match s.get("type").and_then(Value::as_str) {
                        Some("base64") => Image::Base64 {
                            media_type: s
                                .get("media_type")
                                .and_then(Value::as_str)
                                .unwrap_or("image/png")
                                .to_string(),
                            data: s
                                .get("data")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        },
                        Some("url") => Image::Url(
                            s.get("url")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        ),
                        _ => {
                            return Err(format!(
                                "`messages[{i}]`: an image source that cannot be translated"
                            ))
                        }
                    };
                    parts.push(Part::Image(img));
                }
                (Role::User, Some("tool_result")) => {
                    let content = match b.get("content") {
                        Some(Value::String(s)) => s.clone(),
                        Some(Value::Array(a)) => text_of(a, "tool_result")?,
                        _ => String::new(),
                    };
                    parts.push(Part::ToolResult {
                        id: str_of(b, "tool_use_id"),
                        name: None,
                        content,
                    });
                }
                (Role::Assistant, Some("tool_use")) => parts.push(Part::ToolCall {
                    id: str_of(b, "id"),
                    name: str_of(b, "name"),
                    input: b.get("input").cloned().unwrap_or_else(|| json!({})),
                }),
                (_, other) => {
                    return Err(format!(
                        "`messages[{i}]`: content block `{}` has no {{to}} equivalent",
                        other.unwrap_or("?")
                    ))
                }
            }
        }
        r.messages.push(Message {
            role,
            content: parts,
        });
    }
    Ok(r)
}

fn text_of(blocks: &[Value], what: &str) -> Result<String, Refusal> {
    let mut out = String::new();
    for b in blocks {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => out.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
            other => {
                return Err(format!(
                    "`{what}` block `{}` cannot be translated",
                    other.unwrap_or("?")
                ))
            }
        }
    }
    Ok(out)
}

// ---- request out -----------------------------------------------------------

fn image_out(img: &Image) -> Value {
    match img {
        Image::Base64 { media_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data}
        }),
        Image::Url(u) => json!({"type": "image", "source": {"type": "url", "url": u}}),
    }
}

/// A canonical request as a Messages body (without `model`).
pub(crate) fn request_out(r: &Request) -> Result<Map<String, Value>, Refusal> {
    let mut out = Map::new();
    out.insert(
        "max_tokens".into(),
        json!(r.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS)),
    );
    r.put_sampling(
        &mut out,
        &SamplingNames {
            max_tokens: None,
            top_p: "top_p",
            stop: Some("stop_sequences"),
        },
    );
    if let Some(s) = r.stream {
        out.insert("stream".into(), Value::Bool(s));
    }
    if let Some(u) = &r.user {
        out.insert("metadata".into(), json!({ "user_id": u }));
    }
    if let Some(tools) = &r.tools {
        let list: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut tool = Map::new();
                tool.insert("name".into(), opt(&t.name));
                if let Some(d) = &t.description {
                    tool.insert("description".into(), json!(d));
                }
                tool.insert(
                    "input_schema".into(),
                    t.parameters
                        .clone()
                        .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                );
                Value::Object(tool)
            })
            .collect();
        out.insert("tools".into(), Value::Array(list));
    }
    if let Some(c) = &r.tool_choice {
        out.insert(
            "tool_choice".into(),
            match c {
                ToolChoice::Auto => json!({"type": "auto"}),
                ToolChoice::Any => json!({"type": "any"}),
                ToolChoice::None => json!({"type": "none"}),
                ToolChoice::Tool(n) => json!({"type": "tool", "name": opt(n)}),
            },
        );
    }
    if r.parallel_tool_calls == Some(false) {
        let tc = out
            .entry("tool_choice")
            .or_insert_with(|| json!({"type": "auto"}));
        if let Some(o) = tc.as_object_mut() {
            o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
        }
    }
    if !r.system.is_empty() {
        out.insert("system".into(), Value::String(r.system.join("\n\n")));
    }
    let mut merged: Vec<Message> = Vec::new();
    for m in &r.messages {
        Request::push_merged(&mut merged, m.role, m.content.clone());
    }
    let messages: Vec<Value> = merged
        .iter()
        .map(|m| {
            let blocks: Vec<Value> = m
                .content
                .iter()
                .map(|p| match p {
                    Part::Text(t) => json!({"type": "text", "text": t}),
                    Part::Image(img) => image_out(img),
                    Part::ToolCall { id, name, input } => json!({
                        "type": "tool_use", "id": opt(id), "name": opt(name), "input": input,
                    }),
                    Part::ToolResult { id, content, .. } => json!({
                        "type": "tool_result", "tool_use_id": opt(id), "content": content,
                    }),
                })
                .collect();
            let role = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
            };
            json!({"role": role, "content": blocks})
        })
        .collect();
    out.insert("messages".into(), Value::Array(messages));
    Ok(out)
}

// ---- answers ---------------------------------------------------------------

fn stop_in(stop: Option<&str>) -> StopReason {
    match stop {
        Some("max_tokens") => StopReason::MaxTokens,
        Some("tool_use") => StopReason::ToolUse,
        Some("stop_sequence") => StopReason::StopSequence,
        _ => StopReason::EndTurn,
    }
}

pub(crate) fn stop_out(stop: StopReason) -> &'static str {
    match stop {
        StopReason::MaxTokens => "max_tokens",
        StopReason::ToolUse => "tool_use",
        StopReason::StopSequence => "stop_sequence",
        // Anthropic's `refusal` is not the same thing (the model
        // declined): a filtered answer ends its turn.
        StopReason::EndTurn | StopReason::ContentFilter => "end_turn",
    }
}

/// A whole answer, in canonical form.
pub(crate) fn response_in(v: &Value) -> Response {
    let mut content = Vec::new();
    for b in v
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match b.get("type").and_then(Value::as_str) {
            Some("text") => content.push(Part::Text(
                b.get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )),
            Some("tool_use") => content.push(Part::ToolCall {
                id: str_of(b, "id"),
                name: str_of(b, "name"),
                input: b.get("input").cloned().unwrap_or_else(|| json!({})),
            }),
            _ => {}
        }
    }
    Response {
        id: str_of(v, "id"),
        model: str_of(v, "model"),
        content,
        stop: stop_in(v.get("stop_reason").and_then(Value::as_str)),
        usage: Usage {
            input: super::u64_of(v, "/usage/input_tokens").unwrap_or(0),
            output: super::u64_of(v, "/usage/output_tokens").unwrap_or(0),
        },
    }
}

/// A canonical answer as a Messages answer.
pub(crate) fn response_out(r: &Response) -> Value {
    let mut content = Vec::new();
    let text = r.text();
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for p in &r.content {
        if let Part::ToolCall { id, name, input } = p {
            content.push(
                json!({"type": "tool_use", "id": opt(id), "name": opt(name), "input": input}),
            );
        }
    }
    json!({
        "id": super::prefixed("msg_", r.id.as_deref()),
        "type": "message",
        "role": "assistant",
        "model": opt(&r.model),
        "content": content,
        "stop_reason": stop_out(r.stop),
        "stop_sequence": null,
        "usage": {"input_tokens": r.usage.input, "output_tokens": r.usage.output},
    })
}

// ---- streams ---------------------------------------------------------------

/// Messages events → canonical events.
#[derive(Debug, Default)]
pub(crate) struct StreamIn {
    /// Anthropic block index → canonical tool index.
    tools: HashMap<u64, u64>,
}

impl StreamIn {
    pub(crate) fn push(&mut self, e: &Event) -> Vec<StreamEvent> {
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return Vec::new();
        };
        match v.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                let m = v.get("message").cloned().unwrap_or(Value::Null);
                vec![StreamEvent::Start {
                    id: str_of(&m, "id"),
                    model: str_of(&m, "model"),
                    input_tokens: super::u64_of(&m, "/usage/input_tokens"),
                }]
            }
            "content_block_start" => {
                let b = v.get("content_block").cloned().unwrap_or(Value::Null);
                if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                    return Vec::new();
                }
                let k = self.tools.len() as u64;
                self.tools
                    .insert(v.get("index").and_then(Value::as_u64).unwrap_or(0), k);
                vec![StreamEvent::ToolStart {
                    index: k,
                    id: str_of(&b, "id"),
                    name: str_of(&b, "name"),
                }]
            }
            "content_block_delta" => {
                let d = v.get("delta").cloned().unwrap_or(Value::Null);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        vec![StreamEvent::Text(
                            d.get("text")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        )]
                    }
                    Some("input_json_delta") => {
                        let idx = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                        vec![StreamEvent::ToolArgs {
                            index: self.tools.get(&idx).copied().unwrap_or(0),
                            fragment: d
                                .get("partial_json")
                                .and_then(Value::as_str)
                                .unwrap_or("")
                                .to_string(),
                        }]
                    }
                    _ => Vec::new(),
                }
            }
            "message_delta" => vec![
                StreamEvent::Usage {
                    input: super::u64_of(&v, "/usage/input_tokens"),
                    output: super::u64_of(&v, "/usage/output_tokens"),
                },
                StreamEvent::Finish(stop_in(
                    v.pointer("/delta/stop_reason").and_then(Value::as_str),
                )),
            ],
            "message_stop" => vec![StreamEvent::End],
            _ => Vec::new(),
        }
    }
}

/// Canonical events → Messages events.
#[derive(Debug, Default)]
pub(crate) struct StreamOut {
    started: bool,
    /// The open content block: its index and whether it is text.
    open: Option<(usize, bool)>,
    next_index: usize,
    /// Canonical tool index → Anthropic block index.
    tools: HashMap<u64, usize>,
    stop: Option<StopReason>,
    input_tokens: u64,
    output_tokens: u64,
    done: bool,
}

impl StreamOut {
    fn close(&mut self, out: &mut Vec<Event>) {
        if let Some((i, _)) = self.open.take() {
            out.push(Event::named(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    pub(crate) fn push(&mut self, e: StreamEvent) -> Vec<Event> {
        let mut out = Vec::new();
        match e {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
            } => {
                if self.started {
                    return out;
                }
                self.started = true;
                if let Some(n) = input_tokens {
                    self.input_tokens = n;
                }
                out.push(Event::named(
                    "message_start",
                    &json!({"type": "message_start", "message": {
                        "id": super::prefixed("msg_", id.as_deref()),
                        "type": "message", "role": "assistant",
                        "model": opt(&model),
                        "content": [], "stop_reason": null, "stop_sequence": null,
                        "usage": {"input_tokens": self.input_tokens, "output_tokens": 0}
                    }}),
                ));
            }
            StreamEvent::Text(t) => {
                if t.is_empty() {
                    return out;
                }
                if !matches!(self.open, Some((_, true))) {
                    self.close(&mut out);
                    let i = self.next_index;
                    self.next_index += 1;
                    self.open = Some((i, true));
                    out.push(Event::named(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}}),
                    ));
                }
                let i = self.open.map_or(0, |(i, _)| i);
                out.push(Event::named(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "text_delta", "text": t}}),
                ));
            }
            StreamEvent::ToolStart { index, id, name } => {
                if self.tools.contains_key(&index) {
                    return out;
                }
                self.close(&mut out);
                let i = self.next_index;
                self.next_index += 1;
                self.tools.insert(index, i);
                self.open = Some((i, false));
                out.push(Event::named(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": i, "content_block": {
                        "type": "tool_use", "id": opt(&id), "name": opt(&name), "input": {}
                    }}),
                ));
            }
            StreamEvent::ToolArgs { index, fragment } => {
                if fragment.is_empty() {
                    return out;
                }
                let i = self.tools.get(&index).copied().unwrap_or(0);
                out.push(Event::named(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": fragment}}),
                ));
            }
            StreamEvent::Usage { input, output } => {
                if let Some(i) = input {
                    self.input_tokens = i;
                }
                if let Some(o) = output {
                    self.output_tokens = o;
                }
            }
            StreamEvent::Finish(stop) => self.stop = Some(stop),
            StreamEvent::End => {
                if self.done {
                    return out;
                }
                self.done = true;
                self.close(&mut out);
                out.push(Event::named(
                    "message_delta",
                    &json!({
                        "type": "message_delta",
                        "delta": {"stop_reason": stop_out(self.stop.unwrap_or_default()), "stop_sequence": null},
                        "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
                    }),
                ));
                out.push(Event::named(
                    "message_stop",
                    &json!({"type": "message_stop"}),
                ));
            }
        }
        out
    }
}
