//! Cross-protocol translation: an Anthropic Messages client on an
//! OpenAI-compatible upstream, and the reverse, streaming included.
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

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::protocol::Protocol;

/// Why a request cannot go to an upstream of the other protocol.
pub(crate) type Untranslatable = String;

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The request for an upstream speaking `to`, from a client request
/// `body` of protocol `from`, asking for `model`.
pub(crate) fn request(
    from: Protocol,
    to: Protocol,
    body: &Map<String, Value>,
    model: &str,
) -> Result<Map<String, Value>, Untranslatable> {
    let mut out = match (from, to) {
        (a, b) if a == b => body.clone(),
        (Protocol::OpenAi, Protocol::Anthropic) => openai_to_anthropic(body)?,
        _ => anthropic_to_openai(body)?,
    };
    out.insert("model".into(), Value::String(model.into()));
    Ok(out)
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

fn no_equivalent(field: &str, to: &str) -> Untranslatable {
    format!("request field `{field}` has no {to} equivalent")
}

// ---- OpenAI Chat Completions → Anthropic Messages -------------------------

fn openai_to_anthropic(body: &Map<String, Value>) -> Result<Map<String, Value>, Untranslatable> {
    const TO: &str = "Anthropic Messages";
    let mut out = Map::new();
    let mut system: Vec<String> = Vec::new();
    let mut messages: Vec<Value> = Vec::new();
    for (k, v) in body {
        match k.as_str() {
            "model" | "messages" | "stream_options" => {}
            "max_tokens" | "max_completion_tokens" => {
                out.insert("max_tokens".into(), v.clone());
            }
            "temperature" | "top_p" => {
                out.insert(k.clone(), v.clone());
            }
            "stream" => {
                out.insert("stream".into(), v.clone());
            }
            "stop" => {
                let list = match v {
                    Value::String(s) => vec![Value::String(s.clone())],
                    Value::Array(a) => a.clone(),
                    Value::Null => continue,
                    _ => return Err(no_equivalent("stop", TO)),
                };
                out.insert("stop_sequences".into(), Value::Array(list));
            }
            "n" if v.as_u64() == Some(1) => {}
            "user" => {
                out.insert("metadata".into(), json!({ "user_id": v }));
            }
            "tools" => {
                let mut tools = Vec::new();
                for t in v.as_array().into_iter().flatten() {
                    let f = t
                        .get("function")
                        .filter(|_| t.get("type").and_then(Value::as_str) == Some("function"))
                        .ok_or_else(|| "a tool that is not a `function` tool".to_string())?;
                    let mut tool = Map::new();
                    tool.insert("name".into(), f.get("name").cloned().unwrap_or(Value::Null));
                    if let Some(d) = f.get("description") {
                        tool.insert("description".into(), d.clone());
                    }
                    tool.insert(
                        "input_schema".into(),
                        f.get("parameters")
                            .cloned()
                            .unwrap_or_else(|| json!({"type": "object", "properties": {}})),
                    );
                    tools.push(Value::Object(tool));
                }
                out.insert("tools".into(), Value::Array(tools));
            }
            "tool_choice" => {
                let c = match v {
                    Value::String(s) if s == "auto" => json!({"type": "auto"}),
                    Value::String(s) if s == "required" => json!({"type": "any"}),
                    Value::String(s) if s == "none" => json!({"type": "none"}),
                    Value::Object(o) => match o.get("function").and_then(|f| f.get("name")) {
                        Some(n) => json!({"type": "tool", "name": n}),
                        None => return Err(no_equivalent("tool_choice", TO)),
                    },
                    _ => return Err(no_equivalent("tool_choice", TO)),
                };
                out.insert("tool_choice".into(), c);
            }
            "parallel_tool_calls" if v.as_bool() != Some(false) => {}
            _ if v.is_null() => {}
            other => return Err(no_equivalent(other, TO)),
        }
    }
    if body.get("parallel_tool_calls").and_then(Value::as_bool) == Some(false) {
        let tc = out
            .entry("tool_choice")
            .or_insert_with(|| json!({"type": "auto"}));
        if let Some(o) = tc.as_object_mut() {
            o.insert("disable_parallel_tool_use".into(), Value::Bool(true));
        }
    }
    out.entry("max_tokens").or_insert(json!(4096));
    for (i, m) in body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("");
        match role {
            "system" | "developer" => system.push(text_of_openai_content(m.get("content"), i)?),
            "user" => push_merged(
                &mut messages,
                "user",
                openai_parts_to_blocks(m.get("content"), i)?,
            ),
            "assistant" => {
                let mut blocks = match m.get("content") {
                    None | Some(Value::Null) => Vec::new(),
                    c => openai_parts_to_blocks(c, i)?,
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
                    blocks.push(json!({
                        "type": "tool_use",
                        "id": call.get("id").cloned().unwrap_or(Value::Null),
                        "name": f.get("name").cloned().unwrap_or(Value::Null),
                        "input": input,
                    }));
                }
                push_merged(&mut messages, "assistant", blocks);
            }
            "tool" => {
                let content = text_of_openai_content(m.get("content"), i)?;
                push_merged(
                    &mut messages,
                    "user",
                    vec![json!({
                        "type": "tool_result",
                        "tool_use_id": m.get("tool_call_id").cloned().unwrap_or(Value::Null),
                        "content": content,
                    })],
                );
            }
            other => return Err(format!("message role `{other}` has no {TO} equivalent")),
        }
    }
    if !system.is_empty() {
        out.insert("system".into(), Value::String(system.join("\n\n")));
    }
    out.insert("messages".into(), Value::Array(messages));
    Ok(out)
}

