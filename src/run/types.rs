//! The values that go in and out of a run: what the caller's attempt
//! function receives and returns, what every attempt and decision records,
//! and the two ways a run ends.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::classify::{Body, ProviderError};
use crate::store::Profile;

/// One model call the runner asks the caller to make.
#[derive(Clone)]
#[non_exhaustive]
pub struct Attempt {
    /// The provider to call (`openai`).
    pub provider: String,
    /// The model to ask for (`gpt-5.2`).
    pub model: String,
    /// The auth profile to use; `None` for a provider without profiles.
    pub profile_id: Option<String>,
    /// The stored credential of `profile_id`. Its secrets hide from `Debug`.
    pub profile: Option<Profile>,
    /// 1-based, over the whole run.
    pub number: usize,
    /// This attempt probes a provider whose profiles are all cooling (R10).
    pub probe: bool,
}

impl fmt::Debug for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The credential is left out entirely: even its shape says nothing
        // a log reader needs.
        f.debug_struct("Attempt")
            .field("provider", &self.provider)
            .field("model", &self.model)
            .field("profile_id", &self.profile_id)
            .field("number", &self.number)
            .field("probe", &self.probe)
            .finish_non_exhaustive()
    }
}

/// What happened on the wire, beside the reason (issue 48): the SPEC's
/// reasons keep the original's vocabulary (`timeout` covers a refused
/// connection, a 500 and an HTML 502 page), and the cause says which it
/// was. A closed list; [`ProviderFailure::effective_cause`] derives it
/// where the caller did not set it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Cause {
    /// No connection: refused, unreachable, DNS.
    Connect,
    /// The TLS handshake failed (a certificate, a protocol).
    Tls,
    /// One of the gateway's timers ran out (connect, first byte, first
    /// token, idle, total, the request's deadline).
    Deadline,
    /// The connection broke before the answer's head, or while a whole
    /// answer was read.
    ConnectionReset,
    /// A stream that had started ended or broke before its end.
    StreamCut,
    /// An HTML page where an API answer belongs (a proxy's or CDN's).
    HtmlPage,
    /// An HTTP 4xx error answer.
    Http4xx,
    /// An HTTP 5xx error answer.
    Http5xx,
    /// A 2xx answer that is an error or unusable (an error object, not JSON).
    BadAnswer,
}

impl Cause {
    /// The name used in attempt records, logs, metrics and `--explain`.
    pub fn name(self) -> &'static str {
        match self {
            Cause::Connect => "connect",
            Cause::Tls => "tls",
            Cause::Deadline => "deadline",
            Cause::ConnectionReset => "connection_reset",
            Cause::StreamCut => "stream_cut",
            Cause::HtmlPage => "html_page",
            Cause::Http4xx => "http_4xx",
            Cause::Http5xx => "http_5xx",
            Cause::BadAnswer => "bad_answer",
        }
    }
}

