//! Load tool for `failover serve` (benches/README.md, "Gateway").
//!
//! `cargo build --release && cargo run --release --example serve_bench [SECONDS] [WORKERS]`
//! (`WORKERS` is passed to `serve --workers`; default: one per core;
//! `FAILOVER_BIN` runs another build of the gateway instead of
//! `target/release/failover`, for an A/B comparison, and `FAILOVER_BIN_B`
//! adds a second build to the turns below, for an A/B in one run)
//!
//! Starts an instant upstream on 127.0.0.1 (fixed answers, no parsing),
//! runs the release `failover serve` binary as its own process in front of
//! it, and measures, with one keep-alive client:
//!
//! - a direct call to the upstream vs the same call through the gateway
//!   (p50/p99; the difference is the latency the gateway adds), and the
//!   gateway's own `x-failover-overhead-us` (its time minus upstream waits);
//! - the floor: the same call through a TCP relay and through an HTTP
//!   relay (hyper, no JSON), each its own process (this program started
//!   again), taking turns with the direct call and the gateway, with the
//!   context switches each process made per request;
//! - a request that fails over once (404 `model_not_found`, which cools
//!   nothing, then the answer) vs its two direct round trips;
//! - a provider with an API-key profile, whose every success is recorded
//!   in the state database (after the answer, or with the session's
//!   entry in one transaction before it when that changes);
//! - requests/s at 64 concurrent clients, and the gateway's RSS before and
//!   after 100,000 requests.
//!
//! Everything shares the machine's cores: client, upstream and gateway.
//! Loopback only; every loop is bounded in count or time.
//!
//! With `LITELLM=/path/to/litellm` (the LiteLLM proxy's command, e.g. from
//! `pip install 'litellm[proxy]'` in a virtual environment) the same
//! workload then runs through a LiteLLM proxy (one worker) in front of the
//! same upstream, and the ratios are printed: the side-by-side comparison
//! of benches/README.md. It starts with `LITELLM_LOCAL_MODEL_COST_MAP=True`
//! so that it reads no price map from the network.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::routing::post;

const OK: &str = r#"{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}"#;
const GONE: &str = r#"{"error":{"message":"The model `m` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#;
const BODY: &str = r#"{"model":"MODEL","messages":[{"role":"user","content":"hi"}]}"#;

fn pct(v: &mut [u64], p: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Context switches and migrations of every thread of `pid` so far.
fn switches(pid: u32) -> (u64, u64) {
    let mut out = (0, 0);
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return out;
    };
    for t in tasks.flatten() {
        let Ok(text) = std::fs::read_to_string(t.path().join("sched")) else {
            continue;
        };
        for line in text.lines() {
            let mut kv = line.split(':');
            let (Some(k), Some(v)) = (kv.next(), kv.next()) else {
                continue;
            };
            let v: u64 = v.trim().parse().unwrap_or(0);
            match k.trim() {
                "nr_switches" => out.0 += v,
                "se.nr_migrations" => out.1 += v,
                _ => {}
            }
        }
    }
    out
}

/// A loopback port nobody listens on (for a child process to bind).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

struct Lat {
    e2e: Vec<u64>,
    own: Vec<u64>,
}

/// `n` requests one after another, each with `headers` (a session id, a
/// client key).
async fn sequential(
    http: &reqwest::Client,
    url: &str,
    model: &str,
    headers: &[(&str, String)],
    n: usize,
) -> Lat {
    let body = BODY.replace("MODEL", model);
    let mut out = Lat {
        e2e: Vec::with_capacity(n),
        own: Vec::with_capacity(n),
    };
    for _ in 0..n {
        let t = Instant::now();
        let mut q = http
            .post(url)
            .header("content-type", "application/json")
            .body(body.clone());
        for (k, v) in headers {
            q = q.header(*k, v);
        }
        let r = q.send().await.unwrap();
        let own = r
            .headers()
            .get("x-failover-overhead-us")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let _ = r.bytes().await.unwrap();
        out.e2e.push(t.elapsed().as_micros() as u64);
        if let Some(o) = own {
            out.own.push(o);
        }
    }
    out
}