/// Anthropic wants user and assistant turns to alternate: consecutive
/// blocks of one role (a tool result after a user text) join one message.
fn push_merged(messages: &mut Vec<Value>, role: &str, blocks: Vec<Value>) {
    if let Some(last) = messages.last_mut() {
        if last.get("role").and_then(Value::as_str) == Some(role) {
            if let Some(Value::Array(c)) = last.get_mut("content") {
                c.extend(blocks);
                return;
            }
        }
    }
    messages.push(json!({ "role": role, "content": blocks }));
}

fn text_of_openai_content(c: Option<&Value>, i: usize) -> Result<String, Untranslatable> {
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

fn openai_parts_to_blocks(c: Option<&Value>, i: usize) -> Result<Vec<Value>, Untranslatable> {
    match c {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|p| match p.get("type").and_then(Value::as_str) {
                Some("text") => Ok(json!({"type": "text", "text": p.get("text").cloned().unwrap_or(Value::Null)})),
                Some("image_url") => {
                    let url = p
                        .get("image_url")
                        .and_then(|u| u.get("url").or(Some(u)))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    image_block(url).ok_or_else(|| {
                        format!("`messages[{i}]`: an image that is neither a data URL nor an http(s) URL")
                    })
                }
                other => Err(format!(
                    "`messages[{i}]`: content part `{}` has no Anthropic Messages equivalent",
                    other.unwrap_or("?")
                )),
            })
            .collect(),
        Some(_) => Err(format!("`messages[{i}].content` has an unknown shape")),
    }
}

fn image_block(url: &str) -> Option<Value> {
    if let Some(rest) = url.strip_prefix("data:") {
        let (meta, data) = rest.split_once(',')?;
        let media = meta.strip_suffix(";base64")?;
        return Some(json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media, "data": data}
        }));
    }
    (url.starts_with("http://") || url.starts_with("https://"))
        .then(|| json!({"type": "image", "source": {"type": "url", "url": url}}))
}

// ---- Anthropic Messages → OpenAI Chat Completions -------------------------

