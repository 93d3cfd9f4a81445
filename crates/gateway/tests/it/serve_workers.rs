//! Issue 12 item 10 on both ways of serving (`Options::workers`): on the
//! caller's runtime (0) and on worker threads, each a runtime of its own
//! (the CLI's default). Shutdown stops accepting, lets a request in flight
//! finish within the grace period, and closes what is left after it.

use std::time::{Duration, Instant};

use crate::serve_support::*;

async fn gateway(name: &str, workers: usize, grace_ms: u64) -> Gw {
    Gw::start(
        name,
        Setup {
            workers,
            extra: format!("serve: {{ shutdownGraceMs: {grace_ms} }}\n"),
            ..Setup::default()
        },
    )
    .await
}

/// Many connections at once, each its own client: all are answered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_connection_is_served_on_every_worker_count() {
    for workers in [0, 1, 3] {
        let gw = gateway(&format!("conns-{workers}"), workers, 10_000).await;
        for _ in 0..12 {
            gw.prim.push(ok_openai("ok"));
        }
        let clients: Vec<reqwest::Client> = (0..12)
            .map(|_| reqwest::Client::builder().build().unwrap())
            .collect();
        let url = gw.url("/v1/chat/completions");
        let calls = clients.iter().map(|c| {
            let url = url.clone();
            async move {
                let r = c
                    .post(url)
                    .json(&chat("prim/model-a"))
                    .send()
                    .await
                    .unwrap();
                (r.status().as_u16(), r.text().await.unwrap())
            }
        });
        for (status, body) in futures_util::future::join_all(calls).await {
            assert_eq!(status, 200, "workers {workers}: {body}");
        }
        assert_eq!(gw.prim.hits(), 12, "workers {workers}");
        assert_eq!(gw.running.as_ref().unwrap().gateway.in_flight(), 0);
        gw.stop().await;
    }
}

/// Starts a request the upstream answers after `slow`, shuts the gateway
/// down once the upstream has it, and returns the client's result and how
/// long shutdown took.
async fn shutdown_during(
    name: &str,
    workers: usize,
    grace_ms: u64,
    slow: Duration,
) -> (reqwest::Result<reqwest::Response>, Duration) {
    let mut gw = gateway(name, workers, grace_ms).await;
    gw.prim
        .push(Reply::Slow(slow, Box::new(ok_openai("finished"))));
    let pending = gw
        .http
        .post(gw.url("/v1/chat/completions"))
        .json(&chat("prim/model-a"))
        .send();
    let running = gw.running.take().unwrap();
    let prim = &gw.prim;
    let stop = async {
        eventually("the slow call to start", || prim.hits() == 1).await;
        let t = Instant::now();
        running.shutdown().await;
        t.elapsed()
    };
    let out = tokio::join!(pending, stop);
    gw.stop().await;
    out
}

/// A request in flight when shutdown starts finishes (well inside the
/// grace period), and shutdown then returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_the_request_in_flight_finish() {
    for workers in [0, 2] {
        let (r, took) = shutdown_during(
            &format!("drain-{workers}"),
            workers,
            10_000,
            Duration::from_millis(400),
        )
        .await;
        let r = r.unwrap();
        assert_eq!(r.status(), 200, "workers {workers}");
        assert!(r.text().await.unwrap().contains("finished"));
        assert!(
            took < Duration::from_secs(5),
            "workers {workers}: shutdown took {took:?}"
        );
    }
}

/// After the grace period the connections left are closed: the client
/// gets an error, not an answer, and shutdown returns soon after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_what_is_left_after_the_grace_period() {
    for workers in [0, 2] {
        let (r, took) = shutdown_during(
            &format!("grace-{workers}"),
            workers,
            200,
            Duration::from_secs(8),
        )
        .await;
        assert!(
            r.is_err(),
            "workers {workers}: the request was answered after the grace period"
        );
        assert!(
            took < Duration::from_secs(3),
            "workers {workers}: shutdown took {took:?} with a 200 ms grace period"
        );
    }
}
