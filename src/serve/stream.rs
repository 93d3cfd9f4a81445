//! Streaming: server-sent events from the upstream, relayed (translated
//! when the protocols differ) to the client.
//!
//! The runner fails over only before the first byte reaches the client:
//! the attempt function returns once the upstream's first event is in
//! ([`super::upstream::Started`]). After that, the stream is the client's:
//! an upstream that breaks off (connection reset, a stall past the
//! timeout, the end of the body before the protocol's last event, an
//! error event) ends the client's stream with an error event in the
//! client protocol's own shape —
//!
//! ```text
//! OpenAI     data: {"error": {"message": "…", "type": "server_error", "code": null}}
//! Anthropic  event: error
//!            data: {"type": "error", "error": {"type": "api_error", "message": "…"}}
//! ```
//!
//! — and the failure is still classified and recorded on the profile
//! (a cooldown), as if the runner had seen it. A client that goes away
//! drops the relay, which drops the upstream body and so closes that
//! connection.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};

use crate::auth::Failure;
use crate::run::{ProviderFailure, Runner};

use super::metrics::Metrics;
use super::protocol::{upstream_message, Protocol};
use super::translate::{Event, StreamTranslator};
use super::upstream::{BodyStream, Started};

/// One event may not grow past this without its blank line: a stream that
/// never ends an event is a broken upstream, not memory to spend.
const MAX_EVENT_BYTES: usize = 16 << 20;

/// Splits a byte stream into events (`text/event-stream`).
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
}

impl SseParser {
    /// The events completed by `chunk`.
    pub fn push(&mut self, chunk: &[u8]) -> Result<Vec<Event>, String> {
        self.buf
            .extend(chunk.iter().copied().filter(|b| *b != b'\r'));
        let mut out = Vec::new();
        while let Some(end) = memchr::memmem::find(&self.buf, b"\n\n") {
            let block: Vec<u8> = self.buf.drain(..end + 2).collect();
            let text = String::from_utf8_lossy(&block[..end]);
            let mut event = None;
            let mut data: Vec<&str> = Vec::new();
            for line in text.split('\n') {
                let (field, value) = match line.split_once(':') {
                    Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                    None => (line, ""),
                };
                match field {
                    "event" => event = Some(value.to_string()),
                    "data" => data.push(value),
                    _ => {}
                }
            }
            if !data.is_empty() {
                out.push(Event {
                    event,
                    data: data.join("\n"),
                });
            }
        }
        if self.buf.len() > MAX_EVENT_BYTES {
            return Err(format!(
                "upstream sent an event larger than {} MiB",
                MAX_EVENT_BYTES >> 20
            ));
        }
        Ok(out)
    }
}

/// An error event of either protocol.
pub fn is_error_event(e: &Event) -> bool {
    if e.event.as_deref() == Some("error") {
        return true;
    }
    e.data.starts_with('{')
        && serde_json::from_str::<Value>(&e.data).is_ok_and(|v| {
            v.get("error").is_some_and(|x| !x.is_null())
                || v.get("type").and_then(Value::as_str) == Some("error")
        })
}

/// The HTTP status an error event stands for, when it says.
pub fn error_event_status(e: &Event) -> Option<u16> {
    let v: Value = serde_json::from_str(&e.data).ok()?;
    let err = v.get("error")?;
    if let Some(n) = err.get("code").and_then(Value::as_u64) {
        return u16::try_from(n).ok().filter(|s| (100..600).contains(s));
    }
    Some(match err.get("type").and_then(Value::as_str)? {
        "overloaded_error" => 529,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "authentication_error" => 401,
        "permission_error" => 403,
        "invalid_request_error" => 400,
        "not_found_error" => 404,
        _ => return None,
    })
}

fn is_terminal(upstream: Protocol, e: &Event) -> bool {
    match upstream {
        Protocol::OpenAi => e.data.trim() == "[DONE]",
        Protocol::Anthropic => {
            e.event.as_deref() == Some("message_stop")
                || (e.event.is_none() && e.data.contains("\"message_stop\""))
        }
    }
}

/// The client's error event for a message.
pub fn client_error_event(client: Protocol, message: &str) -> Event {
    match client {
        Protocol::OpenAi => Event::data(
            json!({"error": {"message": message, "type": "server_error", "param": null, "code": null}})
                .to_string(),
        ),
        Protocol::Anthropic => Event::named(
            "error",
            &json!({"type": "error", "error": {"type": "api_error", "message": message}}),
        ),
    }
}

/// Records a failure that came after the first byte: classified by the
/// run's engine and marked on the profile with the run's policy.
pub struct Recorder {
    pub runner: Arc<Runner>,
    pub provider: String,
    pub model: String,
    pub profile_id: Option<String>,
    pub metrics: Arc<Metrics>,
    /// The profile's secrets, to scrub an upstream text that echoes one.
    pub secrets: Vec<String>,
    /// `model` as a metric label (`other` when the config does not name it).
    pub model_label: String,
}

impl Recorder {
    pub fn scrub(&self, text: &str) -> String {
        let mut t = text.to_string();
        for s in &self.secrets {
            if s.len() >= 6 && t.contains(s.as_str()) {
                t = t.replace(s.as_str(), "<redacted>");
            }
        }
        t
    }