/// A provider error, owned, as the caller's attempt function reports it.
///
/// How to report each kind of failure (the rules then decide what it
/// means; these shapes are what the default rules expect):
///
/// | what happened | build it with |
/// |---|---|
/// | the provider answered with an error status | [`ProviderFailure::from_http`] (status, headers for `retry-after`, body) |
/// | no answer in time (connect, first byte, whole answer) | [`ProviderFailure::timeout`]: code `ETIMEDOUT`, classified `timeout` (REFERENCE a.4) |
/// | the connection failed or broke (refused, reset, DNS) | [`ProviderFailure::transport`]: a `connection …`/`network error` message, classified `timeout` (REFERENCE a.7) |
/// | a 2xx answer that is unusable (not JSON, a stream without events) | [`ProviderFailure::message`] `.with_status(status)` |
/// | an SDK error with a code or type of its own | [`ProviderFailure::message`] `.with_code(…)`, [`ProviderFailure::with_error_type`] |
///
/// Then return it as [`AttemptError::Provider`] (or with `?`: it converts).
/// A candidate that cannot take the request at all is not a provider
/// failure: return [`AttemptError::Skip`].
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ProviderFailure {
    /// The HTTP status, when the provider answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// An error code (`ETIMEDOUT`, `insufficient_quota`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// An error type (`rate_limit_error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_type: Option<String>,
    /// The error's own text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The response body, raw (JSON is parsed by the classifier).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// An exact reset time the provider reported (epoch ms, R6.7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reset_at: Option<u64>,
    /// What happened on the wire, when the caller knows it (see
    /// [`ProviderFailure::effective_cause`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

/// The text and type of an error body with the usual `{"error": "…"}` or
/// `{"error": {"message", "type"}}` shape (OpenAI and Anthropic both).
pub(crate) fn error_body_message(body: &str) -> Option<(String, Option<String>)> {
    let v: Value = serde_json::from_str(body).ok()?;
    let err = v.get("error")?;
    if let Some(s) = err.as_str() {
        return Some((s.to_string(), None));
    }
    let msg = err.get("message")?.as_str()?.to_string();
    let ty = err.get("type").and_then(Value::as_str).map(str::to_string);
    Some((msg, ty))
}

impl ProviderFailure {
    /// The message and type of an error body with the usual
    /// `{"error": "…"}` or `{"error": {"message", "type"}}` shape (OpenAI's
    /// and Anthropic's): the reading [`ProviderFailure::from_http`] and the
    /// summaries use, so a gateway's client error agrees with them.
    pub fn body_message(body: &str) -> Option<(String, Option<String>)> {
        error_body_message(body)
    }

    /// A failure with only a text.
    pub fn message(message: impl Into<String>) -> Self {
        ProviderFailure {
            message: Some(message.into()),
            ..Default::default()
        }
    }

    /// An HTTP error answer, from what an HTTP client has at hand:
    /// `status`; the response `headers` as name/value pairs — `&str` or
    /// `String` pairs, or an `&http::HeaderMap` as it is (values that are
    /// not UTF-8 are ignored) — whose `retry-after-ms` or `retry-after`
    /// wait becomes [`reset_at`], against `now_ms` (R6.7); and the `body`
    /// as received (`&[u8]`, `&str`, `Vec<u8>`, `bytes::Bytes`; lossy
    /// UTF-8; a blank body is left out). The body's own `error.message`,
    /// when it has one, becomes the message, so summaries read well; the
    /// classifier reads the body either way.
    ///
    /// [`reset_at`]: ProviderFailure::reset_at
    ///
    /// ```
    /// use failover::ProviderFailure;
    ///
    /// let f = ProviderFailure::from_http(
    ///     429,
    ///     [("Retry-After", "30")],
    ///     r#"{"error":{"message":"slow down","type":"rate_limit_error"}}"#,
    ///     1_000,
    /// );
    /// assert_eq!(f.status, Some(429));
    /// assert_eq!(f.message.as_deref(), Some("slow down"));
    /// assert_eq!(f.reset_at, Some(31_000));
    /// ```
    pub fn from_http<K: AsRef<str>, V: AsRef<[u8]>>(
        status: u16,
        headers: impl IntoIterator<Item = (K, V)>,
        body: impl AsRef<[u8]>,
        now_ms: u64,
    ) -> Self {
        let headers: Vec<(K, V)> = headers.into_iter().collect();
        let pairs: Vec<(&str, &str)> = headers
            .iter()
            .filter_map(|(k, v)| Some((k.as_ref(), std::str::from_utf8(v.as_ref()).ok()?)))
            .collect();
        let reset_at = super::requested_wait(&pairs, now_ms)
            .filter(|w| !w.is_zero())
            .map(|w| now_ms.saturating_add(w.as_millis() as u64));
        let text = String::from_utf8_lossy(body.as_ref()).into_owned();
        let message = error_body_message(&text).map(|(m, _)| m);
        ProviderFailure {
            status: Some(status),
            message,
            body: (!text.trim().is_empty()).then_some(text),
            reset_at,
            ..Default::default()
        }
    }

    /// No answer in time: `what` did not happen within `after` (`"no
    /// first byte"`). Code `ETIMEDOUT`, which the default rules classify
    /// as `timeout` (REFERENCE a.4).
    pub fn timeout(what: &str, after: std::time::Duration) -> Self {
        ProviderFailure::message(format!(
            "upstream timed out: {what} within {} ms",
            after.as_millis()
        ))
        .with_code("ETIMEDOUT")
    }

    /// The connection failed or broke before an answer: `what` says how
    /// (`"connection refused or failed"`, `"connection reset while
    /// reading the response"`, `"network error"`). The message reads
    /// `upstream <what>`, which the default rules classify as `timeout`
    /// (REFERENCE a.7). Never put a URL or header in `what`.
    pub fn transport(what: &str) -> Self {
        ProviderFailure::message(format!("upstream {what}"))
    }

    /// Sets what happened on the wire.
    pub fn with_cause(mut self, cause: Cause) -> Self {
        self.cause = Some(cause);
        self
    }

    /// What happened on the wire: the cause the caller set, else read
    /// from the code (`ETIMEDOUT` a deadline, `ECONNRESET` a reset,
    /// `ECONNREFUSED` and DNS codes a connection), else from the status
    /// (an HTML body is an `html_page`, else `http_4xx` / `http_5xx`; a
    /// 2xx status a `bad_answer`); `None` when nothing says.
    pub fn effective_cause(&self) -> Option<Cause> {
        if self.cause.is_some() {
            return self.cause;
        }
        match self.code.as_deref().map(str::to_ascii_uppercase).as_deref() {
            Some("ETIMEDOUT" | "ESOCKETTIMEDOUT") => return Some(Cause::Deadline),
            Some("ECONNRESET" | "ECONNABORTED" | "EPIPE" | "ENETRESET") => {
                return Some(Cause::ConnectionReset)
            }
            Some(
                "ECONNREFUSED" | "ENOTFOUND" | "EAI_AGAIN" | "EHOSTUNREACH" | "ENETUNREACH"
                | "EHOSTDOWN",
            ) => return Some(Cause::Connect),
            _ => {}
        }
        let status = self.status?;
        let html = [self.body.as_deref(), self.message.as_deref()]
            .into_iter()
            .flatten()
            .any(|t| {
                let t = t.trim_start().as_bytes();
                let starts = |p: &[u8]| t.get(..p.len()).is_some_and(|h| h.eq_ignore_ascii_case(p));
                starts(b"<!doctype html") || starts(b"<html")
            });
        Some(match status {
            400..=599 if html => Cause::HtmlPage,
            400..=499 => Cause::Http4xx,
            500..=599 => Cause::Http5xx,
            _ => Cause::BadAnswer,
        })
    }

    /// Sets an exact reset time the provider reported (epoch ms, R6.7).
    pub fn with_reset_at(mut self, reset_at_ms: u64) -> Self {
        self.reset_at = Some(reset_at_ms);
        self
    }

    /// Sets the error type (`rate_limit_error`).
    pub fn with_error_type(mut self, error_type: impl Into<String>) -> Self {
        self.error_type = Some(error_type.into());
        self
    }

    /// Sets the HTTP status.
    pub fn with_status(mut self, status: u16) -> Self {
        self.status = Some(status);
        self
    }

    /// Sets the provider's error code.
    pub fn with_code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// Sets the response body, raw.
    pub fn with_body(mut self, body: impl Into<String>) -> Self {
        self.body = Some(body.into());
        self
    }

    /// The borrowed form the classifier reads.
    pub fn as_provider_error<'a>(&'a self, provider: &'a str, model: &'a str) -> ProviderError<'a> {
        ProviderError {
            provider: Some(provider),
            model: Some(model),
            status: self.status,
            code: self.code.as_deref(),
            error_type: self.error_type.as_deref(),
            message: self.message.as_deref(),
            body: self.body.as_deref().map(Body::Text),
        }
    }

    /// A one-line text of the error: the message, else the body, else the
    /// status.
    pub fn text(&self) -> String {
        if let Some(m) = self.message.as_deref().filter(|m| !m.trim().is_empty()) {
            return m.trim().to_string();
        }
        if let Some(b) = self.body.as_deref().filter(|b| !b.trim().is_empty()) {
            return b.trim().to_string();
        }
        match (self.status, &self.code) {
            (Some(s), _) => format!("HTTP {s}"),
            (None, Some(c)) => c.clone(),
            (None, None) => "empty response".into(),
        }
    }
}

