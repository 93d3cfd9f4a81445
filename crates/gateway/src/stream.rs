//! Streaming: server-sent events from the upstream, relayed (translated
//! when the protocols differ) to the client.
//!
//! The runner fails over before the first byte reaches the client: the
//! attempt function returns once the upstream's first content is in
//! ([`super::upstream::Started`]). After that, the stream is the client's.
//! It is complete when the protocol says so (issue 32 item 1): every
//! choice's `finish_reason` (OpenAI; `data: [DONE]` is optional, and a
//! body left open after the finish is ended after a short grace) or
//! `message_stop` (Anthropic). An upstream that breaks off before that —
//! a connection reset, a stall past `idleMs`, the whole attempt past
//! `totalMs`, the end of the body, an error event — is classified and
//! recorded on the profile (a cooldown) as if the runner had seen it, and
//! then the next candidate of the chain is asked to **finish the same
//! answer** in the same client stream ([`super::continuation`],
//! [`super::splice`]). The client learns who finished it from an SSE
//! comment (`: x-failover-continued: back/model-b (prefill) after
//! prim/model-a broke off`, with any notice as `: x-failover-notice:`),
//! ignored by SDKs, and from `model` in OpenAI chunks. When no candidate
//! can finish it, or the answer is not plain text, the stream ends with an
//! error event in the client protocol's own shape, carrying the first
//! break's message —
//!
//! ```text
//! OpenAI     data: {"error": {"message": "…", "type": "server_error", "code": null}}
//! Anthropic  event: error
//!            data: {"type": "error", "error": {"type": "api_error", "message": "…"}}
//! ```
//!
//! A client that goes away drops the relay, which drops the upstream body
//! and so closes that connection.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::json;

use failover::{Cause, ProviderFailure, Runner};

use super::continuation::Continuer;
use super::metrics::Metrics;
use super::protocol::{upstream_message, Protocol};
use super::splice::{Ledger, Mismatch, Splice};
use super::sse::{error_event_failure, is_error_event, is_malformed, MALFORMED_EVENT};
use super::translate::{Event, StreamTranslator};
use super::upstream::{BodyStream, Started};

fn is_terminal(upstream: Protocol, e: &Event) -> bool {
    match upstream {
        Protocol::OpenAi => e.data.trim() == "[DONE]",
        Protocol::Responses => {
            matches!(
                e.event.as_deref(),
                Some("response.completed" | "response.incomplete")
            ) || (e.event.is_none()
                && (e.data.contains("\"response.completed\"")
                    || e.data.contains("\"response.incomplete\"")))
        }
        // Gemini has no end marker: its last chunk carries the finish
        // (`Source::complete`), and the end of the body ends it.
        Protocol::Gemini => false,
        // Bedrock's `metadata` (usage) comes last, after `messageStop`.
        Protocol::Bedrock => e.event.as_deref() == Some("metadata"),
        Protocol::Anthropic => {
            e.event.as_deref() == Some("message_stop")
                || (e.event.is_none() && e.data.contains("\"message_stop\""))
        }
    }
}

/// The client's error event for a message; `seq` is a Responses client's
/// next `sequence_number` (one past the last it was sent, issue 44 item 9).
pub(crate) fn client_error_event(client: Protocol, message: &str, seq: u64) -> Event {
    match client {
        Protocol::OpenAi => Event::data(
            json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
                .to_string(),
        ),
        Protocol::Anthropic => Event::named(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        ),
        // The documented `error` event, with the error also as an object
        // so that the OpenAI SDKs raise it (docs/protocols.md).
        Protocol::Responses | Protocol::Gemini | Protocol::Bedrock => Event::named(
            "error",
            &json!({"type": "error", "code": "server_error", "message": message, "param": null,
                    "sequence_number": seq,
                    "error": {"type": "server_error", "code": "server_error", "message": message}}),
        ),
    }
}

