//! Amazon Bedrock Converse (`bedrock-converse-stream`): `POST
//! {endpoint}/model/{modelId}/converse`, streamed by `/converse-stream`
//! (AWS event-stream frames, each event's JSON payload named by its
//! `:event-type`: `messageStart`, `contentBlockStart`, `contentBlockDelta`,
//! `contentBlockStop`, `messageStop`, `metadata`). The model is in the URL.

use serde_json::{json, Map, Value};

use super::{
    no_equivalent, opt, str_of, Image, Message, Part, Refusal, Request, Response, Role,
    SamplingNames, StopReason, StreamEvent, Tool, ToolChoice, Usage,
};
use crate::sse::Event;

/// The protocol's name in refusals.
pub(crate) const NAME: &str = "Amazon Bedrock Converse";

/// Bedrock's image formats, from a media type.
fn image_format(media_type: &str) -> Option<&'static str> {
    match media_type {
        "image/png" => Some("png"),
        "image/jpeg" | "image/jpg" => Some("jpeg"),
        "image/gif" => Some("gif"),
        "image/webp" => Some("webp"),
        _ => None,
    }
}

// ---- request out -----------------------------------------------------------

/// A canonical request as a Converse body.
pub(crate) fn request_out(r: &Request) -> Result<Map<String, Value>, Refusal> {
    if r.user.is_some() {
        return Err(no_equivalent("user"));
    }
    if r.parallel_tool_calls == Some(false) {
        return Err(no_equivalent("parallel_tool_calls"));
    }
    let mut out = Map::new();
    if !r.system.is_empty() {
        out.insert("system".into(), json!([{"text": r.system.join("\n\n")}]));
    }
    let mut merged: Vec<Message> = Vec::new();
    for m in &r.messages {
        if !m.content.is_empty() {
            Request::push_merged(&mut merged, m.role, m.content.clone());
        }
    }
    let mut messages = Vec::new();
    for m in &merged {
        let mut content = Vec::new();
        for p in &m.content {
            content.push(match p {
                Part::Text(t) => json!({"text": t}),
                Part::Image(Image::Base64 { media_type, data }) => {
                    let format = image_format(media_type).ok_or_else(|| {
                        format!(
                            "an image of type `{}` has no {{to}} equivalent",
                            super::quoted(media_type)
                        )
                    })?;
                    json!({"image": {"format": format, "source": {"bytes": data}}})
                }
                Part::Image(Image::Url(_)) => {
                    return Err("an image given by URL has no {to} equivalent".into())
                }
                Part::ToolCall { id, name, input } => {
                    json!({"toolUse": {"toolUseId": opt(id), "name": opt(name), "input": input}})
                }
                Part::ToolResult { id, content, .. } => json!({"toolResult": {
                    "toolUseId": opt(id), "content": [{"text": content}], "status": "success"
                }}),
            });
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
        };
        messages.push(json!({"role": role, "content": content}));
    }
    out.insert("messages".into(), Value::Array(messages));
    let mut inf = Map::new();
    r.put_sampling(
        &mut inf,
        &SamplingNames {
            max_tokens: Some("maxTokens"),
            top_p: "topP",
            stop: Some("stopSequences"),
        },
    );
    if !inf.is_empty() {
        out.insert("inferenceConfig".into(), Value::Object(inf));
    }
    if let Some(tools) = &r.tools {
        let specs: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut s = Map::new();
                s.insert("name".into(), opt(&t.name));
                if let Some(d) = &t.description {
                    s.insert("description".into(), json!(d));
                }
                s.insert(
                    "inputSchema".into(),
                    json!({"json": t.parameters.clone().unwrap_or(json!({"type": "object"}))}),
                );
                json!({"toolSpec": s})
            })
            .collect();
        let mut cfg = Map::new();
        cfg.insert("tools".into(), Value::Array(specs));
        if let Some(c) = &r.tool_choice {
            cfg.insert(
                "toolChoice".into(),
                match c {
                    ToolChoice::Auto => json!({"auto": {}}),
                    ToolChoice::Any => json!({"any": {}}),
                    ToolChoice::Tool(n) => json!({"tool": {"name": opt(n)}}),
                    // Converse has no "no tool" choice.
                    ToolChoice::None => return Err(no_equivalent("tool_choice")),
                },
            );
        }
        out.insert("toolConfig".into(), Value::Object(cfg));
    } else if r.tool_choice.is_some() {
        return Err(no_equivalent("tool_choice"));
    }
    Ok(out)
}

// ---- request in (the round trip's other half) ------------------------------

