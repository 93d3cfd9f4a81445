//! Load tool for `failover serve` (benches/README.md, "Gateway").
//!
//! `cargo build --release && cargo run --release --example serve_bench [SECONDS] [WORKERS]`
//! (`WORKERS` is passed to `serve --workers`; default: one per core;
//! `FAILOVER_BIN` runs another build of the gateway instead of
//! `target/release/failover`, for an A/B comparison)
//!
//! Starts an instant upstream on 127.0.0.1 (fixed answers, no parsing),
//! runs the release `failover serve` binary as its own process in front of
//! it, and measures, with one keep-alive client:
//!
//! - a direct call to the upstream vs the same call through the gateway
//!   (p50/p99; the difference is the latency the gateway adds), and the
//!   gateway's own `x-failover-overhead-us` (its time minus upstream waits);
//! - a request that fails over once (404 `model_not_found`, which cools
//!   nothing, then the answer) vs its two direct round trips;
//! - a provider with an API-key profile, whose every success is written to
//!   `auth-state.json` (lock, write, fsync, rename);
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

struct Lat {
    e2e: Vec<u64>,
    own: Vec<u64>,
}

async fn sequential(
    http: &reqwest::Client,
    url: &str,
    model: &str,
    session: Option<&str>,
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
        if let Some(s) = session {
            q = q.header("x-session-id", s);
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

#[tokio::main(flavor = "multi_thread", worker_threads = 1)]
async fn main() {
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
    std::fs::create_dir_all(dir.join("state/agents/keyed/agent")).unwrap();
    std::fs::write(
        dir.join("state/agents/keyed/agent/auth-profiles.json"),
        r#"{"version":1,"profiles":{"keyed:default":{"type":"api_key","provider":"keyed","key":"sk-bench-0000000000"}}}"#,
    )
    .unwrap();
    let cfg = format!(
        "agents:\n  defaults:\n    model: {{ primary: local/m }}\n  list:\n    - id: once\n      model: {{ primary: broken/m, fallbacks: [local/m] }}\n    - id: keyed\n      model: {{ primary: keyed/m, fallbacks: [] }}\nmodels:\n  providers:\n    local: {{ baseUrl: 'http://{up}/ok/v1', api: openai-completions }}\n    keyed: {{ baseUrl: 'http://{up}/ok/v1', api: openai-completions }}\n    broken: {{ baseUrl: 'http://{up}/fail/v1', api: openai-completions }}\nserve: {{ maxConcurrentRequests: 4096 }}\n"
    );
    std::fs::write(dir.join("gateway.yaml"), cfg).unwrap();
    let gw_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
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
    let mut child = std::process::Command::new(bin)
        .arg("serve")
        .args(workers.iter().flat_map(|w| ["--workers", w.as_str()]))
        .args(["--listen", &format!("127.0.0.1:{gw_port}"), "--config"])
        .arg(dir.join("gateway.yaml"))
        .arg("--state")
        .arg(dir.join("state"))
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("build the release binary first: cargo build --release");
    let gw = format!("http://127.0.0.1:{gw_port}/v1/chat/completions");
    let http = reqwest::Client::new();
    for _ in 0..100 {
        if http
            .get(format!("http://127.0.0.1:{gw_port}/healthz"))
            .send()
            .await
            .is_ok()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let direct_ok = format!("http://{up}/ok/v1/chat/completions");
    let direct_fail = format!("http://{up}/fail/v1/chat/completions");
    let pid = child.id();
    // Warm-up: connections, caches, allocator.
    sequential(&http, &gw, "local/m", None, 500).await;
    sequential(&http, &direct_ok, "m", None, 500).await;
    let rss0 = rss_kb(pid);

    let n = 3000;
    let mut d = sequential(&http, &direct_ok, "m", None, n).await;
    let mut g = sequential(&http, &gw, "local/m", None, n).await;
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

    let mut two = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        for u in [&direct_fail, &direct_ok] {
            let r = http.post(u.as_str()).body(BODY).send().await.unwrap();
            let _ = r.bytes().await;
        }
        two.push(t.elapsed().as_micros() as u64);
    }
    let mut f = sequential(&http, &gw, "once", None, n).await;
    let (t50, f50, f99) = (
        pct(&mut two, 0.5),
        pct(&mut f.e2e, 0.5),
        pct(&mut f.e2e, 0.99),
    );
    println!("failover once: two direct round trips p50 {t50} µs; through the gateway p50 {f50} µs p99 {f99} µs; added p50 {} µs", f50.saturating_sub(t50));

    // Without a session the success record is written after the answer;
    // with one, it and the session are one transaction before it.
    for (session, what) in [(None, "no session"), (Some("bench"), "x-session-id")] {
        let mut k = sequential(&http, &gw, "keyed", session, 1000).await;
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
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut child = std::process::Command::new(bin)
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
    sequential(&http, &url, "local/m", None, 200).await;
    let n = 1000;
    let mut l = sequential(&http, &url, "local/m", None, n).await;
    let (l50, l99) = (pct(&mut l.e2e, 0.5), pct(&mut l.e2e, 0.99));
    let probe = http
        .post(&url)
        .header("content-type", "application/json")
        .body(BODY.replace("MODEL", "once"))
        .send()
        .await
        .map(|r| r.status().as_u16());
    println!("LiteLLM 'once' (404 upstream, fallback configured) answers {probe:?}");
    let mut lf = sequential(&http, &url, "once", None, n / 2).await;
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
