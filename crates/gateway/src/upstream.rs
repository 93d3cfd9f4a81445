//! One upstream call: the body for the candidate, the credential header,
//! the timeouts, and a failure as the classifier needs it.
//!
//! A failure keeps what the provider sent — status, `Retry-After` (as the
//! exact reset time of R6.7) and body — with the body read only up to
//! [`ERROR_BODY_HEAD`] (the engine reads no more of a message), lossily
//! decoded, whatever it is (HTML, binary, gigabytes): the rest is never
//! read, and dropping the response closes the connection. The gateway
//! never waits out a `Retry-After` itself: with a chain to walk, every
//! retryable response surfaces at once (the strict end of R7.5).
//!
//! Time to first byte has its own deadline: the response head and, for a
//! stream, its first event must come within `firstByteMs`, else the
//! attempt fails with a `timeout`-shaped error (`ETIMEDOUT`). A stream's
//! first *content* has another, `firstTokenMs` (issue 32), a timer from
//! the request (issue 44): until it fires or the content comes, the
//! events read (`message_start`, role-only chunks, pings) are held and
//! comments are ignored, so nothing has reached the client and a stream
//! that never says anything fails over like a silent upstream, at
//! `firstTokenMs` whatever it sends before.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::http::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE};
use axum::http::{Method, Request};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use http_body_util::{BodyDataStream, Full};
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use failover::state::{Credential, Profile};
use failover::{AttemptError, Cause, ProviderFailure};

use super::metrics::Metrics;
use super::protocol::Protocol;
use super::sse::SseParser;
use super::translate::Event;
use super::upstreams::{Api, Upstream};

/// The head of an upstream error body that is read (the engine's 1 MiB).
pub(crate) const ERROR_BODY_HEAD: usize = 1 << 20;
/// A whole (non-streamed) successful answer larger than this is a failure
/// rather than memory the gateway holds for one request.
pub(crate) const MAX_ANSWER_BYTES: usize = 64 << 20;
/// Events held before the first content (pings, `message_start`, role
/// chunks) at most: past this many the stream is delivered as it is.
const MAX_HELD_EVENTS: usize = 64;
/// `anthropic-version` sent when the client gave none.
const ANTHROPIC_VERSION: &str = "2023-06-01";

/// The gateway-wide budget of upstream bytes held in memory at once
/// (`serve.maxBufferedBytes`, issue 30): every whole answer and error head
/// being read takes its size from it as it arrives and gives it back when
/// the client has it. A per-request limit alone lets several large
/// answers at once take the process's memory many times over.
///
/// One request's holdings are also bounded by its share
/// (`serve.maxRequestBufferedBytes`, half the budget unless written), so
/// that one large answer cannot take the budget from every other request.
#[derive(Clone, Debug)]
pub(crate) struct Buffers {
    kib: Arc<tokio::sync::Semaphore>,
    total: usize,
    share: usize,
}

/// Bytes held against the [`Buffers`] budget; given back when dropped.
pub(crate) type Held = Option<tokio::sync::OwnedSemaphorePermit>;

/// Which bound [`Buffers::cover`] met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Over {
    /// The gateway-wide budget (`serve.maxBufferedBytes`).
    Budget,
    /// One request's share of it (`serve.maxRequestBufferedBytes`).
    Share,
}

impl Buffers {
    /// A budget of `bytes` (counted in KiB), of which one holding may take
    /// `share` (`None`: half).
    pub(crate) fn new(bytes: usize, share: Option<usize>) -> Self {
        let kib = bytes
            .div_ceil(1024)
            .min(tokio::sync::Semaphore::MAX_PERMITS);
        Buffers {
            kib: Arc::new(tokio::sync::Semaphore::new(kib)),
            total: bytes,
            share: share.unwrap_or(bytes / 2).min(bytes),
        }
    }

    /// The budget, in bytes.
    pub(crate) fn total(&self) -> usize {
        self.total
    }

    /// One request's share of it, in bytes.
    pub(crate) fn share(&self) -> usize {
        self.share
    }

    /// Grows `held` to cover `bytes`; `Err` names the bound that has no room.
    pub(crate) fn cover(&self, held: &mut Held, bytes: usize) -> Result<(), Over> {
        if bytes > self.share {
            return Err(Over::Share);
        }
        let want = bytes.div_ceil(1024);
        let have = held.as_ref().map_or(0, |p| p.num_permits());
        if want <= have {
            return Ok(());
        }
        let Ok(more) = u32::try_from(want - have) else {
            return Err(Over::Budget);
        };
        match self.kib.clone().try_acquire_many_owned(more) {
            Ok(p) => {
                match held {
                    Some(h) => h.merge(p),
                    None => *held = Some(p),
                }
                Ok(())
            }
            Err(_) => Err(Over::Budget),
        }
    }