/// A Converse body, in canonical form.
pub(crate) fn request_in(body: &Map<String, Value>) -> Result<Request, Refusal> {
    let mut r = Request::default();
    for (k, v) in body {
        match k.as_str() {
            "messages" | "system" => {}
            "inferenceConfig" => {
                for (g, x) in v.as_object().into_iter().flatten() {
                    match g.as_str() {
                        "maxTokens" => r.max_tokens = x.as_u64(),
                        "temperature" => r.temperature = x.as_number().cloned(),
                        "topP" => r.top_p = x.as_number().cloned(),
                        "stopSequences" => {
                            r.stop = x.as_array().map(|a| {
                                a.iter()
                                    .filter_map(|s| s.as_str().map(str::to_string))
                                    .collect()
                            })
                        }
                        other => return Err(no_equivalent(&format!("inferenceConfig.{other}"))),
                    }
                }
            }
            "toolConfig" => {
                let mut tools = Vec::new();
                for t in v
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let s = t.get("toolSpec").ok_or_else(|| {
                        "a tool that is not a `toolSpec` has no {to} equivalent".to_string()
                    })?;
                    tools.push(Tool {
                        name: str_of(s, "name"),
                        description: str_of(s, "description"),
                        parameters: s.pointer("/inputSchema/json").cloned(),
                    });
                }
                r.tools = Some(tools);
                if let Some(c) = v.get("toolChoice") {
                    r.tool_choice = Some(if c.get("auto").is_some() {
                        ToolChoice::Auto
                    } else if c.get("any").is_some() {
                        ToolChoice::Any
                    } else if let Some(t) = c.get("tool") {
                        ToolChoice::Tool(str_of(t, "name"))
                    } else {
                        return Err(no_equivalent("toolConfig.toolChoice"));
                    });
                }
            }
            other => return Err(no_equivalent(other)),
        }
    }
    if let Some(s) = body.get("system").and_then(Value::as_array) {
        r.system.push(
            s.iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect(),
        );
    }
    for (i, m) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = match m.get("role").and_then(Value::as_str) {
            Some("assistant") => Role::Assistant,
            _ => Role::User,
        };
        let mut parts = Vec::new();
        for b in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            parts.push(block_in(b).ok_or_else(|| {
                format!("`messages[{i}]`: a content block that has no {{to}} equivalent")
            })?);
        }
        r.messages.push(Message {
            role,
            content: parts,
        });
    }
    Ok(r)
}

fn block_in(b: &Value) -> Option<Part> {
    if let Some(t) = b.get("text").and_then(Value::as_str) {
        return Some(Part::Text(t.to_string()));
    }
    if let Some(img) = b.get("image") {
        let format = img.get("format").and_then(Value::as_str)?;
        return Some(Part::Image(Image::Base64 {
            media_type: format!("image/{format}"),
            data: img.pointer("/source/bytes")?.as_str()?.to_string(),
        }));
    }
    if let Some(u) = b.get("toolUse") {
        return Some(Part::ToolCall {
            id: str_of(u, "toolUseId"),
            name: str_of(u, "name"),
            input: u.get("input").cloned().unwrap_or_else(|| json!({})),
        });
    }
    if let Some(t) = b.get("toolResult") {
        let content = t
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| match c.get("text").and_then(Value::as_str) {
                Some(s) => s.to_string(),
                None => c.get("json").map(Value::to_string).unwrap_or_default(),
            })
            .collect();
        return Some(Part::ToolResult {
            id: str_of(t, "toolUseId"),
            name: None,
            content,
        });
    }
    None
}

// ---- answers ---------------------------------------------------------------

fn stop_in(s: Option<&str>) -> StopReason {
    match s {
        Some("max_tokens" | "model_context_window_exceeded") => StopReason::MaxTokens,
        Some("tool_use") => StopReason::ToolUse,
        Some("stop_sequence") => StopReason::StopSequence,
        Some("guardrail_intervened" | "content_filtered") => StopReason::ContentFilter,
        _ => StopReason::EndTurn,
    }
}

fn stop_out(s: StopReason) -> &'static str {
    match s {
        StopReason::EndTurn => "end_turn",
        StopReason::MaxTokens => "max_tokens",
        StopReason::ToolUse => "tool_use",
        StopReason::StopSequence => "stop_sequence",
        StopReason::ContentFilter => "content_filtered",
    }
}

fn usage_in(v: &Value) -> Usage {
    Usage {
        input: super::u64_of(v, "/usage/inputTokens").unwrap_or(0),
        output: super::u64_of(v, "/usage/outputTokens").unwrap_or(0),
    }
}

/// A whole answer, in canonical form.
pub(crate) fn response_in(v: &Value) -> Response {
    let content = v
        .pointer("/output/message/content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|b| match block_in(b)? {
            p @ (Part::Text(_) | Part::ToolCall { .. }) => Some(p),
            _ => None,
        })
        .collect();
    Response {
        // Converse answers have no id (the request id is a header).
        id: None,
        model: None,
        content,
        stop: stop_in(v.get("stopReason").and_then(Value::as_str)),
        usage: usage_in(v),
    }
}

