//! OpenAI Responses (`openai-responses`, `azure-openai-responses`, and the
//! client endpoint `POST /v1/responses`): `POST {baseUrl}/responses`;
//! a stream of typed events (`response.created` …
//! `response.output_text.delta` … `response.completed`), no `[DONE]`.
//! docs/protocols.md has the shapes and their sources.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::{
    no_equivalent, now_secs, opt, str_of, Image, Message, Part, Refusal, Request, Response, Role,
    SamplingNames, StopReason, StreamEvent, Tool, ToolChoice, Usage,
};
use crate::sse::Event;

/// The protocol's name in refusals.
pub(crate) const NAME: &str = "OpenAI Responses";

// ---- request in ------------------------------------------------------------

/// A Responses body, in canonical form.
pub(crate) fn request_in(body: &Map<String, Value>) -> Result<Request, Refusal> {
    let mut r = Request::default();
    for (k, v) in body {
        match k.as_str() {
            "model" | "input" | "instructions" | "stream_options" => {}
            "max_output_tokens" => r.max_tokens = v.as_u64(),
            "temperature" => r.temperature = v.as_number().cloned(),
            "top_p" => r.top_p = v.as_number().cloned(),
            "stream" => r.stream = v.as_bool(),
            "user" => match v.as_str() {
                Some(u) => r.user = Some(u.to_string()),
                None => return Err(no_equivalent("user")),
            },
            // Not storing an answer changes nothing of it.
            "store" if v.as_bool() == Some(false) => {}
            "text"
                if v.pointer("/format/type").and_then(Value::as_str) == Some("text")
                    || v.get("format").is_none() && v.as_object().is_some_and(|o| o.is_empty()) => {
            }
            "tools" => {
                let mut tools = Vec::new();
                for t in v.as_array().into_iter().flatten() {
                    if t.get("type").and_then(Value::as_str) != Some("function") {
                        return Err(
                            "a built-in tool (web search, file search, …) has no {to} equivalent"
                                .into(),
                        );
                    }
                    tools.push(Tool {
                        name: str_of(t, "name"),
                        description: str_of(t, "description"),
                        parameters: t.get("parameters").cloned(),
                    });
                }
                r.tools = Some(tools);
            }
            "tool_choice" => {
                r.tool_choice = Some(match v {
                    Value::String(s) if s == "auto" => ToolChoice::Auto,
                    Value::String(s) if s == "required" => ToolChoice::Any,
                    Value::String(s) if s == "none" => ToolChoice::None,
                    Value::Object(o)
                        if o.get("type").and_then(Value::as_str) == Some("function") =>
                    {
                        ToolChoice::Tool(o.get("name").and_then(Value::as_str).map(str::to_string))
                    }
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
    match body.get("instructions") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) => r.system.push(s.clone()),
        Some(_) => return Err(no_equivalent("instructions")),
    }
    match body.get("input") {
        Some(Value::String(s)) => r.messages.push(Message {
            role: Role::User,
            content: vec![Part::Text(s.clone())],
        }),
        Some(Value::Array(items)) => {
            for (i, item) in items.iter().enumerate() {
                item_in(&mut r, item, i)?;
            }
        }
        _ => return Err("`input` has an unknown shape".into()),
    }
    Ok(r)
}

fn item_in(r: &mut Request, item: &Value, i: usize) -> Result<(), Refusal> {
    let ty = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match ty {
        "message" => {
            let role = item.get("role").and_then(Value::as_str).unwrap_or("");
            let parts = match item.get("content") {
                Some(Value::String(s)) => vec![Part::Text(s.clone())],
                Some(Value::Array(a)) => a
                    .iter()
                    .map(|p| content_in(p, i))
                    .collect::<Result<Vec<_>, _>>()?,
                _ => return Err(format!("`input[{i}].content` has an unknown shape")),
            };
            match role {
                "system" | "developer" => {
                    let mut text = String::new();
                    for p in parts {
                        match p {
                            Part::Text(t) => text.push_str(&t),
                            _ => {
                                return Err(format!(
                                    "`input[{i}]`: a system message that is not text has no {{to}} equivalent"
                                ))
                            }
                        }
                    }
                    r.system.push(text);
                }
                "user" => r.messages.push(Message {
                    role: Role::User,
                    content: parts,
                }),
                "assistant" => r.messages.push(Message {
                    role: Role::Assistant,
                    content: parts,
                }),
                other => {
                    return Err(format!(
                        "message role `{}` has no {{to}} equivalent",
                        super::quoted(other)
                    ))
                }
            }
        }
        "function_call" => {
            let args = item
                .get("arguments")
                .and_then(Value::as_str)
                .unwrap_or("{}");
            let input: Value = serde_json::from_str(args)
                .map_err(|_| format!("`input[{i}].arguments` are not a JSON object"))?;
            Request::push_merged(
                &mut r.messages,
                Role::Assistant,
                vec![Part::ToolCall {
                    id: str_of(item, "call_id"),
                    name: str_of(item, "name"),
                    input,
                }],
            );
        }
        "function_call_output" => {
            let content = match item.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Array(a)) => {
                    let mut t = String::new();
                    for p in a {
                        match content_in(p, i)? {
                            Part::Text(x) => t.push_str(&x),
                            _ => {
                                return Err(format!(
                                    "`input[{i}].output`: only text has a {{to}} equivalent"
                                ))
                            }
                        }
                    }
                    t
                }
                _ => String::new(),
            };
            r.messages.push(Message {
                role: Role::User,
                content: vec![Part::ToolResult {
                    id: str_of(item, "call_id"),
                    name: None,
                    content,
                }],
            });
        }
        other => {
            return Err(format!(
                "`input[{i}]`: an item of type `{}` has no {{to}} equivalent",
                super::quoted(other)
            ))
        }
    }
    Ok(())
}

fn content_in(p: &Value, i: usize) -> Result<Part, Refusal> {
    match p.get("type").and_then(Value::as_str) {
        Some("input_text" | "output_text") => Ok(Part::Text(
            p.get("text")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        )),
        Some("input_image") => {
            let url = p.get("image_url").and_then(Value::as_str).unwrap_or("");
            Image::from_url(url).map(Part::Image).ok_or_else(|| {
                format!("`input[{i}]`: an image that is neither a data URL nor an http(s) URL")
            })
        }
        other => Err(format!(
            "`input[{i}]`: content part `{}` has no {{to}} equivalent",
            other.unwrap_or("?")
        )),
    }
}

// ---- request out -----------------------------------------------------------

/// A canonical request as a Responses body (without `model`).
pub(crate) fn request_out(r: &Request) -> Result<Map<String, Value>, Refusal> {
    let mut out = Map::new();
    if r.stop.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(no_equivalent("stop"));
    }
    // `stop` was refused above.
    r.put_sampling(
        &mut out,
        &SamplingNames {
            max_tokens: Some("max_output_tokens"),
            top_p: "top_p",
            stop: None,
        },
    );
    if let Some(s) = r.stream {
        out.insert("stream".into(), Value::Bool(s));
    }
    if let Some(u) = &r.user {
        out.insert("user".into(), json!(u));
    }
    // A translated request is not kept by the provider: the client did not
    // ask for it (Chat Completions and Messages keep nothing to fetch).
    out.insert("store".into(), Value::Bool(false));
    if let Some(tools) = &r.tools {
        let list: Vec<Value> = tools
            .iter()
            .map(|t| {
                let mut f = Map::new();
                f.insert("type".into(), json!("function"));
                f.insert("name".into(), opt(&t.name));
                if let Some(d) = &t.description {
                    f.insert("description".into(), json!(d));
                }
                f.insert(
                    "parameters".into(),
                    t.parameters.clone().unwrap_or(json!({"type": "object"})),
                );
                Value::Object(f)
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
                ToolChoice::Tool(n) => json!({"type": "function", "name": opt(n)}),
            },
        );
    }
    if r.parallel_tool_calls == Some(false) {
        out.insert("parallel_tool_calls".into(), Value::Bool(false));
    }
    if !r.system.is_empty() {
        out.insert("instructions".into(), json!(r.system.join("\n\n")));
    }
    let mut input = Vec::new();
    for m in &r.messages {
        match m.role {
            Role::User => {
                let mut parts = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => parts.push(json!({"type": "input_text", "text": t})),
                        Part::Image(img) => parts.push(
                            json!({"type": "input_image", "image_url": img.to_url(), "detail": "auto"}),
                        ),
                        Part::ToolResult { id, content, .. } => input.push(json!({
                            "type": "function_call_output", "call_id": opt(id), "output": content,
                        })),
                        Part::ToolCall { .. } => {
                            return Err("a tool call in a user turn has no {to} equivalent".into())
                        }
                    }
                }
                if !parts.is_empty() {
                    input.push(json!({"type": "message", "role": "user", "content": parts}));
                }
            }
            Role::Assistant => {
                let mut parts = Vec::new();
                for p in &m.content {
                    match p {
                        Part::Text(t) => {
                            parts.push(json!({"type": "output_text", "text": t, "annotations": []}))
                        }
                        Part::ToolCall {
                            id,
                            name,
                            input: args,
                        } => {
                            if !parts.is_empty() {
                                input.push(json!({"type": "message", "role": "assistant",
                                    "content": std::mem::take(&mut parts)}));
                            }
                            input.push(json!({
                                "type": "function_call", "call_id": opt(id), "name": opt(name),
                                "arguments": args.to_string(),
                            }));
                        }
                        _ => return Err(
                            "an image or tool result in an assistant turn has no {to} equivalent"
                                .into(),
                        ),
                    }
                }
                if !parts.is_empty() {
                    input.push(json!({"type": "message", "role": "assistant", "content": parts}));
                }
            }
        }
    }
    out.insert("input".into(), Value::Array(input));
    Ok(out)
}