    /// What an error says of the bound `over` met, `what` being held:
    /// the setting that bounds it, and its size.
    pub(crate) fn over_text(&self, over: Over, what: &str) -> String {
        match over {
            Over::Budget => format!(
                "the gateway is holding its limit of {} MiB of {what} (serve.maxBufferedBytes)",
                self.total >> 20
            ),
            Over::Share => format!(
                "this request reached its share of {} MiB of the gateway's {} MiB of {what} (serve.maxRequestBufferedBytes of serve.maxBufferedBytes)",
                self.share >> 20,
                self.total >> 20
            ),
        }
    }
}

/// Why [`read_head`] stopped before the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// It read the whole body.
    Whole,
    /// The per-body limit.
    Limit,
    /// The gateway-wide budget, or the request's share of it.
    Budget(Over),
}

/// The body stream of an upstream response.
pub(crate) type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, hyper::Error>> + Send>>;

/// The pooled HTTP/1.1 client of one upstream, plain or TLS (rustls).
///
/// hyper-util's pooled client, not reqwest: reqwest wraps this same client
/// in a redirect layer that parses the URL twice per request (from the URI
/// text), a retry layer and its own futures, together about 30,000
/// instructions per request, 18% of the gateway's (callgrind,
/// benches/README.md "Gateway"). The gateway needs none of it: it never
/// follows redirects or retries a call itself (every failure goes to the
/// policy), and it sets its own timeouts.
pub(crate) type Client =
    hyper_util::client::legacy::Client<hyper_rustls::HttpsConnector<Connect>, Full<Bytes>>;

/// How a connection to an upstream is made: directly, or through the
/// proxy that `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY` name for it (with
/// `NO_PROXY` exceptions, as curl reads them; read once at start), as an
/// HTTP `CONNECT` tunnel for `https://` and `http://` upstreams alike. TLS
/// to the upstream runs inside the tunnel. Credentials in the proxy URL
/// are sent as `Proxy-Authorization: Basic`.
#[derive(Clone)]
pub struct Connect {
    direct: HttpConnector,
    proxies: Arc<Matcher>,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower_service::Service<axum::http::Uri> for Connect {
    type Response = TokioIo<tokio::net::TcpStream>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.direct.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, dst: axum::http::Uri) -> Self::Future {
        let direct = self.direct.clone();
        match self.proxies.intercept(&dst) {
            None => {
                let mut c = direct;
                Box::pin(async move { c.call(dst).await.map_err(Into::into) })
            }
            Some(via) => {
                let mut t = Tunnel::new(via.uri().clone(), direct);
                if let Some(auth) = via.basic_auth() {
                    t = t.with_auth(auth.clone());
                }
                Box::pin(async move { t.call(dst).await.map_err(Into::into) })
            }
        }
    }
}

/// A successful attempt.
pub(crate) enum Answer {
    /// A whole answer, as the upstream sent it: the bytes of one JSON
    /// object (checked, not parsed into a tree: a client of the same
    /// protocol gets these bytes unchanged), and their place in the
    /// budget, held until the client has them.
    Whole(Bytes, Held),
    /// A stream whose first event has arrived.
    Stream(Started),
}

/// A stream that has produced its first event: the rest is read by
/// [`super::stream`] after the runner has settled the run.
pub(crate) struct Started {
    pub body: BodyStream,
    pub parser: super::sse::Framing,
    pub first: Vec<Event>,
    pub started: Instant,
    /// The credentials this call sent: an exact copy of one in the
    /// answer is masked (issue 44 item 17, [`mask_sent`]).
    pub secrets: Vec<String>,
}

/// The credential values a call with `profile` sends (a key, a token, an
/// AWS secret key and session token; never an access key id, which names
/// a key). Shorter than 8 bytes: left out, as words, not keys.
fn sent_secrets(profile: Option<(&str, &Profile)>) -> Vec<String> {
    let Some((_, p)) = profile else {
        return Vec::new();
    };
    let list = match &p.credential {
        Credential::ApiKey { key, .. } => vec![key.as_ref()],
        Credential::OAuth { access, .. } => vec![access.as_ref()],
        Credential::Token { token, .. } => vec![token.as_ref()],
        Credential::Aws {
            secret_access_key,
            session_token,
            ..
        } => vec![secret_access_key.as_ref(), session_token.as_ref()],
    };
    list.into_iter()
        .flatten()
        .map(|s| s.expose().trim().to_string())
        .filter(|s| s.len() >= 8)
        .collect()
}