/// A canonical answer as a Converse answer.
pub(crate) fn response_out(r: &Response) -> Value {
    let content: Vec<Value> = r
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(json!({"text": t})),
            Part::ToolCall { id, name, input } => {
                Some(json!({"toolUse": {"toolUseId": opt(id), "name": opt(name), "input": input}}))
            }
            _ => None,
        })
        .collect();
    json!({
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop_out(r.stop),
        "usage": {"inputTokens": r.usage.input, "outputTokens": r.usage.output,
                  "totalTokens": r.usage.input.saturating_add(r.usage.output)},
        "metrics": {"latencyMs": 0},
    })
}

// ---- streams ---------------------------------------------------------------

/// ConverseStream events (the event type as the SSE event name, the
/// payload as data) → canonical events.
#[derive(Debug, Default)]
pub(crate) struct StreamIn {
    started: bool,
    ended: bool,
}

impl StreamIn {
    pub(crate) fn push(&mut self, e: &Event) -> Vec<StreamEvent> {
        let mut out = Vec::new();
        if e.data.trim() == "[DONE]" {
            if !std::mem::replace(&mut self.ended, true) {
                out.push(StreamEvent::End);
            }
            return out;
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return out;
        };
        if !self.started {
            self.started = true;
            out.push(StreamEvent::Start {
                id: None,
                model: None,
                input_tokens: None,
            });
        }
        let index = v
            .get("contentBlockIndex")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        match e.event.as_deref() {
            Some("contentBlockStart") => {
                if let Some(u) = v.pointer("/start/toolUse") {
                    out.push(StreamEvent::ToolStart {
                        index,
                        id: str_of(u, "toolUseId"),
                        name: str_of(u, "name"),
                    });
                }
            }
            Some("contentBlockDelta") => {
                if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                    out.push(StreamEvent::Text(t.to_string()));
                } else if let Some(a) = v.pointer("/delta/toolUse/input").and_then(Value::as_str) {
                    out.push(StreamEvent::ToolArgs {
                        index,
                        fragment: a.to_string(),
                    });
                }
            }
            Some("messageStop") => out.push(StreamEvent::Finish(stop_in(
                v.get("stopReason").and_then(Value::as_str),
            ))),
            Some("metadata") => {
                let u = usage_in(&v);
                out.push(StreamEvent::Usage {
                    input: Some(u.input),
                    output: Some(u.output),
                });
                if !std::mem::replace(&mut self.ended, true) {
                    out.push(StreamEvent::End);
                }
            }
            _ => {}
        }
        out
    }
}

/// Canonical events as ConverseStream events (event type, payload): the
/// round trip's other half.
#[cfg(test)]
pub(crate) fn stream_out(events: &[StreamEvent]) -> Vec<(String, Value)> {
    let mut out = vec![("messageStart".to_string(), json!({"role": "assistant"}))];
    let mut text_block: Option<u64> = None;
    let mut next = 0u64;
    let mut tools: std::collections::HashMap<u64, u64> = Default::default();
    let (mut stop, mut usage) = (StopReason::EndTurn, Usage::default());
    for e in events {
        match e {
            StreamEvent::Text(t) => {
                let i = *text_block.get_or_insert_with(|| {
                    next += 1;
                    next - 1
                });
                out.push((
                    "contentBlockDelta".into(),
                    json!({"contentBlockIndex": i, "delta": {"text": t}}),
                ));
            }
            StreamEvent::ToolStart { index, id, name } => {
                if let Some(i) = text_block.take() {
                    out.push(("contentBlockStop".into(), json!({"contentBlockIndex": i})));
                }
                let i = next;
                next += 1;
                tools.insert(*index, i);
                out.push((
                    "contentBlockStart".into(),
                    json!({"contentBlockIndex": i, "start": {"toolUse": {"toolUseId": opt(id), "name": opt(name)}}}),
                ));
            }
            StreamEvent::ToolArgs { index, fragment } => {
                let i = tools.get(index).copied().unwrap_or(0);
                out.push((
                    "contentBlockDelta".into(),
                    json!({"contentBlockIndex": i, "delta": {"toolUse": {"input": fragment}}}),
                ));
            }
            StreamEvent::Usage { input, output } => {
                usage.input = input.unwrap_or(usage.input);
                usage.output = output.unwrap_or(usage.output);
            }
            StreamEvent::Finish(s) => stop = *s,
            StreamEvent::Start { .. } | StreamEvent::End => {}
        }
    }
    out.push(("messageStop".into(), json!({"stopReason": stop_out(stop)})));
    out.push((
        "metadata".into(),
        json!({"usage": {"inputTokens": usage.input, "outputTokens": usage.output,
               "totalTokens": usage.input.saturating_add(usage.output)}, "metrics": {"latencyMs": 1}}),
    ));
    out
}
