//! Issue 30: the upstream side, fuzzed. Arbitrary upstream answers — any
//! status, hostile headers (`Retry-After` of any size, any bytes), any
//! framing (a right or wrong `Content-Length`, chunked, cut short), bodies
//! of JSON, error objects, random bytes or server-sent event sequences
//! with broken events, written in arbitrary chunks — go through the real
//! gateway (its HTTP client, the classifier, the runner, translation, both
//! client protocols, streaming or not). The upstreams echo the key they
//! were sent, in the encodings a provider could use.
//!
//! Every input must get an answer (no panic, no connection closed without
//! one) within a time bound; no client answer, header or log line may hold
//! the key in any encoding; the gateway stays healthy; memory stays
//! bounded. (The key is echoed in error texts, as providers do by accident;
//! the text of an answer is the model's and passes as written but for a
//! whole exact copy of the key sent (SECURITY.md): an upstream that wanted
//! to leak the key it is sent could encode it any way at all.) `cargo test` runs 48 inputs; `FUZZ_CASES=N` runs N (CI runs a
//! bounded number, see `.ci/run`). The run's random seed is printed when it
//! starts; `FUZZ_SEED=N` replays it.

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::serve_support::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48)
}

/// How the key the upstream received is written back.
#[derive(Clone, Copy, Debug)]
enum Echo {
    Raw,
    Upper,
    JsonEscapes,
    Percent,
    Base64,
    Head,
}

fn echo(key: &str, how: Echo) -> String {
    match how {
        Echo::Raw => key.to_string(),
        Echo::Upper => key.to_ascii_uppercase(),
        Echo::JsonEscapes => key
            .chars()
            .map(|c| format!("\\u{:04x}", c as u32))
            .collect(),
        Echo::Percent => key.bytes().map(|b| format!("%{b:02X}")).collect(),
        Echo::Base64 => base64(format!("u:{key}").as_bytes()),
        Echo::Head => key[..14].to_string(),
    }
}

/// One piece of a body; `{KEY}` is the echoed key.
#[derive(Clone, Debug)]
enum Piece {
    Text(&'static str),
    Bytes(Vec<u8>),
    Large(usize),
}

const JSON_PIECES: &[&str] = &[
    r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}]}"#,
    r#"{"id":"msg","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}"#,
    r#"{"error":{"message":"Incorrect API key provided: {KEY}","type":"invalid_request_error","code":"invalid_api_key"}}"#,
    r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded {KEY}"}}"#,
    r#"{"error":{"code":429,"message":"Resource exhausted for key {KEY}","status":"RESOURCE_EXHAUSTED"}}"#,
    r#"{"error":"{KEY}"}"#,
    r#"{"error":{"message":"#,
    "<html><body>502 Bad Gateway {KEY}</body></html>",
    "null",
    "[]",
    r#"{"choices":"#,
];

const SSE_PIECES: &[&str] = &[
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"Hel\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: [DONE]\n\n",
    "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"usage\":{\"input_tokens\":1,\"output_tokens\":0}}}\n\n",
    "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
    "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hi\"}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
    "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"bad key {KEY}\"}}\n\n",
    "data: {\"error\":{\"message\":\"quota for {KEY}\",\"code\":429}}\n\n",
    "data: {not json\n\n",
    ": keep-alive\n\n",
    "data: ",
    "\n",
    "event: ping\n",
];

#[derive(Clone, Debug)]
enum Framing {
    /// `Content-Length` with this error added to the true length.
    Length(i8),
    Chunked,
    /// No length: the body ends when the connection closes.
    Close,
}

#[derive(Clone, Debug)]
struct Answer {
    status: u16,
    headers: Vec<(String, Vec<u8>)>,
    event_stream: bool,
    framing: Framing,
    body: Vec<Piece>,
    echo: Echo,
    /// Write sizes.
    chunks: Vec<usize>,
    /// Close the connection after this many body bytes.
    cut: Option<usize>,
    /// The line ends of an event stream's text, one per line in turn
    /// (0: LF, 1: CR, 2: CRLF; issue 44 item 10): every mix SSE allows.
    ends: Vec<u8>,
}