async fn concurrent(
    url: &str,
    model: &str,
    clients: usize,
    total: u64,
    max: Duration,
) -> (u64, f64, u64) {
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (done, failed) = (done.clone(), failed.clone());
        let url = url.to_string();
        let body = BODY.replace("MODEL", model);
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            while done.fetch_add(1, Ordering::Relaxed) < total && t.elapsed() < max {
                match http
                    .post(&url)
                    .header("content-type", "application/json")
                    .body(body.clone())
                    .send()
                    .await
                {
                    Ok(r) if r.status().is_success() => {
                        let _ = r.bytes().await;
                    }
                    _ => {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        let _ = t.await;
    }
    let n = done.load(Ordering::Relaxed).min(total + clients as u64) - clients as u64;
    let secs = t.elapsed().as_secs_f64();
    (n, n as f64 / secs, failed.load(Ordering::Relaxed))
}

/// The least a proxy process can add on this host: the same keep-alive
/// request through a relay that is its own process in front of the same
/// upstream, and does nothing else. `tcp` copies bytes both ways (one
/// upstream connection per client connection, no HTTP parsing); `http`
/// parses the request, sends it on through hyper's pooled client (the
/// gateway's stack) and passes the answer back, reading no JSON. Both run
/// on one current-thread runtime, the cheapest for one client at a time.
fn relay(kind: &str, upstream: std::net::SocketAddr, port: u16) {
    // The bench holds this process's stdin: when it ends (the bench is
    // gone, whatever way it went), so does the relay.
    std::thread::spawn(|| {
        let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        let client =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .build_http::<http_body_util::Full<bytes::Bytes>>();
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                continue;
            };
            let _ = inbound.set_nodelay(true);
            if kind == "tcp" {
                tokio::spawn(async move {
                    let Ok(mut out) = tokio::net::TcpStream::connect(upstream).await else {
                        return;
                    };
                    let _ = out.set_nodelay(true);
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                });
                continue;
            }
            let client = client.clone();
            let svc =
                hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                    let client = client.clone();
                    async move {
                        use http_body_util::BodyExt;
                        let (parts, body) = req.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map_err(std::io::Error::other)?
                            .to_bytes();
                        let uri = format!("http://{upstream}{}", parts.uri.path());
                        let mut out = hyper::Request::post(uri)
                            .body(http_body_util::Full::new(body))
                            .unwrap();
                        if let Some(ct) = parts.headers.get("content-type") {
                            out.headers_mut().insert("content-type", ct.clone());
                        }
                        let answer = client.request(out).await.map_err(std::io::Error::other);
                        let (parts, body) = answer?.into_parts();
                        let body = body
                            .collect()
                            .await
                            .map_err(std::io::Error::other)?
                            .to_bytes();
                        Ok::<_, std::io::Error>(hyper::Response::from_parts(
                            parts,
                            http_body_util::Full::new(body),
                        ))
                    }
                });
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(inbound);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(io, svc)
                    .await;
            });
        }
    });
}

/// Sends `request()` until it gets an answer, at most 100 times, `pause`
/// apart (a child process starting up).
async fn answers(request: impl Fn() -> reqwest::RequestBuilder, pause: Duration) {
    for _ in 0..100 {
        if request().send().await.is_ok() {
            return;
        }
        tokio::time::sleep(pause).await;
    }
}

/// Starts this program again as a relay (see [`relay`]) and waits until it
/// accepts connections.
async fn start_relay(
    kind: &str,
    upstream: std::net::SocketAddr,
    http: &reqwest::Client,
) -> (std::process::Child, u16) {
    let port = free_port();
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["relay", kind, &upstream.to_string(), &port.to_string()])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let url = format!("http://127.0.0.1:{port}/ok/v1/chat/completions");
    answers(|| http.post(&url).body(BODY), Duration::from_millis(20)).await;
    (child, port)
}

/// `cmd`'s process gets SIGTERM when the bench's main thread ends, even
/// when the bench is killed: no gateway or LiteLLM is left behind holding
/// its port (the relays end when their stdin closes). Every child here is
/// spawned from the main thread, which `block_on` runs on.
fn dies_with_bench(cmd: &mut std::process::Command) -> &mut std::process::Command {
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure makes one system call (prctl), which is
        // async-signal-safe, and allocates nothing.
        #[allow(unsafe_code)]
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
    }
    cmd
}

