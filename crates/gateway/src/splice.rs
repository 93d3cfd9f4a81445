//! Continuing a broken stream in the client's protocol (issue 32): what
//! reached the client ([`Ledger`]), and the next candidate's events
//! rewritten so the client sees one answer ([`Splice`]).
//!
//! Both work on *client-protocol* events (after translation), so each is
//! written once per client protocol, not per pair of protocols.
//!
//! - OpenAI client: the continuation's chunks keep the original `id` and
//!   `created`; its role chunk is dropped; `model` names the candidate
//!   that finished the answer.
//! - Anthropic client: the continuation's `message_start` is dropped; its
//!   first text block is merged into the text block left open (same
//!   index), later blocks take the next free indices, so indices stay
//!   monotonic as the SDKs require.
//!
//! Text is aligned by mode:
//!
//! - **prefill**: the candidate was sent the delivered text `D`, trimmed of
//!   trailing whitespace (`P`), as a trailing assistant message. A
//!   continuation that echoes `P` (at least 8 bytes) has it dropped;
//!   leading whitespace already delivered (`D` after `P`) is not repeated.
//! - **restart**: the candidate was sent the original request. Its text is
//!   held until it has passed `D`, compared byte for byte, and only the
//!   rest forwarded; the first byte that differs, a tool call, or an end
//!   before `D` is passed is a [`Mismatch`]: never a wrong splice.

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::protocol::Protocol;
use super::translate::Event;

/// Echoes shorter than this are not looked for (a short prefill could
/// begin a continuation by chance).
const MIN_ECHO: usize = 8;

/// What reached the client so far.
#[derive(Debug)]
pub(crate) struct Ledger {
    client: Protocol,
    /// The text delivered: choice 0's content (OpenAI), the text blocks'
    /// deltas (Anthropic).
    pub text: String,
    /// Nothing but text was delivered (no tool call, no reasoning or
    /// thinking, no second choice).
    pub only_text: bool,
    /// The client was told the answer finished (`finish_reason`,
    /// `message_delta`).
    pub finished: bool,
    id: Option<Value>,
    created: Option<Value>,
    /// Anthropic: the open block (index, is text) and the next index.
    open: Option<(u64, bool)>,
    next_index: u64,
    /// The most text kept for a continuation (`serve.continuation.maxBytes`,
    /// issue 44 item 1); past it the answer is not continuable and the
    /// text is let go.
    max_bytes: usize,
    /// The text went past `max_bytes`.
    over: bool,
}

impl Ledger {
    pub(crate) fn new(client: Protocol) -> Self {
        Ledger {
            client,
            text: String::new(),
            only_text: true,
            finished: false,
            id: None,
            created: None,
            open: None,
            next_index: 0,
            max_bytes: usize::MAX,
            over: false,
        }
    }

    /// The same, keeping at most `max_bytes` of text.
    pub(crate) fn bounded(client: Protocol, max_bytes: usize) -> Self {
        Ledger {
            max_bytes,
            ..Ledger::new(client)
        }
    }

    /// Whether the answer can be continued by another candidate.
    pub(crate) fn continuable(&self) -> bool {
        self.only_text && !self.finished && !self.over
    }

    /// Whether the delivered text went past the continuation budget.
    pub(crate) fn over_budget(&self) -> bool {
        self.over
    }

    /// Reads one event sent to the client.
    pub(crate) fn observe(&mut self, e: &Event) {
        self.observe_event(e);
        if self.text.len() > self.max_bytes {
            self.over = true;
            self.text = String::new();
        }
    }

