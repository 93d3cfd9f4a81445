//! Google Gemini (`google-generative-ai`): `POST
//! {baseUrl}/models/{model}:generateContent`, streamed by
//! `:streamGenerateContent?alt=sse` (`data:` chunks, each a whole
//! `GenerateContentResponse` with the new parts; no end marker: the chunk
//! with `finishReason` is the last). The model is in the URL, not the body.

use serde_json::{json, Map, Value};

use super::{
    no_equivalent, opt, str_of, Image, Message, Part, Refusal, Request, Response, Role,
    SamplingNames, StopReason, StreamEvent, Tool, ToolChoice, Usage,
};
use crate::sse::Event;

/// The protocol's name in refusals.
pub(crate) const NAME: &str = "Google Gemini";

// ---- request out -----------------------------------------------------------

/// A canonical request as a `generateContent` body.
pub(crate) fn request_out(r: &Request) -> Result<Map<String, Value>, Refusal> {
    if r.user.is_some() {
        return Err(no_equivalent("user"));
    }
    if r.parallel_tool_calls == Some(false) {
        return Err(no_equivalent("parallel_tool_calls"));
    }
    let mut out = Map::new();
    if !r.system.is_empty() {
        out.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": r.system.join("\n\n")}]}),
        );
    }
    let mut merged: Vec<Message> = Vec::new();
    for m in &r.messages {
        if !m.content.is_empty() {
            Request::push_merged(&mut merged, m.role, m.content.clone());
        }
    }
    let mut contents = Vec::new();
    for m in &merged {
        let mut parts = Vec::new();
        for p in &m.content {
            parts.push(match p {
                Part::Text(t) => json!({"text": t}),
                Part::Image(Image::Base64 { media_type, data }) => {
                    json!({"inlineData": {"mimeType": media_type, "data": data}})
                }
                Part::Image(Image::Url(_)) => {
                    return Err("an image given by URL has no {to} equivalent".into())
                }
                Part::ToolCall { name, input, .. } => {
                    json!({"functionCall": {"name": opt(name), "args": input}})
                }
                Part::ToolResult { id, name, content } => {
                    let name = name.clone().or_else(|| call_name(&r.messages, id)).ok_or_else(
                        || "a tool result whose call is not in the conversation has no {to} equivalent".to_string(),
                    )?;
                    json!({"functionResponse": {"name": name, "response": {"output": content}}})
                }
            });
        }
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "model",
        };
        contents.push(json!({"role": role, "parts": parts}));
    }
    out.insert("contents".into(), Value::Array(contents));
    let mut gen = Map::new();
    r.put_sampling(
        &mut gen,
        &SamplingNames {
            max_tokens: Some("maxOutputTokens"),
            top_p: "topP",
            stop: Some("stopSequences"),
        },
    );
    if !gen.is_empty() {
        out.insert("generationConfig".into(), Value::Object(gen));
    }
    if let Some(tools) = &r.tools {
        let decls: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                f.insert("name".into(), opt(&t.name));
                if let Some(d) = &t.description {
                    f.insert("description".into(), json!(d));
                }
                if let Some(p) = &t.parameters {
                    f.insert("parametersJsonSchema".into(), p.clone());
                }
                Value::Object(f)
            })
            .collect();
        out.insert("tools".into(), json!([{"functionDeclarations": decls}]));
    }
    if let Some(c) = &r.tool_choice {
        let cfg = match c {
            ToolChoice::Auto => json!({"mode": "AUTO"}),
            ToolChoice::Any => json!({"mode": "ANY"}),
            ToolChoice::None => json!({"mode": "NONE"}),
            ToolChoice::Tool(n) => json!({"mode": "ANY", "allowedFunctionNames": [opt(n)]}),
        };
        out.insert("toolConfig".into(), json!({"functionCallingConfig": cfg}));
    }
    Ok(out)
}

/// The name of the call a result answers (Gemini matches them by name).
fn call_name(messages: &[Message], id: &Option<String>) -> Option<String> {
    let id = id.as_ref()?;
    messages
        .iter()
        .flat_map(|m| &m.content)
        .find_map(|p| match p {
            Part::ToolCall {
                id: Some(c), name, ..
            } if c == id => name.clone(),
            _ => None,
        })
}

// ---- request in (the round trip's other half) ------------------------------