impl fmt::Display for ProviderFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text())
    }
}

impl std::error::Error for ProviderFailure {}

/// What an attempt function returns instead of a value.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub enum AttemptError {
    /// The provider failed; the runner classifies it.
    Provider(ProviderFailure),
    /// The session's model was switched live (R11.6, REFERENCE f): the
    /// attempt was abandoned for `provider/model`.
    LiveSessionModelSwitch {
        /// The provider switched to.
        provider: String,
        /// The model switched to.
        model: String,
    },
    /// The candidate cannot take this request at all (a gateway has no
    /// upstream for its provider, or the request uses a feature its
    /// protocol cannot express): it is skipped with this text as the
    /// recorded reason, and nothing is held against its profile.
    Skip(String),
}

impl From<ProviderFailure> for AttemptError {
    fn from(f: ProviderFailure) -> Self {
        AttemptError::Provider(f)
    }
}

/// How one attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum AttemptOutcome {
    /// The candidate answered.
    Succeeded,
    /// The candidate failed; the error was classified.
    Failed,
    /// Not tried: the candidate was skipped (cooldown, skip cache, …).
    Skipped,
    /// Abandoned for a later candidate by a live model switch.
    Switched,
    /// Failed, and asked again after a backoff: the provider's retry
    /// budget (issue 32). Nothing was marked on the profile.
    Retried,
}

