//! Two `failover serve` replicas on one Redis (issue 13): each has its own
//! state directory (its own `auth-profiles.json`, the same profile ids)
//! and its own upstream mocks; the routing state and the sessions are the
//! shared Redis. What one replica learns, the other acts on.

use std::time::{Duration, Instant};

use crate::serve_support::*;
use serde_json::Value;

fn setup(url: &str) -> Setup {
    Setup {
        extra: format!("state: {{ backend: redis, url: \"{url}\", prefix: \"replicas:\" }}\n"),
        ..Setup::default()
    }
}

/// A replica's view of the shared state, through its own backend.
fn session_of(gw: &Gw, key: &str) -> Value {
    let set = gw.running.as_ref().unwrap().gateway.active();
    let e = set.runners["main"].store().load_session(key).unwrap();
    e.map(|e| serde_json::to_value(e).unwrap())
        .unwrap_or(Value::Null)
}

// A 429 answered to replica A cools the profile for B at once (LiteLLM
// #40025: replicas seeing a cooldown seconds late); the session's auto
// override written by A is what B reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cooldown_on_a_is_seen_by_b_at_once() {
    let Some(server) = failover_testkit::RedisServer::start() else {
        return;
    };
    let a = Gw::start("replica-a", setup(&server.url())).await;
    let b = Gw::start("replica-b", setup(&server.url())).await;
    for gw in [&a, &b] {
        gw.back.always(ok_openai("from back"));
        gw.prim.always(ok_openai("from prim"));
    }
    // A 10-minute reset: the primary's probe window (2 min before the
    // expiry, R16.1) stays closed, so a replica that sees the cooldown
    // skips the primary outright.
    a.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "600".into())],
        body: r#"{"error":{"message":"Rate limit reached"}}"#.into(),
    });
    let r = a.openai(chat("prim/model-a"), Some("chat-1")).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    let answered = Instant::now();
    // B, on a session of its own, asked at once after A's answer: the
    // primary is cooling, so B does not call its upstream for it — the
    // `hits() == 0` below is the proof that B saw A's cooldown by then.
    // The time is B's whole answer, read after it arrives (issue 36: the
    // gap measured before the request was sent could not fail); its bound
    // only says B did not wait for the state to arrive (a loaded 2-core
    // runner takes far less than it; issue 36 asks for no tight wall-clock
    // bound).
    let r = b.openai(chat("prim/model-a"), Some("chat-2")).await;
    let gap = answered.elapsed();
    assert_eq!(r.status, 200);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(b.prim.hits(), 0, "B called a profile A had cooled");
    assert!(
        gap < Duration::from_secs(5),
        "B answered {gap:?} after A: the cooldown took longer to be seen"
    );
    // A's auto override of chat-1 is B's too.
    let e = session_of(&b, "chat-1");
    assert_eq!(e["modelOverride"], "model-b", "{e}");
    assert_eq!(e["modelOverrideSource"], "auto", "{e}");
    let r = b.openai(chat("prim/model-a"), Some("chat-1")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(b.prim.hits(), 0);
    a.stop().await;
    b.stop().await;
}

// A billing disable that B met holds on A.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_billing_disable_seen_by_b_holds_on_a() {
    let Some(server) = failover_testkit::RedisServer::start() else {
        return;
    };
    let a = Gw::start("replica-bill-a", setup(&server.url())).await;
    let b = Gw::start("replica-bill-b", setup(&server.url())).await;
    for gw in [&a, &b] {
        gw.back.always(ok_openai("from back"));
        gw.prim.always(ok_openai("from prim"));
    }
    b.prim.push(error(
        402,
        r#"{"error":{"message":"Your credit balance is too low to access the API. Please go to Plans & Billing to upgrade or purchase credits.","type":"billing_error"}}"#,
    ));
    let r = b.openai(chat("prim/model-a"), Some("bill-1")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let usage = {
        let set = a.running.as_ref().unwrap().gateway.active();
        set.runners["main"]
            .store()
            .load_state()
            .unwrap()
            .usage_stats["prim:default"]
            .clone()
    };
    assert!(usage.disabled_until.is_some(), "{usage:?}");
    for i in 0..3 {
        let r = a
            .openai(chat("prim/model-a"), Some(&format!("bill-a-{i}")))
            .await;
        assert_eq!(
            r.header("x-failover-model").as_deref(),
            Some("back/model-b")
        );
    }
    assert_eq!(a.prim.hits(), 0, "A called a provider B found disabled");
    a.stop().await;
    b.stop().await;
}

