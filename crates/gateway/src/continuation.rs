//! A stream that broke after its first byte, finished by the next
//! candidate (issue 32 item 2).
//!
//! The relay (`stream.rs`) records the break on its profile exactly as
//! before, then asks the runner for the rest of the chain after every
//! candidate that served this answer (`RunRequest::resume_after`: the
//! same rules of selection, profiles, cooldowns and probes as any run;
//! its decisions carry `fallbackStepType = "continuation"`). Each
//! candidate is asked by its model's `continuation` mode:
//!
//! - `prefill`: the original request plus the delivered text (trailing
//!   whitespace trimmed) as a trailing assistant message, with the token
//!   limit lowered by an estimate of the delivered text (4 bytes a
//!   token). A 4xx rejecting it (models that refuse prefills) is
//!   classified and logged (`continuation_prefill_rejected`), counted
//!   (`outcome="prefill_rejected"`), never the run's error: the same
//!   candidate is asked again at once in `restart` mode.
//! - `restart`: the original request; [`super::splice`] checks its text.
//! - `none`: the candidate is skipped.
//!
//! `prefill` falls back to `restart` when it cannot apply: the delivered
//! text is only whitespace, the request already ends with an assistant
//! message, asks for tools, or enables extended thinking.
//!
//! Nothing is continued when more than one choice was asked (`n`), when
//! the request asks for structured output (`response_format`,
//! `output_format`), or when anything but text reached the client (a tool
//! call, reasoning, thinking): the stream ends with the error event.

use std::sync::Arc;

use axum::http::{HeaderName, HeaderValue};
use serde_json::{json, Map, Value};

use failover::{Attempt, AttemptError, ModelRef, RunOutput, RunRequest, Runner};

use super::protocol::{ClientRequest, Protocol};
use super::reload::ActiveSet;
use super::splice::{prefill_text, Mode};
use super::upstream::{self, protocol_of, Answer, CallInput, Started};
use super::upstreams::{Continuation, Timeouts};
use super::Gateway;

/// What a relay needs to continue its answer.
pub(crate) struct Continuer {
    pub gw: Arc<Gateway>,
    pub set: Arc<ActiveSet>,
    pub runner: Arc<Runner>,
    pub req: Arc<ClientRequest>,
    pub run_req: RunRequest,
    pub anthropic_headers: Vec<(HeaderName, HeaderValue)>,
    /// The candidates that served this answer, in order.
    pub served: Vec<ModelRef>,
}

/// A continuation under way: the candidate's stream and how it was asked.
pub(crate) struct Continued {
    pub started: Started,
    pub upstream: Protocol,
    pub mode: Mode,
    pub timeouts: Timeouts,
}

/// Whether an answer to this request can be continued at all.
pub(crate) fn request_continuable(req: &ClientRequest) -> bool {
    // A Responses client's stream is not spliced yet (docs/protocols.md).
    if req.protocol == Protocol::Responses {
        return false;
    }
    let b = &req.body;
    let n = b.get("n").and_then(Value::as_u64).unwrap_or(1);
    let structured = b
        .get("response_format")
        .and_then(|f| f.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "text")
        || b.get("output_format").is_some_and(|f| !f.is_null())
        || b.get("output_config")
            .and_then(|c| c.get("format"))
            .is_some_and(|f| !f.is_null());
    n <= 1 && !structured
}

/// Whether a prefill can be sent for this request.
fn prefill_applies(req: &ClientRequest, delivered: &str) -> bool {
    let b = &req.body;
    let last_is_assistant = b
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|m| m.last())
        .and_then(|m| m.get("role"))
        .and_then(Value::as_str)
        == Some("assistant");
    let tools = b
        .get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty());
    let thinking = b
        .get("thinking")
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .is_some_and(|t| t != "disabled");
    !prefill_text(delivered).is_empty() && !last_is_assistant && !tools && !thinking
}

/// The upstream body of a prefill: the request in the upstream's
/// protocol, the delivered text as a trailing assistant message, the
/// token limit lowered by what was delivered.
fn prefill_body(
    req: &ClientRequest,
    up: Protocol,
    model: &str,
    delivered: &str,
) -> Result<Vec<u8>, String> {
    let spent = (delivered.len() / 4) as u64;
    // Chat Completions and Messages bodies take the message as it is;
    // the others get it through the canonical form.
    if !matches!(up, Protocol::OpenAi | Protocol::Anthropic) {
        // Through the canonical form: the delivered text is an assistant
        // message in any protocol.
        use super::canonical::{Message, Part, Role};
        let mut c = super::translate::parse_request(req.protocol, &req.body)
            .map_err(|e| e.replace("{to}", up.api().name()))?;
        c.max_tokens = c.max_tokens.map(|n| n.saturating_sub(spent).max(1));
        c.messages.push(Message {
            role: Role::Assistant,
            content: vec![Part::Text(prefill_text(delivered).to_string())],
        });
        let body = super::translate::render_request(up, &c, model)?;
        return Ok(serde_json::to_vec(&body).unwrap_or_default());
    }
    let mut body: Map<String, Value> =
        super::translate::request(req.protocol, up, &req.body, model)?;
    for k in ["max_tokens", "max_completion_tokens"] {
        if let Some(n) = body.get(k).and_then(Value::as_u64) {
            body.insert(k.into(), json!(n.saturating_sub(spent).max(1)));
        }
    }
    match body.get_mut("messages").and_then(Value::as_array_mut) {
        Some(m) => m.push(json!({"role": "assistant", "content": prefill_text(delivered)})),
        None => return Err("the request has no messages".into()),
    }
    Ok(serde_json::to_vec(&body).unwrap_or_default())
}