fn anthropic_to_openai(body: &Map<String, Value>) -> Result<Map<String, Value>, Untranslatable> {
    const TO: &str = "OpenAI Chat Completions";
    let mut out = Map::new();
    let mut messages: Vec<Value> = Vec::new();
    for (k, v) in body {
        match k.as_str() {
            "model" | "messages" | "system" => {}
            "max_tokens" | "temperature" | "top_p" => {
                out.insert(k.clone(), v.clone());
            }
            "stream" => {
                out.insert("stream".into(), v.clone());
                if v.as_bool() == Some(true) {
                    out.insert("stream_options".into(), json!({"include_usage": true}));
                }
            }
            "stop_sequences" => {
                out.insert("stop".into(), v.clone());
            }
            "metadata" => {
                if let Some(u) = v.get("user_id") {
                    out.insert("user".into(), u.clone());
                }
                if v.as_object()
                    .is_some_and(|o| o.keys().any(|k| k != "user_id"))
                {
                    return Err(no_equivalent("metadata", TO));
                }
            }
            "tools" => {
                let mut tools = Vec::new();
                for t in v.as_array().into_iter().flatten() {
                    if t.get("type")
                        .and_then(Value::as_str)
                        .is_some_and(|ty| ty != "custom")
                    {
                        return Err("a server tool (web search, code execution, …) has no OpenAI Chat Completions equivalent".into());
                    }
                    let mut f = Map::new();
                    f.insert("name".into(), t.get("name").cloned().unwrap_or(Value::Null));
                    if let Some(d) = t.get("description") {
                        f.insert("description".into(), d.clone());
                    }
                    f.insert(
                        "parameters".into(),
                        t.get("input_schema")
                            .cloned()
                            .unwrap_or(json!({"type": "object"})),
                    );
                    tools.push(json!({"type": "function", "function": f}));
                }
                out.insert("tools".into(), Value::Array(tools));
            }
            "tool_choice" => {
                let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
                let c = match ty {
                    "auto" => json!("auto"),
                    "any" => json!("required"),
                    "none" => json!("none"),
                    "tool" => {
                        json!({"type": "function", "function": {"name": v.get("name").cloned().unwrap_or(Value::Null)}})
                    }
                    _ => return Err(no_equivalent("tool_choice", TO)),
                };
                if v.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
                    out.insert("parallel_tool_calls".into(), Value::Bool(false));
                }
                out.insert("tool_choice".into(), c);
            }
            _ if v.is_null() => {}
            other => return Err(no_equivalent(other, TO)),
        }
    }
    match body.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => messages.push(json!({"role": "system", "content": s})),
        Some(Value::Array(blocks)) => {
            let text = anthropic_text(blocks, "system")?;
            messages.push(json!({"role": "system", "content": text}));
        }
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
        match role {
            "user" => {
                let mut parts = Vec::new();
                for b in &blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => parts.push(json!({"type": "text", "text": b.get("text").cloned().unwrap_or(Value::Null)})),
                        Some("image") => {
                            let s = b.get("source").cloned().unwrap_or(Value::Null);
                            let url = match s.get("type").and_then(Value::as_str) {
                                Some("base64") => format!(
                                    "data:{};base64,{}",
                                    s.get("media_type").and_then(Value::as_str).unwrap_or("image/png"),
                                    s.get("data").and_then(Value::as_str).unwrap_or("")
                                ),
                                Some("url") => s.get("url").and_then(Value::as_str).unwrap_or("").to_string(),
                                _ => return Err(format!("`messages[{i}]`: an image source that cannot be translated")),
                            };
                            parts.push(json!({"type": "image_url", "image_url": {"url": url}}));
                        }
                        Some("tool_result") => {
                            let content = match b.get("content") {
                                Some(Value::String(s)) => s.clone(),
                                Some(Value::Array(a)) => anthropic_text(a, "tool_result")?,
                                _ => String::new(),
                            };
                            messages.push(json!({
                                "role": "tool",
                                "tool_call_id": b.get("tool_use_id").cloned().unwrap_or(Value::Null),
                                "content": content,
                            }));
                        }
                        other => return Err(format!(
                            "`messages[{i}]`: content block `{}` has no {TO} equivalent",
                            other.unwrap_or("?")
                        )),
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
            "assistant" => {
                let mut text = String::new();
                let mut calls = Vec::new();
                for b in &blocks {
                    match b.get("type").and_then(Value::as_str) {
                        Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                        Some("tool_use") => calls.push(json!({
                            "id": b.get("id").cloned().unwrap_or(Value::Null),
                            "type": "function",
                            "function": {
                                "name": b.get("name").cloned().unwrap_or(Value::Null),
                                "arguments": b.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                            }
                        })),
                        other => return Err(format!(
                            "`messages[{i}]`: content block `{}` has no {TO} equivalent",
                            other.unwrap_or("?")
                        )),
                    }
                }
                let mut msg = json!({"role": "assistant", "content": if text.is_empty() && !calls.is_empty() { Value::Null } else { Value::String(text) }});
                if !calls.is_empty() {
                    msg["tool_calls"] = Value::Array(calls);
                }
                messages.push(msg);
            }
            other => return Err(format!("message role `{other}` has no {TO} equivalent")),
        }
    }
    out.insert("messages".into(), Value::Array(messages));
    Ok(out)
}