// One cooldown probe per provider across both replicas (R16.1's throttle
// is in Redis): B probes the cooling primary; A, asked right after, does
// not probe it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_probe_per_provider_across_replicas() {
    let Some(server) = failover_testkit::RedisServer::start() else {
        return;
    };
    let a = Gw::start("replica-probe-a", setup(&server.url())).await;
    let b = Gw::start("replica-probe-b", setup(&server.url())).await;
    for gw in [&a, &b] {
        gw.back.always(ok_openai("from back"));
        gw.prim.always(ok_openai("from prim"));
    }
    let rate_limited = || error(429, r#"{"error":{"message":"Rate limit reached"}}"#);
    a.prim.push(rate_limited());
    b.prim.push(rate_limited());
    // A: a 1-minute cooldown, so the probe window is open at once.
    let r = a.openai(chat("prim/model-a"), Some("p-1")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(a.prim.hits(), 1);
    // B: the primary is cooling and the throttle is free: B probes it
    // (it fails again) and falls back.
    let r = b.openai(chat("prim/model-a"), Some("p-2")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(b.prim.hits(), 1, "B probed the primary once");
    // A: the throttle B took holds for 30 s across the fleet.
    let r = a.openai(chat("prim/model-a"), Some("p-3")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(a.prim.hits(), 1, "A probed again within the throttle");
    a.stop().await;
    b.stop().await;
}

/// The keys of `pattern` in the server's database.
fn keys(url: &str, pattern: &str) -> Vec<String> {
    let mut con = redis::Client::open(url)
        .and_then(|c| c.get_connection())
        .expect("a connection to the test's redis-server");
    redis::cmd("KEYS").arg(pattern).query(&mut con).unwrap()
}

// R11.5's re-probe clock is per session: a request without `x-session-id`
// is a session that ends with it, so leaving the primary starts no clock
// (before, each one left a key in Redis for a day, one per request); a
// session's fallback does start one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_without_a_session_leaves_no_reprobe_clock() {
    let Some(server) = failover_testkit::RedisServer::start() else {
        return;
    };
    let gw = Gw::start("replica-one-off", setup(&server.url())).await;
    gw.back.always(ok_openai("from back"));
    // A retired model: it cools nothing (R8), so every request leaves the
    // primary again.
    gw.prim.always(error(
        404,
        r#"{"error":{"message":"The model `model-a` does not exist","type":"invalid_request_error","code":"model_not_found"}}"#,
    ));
    for _ in 0..20 {
        let r = gw.openai(chat("prim/model-a"), None).await;
        assert_eq!(
            r.header("x-failover-model").as_deref(),
            Some("back/model-b")
        );
    }
    assert_eq!(gw.prim.hits(), 20, "every request tried the primary");
    assert_eq!(
        keys(&server.url(), "replicas:*reprobe*"),
        Vec::<String>::new()
    );
    let r = gw.openai(chat("prim/model-a"), Some("chat-1")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    assert_eq!(keys(&server.url(), "replicas:*reprobe*").len(), 1);
    gw.stop().await;
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

// Redis lost while serving: requests keep being answered from the local
// view, the outage is counted once (not per request), and when Redis is
// back the cooldown recorded meanwhile is merged into it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lost_while_serving_answers_from_the_local_view() {
    let Some(mut server) = failover_testkit::RedisServer::start() else {
        return;
    };
    let gw = Gw::start("replica-lost", setup(&server.url())).await;
    gw.back.always(ok_openai("from back"));
    gw.prim.always(ok_openai("from prim"));
    let r = gw.openai(chat("prim/model-a"), Some("lost-1")).await;
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("prim/model-a")
    );

    server.kill();
    gw.prim.push(Reply::Http {
        status: 429,
        headers: vec![("retry-after".into(), "600".into())],
        body: r#"{"error":{"message":"Rate limit reached"}}"#.into(),
    });
    let r = gw.openai(chat("prim/model-a"), Some("lost-2")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.header("x-failover-model").as_deref(),
        Some("back/model-b")
    );
    for i in 0..5 {
        let r = gw
            .openai(chat("prim/model-a"), Some(&format!("lost-3-{i}")))
            .await;
        assert_eq!(r.status, 200, "{}", r.text);
        // The local view holds the cooldown: the primary is not called.
        assert_eq!(
            r.header("x-failover-model").as_deref(),
            Some("back/model-b")
        );
    }
    assert_eq!(gw.prim.hits(), 2);
    let m = gw.http.get(gw.url("/metrics")).send().await.unwrap();
    let text = m.text().await.unwrap();
    assert_eq!(
        metric(&text, "failover_state_backend_up{"),
        Some(0.0),
        "{text}"
    );
    assert_eq!(
        metric(&text, "failover_state_backend_outages_total{"),
        Some(1.0),
        "one outage, however many requests: {text}"
    );

    server.restart();
    // Reconnection backs off (100 ms doubling); bounded wait for it.
    let until = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let _ = gw.openai(chat("prim/model-a"), Some("lost-4")).await;
        let m = gw.http.get(gw.url("/metrics")).send().await.unwrap();
        let text = m.text().await.unwrap();
        if metric(&text, "failover_state_backend_up{") == Some(1.0) {
            break;
        }
        assert!(
            std::time::Instant::now() < until,
            "never reconnected: {text}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // The cooldown recorded during the outage is in Redis now.
    let fresh = failover::state::RedisStore::connect(&server.url(), "replicas:", &gw.dir, "main")
        .await
        .unwrap();
    let st = failover::AsyncStore::load_state(&fresh).await.unwrap();
    let until = st.usage_stats["prim:default"].cooldown_until.unwrap();
    assert!(
        until > now_ms() + 500_000,
        "the 10-minute cooldown merged back"
    );
    let e = failover::AsyncStore::load_session(&fresh, "lost-2")
        .await
        .unwrap()
        .expect("the session written during the outage merged back");
    assert_eq!(e.model_override.as_deref(), Some("model-b"));
    gw.stop().await;
}
