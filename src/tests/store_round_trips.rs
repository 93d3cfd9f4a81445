//! Round trips to Redis per run (issue 13): a real `redis-server` on a free
//! loopback port. Each update's first compare-and-set uses the record as
//! this replica last saw it (at the start of the run) instead of reading
//! it again; a record another replica changed in between fails the
//! compare, and the update reads and retries, losing nothing.

use std::sync::Arc;

use crate::auth::{record_failure, CooldownPolicy, Failure};
use crate::config::{Format, GatewayConfig};
use crate::run::{RunRequest, Runner};
use crate::store::{edit_profile, AsyncStore, ManualClock, Profile, RedisStore, Store, StoreExt};
use crate::Engine;

use failover_testkit::RedisServer;

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

async fn store(server: &RedisServer, dir: &std::path::Path) -> Arc<RedisStore> {
    Arc::new(
        RedisStore::connect(&server.url(), "trips:", dir, "main")
            .await
            .unwrap(),
    )
}

fn runner_on(s: Arc<RedisStore>) -> Runner {
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
    Runner::with_store(Arc::new(Engine::builtin()), Arc::new(config), s).unwrap()
}

/// Issue 13's target: a successful run on its first candidate costs at
/// most 2 round trips. One pipeline reads the session's entry and the
/// routing state (`load_run`); one compare-and-set script writes the
/// profile's success and checks (or writes) the session's entry, against
/// the records as that read returned them. Before this it was 4 (session
/// read, state read, the profile's compare-and-set, the session's check).
/// Also prints the per-run time, 300 runs writing and 300 not (a debug
/// build on a loaded machine: figures for benches/README.md, not asserted).
#[tokio::test]
async fn a_successful_run_costs_two_round_trips() {
    let Some(server) = RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = temp_dir("run");
    let s = store(&server, &dir).await;
    let clock = Arc::new(ManualClock::new(T0));
    let runner = runner_on(s.clone()).with_clock(clock.clone());
    let request = RunRequest::session("agent:main:web:trips");
    // Two series: the clock moving 1 ms per run (every run writes the
    // profile's `lastUsed`, which the test server fsyncs), then standing
    // still (the success's record comes out unchanged, so the script only
    // compares: the read path plus one round trip, as the runner bench).
    for (series, step) in [("writing", 1), ("unchanged", 0)] {
        let mut per_run = Vec::new();
        let mut times = Vec::new();
        for _ in 0..300 {
            clock.advance(step);
            let before = s.round_trips();
            let t = std::time::Instant::now();
            let out = runner
                .run(&request, |a| async move {
                    Ok::<_, crate::AttemptError>(a.model)
                })
                .await
                .unwrap();
            times.push(t.elapsed());
            assert_eq!(out.model_ref(), "openai/gpt-5.2");
            per_run.push(s.round_trips() - before);
        }
        // The first run too: a profile record the state read did not list
        // is known to be absent, so its compare-and-set needs no read.
        assert!(per_run.iter().all(|&n| n == 2), "{series}: {per_run:?}");
        times.sort();
        eprintln!(
            "redis success path, {series}: 2 round trips per run; per run p50 {:?}, p90 {:?} (debug build, {} runs)",
            times[times.len() / 2],
            times[times.len() * 9 / 10],
            times.len()
        );
    }
    // What was written is what a fresh replica reads.
    let fresh = store(&server, &dir).await;
    let st = Store::load_state(fresh.as_ref()).unwrap();
    assert_eq!(st.usage_stats["openai:default"].last_used, Some(T0 + 300));
    assert_eq!(st.last_good["openai"], "openai:default");
    assert!(Store::load_session(fresh.as_ref(), "agent:main:web:trips")
        .unwrap()
        .is_some());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The success's one compare-and-set runs against the records as the run
/// read them at its start. Here replica B writes both while A's attempt is
/// in flight: a rate-limit cooldown of the same profile scoped to another
/// model (which A's success must keep, R16.5: only a same-model success
/// clears a window), and a field of the session another subsystem owns.
/// A's compare fails, A reads the three records (one pipeline) and writes
/// again: nothing B wrote is lost, and A's success is recorded.
#[tokio::test]
async fn a_success_against_a_stale_view_retries_and_loses_nothing() {
    let Some(server) = RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = temp_dir("stale-success");
    let (a, b) = (store(&server, &dir).await, store(&server, &dir).await);
    let runner = runner_on(a.clone());
    let key = "agent:main:web:stale";
    let request = RunRequest::session(key);
    // A first run settles the records into A's memory.
    runner
        .run(&request, |x| async move {
            Ok::<_, crate::AttemptError>(x.model)
        })
        .await
        .unwrap();
    let behaviour = {
        let e = Engine::builtin();
        let rs = e.ruleset();
        rs.reason(rs.reason_id("rate_limit").unwrap())
            .behaviour
            .clone()
    };
    let policy = CooldownPolicy::default();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let before = a.round_trips();
    let out = runner
        .run(&request, |x| {
            let (b, behaviour, policy) = (b.clone(), behaviour.clone(), policy.clone());
            async move {
                // B, mid-attempt: a cooldown on another model of the profile …
                let f = Failure {
                    reason: "rate_limit",
                    behaviour: &behaviour,
                    model: Some("gpt-other"),
                    reset_at: None,
                    probe: false,
                    outranks: None,
                };
                edit_profile(b.as_ref(), "openai:default", "openai", |st| {
                    record_failure(st, "openai:default", "openai", &f, &policy, now)
                })
                .await
                .unwrap();
                // … and a session field it owns.
                crate::store::edit_session(b.as_ref(), key, |e| {
                    e.extra.insert("label".into(), serde_json::json!("from B"));
                })
                .await
                .unwrap();
                Ok::<_, crate::AttemptError>(x.model)
            }
        })
        .await
        .unwrap();
    assert_eq!(out.model_ref(), "openai/gpt-5.2");
    assert_eq!(
        a.round_trips() - before,
        4,
        "read at the start, compare-and-set (fails), read, compare-and-set"
    );
    let st = Store::load_state(b.as_ref()).unwrap();
    let s = &st.usage_stats["openai:default"];
    // R7.3: A's success resets the profile's counters and leaves B's
    // window on another model, with its count, as it was.
    assert_eq!(s.error_count, 0, "A's success resets the profile's count");
    let w = &s.model_cooldowns["gpt-other"];
    assert_eq!(w.error_count, 1, "B's failure still counts for its model");
    assert!(w.cooldown_until.is_some_and(|u| u > now), "B's window kept");
    assert_eq!(s.cooldown_model.as_deref(), Some("gpt-other"));
    assert_eq!(
        s.cooldown_until, w.cooldown_until,
        "mirrored for the original's readers"
    );
    assert!(
        s.last_used.is_some_and(|t| t >= now),
        "A's success recorded"
    );
    let e = Store::load_session(b.as_ref(), key).unwrap().unwrap();
    assert_eq!(e.extra["label"], "from B");
    // Fresh from its own write, A's next run is 2 again.
    let before = a.round_trips();
    runner
        .run(&request, |x| async move {
            Ok::<_, crate::AttemptError>(x.model)
        })
        .await
        .unwrap();
    assert_eq!(a.round_trips() - before, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Replica A remembers a profile's record; replica B changes it; A's
/// update then compares against a stale record, fails, reads, retries:
/// both failures count (no update lost), for one extra round trip.
#[tokio::test]
async fn a_stale_memory_costs_a_retry_and_loses_nothing() {
    let Some(server) = RedisServer::start() else {
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
        probe: false,
        outranks: None,
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
