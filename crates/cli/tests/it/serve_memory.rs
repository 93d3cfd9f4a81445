//! Issue 44, "How it is shown": the memory of `failover serve`, the
//! binary in its own process (so nothing else of the test is counted),
//! driven with the cases of items 1–3 under a 32 MiB
//! `serve.maxBufferedBytes`: its peak resident memory (`VmHWM`) stays
//! within the baseline, the budget and a constant, and after the load its
//! memory is back near the baseline.

use serde_json::json;

use crate::serve_process::{listen_addr, stderr_lines, Killed};
use crate::serve_support::*;

/// The budget the gateway is given.
const BUDGET_MIB: u64 = 32;
/// What the gateway may hold beyond its budget at its peak: the runtime,
/// connection buffers, a stream's chunks in flight, allocator slack.
const SLACK_MIB: u64 = 64;

/// A `/proc/PID/status` field in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn i44_serve_memory_stays_within_its_budget() {
    if !std::path::Path::new("/proc/self/status").exists() {
        eprintln!("no /proc: the memory of a process is not measured here");
        return;
    }
    let prim = Mock::start().await;
    let back = Mock::start().await;
    let dir = temp_dir("memory");
    write_profiles(&dir);
    let setup = Setup {
        prim_api: "anthropic-messages",
        // One request may hold the whole budget here (its share is half
        // unless written): a 4 MiB translation is charged 24 MiB.
        extra: format!(
            "serve:\n  maxBufferedBytes: {}\n  maxRequestBufferedBytes: {}\n",
            BUDGET_MIB << 20,
            BUDGET_MIB << 20
        ),
        ..Setup::default()
    };
    let cfg = dir.join("gateway.yaml");
    std::fs::write(&cfg, config_text(&setup, &prim, &back)).unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&cfg)
        .arg("--state")
        .arg(dir.join("state"))
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let lines = stderr_lines(&mut child);
    let pid = child.id();
    let _guard = Killed(Some(child));
    eventually("the gateway to listen", || listen_addr(&lines).is_some()).await;
    let addr = listen_addr(&lines).unwrap();
    let url = format!("http://{addr}");
    let http = reqwest::Client::new();
    let post = |path: &'static str, body: serde_json::Value| {
        let (http, url) = (http.clone(), url.clone());
        async move {
            let r = http
                .post(format!("{url}{path}"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let status = r.status().as_u16();
            (status, r.bytes().await.unwrap().len())
        }
    };
    back.always(ok_openai("small"));
    prim.push(ok_anthropic("warm"));
    assert_eq!(
        post("/v1/chat/completions", chat("prim/model-a")).await.0,
        200
    );
    let base = status_kib(pid, "VmRSS");

    // Item 2: eight 4 MiB Anthropic answers translated for OpenAI clients
    // at once; each translation is charged six times its size, so one fits
    // at a time and the others go to the fallback.
    prim.always(ok_anthropic(&"x".repeat(4 << 20)));
    let all = futures_util::future::join_all(
        (0..8).map(|_| post("/v1/chat/completions", chat("prim/model-a"))),
    )
    .await;
    assert!(all.iter().all(|(s, _)| *s == 200), "{all:?}");
    assert!(
        all.iter().any(|(_, n)| *n > 4 << 20),
        "no answer was translated: {all:?}"
    );
    let peak_whole = status_kib(pid, "VmHWM");

    // Item 1: four continuable streams of 16 MiB of text at once: the
    // ledger keeps 1 MiB of each.
    let parts: Vec<String> = (0..4096).map(|_| "y".repeat(4 << 10)).collect();
    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
    prim.always(Reply::Sse(anthropic_events(&parts, true), Tail::End));
    let mut m = msg("prim/model-a");
    m["stream"] = json!(true);
    let all = futures_util::future::join_all((0..4).map(|_| post("/v1/messages", m.clone()))).await;
    assert!(
        all.iter().all(|(s, n)| *s == 200 && *n > 16 << 20),
        "{all:?}"
    );

    // Item 3: 15 MiB of one-word messages is refused by its structure.
    let many: Vec<serde_json::Value> = (0..500_000)
        .map(|_| json!({"role": "user", "content": "a"}))
        .collect();
    let (s, _) = post(
        "/v1/chat/completions",
        json!({"model": "prim/model-a", "messages": many}),
    )
    .await;
    assert_eq!(s, 400);

    let peak = status_kib(pid, "VmHWM");
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let after = status_kib(pid, "VmRSS");
    eprintln!(
        "serve memory: baseline {} MiB, peak {} MiB ({} MiB after the whole answers), after {} MiB (budget {BUDGET_MIB} MiB)",
        base >> 10,
        peak >> 10,
        peak_whole >> 10,
        after >> 10
    );
    assert!(
        peak <= base + ((BUDGET_MIB + SLACK_MIB) << 10),
        "peak {} MiB over baseline {} MiB + budget + slack",
        peak >> 10,
        base >> 10
    );
    assert!(
        after <= base + (SLACK_MIB << 10),
        "after the load {} MiB (baseline {} MiB)",
        after >> 10,
        base >> 10
    );
}