    fn observe_event(&mut self, e: &Event) {
        let Ok(v) = serde_json::from_str::<Value>(&e.data) else {
            return;
        };
        match self.client {
            Protocol::OpenAi => {
                if self.id.is_none() {
                    self.id = v.get("id").cloned();
                    self.created = v.get("created").cloned();
                }
                for c in v
                    .get("choices")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    if c.get("index").and_then(Value::as_u64).unwrap_or(0) != 0 {
                        self.only_text = false;
                    }
                    if c.get("finish_reason").is_some_and(|f| !f.is_null()) {
                        self.finished = true;
                    }
                    let Some(d) = c.get("delta").and_then(Value::as_object) else {
                        continue;
                    };
                    for (k, x) in d {
                        match k.as_str() {
                            "role" => {}
                            "content" => {
                                if let Some(t) = x.as_str() {
                                    self.text.push_str(t);
                                }
                            }
                            _ if x.is_null()
                                || x.as_str() == Some("")
                                || x.as_array().is_some_and(Vec::is_empty) => {}
                            _ => self.only_text = false,
                        }
                    }
                }
            }
            Protocol::Anthropic => match v.get("type").and_then(Value::as_str) {
                Some("content_block_start") => {
                    let i = v.get("index").and_then(Value::as_u64).unwrap_or(0);
                    let text =
                        v.pointer("/content_block/type").and_then(Value::as_str) == Some("text");
                    if !text {
                        self.only_text = false;
                    }
                    if let Some(t) = v.pointer("/content_block/text").and_then(Value::as_str) {
                        self.text.push_str(t);
                    }
                    self.open = Some((i, text));
                    self.next_index = self.next_index.max(i + 1);
                }
                Some("content_block_delta") => {
                    match v.pointer("/delta/type").and_then(Value::as_str) {
                        Some("text_delta") => {
                            if let Some(t) = v.pointer("/delta/text").and_then(Value::as_str) {
                                self.text.push_str(t);
                            }
                        }
                        _ => self.only_text = false,
                    }
                }
                Some("content_block_stop") => self.open = None,
                Some("message_delta") | Some("message_stop") => self.finished = true,
                _ => {}
            },
            // Responses clients' answers are not continued
            // (`continuation::request_continuable`).
            Protocol::Responses | Protocol::Gemini | Protocol::Bedrock => self.only_text = false,
        }
    }
}

/// How the continuing candidate was asked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    Prefill,
    Restart,
}

impl Mode {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mode::Prefill => "prefill",
            Mode::Restart => "restart",
        }
    }
}

/// The continuation does not begin with the delivered text (restart), or
/// sent something other than text before it did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mismatch;

/// The rewriting of one continuation's client events.
#[derive(Debug)]
pub(crate) struct Splice {
    client: Protocol,
    mode: Mode,
    /// `D`: the text delivered before the break.
    delivered: String,
    /// `P`: what the prefill sent (`D` without trailing whitespace).
    prefill_len: usize,
    /// Restart: bytes of `D` matched so far.
    matched: usize,
    /// Prefill: the continuation's first text, held until it is aligned.
    held: String,
    /// The text is aligned: everything from here is forwarded.
    aligned: bool,
    id: Option<Value>,
    created: Option<Value>,
    /// Anthropic: the block left open by the broken stream (text), into
    /// which the continuation's first text block is merged.
    merge_into: Option<u64>,
    merged: bool,
    /// Anthropic: continuation index → client index.
    index_map: HashMap<u64, u64>,
    next_index: u64,
    /// Anthropic: the client index of the text block text goes to.
    text_block: Option<u64>,
}

/// How far a continuation's first text repeats the prefill.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Echo {
    /// All of it so far is the prefill's beginning: it may yet be all.
    Partial,
    /// It starts with the whole prefill, in its first `n` bytes.
    Whole(usize),
    /// It differs.
    No,
}

/// Whether `held` repeats `prefill`, letter case aside (a model that
/// starts over often changes the first letter's case).
fn echo(held: &str, prefill: &str) -> Echo {
    let mut h = held.char_indices();
    for pc in prefill.chars() {
        let Some((_, hc)) = h.next() else {
            return Echo::Partial;
        };
        if hc != pc && !hc.to_lowercase().eq(pc.to_lowercase()) {
            return Echo::No;
        }
    }
    Echo::Whole(h.next().map_or(held.len(), |(i, _)| i))
}

/// `D` split for a prefill: `D` without trailing whitespace.
pub(crate) fn prefill_text(delivered: &str) -> &str {
    delivered.trim_end()
}

