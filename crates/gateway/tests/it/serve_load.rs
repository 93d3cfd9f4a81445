//! A bounded load test of `failover serve`: 5,000 requests from 200
//! concurrent clients over 500 sessions, a mix of runs that fail over once
//! and runs whose whole chain fails. Every session's override must be on
//! disk afterwards (no lost state update), every request must have ended
//! (no permit leaked), and the gateway must have answered each request.
//! It stops by itself: the request count is fixed. `cargo test` sends
//! 1,000 requests from 40 clients over 100 sessions; with
//! `FAILOVER_DEEP=1` (CI sets it) the full 5,000 over 500.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::serve_support::*;

/// Sessions; each gets ten requests, in order, from the one client (of
/// two per five sessions) that owns it: the primary count below is about
/// the turns that follow a session's first fallback, so a session's next
/// turn must not start before its last one answered (with turns handed
/// out from one shared counter instead, a turn now and then still raced
/// the one before it on a fast build).
fn sessions() -> usize {
    if std::env::var_os("FAILOVER_DEEP").is_some_and(|v| !v.is_empty() && v != "0") {
        500
    } else {
        100
    }
}

// SPEC R11.1, R11.3: each session's override survives concurrent writers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r11_1_bounded_load_loses_no_state_update() {
    let gw = Gw::start(
        "load",
        Setup {
            extra: "serve: { maxConcurrentRequests: 4096 }\n".into(),
            ..Setup::default()
        },
    )
    .await;
    // The primary's model is gone (no cooldown, so every run fails over);
    // the fallback answers, except for one model that fails too.
    gw.prim.always(error(
        404,
        r#"{"error":{"message":"The model does not exist","code":"model_not_found"}}"#,
    ));
    gw.back.always(ok_openai("ok"));
    let ok = Arc::new(AtomicUsize::new(0));
    let surfaced = Arc::new(AtomicUsize::new(0));
    let url = gw.url("/v1/chat/completions");
    let (sessions, requests) = (sessions(), sessions() * 10);
    let clients = sessions * 2 / 5;
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (ok, surfaced, url) = (ok.clone(), surfaced.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let owned: Vec<usize> = (c..sessions).step_by(clients).collect();
            for turn in 0..10 {
                for s in &owned {
                    // The first turn of each session asks for a strict
                    // one-shot of the primary, whose 404 is surfaced as it
                    // is (SPEC R16.8); the other nine fail over.
                    let model = if turn == 0 {
                        "prim/model-z"
                    } else {
                        "prim/model-a"
                    };
                    let r = http
                        .post(&url)
                        .header("x-session-id", format!("load-{s}"))
                        .json(&chat(model))
                        .send()
                        .await
                        .unwrap();
                    match r.status().as_u16() {
                        200 => ok.fetch_add(1, Ordering::SeqCst),
                        404 => surfaced.fetch_add(1, Ordering::SeqCst),
                        s => panic!("unexpected status {s}: {}", r.text().await.unwrap()),
                    };
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(ok.load(Ordering::SeqCst), requests - requests / 10);
    assert_eq!(surfaced.load(Ordering::SeqCst), requests / 10);
    for s in 0..sessions {
        let e = gw.session(&format!("load-{s}"));
        assert_eq!(e["modelOverride"], "model-b", "session load-{s}: {e}");
        assert_eq!(e["modelOverrideSource"], "auto");
    }
    assert_eq!(gw.running.as_ref().unwrap().gateway.in_flight(), 0);
    // A session's later turns stay on its fallback (R11.5), so the
    // primary is called once per session by its first fallback, plus the
    // one-shots.
    assert_eq!(gw.prim.hits(), sessions + requests / 10);
    gw.stop().await;
}