fn header() -> impl Strategy<Value = (String, Vec<u8>)> {
    let names = prop_oneof![
        Just("retry-after"),
        Just("retry-after-ms"),
        Just("x-ratelimit-reset-requests"),
        Just("content-type"),
        Just("x-request-id"),
        Just("set-cookie"),
    ];
    let values = prop_oneof![
        Just(b"1e308".to_vec()),
        Just(b"18446744073709551616".to_vec()),
        Just(b"-5".to_vec()),
        Just(b"NaN".to_vec()),
        Just(b"Fri, 31 Dec 9999 23:59:59 GMT".to_vec()),
        Just(b"Fri, 31 Dec 99999999999 23:59:59 GMT".to_vec()),
        Just(b"2".to_vec()),
        Just(b"application/json".to_vec()),
        Just(b"text/event-stream".to_vec()),
        proptest::collection::vec(32u8..127, 0..200),
        proptest::collection::vec(128u8..=255, 1..20),
    ];
    (names, values).prop_map(|(n, v)| (n.to_string(), v))
}

fn piece(sse: bool) -> impl Strategy<Value = Piece> {
    let texts = if sse { SSE_PIECES } else { JSON_PIECES };
    prop_oneof![
        8 => (0..texts.len()).prop_map(move |i| Piece::Text(texts[i])),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Piece::Bytes),
        1 => prop_oneof![Just(70_000usize), Just(1_200_000), Just(3_000_000)].prop_map(Piece::Large),
    ]
}

fn answer() -> impl Strategy<Value = Answer> {
    let status = prop_oneof![
        4 => Just(200u16),
        1 => Just(400u16),
        1 => Just(401u16),
        1 => Just(402u16),
        2 => Just(429u16),
        1 => Just(500u16),
        1 => Just(503u16),
        1 => Just(529u16),
        1 => 100u16..1000,
    ];
    let echo = prop_oneof![
        Just(Echo::Raw),
        Just(Echo::Upper),
        Just(Echo::JsonEscapes),
        Just(Echo::Percent),
        Just(Echo::Base64),
        Just(Echo::Head),
    ];
    let framing = prop_oneof![
        3 => Just(Framing::Length(0)),
        1 => (-8i8..8).prop_map(Framing::Length),
        2 => Just(Framing::Chunked),
        1 => Just(Framing::Close),
    ];
    (
        status,
        proptest::collection::vec(header(), 0..4),
        any::<bool>(),
        framing,
        echo,
        proptest::collection::vec(1usize..4096, 1..6),
        proptest::option::weighted(0.15, 0usize..400),
        proptest::collection::vec(0u8..3, 1..4),
    )
        .prop_flat_map(|(status, headers, sse, framing, echo, chunks, cut, ends)| {
            proptest::collection::vec(piece(sse), 1..10).prop_map(move |body| Answer {
                status,
                headers: headers.clone(),
                event_stream: sse,
                framing: framing.clone(),
                body,
                echo,
                chunks: chunks.clone(),
                cut,
                ends: ends.clone(),
            })
        })
}

impl Answer {
    fn body_bytes(&self, key: &str) -> Vec<u8> {
        let k = echo(key, self.echo);
        let mut out = Vec::new();
        for p in &self.body {
            match p {
                Piece::Text(t) if self.event_stream => {
                    for (i, line) in t.replace("{KEY}", &k).split_inclusive('\n').enumerate() {
                        let Some(text) = line.strip_suffix('\n') else {
                            out.extend_from_slice(line.as_bytes());
                            continue;
                        };
                        out.extend_from_slice(text.as_bytes());
                        let end: &[u8] = match self.ends[i % self.ends.len()] {
                            0 => b"\n",
                            1 => b"\r",
                            _ => b"\r\n",
                        };
                        out.extend_from_slice(end);
                    }
                }
                Piece::Text(t) => out.extend_from_slice(t.replace("{KEY}", &k).as_bytes()),
                Piece::Bytes(b) => out.extend_from_slice(b),
                Piece::Large(n) => out.extend(std::iter::repeat_n(b'a', *n)),
            }
        }
        out
    }

    /// The whole response as bytes on the wire.
    fn wire(&self, key: &str) -> Vec<u8> {
        let body = self.body_bytes(key);
        let mut head = format!("HTTP/1.1 {} X\r\n", self.status).into_bytes();
        let ct: &[u8] = if self.event_stream {
            b"text/event-stream"
        } else {
            b"application/json"
        };
        head.extend_from_slice(b"content-type: ");
        head.extend_from_slice(ct);
        head.extend_from_slice(b"\r\nconnection: close\r\n");
        for (n, v) in &self.headers {
            head.extend_from_slice(n.as_bytes());
            head.extend_from_slice(b": ");
            head.extend_from_slice(v);
            head.extend_from_slice(b"\r\n");
        }
        let mut wire = head;
        match self.framing {
            Framing::Length(d) => {
                let n = (body.len() as i64 + i64::from(d)).max(0);
                wire.extend_from_slice(format!("content-length: {n}\r\n\r\n").as_bytes());
                wire.extend_from_slice(&body);
            }
            Framing::Chunked => {
                wire.extend_from_slice(b"transfer-encoding: chunked\r\n\r\n");
                for c in body.chunks(self.chunks[0].max(1)) {
                    wire.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                    wire.extend_from_slice(c);
                    wire.extend_from_slice(b"\r\n");
                }
                wire.extend_from_slice(b"0\r\n\r\n");
            }
            Framing::Close => {
                wire.extend_from_slice(b"\r\n");
                wire.extend_from_slice(&body);
            }
        }
        if let Some(cut) = self.cut {
            let head_len = wire.len() - body.len();
            wire.truncate(head_len + cut.min(body.len()));
        }
        wire
    }
}