/// Starts `bin serve` on a free port with the bench's config and its own
/// state directory under `dir`, and waits until it answers `/healthz`.
async fn start_gateway(
    bin: &std::path::Path,
    dir: &std::path::Path,
    config: &str,
    state: &str,
    workers: Option<&str>,
    http: &reqwest::Client,
) -> (std::process::Child, u16) {
    let port = free_port();
    let child = dies_with_bench(&mut std::process::Command::new(bin))
        .arg("serve")
        .args(workers.iter().flat_map(|w| ["--workers", w]))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--config"])
        .arg(dir.join(config))
        .arg("--state")
        .arg(dir.join(state))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("build the release binary first: cargo build --release");
    let url = format!("http://127.0.0.1:{port}/healthz");
    answers(|| http.get(&url), Duration::from_millis(50)).await;
    (child, port)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("relay") {
        return relay(&args[2], args[3].parse().unwrap(), args[4].parse().unwrap());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap()
        .block_on(bench());
}

async fn bench() {
    let secs: u64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(10);
    // `serve --workers` (the default: one per core).
    let workers: Option<String> = std::env::args().nth(2);
    let app = axum::Router::new()
        .route(
            "/ok/v1/chat/completions",
            post(|| async { ([("content-type", "application/json")], OK) }),
        )
        .route(
            "/fail/v1/chat/completions",
            post(|| async {
                (
                    axum::http::StatusCode::NOT_FOUND,
                    [("content-type", "application/json")],
                    GONE,
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    let dir = std::env::temp_dir().join(format!("failover-serve-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // The keyed agent's profile, in the state directory of each build
    // (`FAILOVER_BIN_B` runs on `state-b`).
    for state in ["state", "state-b"] {
        let agent = dir.join(state).join("agents/keyed/agent");
        std::fs::create_dir_all(&agent).unwrap();
        std::fs::write(
            agent.join("auth-profiles.json"),
            r#"{"version":1,"profiles":{"keyed:default":{"type":"api_key","provider":"keyed","key":"sk-bench-0000000000"}}}"#,
        )
        .unwrap();
    }
    let cfg = format!(
        "agents:\n  defaults:\n    model: {{ primary: local/m }}\n  list:\n    - id: once\n      model: {{ primary: broken/m, fallbacks: [local/m] }}\n    - id: keyed\n      model: {{ primary: keyed/m, fallbacks: [] }}\nmodels:\n  providers:\n    local: {{ baseUrl: 'http://{up}/ok/v1', api: openai-completions, auth: none }}\n    keyed: {{ baseUrl: 'http://{up}/ok/v1', api: openai-completions }}\n    broken: {{ baseUrl: 'http://{up}/fail/v1', api: openai-completions, auth: none }}\nserve:\n  maxConcurrentRequests: 4096\n"
    );
    std::fs::write(dir.join("gateway.yaml"), &cfg).unwrap();
    let http = reqwest::Client::new();
    // `FAILOVER_BIN=/path/to/failover` times another build (an A/B run).
    let bin = std::env::var_os("FAILOVER_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::env::current_exe()
                .unwrap()
                .parent()
                .unwrap()
                .parent()
                .unwrap()
                .join("failover")
        });
    let (mut child, gw_port) = start_gateway(
        &bin,
        &dir,
        "gateway.yaml",
        "state",
        workers.as_deref(),
        &http,
    )
    .await;
    let gw = format!("http://127.0.0.1:{gw_port}/v1/chat/completions");
    let direct_ok = format!("http://{up}/ok/v1/chat/completions");
    let direct_fail = format!("http://{up}/fail/v1/chat/completions");
    let pid = child.id();
    // Warm-up: connections, caches, allocator.
    sequential(&http, &gw, "local/m", &[], 500).await;
    sequential(&http, &direct_ok, "m", &[], 500).await;
    let rss0 = rss_kb(pid);

    let n = 3000;
    let mut d = sequential(&http, &direct_ok, "m", &[], n).await;
    let mut g = sequential(&http, &gw, "local/m", &[], n).await;
    let (d50, d99) = (pct(&mut d.e2e, 0.5), pct(&mut d.e2e, 0.99));
    let (g50, g99) = (pct(&mut g.e2e, 0.5), pct(&mut g.e2e, 0.99));
    let (o50, o99) = (pct(&mut g.own, 0.5), pct(&mut g.own, 0.99));
    println!("direct call            p50 {d50} µs  p99 {d99} µs");
    println!("through the gateway    p50 {g50} µs  p99 {g99} µs");
    println!(
        "added                  p50 {} µs  p99 {} µs",
        g50.saturating_sub(d50),
        g99.saturating_sub(d99)
    );
    println!("in-gateway (header)    p50 {o50} µs  p99 {o99} µs");

    // The floor: what a relay that does nothing else adds. The direct
    // call, both relays and the gateway (and `FAILOVER_BIN_B`, a second
    // build, when given) take turns in batches of 100, each round starting
    // one route further on, so that all see the same minutes of this
    // shared host and none always comes right after the same other.
    let (tcp, tcp_port) = start_relay("tcp", up, &http).await;
    let (hyp, hyp_port) = start_relay("http", up, &http).await;
    let other = match std::env::var_os("FAILOVER_BIN_B") {
        Some(b) => Some(
            start_gateway(
                b.as_ref(),
                &dir,
                "gateway.yaml",
                "state-b",
                workers.as_deref(),
                &http,
            )
            .await,
        ),
        None => None,
    };
    let relay_url = |port: u16| format!("http://127.0.0.1:{port}/ok/v1/chat/completions");
    // Client keys (SPEC R18): the same gateway with `clientAuth: required`
    // and a key made by `failover keys create`, its table in SQLite and,
    // when a `redis-server` can be started, in Redis (read per request).
    let mut keyed_gws = Vec::new();
    let redis = failover_testkit::RedisServer::start();
    // Each with keys required and, beside Redis, the same backend without
    // them (the difference is the key check's cost there).
    let mut backends = vec![("keys sqlite", String::new(), true)];
    if let Some(r) = &redis {
        let block = |prefix: &str| {
            format!(
                "state: {{ backend: redis, url: '{}', prefix: '{prefix}' }}\n",
                r.url()
            )
        };
        backends.push(("redis no key", block("bench0:"), false));
        backends.push(("keys redis", block("bench1:"), true));
    }
    for (i, (what, state_block, keys)) in backends.iter().enumerate() {
        let name = format!("gateway-keys-{i}.yaml");
        let auth = if *keys { "required" } else { "off" };
        std::fs::write(
            dir.join(&name),
            format!("{cfg}  clientAuth: {auth}\n{state_block}"),
        )
        .unwrap();
        let state = format!("state-keys-{i}");
        let out = std::process::Command::new(&bin)
            .args(["keys", "create", "--name", "bench", "--state"])
            .arg(dir.join(&state))
            .arg("--config")
            .arg(dir.join(&name))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let key = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap()
            .to_string();
        let (c, port) = start_gateway(&bin, &dir, &name, &state, workers.as_deref(), &http).await;
        keyed_gws.push((*what, c, port, key));
    }
    // (name, url, model, process, headers): the keyed rows are a profile
    // with an API key and `x-session-id`, the state path a real
    // deployment takes on every request. Their process is the gateway row
    // above them, whose switch count covers both (so they print none).
    type Route<'a> = (
        &'a str,
        String,
        &'a str,
        Option<u32>,
        Vec<(&'a str, String)>,
    );
    let session = || vec![("x-session-id", "turns".to_string())];
    let mut routes: Vec<Route> = vec![
        ("direct call", direct_ok.clone(), "m", None, vec![]),
        (
            "tcp relay",
            relay_url(tcp_port),
            "m",
            Some(tcp.id()),
            vec![],
        ),
        (
            "http relay",
            relay_url(hyp_port),
            "m",
            Some(hyp.id()),
            vec![],
        ),
        ("the gateway", gw.clone(), "local/m", Some(pid), vec![]),
        ("keyed+session", gw.clone(), "keyed", None, session()),
    ];
    for (what, c, port, key) in &keyed_gws {
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        routes.push((
            what,
            url,
            "local/m",
            Some(c.id()),
            vec![("authorization", format!("Bearer {key}"))],
        ));
    }
    if let Some((b, port)) = &other {
        let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
        routes.push(("gateway B", url.clone(), "local/m", Some(b.id()), vec![]));
        routes.push(("B keyed+sess", url, "keyed", None, session()));
    }
    let mut turns: Vec<Lat> = routes
        .iter()
        .map(|_| Lat {
            e2e: Vec::with_capacity(n),
            own: Vec::with_capacity(n),
        })
        .collect();
    for (_, url, model, _, hdrs) in &routes {
        sequential(&http, url, model, hdrs, 200).await;
    }
    let before: Vec<(u64, u64)> = routes
        .iter()
        .map(|r| r.3.map_or((0, 0), switches))
        .collect();
    for round in 0..n / 100 {
        for k in 0..routes.len() {
            let i = (round + k) % routes.len();
            let (_, url, model, _, hdrs) = &routes[i];
            let mut l = sequential(&http, url, model, hdrs, 100).await;
            turns[i].e2e.append(&mut l.e2e);
            turns[i].own.append(&mut l.own);
        }
    }
    let base = pct(&mut turns[0].e2e, 0.5);
    println!("in turns, 100 at a time, the direct call p50 {base} µs:");
    for ((what, url, _, p, _), (t, b)) in routes.iter().zip(turns.iter_mut().zip(&before)).skip(1) {
        let (p50, p99) = (pct(&mut t.e2e, 0.5), pct(&mut t.e2e, 0.99));
        let (cs, mig) = p.map_or((0, 0), switches);
        let own = match t.own.is_empty() {
            true => String::new(),
            false => format!(
                "; in-gateway p50 {} µs p99 {} µs",
                pct(&mut t.own, 0.5),
                pct(&mut t.own, 0.99)
            ),
        };
        let switched = match p {
            // Every route of the process (the gateway's keyed row too).
            Some(_) => {
                let shared = routes.iter().filter(|r| r.1 == *url).count();
                let per = (n * shared.max(1)) as f64;
                format!(
                    "; {:.2} context switches, {:.2} migrations per request",
                    cs.saturating_sub(b.0) as f64 / per,
                    mig.saturating_sub(b.1) as f64 / per,
                )
            }
            None => String::new(),
        };
        println!(
            "  {what:<13} p50 {p50} µs  p99 {p99} µs; adds p50 {} µs{switched}{own}",
            p50.saturating_sub(base),
        );
    }
    for mut process in [Some(tcp), Some(hyp), other.map(|o| o.0)]
        .into_iter()
        .flatten()
        .chain(keyed_gws.into_iter().map(|k| k.1))
    {
        let _ = process.kill();
        let _ = process.wait();
    }

    let mut two = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        for u in [&direct_fail, &direct_ok] {
            let r = http.post(u.as_str()).body(BODY).send().await.unwrap();
            let _ = r.bytes().await;
        }
        two.push(t.elapsed().as_micros() as u64);
    }
    let mut f = sequential(&http, &gw, "once", &[], n).await;
    let (t50, f50, f99) = (
        pct(&mut two, 0.5),
        pct(&mut f.e2e, 0.5),
        pct(&mut f.e2e, 0.99),
    );
    println!(
        "failover once: two direct round trips p50 {t50} µs; through the gateway p50 {f50} µs p99 {f99} µs; added p50 {} µs; in-gateway p50 {} µs",
        f50.saturating_sub(t50),
        pct(&mut f.own, 0.5)
    );

    // The success record is written after the answer, unless the session
    // changes: then it and the session are one transaction before it.
    for (session, what) in [(None, "no session"), (Some("bench"), "x-session-id")] {
        let hdrs: Vec<(&str, String)> = session
            .map(|s| ("x-session-id", s.to_string()))
            .into_iter()
            .collect();
        let mut k = sequential(&http, &gw, "keyed", &hdrs, 1000).await;
        println!(
            "keyed profile (state written per success), {what}: p50 {} µs  p99 {} µs  in-gateway p50 {} µs",
            pct(&mut k.e2e, 0.5),
            pct(&mut k.e2e, 0.99),
            pct(&mut k.own, 0.5)
        );
    }

    let max = Duration::from_secs(secs);
    let (n1, rps, fail) = concurrent(&gw, "local/m", 64, 1_000_000, max).await;
    println!("64 clients, no profile: {n1} requests in ≤{secs} s, {rps:.0} req/s, {fail} failed");
    let (n2, rps2, fail2) = concurrent(&direct_ok, "m", 64, 1_000_000, max).await;
    println!("64 clients, direct to the upstream: {n2} requests, {rps2:.0} req/s, {fail2} failed");
    let (n3, rps3, fail3) = concurrent(&gw, "keyed", 64, 1_000_000, max).await;
    println!("64 clients, keyed profile: {n3} requests, {rps3:.0} req/s, {fail3} failed");
    let rss1 = rss_kb(pid);
    let (n4, rps4, fail4) = concurrent(&gw, "local/m", 64, 100_000, Duration::from_secs(120)).await;
    let rss2 = rss_kb(pid);
    println!("100k run: {n4} requests, {rps4:.0} req/s, {fail4} failed");
    println!(
        "gateway RSS: after warm-up {} MB, after the throughput runs {} MB, after 100k more {} MB",
        rss0 / 1024,
        rss1 / 1024,
        rss2 / 1024
    );

    let _ = child.kill();
    let _ = child.wait();

    if let Ok(litellm) = std::env::var("LITELLM") {
        let ours = Side {
            added50: g50.saturating_sub(d50),
            failover50: f50.saturating_sub(t50),
            rps,
            rss_mb: rss2 / 1024,
        };
        side_by_side(&litellm, &dir, up, d50, t50, secs, ours).await;
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// The gateway's figures, for the ratios against LiteLLM.
struct Side {
    added50: u64,
    failover50: u64,
    rps: f64,
    rss_mb: u64,
}

/// The same workload through a LiteLLM proxy in front of the same upstream.
async fn side_by_side(
    bin: &str,
    dir: &std::path::Path,
    up: std::net::SocketAddr,
    d50: u64,
    t50: u64,
    secs: u64,
    ours: Side,
) {
    let cfg = format!(
        "model_list:\n  - model_name: local/m\n    litellm_params: {{ model: openai/m, api_base: 'http://{up}/ok/v1', api_key: sk-bench }}\n  - model_name: once\n    litellm_params: {{ model: openai/m, api_base: 'http://{up}/fail/v1', api_key: sk-bench }}\nrouter_settings:\n  fallbacks: [{{ once: [local/m] }}]\nlitellm_settings:\n  num_retries: 0\n"
    );
    std::fs::write(dir.join("litellm.yaml"), cfg).unwrap();
    let port = free_port();
    let mut child = dies_with_bench(&mut std::process::Command::new(bin))
        .arg("--config")
        .arg(dir.join("litellm.yaml"))
        .args([
            "--host",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--num_workers",
            "1",
        ])
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env(
            "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY",
            "true",
        )
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("LITELLM names the litellm proxy command");
    let http = reqwest::Client::new();
    let mut up_ok = false;
    for _ in 0..1200 {
        if http
            .get(format!("http://127.0.0.1:{port}/health/liveliness"))
            .send()
            .await
            .is_ok()
        {
            up_ok = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !up_ok {
        println!("LiteLLM did not start within 120 s");
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    let url = format!("http://127.0.0.1:{port}/v1/chat/completions");
    sequential(&http, &url, "local/m", &[], 200).await;
    let n = 1000;
    let mut l = sequential(&http, &url, "local/m", &[], n).await;
    let (l50, l99) = (pct(&mut l.e2e, 0.5), pct(&mut l.e2e, 0.99));
    let probe = http
        .post(&url)
        .header("content-type", "application/json")
        .body(BODY.replace("MODEL", "once"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    println!("LiteLLM 'once' (404 upstream, fallback configured) answers {probe:?}");
    let mut lf = sequential(&http, &url, "once", &[], n / 2).await;
    let lf50 = pct(&mut lf.e2e, 0.5);
    let (_, lrps, lfail) =
        concurrent(&url, "local/m", 64, 1_000_000, Duration::from_secs(secs)).await;
    let lrss = rss_kb(child.id()) / 1024;
    let added = l50.saturating_sub(d50);
    let failover = lf50.saturating_sub(t50);
    println!("LiteLLM proxy          p50 {l50} µs  p99 {l99} µs; added p50 {added} µs");
    println!("LiteLLM failover once  p50 {lf50} µs; added p50 {failover} µs beyond the two direct round trips");
    println!("LiteLLM 64 clients     {lrps:.0} req/s, {lfail} failed; RSS {lrss} MB (one worker)");
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::INFINITY };
    println!(
        "ratios (LiteLLM / failover): added latency {:.0}×, failover once {:.0}×, throughput {:.1}× (failover / LiteLLM), RSS {:.1}×",
        ratio(added as f64, ours.added50.max(1) as f64),
        ratio(failover as f64, ours.failover50.max(1) as f64),
        ratio(ours.rps, lrps),
        ratio(lrss as f64, ours.rss_mb.max(1) as f64)
    );
    let _ = child.kill();
    let _ = child.wait();
}
