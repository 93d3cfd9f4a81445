//! failover-gateway, `failover serve`: an OpenAI- and Anthropic-compatible gateway that runs
//! the real executor ([`Runner`]) on every request, against upstreams
//! from the config (DESIGN "Gateway mode and state backends").
//!
//! One request, end to end:
//!
//! 1. **Admission.** A permit of the concurrency limit, or 503 with
//!    `Retry-After` (back-pressure keeps memory bounded). The body is read
//!    up to `serve.maxBodyBytes` (a larger `Content-Length` is refused
//!    with 413 before a byte is read) and checked (`protocol`).
//! 2. **Selection.** The request's `model` is an agent id (`agents.list`:
//!    that agent's model and fallbacks, SPEC R3 `agent_primary`), the
//!    configured default primary (`configured_default`: the configured
//!    fallbacks), or another `provider/model` of a configured upstream — a
//!    model given for this one request, the R3 one-shot override, strict
//!    unless a rules file says otherwise (`selection cli_override => …`).
//!    The session is `x-session-id`; without it nothing is sticky and no
//!    override is persisted (`state`).
//! 3. **The run.** The active set's runner walks the chain; each attempt
//!    translates the request for the candidate's upstream when the
//!    protocols differ (`translate`), calls it (`upstream`) and hands
//!    a failure back exactly as received. A candidate without an upstream,
//!    or one that cannot express the request, is skipped with the reason
//!    recorded.
//! 4. **The answer.** In the client's protocol, with `x-failover-model`,
//!    `x-failover-profile` (an id), `x-failover-attempts` and, when there
//!    is one, `x-failover-notice` (R13). A stream is relayed after its
//!    first content (`stream`); one that breaks after that is finished
//!    by the next candidate (`continuation`, `splice`). A failure is an error in the client's
//!    shape: a stopping reason passes the upstream's status and message; an
//!    exhausted chain is the summary with every attempt (each with its
//!    reason and error: for an unreachable upstream, the host and the
//!    cause), 429 with `Retry-After` when rate limits cool every
//!    candidate, 503 (with `Retry-After` when every candidate is cooling
//!    for other reasons) otherwise. Every error response carries
//!    `x-failover-attempts` too, and the request's log line the same count.
//!
//! No upstream header reaches the client (responses are built from
//! scratch), and no client credential reaches an upstream: the gateway
//! sends the profile's. Secrets appear in no response, header, log line
//! or metric label: error texts are the runner's scrubbed ones.
//!
//! The gateway has no client authentication of its own and listens on
//! loopback by default: put it behind whatever guards your network.

#![deny(missing_docs)]

mod aws;
mod canonical;
mod check;
pub mod errors;
mod log;
mod metrics;
mod otel;
mod protocol;
mod continuation;
mod keys;
mod reload;
mod splice;
mod sse;
mod state;
mod stream;
mod translate;
mod upstream;
mod upstreams;

pub use check::{check_config, ConfigCheck};
pub use errors::Error;
pub use keys::{generate as generate_key, hash_of as key_hash, NewKey, KEY_PREFIX};
pub use reload::{config_profiles, ModelFlags, Sources, Stores};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use serde_json::{json, Value};
use tokio::sync::Semaphore;

use failover::state::DEFAULT_AGENT;
use failover::ModelRef;
use failover::{
    Attempt, AttemptError, AttemptOutcome, ProviderFailure, RunError, RunOutput, RunRequest, Runner,
};

use metrics::{Metrics, StateView};
use protocol::{parse_request, upstream_message, ClientError, ClientRequest, Protocol};
use reload::ActiveSet;
use state::{ANONYMOUS, EPHEMERAL_PREFIX};
use upstream::{protocol_of, Answer, CallInput, Started};

/// The default listen address.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8787";
/// A request body that has not arrived whole after this long is refused
/// (408): a slow client holds a permit and memory.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// `Retry-After` of a 503 when the gateway is saturated.
const SATURATED_RETRY_SECS: u64 = 1;
/// A session id longer than this is refused: it is a key in the store.
const MAX_SESSION_ID: usize = 256;

/// What `failover serve` was asked to do.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where the config and the rules come from (re-read on reload).
    pub sources: Sources,
    /// The address to listen on (`127.0.0.1:8787`).
    pub listen: String,
    /// Reload when the config or a rules file changes.
    pub watch: bool,
    /// Worker threads, each a runtime of its own serving its share of the
    /// connections (see [`start`]); `0` serves on the caller's runtime.
    pub workers: usize,
}