/// A raw upstream: each connection reads one request, takes the next
/// scripted answer, writes it in the scripted chunks and closes.
struct RawUpstream {
    addr: std::net::SocketAddr,
    script: Arc<Mutex<std::collections::VecDeque<Answer>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawUpstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The key of a request head (`authorization: Bearer …` or `x-api-key`).
fn key_of(head: &str) -> String {
    for line in head.lines() {
        let lower = line.to_ascii_lowercase();
        if let Some(v) = lower.strip_prefix("authorization: bearer ") {
            return line[line.len() - v.len()..].trim().to_string();
        }
        if lower.starts_with("x-api-key:") {
            return line[10..].trim().to_string();
        }
    }
    "sk-none-none-none-none".into()
}

impl RawUpstream {
    async fn start() -> RawUpstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let script: Arc<Mutex<std::collections::VecDeque<Answer>>> = Arc::default();
        let s = script.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut sock, _)) = listener.accept().await else {
                    return;
                };
                let s = s.clone();
                tokio::spawn(async move {
                    let mut buf = Vec::new();
                    let mut tmp = [0u8; 8192];
                    // The head, then the body by its length.
                    let (head, need) = loop {
                        let Ok(n) = sock.read(&mut tmp).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        buf.extend_from_slice(&tmp[..n]);
                        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..i]).into_owned();
                            let len = head
                                .lines()
                                .find_map(|l| {
                                    l.to_ascii_lowercase()
                                        .strip_prefix("content-length:")
                                        .and_then(|v| v.trim().parse::<usize>().ok())
                                })
                                .unwrap_or(0);
                            break (head, i + 4 + len);
                        }
                    };
                    while buf.len() < need {
                        let Ok(n) = sock.read(&mut tmp).await else {
                            return;
                        };
                        if n == 0 {
                            break;
                        }
                        buf.extend_from_slice(&tmp[..n]);
                    }
                    let answer = s.lock().unwrap().pop_front();
                    let wire = match answer {
                        Some(a) => {
                            let w = a.wire(&key_of(&head));
                            (w, a.chunks)
                        }
                        None => (
                            b"HTTP/1.1 500 X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                                .to_vec(),
                            vec![4096],
                        ),
                    };
                    let (bytes, chunks) = wire;
                    let mut at = 0;
                    let mut i = 0;
                    while at < bytes.len() {
                        let n = chunks[i % chunks.len()].min(bytes.len() - at);
                        if sock.write_all(&bytes[at..at + n]).await.is_err() {
                            return;
                        }
                        at += n;
                        i += 1;
                    }
                    let _ = sock.shutdown().await;
                });
            }
        });
        RawUpstream { addr, script, task }
    }
}

fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn assert_no_key_anywhere(what: &str, text: &str) {
    let decoded = percent_decode(text);
    for key in SECRETS {
        let pieces = [
            key[..12].to_string(),
            key[..12].to_ascii_uppercase(),
            key[key.len() - 12..].to_string(),
        ];
        for view in [text, decoded.as_str()] {
            for p in &pieces {
                assert!(!view.contains(p.as_str()), "{what}: the key in: {view}");
            }
            let b = base64(format!("u:{key}").as_bytes());
            assert!(
                !view.contains(&b[4..b.len() - 4]),
                "{what}: base64 key in: {view}"
            );
        }
        // JSON strings, decoded.
        for line in text.lines() {
            let line = line.strip_prefix("data: ").unwrap_or(line);
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(line) {
                let s = v.to_string();
                let unescaped = serde_json::from_str::<serde_json::Value>(&s)
                    .map(|v| format!("{v:?}"))
                    .unwrap_or_default();
                assert!(
                    !unescaped.contains(&key[..12]),
                    "{what}: the key in JSON: {line}"
                );
            }
        }
    }
}