/// One attempt (or skipped candidate) of a run (R14.1). Holds a profile
/// *id*, never a secret; error texts are scrubbed of every stored secret.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AttemptRecord {
    /// The candidate's provider.
    pub provider: String,
    /// The candidate's model.
    pub model: String,
    /// The auth profile used, by id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_id: Option<String>,
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
    /// The failure's reason (`rate_limit`, …), or why it was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The deciding rule's id (`None`: no rule matched, the model
    /// decided, or a skip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// Which step of the precedence gave the reason (`rule`, `model`,
    /// `status rule`, `none`; docs/model.md), for a classified failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decided_by: Option<&'static str>,
    /// The model's probability for the reason, when the model decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
    /// The HTTP status of the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// The provider's error code of the failure.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// A readable summary of the error or of why the candidate was skipped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What happened on the wire (a failed attempt's [`Cause`], by name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
    /// Whether the attempt probed a cooling provider (R10).
    pub probe: bool,
    /// When the attempt ended (epoch ms).
    pub at_ms: u64,
}

impl AttemptRecord {
    /// `provider/model`.
    pub fn model_ref(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }

    /// Counts as a failure in the summary (tried and failed, or skipped).
    pub fn is_failure(&self) -> bool {
        !matches!(self.outcome, AttemptOutcome::Succeeded)
    }
}

/// The kind of a `model_fallback_decision` event (REFERENCE g).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionKind {
    /// A candidate was skipped without a call (cooldown, disable, skip cache, …).
    SkipCandidate,
    /// A cooling candidate is probed (R10).
    ProbeCooldownCandidate,
    /// A candidate was called and failed.
    CandidateFailed,
    /// A candidate was called and answered.
    CandidateSucceeded,
    /// The session's model was switched while the run was going (R11.6).
    LiveSwitch,
    /// A candidate failed and is asked again after a backoff (the
    /// provider's retry budget, issue 32).
    RetrySameCandidate,
}

impl DecisionKind {
    /// The name in `model_fallback_decision` (`skip_candidate`, …).
    pub fn name(self) -> &'static str {
        match self {
            DecisionKind::SkipCandidate => "skip_candidate",
            DecisionKind::ProbeCooldownCandidate => "probe_cooldown_candidate",
            DecisionKind::CandidateFailed => "candidate_failed",
            DecisionKind::CandidateSucceeded => "candidate_succeeded",
            DecisionKind::LiveSwitch => "live_switch",
            DecisionKind::RetrySameCandidate => "retry_same_candidate",
        }
    }
}

/// `fallbackStepFinalOutcome` (REFERENCE g).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StepOutcome {
    /// The run goes on to the next candidate.
    NextFallback,
    /// The run answered.
    Succeeded,
    /// No candidate is left: the run fails with the summary (R14.3).
    ChainExhausted,
    /// A probe is about to run (no step is finished yet).
    Probing,
    /// The run stops on this error (a `stop` reason, a handoff, R16.8).
    Stopped,
    /// The same candidate is asked again after a backoff (issue 32).
    Retrying,
}

impl StepOutcome {
    /// The name in `fallbackStepFinalOutcome` (`next_fallback`, …).
    pub fn name(self) -> &'static str {
        match self {
            StepOutcome::NextFallback => "next_fallback",
            StepOutcome::Succeeded => "succeeded",
            StepOutcome::ChainExhausted => "chain_exhausted",
            StepOutcome::Probing => "probing",
            StepOutcome::Stopped => "stopped",
            StepOutcome::Retrying => "retrying",
        }
    }
}