/// Issue 44 item 17: an answer's text is the provider's, but a whole,
/// exact copy of the credential the gateway sent it (as written, or with
/// JSON's `\/` for `/`) is replaced by `<redacted>` before the client
/// reads it: a provider that echoes the key (a debugging proxy, a model
/// shown its own request) never hands it on. One `memmem` per secret; a
/// key split across two stream events is not seen (documented).
pub(crate) fn mask_sent(text: &[u8], secrets: &[String]) -> Option<Vec<u8>> {
    let mut out: Option<Vec<u8>> = None;
    for s in secrets {
        let escaped = s.contains('/').then(|| s.replace('/', "\\/"));
        for form in std::iter::once(s.as_str()).chain(escaped.as_deref()) {
            let cur = out.as_deref().unwrap_or(text);
            if memchr::memmem::find(cur, form.as_bytes()).is_none() {
                continue;
            }
            let mut next = Vec::with_capacity(cur.len());
            let mut last = 0;
            // Matches do not overlap: `find_iter` resumes after each.
            for at in memchr::memmem::find_iter(cur, form.as_bytes()) {
                next.extend_from_slice(&cur[last..at]);
                next.extend_from_slice(b"<redacted>");
                last = at + form.len();
            }
            next.extend_from_slice(&cur[last..]);
            out = Some(next);
        }
    }
    out
}

pub(crate) fn protocol_of(api: Api) -> Protocol {
    match api {
        Api::OpenAiCompletions | Api::AzureOpenAiCompletions => Protocol::OpenAi,
        Api::AnthropicMessages => Protocol::Anthropic,
        Api::OpenAiResponses | Api::AzureOpenAiResponses => Protocol::Responses,
        Api::GoogleGenerativeAi => Protocol::Gemini,
        Api::BedrockConverseStream => Protocol::Bedrock,
    }
}

/// The pooled client of one upstream (its connect timeout is per client).
pub(crate) fn client_for(u: &Upstream) -> Client {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(u.timeouts.connect));
    http.set_nodelay(true);
    // `https://` base URLs go through rustls; `enforce_http(false)` lets
    // the TLS connector see them.
    http.enforce_http(false);
    let connect = Connect {
        direct: http,
        proxies: Arc::new(Matcher::from_env()),
    };
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_webpki_roots()
        .https_or_http()
        .enable_http1()
        .wrap_connector(connect);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_timer(TokioTimer::new())
        .build(connector)
}

fn timeout_failure(what: &str, after: Duration) -> AttemptError {
    AttemptError::Provider(ProviderFailure::timeout(what, after))
}

/// A failed send, with the host it was for and the cause as a closed list
/// (connection refused, DNS, TLS, timed out, reset). The error's own text
/// is never used (it could carry the URL), only its kind; the message
/// still begins `upstream connection refused or failed`, which the rules
/// read as `timeout` (REFERENCE a.7).
fn send_failure(e: &hyper_util::client::legacy::Error, uri: &axum::http::Uri) -> AttemptError {
    let host = match (uri.host(), uri.port_u16()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => "the upstream".to_string(),
    };
    if e.is_connect() {
        let why = connect_cause(e);
        let what = format!("connection refused or failed ({host}: {why})");
        // Issue 48: the reason stays the original's `timeout`; the cause
        // says which of these it was.
        let cause = match why {
            "TLS handshake failed" => Cause::Tls,
            "connect timed out" => Cause::Deadline,
            "connection reset" => Cause::ConnectionReset,
            _ => Cause::Connect,
        };
        return AttemptError::Provider(ProviderFailure::transport(&what).with_cause(cause));
    }
    // The request went out and the connection broke before the response
    // head: a reset (`ECONNRESET`, which the rules read as `timeout` as
    // they read the message), which a retry budget may ask again.
    AttemptError::Provider(
        ProviderFailure::transport(&format!("network error ({host})"))
            .with_code("ECONNRESET")
            .with_cause(Cause::ConnectionReset),
    )
}