/// Records a failure that came after the first byte: classified by the
/// run's engine and marked on the profile with the run's policy.
pub(crate) struct Recorder {
    pub runner: Arc<Runner>,
    /// The set the run was on: its redactor knows every agent's secrets.
    pub set: Arc<super::reload::ActiveSet>,
    pub provider: String,
    pub model: String,
    pub profile_id: Option<String>,
    pub metrics: Arc<Metrics>,
    /// `model` as a metric label (`other` when the config does not name it).
    pub model_label: String,
}

impl Recorder {
    /// Records the failure; returns the text the client may see (the
    /// upstream's own message when it has one, else the failure's text,
    /// without any stored secret in any encoding, R16.11) and the reason.
    async fn failed(&self, failure: &ProviderFailure) -> (String, String) {
        let (p, m) = (self.provider.as_str(), self.model.as_str());
        // A failed write is the state's health's to report.
        let reason = self
            .runner
            .record_late_failure(p, m, self.profile_id.as_deref(), failure)
            .await;
        self.metrics
            .attempt(p, &self.model_label, "failed_mid_stream", &reason);
        // A stream that had started and broke: `stream_cut`, unless a
        // timer ended it (`deadline`, from its `ETIMEDOUT`).
        let cause = failure.effective_cause().unwrap_or(Cause::StreamCut).name();
        self.metrics.failure_cause(p, &reason, cause);
        let redactor = self.set.redactor().await;
        let text = redactor.scrub(&failure.text()).into_owned();
        tracing::warn!(
            target: "failover::serve",
            provider = p,
            model = m,
            profile = self.profile_id.as_deref().unwrap_or(""),
            reason = %reason,
            cause,
            detail = %text.chars().take(400).collect::<String>(),
            "stream_failed_after_first_byte"
        );
        let shown = match failure.body.as_deref().and_then(upstream_message) {
            Some((m, _)) => redactor.scrub(&m).into_owned(),
            None => text,
        };
        (shown, reason)
    }
}

/// After an OpenAI stream's last `finish_reason`, the body is given this
/// long to end (or to bring its usage chunk) before the answer is taken
/// as complete and the connection dropped.
const FINISH_GRACE: Duration = Duration::from_secs(2);
/// The same, when usage was asked for and has not come yet.
const USAGE_GRACE: Duration = Duration::from_secs(5);
/// While a restarted answer's text is held back, an SSE comment goes to
/// the client at most this often (SDKs ignore comments).
const KEEPALIVE: Duration = Duration::from_secs(5);

/// Which choices of an OpenAI stream have finished (issue 32 item 1): the
/// protocol's own end of an answer is every choice's `finish_reason`;
/// `data: [DONE]` is optional.
#[derive(Debug, Default)]
pub(crate) struct Finish {
    /// Choice indices seen (below 64; more choices than that are not
    /// tracked and never complete early).
    seen: u64,
    finished: u64,
    untracked: bool,
    /// A usage chunk arrived.
    pub usage: bool,
    /// A choice finished with `finish_reason: "error"` (an in-band error).
    pub error: bool,
}

impl Finish {
    /// Reads one upstream OpenAI event.
    pub(crate) fn note(&mut self, e: &Event) {
        #[derive(serde::Deserialize)]
        struct Chunk<'a> {
            #[serde(default, borrow)]
            choices: Vec<Choice<'a>>,
            #[serde(default)]
            usage: Option<serde::de::IgnoredAny>,
        }
        #[derive(serde::Deserialize)]
        struct Choice<'a> {
            #[serde(default)]
            index: u64,
            #[serde(default, borrow)]
            finish_reason: Option<std::borrow::Cow<'a, str>>,
        }
        let Ok(c) = serde_json::from_str::<Chunk<'_>>(&e.data) else {
            return;
        };
        if c.usage.is_some() {
            self.usage = true;
        }
        for ch in c.choices {
            if ch.index >= 64 {
                self.untracked = true;
                continue;
            }
            self.seen |= 1 << ch.index;
            match ch.finish_reason.as_deref() {
                None => {}
                Some("error") => self.error = true,
                Some(_) => self.finished |= 1 << ch.index,
            }
        }
    }

    /// Every choice seen has finished.
    pub(crate) fn complete(&self) -> bool {
        !self.untracked && !self.error && self.seen != 0 && self.finished & self.seen == self.seen
    }
}