thread_local! {
    /// The lane of this thread: the worker it belongs to (0 outside them).
    static LANE: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The lane (worker) of the calling thread: which upstream pool it uses.
fn lane() -> usize {
    LANE.with(|l| l.get())
}

/// The default `--workers`: one per core.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The gateway: the active set and what outlives a reload.
pub struct Gateway {
    sources: Sources,
    active: RwLock<Arc<ActiveSet>>,
    stores: Stores,
    metrics: Arc<Metrics>,
    limit: Arc<Semaphore>,
    max_concurrent: usize,
    shutting_down: AtomicBool,
    /// The last reload's refusal while it stands (issue 48): when, and
    /// the first line of its diagnostics; `None` after a good reload.
    refused: std::sync::Mutex<Option<(u64, String)>>,
    anonymous: AtomicU64,
    /// Upstream pools per set: one per worker.
    lanes: usize,
    /// Success records being written after their answers went out.
    settling: Arc<Settling>,
    /// Upstream bytes held in memory, all requests together
    /// (`serve.maxBufferedBytes`).
    buffers: upstream::Buffers,
    /// Client keys (SPEC R18).
    auth: Arc<keys::ClientAuth>,
}

/// What a request holds while its answer lasts: a place among the
/// gateway's concurrent requests, and one among its client key's.
pub(crate) type Permits = (tokio::sync::OwnedSemaphorePermit, Option<keys::KeySlot>);

/// The success records written after the answer, those of requests
/// without a session and of sessions with nothing to settle
/// (`RunRequest::defer_success_record`): the client does not wait
/// for the state write (the largest single step of a request on a keyed
/// profile, benches/README.md "Gateway"), and a drain waits for them.
#[derive(Debug, Default)]
struct Settling {
    writing: AtomicUsize,
    idle: tokio::sync::Notify,
}

/// One record being written; dropped when it is done.
struct SettleGuard(Arc<Settling>);

impl Settling {
    fn start(self: &Arc<Self>) -> SettleGuard {
        self.writing.fetch_add(1, Ordering::SeqCst);
        SettleGuard(self.clone())
    }

    /// Returns when no record is being written.
    async fn idle(&self) {
        loop {
            let woken = self.idle.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if self.writing.load(Ordering::SeqCst) == 0 {
                return;
            }
            woken.await;
        }
    }
}

impl Drop for SettleGuard {
    fn drop(&mut self) {
        if self.0.writing.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Gateway {
    /// Builds the first set; `Err` holds its diagnostics.
    pub fn new(sources: Sources) -> Result<Arc<Gateway>, Error> {
        Self::with_stores(sources, Stores::default())
    }

    /// [`Gateway::new`] with backends already opened ([`Stores::preopen`]).
    pub fn with_stores(sources: Sources, stores: Stores) -> Result<Arc<Gateway>, Error> {
        Self::with_lanes(sources, stores, 1)
    }

    fn with_lanes(sources: Sources, stores: Stores, lanes: usize) -> Result<Arc<Gateway>, Error> {
        let metrics = Arc::new(Metrics::new());
        let set = reload::build(&sources, &stores, &metrics, lanes)?;
        let max = set.settings.max_concurrent;
        let buffers = upstream::Buffers::new(
            set.settings.max_buffered_bytes,
            set.settings.max_request_buffered_bytes,
        );
        let key_store = failover::state::keys::open(set.config.state.as_ref(), &sources.state)
            .map_err(|e| Error::State {
                message: format!("error: client keys: {e}"),
            })?;
        let auth = Arc::new(keys::ClientAuth::new(
            set.settings.client_auth,
            Some(key_store),
        ));
        Ok(Arc::new(Gateway {
            sources,
            active: RwLock::new(Arc::new(set)),
            stores,
            metrics,
            limit: Arc::new(Semaphore::new(max)),
            max_concurrent: max,
            shutting_down: AtomicBool::new(false),
            refused: std::sync::Mutex::new(None),
            anonymous: AtomicU64::new(0),
            lanes,
            settling: Arc::default(),
            buffers,
            auth,
        }))
    }

    /// The set new requests use.
    pub fn active(&self) -> Arc<ActiveSet> {
        self.active
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Requests holding a permit now (in flight, streams included).
    pub fn in_flight(&self) -> usize {
        self.max_concurrent - self.limit.available_permits()
    }

    /// The gateway's metrics (what `GET /metrics` serves).
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Re-reads config and rules; a set with errors is refused (logged)
    /// and the old one keeps serving. Returns the active hash.
    pub fn reload(&self) -> Result<String, Error> {
        let built = state::off_runtime(|| {
            reload::build(&self.sources, &self.stores, &self.metrics, self.lanes)
        });
        match built {
            Ok(set) => {
                let hash = set.hash.clone();
                if set.settings.max_concurrent != self.max_concurrent {
                    tracing::warn!(target: "failover::serve", "serve.maxConcurrentRequests changes take effect at the next start");
                }
                let share = set
                    .settings
                    .max_request_buffered_bytes
                    .unwrap_or(set.settings.max_buffered_bytes / 2)
                    .min(set.settings.max_buffered_bytes);
                if set.settings.max_buffered_bytes != self.buffers.total()
                    || share != self.buffers.share()
                {
                    tracing::warn!(target: "failover::serve", "serve.maxBufferedBytes and serve.maxRequestBufferedBytes changes take effect at the next start");
                }
                *self.active.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(set);
                *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = None;
                self.metrics.reload(true);
                tracing::info!(target: "failover::serve", ruleset = %hash, "reload_ok");
                Ok(hash)
            }
            Err(diagnostics) => {
                self.metrics.reload(false);
                // Rendered as `check --config` renders it (secrets masked);
                // `/readyz` shows its first line, bounded.
                let text = diagnostics.to_string();
                let first: String = text
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("")
                    .chars()
                    .take(300)
                    .collect();
                let now = failover::time::Clock::now_ms(&failover::time::SystemClock);
                *self.refused.lock().unwrap_or_else(|e| e.into_inner()) = Some((now, first));
                let active = self.active().hash.clone();
                tracing::error!(target: "failover::serve", active = %active, diagnostics = %diagnostics, "reload_refused");
                Err(diagnostics)
            }
        }
    }

    /// The HTTP routes.
    pub fn router(self: &Arc<Self>) -> Router {
        // A known path with another method: 405 with `Allow` and an error
        // body in the path's protocol (axum's own 405 has no body).
        let only = |protocol: Protocol, allow: &'static str| {
            move || async move { wrong_method(protocol, allow) }
        };
        Router::new()
            .route(
                "/v1/chat/completions",
                post(chat_completions).fallback(only(Protocol::OpenAi, "POST")),
            )
            .route(
                "/v1/messages",
                post(messages).fallback(only(Protocol::Anthropic, "POST")),
            )
            .route(
                "/v1/responses",
                post(responses).fallback(only(Protocol::Responses, "POST")),
            )
            .route(
                "/v1/models",
                get(models).fallback(only(Protocol::OpenAi, "GET")),
            )
            .route(
                "/healthz",
                get(|| async { "ok\n" }).fallback(only(Protocol::OpenAi, "GET")),
            )
            .route(
                "/readyz",
                get(readyz).fallback(only(Protocol::OpenAi, "GET")),
            )
            .route(
                "/metrics",
                get(metrics_text).fallback(only(Protocol::OpenAi, "GET")),
            )
            .fallback(not_found)
            .with_state(self.clone())
    }
}

type Gw = State<Arc<Gateway>>;

async fn chat_completions(State(gw): Gw, headers: HeaderMap, body: Body) -> Response {
    handle(gw, Protocol::OpenAi, headers, body).await
}

async fn messages(State(gw): Gw, headers: HeaderMap, body: Body) -> Response {
    handle(gw, Protocol::Anthropic, headers, body).await
}

async fn responses(State(gw): Gw, headers: HeaderMap, body: Body) -> Response {
    handle(gw, Protocol::Responses, headers, body).await
}

async fn not_found() -> Response {
    error_response(
        Protocol::OpenAi,
        &ClientError::new(404, "no such endpoint: the gateway serves /v1/chat/completions, /v1/messages, /v1/responses, /v1/models, /healthz, /readyz, /metrics"),
    )
}

fn wrong_method(protocol: Protocol, allow: &'static str) -> Response {
    let mut resp = error_response(
        protocol,
        &ClientError::new(405, format!("this endpoint takes {allow} requests only")),
    );
    resp.headers_mut()
        .insert(axum::http::header::ALLOW, HeaderValue::from_static(allow));
    resp
}

async fn models(State(gw): Gw, headers: HeaderMap) -> Response {
    if let Err((e, name)) = gw.auth.verify(&headers).await {
        gw.metrics.client_request(&name, "unauthenticated");
        return error_response(Protocol::OpenAi, &e);
    }
    let set = gw.active();
    let data: Vec<Value> = set
        .models
        .iter()
        .map(|id| {
            let owner = id.split_once('/').map_or("failover", |(p, _)| p);
            json!({
                "id": id, "object": "model", "type": "model", "created": 0,
                "created_at": "1970-01-01T00:00:00Z", "owned_by": owner, "display_name": id,
            })
        })
        .collect();
    axum::Json(json!({
        "object": "list",
        "first_id": set.models.first(),
        "last_id": set.models.last(),
        "has_more": false,
        "data": data,
    }))
    .into_response()
}

async fn readyz(State(gw): Gw) -> Response {
    let set = gw.active();
    if gw.shutting_down.load(Ordering::SeqCst) {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"status": "shutting_down", "ruleset": set.hash})),
        )
            .into_response();
    }
    // Degraded (issue 30): requests are answered, but the state's writes
    // fail; still ready (200), so a load balancer keeps sending, with the
    // reason for whoever looks.
    let mut body = if let Some(why) = gw.stores.health().degraded() {
        json!({
            "status": "degraded",
            "reason": why,
            "ruleset": set.hash,
            "loadedAtMs": set.loaded_at_ms,
            "upstreams": set.upstreams.providers.len(),
        })
    } else {
        json!({
            "status": "ready",
            "ruleset": set.hash,
            "loadedAtMs": set.loaded_at_ms,
            "upstreams": set.upstreams.providers.len(),
        })
    };
    // Issue 48: a refused reload leaves the last good set serving (still
    // ready), but the config on disk is not what runs: said here until a
    // reload succeeds.
    if let Some((at, error)) = gw.refused.lock().unwrap_or_else(|e| e.into_inner()).clone() {
        body["reload"] = json!({"status": "refused", "atMs": at, "error": error});
    }
    axum::Json(body).into_response()
}