/// Why a connection could not be made, from the error's sources: one of a
/// few fixed phrases, never the sources' text.
fn connect_cause(e: &(dyn std::error::Error + 'static)) -> &'static str {
    let mut cur = e.source();
    while let Some(s) = cur {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            match io.kind() {
                K::ConnectionRefused => return "connection refused",
                K::TimedOut => return "connect timed out",
                K::ConnectionReset | K::ConnectionAborted => return "connection reset",
                K::AddrNotAvailable | K::NetworkUnreachable | K::HostUnreachable => {
                    return "network unreachable"
                }
                _ => {}
            }
        }
        // hyper-util's connector and rustls name their failures with
        // fixed texts: only those are compared, never echoed.
        let text = s.to_string().to_ascii_lowercase();
        if text.starts_with("dns error") || text.contains("failed to lookup address") {
            return "DNS lookup failed";
        }
        if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
            return "TLS handshake failed";
        }
        cur = s.source();
    }
    "connection failed"
}

/// An attempt on a provider with no credential for the agent and no
/// `auth: none`: a 401 the rules read as `auth`, with the fix.
fn no_credential(provider: &str) -> AttemptError {
    AttemptError::Provider(
        ProviderFailure::message(format!(
            "no credential for provider `{provider}`: the request was not sent; add a profile to the agent's auth-profiles.json, set `apiKey: \"${{ENV_VAR}}\"` on the provider, or declare it `auth: none` if it takes no key"
        ))
        .with_status(401)
        .with_code("no_credential"),
    )
}

/// A body that broke off after the head.
fn body_failure(_: &hyper::Error) -> AttemptError {
    AttemptError::Provider(
        ProviderFailure::transport("connection reset while reading the response")
            .with_cause(Cause::ConnectionReset),
    )
}

/// The header an API key goes in, for an upstream protocol (`None`:
/// `Authorization: Bearer`).
fn key_header(api: Api) -> Option<HeaderName> {
    match api {
        Api::OpenAiCompletions | Api::OpenAiResponses | Api::BedrockConverseStream => None,
        Api::AnthropicMessages => Some(HeaderName::from_static("x-api-key")),
        Api::GoogleGenerativeAi => Some(HeaderName::from_static("x-goog-api-key")),
        Api::AzureOpenAiResponses | Api::AzureOpenAiCompletions => {
            Some(HeaderName::from_static("api-key"))
        }
    }
}

/// The AWS credentials and region of an `aws` profile; `None` for a
/// profile of another kind (a Bedrock API key goes as Bearer).
#[allow(clippy::type_complexity)]
fn aws_credentials(
    profile: &Profile,
    id: &str,
) -> Result<Option<(crate::aws::AwsCredentials, Option<String>)>, AttemptError> {
    let Credential::Aws {
        access_key_id,
        secret_access_key,
        session_token,
        region,
        ..
    } = &profile.credential
    else {
        return Ok(None);
    };
    match (access_key_id, secret_access_key) {
        (Some(a), Some(s)) => Ok(Some((
            crate::aws::AwsCredentials {
                access_key_id: a.expose().trim().to_string(),
                secret_access_key: s.expose().trim().to_string(),
                session_token: session_token
                    .as_ref()
                    .map(|t| t.expose().trim().to_string()),
            },
            region.clone(),
        ))),
        _ => Err(AttemptError::Skip(format!(
            "profile `{id}` has no AWS access key the gateway can use (references are not resolved)"
        ))),
    }
}

/// The credential header of a profile for an upstream protocol.
fn auth_headers(api: Api, profile: &Profile, id: &str) -> Result<HeaderMap, AttemptError> {
    let (secret, bearer) = match &profile.credential {
        Credential::ApiKey { key: Some(k), .. } => (k, key_header(api).is_none()),
        Credential::OAuth {
            access: Some(a), ..
        } => (a, true),
        Credential::Token { token: Some(t), .. } => (t, true),
        _ => {
            return Err(AttemptError::Skip(format!(
            "profile `{id}` has no key or token the gateway can send (references are not resolved)"
        )))
        }
    };
    let text = if bearer {
        format!("Bearer {}", secret.expose().trim())
    } else {
        secret.expose().trim().to_string()
    };
    let mut value = HeaderValue::from_str(&text).map_err(|_| {
        AttemptError::Skip(format!(
            "the credential of profile `{id}` cannot be sent in an HTTP header"
        ))
    })?;
    value.set_sensitive(true);
    let mut h = HeaderMap::new();
    match key_header(api) {
        Some(name) if !bearer => h.insert(name, value),
        _ => h.insert(AUTHORIZATION, value),
    };
    Ok(h)
}