impl Splice {
    pub(crate) fn new(client: Protocol, mode: Mode, ledger: &Ledger) -> Self {
        let delivered = ledger.text.clone();
        let prefill_len = prefill_text(&delivered).len();
        let merge_into = match ledger.open {
            Some((i, true)) => Some(i),
            _ => None,
        };
        Splice {
            client,
            mode,
            aligned: mode == Mode::Restart && delivered.is_empty(),
            delivered,
            prefill_len,
            matched: 0,
            held: String::new(),
            id: ledger.id.clone(),
            created: ledger.created.clone(),
            merge_into,
            merged: false,
            index_map: HashMap::new(),
            next_index: ledger.next_index,
            text_block: merge_into,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        self.mode
    }

    /// Aligns a piece of the continuation's text; returns what to forward.
    fn text(&mut self, t: &str) -> Result<String, Mismatch> {
        if self.aligned {
            return Ok(t.to_string());
        }
        match self.mode {
            Mode::Restart => {
                let d = self.delivered.as_bytes();
                let want = &d[self.matched..];
                let n = want.len().min(t.len());
                if t.as_bytes()[..n] != want[..n] {
                    return Err(Mismatch);
                }
                self.matched += n;
                if self.matched < d.len() {
                    return Ok(String::new());
                }
                self.aligned = true;
                // `t[..n]` equals whole characters of `D`, so `n` is a
                // character boundary of `t`; `get` keeps it panic-free.
                t.get(n..).map(str::to_string).ok_or(Mismatch)
            }
            Mode::Prefill => {
                self.held.push_str(t);
                let p = &self.delivered[..self.prefill_len];
                // It could still be an echo of the prefill (a candidate
                // that ignored it and started over, in any case): wait.
                if p.len() >= MIN_ECHO && echo(&self.held, p) == Echo::Partial {
                    return Ok(String::new());
                }
                // Only whitespace so far: wait for the first word.
                if self.held.trim_start().is_empty() {
                    return Ok(String::new());
                }
                Ok(self.align())
            }
        }
    }

    /// Prefill: the held text, with an echo of the prefill and the
    /// whitespace already delivered taken off.
    fn align(&mut self) -> String {
        self.aligned = true;
        let mut held = std::mem::take(&mut self.held);
        let p = &self.delivered[..self.prefill_len];
        if p.len() >= MIN_ECHO {
            if let Echo::Whole(n) = echo(&held, p) {
                // Issue 44 item 8: the delivered text again (`The` or
                // `the`): dropped, so the client never reads it twice.
                held.drain(..n);
                return held;
            }
        }
        let ws = &self.delivered[self.prefill_len..];
        if !ws.is_empty() {
            let lead_len = held.len() - held.trim_start().len();
            let lead = &held[..lead_len];
            if ws.starts_with(lead) {
                held.drain(..lead_len);
            } else if lead.starts_with(ws) {
                held.drain(..ws.len());
            }
        }
        held
    }

    /// At the end of the continuation's text (a finish): what is still
    /// held (prefill), or a mismatch when the delivered text was never
    /// passed (restart).
    fn at_end(&mut self) -> Result<String, Mismatch> {
        if self.aligned {
            return Ok(String::new());
        }
        match self.mode {
            Mode::Restart => Err(Mismatch),
            Mode::Prefill => Ok(self.align()),
        }
    }

    /// The client events for one client event of the continuation.
    pub(crate) fn push(&mut self, e: Event) -> Result<Vec<Event>, Mismatch> {
        if e.data.trim() == "[DONE]" {
            return match self.at_end()? {
                t if t.is_empty() => Ok(vec![e]),
                t => Ok(vec![self.openai_text_chunk(&t, None), e]),
            };
        }
        let Ok(Value::Object(v)) = serde_json::from_str::<Value>(&e.data) else {
            return Ok(vec![e]);
        };
        match self.client {
            Protocol::Anthropic => self.push_anthropic(e.event, v),
            _ => self.push_openai(v),
        }
    }

    fn openai_text_chunk(&self, t: &str, model: Option<&Value>) -> Event {
        Event::data(
            json!({
                "id": self.id, "object": "chat.completion.chunk", "created": self.created,
                "model": model.cloned().unwrap_or(Value::Null),
                "choices": [{"index": 0, "delta": {"content": t}, "finish_reason": null}],
            })
            .to_string(),
        )
    }

    fn push_openai(&mut self, mut v: Map<String, Value>) -> Result<Vec<Event>, Mismatch> {
        if let Some(id) = &self.id {
            v.insert("id".into(), id.clone());
        }
        if let Some(c) = &self.created {
            v.insert("created".into(), c.clone());
        }
        let mut before = Vec::new();
        let mut keep = v.get("usage").is_some_and(|u| !u.is_null());
        let model = v.get("model").cloned();
        if let Some(choices) = v.get_mut("choices").and_then(Value::as_array_mut) {
            for c in choices.iter_mut() {
                let finish = c.get("finish_reason").is_some_and(|f| !f.is_null());
                if let Some(d) = c.get_mut("delta").and_then(Value::as_object_mut) {
                    d.remove("role");
                    if let Some(t) = d.get("content").and_then(Value::as_str) {
                        let out = self.text(t)?;
                        if out.is_empty() {
                            d.remove("content");
                        } else {
                            d.insert("content".into(), Value::String(out));
                        }
                    }
                    let other = d.iter().any(|(_, x)| {
                        !(x.is_null()
                            || x.as_str() == Some("")
                            || x.as_array().is_some_and(Vec::is_empty))
                    });
                    if other {
                        if !self.aligned && !d.contains_key("content") {
                            // A tool call (or anything but text) before
                            // the delivered text was passed.
                            return Err(Mismatch);
                        }
                        keep = true;
                    }
                }
                if finish {
                    let rest = self.at_end()?;
                    if !rest.is_empty() {
                        before.push(self.openai_text_chunk(&rest, model.as_ref()));
                    }
                    keep = true;
                }
            }
        }
        if keep {
            before.push(Event::data(Value::Object(v).to_string()));
        }
        Ok(before)
    }

    /// The client index for a continuation block `i` (new blocks take the
    /// next free index).
    fn index_of(&mut self, i: u64) -> u64 {
        if let Some(k) = self.index_map.get(&i) {
            return *k;
        }
        let k = self.next_index;
        self.next_index += 1;
        self.index_map.insert(i, k);
        k
    }

    fn text_delta(&self, index: u64, t: &str) -> Event {
        Event::named(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": t}}),
        )
    }

    fn push_anthropic(
        &mut self,
        name: Option<String>,
        mut v: Map<String, Value>,
    ) -> Result<Vec<Event>, Mismatch> {
        let at = |v: &Map<String, Value>, a: &str, b: &str| -> Option<String> {
            v.get(a)?.get(b)?.as_str().map(str::to_string)
        };
        let ty = v
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let i = v.get("index").and_then(Value::as_u64).unwrap_or(0);
        let out = |v: Map<String, Value>| Event {
            event: name.clone(),
            data: Value::Object(v).to_string(),
        };
        match ty.as_str() {
            "message_start" => Ok(Vec::new()),
            "content_block_start" => {
                let text = at(&v, "content_block", "type").as_deref() == Some("text");
                if !text && !self.aligned {
                    return Err(Mismatch);
                }
                if text && !self.merged {
                    if let Some(k) = self.merge_into {
                        self.merged = true;
                        self.index_map.insert(i, k);
                        self.text_block = Some(k);
                        return Ok(Vec::new());
                    }
                }
                let k = self.index_of(i);
                if text {
                    self.merged = true;
                    self.text_block = Some(k);
                }
                v.insert("index".into(), k.into());
                Ok(vec![out(v)])
            }
            "content_block_delta" => {
                let k = self.index_of(i);
                v.insert("index".into(), k.into());
                let is_text = at(&v, "delta", "type").as_deref() == Some("text_delta");
                if !is_text {
                    if !self.aligned {
                        return Err(Mismatch);
                    }
                    return Ok(vec![out(v)]);
                }
                let t = at(&v, "delta", "text").unwrap_or_default();
                let t = self.text(&t)?;
                if t.is_empty() {
                    return Ok(Vec::new());
                }
                Ok(vec![self.text_delta(k, &t)])
            }
            "content_block_stop" => {
                let k = self.index_of(i);
                let mut events = Vec::new();
                if self.text_block == Some(k) {
                    let rest = self.at_end()?;
                    if !rest.is_empty() {
                        events.push(self.text_delta(k, &rest));
                    }
                }
                v.insert("index".into(), k.into());
                events.push(out(v));
                Ok(events)
            }
            "message_delta" | "message_stop" => {
                let rest = self.at_end()?;
                let mut events = Vec::new();
                if !rest.is_empty() {
                    if let Some(k) = self.text_block {
                        events.push(self.text_delta(k, &rest));
                    }
                }
                events.push(out(v));
                Ok(events)
            }
            _ => Ok(vec![out(v)]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oa(content: &str) -> Event {
        Event::data(
            json!({"id": "new", "created": 9, "model": "b", "choices": [{"index": 0, "delta": {"content": content}, "finish_reason": null}]})
                .to_string(),
        )
    }

    fn oa_finish() -> Event {
        Event::data(
            json!({"id": "new", "created": 9, "model": "b", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
                .to_string(),
        )
    }

    fn ledger_with(text: &str) -> Ledger {
        let mut l = Ledger::new(Protocol::OpenAi);
        l.observe(&Event::data(
            json!({"id": "orig", "created": 1, "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]})
                .to_string(),
        ));
        l
    }

    // Issue 44 item 1: the delivered text is kept up to the budget; past
    // it, the answer is not continuable and the text is let go.
    #[test]
    fn i44_1_the_ledger_keeps_at_most_its_budget() {
        let mut l = Ledger::bounded(Protocol::OpenAi, 10);
        let chunk = |t: &str| {
            Event::data(json!({"choices": [{"index": 0, "delta": {"content": t}}]}).to_string())
        };
        l.observe(&chunk("0123456789"));
        assert!(l.continuable() && l.text.len() == 10);
        l.observe(&chunk("a"));
        assert!(!l.continuable() && l.over_budget());
        assert_eq!(l.text.capacity(), 0, "the text was let go");
    }

    /// The text the client receives from a continuation's events.
    fn run(s: &mut Splice, events: Vec<Event>) -> Result<String, Mismatch> {
        let mut text = String::new();
        for e in events {
            for out in s.push(e)? {
                let v: Value = match serde_json::from_str(&out.data) {
                    Ok(v) => v,
                    Err(_) => continue,
                };
                assert_eq!(v["id"], "orig", "the original id is kept");
                assert_eq!(v["created"], 1);
                if let Some(t) = v
                    .pointer("/choices/0/delta/content")
                    .and_then(Value::as_str)
                {
                    text.push_str(t);
                }
            }
        }
        Ok(text)
    }

    // Issue 32 item 2, restart: the delivered text is checked exactly and
    // only the rest forwarded, across chunk boundaries and multi-byte
    // characters; a difference anywhere is a mismatch, never a splice.
    #[test]
    fn restart_forwards_only_what_follows_the_delivered_text() {
        let l = ledger_with("Héllo wo");
        let mut s = Splice::new(Protocol::OpenAi, Mode::Restart, &l);
        let got = run(
            &mut s,
            vec![oa("Hé"), oa("llo"), oa(" world"), oa("!"), oa_finish()],
        )
        .unwrap();
        assert_eq!(got, "rld!");
        let mut s = Splice::new(Protocol::OpenAi, Mode::Restart, &l);
        assert_eq!(run(&mut s, vec![oa("Hello world")]), Err(Mismatch));
        // An answer that ends before passing the delivered text.
        let mut s = Splice::new(Protocol::OpenAi, Mode::Restart, &l);
        assert_eq!(run(&mut s, vec![oa("Héllo"), oa_finish()]), Err(Mismatch));
        // A tool call before the text was passed.
        let mut s = Splice::new(Protocol::OpenAi, Mode::Restart, &l);
        let tool = Event::data(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]})
                .to_string(),
        );
        assert_eq!(run(&mut s, vec![tool]), Err(Mismatch));
    }

    // Issue 32 item 2, prefill: the continuation is forwarded; the
    // whitespace trimmed from the prefill is not doubled, and an echo of
    // the prefill is dropped.
    #[test]
    fn prefill_aligns_whitespace_and_echoes() {
        let l = ledger_with("The answer is ");
        assert_eq!(prefill_text(&l.text), "The answer is");
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &l);
        assert_eq!(
            run(&mut s, vec![oa(" "), oa(" 42"), oa("."), oa_finish()]).unwrap(),
            " 42."
        );
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &l);
        assert_eq!(run(&mut s, vec![oa("42.")]).unwrap(), "42.");
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &l);
        assert_eq!(
            run(&mut s, vec![oa("The ans"), oa("wer is 42"), oa_finish()]).unwrap(),
            " 42"
        );
        // Issue 44 item 8: a candidate that ignored the prefill and
        // started over, its first letter in another case, is not repeated.
        let l = ledger_with("The quick brown fox");
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &l);
        assert_eq!(
            run(
                &mut s,
                vec![oa("the quick "), oa("brown fox"), oa(" jumps"), oa_finish()]
            )
            .unwrap(),
            " jumps"
        );
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &l);
        assert_eq!(
            run(&mut s, vec![oa("THE QUICK BROWN FOX jumps"), oa_finish()]).unwrap(),
            " jumps"
        );
        // A different text is forwarded as it is.
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &l);
        assert_eq!(
            run(&mut s, vec![oa("the quick red"), oa_finish()]).unwrap(),
            "the quick red"
        );
        assert_eq!(echo("Ab", "abc"), Echo::Partial);
        assert_eq!(echo("ABCd", "abc"), Echo::Whole(3));
        assert_eq!(echo("abd", "abc"), Echo::No);
        assert_eq!(echo("ÉCOLE x", "école"), Echo::Whole("ÉCOLE".len()));
        // Held whitespace is flushed by the finish.
        let mut s = Splice::new(Protocol::OpenAi, Mode::Prefill, &ledger_with("Hi"));
        assert_eq!(run(&mut s, vec![oa("\n"), oa_finish()]).unwrap(), "\n");
    }

    // Issue 32 item 2: an Anthropic client sees one message: no second
    // message_start, the continuation's text in the block left open,
    // later blocks at the next indices.
    #[test]
    fn anthropic_blocks_are_merged_and_renumbered() {
        let mut l = Ledger::new(Protocol::Anthropic);
        for e in [
            json!({"type": "message_start", "message": {}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hello"}}),
        ] {
            l.observe(&Event::named(e["type"].as_str().unwrap(), &e));
        }
        assert!(l.continuable());
        assert_eq!(l.text, "Hello");
        let mut s = Splice::new(Protocol::Anthropic, Mode::Prefill, &l);
        let mut out = Vec::new();
        for e in [
            json!({"type": "message_start", "message": {}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " world"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t", "name": "f", "input": {}}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}}),
            json!({"type": "message_stop"}),
        ] {
            out.extend(
                s.push(Event::named(e["type"].as_str().unwrap(), &e))
                    .unwrap(),
            );
        }
        let seen: Vec<(String, Option<u64>)> = out
            .iter()
            .map(|e| {
                let v: Value = serde_json::from_str(&e.data).unwrap();
                (
                    v["type"].as_str().unwrap().to_string(),
                    v.get("index").and_then(Value::as_u64),
                )
            })
            .collect();
        let t = |s: &str, i: Option<u64>| (s.to_string(), i);
        assert_eq!(
            seen,
            [
                t("content_block_delta", Some(0)),
                t("content_block_stop", Some(0)),
                t("content_block_start", Some(1)),
                t("content_block_stop", Some(1)),
                t("message_delta", None),
                t("message_stop", None),
            ]
        );
        assert!(out[0].data.contains("\" world\""));
    }

    // A break inside a tool call, or after reasoning, is not continued.
    #[test]
    fn only_text_is_continued() {
        let mut l = Ledger::new(Protocol::OpenAi);
        l.observe(&Event::data(
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"a"}}]}}]}"#,
        ));
        assert!(!l.continuable());
        let mut l = Ledger::new(Protocol::Anthropic);
        l.observe(&Event::data(
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        ));
        assert!(!l.continuable());
        let mut l = ledger_with("done");
        l.observe(&oa_finish());
        assert!(!l.continuable(), "a finished answer is not continued");
    }
}