// ---- answers ---------------------------------------------------------------

fn stop_of(v: &Value, has_calls: bool) -> StopReason {
    match v.get("status").and_then(Value::as_str) {
        Some("incomplete") => match v
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str)
        {
            Some("content_filter") => StopReason::ContentFilter,
            _ => StopReason::MaxTokens,
        },
        _ if has_calls => StopReason::ToolUse,
        _ => StopReason::EndTurn,
    }
}

fn usage_of(v: &Value) -> Usage {
    Usage {
        input: super::u64_of(v, "/usage/input_tokens").unwrap_or(0),
        output: super::u64_of(v, "/usage/output_tokens").unwrap_or(0),
    }
}

/// A whole answer (a `response` object), in canonical form.
pub(crate) fn response_in(v: &Value) -> Response {
    let mut content = Vec::new();
    for item in v
        .get("output")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match item.get("type").and_then(Value::as_str) {
            Some("message") => {
                for p in item
                    .get("content")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if p.get("type").and_then(Value::as_str) == Some("output_text") {
                        if let Some(t) = p.get("text").and_then(Value::as_str) {
                            content.push(Part::Text(t.to_string()));
                        }
                    }
                }
            }
            Some("function_call") => {
                let args = item
                    .get("arguments")
                    .and_then(Value::as_str)
                    .unwrap_or("{}");
                content.push(Part::ToolCall {
                    id: str_of(item, "call_id"),
                    name: str_of(item, "name"),
                    input: serde_json::from_str(args).unwrap_or_else(|_| json!({})),
                });
            }
            _ => {}
        }
    }
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall { .. }));
    Response {
        id: str_of(v, "id"),
        model: str_of(v, "model"),
        stop: stop_of(v, has_calls),
        usage: usage_of(v),
        content,
    }
}

