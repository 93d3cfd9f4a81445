//! Round trips to Redis per run (issue 13): a real `redis-server` on a free
//! loopback port. Each update's first compare-and-set uses the record as
//! this replica last saw it (at the start of the run) instead of reading
//! it again; a record another replica changed in between fails the
//! compare, and the update reads and retries, losing nothing.

use std::sync::Arc;

use failover::auth::{record_failure, CooldownPolicy, Failure};
use failover::config::{Format, GatewayConfig};
use failover::run::{RunRequest, Runner};
use failover::store::{edit_profile, AsyncStore, Profile, RedisStore, Store, StoreExt};
use failover::Engine;

#[path = "redis_support/mod.rs"]
mod redis_support;

const T0: u64 = 1_767_225_600_000;

fn temp_dir(tag: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!(
        "failover-trips-{tag}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

async fn store(server: &redis_support::RedisServer, dir: &std::path::Path) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::connect(&server.url(), "trips:", dir, "main")
            .await
            .unwrap(),
    )
}

/// A successful run on its first candidate: the session and the routing
/// state read (2); the profile's success written by compare-and-set
/// against the record read with the state (1); the session's entry, which
/// a plain success leaves as it was, read to make sure (1). Without the
/// memory it is 5 (the profile's write reads its record first); a run
/// whose session entry changes saves one more.
#[tokio::test]
async fn a_successful_run_costs_four_round_trips() {
    let Some(server) = redis_support::RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = temp_dir("run");
    let s = store(&server, &dir).await;
    s.update_profiles(|p| {
        p.profiles.insert(
            "openai:default".into(),
            Profile::api_key("openai", "sk-test-trips"),
        );
    })
    .unwrap();
    let config = GatewayConfig::parse(
        "agents:\n  defaults:\n    model:\n      primary: openai/gpt-5.2\n      fallbacks: [anthropic/claude]\n",
        Format::Yaml,
        "t.yaml",
    )
    .unwrap()
    .config;
    let runner =
        Runner::with_store(Arc::new(Engine::builtin()), Arc::new(config), s.clone()).unwrap();
    let request = RunRequest::session("agent:main:web:trips");
    let mut per_run = Vec::new();
    for _ in 0..3 {
        let before = s.round_trips();
        let out = runner
            .run(&request, |a| async move {
                Ok::<_, failover::AttemptError>(a.model)
            })
            .await
            .unwrap();
        assert_eq!(out.model_ref(), "openai/gpt-5.2");
        per_run.push(s.round_trips() - before);
    }
    // The first run also loads the two scripts (NOSCRIPT, then EVAL).
    assert!(per_run[0] <= 6, "{per_run:?}");
    assert_eq!(&per_run[1..], [4, 4], "{per_run:?}");
    // What was written is what a fresh replica reads.
    let fresh = store(&server, &dir).await;
    let st = Store::load_state(fresh.as_ref()).unwrap();
    assert!(st.usage_stats["openai:default"].last_used.is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replica A remembers a profile's record; replica B changes it; A's
/// update then compares against a stale record, fails, reads, retries:
/// both failures count (no update lost), for one extra round trip.
#[tokio::test]
async fn a_stale_memory_costs_a_retry_and_loses_nothing() {
    let Some(server) = redis_support::RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = temp_dir("stale");
    let (a, b) = (store(&server, &dir).await, store(&server, &dir).await);
    let behaviour = {
        let e = Engine::builtin();
        let rs = e.ruleset();
        rs.reason(rs.reason_id("rate_limit").unwrap())
            .behaviour
            .clone()
    };
    let failure = Failure {
        reason: "rate_limit",
        behaviour: &behaviour,
        model: Some("gpt"),
        reset_at: None,
    };
    let policy = CooldownPolicy::default();
    let fail = |s: Arc<RedisStore>, now: u64| {
        let (f, p) = (failure, policy.clone());
        async move {
            edit_profile(s.as_ref(), "openai:a", "openai", |st| {
                record_failure(st, "openai:a", "openai", &f, &p, now)
            })
            .await
            .unwrap();
        }
    };
    fail(a.clone(), T0).await;
    AsyncStore::load_state(a.as_ref()).await.unwrap(); // A remembers error count 1
    fail(b.clone(), T0 + 1).await; // B makes it 2
    let before = a.round_trips();
    fail(a.clone(), T0 + 2).await; // A's memory says 1: stale
    assert_eq!(
        a.round_trips() - before,
        3,
        "compare (fails), read, compare"
    );
    let st = AsyncStore::load_state(b.as_ref()).await.unwrap();
    assert_eq!(st.usage_stats["openai:a"].error_count, 3);
    // Fresh from its own write, A's next update needs no read.
    let before = a.round_trips();
    fail(a.clone(), T0 + 3).await;
    assert_eq!(a.round_trips() - before, 1);
    assert_eq!(
        AsyncStore::load_state(b.as_ref())
            .await
            .unwrap()
            .usage_stats["openai:a"]
            .error_count,
        4
    );
    let _ = std::fs::remove_dir_all(&dir);
}