/// The upstream stream being relayed.
pub(crate) struct Source {
    body: BodyStream,
    parser: super::sse::Framing,
    pending: VecDeque<Event>,
    translator: StreamTranslator,
    upstream: Protocol,
    idle: Duration,
    /// When the last event that is not a ping came (issue 44 item 6):
    /// `idleMs` runs from it, so comments and pings keep nothing open.
    last_content: tokio::time::Instant,
    deadline: tokio::time::Instant,
    started: Instant,
    finish: Finish,
    /// Gemini: the chunk with the finish came.
    last_chunk: bool,
    /// The upstream was asked for a usage chunk.
    usage_asked: bool,
    client_wants_usage: bool,
    /// The credentials the call sent (masked in the client's events).
    secrets: Vec<String>,
    /// The gateway's budget of buffered bytes, and what this stream holds
    /// of it for an event not yet whole (issue 44 item 2).
    pub(crate) budget: Option<super::upstream::Buffers>,
    held: super::upstream::Held,
}

/// An unfinished event smaller than this is not charged to the budget
/// (every stream holds a partial line now and then).
const UNCHARGED_EVENT_BYTES: usize = 64 << 10;

impl Source {
    pub(crate) fn new(
        s: Started,
        upstream: Protocol,
        client: Protocol,
        client_wants_usage: bool,
        idle: Duration,
        total: Duration,
    ) -> Self {
        Source {
            budget: None,
            held: None,
            secrets: s.secrets,
            body: s.body,
            parser: s.parser,
            pending: s.first.into(),
            translator: StreamTranslator::new(upstream, client, client_wants_usage),
            upstream,
            idle,
            last_content: tokio::time::Instant::now(),
            deadline: tokio::time::Instant::from_std(s.started) + total,
            started: s.started,
            finish: Finish::default(),
            last_chunk: false,
            // The gateway asks an OpenAI upstream for usage whenever it
            // translates for another protocol's client (`translate`).
            usage_asked: upstream == Protocol::OpenAi
                && (client_wants_usage || client != Protocol::OpenAi),
            client_wants_usage,
        }
    }

    /// The answer is complete by the protocol's own markers but the body
    /// has not ended (OpenAI: every choice finished).
    fn complete(&self) -> bool {
        match self.upstream {
            Protocol::OpenAi => self.finish.complete(),
            Protocol::Gemini | Protocol::Bedrock => self.last_chunk,
            _ => false,
        }
    }
}

/// The relay of one stream (see the module documentation).
pub(crate) struct Relay {
    src: Source,
    client: Protocol,
    done: bool,
    recorder: Recorder,
    /// How to continue the answer when the stream breaks (issue 32);
    /// `None` when this request's answers are never continued.
    cont: Option<Box<Continuer>>,
    /// What reached the client (kept when `cont` is set).
    ledger: Ledger,
    /// The continuation being relayed, when one is.
    splice: Option<Splice>,
    /// The client's text of the first break: the error event, if the
    /// answer cannot be finished, says what broke it (never a later
    /// candidate's refusal).
    first_break: Option<String>,
    /// When bytes last went to the client.
    last_sent: Instant,
    /// Held for as long as the stream runs (the concurrency limits: the
    /// gateway's, and the client key's).
    permit: Option<super::Permits>,
    /// Tokens the client's events reported (R18.8): summed over the
    /// sources already finished, and the largest running total of the
    /// current one.
    tokens: Tokens,
    /// A Responses client's largest `sequence_number` sent so far.
    last_seq: Option<u64>,
    /// Issue 44 item 8: the `failover` object the first event of a
    /// continuation carries, so that a client (its SDK keeps unknown
    /// fields) can tell a continued answer; the SSE comment says it too.
    continued: Option<serde_json::Value>,
}