    async fn failed(&self, failure: &ProviderFailure) -> String {
        let (p, m) = (self.provider.as_str(), self.model.as_str());
        let c = self
            .runner
            .engine()
            .classify(&failure.as_provider_error(p, m));
        let reason = c.reason.to_string();
        if let Some(id) = &self.profile_id {
            let f = Failure {
                reason: &reason,
                behaviour: c.behaviour,
                model: Some(m),
                reset_at: None,
            };
            let now = self.runner.now_ms();
            if let Err(e) = self.runner.mark_failure(id, p, &f, now).await {
                tracing::error!(target: "failover::serve", error = %e, "cannot record a stream failure");
            }
        }
        self.metrics
            .attempt(p, &self.model_label, "failed_mid_stream", &reason);
        let text = self.scrub(&failure.text());
        tracing::warn!(
            target: "failover::serve",
            provider = p,
            model = m,
            profile = self.profile_id.as_deref().unwrap_or(""),
            reason = %reason,
            detail = %text.chars().take(400).collect::<String>(),
            "stream_failed_after_first_byte"
        );
        text
    }
}

/// The relay of one stream (see the module documentation).
pub struct Relay {
    body: BodyStream,
    parser: SseParser,
    pending: VecDeque<Event>,
    translator: StreamTranslator,
    upstream: Protocol,
    client: Protocol,
    idle: Duration,
    deadline: tokio::time::Instant,
    started: Instant,
    done: bool,
    recorder: Recorder,
    /// Held for as long as the stream runs (the concurrency limit).
    _permit: Option<tokio::sync::OwnedSemaphorePermit>,
}

impl Relay {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        s: Started,
        upstream: Protocol,
        client: Protocol,
        client_wants_usage: bool,
        idle: Duration,
        total: Duration,
        recorder: Recorder,
        permit: Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Self {
        let deadline = tokio::time::Instant::from_std(s.started) + total;
        Relay {
            body: s.body,
            parser: s.parser,
            pending: s.first.into(),
            translator: StreamTranslator::new(upstream, client, client_wants_usage),
            upstream,
            client,
            idle,
            deadline,
            started: s.started,
            done: false,
            recorder,
            _permit: permit,
        }
    }

    async fn cut(&mut self, failure: ProviderFailure) -> Bytes {
        self.done = true;
        let text = self.recorder.failed(&failure).await;
        Bytes::from(client_error_event(self.client, &text).encode())
    }

    /// The next bytes for the client; `None` at the end.
    pub async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some(e) = self.pending.pop_front() {
                if is_error_event(&e) {
                    let failure = ProviderFailure {
                        status: error_event_status(&e),
                        body: Some(e.data.clone()),
                        ..Default::default()
                    };
                    self.done = true;
                    let text = self.recorder.failed(&failure).await;
                    let msg = upstream_message(&e.data)
                        .map(|(m, _)| self.recorder.scrub(&m))
                        .unwrap_or(text);
                    return Some(Bytes::from(client_error_event(self.client, &msg).encode()));
                }
                let terminal = is_terminal(self.upstream, &e);
                let out = self.translator.push(e);
                if terminal {
                    self.done = true;
                    self.recorder.metrics.upstream_latency(
                        &self.recorder.provider,
                        self.started.elapsed().as_secs_f64(),
                    );
                }
                if out.is_empty() {
                    continue;
                }
                let mut text = String::new();
                for ev in &out {
                    text.push_str(&ev.encode());
                }
                return Some(Bytes::from(text));
            }
            let wait = (tokio::time::Instant::now() + self.idle).min(self.deadline);
            match tokio::time::timeout_at(wait, self.body.next()).await {
                Err(_) => {
                    let f = ProviderFailure::message(format!(
                        "upstream timed out: the stream stalled for {} ms",
                        self.idle.as_millis()
                    ))
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
                Ok(Some(Ok(chunk))) => match self.parser.push(&chunk) {
                    Ok(events) => self.pending.extend(events),
                    Err(msg) => return Some(self.cut(ProviderFailure::message(msg)).await),
                },
            }
        }
    }

    /// The relay as a response body stream.
    pub fn into_stream(
        self,
    ) -> impl futures_util::Stream<Item = Result<Bytes, std::convert::Infallible>> + Send {
        futures_util::stream::unfold(self, |mut r| async move {
            r.next_chunk().await.map(|b| (Ok(b), r))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_events_across_chunks() {
        let mut p = SseParser::default();
        assert!(p.push(b"event: message_start\r\nda").unwrap().is_empty());
        let ev = p
            .push(b"ta: {\"a\":1}\r\n\r\n: comment\n\ndata: [DONE]\n\n")
            .unwrap();
        assert_eq!(
            ev,
            [
                Event {
                    event: Some("message_start".into()),
                    data: "{\"a\":1}".into()
                },
                Event::data("[DONE]")
            ]
        );
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
        assert!(client_error_event(Protocol::Anthropic, "x")
            .encode()
            .starts_with("event: error\n"));
    }
}