fn response_id(id: Option<&str>) -> String {
    super::prefixed("resp_", id)
}

fn usage_out(u: Usage) -> Value {
    json!({
        "input_tokens": u.input, "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": u.output, "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.input.saturating_add(u.output),
    })
}

fn status_out(stop: StopReason) -> (&'static str, Value) {
    match stop {
        StopReason::MaxTokens => ("incomplete", json!({"reason": "max_output_tokens"})),
        StopReason::ContentFilter => ("incomplete", json!({"reason": "content_filter"})),
        _ => ("completed", Value::Null),
    }
}

/// The `response` object around an output.
fn envelope(
    id: &str,
    model: &Option<String>,
    created: u64,
    status: &str,
    details: Value,
    output: Vec<Value>,
    usage: Value,
) -> Value {
    json!({
        "id": id, "object": "response", "created_at": created, "status": status,
        "error": null, "incomplete_details": details, "instructions": null,
        "max_output_tokens": null, "model": opt(model), "output": output,
        "parallel_tool_calls": true, "previous_response_id": null,
        "temperature": null, "top_p": null, "tool_choice": "auto", "tools": [],
        "truncation": "disabled", "usage": usage, "metadata": {},
    })
}

/// A canonical answer as a `response` object.
pub(crate) fn response_out(r: &Response) -> Value {
    let id = response_id(r.id.as_deref());
    let mut output = Vec::new();
    let text = r.text();
    if !text.is_empty() {
        output.push(message_item(
            &format!("msg_{}", id.trim_start_matches("resp_")),
            &text,
            "completed",
        ));
    }
    for p in &r.content {
        if let Part::ToolCall {
            id: call,
            name,
            input,
        } = p
        {
            output.push(json!({
                "type": "function_call", "id": format!("fc_{}", output.len()),
                "call_id": opt(call), "name": opt(name), "arguments": input.to_string(),
                "status": "completed",
            }));
        }
    }
    let (status, details) = status_out(r.stop);
    envelope(
        &id,
        &r.model,
        now_secs(),
        status,
        details,
        output,
        usage_out(r.usage),
    )
}