/// A stream's token usage as its events report it.
#[derive(Clone, Copy, Default)]
struct Tokens {
    done: (u64, u64),
    current: (u64, u64),
}

impl Tokens {
    fn see(&mut self, (p, c): (u64, u64)) {
        self.current = (self.current.0.max(p), self.current.1.max(c));
    }

    /// The current source ended (a continuation follows).
    fn next_source(&mut self) {
        self.done = (
            self.done.0.saturating_add(self.current.0),
            self.done.1.saturating_add(self.current.1),
        );
        self.current = (0, 0);
    }
}

impl Drop for Relay {
    /// The stream's tokens go to its client key once, however it ended.
    fn drop(&mut self) {
        let Some(slot) = self.permit.as_ref().and_then(|p| p.1.as_ref()) else {
            return;
        };
        self.tokens.next_source();
        let (p, c) = self.tokens.done;
        slot.record_tokens(p, c);
        self.recorder.metrics.client_tokens(slot.name(), p, c);
    }
}

impl Relay {
    pub(crate) fn new(
        src: Source,
        client: Protocol,
        recorder: Recorder,
        cont: Option<Box<Continuer>>,
        permit: Option<super::Permits>,
    ) -> Self {
        // Issue 44 item 1: the continuation ledger's budget.
        let budget = cont
            .as_ref()
            .map_or(0, |c| c.set.settings.continuation_max_bytes);
        Relay {
            src,
            client,
            done: false,
            recorder,
            cont,
            ledger: Ledger::bounded(client, budget),
            splice: None,
            first_break: None,
            last_sent: Instant::now(),
            permit,
            tokens: Tokens::default(),
            last_seq: None,
            continued: None,
        }
    }

    /// The stream broke: the failure is recorded on the profile, then the
    /// next candidate is asked to finish the answer; when none can, the
    /// client gets the error event.
    async fn cut(&mut self, failure: ProviderFailure) -> Bytes {
        let (text, reason) = self.recorder.failed(&failure).await;
        if let Some(sp) = &self.splice {
            self.recorder
                .metrics
                .continuation(sp.mode().name(), "broken");
        }
        let first = self.first_break.get_or_insert(text).clone();
        // The broken body is closed now, not when the relay ends.
        self.src.body = Box::pin(futures_util::stream::empty());
        let Some(cont) = self.cont.as_mut() else {
            return self.error_event(&first);
        };
        if !self.ledger.continuable() {
            let why = if self.ledger.over_budget() {
                "over_budget"
            } else {
                "not_continuable"
            };
            self.recorder.metrics.continuation("none", why);
            return self.error_event(&first);
        }
        let broken = format!("{}/{}", self.recorder.provider, self.recorder.model);
        match cont.run(&self.ledger.text, reason).await {
            Ok(out) => {
                let by = out.model_ref();
                if let Ok(m) = failover::ModelRef::parse(&by) {
                    cont.served.push(m);
                }
                if let Some(d) = out.deferred {
                    // A failed write is the state's health's to report.
                    let _ = self.recorder.runner.settle(d).await;
                }
                let c = out.value;
                tracing::info!(
                    target: "failover::serve",
                    from = %broken,
                    to = %by,
                    mode = c.mode.name(),
                    delivered_bytes = self.ledger.text.len(),
                    "stream_continued"
                );
                let mut comment = format!(
                    ": x-failover-continued: {by} ({}) after {broken} broke off\n",
                    c.mode.name()
                );
                for n in &out.notices {
                    comment.push_str(&format!(": x-failover-notice: {n}\n"));
                }
                comment.push('\n');
                self.splice = Some(Splice::new(self.client, c.mode, &self.ledger));
                self.tokens.next_source();
                self.continued = Some(json!({"continued": {
                    "from": broken, "by": by, "mode": c.mode.name(),
                    "deliveredBytes": self.ledger.text.len(),
                }}));
                let budget = self.src.budget.take();
                self.src = Source::new(
                    c.started,
                    c.upstream,
                    self.client,
                    self.src.client_wants_usage,
                    c.timeouts.idle,
                    c.timeouts.total,
                );
                self.src.budget = budget;
                self.recorder.provider = out.provider.clone();
                self.recorder.model = out.model.clone();
                self.recorder.profile_id = out.profile_id.clone();
                self.recorder.model_label =
                    cont.set.model_label(&out.provider, &out.model).to_string();
                self.last_sent = Instant::now();
                Bytes::from(comment)
            }
            Err(e) => {
                tracing::warn!(
                    target: "failover::serve",
                    from = %broken,
                    attempts = e.attempts().len(),
                    "stream_not_continued"
                );
                self.recorder.metrics.continuation("any", "failed");
                self.error_event(&first)
            }
        }
    }