/// Reads at most `limit` bytes of a body, each chunk taken from the
/// budget before it is kept (`held` grows with it).
async fn read_head(
    body: &mut BodyStream,
    limit: usize,
    buffers: &Buffers,
    held: &mut Held,
) -> Result<(Vec<u8>, Cut), hyper::Error> {
    let mut out = Vec::new();
    while let Some(chunk) = body.next().await {
        let chunk = chunk?;
        let take = chunk.len().min(limit - out.len());
        // Issue 44 item 2: the budget is charged what is allocated (the
        // buffer's capacity, grown by doubling), not what is filled.
        let need = out.len() + take;
        if need > out.capacity() {
            let cap = need.max(out.capacity().saturating_mul(2)).min(limit);
            if let Err(over) = buffers.cover(held, cap) {
                return Ok((out, Cut::Budget(over)));
            }
            out.reserve_exact(cap - out.len());
        }
        out.extend_from_slice(&chunk[..take]);
        if take < chunk.len() || out.len() == limit {
            return Ok((out, Cut::Limit));
        }
    }
    Ok((out, Cut::Whole))
}

/// What a call needs besides the upstream.
pub(crate) struct CallInput<'a> {
    pub client: &'a Client,
    pub upstream: &'a Upstream,
    /// The JSON request body, in the upstream's protocol.
    pub body: Vec<u8>,
    pub profile: Option<(&'a str, &'a Profile)>,
    /// `anthropic-version` / `anthropic-beta` of an Anthropic client, for
    /// an Anthropic upstream.
    pub anthropic_headers: Vec<(HeaderName, HeaderValue)>,
    /// The model asked for (Gemini and Azure deployments put it in the URL).
    pub model: &'a str,
    pub stream: bool,
    pub metrics: &'a Metrics,
    pub now_ms: u64,
    /// The gateway-wide budget of buffered upstream bytes.
    pub buffers: &'a Buffers,
    /// The request's deadline (`serve.requestTimeoutMs`): every deadline
    /// of this call ends by it.
    pub deadline: Option<tokio::time::Instant>,
}

/// An attempt's `totalMs` (from `started`), shortened to end by the
/// request's deadline: what a stream's relay is given.
pub(crate) fn total_by(
    total: Duration,
    started: Instant,
    deadline: Option<tokio::time::Instant>,
) -> Duration {
    match deadline {
        None => total,
        Some(d) => {
            total.min(started.elapsed() + d.saturating_duration_since(tokio::time::Instant::now()))
        }
    }
}

/// The request's deadline as a timer, from the run's `deadline_ms` and
/// the runner's clock now.
pub(crate) fn deadline_of(deadline_ms: Option<u64>, now_ms: u64) -> Option<tokio::time::Instant> {
    deadline_ms
        .map(|d| tokio::time::Instant::now() + Duration::from_millis(d.saturating_sub(now_ms)))
}