fn message_item(id: &str, text: &str, status: &str) -> Value {
    json!({"type": "message", "id": id, "status": status, "role": "assistant",
           "content": [{"type": "output_text", "text": text, "annotations": []}]})
}

// ---- streams ---------------------------------------------------------------

/// Responses events → canonical events.
#[derive(Debug, Default)]
pub(crate) struct StreamIn {
    started: bool,
    ended: bool,
    calls: bool,
}

impl StreamIn {
    pub(crate) fn push(&mut self, e: &Event) -> Vec<StreamEvent> {
        if e.data.trim() == "[DONE]" {
            return self.end();
        }
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let ty = v.get("type").and_then(Value::as_str).unwrap_or("");
        if !self.started && ty.starts_with("response.") {
            self.started = true;
            let r = v.get("response").cloned().unwrap_or(Value::Null);
            out.push(StreamEvent::Start {
                id: str_of(&r, "id"),
                model: str_of(&r, "model"),
                input_tokens: None,
            });
        }
        match ty {
            "response.output_text.delta" => {
                if let Some(d) = v.get("delta").and_then(Value::as_str) {
                    out.push(StreamEvent::Text(d.to_string()));
                }
            }
            "response.output_item.added" => {
                let item = v.get("item").cloned().unwrap_or(Value::Null);
                if item.get("type").and_then(Value::as_str) == Some("function_call") {
                    self.calls = true;
                    let index = v.get("output_index").and_then(Value::as_u64).unwrap_or(0);
                    out.push(StreamEvent::ToolStart {
                        index,
                        id: str_of(&item, "call_id"),
                        name: str_of(&item, "name"),
                    });
                    if let Some(a) = item
                        .get("arguments")
                        .and_then(Value::as_str)
                        .filter(|a| !a.is_empty())
                    {
                        out.push(StreamEvent::ToolArgs {
                            index,
                            fragment: a.to_string(),
                        });
                    }
                }
            }
            "response.function_call_arguments.delta" => {
                out.push(StreamEvent::ToolArgs {
                    index: v.get("output_index").and_then(Value::as_u64).unwrap_or(0),
                    fragment: v
                        .get("delta")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_string(),
                });
            }
            "response.completed" | "response.incomplete" => {
                let r = v.get("response").cloned().unwrap_or(Value::Null);
                let u = usage_of(&r);
                out.push(StreamEvent::Usage {
                    input: Some(u.input),
                    output: Some(u.output),
                });
                out.push(StreamEvent::Finish(stop_of(&r, self.calls)));
                out.extend(self.end());
            }
            _ => {}
        }
        out
    }