async fn metrics_text(State(gw): Gw, headers: HeaderMap) -> Response {
    let set = gw.active();
    if !keys::metrics_allowed(set.settings.metrics_token.as_ref(), &headers) {
        let mut resp = error_response(
            Protocol::OpenAi,
            &ClientError::new(401, "/metrics needs the bearer token of serve.metricsToken"),
        );
        resp.headers_mut().insert(
            axum::http::header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer"),
        );
        return resp;
    }
    let (cooling, models_cooling) = {
        let now = failover::time::Clock::now_ms(&failover::time::SystemClock);
        let mut by: std::collections::BTreeMap<String, i64> = Default::default();
        let mut models: std::collections::BTreeMap<(String, String), i64> = Default::default();
        for r in set.runners.values() {
            let Ok(st) = r.face().load_state().await else {
                continue;
            };
            for (id, s) in &st.usage_stats {
                let p = failover::state::provider_of_id(id)
                    .unwrap_or("unknown")
                    .to_ascii_lowercase();
                if failover::routing::block_for(s, None, now).is_some() {
                    *by.entry(p.clone()).or_default() += 1;
                }
                for w in s.model_windows().filter(|w| w.until > now) {
                    *models.entry((p.clone(), w.model.to_string())).or_default() += 1;
                }
            }
        }
        (by.into_iter().collect(), models.into_iter().collect())
    };
    let health = gw.stores.health();
    let view = StateView {
        reload_refused: gw
            .refused
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some(),
        cooling,
        models_cooling,
        write_failures: health.write_failures(),
        degraded: health.degraded().is_some(),
        backends: set
            .runners
            .iter()
            .filter_map(|(agent, r)| {
                let (up, outages) = r.face().health()?;
                Some((agent.clone(), up, outages))
            })
            .collect(),
    };
    let text = gw.metrics.render(&view);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

fn error_response(protocol: Protocol, e: &ClientError) -> Response {
    error_response_after(protocol, e, 0)
}

/// An error response after `attempts` attempt records (skipped candidates
/// included, as on a success), told in `x-failover-attempts`.
fn error_response_after(protocol: Protocol, e: &ClientError, attempts: usize) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_GATEWAY);
    let mut resp = (status, axum::Json(e.body(protocol))).into_response();
    resp.headers_mut()
        .insert(X_ATTEMPTS, HeaderValue::from(attempts));
    if let Some(s) = e.retry_after {
        resp.headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(s));
    }
    resp
}