/// Makes the call. See the module documentation.
pub(crate) async fn call(input: CallInput<'_>) -> Result<Answer, AttemptError> {
    let u = input.upstream;
    let started = Instant::now();
    let by_request = |t: tokio::time::Instant| input.deadline.map_or(t, |d| t.min(d));
    let total_deadline = by_request(tokio::time::Instant::now() + u.timeouts.total);
    let first_deadline =
        by_request(tokio::time::Instant::now() + u.timeouts.first_byte.min(u.timeouts.total));
    // From the request, like the first byte's (issue 32).
    let first_token_deadline =
        by_request(tokio::time::Instant::now() + u.timeouts.first_token.min(u.timeouts.total));
    // An `aws` profile signs the request (SigV4) once its headers are set.
    let aws = match input.profile {
        Some((id, p)) if u.api == Api::BedrockConverseStream => aws_credentials(p, id)?,
        _ => None,
    };
    let mut headers = match input.profile {
        Some(_) if aws.is_some() => HeaderMap::new(),
        Some((id, p)) => auth_headers(u.api, p, id)?,
        None if u.keyless => HeaderMap::new(),
        // Issue 35: never a keyless call by accident. Nothing is sent; the
        // attempt is an authentication failure with its cause.
        None => return Err(no_credential(&u.id)),
    };
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if u.api == Api::AnthropicMessages {
        headers.insert(
            HeaderName::from_static("anthropic-version"),
            HeaderValue::from_static(ANTHROPIC_VERSION),
        );
        for (k, v) in input.anthropic_headers {
            headers.insert(k, v);
        }
    }
    let region = u.signing_region(aws.as_ref().and_then(|(_, r)| r.as_deref()));
    let uri = u
        .uri_in(input.model, input.stream, region)
        .map_err(AttemptError::Skip)?;
    if let Some((creds, _)) = &aws {
        let region = region.ok_or_else(|| {
            AttemptError::Skip(format!(
                "no AWS region for `{}`: set `region` on the provider or the profile, or AWS_REGION",
                u.id
            ))
        })?;
        crate::aws::sign(
            &Method::POST,
            &uri,
            &mut headers,
            &input.body,
            creds,
            region,
            "bedrock",
            std::time::SystemTime::now(),
        )
        .map_err(|e| AttemptError::Skip(e.to_string()))?;
        for h in ["authorization", "x-amz-security-token"] {
            if let Some(v) = headers.get_mut(h) {
                v.set_sensitive(true);
            }
        }
    }
    let mut req = Request::new(Full::new(Bytes::from(input.body)));
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri.clone();
    *req.headers_mut() = headers;
    let send = input.client.request(req);
    // Issue 44 item 5: a stream's first token cannot come before the
    // response head, so `firstTokenMs` bounds the head's wait too.
    let token_first = input.stream && first_token_deadline < first_deadline;
    let head_deadline = if token_first {
        first_token_deadline
    } else {
        first_deadline
    };
    let resp = match tokio::time::timeout_at(head_deadline, send).await {
        Err(_) if token_first => {
            return Err(timeout_failure("no first token", u.timeouts.first_token))
        }
        Err(_) => return Err(timeout_failure("no first byte", u.timeouts.first_byte)),
        Ok(Err(e)) => return Err(send_failure(&e, &uri)),
        Ok(Ok(r)) => r,
    };
    let status = resp.status().as_u16();
    let retry_after: Vec<(String, String)> = ["retry-after", "retry-after-ms"]
        .iter()
        .filter_map(|n| {
            resp.headers()
                .get(*n)
                .and_then(|v| v.to_str().ok())
                .map(|v| (n.to_string(), v.to_string()))
        })
        .collect();
    // AWS names the exception in a header (`x-amzn-ErrorType:
    // ThrottlingException:http://…`); the classifier gets the name as the
    // error type.
    let aws_error_type = resp
        .headers()
        .get("x-amzn-errortype")
        .and_then(|v| v.to_str().ok())
        .map(aws_error_name)
        .filter(|n| !n.is_empty());
    let is_event_stream = resp
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| {
            if u.api == Api::BedrockConverseStream {
                v.starts_with("application/vnd.amazon.eventstream")
            } else {
                v.starts_with("text/event-stream")
            }
        });
    let mut body: BodyStream = Box::pin(BodyDataStream::new(resp.into_body()));
    if !(200..300).contains(&status) {
        input
            .metrics
            .first_byte(&u.id, started.elapsed().as_secs_f64());
        // Over the budget, the head read so far is classified (an error
        // body's first KiB says what it is).
        let mut held = None;
        let head = tokio::time::timeout_at(
            total_deadline,
            read_head(&mut body, ERROR_BODY_HEAD, input.buffers, &mut held),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .map(|(b, _)| b)
        .unwrap_or_default();
        drop(body);
        input
            .metrics
            .upstream_latency(&u.id, started.elapsed().as_secs_f64());
        let mut failure = ProviderFailure::from_http(status, retry_after, &head, input.now_ms);
        if let Some(t) = aws_error_type {
            failure = failure.with_error_type(t);
        }
        return Err(AttemptError::Provider(failure));
    }
    if input.stream {
        if !is_event_stream {
            return Err(AttemptError::Provider(
                ProviderFailure::message(
                    "upstream answered a streaming request without an event stream",
                )
                .with_status(status),
            ));
        }
        let mut parser = if u.api == Api::BedrockConverseStream {
            super::sse::Framing::Aws(crate::aws::EventStreamDecoder::new())
        } else {
            super::sse::Framing::Sse(SseParser::default())
        };
        let proto = protocol_of(u.api);
        // The events read so far: held until the first content, so that
        // a stream whose content never comes fails over before the
        // client has a byte (`firstTokenMs`).
        let mut first: Vec<Event> = Vec::new();
        loop {
            // Timers from the request, not checks on arrival (issue 44
            // item 5): comments and held events move neither deadline,
            // and `firstTokenMs` runs from the start whatever comes.
            let (deadline, what, after) = if first.is_empty() && !token_first {
                (first_deadline, "no first event", u.timeouts.first_byte)
            } else {
                (
                    first_token_deadline,
                    "no first token",
                    u.timeouts.first_token,
                )
            };
            let next = tokio::time::timeout_at(deadline, body.next()).await;
            let chunk = match next {
                Err(_) => return Err(timeout_failure(what, after)),
                Ok(None) if first.is_empty() => {
                    return Err(AttemptError::Provider(
                        ProviderFailure::message("upstream stream ended before its first event")
                            .with_status(status),
                    ))
                }
                Ok(None) => {
                    return Err(AttemptError::Provider(
                        ProviderFailure::message(
                            "upstream stream ended before its first token (connection reset)",
                        )
                        .with_status(status),
                    ))
                }
                Ok(Some(Err(e))) => return Err(body_failure(&e)),
                Ok(Some(Ok(c))) => c,
            };
            let events = match parser.push(&chunk) {
                Ok(ev) => ev,
                Err(msg) => return Err(AttemptError::Provider(ProviderFailure::message(msg))),
            };
            if events.is_empty() {
                continue;
            }
            if first.is_empty() {
                input
                    .metrics
                    .first_byte(&u.id, started.elapsed().as_secs_f64());
            }
            if events.iter().any(super::sse::is_malformed) {
                return Err(AttemptError::Provider(
                    ProviderFailure::message(super::sse::MALFORMED_EVENT).with_status(status),
                ));
            }
            // An error as the first event is a failure like any other:
            // nothing has reached the client yet, so the chain goes on.
            if let Some(err) = events.iter().find(|e| super::sse::is_error_event(e)) {
                return Err(AttemptError::Provider(super::sse::error_event_failure(err)));
            }
            let content = events.iter().any(|e| !super::sse::is_preamble(proto, e));
            first.extend(events);
            if content || first.len() >= MAX_HELD_EVENTS {
                return Ok(Answer::Stream(Started {
                    body,
                    parser,
                    first,
                    started,
                    secrets: sent_secrets(input.profile),
                }));
            }
        }
    }
    input
        .metrics
        .first_byte(&u.id, started.elapsed().as_secs_f64());
    let mut held = None;
    let whole = tokio::time::timeout_at(
        total_deadline,
        read_head(&mut body, MAX_ANSWER_BYTES, input.buffers, &mut held),
    )
    .await;
    input
        .metrics
        .upstream_latency(&u.id, started.elapsed().as_secs_f64());
    let bytes = match whole {
        Err(_) => {
            return Err(timeout_failure(
                "the answer did not finish",
                u.timeouts.total,
            ))
        }
        Ok(Err(e)) => return Err(body_failure(&e)),
        Ok(Ok((_, Cut::Limit))) => {
            return Err(AttemptError::Provider(ProviderFailure::message(format!(
                "upstream answer is larger than {} MiB",
                MAX_ANSWER_BYTES >> 20
            ))))
        }
        // The gateway's own limit, not the provider's fault: nothing is
        // held against the profile, and the run moves on.
        Ok(Ok((b, Cut::Budget(over)))) => {
            return Err(AttemptError::Skip(format!(
                "{}; this answer was not read past {} KiB",
                input.buffers.over_text(over, "upstream answers"),
                b.len() >> 10
            )))
        }
        Ok(Ok((b, Cut::Whole))) => b,
    };
    match shape(&bytes) {
        Shape::Answer => {
            let secrets = sent_secrets(input.profile);
            let bytes = mask_sent(&bytes, &secrets).unwrap_or(bytes);
            Ok(Answer::Whole(Bytes::from(bytes), held))
        }
        // An error object under a 2xx (providers and proxies do send
        // them): a failure like any other, classified from its body.
        Shape::Error => Err(AttemptError::Provider(ProviderFailure::from_http(
            status,
            std::iter::empty::<(&str, &str)>(),
            &bytes,
            input.now_ms,
        ))),
        Shape::NotAnObject => Err(AttemptError::Provider(
            ProviderFailure::message(NOT_AN_OBJECT).with_status(status),
        )),
    }
}