    fn end(&mut self) -> Vec<StreamEvent> {
        if std::mem::replace(&mut self.ended, true) {
            Vec::new()
        } else {
            vec![StreamEvent::End]
        }
    }
}

/// One output item of a rendered stream.
#[derive(Debug)]
struct Item {
    /// `msg_…` or `fc_…`.
    id: String,
    call: Option<(Option<String>, Option<String>)>,
    /// The text or the arguments so far.
    text: String,
    done: bool,
}

impl Item {
    fn value(&self, status: &str) -> Value {
        match &self.call {
            None => message_item(&self.id, &self.text, status),
            Some((call_id, name)) => json!({
                "type": "function_call", "id": self.id, "call_id": opt(call_id),
                "name": opt(name), "arguments": self.text, "status": status,
            }),
        }
    }
}

/// Canonical events → Responses events, in the order the SDKs check
/// (docs/protocols.md): `response.created` first, each item added before
/// its deltas and done before `response.completed`, whose `output` holds
/// every item whole; one stable `resp_…` id.
#[derive(Debug, Default)]
pub(crate) struct StreamOut {
    seq: u64,
    id: String,
    model: Option<String>,
    created: u64,
    started: bool,
    items: Vec<Item>,
    /// Canonical tool index → output index.
    tools: HashMap<u64, usize>,
    /// The output index of the message item taking text, while open.
    text_item: Option<usize>,
    stop: StopReason,
    usage: Usage,
    ended: bool,
}

impl StreamOut {
    fn event(&mut self, ty: &str, mut v: Value) -> Event {
        if let Some(o) = v.as_object_mut() {
            o.insert("type".into(), json!(ty));
            o.insert("sequence_number".into(), json!(self.seq));
        }
        self.seq += 1;
        Event::named(ty, &v)
    }

    fn snapshot(&self, status: &str, details: Value, usage: Value) -> Value {
        let output = self.items.iter().map(|i| i.value("completed")).collect();
        envelope(
            &self.id,
            &self.model,
            self.created,
            status,
            details,
            output,
            usage,
        )
    }

    fn start(&mut self, id: Option<String>, model: Option<String>, out: &mut Vec<Event>) {
        if self.started {
            return;
        }
        self.started = true;
        self.id = response_id(id.as_deref());
        self.model = model;
        self.created = now_secs();
        let r = envelope(
            &self.id,
            &self.model,
            self.created,
            "in_progress",
            Value::Null,
            Vec::new(),
            Value::Null,
        );
        let e = self.event("response.created", json!({"response": r.clone()}));
        out.push(e);
        let e = self.event("response.in_progress", json!({"response": r}));
        out.push(e);
    }