/// Reads a body of at most `limit` bytes.
async fn read_body(headers: &HeaderMap, body: Body, limit: usize) -> Result<Bytes, ClientError> {
    let too_large = || {
        ClientError::new(
            413,
            format!("the request body is larger than the gateway's limit of {limit} bytes (serve.maxBodyBytes)"),
        )
    };
    let declared = headers
        .get(axum::http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let read = async {
        let mut body = body;
        let mut buf: Vec<u8> = Vec::with_capacity(declared.map_or(0, |n| n as usize));
        while let Some(frame) = body.frame().await {
            let frame = frame
                .map_err(|_| ClientError::bad_request("the request body could not be read"))?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > limit {
                    return Err(too_large());
                }
                buf.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(buf))
    };
    tokio::time::timeout(BODY_READ_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| {
            Err(ClientError::new(
                408,
                format!(
                    "the request body did not arrive within {} s",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            ))
        })
}

/// What a model name selects: the runner's agent key and the request.
fn select(set: &ActiveSet, model: &str) -> Option<(String, RunRequest)> {
    if set.config.agents.agent(model).is_some() {
        let agent = model.to_string();
        let mut req = RunRequest::default();
        req.agent = Some(agent.clone());
        return Some((agent, req));
    }
    let r = ModelRef::parse(model).ok()?;
    if set.config.agents.model.primary.as_ref() == Some(&r) {
        return Some((DEFAULT_AGENT.into(), RunRequest::default()));
    }
    set.upstreams.get(r.provider())?;
    let mut req = RunRequest::default();
    req.one_shot = Some(r);
    Some((DEFAULT_AGENT.into(), req))
}

/// A finished attempt, in the client's protocol.
enum Done {
    /// The bytes of the client's JSON answer, and their place in the
    /// gateway's budget of buffered bytes.
    Whole(Bytes, upstream::Held),
    Stream {
        started: Started,
        upstream: Protocol,
        idle: Duration,
        total: Duration,
    },
}

async fn handle(gw: Arc<Gateway>, protocol: Protocol, headers: HeaderMap, body: Body) -> Response {
    let t0 = Instant::now();
    let Ok(permit) = gw.limit.clone().try_acquire_owned() else {
        gw.metrics.request(protocol.name(), "saturated");
        let mut e = ClientError::new(
            503,
            format!(
                "the gateway is serving its limit of {} requests; retry shortly",
                gw.max_concurrent
            ),
        );
        e.retry_after = Some(SATURATED_RETRY_SECS);
        if protocol == Protocol::Anthropic {
            e.error_type = Some("overloaded_error".into());
        }
        return error_response(protocol, &e);
    };
    // R18.3: the key before the body; a refusal calls no upstream.
    let key = match gw.auth.verify(&headers).await {
        Ok(k) => k,
        Err((e, name)) => {
            gw.metrics.client_request(&name, "unauthenticated");
            gw.metrics.request(protocol.name(), "rejected");
            log_request(protocol, e.status, None, 0, t0, Some(&name));
            return error_response(protocol, &e);
        }
    };
    let key_name = key.as_ref().map(|k| k.name().to_string());
    let set = gw.active();
    let result = async {
        let bytes = read_body(&headers, body, set.settings.max_body_bytes).await?;
        let req = Arc::new(parse_request(protocol, &bytes)?);
        drop(bytes);
        let (agent, mut run_req) = select(&set, &req.model).ok_or_else(|| {
            let shown: String = req.model.chars().take(120).collect();
            ClientError::new(
                404,
                format!("unknown model `{shown}`: use an agent id, the configured default, or a provider/model of a configured upstream (GET /v1/models)"),
            )
        })?;
        // R18.4, R18.5: scope, then the key's limits.
        let slot = match &key {
            Some(k) => Some(gw.auth.admit(k, &agent, &req.model).map_err(|(e, why)| {
                gw.metrics.client_request(k.name(), why);
                e
            })?),
            None => None,
        };
        if let Some(k) = &key {
            gw.metrics.client_request(k.name(), "admitted");
            run_req.client = Some(k.name().to_string());
        }
        let session = match headers.get("x-session-id") {
            None => None,
            Some(v) => match v.to_str() {
                Ok(s) if !s.trim().is_empty() && s.len() <= MAX_SESSION_ID => {
                    Some(s.trim().to_string())
                }
                _ => {
                    return Err(ClientError::bad_request(format!(
                        "`x-session-id` must be 1 to {MAX_SESSION_ID} visible ASCII characters"
                    )))
                }
            },
        };
        let anonymous = session.is_none();
        // The profile's record is written after the answer when nothing of
        // the session is (see `Settling`, `RunRequest::defer_success_record`).
        run_req.defer_success_record = true;
        run_req.one_off = anonymous;

        run_req.session = session.unwrap_or_else(|| {
            format!(
                "{EPHEMERAL_PREFIX}{}",
                gw.anonymous.fetch_add(1, Ordering::Relaxed)
            )
        });
        let runner = set
            .runners
            .get(&agent)
            .cloned()
            .ok_or_else(|| ClientError::new(404, "unknown agent"))?;
        // Issue 44 item 7: the whole chain ends by `serve.requestTimeoutMs`.
        let timeout_ms = u64::try_from(set.settings.request_timeout.as_millis()).unwrap_or(u64::MAX);
        run_req.deadline_ms = Some(runner.now_ms().saturating_add(timeout_ms));
        let waited = AtomicU64::new(0);
        let out = ANONYMOUS
            .scope(
                anonymous,
                run(&gw, &set, &runner, &req, &run_req, &headers, &waited),
            )
            .await;
        Ok((req, runner, run_req, out, waited.load(Ordering::Relaxed), slot))
    }
    .await;
    let (req, runner, run_req, out, waited_us, slot) = match result {
        Ok(x) => x,
        Err(e) => {
            gw.metrics.request(protocol.name(), "rejected");
            log_request(protocol, e.status, None, 0, t0, key_name.as_deref());
            return error_response(protocol, &e);
        }
    };
    if let (Some(k), Ok(o)) = (&key, &out) {
        if let Done::Whole(bytes, _) = &o.value {
            let (prompt, completion) = keys::usage_of(bytes);
            gw.auth.record_tokens(k, prompt, completion);
            gw.metrics.client_tokens(k.name(), prompt, completion);
        }
    }
    if key.is_some() {
        gw.auth.maybe_flush(false);
    }
    count_attempts(
        &gw,
        &set,
        out.as_ref()
            .map(|o| &o.attempts[..])
            .unwrap_or_else(|e| e.attempts()),
    );
    match out {
        Ok(mut o) => {
            // Taken before `success` consumes the output and the runner.
            let settle = o
                .deferred
                .take()
                .map(|d| (d, runner.clone(), gw.settling.start()));
            // Retries of the answering candidate are not a fallback.
            if o.attempts.iter().any(|a| {
                !matches!(
                    a.outcome,
                    AttemptOutcome::Retried | AttemptOutcome::Succeeded
                )
            }) {
                gw.metrics.fallback();
            }
            gw.metrics.request(protocol.name(), "ok");
            log_request(
                protocol,
                200,
                Some(&o.model_ref()),
                o.attempts.len(),
                t0,
                key_name.as_deref(),
            );
            let anthropic_headers = anthropic_headers_of(&req, &headers);
            let mut resp = success(
                &gw,
                &set,
                protocol,
                &req,
                runner,
                o,
                (permit, slot),
                (run_req, anthropic_headers),
            );
            if let Some((d, runner, guard)) = settle {
                // Runs once this task yields: hyper writes the answer in
                // the same poll that receives it, so normally before.
                tokio::spawn(async move {
                    // A failed write is logged by the state's health, at
                    // most once per interval.
                    let _ = runner.settle(d).await;
                    drop(guard);
                });
            }
            // Time inside the gateway before the response head, without
            // the waits on upstreams (LiteLLM's overhead header, in µs).
            let own = (t0.elapsed().as_micros() as u64).saturating_sub(waited_us);
            resp.headers_mut()
                .insert(X_OVERHEAD_US, HeaderValue::from(own));
            resp
        }
        Err(e) => {
            let attempts = e.attempts().len();
            let mut ge = run_error(&set, &runner, e);
            ge.scrub(&set.redactor().await);
            gw.metrics.request(
                protocol.name(),
                if ge.status == 429 || ge.status == 503 {
                    "exhausted"
                } else {
                    "failed"
                },
            );
            log_request(protocol, ge.status, None, attempts, t0, key_name.as_deref());
            error_response_after(protocol, &ge, attempts)
        }
    }
}

fn log_request(
    protocol: Protocol,
    status: u16,
    model: Option<&str>,
    attempts: usize,
    t0: Instant,
    key: Option<&str>,
) {
    tracing::info!(
        target: "failover::serve",
        protocol = protocol.name(),
        status,
        model = model.unwrap_or(""),
        attempts,
        key,
        duration_us = t0.elapsed().as_micros() as u64,
        "request"
    );
}

fn count_attempts(gw: &Gateway, set: &ActiveSet, attempts: &[failover::AttemptRecord]) {
    for a in attempts {
        let outcome = match a.outcome {
            AttemptOutcome::Succeeded => "succeeded",
            AttemptOutcome::Failed => "failed",
            AttemptOutcome::Skipped => "skipped",
            AttemptOutcome::Switched => "switched",
            AttemptOutcome::Retried => "retried",
            _ => "other",
        };
        gw.metrics.attempt(
            &a.provider,
            set.model_label(&a.provider, &a.model),
            outcome,
            a.reason.as_deref().unwrap_or("none"),
        );
        if let Some(cause) = a.cause {
            gw.metrics
                .failure_cause(&a.provider, a.reason.as_deref().unwrap_or("none"), cause);
        }
        if let Some(by) = a.decided_by {
            gw.metrics.classification(by);
        }
        if a.probe {
            gw.metrics.probe(if a.outcome == AttemptOutcome::Succeeded {
                "succeeded"
            } else {
                "failed"
            });
        }
    }
}

/// `anthropic-version` / `anthropic-beta` of an Anthropic client, for an
/// Anthropic upstream.
fn anthropic_headers_of(
    req: &ClientRequest,
    headers: &HeaderMap,
) -> Vec<(HeaderName, HeaderValue)> {
    if req.protocol == Protocol::Anthropic {
        ["anthropic-version", "anthropic-beta"]
            .iter()
            .filter_map(|n| {
                headers
                    .get(*n)
                    .map(|v| (HeaderName::from_static(n), v.clone()))
            })
            .collect()
    } else {
        Vec::new()
    }
}

async fn run(
    gw: &Arc<Gateway>,
    set: &Arc<ActiveSet>,
    runner: &Runner,
    req: &ClientRequest,
    run_req: &RunRequest,
    headers: &HeaderMap,
    waited_us: &AtomicU64,
) -> Result<RunOutput<Done>, RunError> {
    let anthropic_headers = anthropic_headers_of(req, headers);
    runner
        .run(run_req, |attempt: Attempt| {
            let set = set.clone();
            let anthropic_headers = anthropic_headers.clone();
            async move {
                let Some(up) = set.upstreams.get(&attempt.provider) else {
                    return Err(AttemptError::Skip(format!(
                        "no upstream is configured for provider `{0}` (models.providers.{0})",
                        attempt.provider
                    )));
                };
                let up_proto = protocol_of(up.api);
                let body =
                    translate::request_body(req.protocol, up_proto, &req.body, &attempt.model)
                        .map_err(|why| {
                            AttemptError::Skip(format!(
                                "{why}: the client speaks {} and upstream `{}` speaks {}",
                                req.protocol.api().name(),
                                up.id,
                                up.api.name()
                            ))
                        })?;
                let client = set.client(&up.id).ok_or_else(|| {
                    AttemptError::Skip(format!("no client for upstream `{}`", up.id))
                })?;
                let profile = attempt.profile_id.as_deref().zip(attempt.profile.as_ref());
                let called = Instant::now();
                let deadline = upstream::deadline_of(run_req.deadline_ms, runner.now_ms());
                let answer = upstream::call(CallInput {
                    client,
                    upstream: up,
                    body,
                    profile,
                    anthropic_headers: if up_proto == Protocol::Anthropic {
                        anthropic_headers
                    } else {
                        Vec::new()
                    },
                    model: &attempt.model,
                    stream: req.stream,
                    metrics: &gw.metrics,
                    now_ms: runner.now_ms(),
                    buffers: &gw.buffers,
                    deadline,
                })
                .await;
                waited_us.fetch_add(called.elapsed().as_micros() as u64, Ordering::Relaxed);
                // Traces on (src/otel.rs): a whole answer's token usage on
                // the attempt's span (GenAI conventions). Off, the span is
                // disabled and nothing is read.
                let span = tracing::Span::current();
                if !span.is_disabled() {
                    if let Ok(Answer::Whole(b, _)) = &answer {
                        let (input, output) = keys::usage_of(b);
                        if input + output > 0 {
                            // As i64: OTLP's integer (a u64 goes out as text).
                            let int = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
                            span.record("gen_ai.usage.input_tokens", int(input));
                            span.record("gen_ai.usage.output_tokens", int(output));
                        }
                    }
                }
                Ok(match answer? {
                    // The same protocol: the upstream's bytes as they came.
                    Answer::Whole(b, held) if up_proto == req.protocol => Done::Whole(b, held),
                    Answer::Whole(b, mut held) => {
                        // Issue 44 item 2: a translation holds the parsed
                        // answer, its translation and the new text beside
                        // the upstream's bytes; charged before it is made.
                        if let Err(over) = gw
                            .buffers
                            .cover(&mut held, b.len().saturating_mul(TRANSLATION_COPIES))
                        {
                            return Err(AttemptError::Skip(format!(
                                "{}; this {} KiB answer was not translated",
                                gw.buffers.over_text(over, "upstream answers"),
                                b.len() >> 10
                            )));
                        }
                        let v: Value = serde_json::from_slice(&b).map_err(|_| {
                            AttemptError::Provider(ProviderFailure::message(
                                upstream::NOT_AN_OBJECT,
                            ))
                        })?;
                        let out = translate::response(up_proto, req.protocol, v);
                        Done::Whole(
                            Bytes::from(serde_json::to_vec(&out).unwrap_or_default()),
                            held,
                        )
                    }
                    Answer::Stream(started) => Done::Stream {
                        total: upstream::total_by(up.timeouts.total, started.started, deadline),
                        started,
                        upstream: up_proto,
                        idle: up.timeouts.idle,
                    },
                })
            }
        })
        .await
}

/// What translating a whole answer holds at its peak, in copies of the
/// upstream's bytes: the bytes, the parsed tree, the canonical answer,
/// its translation and the new text. Six: measured with serve_memory's
/// 4 MiB answers (four under-counted: the peak went past the budget).
const TRANSLATION_COPIES: usize = 6;

/// A whole answer's bytes, holding their place in the budget of buffered
/// upstream bytes until hyper has written them (the body is dropped then).
struct HeldBody {
    bytes: Option<Bytes>,
    _held: upstream::Held,
}

impl axum::body::HttpBody for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Self::Error>>> {
        std::task::Poll::Ready(self.bytes.take().map(|b| Ok(hyper::body::Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        hyper::body::SizeHint::with_exact(self.bytes.as_ref().map_or(0, |b| b.len() as u64))
    }
}

// The answer's own headers, named once: a `&str` name is parsed and
// checked again on every insert (a fifth of `success` in the profile).
const X_MODEL: HeaderName = HeaderName::from_static("x-failover-model");
const X_PROFILE: HeaderName = HeaderName::from_static("x-failover-profile");
const X_ATTEMPTS: HeaderName = HeaderName::from_static("x-failover-attempts");
const X_NOTICE: HeaderName = HeaderName::from_static("x-failover-notice");
const X_OVERHEAD_US: HeaderName = HeaderName::from_static("x-failover-overhead-us");

fn header_value(text: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(text).ok()
}

/// A notice as a header value that is ASCII whatever the `http` crate's
/// version accepts (issue 48 item 1; RFC 9110 field values are ASCII):
/// the text without its non-ASCII characters (`Model Fallback: …`), then,
/// when something was left out, the whole text as an RFC 8187 extended
/// parameter, `; text*=UTF-8''%E2%86%AA…`. The body's `failover` object
/// and the log keep the text as it is.
fn notice_header(text: &str) -> Option<HeaderValue> {
    if text.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return header_value(text);
    }
    let ascii: String = text
        .chars()
        .filter(|c| (' '..='~').contains(c))
        .collect::<String>()
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    let mut value = format!("{ascii}; text*=UTF-8''");
    for b in text.bytes() {
        // RFC 8187 attr-char; everything else percent-encoded.
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            value.push(b as char);
        } else {
            value.push_str(&format!("%{b:02X}"));
        }
    }
    header_value(&value)
}

#[allow(clippy::too_many_arguments)]
fn success(
    gw: &Arc<Gateway>,
    set: &Arc<ActiveSet>,
    protocol: Protocol,
    req: &Arc<ClientRequest>,
    runner: Arc<Runner>,
    out: RunOutput<Done>,
    permit: Permits,
    (run_req, anthropic_headers): (RunRequest, Vec<(HeaderName, HeaderValue)>),
) -> Response {
    let mut h = HeaderMap::new();
    if let Some(v) = header_value(&out.model_ref()) {
        h.insert(X_MODEL, v);
    }
    if let Some(v) = out.profile_id.as_deref().and_then(header_value) {
        h.insert(X_PROFILE, v);
    }
    h.insert(X_ATTEMPTS, HeaderValue::from(out.attempts.len()));
    for n in &out.notices {
        // The notice as it is (the header's is ASCII).
        tracing::info!(target: "failover::serve", notice = %n, "model_fallback_notice");
        match notice_header(&n.to_string()) {
            Some(v) => {
                h.append(X_NOTICE, v);
            }
            None => {
                tracing::warn!(target: "failover::serve", header = "x-failover-notice", "a header could not be set")
            }
        }
    }
    let model_label = set.model_label(&out.provider, &out.model).to_string();
    let served: Vec<ModelRef> = ModelRef::parse(&out.model_ref()).into_iter().collect();
    match out.value {
        Done::Whole(bytes, held) => {
            h.insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            let body = HeldBody {
                bytes: Some(bytes),
                _held: held,
            };
            (StatusCode::OK, h, Body::new(body)).into_response()
        }
        Done::Stream {
            started,
            upstream,
            idle,
            total,
        } => {
            let wants_usage = req
                .body
                .get("stream_options")
                .and_then(|o| o.get("include_usage"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let mut src =
                stream::Source::new(started, upstream, protocol, wants_usage, idle, total);
            src.budget = Some(gw.buffers.clone());
            // Issue 32: a broken stream is finished by the next candidate.
            let cont = continuation::request_continuable(req).then(|| {
                Box::new(continuation::Continuer {
                    gw: gw.clone(),
                    set: set.clone(),
                    runner: runner.clone(),
                    req: req.clone(),
                    run_req,
                    anthropic_headers,
                    served,
                })
            });
            let relay = stream::Relay::new(
                src,
                protocol,
                stream::Recorder {
                    runner,
                    set: set.clone(),
                    provider: out.provider.clone(),
                    model: out.model.clone(),
                    profile_id: out.profile_id.clone(),
                    metrics: gw.metrics.clone(),
                    model_label,
                },
                cont,
                Some(permit),
            );
            h.insert(
                axum::http::header::CONTENT_TYPE,
                HeaderValue::from_static("text/event-stream"),
            );
            h.insert(
                axum::http::header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache"),
            );
            (StatusCode::OK, h, Body::from_stream(relay.into_stream())).into_response()
        }
    }
}

/// A run's error as the client sees it (see the module documentation).
fn run_error(set: &ActiveSet, runner: &Runner, e: RunError) -> ClientError {
    match e {
        RunError::Provider { error } => {
            let f = &error.failure;
            let status = f.status.filter(|s| (400..600).contains(s)).unwrap_or(502);
            let (message, ty) = f
                .body
                .as_deref()
                .and_then(upstream_message)
                .unwrap_or_else(|| (error.text_scrubbed.clone(), None));
            ClientError {
                status,
                message,
                error_type: ty,
                code: f.code.clone(),
                retry_after: None,
                detail: Some(Box::new(json!({
                    "reason": error.reason,
                    "provider": error.provider,
                    "model": error.model,
                    "attempts": error.attempts,
                }))),
            }
        }
        RunError::Summary(s) => {
            let cools = |r: &str| {
                set.engine
                    .behaviour(r)
                    .is_some_and(|b| b.cooldown || b.disable.is_some())
            };
            let all_cooling = !s.attempts.is_empty()
                && s.attempts
                    .iter()
                    .all(|a| a.reason.as_deref().is_some_and(cools));
            // A 429 tells the client (and its SDK) that *it* is rate
            // limited: only when rate limits are what cooled every
            // candidate (reasons that spend the `rate_limited` rotation
            // budget). Anything else cooling them (timeouts, overloads,
            // unreachable hosts) is the service being unavailable: 503.
            let rate_limited = |r: &str| {
                set.engine
                    .behaviour(r)
                    .and_then(|b| b.rotations)
                    .is_some_and(|b| b.name() == "rate_limited")
            };
            let all_rate_limited = all_cooling
                && s.attempts
                    .iter()
                    .all(|a| a.reason.as_deref().is_some_and(rate_limited));
            let now = runner.now_ms();
            let retry = s
                .soonest_cooldown_expiry
                .filter(|_| all_cooling)
                .map(|t| t.saturating_sub(now).div_ceil(1000).max(1));
            ClientError {
                status: if retry.is_some() && all_rate_limited {
                    429
                } else {
                    503
                },
                message: s.to_string(),
                error_type: None,
                code: Some("fallback_summary".into()),
                retry_after: retry,
                detail: Some(Box::new(json!({
                    "attempts": s.attempts,
                    "soonestCooldownExpiry": s.soonest_cooldown_expiry,
                }))),
            }
        }
        RunError::Chain(c) => ClientError::new(404, c.to_string()),
        RunError::Store(e) => {
            tracing::error!(target: "failover::serve", error = %e, "state store error");
            ClientError::new(500, "the gateway cannot read or write its state directory")
        }
        other => ClientError::new(502, other.to_string()),
    }
}

/// A running gateway (for `serve` and for tests). [`Running::shutdown`]
/// stops it gracefully; dropping it instead closes every connection at once.
pub struct Running {
    /// The address the gateway listens on (the real port when `:0` was asked).
    pub addr: SocketAddr,
    /// The gateway, shared with the server task.
    pub gateway: Arc<Gateway>,
    /// To the server(s): [`DRAIN`] stops accepting and lets in-flight
    /// requests finish, [`DROP`] closes what is left.
    stop: tokio::sync::watch::Sender<u8>,
    server: tokio::task::JoinHandle<()>,
    watcher: Option<tokio::task::JoinHandle<()>>,
}

/// Binds and starts serving. `Err` holds diagnostics or the bind error.
pub async fn start(opts: Options) -> Result<Running, Error> {
    // The watcher's first look is taken before the set is read, so a
    // change made while it is built is not missed.
    let first_look = state::off_runtime(|| reload::fingerprint(&opts.sources));
    let stores = Stores::default();
    stores.preopen(&opts.sources).await?;
    let lanes = opts.workers.max(1);
    let gateway = state::off_runtime(|| Gateway::with_lanes(opts.sources.clone(), stores, lanes))?;
    let listener = tokio::net::TcpListener::bind(&opts.listen)
        .await
        .map_err(|source| Error::Listen {
            addr: opts.listen.clone(),
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| Error::Listen {
        addr: opts.listen.clone(),
        source,
    })?;
    // R18.6: off loopback, an unwritten clientAuth is `required`.
    gateway.auth.set_loopback(addr.ip().is_loopback());
    if gateway.auth.open_on_network() {
        tracing::warn!(target: "failover::serve", listen = %addr, "serve.clientAuth is off on a non-loopback address: anyone who reaches it spends the provider keys");
    }
    tracing::info!(target: "failover::serve", client_auth = gateway.auth.describe().await, "client keys");
    let (stop, stopped) = tokio::sync::watch::channel(0u8);
    let app = gateway.router();
    let server = if opts.workers == 0 {
        tokio::spawn(serve_until(
            listener,
            app,
            stopped,
            gateway.settling.clone(),
        ))
    } else {
        let shared = listener.into_std().map_err(|source| Error::Listen {
            addr: opts.listen.clone(),
            source,
        })?;
        let mut done = Vec::with_capacity(opts.workers);
        for lane in 0..opts.workers {
            let worker = shared
                .try_clone()
                .and_then(|l| {
                    spawn_worker(
                        lane,
                        l,
                        app.clone(),
                        stopped.clone(),
                        gateway.settling.clone(),
                    )
                })
                .map_err(|source| Error::Worker { lane, source })?;
            done.push(worker);
        }
        tokio::spawn(async move {
            for d in done {
                let _ = d.await;
            }
        })
    };
    let watcher = opts.watch.then(|| {
        let gw = gateway.clone();
        tokio::spawn(async move {
            let sources = gw.sources.clone();
            let mut last = first_look;
            loop {
                tokio::time::sleep(WATCH_INTERVAL).await;
                let s = sources.clone();
                let now = tokio::task::spawn_blocking(move || reload::fingerprint(&s))
                    .await
                    .unwrap_or_default();
                if now != last {
                    last = now;
                    let _ = gw.reload();
                }
            }
        })
    });
    tracing::info!(target: "failover::serve", listen = %addr, ruleset = %gateway.active().hash, "listening");
    Ok(Running {
        addr,
        gateway,
        stop,
        server,
        watcher,
    })
}

/// [`Running::stop`]'s values.
const DRAIN: u8 = 1;
const DROP: u8 = 2;

/// A client that has not sent a whole request head after this long is
/// disconnected (hyper's header timeout; the body has [`BODY_READ_TIMEOUT`]).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves `listener` until told to [`DRAIN`] (then until its connections
/// are done) or to [`DROP`], which closes every connection left.
///
/// The accept loop is the gateway's own rather than `axum::serve`'s:
/// that one spawns each connection as a detached task, so a grace period
/// that ran out could not close them (the request went on being served).
/// Here every connection is a task of one `JoinSet`, dropped with it.
async fn serve_until(
    listener: tokio::net::TcpListener,
    app: Router,
    stop: tokio::sync::watch::Receiver<u8>,
    settling: Arc<Settling>,
) {
    let mut conns = tokio::task::JoinSet::new();
    let mut drain = stop.clone();
    loop {
        tokio::select! {
            biased;
            _ = reached(&mut drain, DRAIN) => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((socket, _)) => {
                    conns.spawn(serve_connection(socket, app.clone(), stop.clone()));
                }
                // Out of file descriptors and the like: the connections
                // being served go on; accept again shortly.
                Err(e) => {
                    tracing::warn!(target: "failover::serve", error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
        }
    }
    drop(listener);
    let mut dropped = stop;
    tokio::select! {
        _ = async {
            while conns.join_next().await.is_some() {}
            // The last answers' success records (this worker's and the
            // others': a runtime that stops drops its tasks).
            settling.idle().await;
        } => {}
        _ = reached(&mut dropped, DROP) => {}
    }
}

/// Waits until the stop signal is at `level` (or its sender is gone).
async fn reached(stop: &mut tokio::sync::watch::Receiver<u8>, level: u8) {
    let _ = stop.wait_for(|s| *s >= level).await;
}

/// One client connection (HTTP/1.1, keep-alive): requests go to the
/// router; on [`DRAIN`] the connection finishes the request it is on and
/// closes.
async fn serve_connection(
    socket: tokio::net::TcpStream,
    app: Router,
    mut stop: tokio::sync::watch::Receiver<u8>,
) {
    // Answers and stream events are written as they are ready.
    let _ = socket.set_nodelay(true);
    // The first bytes, within the header timeout and until a drain (an
    // idle connection that sent nothing holds no request to finish).
    let h2 = tokio::select! {
        h2 = tokio::time::timeout(HEADER_READ_TIMEOUT, h2_prior_knowledge(&socket)) => h2,
        _ = reached(&mut stop, DRAIN) => return,
    };
    match h2 {
        Err(_) => return,
        Ok(true) => return refuse_h2(socket).await,
        Ok(false) => {}
    }
    let service =
        hyper::service::service_fn(move |req: axum::http::Request<hyper::body::Incoming>| {
            let mut app = app.clone();
            // A `Router` is always ready: no `poll_ready` needed.
            tower_service::Service::call(&mut app, req.map(Body::new))
        });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(hyper_util::rt::TokioIo::new(socket), service);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = reached(&mut stop, DRAIN) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
}

/// The connection preface of an HTTP/2 client with prior knowledge
/// (RFC 9113 §3.4).
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Whether the client opened with the HTTP/2 preface: its first bytes are
/// peeked (not read; an HTTP/1.1 request goes to hyper whole). No HTTP/1.1
/// method starts with `PR`, so three bytes decide; a client that sends
/// fewer is waited for briefly, then served as HTTP/1.1.
async fn h2_prior_knowledge(socket: &tokio::net::TcpStream) -> bool {
    let mut buf = [0u8; 3];
    for _ in 0..50 {
        match socket.peek(&mut buf).await {
            Ok(0) | Err(_) => return false,
            Ok(n) if buf[..n] != H2_PREFACE[..n] => return false,
            Ok(3) => return true,
            Ok(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
    false
}

/// HTTP/2 with prior knowledge is not served (the gateway speaks HTTP/1.1
/// to its clients, as every SDK does by default): the client is told in
/// its own protocol, an empty SETTINGS frame then a GOAWAY with error
/// `HTTP_1_1_REQUIRED` (RFC 9113 §7) and a sentence, after which clients
/// such as curl say so or retry over HTTP/1.1, instead of a connection
/// closed without a word.
async fn refuse_h2(mut socket: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    const WHY: &[u8] = b"failover serves HTTP/1.1 only: connect without HTTP/2 prior knowledge";
    let mut frames = Vec::with_capacity(9 + 9 + 8 + WHY.len());
    let mut frame = |kind: u8, payload: &[u8]| {
        let len = (payload.len() as u32).to_be_bytes();
        frames.extend_from_slice(&len[1..]);
        frames.extend_from_slice(&[kind, 0, 0, 0, 0, 0]);
        frames.extend_from_slice(payload);
    };
    frame(0x4, &[]); // SETTINGS, none changed
    let mut goaway = Vec::with_capacity(8 + WHY.len());
    goaway.extend_from_slice(&0u32.to_be_bytes()); // last stream id: none
    goaway.extend_from_slice(&0xdu32.to_be_bytes()); // HTTP_1_1_REQUIRED
    goaway.extend_from_slice(WHY);
    frame(0x7, &goaway); // GOAWAY
    let _ = tokio::time::timeout(HEADER_READ_TIMEOUT, async {
        let _ = socket.write_all(&frames).await;
        let _ = socket.shutdown().await;
    })
    .await;
}

/// One worker: a thread whose runtime accepts from its own handle of the
/// shared listening socket and runs every task of the connections it
/// accepted — the request, its store calls, its upstream pool's
/// connections ([`lane`]) — so a request's steps never wake another
/// thread. (One runtime over all cores hands tasks between its workers:
/// on one keep-alive connection it woke the other worker for every
/// request, 8.6–9.2 context switches per request against 5.3–5.6 here,
/// `perf stat`; benches/README.md "Gateway".) The runtime is
/// tokio's multi-thread kind with one worker, so that `block_in_place`
/// still keeps a blocking store call off the worker's other tasks.
/// The kernel gives each new connection to one worker's `accept`: an idle
/// worker takes it first.
fn spawn_worker(
    lane: usize,
    listener: std::net::TcpListener,
    app: Router,
    stop: tokio::sync::watch::Receiver<u8>,
    settling: Arc<Settling>,
) -> std::io::Result<tokio::sync::oneshot::Receiver<()>> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(format!("failover-worker-{lane}"))
        .on_thread_start(move || LANE.with(|l| l.set(lane)))
        .enable_all()
        .build()?;
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name(format!("failover-lane-{lane}"))
        .spawn(move || {
            LANE.with(|l| l.set(lane));
            let task = rt.spawn(async move {
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => serve_until(l, app, stop, settling).await,
                    Err(e) => {
                        tracing::error!(target: "failover::serve", worker = lane, error = %e, "worker cannot listen")
                    }
                }
            });
            let _ = rt.block_on(task);
            // Whatever is left (a blocking store call) gets a moment.
            rt.shutdown_timeout(Duration::from_millis(100));
            let _ = done.send(());
        })?;
    Ok(finished)
}

/// How often `--watch` looks at the files.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(500);

impl Running {
    /// Graceful shutdown: stop accepting, let in-flight requests finish
    /// within the grace period, then drop what is left. Every store update
    /// is durable when it returns; the success records written after their
    /// answers are waited for within the same grace period.
    pub async fn shutdown(mut self) {
        self.gateway.shutting_down.store(true, Ordering::SeqCst);
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
        let _ = self.stop.send(DRAIN);
        let grace = self.gateway.active().settings.shutdown_grace;
        if tokio::time::timeout(grace, &mut self.server).await.is_err() {
            tracing::warn!(target: "failover::serve", grace_ms = grace.as_millis() as u64, "shutdown grace period over; closing the remaining connections");
            let _ = self.stop.send(DROP);
            let _ = tokio::time::timeout(Duration::from_secs(1), &mut self.server).await;
            self.server.abort();
        }
        let auth = self.gateway.auth.clone();
        let _ = tokio::task::spawn_blocking(move || auth.maybe_flush(true)).await;
        tracing::info!(target: "failover::serve", "stopped");
    }
}

/// How `serve` writes its log lines (`--log-level`, `RUST_LOG`,
/// `--log-format`).
#[derive(Clone, Debug, Default)]
pub struct Logging {
    /// `--log-level`: a level (`debug`) or `tracing-subscriber` env-filter
    /// directives (`info,failover::serve=debug`); it wins over `RUST_LOG`.
    /// Neither: `info`.
    pub level: Option<String>,
    /// `--log-format`.
    pub format: LogFormat,
}

/// The shape of the log lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One flat JSON object per event (the default; docs/tracing.md).
    #[default]
    Json,
    /// tracing-subscriber's human-readable lines, for a terminal.
    Text,
}

impl Logging {
    /// The directives in force: `--log-level`, else a non-empty
    /// `RUST_LOG`, else `info`.
    fn directives(&self, rust_log: Option<String>) -> String {
        self.level
            .clone()
            .or(rust_log)
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| "info".into())
    }

    /// The filter of the log lines: the directives, events only.
    fn filter(&self, rust_log: Option<String>) -> Result<tracing_subscriber::EnvFilter, String> {
        let d = self.directives(rust_log);
        tracing_subscriber::EnvFilter::builder()
            .parse(&d)
            .map_err(|e| format!("error: log level `{d}`: {e} (a level such as `debug`, or directives such as `info,failover::serve=debug`)"))
    }
}

#[cfg(test)]
mod logging_tests {
    use super::Logging;

    // Issue 48: `--log-level` wins over `RUST_LOG`, an empty one is
    // unwritten, neither is `info`; bad directives are a clear error.
    #[test]
    fn i48_log_level_precedence_and_errors() {
        let flag = |l: Option<&str>| Logging {
            level: l.map(str::to_string),
            ..Default::default()
        };
        assert_eq!(flag(None).directives(None), "info");
        assert_eq!(flag(None).directives(Some("warn".into())), "warn");
        assert_eq!(flag(None).directives(Some("  ".into())), "info");
        assert_eq!(flag(Some("debug")).directives(Some("warn".into())), "debug");
        assert!(flag(Some("info,failover::serve=debug"))
            .filter(None)
            .is_ok());
        let e = flag(Some("info,failover=notalevel"))
            .filter(None)
            .unwrap_err();
        assert!(e.contains("log level `info,failover=notalevel`"), "{e}");
    }
}

/// `failover serve`: runs until SIGTERM or Ctrl-C; SIGHUP reloads.
/// Returns the exit code.
pub fn main(opts: Options, logging: Logging) -> i32 {
    let env_filter = match logging.filter(std::env::var("RUST_LOG").ok()) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    // Log lines are gathered in a buffer that one thread writes out in
    // batches (`log::Batched`): a request's worker never waits on stderr
    // (at most it wakes the writer for a batch's first line), and no line
    // is dropped. The
    // guard writes what is waiting when `main` returns.
    let (writer, _flush) = match log::Batched::start(std::io::stderr()) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("error: cannot start the log writer thread: {e}");
            return 2;
        }
    };
    // One flat JSON object per event (`log.rs`). The runner's `failover_run` and
    // `failover_attempt` spans (docs/tracing.md) are for trace exporters;
    // the log lines never show them, so the filter turns them off at the
    // callsite: a span no layer wants is never built (building two per
    // request cost 24k instructions, +12%, in the fmt layer).
    use tracing_subscriber::filter::FilterExt as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    use tracing_subscriber::Layer as _;
    let events = tracing_subscriber::filter::filter_fn(|m| m.is_event());
    let filter = env_filter.and(events);
    // Boxed: one of two layer types, chosen once at start.
    type Boxed = Box<dyn tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync>;
    let layer: Boxed = match logging.format {
        LogFormat::Json => Box::new(log::JsonLines::new(writer).with_filter(filter)),
        LogFormat::Text => Box::new(
            tracing_subscriber::fmt::layer()
                .with_writer(writer)
                .with_ansi(false)
                .with_filter(filter),
        ),
    };
    // OpenTelemetry traces when OTEL_EXPORTER_OTLP_ENDPOINT is set
    // (src/otel.rs); otherwise no layer at all.
    let (traces_layer, traces) = match otel::start::<tracing_subscriber::Registry>() {
        Ok(Some((l, t))) => (Some(Box::new(l) as Boxed), Some(t)),
        Ok(None) => (None, None),
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    let layers: Vec<Boxed> = std::iter::once(layer).chain(traces_layer).collect();
    let _ = tracing_subscriber::registry().with(layers).try_init();
    // With workers (the default) this runtime only starts the gateway,
    // handles signals and reloads, and holds a shared backend's connection:
    // one thread is enough. With `--workers 0` it serves too, on every core.
    let threads = if opts.workers == 0 {
        default_workers()
    } else {
        1
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return 2;
        }
    };
    let code = rt.block_on(async move {
        let running = match start(opts).await {
            Ok(r) => r,
            Err(e) => {
                let text = e.to_string();
                eprint!("{text}");
                if !text.ends_with('\n') {
                    eprintln!();
                }
                return 2;
            }
        };
        let gw = running.gateway.clone();
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut hup), Ok(mut term)) = (
                signal(SignalKind::hangup()),
                signal(SignalKind::terminate()),
            ) else {
                eprintln!("error: cannot install signal handlers");
                return 2;
            };
            loop {
                tokio::select! {
                    _ = hup.recv() => { let _ = gw.reload(); }
                    _ = term.recv() => break,
                    _ = tokio::signal::ctrl_c() => break,
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!(target: "failover::serve", "shutting down");
        running.shutdown().await;
        0
    });
    // The spans still waiting go out before the process ends.
    if let Some(t) = traces {
        t.shutdown();
    }
    code
}

#[cfg(test)]
mod tests {
    // Issue 48 item 1: the notice header is ASCII, and its RFC 8187
    // parameter decodes to the whole notice.
    #[test]
    fn notice_headers_are_ascii_with_the_text_in_rfc_8187() {
        let text = "↪️ Model Fallback: back/model-b (selected prim/model-a; rate limit)";
        let v = super::notice_header(text).unwrap();
        assert!(
            v.as_bytes().iter().all(|b| (0x20..0x7f).contains(b)),
            "{v:?}"
        );
        let s = v.to_str().unwrap();
        let (ascii, ext) = s.split_once("; text*=UTF-8''").unwrap();
        assert_eq!(
            ascii,
            "Model Fallback: back/model-b (selected prim/model-a; rate limit)"
        );
        let (mut out, b, mut i) = (Vec::new(), ext.as_bytes(), 0);
        while i < b.len() {
            if b[i] == b'%' {
                out.push(u8::from_str_radix(&ext[i + 1..i + 3], 16).unwrap());
                i += 3;
            } else {
                out.push(b[i]);
                i += 1;
            }
        }
        assert_eq!(String::from_utf8(out).unwrap(), text);
        // An ASCII notice is sent as it is.
        assert_eq!(
            super::notice_header("Model Fallback cleared: a/b").unwrap(),
            "Model Fallback cleared: a/b"
        );
    }

    use super::*;

    /// A drain waits for every record being written, and not longer.
    #[tokio::test(start_paused = true)]
    async fn settling_is_idle_when_the_last_record_is_written() {
        let s = Arc::new(Settling::default());
        tokio::time::timeout(Duration::from_secs(1), s.idle())
            .await
            .expect("idle with nothing written");
        let (a, b) = (s.start(), s.start());
        let waiting = tokio::spawn({
            let s = s.clone();
            async move { s.idle().await }
        });
        tokio::task::yield_now().await;
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "one record is still being written");
        drop(b);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("idle once both are written")
            .unwrap();
    }
}