/// A `generateContent` body, in canonical form.
pub(crate) fn request_in(body: &Map<String, Value>) -> Result<Request, Refusal> {
    let mut r = Request::default();
    for (k, v) in body {
        match k.as_str() {
            "contents" | "systemInstruction" | "model" => {}
            "generationConfig" => {
                for (g, x) in v.as_object().into_iter().flatten() {
                    match g.as_str() {
                        "maxOutputTokens" => r.max_tokens = x.as_u64(),
                        "temperature" => r.temperature = x.as_number().cloned(),
                        "topP" => r.top_p = x.as_number().cloned(),
                        "stopSequences" => {
                            r.stop = x.as_array().map(|a| {
                                a.iter()
                                    .filter_map(|s| s.as_str().map(str::to_string))
                                    .collect()
                            })
                        }
                        other => return Err(no_equivalent(&format!("generationConfig.{other}"))),
                    }
                }
            }
            "tools" => {
                let mut tools = Vec::new();
                for t in v.as_array().into_iter().flatten() {
                    let Some(decls) = t.get("functionDeclarations").and_then(Value::as_array)
                    else {
                        return Err("a built-in tool has no {to} equivalent".into());
                    };
                    for d in decls {
                        tools.push(Tool {
                            name: str_of(d, "name"),
                            description: str_of(d, "description"),
                            parameters: d
                                .get("parametersJsonSchema")
                                .or(d.get("parameters"))
                                .cloned(),
                        });
                    }
                }
                r.tools = Some(tools);
            }
            "toolConfig" => {
                let c = v
                    .get("functionCallingConfig")
                    .cloned()
                    .unwrap_or(Value::Null);
                let names = c.get("allowedFunctionNames").and_then(Value::as_array);
                r.tool_choice = Some(match c.get("mode").and_then(Value::as_str) {
                    Some("AUTO") => ToolChoice::Auto,
                    Some("NONE") => ToolChoice::None,
                    Some("ANY") => match names.map(Vec::as_slice) {
                        Some([one]) => ToolChoice::Tool(one.as_str().map(str::to_string)),
                        _ => ToolChoice::Any,
                    },
                    _ => return Err(no_equivalent("toolConfig")),
                });
            }
            other => return Err(no_equivalent(other)),
        }
    }
    if let Some(s) = body.get("systemInstruction") {
        let text: String = s
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        r.system.push(text);
    }
    for (i, c) in body
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .enumerate()
    {
        let role = match c.get("role").and_then(Value::as_str) {
            Some("model") => Role::Assistant,
            _ => Role::User,
        };
        let mut parts = Vec::new();
        for p in c
            .get("parts")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            parts.push(part_in(p, i, parts.len())?);
        }
        r.messages.push(Message {
            role,
            content: parts,
        });
    }
    Ok(r)
}

fn part_in(p: &Value, i: usize, n: usize) -> Result<Part, Refusal> {
    if let Some(t) = p.get("text").and_then(Value::as_str) {
        return Ok(Part::Text(t.to_string()));
    }
    if let Some(d) = p.get("inlineData") {
        return Ok(Part::Image(Image::Base64 {
            media_type: str_of(d, "mimeType").unwrap_or_default(),
            data: str_of(d, "data").unwrap_or_default(),
        }));
    }
    if let Some(f) = p.get("functionCall") {
        return Ok(Part::ToolCall {
            id: str_of(f, "id"),
            name: str_of(f, "name"),
            input: f.get("args").cloned().unwrap_or_else(|| json!({})),
        });
    }
    if let Some(f) = p.get("functionResponse") {
        let content = match f.pointer("/response/output") {
            Some(Value::String(s)) => s.clone(),
            _ => f.get("response").map(Value::to_string).unwrap_or_default(),
        };
        return Ok(Part::ToolResult {
            id: str_of(f, "id"),
            name: str_of(f, "name"),
            content,
        });
    }
    let _ = n;
    Err(format!(
        "`contents[{i}]`: a part that has no {{to}} equivalent"
    ))
}

// ---- answers ---------------------------------------------------------------