    fn close(&mut self, index: usize, out: &mut Vec<Event>) {
        if self.items[index].done {
            return;
        }
        self.items[index].done = true;
        let id = self.items[index].id.clone();
        let text = self.items[index].text.clone();
        if self.items[index].call.is_none() {
            let e = self.event("response.output_text.done", json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []}));
            out.push(e);
            let e = self.event(
                "response.content_part.done",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                "part": {"type": "output_text", "text": text, "annotations": []}}),
            );
            out.push(e);
        } else {
            let name = self.items[index].call.as_ref().and_then(|c| c.1.clone());
            let e = self.event("response.function_call_arguments.done", json!({"item_id": id, "output_index": index, "name": opt(&name), "arguments": text}));
            out.push(e);
        }
        let item = self.items[index].value("completed");
        let e = self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
        out.push(e);
        if self.text_item == Some(index) {
            self.text_item = None;
        }
    }

    fn close_all(&mut self, out: &mut Vec<Event>) {
        for i in 0..self.items.len() {
            self.close(i, out);
        }
    }

    pub(crate) fn push(&mut self, e: StreamEvent) -> Vec<Event> {
        let mut out = Vec::new();
        if self.ended {
            return out;
        }
        match e {
            StreamEvent::Start {
                id,
                model,
                input_tokens,
            } => {
                if let Some(n) = input_tokens {
                    self.usage.input = n;
                }
                self.start(id, model, &mut out);
            }
            StreamEvent::Text(t) => {
                self.start(None, None, &mut out);
                if t.is_empty() {
                    return out;
                }
                let index = match self.text_item {
                    Some(i) => i,
                    None => {
                        self.close_all(&mut out);
                        let i = self.items.len();
                        let id = format!("msg_{}_{i}", self.id.trim_start_matches("resp_"));
                        self.items.push(Item {
                            id: id.clone(),
                            call: None,
                            text: String::new(),
                            done: false,
                        });
                        self.text_item = Some(i);
                        let item = self.items[i].value("in_progress");
                        let mut item = item;
                        item["content"] = json!([]);
                        let e = self.event(
                            "response.output_item.added",
                            json!({"output_index": i, "item": item}),
                        );
                        out.push(e);
                        let e = self.event(
                            "response.content_part.added",
                            json!({"item_id": id, "output_index": i, "content_index": 0,
                            "part": {"type": "output_text", "text": "", "annotations": []}}),
                        );
                        out.push(e);
                        i
                    }
                };
                self.items[index].text.push_str(&t);
                let id = self.items[index].id.clone();
                let e = self.event("response.output_text.delta", json!({"item_id": id, "output_index": index, "content_index": 0, "delta": t, "logprobs": []}));
                out.push(e);
            }
            StreamEvent::ToolStart { index, id, name } => {
                self.start(None, None, &mut out);
                if self.tools.contains_key(&index) {
                    return out;
                }
                self.close_all(&mut out);
                let i = self.items.len();
                self.items.push(Item {
                    id: format!("fc_{}_{i}", self.id.trim_start_matches("resp_")),
                    call: Some((id, name)),
                    text: String::new(),
                    done: false,
                });
                self.tools.insert(index, i);
                let item = self.items[i].value("in_progress");
                let e = self.event(
                    "response.output_item.added",
                    json!({"output_index": i, "item": item}),
                );
                out.push(e);
            }
            StreamEvent::ToolArgs { index, fragment } => {
                let Some(&i) = self.tools.get(&index) else {
                    return out;
                };
                if fragment.is_empty() {
                    return out;
                }
                self.items[i].text.push_str(&fragment);
                let id = self.items[i].id.clone();
                let e = self.event(
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": i, "delta": fragment}),
                );
                out.push(e);
            }
            StreamEvent::Usage { input, output } => {
                if let Some(i) = input {
                    self.usage.input = i;
                }
                if let Some(o) = output {
                    self.usage.output = o;
                }
            }
            StreamEvent::Finish(stop) => self.stop = stop,
            StreamEvent::End => {
                self.start(None, None, &mut out);
                self.close_all(&mut out);
                self.ended = true;
                let (status, details) = status_out(self.stop);
                let r = self.snapshot(status, details, usage_out(self.usage));
                let ty = if status == "completed" {
                    "response.completed"
                } else {
                    "response.incomplete"
                };
                let e = self.event(ty, json!({"response": r}));
                out.push(e);
            }
        }
        out
    }
}