/// One `model_fallback_decision` (R14.2), also emitted through `tracing`
/// with the flat `fallbackStep*` fields.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Decision {
    /// What kind of decision it was.
    pub decision: DecisionKind,
    /// `fallbackStepFromModel`.
    pub from_model: String,
    /// `fallbackStepToModel`: the next candidate, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_model: Option<String>,
    /// `fallbackStepFromFailureReason`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `fallbackStepFromFailureDetail` (≤ 400 characters, scrubbed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// `fallbackStepChainPosition` (1-based).
    pub position: usize,
    /// `fallbackStepFinalOutcome`.
    pub outcome: StepOutcome,
    /// `fallbackStepClassifiedBy`: for a failed candidate, which step of
    /// the precedence gave its reason (`rule`, `model`, `status rule`,
    /// `none`; docs/model.md).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub classified_by: Option<&'static str>,
    /// `fallbackStepModelProbability`: the model's probability, when the
    /// model decided.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probability: Option<f32>,
    /// `fallbackStepFromFailureCause`: what happened on the wire (a
    /// [`Cause`] by name), beside the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<&'static str>,
}

/// An operational message for the reply surface (R13.3): not assistant
/// content, never spoken, never a first reply slot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Notice {
    /// `↪️ Model Fallback: <fallback> (selected <primary>; <reason>)`.
    FallbackStarted {
        /// The model the session selected.
        selected: String,
        /// The fallback model that answered.
        active: String,
        /// Why the selected model did not answer.
        reason: String,
    },
    /// `↪️ Model Fallback cleared: <primary> (was <fallback>)`.
    /// The run is back on the selected model after a fallback.
    FallbackCleared {
        /// The selected model, answering again.
        selected: String,
        /// The fallback model that answered before.
        previous: String,
    },
}

impl fmt::Display for Notice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Notice::FallbackStarted {
                selected,
                active,
                reason,
            } => write!(
                f,
                "↪️ Model Fallback: {active} (selected {selected}; {reason})"
            ),
            Notice::FallbackCleared { selected, previous } => {
                write!(f, "↪️ Model Fallback cleared: {selected} (was {previous})")
            }
        }
    }
}

/// A successful run.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct RunOutput<T> {
    /// The caller's value, untouched.
    pub value: T,
    /// The provider that answered.
    pub provider: String,
    /// The model that answered.
    pub model: String,
    /// The auth profile that answered, by id.
    pub profile_id: Option<String>,
    /// Every attempt of the run, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Every decision of the run, in order (also emitted as `tracing` events).
    pub decisions: Vec<Decision>,
    /// Operational messages, separate from `value` (R13.3).
    pub notices: Vec<Notice>,
    /// The success record still to write, when the run was asked to defer
    /// it ([`super::RunRequest::defer_success_record`]) and a profile
    /// answered: pass it to [`super::Runner::settle`].
    pub deferred: Option<DeferredSuccess>,
}

/// A profile's success, not yet written (see
/// [`super::RunRequest::defer_success_record`]).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
#[must_use = "a deferred success record is lost unless it is passed to Runner::settle"]
pub struct DeferredSuccess {
    /// The profile that answered.
    pub profile_id: String,
    /// Its provider.
    pub provider: String,
    /// The model that answered.
    pub model: String,
    /// When it answered (epoch ms, the runner's clock).
    pub at_ms: u64,
}

impl<T> RunOutput<T> {
    /// `provider/model` of the answer.
    pub fn model_ref(&self) -> String {
        format!("{}/{}", self.provider, self.model)
    }
}

/// Every candidate failed (R14.3). The message is `All models failed (N):
/// provider/model: error (reason) | …` (R16.9); with one attempt it is that
/// attempt's error.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct FallbackSummaryError {
    /// Every attempt of the run, in order.
    pub attempts: Vec<AttemptRecord>,
    /// The soonest moment a candidate of the chain becomes usable, model
    /// aware (R14.4), epoch ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soonest_cooldown_expiry: Option<u64>,
    /// The session key of the run.
    pub session: String,
    /// Every decision of the run, in order.
    #[serde(skip)]
    pub decisions: Vec<Decision>,
}

