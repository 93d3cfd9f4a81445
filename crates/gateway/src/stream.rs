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
use serde_json::json;

use failover::{ProviderFailure, Runner};

use super::metrics::Metrics;
use super::protocol::{upstream_message, Protocol};
use super::sse::{error_event_status, is_error_event, is_malformed, SseParser, MALFORMED_EVENT};
use super::translate::{Event, StreamTranslator};
use super::upstream::{BodyStream, Started};

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
pub(crate) fn client_error_event(client: Protocol, message: &str) -> Event {
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
    /// Records the failure; returns the text the client may see: the
    /// upstream's own message when it has one, else the failure's text,
    /// without any stored secret in any encoding (R16.11).
    async fn failed(&self, failure: &ProviderFailure) -> String {
        let (p, m) = (self.provider.as_str(), self.model.as_str());
        // A failed write is the state's health's to report.
        let reason = self
            .runner
            .record_late_failure(p, m, self.profile_id.as_deref(), failure)
            .await;
        self.metrics
            .attempt(p, &self.model_label, "failed_mid_stream", &reason);
        let redactor = self.set.redactor().await;
        let text = redactor.scrub(&failure.text()).into_owned();
        tracing::warn!(
            target: "failover::serve",
            provider = p,
            model = m,
            profile = self.profile_id.as_deref().unwrap_or(""),
            reason = %reason,
            detail = %text.chars().take(400).collect::<String>(),
            "stream_failed_after_first_byte"
        );
        match failure.body.as_deref().and_then(upstream_message) {
            Some((m, _)) => redactor.scrub(&m).into_owned(),
            None => text,
        }
    }
}

/// The relay of one stream (see the module documentation).
pub(crate) struct Relay {
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
    pub(crate) fn new(
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
    pub(crate) async fn next_chunk(&mut self) -> Option<Bytes> {
        loop {
            if self.done {
                return None;
            }
            if let Some(e) = self.pending.pop_front() {
                if is_malformed(&e) {
                    return Some(self.cut(ProviderFailure::message(MALFORMED_EVENT)).await);
                }
                if is_error_event(&e) {
                    let mut failure = ProviderFailure::default().with_body(e.data.clone());
                    failure.status = error_event_status(&e);
                    return Some(self.cut(failure).await);
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
    pub(crate) fn into_stream(
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