/// An AWS error name as smithy reads it: up to the first `:`, after any
/// `#` (`ThrottlingException:http://…`, `aws#ValidationException`);
/// bounded, letters and digits only.
pub(crate) fn aws_error_name(raw: &str) -> String {
    let name = raw.split(':').next().unwrap_or("");
    let name = name.rsplit('#').next().unwrap_or(name).trim();
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .take(64)
        .collect()
}

/// The failure of a 2xx whose body is not one JSON object.
pub(crate) const NOT_AN_OBJECT: &str = "upstream answered with a body that is not a JSON object";

/// What a 2xx body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// One JSON object, not an error.
    Answer,
    /// One JSON object that is an error: a top-level `error` (OpenAI's
    /// shape, and most proxies') or `"type": "error"` (Anthropic's).
    Error,
    NotAnObject,
}

/// The shape of `bytes`, read in one pass without building a tree: only
/// the top-level `error` and `type` are looked at, every other value is
/// checked and skipped.
fn shape(bytes: &[u8]) -> Shape {
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(default, borrow)]
        error: Option<&'a serde_json::value::RawValue>,
        #[serde(default, rename = "type", borrow)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let starts_with_brace = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'{');
    if !starts_with_brace {
        return Shape::NotAnObject;
    }
    match serde_json::from_slice::<Top<'_>>(bytes) {
        Ok(top) if top.error.is_some_and(|e| e.get() != "null") => Shape::Error,
        Ok(top) if top.kind.as_deref() == Some("error") => Shape::Error,
        Ok(_) => Shape::Answer,
        Err(_) => Shape::NotAnObject,
    }
}