impl fmt::Display for FallbackSummaryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let [only] = self.attempts.as_slice() {
            return f.write_str(only.error.as_deref().unwrap_or("failed"));
        }
        write!(f, "All models failed ({}): ", self.attempts.len())?;
        for (i, a) in self.attempts.iter().enumerate() {
            if i > 0 {
                f.write_str(" | ")?;
            }
            write!(
                f,
                "{}: {} ({})",
                a.model_ref(),
                a.error.as_deref().unwrap_or("failed"),
                a.reason
                    .as_deref()
                    .unwrap_or(crate::compile::reasons::UNCLASSIFIED)
            )?;
        }
        Ok(())
    }
}

impl std::error::Error for FallbackSummaryError {}

/// Why a run ended without a value.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The error is surfaced as it is: a reason declared `stop` or
    /// `handoff` (R9.2, R9.3), an unrecognised error on the last candidate
    /// (R16.8), or the only attempt of the run.
    /// The error of one attempt, surfaced as it is.
    #[error("{}", .error.text_scrubbed)]
    Provider {
        /// The attempt's error, with the run's attempts and decisions.
        error: Box<SurfacedError>,
    },
    /// Every candidate failed or was skipped (R14.3).
    #[error("{0}")]
    Summary(FallbackSummaryError),
    /// No chain could be built (no model selected, unknown agent).
    #[error("{0}")]
    Chain(#[from] crate::policy::ChainError),
    /// The state could not be read or written.
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
}

/// A provider error handed back to the caller unchanged.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SurfacedError {
    /// The provider of the surfaced attempt.
    pub provider: String,
    /// The model of the surfaced attempt.
    pub model: String,
    /// The original error, as the attempt function returned it (with any
    /// stored secret a provider echoed replaced by `<redacted>`, R16.11).
    pub failure: ProviderFailure,
    /// The error text with stored secrets scrubbed (what `Display` shows).
    pub text_scrubbed: String,
    /// The error's reason.
    pub reason: String,
    /// `handoff NAME` of the reason (`compaction` for context overflow).
    pub handoff: Option<String>,
    /// Every attempt of the run, in order.
    pub attempts: Vec<AttemptRecord>,
    /// Every decision of the run, in order.
    pub decisions: Vec<Decision>,
}

impl RunError {
    /// Every attempt the run made, when it got that far.
    pub fn attempts(&self) -> &[AttemptRecord] {
        match self {
            RunError::Provider { error } => &error.attempts,
            RunError::Summary(s) => &s.attempts,
            _ => &[],
        }
    }

    /// Every decision the run logged.
    pub fn decisions(&self) -> &[Decision] {
        match self {
            RunError::Provider { error } => &error.decisions,
            RunError::Summary(s) => &s.decisions,
            _ => &[],
        }
    }

