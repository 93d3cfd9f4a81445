//! Shared set-up for the gateway tests: scripted upstream HTTP servers on
//! 127.0.0.1 (a free port each, stopped when dropped) and a gateway
//! started in-process on its own free port.
//!
//! Self-contained (`failover_gateway`, `failover`, `failover_testkit` and
//! external crates only): the CLI's tests include it by path too.
#![allow(dead_code)]

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt;
use serde_json::{json, Value};

use failover_gateway::{start, Options, Running, Sources};

/// How a scripted upstream answers one request.
#[derive(Clone, Debug)]
pub(crate) enum Reply {
    /// A status, extra headers and a body (`content-type: application/json`
    /// unless a header says otherwise).
    Http {
        status: u16,
        headers: Vec<(String, String)>,
        body: String,
    },
    /// Waits this long before the response head.
    Slow(Duration, Box<Reply>),
    /// A `text/event-stream`: these events (full wire text each), then
    /// the end (`Tail::End`), a reset (`Tail::Cut`) or silence.
    Sse(Vec<String>, Tail),
    /// A status with a body that never ends.
    Endless(u16),
    /// A `text/event-stream` whose events each come after a pause (the
    /// head at once), then the tail.
    SseTimed(Vec<(Duration, String)>, Tail),
}

#[derive(Clone, Copy, Debug)]
pub(crate) enum Tail {
    End,
    Cut,
    Hang,
}

pub(crate) fn ok_openai(text: &str) -> Reply {
    Reply::Http {
        status: 200,
        headers: vec![],
        body: json!({
            "id": "cmpl-1", "object": "chat.completion", "created": 1, "model": "upstream-model",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
        })
        .to_string(),
    }
}

pub(crate) fn ok_anthropic(text: &str) -> Reply {
    Reply::Http {
        status: 200,
        headers: vec![],
        body: json!({
            "id": "msg_1", "type": "message", "role": "assistant", "model": "upstream-model",
            "content": [{"type": "text", "text": text}], "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 3, "output_tokens": 2}
        })
        .to_string(),
    }
}

pub(crate) fn error(status: u16, body: &str) -> Reply {
    Reply::Http {
        status,
        headers: vec![],
        body: body.to_string(),
    }
}

pub(crate) fn openai_events(parts: &[&str]) -> Vec<String> {
    let mut out = vec![];
    for (i, p) in parts.iter().enumerate() {
        let delta = if i == 0 {
            json!({"role": "assistant", "content": p})
        } else {
            json!({"content": p})
        };
        out.push(format!(
            "data: {}\n\n",
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": null}]})
        ));
    }
    out
}

pub(crate) fn openai_stream_end() -> Vec<String> {
    vec![
        format!(
            "data: {}\n\n",
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 1, "model": "m",
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        ),
        "data: [DONE]\n\n".into(),
    ]
}