fn anthropic_text(blocks: &[Value], what: &str) -> Result<String, Untranslatable> {
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

// ---- responses ------------------------------------------------------------

fn finish_to_stop(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        _ => "end_turn",
    }
}

fn stop_to_finish(stop: Option<&str>) -> &'static str {
    match stop {
        Some("max_tokens") => "length",
        Some("tool_use") => "tool_calls",
        _ => "stop",
    }
}

/// A whole (non-streamed) upstream answer of protocol `from`, for a
/// client of protocol `to`.
pub(crate) fn response(from: Protocol, to: Protocol, v: Value) -> Value {
    match (from, to) {
        (a, b) if a == b => v,
        (Protocol::OpenAi, Protocol::Anthropic) => {
            let choice = v.pointer("/choices/0").cloned().unwrap_or(Value::Null);
            let msg = choice.get("message").cloned().unwrap_or(Value::Null);
            let mut content = Vec::new();
            if let Some(t) = msg.get("content").and_then(Value::as_str) {
                if !t.is_empty() {
                    content.push(json!({"type": "text", "text": t}));
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
                content.push(json!({
                    "type": "tool_use",
                    "id": c.get("id").cloned().unwrap_or(Value::Null),
                    "name": c.pointer("/function/name").cloned().unwrap_or(Value::Null),
                    "input": serde_json::from_str::<Value>(args).unwrap_or_else(|_| json!({})),
                }));
            }
            json!({
                "id": format!("msg_{}", v.get("id").and_then(Value::as_str).unwrap_or("gateway")),
                "type": "message",
                "role": "assistant",
                "model": v.get("model").cloned().unwrap_or(Value::Null),
                "content": content,
                "stop_reason": finish_to_stop(choice.get("finish_reason").and_then(Value::as_str)),
                "stop_sequence": null,
                "usage": {
                    "input_tokens": v.pointer("/usage/prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
                    "output_tokens": v.pointer("/usage/completion_tokens").and_then(Value::as_u64).unwrap_or(0),
                },
            })
        }
        _ => {
            let mut text = String::new();
            let mut calls = Vec::new();
            for b in v
                .get("content")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                match b.get("type").and_then(Value::as_str) {
                    Some("text") => text.push_str(b.get("text").and_then(Value::as_str).unwrap_or("")),
                    Some("tool_use") => calls.push(json!({
                        "id": b.get("id").cloned().unwrap_or(Value::Null),
                        "type": "function",
                        "function": {
                            "name": b.get("name").cloned().unwrap_or(Value::Null),
                            "arguments": b.get("input").map(Value::to_string).unwrap_or_else(|| "{}".into()),
                        }
                    })),
                    _ => {}
                }
            }
            let mut message = json!({"role": "assistant", "content": text});
            if !calls.is_empty() {
                message["tool_calls"] = Value::Array(calls);
            }
            let input = v
                .pointer("/usage/input_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let output = v
                .pointer("/usage/output_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            json!({
                "id": format!("chatcmpl-{}", v.get("id").and_then(Value::as_str).unwrap_or("gateway")),
                "object": "chat.completion",
                "created": now_secs(),
                "model": v.get("model").cloned().unwrap_or(Value::Null),
                "choices": [{
                    "index": 0,
                    "message": message,
                    "finish_reason": stop_to_finish(v.get("stop_reason").and_then(Value::as_str)),
                }],
                "usage": {"prompt_tokens": input, "completion_tokens": output, "total_tokens": input + output},
            })
        }
    }
}

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

/// Streamed events of one protocol turned into the other's, one upstream
/// event at a time.
#[derive(Debug)]
pub(crate) enum StreamTranslator {
    /// Same protocol: events pass as they are.
    Same,
    OpenAiToAnthropic(OaToAnth),
    AnthropicToOpenAi(AnthToOa),
}

impl StreamTranslator {
    pub(crate) fn new(upstream: Protocol, client: Protocol, client_wants_usage: bool) -> Self {
        match (upstream, client) {
            (a, b) if a == b => StreamTranslator::Same,
            (Protocol::OpenAi, _) => StreamTranslator::OpenAiToAnthropic(OaToAnth::default()),
            _ => StreamTranslator::AnthropicToOpenAi(AnthToOa {
                include_usage: client_wants_usage,
                ..AnthToOa::default()
            }),
        }
    }

    /// The client events for one upstream event.
    pub(crate) fn push(&mut self, e: Event) -> Vec<Event> {
        match self {
            StreamTranslator::Same => vec![e],
            StreamTranslator::OpenAiToAnthropic(t) => t.push(e),
            StreamTranslator::AnthropicToOpenAi(t) => t.push(e),
        }
    }
}

/// OpenAI chunks → Anthropic events.
#[derive(Debug, Default)]
pub(crate) struct OaToAnth {
    started: bool,
    /// The open content block: its index and whether it is text.
    open: Option<(usize, bool)>,
    next_index: usize,
    /// OpenAI tool-call index → Anthropic block index.
    tools: HashMap<u64, usize>,
    stop: Option<&'static str>,
    input_tokens: u64,
    output_tokens: u64,
    done: bool,
}

impl OaToAnth {
    fn close(&mut self, out: &mut Vec<Event>) {
        if let Some((i, _)) = self.open.take() {
            out.push(Event::named(
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": i}),
            ));
        }
    }

    fn finish(&mut self, out: &mut Vec<Event>) {
        if self.done {
            return;
        }
        self.done = true;
        self.close(out);
        out.push(Event::named(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": self.stop.unwrap_or("end_turn"), "stop_sequence": null},
                "usage": {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens},
            }),
        ));
        out.push(Event::named(
            "message_stop",
            &json!({"type": "message_stop"}),
        ));
    }

    fn push(&mut self, e: Event) -> Vec<Event> {
        let mut out = Vec::new();
        if e.data.trim() == "[DONE]" {
            self.finish(&mut out);
            return out;
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return out;
        };
        if !self.started {
            self.started = true;
            out.push(Event::named(
                "message_start",
                &json!({"type": "message_start", "message": {
                    "id": format!("msg_{}", v.get("id").and_then(Value::as_str).unwrap_or("gateway")),
                    "type": "message", "role": "assistant",
                    "model": v.get("model").cloned().unwrap_or(Value::Null),
                    "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": 0, "output_tokens": 0}
                }}),
            ));
        }
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.input_tokens = u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0);
            self.output_tokens = u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
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
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let k = call.get("index").and_then(Value::as_u64).unwrap_or(0);
            let i = match self.tools.get(&k) {
                Some(i) => *i,
                None => {
                    self.close(&mut out);
                    let i = self.next_index;
                    self.next_index += 1;
                    self.tools.insert(k, i);
                    self.open = Some((i, false));
                    out.push(Event::named(
                        "content_block_start",
                        &json!({"type": "content_block_start", "index": i, "content_block": {
                            "type": "tool_use",
                            "id": call.get("id").cloned().unwrap_or(Value::Null),
                            "name": call.pointer("/function/name").cloned().unwrap_or(Value::Null),
                            "input": {}
                        }}),
                    ));
                    i
                }
            };
            if let Some(a) = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .filter(|a| !a.is_empty())
            {
                out.push(Event::named(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": i, "delta": {"type": "input_json_delta", "partial_json": a}}),
                ));
            }
        }
        if let Some(f) = choice.get("finish_reason").and_then(Value::as_str) {
            self.stop = Some(finish_to_stop(Some(f)));
        }
        out
    }
}