#[cfg(test)]
mod buffer_tests {
    use super::{Buffers, Held, Over};

    // Issue 44: one holding is bounded by the request's share, all of them
    // by the budget; what is given back is free again.
    #[test]
    fn i44_2_the_share_and_the_budget_bound_holdings() {
        let b = Buffers::new(4 << 20, Some(3 << 20));
        let (mut one, mut two): (Held, Held) = (None, None);
        assert_eq!(b.cover(&mut one, (3 << 20) + 1), Err(Over::Share));
        assert_eq!(b.cover(&mut one, 3 << 20), Ok(()));
        assert_eq!(b.cover(&mut two, 2 << 20), Err(Over::Budget));
        assert_eq!(b.cover(&mut two, 1 << 20), Ok(()));
        drop(one);
        assert_eq!(b.cover(&mut two, 3 << 20), Ok(()));
        // Unwritten: half the budget; never more than the budget.
        assert_eq!(Buffers::new(8 << 20, None).share(), 4 << 20);
        assert_eq!(Buffers::new(8 << 20, Some(1 << 40)).share(), 8 << 20);
        assert!(b
            .over_text(Over::Share, "upstream data")
            .contains("3 MiB of the gateway's 4 MiB"));
    }
}

#[cfg(test)]
mod tests {
    // Issue 44 item 17: every whole copy, as written or JSON-escaped;
    // nothing else is touched.
    #[test]
    fn i44_17_sent_secrets_are_masked_as_written_and_escaped() {
        let secrets = vec![
            "wJalrXUtnFEMI/K7MDENG".to_string(),
            "sk-abc-12345678".to_string(),
        ];
        let text = br#"{"a":"wJalrXUtnFEMI/K7MDENG and wJalrXUtnFEMI\/K7MDENG","b":"sk-abc-12345678sk-abc-12345678"}"#;
        let out = super::mask_sent(text, &secrets).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":"<redacted> and <redacted>","b":"<redacted><redacted>"}"#
        );
        assert_eq!(super::mask_sent(b"nothing here", &secrets), None);
        assert_eq!(super::mask_sent(b"sk-abc-1234567", &secrets), None);
    }

    #[test]
    fn whole_answers_must_be_one_json_object() {
        use super::{shape, Shape};
        for ok in [
            &b"{}"[..],
            b" {\"a\":[1,2]}\n",
            b"{\"error\":null,\"type\":\"message\"}",
        ] {
            assert_eq!(shape(ok), Shape::Answer);
        }
        for err in [
            &b"{\"error\":{\"message\":\"quota\"}}"[..],
            b"{\"id\":1,\"error\":\"x\"}",
            b"{\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\"}}",
        ] {
            assert_eq!(shape(err), Shape::Error);
        }
        for bad in [
            &b""[..],
            b"[]",
            b"\"x\"",
            b"{",
            b"{} {}",
            b"<html>",
            b"{\"a\":1}x",
            b"\xff",
        ] {
            assert_eq!(shape(bad), Shape::NotAnObject, "{bad:?}");
        }
    }
}