pub(crate) fn anthropic_events(parts: &[&str], finish: bool) -> Vec<String> {
    let ev = |name: &str, v: Value| format!("event: {name}\ndata: {v}\n\n");
    let mut out = vec![
        ev(
            "message_start",
            json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant",
            "model": "m", "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 3, "output_tokens": 0}}}),
        ),
        ev(
            "content_block_start",
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ),
    ];
    for p in parts {
        out.push(ev(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}}),
        ));
    }
    if finish {
        out.push(ev(
            "content_block_stop",
            json!({"type": "content_block_stop", "index": 0}),
        ));
        out.push(ev("message_delta", json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": {"output_tokens": 2}})));
        out.push(ev("message_stop", json!({"type": "message_stop"})));
    }
    out
}

/// One request an upstream received.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) path: String,
    /// The query string, if any (`alt=sse`, `api-version=…`).
    pub(crate) query: Option<String>,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

struct MockState {
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    seen: Mutex<Vec<Seen>>,
    /// Requests whose handler was dropped before it answered.
    cancelled: AtomicUsize,
}

/// A scripted upstream on 127.0.0.1.
pub(crate) struct Mock {
    pub(crate) addr: SocketAddr,
    state: Arc<MockState>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Mock {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct CancelGuard(Arc<MockState>, bool);

impl Drop for CancelGuard {
    fn drop(&mut self) {
        if !self.1 {
            self.0.cancelled.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn build(reply: Reply, st: &Arc<MockState>) -> Response {
    match reply {
        Reply::Http {
            status,
            headers,
            body,
        } => {
            let mut b = Response::builder().status(status);
            if !headers
                .iter()
                .any(|(k, _)| k.eq_ignore_ascii_case("content-type"))
            {
                b = b.header("content-type", "application/json");
            }
            for (k, v) in headers {
                b = b.header(k, v);
            }
            b.body(Body::from(body)).unwrap()
        }
        Reply::Sse(events, tail) => build(
            Reply::SseTimed(
                events.into_iter().map(|e| (Duration::ZERO, e)).collect(),
                tail,
            ),
            st,
        ),
        Reply::SseTimed(events, tail) => {
            let items = futures_util::stream::iter(events).then(|(pause, e)| async move {
                if !pause.is_zero() {
                    tokio::time::sleep(pause).await;
                }
                Ok::<Bytes, std::io::Error>(Bytes::from(e))
            });
            let tail: futures_util::stream::BoxStream<'static, Result<Bytes, std::io::Error>> =
                match tail {
                    Tail::End => futures_util::stream::empty().boxed(),
                    Tail::Cut => futures_util::stream::once(async {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        Err(std::io::Error::other("cut"))
                    })
                    .boxed(),
                    Tail::Hang => {
                        // Dropped only when the gateway closes the
                        // connection: counted as a cancellation.
                        let guard = CancelGuard(st.clone(), false);
                        futures_util::stream::pending()
                            .map(move |x| {
                                let _ = &guard;
                                x
                            })
                            .boxed()
                    }
                };
            Response::builder()
                .status(200)
                .header("content-type", "text/event-stream")
                .body(Body::from_stream(items.chain(tail)))
                .unwrap()
        }
        Reply::Endless(status) => {
            let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
            let s = futures_util::stream::repeat(chunk).map(Ok::<Bytes, Infallible>);
            Response::builder()
                .status(status)
                .header("content-type", "text/html")
                .body(Body::from_stream(s))
                .unwrap()
        }
        Reply::Slow(..) => unreachable!("unwrapped by the handler"),
    }
}

impl Mock {
    pub(crate) async fn start() -> Mock {
        let state = Arc::new(MockState {
            script: Mutex::new(VecDeque::new()),
            default: Mutex::new(None),
            seen: Mutex::new(Vec::new()),
            cancelled: AtomicUsize::new(0),
        });
        let st = state.clone();
        let app = axum::Router::new().fallback(
            move |uri: axum::http::Uri, headers: HeaderMap, body: Bytes| {
                let st = st.clone();
                async move {
                    let mut guard = CancelGuard(st.clone(), false);
                    st.seen.lock().unwrap().push(Seen {
                        path: uri.path().to_string(),
                        query: uri.query().map(str::to_string),
                        headers,
                        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
                    });
                    let next = st.script.lock().unwrap().pop_front();
                    let mut reply = match next.or_else(|| st.default.lock().unwrap().clone()) {
                        Some(r) => r,
                        None => error(500, r#"{"error":{"message":"unscripted"}}"#),
                    };
                    while let Reply::Slow(d, inner) = reply {
                        tokio::time::sleep(d).await;
                        reply = *inner;
                    }
                    guard.1 = true;
                    let _ = StatusCode::OK;
                    build(reply, &st)
                }
            },
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Mock { addr, state, task }
    }

    pub(crate) fn push(&self, r: Reply) -> &Self {
        self.state.script.lock().unwrap().push_back(r);
        self
    }

    pub(crate) fn always(&self, r: Reply) -> &Self {
        *self.state.default.lock().unwrap() = Some(r);
        self
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub(crate) fn hits(&self) -> usize {
        self.state.seen.lock().unwrap().len()
    }

    pub(crate) fn cancelled(&self) -> usize {
        self.state.cancelled.load(Ordering::SeqCst)
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

/// Held for writing by the one test that sets the proxy variables
/// (`serve_proxy`) while they are set, for reading by every gateway start:
/// a gateway (and its tests' client) reads them when it starts, so none
/// may start in that window.
pub(crate) static PROXY_ENV: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// The secrets of the test profiles: none may reach a client or a log.
pub(crate) const SECRETS: &[&str] = &["sk-prim-SECRET-0123456789", "sk-back-SECRET-9876543210"];

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "failover-serve-{}-{name}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A gateway in front of two upstreams: `prim` (the configured primary,
/// `prim/model-a`) and `back` (its fallback, `back/model-b`), each with
/// one API-key profile.
pub(crate) struct Gw {
    pub(crate) running: Option<Running>,
    pub(crate) dir: PathBuf,
    pub(crate) prim: Mock,
    pub(crate) back: Mock,
    pub(crate) http: reqwest::Client,
}

pub(crate) struct Setup {
    pub(crate) prim_api: &'static str,
    pub(crate) back_api: &'static str,
    /// Extra YAML appended to the config.
    pub(crate) extra: String,
    pub(crate) first_byte_ms: u64,
    /// More keys of both providers' `timeouts` (`firstTokenMs: 500, …`).
    pub(crate) timeouts: String,
    /// More keys of each provider (`retries: {…}`), one line each.
    pub(crate) prim_keys: String,
    pub(crate) back_keys: String,
    /// Each provider's `models` value (`[model-a]`, `[model-b]` unless set).
    pub(crate) prim_models: String,
    pub(crate) back_models: String,
    pub(crate) watch: bool,
    pub(crate) rules: Vec<PathBuf>,
    /// `Options::workers`: 2 (the CLI's mode on two cores, each worker a
    /// runtime of its own) unless a test serves on its own runtime (0).
    pub(crate) workers: usize,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            prim_api: "openai-completions",
            back_api: "openai-completions",
            extra: String::new(),
            first_byte_ms: 2000,
            timeouts: String::new(),
            prim_keys: String::new(),
            back_keys: String::new(),
            prim_models: "[model-a]".into(),
            back_models: "[model-b]".into(),
            watch: false,
            rules: Vec::new(),
            workers: 2,
        }
    }
}

pub(crate) fn base(mock: &Mock, api: &str) -> String {
    match api {
        "openai-completions" | "openai-responses" => format!("{}/v1", mock.url()),
        "google-generative-ai" => format!("{}/v1beta", mock.url()),
        _ => mock.url(),
    }
}

pub(crate) fn config_text(s: &Setup, prim: &Mock, back: &Mock) -> String {
    format!(
        r#"agents:
  defaults:
    model:
      primary: prim/model-a
      fallbacks: [back/model-b]
  list:
    - id: strict-agent
      model: prim/model-a
models:
  providers:
    prim:
      baseUrl: "{}"
      api: {}
      timeouts: {{ connectMs: 1000, firstByteMs: {fb}, totalMs: 10000{t} }}
      models: {pm}{pk}
    back:
      baseUrl: "{}"
      api: {}
      timeouts: {{ connectMs: 1000, firstByteMs: {fb}, totalMs: 10000{t} }}
      models: {bm}{bk}
{}"#,
        base(prim, s.prim_api),
        s.prim_api,
        base(back, s.back_api),
        s.back_api,
        s.extra,
        fb = s.first_byte_ms,
        pm = s.prim_models,
        bm = s.back_models,
        pk = if s.prim_keys.is_empty() {
            String::new()
        } else {
            format!("\n      {}", s.prim_keys)
        },
        bk = if s.back_keys.is_empty() {
            String::new()
        } else {
            format!("\n      {}", s.back_keys)
        },
        t = if s.timeouts.is_empty() {
            String::new()
        } else {
            format!(", {}", s.timeouts)
        },
    )
}

/// The keys of both providers for `main` and for `strict-agent` (each
/// agent's credentials are its own, SPEC R5.1).
pub(crate) fn write_profiles(dir: &std::path::Path) {
    for agent in ["main", "strict-agent"] {
        let agent = dir.join(format!("state/agents/{agent}/agent"));
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(
            agent.join("auth-profiles.json"),
            json!({"version": 1, "profiles": {
                "prim:default": {"type": "api_key", "provider": "prim", "key": SECRETS[0]},
                "back:default": {"type": "api_key", "provider": "back", "key": SECRETS[1]},
            }})
            .to_string(),
        )
        .unwrap();
    }
}

impl Gw {
    pub(crate) async fn start(name: &str, s: Setup) -> Gw {
        let _env = PROXY_ENV.read().await;
        let prim = Mock::start().await;
        let back = Mock::start().await;
        let dir = temp_dir(name);
        write_profiles(&dir);
        std::fs::write(dir.join("gateway.yaml"), config_text(&s, &prim, &back)).unwrap();
        let running = start(Options {
            sources: Sources {
                config: dir.join("gateway.yaml"),
                state: dir.join("state"),
                rules: s.rules.clone(),
                no_defaults: false,
                model: Default::default(),
            },
            listen: "127.0.0.1:0".into(),
            watch: s.watch,
            workers: s.workers,
        })
        .await
        .unwrap_or_else(|e| panic!("{e}"));
        Gw {
            running: Some(running),
            dir,
            prim,
            back,
            http: reqwest::Client::new(),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.running.as_ref().unwrap().addr)
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        self.running.as_ref().unwrap().addr
    }

    pub(crate) async fn openai(&self, body: Value, session: Option<&str>) -> Resp {
        self.post("/v1/chat/completions", body, session).await
    }

    pub(crate) async fn anthropic(&self, body: Value, session: Option<&str>) -> Resp {
        self.post("/v1/messages", body, session).await
    }

    pub(crate) async fn post(&self, path: &str, body: Value, session: Option<&str>) -> Resp {
        let mut r = self.http.post(self.url(path)).json(&body);
        if let Some(s) = session {
            r = r.header("x-session-id", s);
        }
        Resp::from(r.send().await.unwrap()).await
    }

    /// The state as `status --state DIR` reads it (the gateway's default
    /// backend, SQLite, or the files when there is no database).
    fn docs(&self) -> std::sync::Arc<dyn failover::Store> {
        failover::state::open_docs(None, &self.dir.join("state"), "main")
            .unwrap()
            .0
    }

    pub(crate) fn usage(&self, id: &str) -> Value {
        let st = self.docs().load_state().unwrap();
        st.usage_stats
            .get(id)
            .map(|s| serde_json::to_value(s).unwrap())
            .unwrap_or(Value::Null)
    }

    pub(crate) fn session(&self, key: &str) -> Value {
        let s = self.docs().load_sessions().unwrap();
        s.entries
            .get(key)
            .map(|e| serde_json::to_value(e).unwrap())
            .unwrap_or(Value::Null)
    }

    /// Clears every profile's cooldown and disable (another writer of the
    /// state, as an operator's tool would be).
    pub(crate) fn stop_cooling(&self) {
        self.docs()
            .update_state_dyn(&mut |st| {
                for s in st.usage_stats.values_mut() {
                    s.cooldown_until = None;
                    s.disabled_until = None;
                    s.cooldown_model = None;
                }
            })
            .unwrap();
    }

    /// Every stored session, as `sessions.json` would hold them.
    pub(crate) fn sessions_text(&self) -> String {
        self.docs().load_sessions().unwrap().to_json().to_string()
    }

    pub(crate) async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown().await;
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A response, read whole.
pub(crate) struct Resp {
    pub(crate) status: u16,
    pub(crate) headers: HeaderMap,
    pub(crate) text: String,
}

impl Resp {
    pub(crate) async fn from(r: reqwest::Response) -> Resp {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.unwrap_or_default();
        let resp = Resp {
            status,
            headers,
            text,
        };
        resp.assert_no_secret();
        resp
    }

    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.text).unwrap_or_else(|_| panic!("not JSON: {}", self.text))
    }

    pub(crate) fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }

    /// SPEC R16.11: no secret in any response body or header.
    pub(crate) fn assert_no_secret(&self) {
        for s in SECRETS {
            assert!(!self.text.contains(s), "secret in body: {}", self.text);
            for (k, v) in &self.headers {
                assert!(
                    !String::from_utf8_lossy(v.as_bytes()).contains(s),
                    "secret in header {k}"
                );
            }
        }
    }
}

pub(crate) fn chat(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

pub(crate) fn msg(model: &str) -> Value {
    json!({"model": model, "max_tokens": 32, "messages": [{"role": "user", "content": "hi"}]})
}

pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Waits (bounded) until `f` holds; the real servers answer on their own
/// schedule.
pub(crate) async fn eventually(what: &str, f: impl Fn() -> bool) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("timed out waiting for {what}");
}

/// `%XX` sequences decoded (what a reader of a URL-encoded text sees).
pub(crate) fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            let hex = std::str::from_utf8(&b[i + 1..i + 3]).ok();
            if let Some(v) = hex.and_then(|h| u8::from_str_radix(h, 16).ok()) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Standard base64 with padding left off.
pub(crate) fn base64(bytes: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in bytes.chunks(3) {
        let n = c
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for k in 0..=c.len() {
            out.push(A[(n >> (18 - 6 * k) & 63) as usize] as char);
        }
    }
    out
}

/// Everything a tracing subscriber writes, kept for assertions (set with
/// `tracing_subscriber::fmt().with_writer(move || logs.clone())`).
#[derive(Clone, Default)]
pub(crate) struct Logs(pub(crate) Arc<Mutex<Vec<u8>>>);

impl Logs {
    /// What was written so far, as text.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The Python of `.ci/venv` with the official SDKs (`.ci/run` installs
/// it). Missing, `test` panics with how to get it, unless
/// `FAILOVER_SKIP_SDK=1` asks to skip it (never under CI): then `None`.
pub(crate) fn sdk_python(test: &str) -> Option<PathBuf> {
    let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(".ci/venv/bin/python");
    if p.exists() {
        return Some(p);
    }
    let msg = "the Python SDK venv is missing: run `python3 -m venv .ci/venv && .ci/venv/bin/pip install openai anthropic opentelemetry-proto`";
    let opted_out = std::env::var("FAILOVER_SKIP_SDK").as_deref() == Ok("1");
    if std::env::var_os("CI").is_some() || !opted_out {
        panic!("{msg} (or set FAILOVER_SKIP_SDK=1 to skip {test})");
    }
    eprintln!("\n!!! SKIPPED {test} (FAILOVER_SKIP_SDK=1): {msg}\n");
    None
}

/// Runs `tests/sdk/<script>` with the venv's Python (see [`sdk_python`])
/// against the gateway at `addr` (`FAILOVER_URL`, and `env`); the proxy
/// variables the SDKs read are bypassed for 127.0.0.1 (`serve_proxy` sets
/// them). Asserts it exited 0; returns its stdout and stderr.
pub(crate) async fn run_sdk_script(
    python: PathBuf,
    script: &str,
    addr: SocketAddr,
    env: &[(&str, &str)],
) -> (String, String) {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/sdk")
        .join(script);
    let mut cmd = std::process::Command::new(python);
    cmd.arg(script)
        .env("FAILOVER_URL", format!("http://{addr}"))
        .env("NO_PROXY", "127.0.0.1")
        .env("no_proxy", "127.0.0.1");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stdout}\n{stderr}");
    (stdout, stderr)
}

/// The body of the gateway's `/metrics` page.
pub(crate) async fn metrics(gw: &Gw) -> String {
    gw.http
        .get(gw.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}