/// Anthropic events → OpenAI chunks.
#[derive(Debug, Default)]
pub(crate) struct AnthToOa {
    include_usage: bool,
    id: String,
    model: Value,
    created: u64,
    /// Anthropic block index → OpenAI tool-call index.
    tools: HashMap<u64, u64>,
    input_tokens: u64,
    output_tokens: u64,
}

impl AnthToOa {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Event {
        Event::data(
            json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": self.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            })
            .to_string(),
        )
    }

    fn push(&mut self, e: Event) -> Vec<Event> {
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return Vec::new();
        };
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
        match ty {
            "message_start" => {
                let m = v.get("message").cloned().unwrap_or(Value::Null);
                self.id = format!(
                    "chatcmpl-{}",
                    m.get("id").and_then(Value::as_str).unwrap_or("gateway")
                );
                self.model = m.get("model").cloned().unwrap_or(Value::Null);
                self.created = now_secs();
                self.input_tokens = m
                    .pointer("/usage/input_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0);
                vec![self.chunk(json!({"role": "assistant", "content": ""}), None)]
            }
            "content_block_start" => {
                let b = v.get("content_block").cloned().unwrap_or(Value::Null);
                if b.get("type").and_then(Value::as_str) != Some("tool_use") {
                    return Vec::new();
                }
                let k = self.tools.len() as u64;
                self.tools
                    .insert(v.get("index").and_then(Value::as_u64).unwrap_or(0), k);
                vec![self.chunk(
                    json!({"tool_calls": [{"index": k, "id": b.get("id"), "type": "function",
                        "function": {"name": b.get("name"), "arguments": ""}}]}),
                    None,
                )]
            }
            "content_block_delta" => {
                let d = v.get("delta").cloned().unwrap_or(Value::Null);
                match d.get("type").and_then(Value::as_str) {
                    Some("text_delta") => {
                        vec![self.chunk(json!({"content": d.get("text")}), None)]
                    }
                    Some("input_json_delta") => {
                        let idx = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                        let k = self.tools.get(&idx).copied().unwrap_or(0);
                        vec![self.chunk(
                            json!({"tool_calls": [{"index": k, "function": {"arguments": d.get("partial_json")}}]}),
                            None,
                        )]
                    }
                    _ => Vec::new(),
                }
            }
            "message_delta" => {
                self.output_tokens = v
                    .pointer("/usage/output_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(self.output_tokens);
                let stop = v.pointer("/delta/stop_reason").and_then(Value::as_str);
                vec![self.chunk(json!({}), Some(stop_to_finish(stop)))]
            }
            "message_stop" => {
                let mut out = Vec::new();
                if self.include_usage {
                    out.push(Event::data(
                        json!({
                            "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                            "model": self.model, "choices": [],
                            "usage": {"prompt_tokens": self.input_tokens, "completion_tokens": self.output_tokens,
                                      "total_tokens": self.input_tokens + self.output_tokens},
                        })
                        .to_string(),
                    ));
                }
                out.push(Event::data("[DONE]"));
                out
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