    /// Issue 44 item 2: an event not yet whole is held in memory; past
    /// [`UNCHARGED_EVENT_BYTES`] it takes its size from the gateway's
    /// budget, and when the budget has no room the stream ends with the
    /// error event (the gateway's limit, not the provider's failure:
    /// nothing is recorded on the profile).
    fn charge_unfinished(&mut self) -> Option<Bytes> {
        let n = self.src.parser.buffered();
        if n <= UNCHARGED_EVENT_BYTES {
            self.src.held = None;
            return None;
        }
        let budget = self.src.budget.clone()?;
        let Err(over) = budget.cover(&mut self.src.held, n) else {
            return None;
        };
        self.src.body = Box::pin(futures_util::stream::empty());
        self.src.parser = super::sse::Framing::Sse(Default::default());
        tracing::warn!(
            target: "failover::serve",
            provider = %self.recorder.provider,
            model = %self.recorder.model,
            event_bytes = n,
            "stream_over_budget"
        );
        let text = format!(
            "{}; the upstream's event of more than {} KiB was not read",
            budget.over_text(over, "upstream data"),
            n >> 10
        );
        Some(self.error_event(&text))
    }

    /// The `sequence_number` of the next Responses event.
    fn next_seq(&self) -> u64 {
        self.last_seq.map_or(0, |n| n.saturating_add(1))
    }

    fn error_event(&mut self, text: &str) -> Bytes {
        self.done = true;
        Bytes::from(client_error_event(self.client, text, self.next_seq()).encode())
    }

    /// Client events on their way out: through the splice of a
    /// continuation, noted in the ledger, encoded. A continuation that
    /// does not match ends the stream with the first break's error.
    fn deliver(&mut self, out: Vec<Event>) -> Bytes {
        let out = match &mut self.splice {
            None => out,
            Some(sp) => {
                let mut all = Vec::with_capacity(out.len());
                for e in out {
                    match sp.push(e) {
                        Ok(evs) => all.extend(evs),
                        Err(Mismatch) => {
                            let mode = sp.mode().name();
                            self.recorder.metrics.continuation(mode, "mismatch");
                            tracing::warn!(
                                target: "failover::serve",
                                provider = %self.recorder.provider,
                                model = %self.recorder.model,
                                "continuation_mismatch"
                            );
                            self.src.body = Box::pin(futures_util::stream::empty());
                            let mut bytes = encode(&all);
                            let text = self.first_break.clone().unwrap_or_default();
                            let seq = self.next_seq();
                            bytes.push_str(&client_error_event(self.client, &text, seq).encode());
                            self.done = true;
                            return Bytes::from(bytes);
                        }
                    }
                }
                all
            }
        };
        let mut out = out;
        // Issue 44 item 17: a whole copy of the credential sent.
        if !self.src.secrets.is_empty() {
            for e in &mut out {
                if let Some(m) = super::upstream::mask_sent(e.data.as_bytes(), &self.src.secrets) {
                    e.data = String::from_utf8_lossy(&m).into_owned();
                }
            }
        }
        if let Some(first) = out.first_mut() {
            if let Some(note) = self.continued.take() {
                mark_continued(first, note);
            }
        }
        if self.cont.is_some() && self.ledger.continuable() {
            for e in &out {
                self.ledger.observe(e);
            }
        }
        if self.client == Protocol::Responses {
            for e in &out {
                if let Some(n) = sequence_number(&e.data) {
                    self.last_seq = Some(self.last_seq.map_or(n, |m| m.max(n)));
                }
            }
        }
        if self.permit.as_ref().is_some_and(|p| p.1.is_some()) {
            for e in &out {
                if let Some(u) = super::keys::stream_usage_of(&e.data) {
                    self.tokens.see(u);
                }
            }
        }
        Bytes::from(encode(&out))
    }