    /// The reason of the surfaced error (`Provider`) or of the last attempt.
    pub fn reason(&self) -> Option<&str> {
        match self {
            RunError::Provider { error } => Some(&error.reason),
            RunError::Summary(s) => s.attempts.last().and_then(|a| a.reason.as_deref()),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 35: `from_http` takes what an HTTP client has at hand: an
    // `http::HeaderMap` as it is, `&str` or `String` pairs, and the body as
    // `&[u8]`, `&str`, `Vec<u8>` or `Bytes`.
    #[test]
    fn from_http_takes_a_header_map_and_any_body() {
        let mut map = http::HeaderMap::new();
        map.insert("retry-after", http::HeaderValue::from_static("30"));
        map.insert(
            "x-binary",
            http::HeaderValue::from_bytes(b"\xff\xfe").unwrap(),
        );
        let body = r#"{"error":{"message":"slow down"}}"#;
        let a = ProviderFailure::from_http(429, &map, bytes::Bytes::from(body), 1_000);
        let b = ProviderFailure::from_http(429, [("Retry-After", "30")], body, 1_000);
        let c = ProviderFailure::from_http(
            429,
            vec![("retry-after".to_string(), "30".to_string())],
            String::from(body).into_bytes(),
            1_000,
        );
        for f in [&a, &b, &c] {
            assert_eq!(f.reset_at, Some(31_000));
            assert_eq!(f.message.as_deref(), Some("slow down"));
        }
    }
    use std::time::Duration;

    fn reason(f: &ProviderFailure, provider: &str) -> String {
        static ENGINE: std::sync::OnceLock<crate::classify::Engine> = std::sync::OnceLock::new();
        let engine = ENGINE.get_or_init(crate::classify::Engine::builtin);
        engine
            .classify(&f.as_provider_error(provider, "m"))
            .reason
            .to_string()
    }

    // R6.7, REFERENCE a: an HTTP error answer keeps its status and body,
    // takes the body's message and turns `retry-after` into a reset time;
    // the default rules read it as the status says.
    #[test]
    fn from_http_reads_status_headers_and_body() {
        let body = br#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;
        let f = ProviderFailure::from_http(
            429,
            vec![("retry-after-ms".to_string(), "1500".to_string())],
            body,
            10_000,
        );
        assert_eq!(f.status, Some(429));
        assert_eq!(f.message.as_deref(), Some("Rate limit reached"));
        assert_eq!(f.body.as_deref().map(str::as_bytes), Some(&body[..]));
        assert_eq!(f.reset_at, Some(11_500));
        assert_eq!(
            f.error_type, None,
            "the classifier reads the type from the body"
        );
        assert_eq!(reason(&f, "anthropic"), "rate_limit");
        // No wait asked for, a blank body, not JSON: status only.
        let f = ProviderFailure::from_http(503, [("retry-after", "0")], b"  \n", 0);
        assert_eq!(
            (f.reset_at, f.body.as_deref(), f.text()),
            (None, None, "HTTP 503".into())
        );
        let f = ProviderFailure::from_http(502, Vec::<(&str, &str)>::new(), b"\xffbad gateway", 0);
        assert_eq!(f.body.as_deref(), Some("\u{fffd}bad gateway"));
        assert_eq!(f.message, None);
    }

    // REFERENCE a.4, a.7: the documented shapes of a timeout and of a
    // transport failure are what the default rules call `timeout`.
    #[test]
    fn timeout_and_transport_failures_classify_as_timeout() {
        let t = ProviderFailure::timeout("no first byte", Duration::from_secs(30));
        assert_eq!(t.code.as_deref(), Some("ETIMEDOUT"));
        assert_eq!(
            t.text(),
            "upstream timed out: no first byte within 30000 ms"
        );
        assert_eq!(reason(&t, "openai"), "timeout");
        for what in [
            "connection refused or failed",
            "connection reset while reading the response",
            "network error",
            "timed out",
        ] {
            let f = ProviderFailure::transport(what);
            assert_eq!(f.text(), format!("upstream {what}"));
            assert_eq!(reason(&f, "openai"), "timeout", "{what}");
        }
    }
}

#[cfg(test)]
mod cause_tests {
    use super::{Cause, ProviderFailure};

    // Issue 48 item 5: the cause read from what a failure holds, where the
    // caller did not set one; one the caller set wins.
    #[test]
    fn i48_5_causes_are_read_from_code_status_and_body() {
        let f = |status: Option<u16>, code: Option<&str>, body: Option<&str>| {
            let mut f = ProviderFailure::message("x");
            if let Some(s) = status {
                f = f.with_status(s);
            }
            if let Some(c) = code {
                f = f.with_code(c);
            }
            if let Some(b) = body {
                f = f.with_body(b);
            }
            f.effective_cause()
        };
        assert_eq!(f(None, Some("ETIMEDOUT"), None), Some(Cause::Deadline));
        assert_eq!(
            f(None, Some("econnreset"), None),
            Some(Cause::ConnectionReset)
        );
        assert_eq!(f(None, Some("ECONNREFUSED"), None), Some(Cause::Connect));
        assert_eq!(f(None, Some("ENOTFOUND"), None), Some(Cause::Connect));
        assert_eq!(
            f(Some(502), None, Some("  <!DOCTYPE html><html>…")),
            Some(Cause::HtmlPage)
        );
        assert_eq!(
            f(Some(403), None, Some("<HTML><BODY>Access Denied")),
            Some(Cause::HtmlPage)
        );
        assert_eq!(
            f(Some(500), None, Some(r#"{"error":{}}"#)),
            Some(Cause::Http5xx)
        );
        assert_eq!(f(Some(429), None, None), Some(Cause::Http4xx));
        assert_eq!(f(Some(200), None, Some("not json")), Some(Cause::BadAnswer));
        assert_eq!(f(None, None, None), None);
        let set = ProviderFailure::message("x")
            .with_status(500)
            .with_cause(Cause::StreamCut);
        assert_eq!(set.effective_cause(), Some(Cause::StreamCut));
        assert_eq!(Cause::HtmlPage.name(), "html_page");
    }
}