/// A prefill the candidate refused: a 4xx that is not about the
/// credential, the model's existence or a rate.
fn prefill_rejected(e: &AttemptError) -> bool {
    match e {
        AttemptError::Provider(f) => f.status.is_some_and(|s| {
            (400..500).contains(&s) && ![401, 403, 404, 408, 409, 429].contains(&s)
        }),
        _ => false,
    }
}

impl Continuer {
    /// Runs the rest of the chain for the answer whose delivered text is
    /// `delivered`.
    pub(crate) async fn run(
        &self,
        delivered: &str,
        reason: String,
    ) -> Result<RunOutput<Continued>, failover::RunError> {
        let mut rr = self.run_req.clone();
        rr.resume_after = self.served.clone();
        rr.resume_reason = Some(reason);
        let out = super::state::ANONYMOUS
            .scope(
                self.run_req.one_off,
                self.runner
                    .run(&rr, |attempt: Attempt| self.attempt(attempt, delivered)),
            )
            .await;
        super::count_attempts(
            &self.gw,
            &self.set,
            out.as_ref()
                .map(|o| &o.attempts[..])
                .unwrap_or_else(|e| e.attempts()),
        );
        out
    }

    async fn attempt(&self, attempt: Attempt, delivered: &str) -> Result<Continued, AttemptError> {
        let set = &self.set;
        let Some(up) = set.upstreams.get(&attempt.provider) else {
            return Err(AttemptError::Skip(format!(
                "no upstream is configured for provider `{0}` (models.providers.{0})",
                attempt.provider
            )));
        };
        let up_proto = protocol_of(up.api);
        let mode = match up.continuation(&attempt.model) {
            Continuation::None => {
                return Err(AttemptError::Skip(format!(
                    "`{}/{}` does not continue answers (continuation: none)",
                    up.id, attempt.model
                )))
            }
            Continuation::Prefill if prefill_applies(&self.req, delivered) => Mode::Prefill,
            _ => Mode::Restart,
        };
        let req = &self.req;
        let untranslatable = |why: String| {
            AttemptError::Skip(format!(
                "{why}: the client speaks {} and upstream `{}` speaks {}",
                req.protocol.api().name(),
                up.id,
                up.api.name()
            ))
        };
        let restart = || {
            super::translate::request_body(req.protocol, up_proto, &req.body, &attempt.model)
                .map_err(untranslatable)
        };
        let client = set
            .client(&up.id)
            .ok_or_else(|| AttemptError::Skip(format!("no client for upstream `{}`", up.id)))?;
        let profile = attempt.profile_id.as_deref().zip(attempt.profile.as_ref());
        let deadline = upstream::deadline_of(self.run_req.deadline_ms, self.runner.now_ms());
        let call = |body: Vec<u8>| {
            upstream::call(CallInput {
                client,
                upstream: up,
                body,
                profile,
                anthropic_headers: if up_proto == Protocol::Anthropic {
                    self.anthropic_headers.clone()
                } else {
                    Vec::new()
                },
                model: &attempt.model,
                stream: true,
                metrics: &self.gw.metrics,
                now_ms: self.runner.now_ms(),
                buffers: &self.gw.buffers,
                deadline,
            })
        };
        let mut mode = mode;
        let first = match mode {
            Mode::Prefill => {
                let body = prefill_body(req, up_proto, &attempt.model, delivered)
                    .map_err(untranslatable)?;
                call(body).await
            }
            Mode::Restart => call(restart()?).await,
        };
        let answer = match first {
            Err(e) if mode == Mode::Prefill && prefill_rejected(&e) => {
                if let AttemptError::Provider(f) = &e {
                    let c = self
                        .runner
                        .engine()
                        .classify(&f.as_provider_error(&up.id, &attempt.model));
                    let redactor = set.redactor().await;
                    tracing::warn!(
                        target: "failover::serve",
                        provider = %up.id,
                        model = %attempt.model,
                        reason = %c.reason,
                        status = f.status.unwrap_or(0),
                        detail = %redactor.scrub(&f.text()).chars().take(400).collect::<String>(),
                        "continuation_prefill_rejected"
                    );
                }
                self.gw.metrics.continuation("prefill", "prefill_rejected");
                mode = Mode::Restart;
                call(restart()?).await?
            }
            other => other?,
        };
        match answer {
            Answer::Stream(started) => {
                let mut timeouts = up.timeouts;
                timeouts.total = upstream::total_by(timeouts.total, started.started, deadline);
                Ok(Continued {
                    started,
                    upstream: up_proto,
                    mode,
                    timeouts,
                })
            }
            Answer::Whole(..) => Err(AttemptError::Provider(failover::ProviderFailure::message(
                "upstream answered a streaming request without an event stream",
            ))),
        }
    }
}