    /// The upstream ended (or went quiet, or broke) after its answer was
    /// complete: the client gets the protocol's end as if `[DONE]` had
    /// come, and the attempt is a success.
    fn finish_clean(&mut self) -> Option<Bytes> {
        let out = self.src.translator.push(Event::data("[DONE]"));
        let bytes = self.deliver(out);
        if !self.done {
            self.end();
        }
        Some(bytes)
    }

    fn end(&mut self) {
        self.done = true;
        self.recorder.metrics.upstream_latency(
            &self.recorder.provider,
            self.src.started.elapsed().as_secs_f64(),
        );
        if let Some(sp) = &self.splice {
            self.recorder
                .metrics
                .continuation(sp.mode().name(), "completed");
        }
    }

    /// The next bytes for the client; `None` at the end.
    pub(crate) async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some(e) = self.src.pending.pop_front() {
                if is_malformed(&e) {
                    return Some(self.cut(ProviderFailure::message(MALFORMED_EVENT)).await);
                }
                if is_error_event(&e) {
                    return Some(self.cut(error_event_failure(&e)).await);
                }
                if (self.src.upstream == Protocol::Gemini
                    && crate::canonical::gemini::is_last_chunk(&e))
                    || (self.src.upstream == Protocol::Bedrock
                        && e.event.as_deref() == Some("messageStop"))
                {
                    self.src.last_chunk = true;
                }
                let terminal = is_terminal(self.src.upstream, &e);
                if self.src.upstream == Protocol::OpenAi && !terminal {
                    self.src.finish.note(&e);
                    if self.src.finish.error {
                        let f = ProviderFailure::message(
                            "upstream ended the answer with `finish_reason: error`",
                        )
                        .with_body(e.data.clone());
                        return Some(self.cut(f).await);
                    }
                }
                let out = self.src.translator.push(e);
                if out.is_empty() {
                    if terminal {
                        self.end();
                    }
                    continue;
                }
                let bytes = self.deliver(out);
                if terminal && !self.done {
                    self.end();
                }
                if bytes.is_empty() {
                    // A restart's text held back: a comment now and then
                    // keeps the client's read timeout from firing.
                    if self.last_sent.elapsed() >= KEEPALIVE {
                        self.last_sent = Instant::now();
                        return Some(Bytes::from_static(b": continuing\n\n"));
                    }
                    continue;
                }
                self.last_sent = Instant::now();
                return Some(bytes);
            }
            let complete = self.src.complete();
            let wait = if complete {
                let grace = if self.src.usage_asked && !self.src.finish.usage {
                    USAGE_GRACE
                } else {
                    FINISH_GRACE
                };
                tokio::time::Instant::now() + self.src.idle.min(grace)
            } else {
                self.src.last_content + self.src.idle
            }
            .min(self.src.deadline);
            let next = tokio::time::timeout_at(wait, self.src.body.next()).await;
            // Issue 32 item 1: whatever ends the body after a complete
            // answer (its end, silence, a reset) ends the stream cleanly.
            if complete && !matches!(next, Ok(Some(Ok(_)))) {
                return self.finish_clean();
            }
            match next {
                Err(_) => {
                    let f = if tokio::time::Instant::now() >= self.src.deadline {
                        ProviderFailure::message(
                            "upstream timed out: the answer did not finish within totalMs",
                        )
                    } else {
                        ProviderFailure::message(format!(
                            "upstream timed out: the stream stalled for {} ms",
                            self.src.idle.as_millis()
                        ))
                    }
                    .with_code("ETIMEDOUT");
                    return Some(self.cut(f).await);
                }
                Ok(None) => {
                    let f = ProviderFailure::message(
                        "upstream stream ended before the answer was complete (connection reset)",
                    );
                    return Some(self.cut(f).await);
                }
                Ok(Some(Err(_))) => {
                    let f = ProviderFailure::message(
                        "upstream connection reset in the middle of the stream",
                    );
                    return Some(self.cut(f).await);
                }
                Ok(Some(Ok(chunk))) => match self.src.parser.push(&chunk) {
                    Ok(events) => {
                        if events.iter().any(|e| !is_ping(e)) {
                            self.src.last_content = tokio::time::Instant::now();
                        }
                        self.src.pending.extend(events);
                        if let Some(bytes) = self.charge_unfinished() {
                            return Some(bytes);
                        }
                    }
                    Err(msg) => return Some(self.cut(ProviderFailure::message(msg)).await),
                },
            }
        }
    }

    /// The relay as a response body stream.
    pub(crate) fn into_stream(
        self,
    ) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
        futures_util::stream::unfold(self, |mut r| async move {
            r.next_chunk().await.map(|b| (Ok(b), r))
        })
    }
}