fn finish_in(f: &str, calls: bool) -> StopReason {
    match f {
        "MAX_TOKENS" => StopReason::MaxTokens,
        "SAFETY"
        | "RECITATION"
        | "BLOCKLIST"
        | "PROHIBITED_CONTENT"
        | "SPII"
        | "IMAGE_SAFETY"
        | "IMAGE_PROHIBITED_CONTENT"
        | "IMAGE_RECITATION" => StopReason::ContentFilter,
        _ if calls => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

fn finish_out(s: StopReason) -> &'static str {
    match s {
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter => "SAFETY",
        _ => "STOP",
    }
}

fn usage_in(v: &Value) -> Option<Usage> {
    let u = v.get("usageMetadata")?;
    let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
    Some(Usage {
        input: n("promptTokenCount"),
        output: n("candidatesTokenCount").saturating_add(n("thoughtsTokenCount")),
    })
}

/// The parts of the first candidate that the canonical form carries
/// (thoughts are left out); tool calls without an id get `call_{n}`.
fn parts_of(v: &Value, calls_so_far: usize) -> Vec<Part> {
    let mut out = Vec::new();
    for p in v
        .pointer("/candidates/0/content/parts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if p.get("thought").and_then(Value::as_bool) == Some(true) {
            continue;
        }
        if let Some(t) = p.get("text").and_then(Value::as_str) {
            out.push(Part::Text(t.to_string()));
        } else if let Some(f) = p.get("functionCall") {
            let n = calls_so_far
                + out
                    .iter()
                    .filter(|p| matches!(p, Part::ToolCall { .. }))
                    .count();
            out.push(Part::ToolCall {
                id: Some(str_of(f, "id").unwrap_or_else(|| format!("call_{n}"))),
                name: str_of(f, "name"),
                input: f.get("args").cloned().unwrap_or_else(|| json!({})),
            });
        }
    }
    out
}

/// A whole answer, in canonical form.
pub(crate) fn response_in(v: &Value) -> Response {
    let content = parts_of(v, 0);
    let calls = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    let stop = match v
        .pointer("/candidates/0/finishReason")
        .and_then(Value::as_str)
    {
        Some(f) => finish_in(f, calls),
        // A prompt blocked before any answer.
        None if v.pointer("/promptFeedback/blockReason").is_some() => StopReason::ContentFilter,
        None => finish_in("STOP", calls),
    };
    Response {
        id: str_of(v, "responseId"),
        model: str_of(v, "modelVersion"),
        content,
        stop,
        usage: usage_in(v).unwrap_or_default(),
    }
}

/// A canonical answer as a `GenerateContentResponse`.
pub(crate) fn response_out(r: &Response) -> Value {
    let parts: Vec<Value> = r
        .content
        .iter()
        .filter_map(|p| match p {
            Part::Text(t) => Some(json!({"text": t})),
            Part::ToolCall { id, name, input } => {
                Some(json!({"functionCall": {"id": opt(id), "name": opt(name), "args": input}}))
            }
            _ => None,
        })
        .collect();
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": finish_out(r.stop), "index": 0}],
        "usageMetadata": {"promptTokenCount": r.usage.input, "candidatesTokenCount": r.usage.output,
                          "totalTokenCount": r.usage.input.saturating_add(r.usage.output)},
        "modelVersion": opt(&r.model),
        "responseId": opt(&r.id),
    })
}

// ---- streams ---------------------------------------------------------------

/// `streamGenerateContent?alt=sse` chunks → canonical events.
#[derive(Debug, Default)]
pub(crate) struct StreamIn {
    started: bool,
    calls: usize,
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
                id: str_of(&v, "responseId"),
                model: str_of(&v, "modelVersion"),
                input_tokens: None,
            });
        }
        for p in parts_of(&v, self.calls) {
            match p {
                Part::Text(t) if !t.is_empty() => out.push(StreamEvent::Text(t)),
                Part::ToolCall { id, name, input } => {
                    let index = self.calls as u64;
                    self.calls += 1;
                    out.push(StreamEvent::ToolStart { index, id, name });
                    out.push(StreamEvent::ToolArgs {
                        index,
                        fragment: input.to_string(),
                    });
                }
                _ => {}
            }
        }
        if let Some(u) = usage_in(&v) {
            out.push(StreamEvent::Usage {
                input: Some(u.input),
                output: Some(u.output),
            });
        }
        if let Some(f) = v
            .pointer("/candidates/0/finishReason")
            .and_then(Value::as_str)
        {
            out.push(StreamEvent::Finish(finish_in(f, self.calls > 0)));
        }
        out
    }
}

/// Whether a chunk ends the answer (it has a `finishReason`, or the
/// prompt was blocked).
pub(crate) fn is_last_chunk(e: &Event) -> bool {
    serde_json::from_str::<Value>(&e.data).is_ok_and(|v| {
        v.pointer("/candidates/0/finishReason")
            .is_some_and(|f| !f.is_null())
            || v.pointer("/promptFeedback/blockReason").is_some()
    })
}