#[test]
fn arbitrary_upstream_answers_never_panic_leak_or_grow_memory() {
    let logs = Logs::default();
    let writer = logs.clone();
    let _ = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .try_init();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (prim, back, gw) = rt.block_on(async {
        let prim = RawUpstream::start().await;
        let back = RawUpstream::start().await;
        let gw = Gw::start("fuzz-upstream", Setup::default()).await;
        (prim, back, gw)
    });
    // The gateway's config, pointed at the raw upstreams, with short
    // deadlines.
    let config = format!(
        r#"agents:
  defaults:
    model:
      primary: prim/model-a
      fallbacks: [back/model-b]
models:
  providers:
    prim:
      baseUrl: "http://{}/v1"
      api: openai-completions
      timeouts: {{ connectMs: 1000, firstByteMs: 1000, totalMs: 3000 }}
    back:
      baseUrl: "http://{}"
      api: anthropic-messages
      timeouts: {{ connectMs: 1000, firstByteMs: 1000, totalMs: 3000 }}
serve:
  maxBufferedBytes: 8388608
"#,
        prim.addr, back.addr
    );
    std::fs::write(gw.dir.join("gateway.yaml"), config).unwrap();
    gw.running.as_ref().unwrap().gateway.reload().unwrap();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .unwrap();
    let rss0 = rss_bytes();
    let peak = std::sync::atomic::AtomicU64::new(rss0);
    let seed = failover_testkit::FuzzSeed::from_env();
    let _ = writeln!(std::io::stderr(), "fuzz_upstream: {seed}");
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed.bytes());
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = (answer(), answer(), 0u8..4, any::<bool>());
    let tried = std::sync::atomic::AtomicU64::new(0);
    let result = runner.run(&strategy, |(a, b, client, session)| {
        let n = tried.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        prim.script.lock().unwrap().push_back(a);
        back.script.lock().unwrap().push_back(b);
        // The chain (an OpenAI upstream, then an Anthropic one), or the
        // Anthropic upstream alone (a one-shot model: strict).
        let model = if client < 2 {
            "prim/model-a"
        } else {
            "back/model-b"
        };
        let (path, mut body) = match client % 2 {
            0 => ("/v1/chat/completions", chat(model)),
            _ => ("/v1/messages", msg(model)),
        };
        body["stream"] = json!(session);
        let started = Instant::now();
        let (status, headers, text) = rt.block_on(async {
            let mut r = http.post(gw.url(path)).json(&body);
            if session {
                r = r.header("x-session-id", format!("fuzz-{n}"));
            }
            let resp = r.send().await.expect("the gateway answers");
            let status = resp.status().as_u16();
            let headers = format!("{:?}", resp.headers());
            let bytes = resp.bytes().await.expect("a whole body (no reset)");
            (
                status,
                headers,
                String::from_utf8_lossy(&bytes).into_owned(),
            )
        });
        prop_assert!(
            started.elapsed() < Duration::from_secs(15),
            "{:?}",
            started.elapsed()
        );
        prop_assert!((200..600).contains(&status));
        assert_no_key_anywhere("body", &text);
        assert_no_key_anywhere("headers", &headers);
        // Still healthy; the cooldowns the case left are cleared so the
        // next case reaches the upstreams.
        let ok = rt.block_on(async {
            http.get(gw.url("/healthz"))
                .send()
                .await
                .map(|r| r.status().as_u16())
        });
        prop_assert_eq!(ok.ok(), Some(200));
        gw.stop_cooling();
        peak.fetch_max(rss_bytes(), std::sync::atomic::Ordering::Relaxed);
        prim.script.lock().unwrap().clear();
        back.script.lock().unwrap().clear();
        Ok(())
    });
    if let Err(e) = result {
        panic!("{seed} replays it: {e}");
    }
    let text = String::from_utf8_lossy(&logs.0.lock().unwrap()).into_owned();
    assert!(!text.is_empty(), "the gateway logged nothing");
    assert_no_key_anywhere("logs", &text);
    // A bounded budget of buffered answers (8 MiB) and one request at a
    // time: the process does not grow past a few tens of MiB for it.
    let (tried, peak) = (tried.into_inner(), peak.into_inner());
    let grew = peak.saturating_sub(rss0);
    let _ = writeln!(
        std::io::stderr(),
        "fuzz_upstream: {tried} inputs, RSS {} MiB → peak {} MiB",
        rss0 >> 20,
        peak >> 20
    );
    assert!(grew < 256 << 20, "RSS grew by {} MiB", grew >> 20);
    rt.block_on(gw.stop());
}