/// Adds the `failover` object to a client event that is a JSON object
/// (anything else is left as it is).
fn mark_continued(e: &mut Event, note: serde_json::Value) {
    if let Ok(serde_json::Value::Object(mut v)) = serde_json::from_str(&e.data) {
        v.insert("failover".into(), note);
        e.data = serde_json::Value::Object(v).to_string();
    }
}

/// A Responses event's `sequence_number`, read without parsing the event
/// (a key can only appear unescaped as a key; text holding it is escaped).
fn sequence_number(data: &str) -> Option<u64> {
    const KEY: &str = "\"sequence_number\":";
    let at = data.find(KEY)? + KEY.len();
    let digits = data[at..].trim_start();
    let end = digits
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(digits.len());
    digits[..end].parse().ok()
}

/// A keep-alive event (Anthropic's `ping`): like a comment, it does not
/// count as the stream moving.
fn is_ping(e: &Event) -> bool {
    e.event.as_deref() == Some("ping")
}

fn encode(events: &[Event]) -> String {
    let mut text = String::new();
    for ev in events {
        text.push_str(&ev.encode());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::error_event_status;

    // Issue 32 item 1: an OpenAI answer is complete when every choice
    // has its finish_reason, `[DONE]` or not.
    #[test]
    fn finish_reasons_complete_an_openai_answer() {
        let mut f = Finish::default();
        assert!(!f.complete());
        f.note(&Event::data(
            r#"{"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null},{"index":1,"delta":{"content":"b"}}]}"#,
        ));
        f.note(&Event::data(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"#,
        ));
        assert!(!f.complete(), "choice 1 is still open");
        f.note(&Event::data(
            r#"{"choices":[{"index":1,"delta":{},"finish_reason":"length"}]}"#,
        ));
        assert!(f.complete() && !f.usage);
        f.note(&Event::data(
            r#"{"choices":[],"usage":{"prompt_tokens":1}}"#,
        ));
        assert!(f.complete() && f.usage);
        let mut e = Finish::default();
        e.note(&Event::data(
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"error"}]}"#,
        ));
        assert!(e.error && !e.complete());
    }

    #[test]
    fn error_events_of_both_protocols() {
        let a = Event::named(
            "error",
            &json!({"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}),
        );
        assert!(is_error_event(&a));
        assert_eq!(error_event_status(&a), Some(529));
        let o = Event::data(r#"{"error":{"message":"boom","code":502}}"#);
        assert!(is_error_event(&o));
        assert_eq!(error_event_status(&o), Some(502));
        assert!(!is_error_event(&Event::data(r#"{"choices":[]}"#)));
        assert!(client_error_event(Protocol::Anthropic, "x", 0)
            .encode()
            .starts_with("event: error\n"));
    }
}
