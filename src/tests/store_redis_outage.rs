//! A Redis store losing its server while serving, and its other edges
//! (docs/gateway.md, "State backends"): a real `redis-server` on a free loopback port,
//! stopped with SIGKILL and started again. Lost while serving, a replica
//! answers from its local view (every record it read or wrote), warns
//! once, counts the outage, retries with backoff (not on every request),
//! and when the server returns writes back what changed: a session's
//! entry written during the outage replaces Redis', and a profile's
//! record nobody else touched meanwhile stands as it was edited. A
//! refused command is an error, not an outage; a server that is missing
//! or mute at start is an error naming it without its password.

use std::time::{Duration, Instant};

use crate::store::{edit_profile, edit_session, AsyncStore, RedisStore, SharedTables, UsageStats};

use super::LogCapture;
use failover_testkit::RedisServer;

fn temp_dir(tag: &str) -> std::path::PathBuf {
    failover_testkit::temp_root("outage", tag)
}

/// A `redis-server` of the test's own, and a directory for the replicas'
/// secrets' files, removed when the test ends (passed or failed).
struct Fixture {
    server: RedisServer,
    dir: std::path::PathBuf,
    prefix: String,
}

impl Fixture {
    /// Keys under `tag:`; `None` (said on stderr) when `redis-server` is
    /// missing and `FAILOVER_SKIP_REDIS=1` allows the test to skip.
    fn start(tag: &str) -> Option<Fixture> {
        let Some(server) = RedisServer::start() else {
            eprintln!("skipped: no redis-server");
            return None;
        };
        let (dir, prefix) = (temp_dir(tag), format!("{tag}:"));
        Some(Fixture {
            server,
            dir,
            prefix,
        })
    }

    /// A replica (agent `main`).
    async fn replica(&self) -> RedisStore {
        RedisStore::connect(&self.server.url(), &self.prefix, &self.dir, "main")
            .await
            .unwrap()
    }

    /// A plain connection of the test's own, to look at (or spoil) keys.
    fn raw(&self) -> redis::Connection {
        redis::Client::open(self.server.url().as_str())
            .unwrap()
            .get_connection_with_timeout(Duration::from_secs(5))
            .unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn set_model(model: &'static str) -> impl FnMut(&mut crate::store::SessionEntry) + Send {
    move |e| e.model_override = Some(model.into())
}

async fn model_of(s: &RedisStore, key: &str) -> Option<String> {
    AsyncStore::load_session(s, key)
        .await
        .unwrap()
        .and_then(|e| e.model_override)
}

/// Reads until the store has reconnected (it retries with backoff).
async fn until_up(s: &RedisStore) {
    let until = Instant::now() + Duration::from_secs(30);
    while !s.is_up() {
        assert!(Instant::now() < until, "never reconnected");
        tokio::time::sleep(Duration::from_millis(50)).await;
        let _ = AsyncStore::load_state(s).await;
    }
}

// docs/gateway.md ("lost while serving, each replica answers from its local view,
// warns once, … retries with backoff and merges its changes back"); the
// outage count is what `failover_state_backend_up` and `status` report.
#[tokio::test(flavor = "current_thread")]
async fn an_outage_serves_the_local_view_and_merges_it_back() {
    let Some(mut fx) = Fixture::start("outage") else {
        return;
    };
    let a = fx.replica().await;
    let t0 = now_ms();
    // Online: two sessions, and a profile cooling (A saw all of them).
    edit_session(&a, "s1", set_model("gpt")).await.unwrap();
    edit_session(&a, "s2", set_model("claude")).await.unwrap();
    edit_profile(&a, "openai:a", "openai", |st| {
        st.usage_stats.insert(
            "openai:a".into(),
            UsageStats {
                error_count: 3,
                cooldown_until: Some(t0 + 3_600_000),
                cooldown_reason: Some("rate_limit".into()),
                last_failure_at: Some(t0),
                ..Default::default()
            },
        );
    })
    .await
    .unwrap();
    AsyncStore::load_state(&a).await.unwrap();
    assert_eq!((a.is_up(), a.outages()), (true, 0));
    assert_eq!(a.health(), Some((true, 0)));
    assert!(a.shared_tables().is_some());

    let capture = LogCapture::start();

    fx.server.kill();
    // Both sessions are served from the local view, as last seen.
    assert_eq!(model_of(&a, "s1").await.as_deref(), Some("gpt"));
    assert!(!a.is_up(), "the read found the server gone");
    assert_eq!(model_of(&a, "s2").await.as_deref(), Some("claude"));
    assert_eq!(a.outages(), 1);
    assert_eq!(a.health(), Some((false, 1)));
    assert!(
        a.shared_tables().is_none(),
        "the runner's own tables stand in"
    );

    // Backoff: a burst of requests does not try the server on each.
    let trips = a.round_trips();
    for _ in 0..50 {
        AsyncStore::load_state(&a).await.unwrap();
    }
    let tried = a.round_trips() - trips;
    assert!(tried <= 5, "the server was tried {tried} times in 50 reads");

    // Changes during the outage: a new session, an overridden one, and an
    // edit of the profile's record (its window cleared, counts reset).
    edit_session(&a, "s3", set_model("gemini")).await.unwrap();
    edit_session(&a, "s1", set_model("mistral")).await.unwrap();
    assert_eq!(model_of(&a, "s3").await.as_deref(), Some("gemini"));
    assert_eq!(model_of(&a, "s1").await.as_deref(), Some("mistral"));
    // A cancelled run's roll-back (the one call that cannot await) too.
    a.update_session_now("s4", Box::new(set_model("llama")))
        .unwrap();
    assert_eq!(model_of(&a, "s4").await.as_deref(), Some("llama"));
    edit_profile(&a, "openai:a", "openai", |st| {
        let s = st.usage_stats.get_mut("openai:a").unwrap();
        s.cooldown_until = None;
        s.cooldown_reason = None;
        s.error_count = 0;
    })
    .await
    .unwrap();
    assert_eq!(a.outages(), 1, "one outage, however many calls saw it");

    fx.server.restart();
    until_up(&a).await;
    let log = capture.text();
    assert_eq!(
        log.matches("state backend unreachable").count(),
        1,
        "warned once: {log}"
    );
    assert!(
        log.contains("merged=4") && log.contains("state backend is back"),
        "one profile and three sessions merged back: {log}"
    );

    // What another replica reads now: the outage's writes.
    let c = fx.replica().await;
    assert_eq!(model_of(&c, "s1").await.as_deref(), Some("mistral"));
    assert_eq!(model_of(&c, "s2").await.as_deref(), Some("claude"));
    assert_eq!(model_of(&c, "s3").await.as_deref(), Some("gemini"));
    assert_eq!(model_of(&c, "s4").await.as_deref(), Some("llama"));
    let st = AsyncStore::load_state(&c).await.unwrap();
    let s = &st.usage_stats["openai:a"];
    // Nobody else wrote the record meanwhile: the edit stands as it is
    // (with its base unknown the merge would keep the later deadline).
    assert_eq!((s.cooldown_until, s.error_count), (None, 0));

    // A second outage is counted as one more.
    fx.server.kill();
    AsyncStore::load_state(&a).await.unwrap();
    assert_eq!(a.health(), Some((false, 2)));
}

/// The store's per-record calls, reads and writes.
const CALLS: [&str; 6] = [
    "load_state",
    "load_session",
    "load_run",
    "update_profile",
    "update_session",
    "update_success",
];

/// Makes call `name` of [`CALLS`] on session `s1` and profile `openai:a`.
async fn call(s: &RedisStore, name: &str) -> Result<(), crate::store::StoreError> {
    let count = |st: &mut crate::store::AuthState| {
        st.usage_stats
            .entry("openai:a".into())
            .or_default()
            .error_count += 1;
    };
    match name {
        "load_state" => AsyncStore::load_state(s).await.map(drop),
        "load_session" => AsyncStore::load_session(s, "s1").await.map(drop),
        "load_run" => s.load_run("s1").await.map(drop),
        "update_profile" => edit_profile(s, "openai:a", "openai", count).await,
        "update_session" => edit_session(s, "s1", set_model("gpt")).await,
        "update_success" => {
            let (mut pf, mut sf) = (count, set_model("claude"));
            s.update_success(Some(("openai:a", "openai", &mut pf)), "s1", &mut sf)
                .await
        }
        _ => unreachable!("{name}"),
    }
}

// A command the server refuses (here: keys of the wrong type) is an error
// the caller sees, not an outage: the store stays up and serves nothing
// stale. Every per-record call, reads and writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_command_is_an_error_not_an_outage() {
    let Some(fx) = Fixture::start("refused") else {
        return;
    };
    let a = fx.replica().await;
    assert_eq!(AsyncStore::agent_id(&a), "main");
    assert_eq!(crate::store::Store::agent_id(&a), "main");
    for key in ["refused:main:stats", "refused:main:sessions"] {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg("not a hash")
            .query(&mut fx.raw())
            .unwrap();
    }
    for name in CALLS {
        let e = call(&a, name).await.expect_err(name).to_string();
        assert!(e.contains("WRONGTYPE"), "{name}: {e}");
    }
    assert_eq!((a.is_up(), a.outages()), (true, 0));
}

// Whichever call first meets a lost server, read or write, answers from
// the local view (and the store knows it is down), instead of failing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_that_meets_an_outage_answers_locally() {
    let Some(mut fx) = Fixture::start("first") else {
        return;
    };
    for name in CALLS {
        let a = fx.replica().await;
        a.load_run("s1").await.unwrap();
        fx.server.kill();
        call(&a, name)
            .await
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!((a.is_up(), a.outages()), (false, 1), "{name}");
        fx.server.restart();
    }
}

// An unreachable server at start is an error naming it, never its
// password, with the cause in words (README: "exit 2").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_server_is_named_without_its_password() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = temp_dir("missing");
    let url = format!("redis://:hunter2@127.0.0.1:{port}/0");
    let e = RedisStore::connect(&url, "x:", &dir, "main")
        .await
        .unwrap_err()
        .to_string();
    assert!(!e.contains("hunter2"), "{e}");
    assert!(
        e.contains(&format!("redis://:***@127.0.0.1:{port}/0")),
        "{e}"
    );
    assert!(e.to_lowercase().contains("refused"), "the cause: {e}");
    let _ = std::fs::remove_dir_all(&dir);
}

// A server that accepts the connection and never answers does not hang
// the start: it fails as timed out, after the connection's own timeout
// had its chance (a lower bound only: a loaded host can be slower).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mute_server_times_out_at_start() {
    let mute = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = mute.local_addr().unwrap().port();
    let dir = temp_dir("mute");
    let started = Instant::now();
    let e = RedisStore::connect(&format!("redis://127.0.0.1:{port}/0"), "x:", &dir, "main")
        .await
        .unwrap_err()
        .to_string();
    let took = started.elapsed();
    assert!(e.contains("timed out"), "{e}");
    assert!(
        took >= Duration::from_secs(2),
        "gave up after {took:?}: {e}"
    );
    drop(mute);
    let _ = std::fs::remove_dir_all(&dir);
}

// R11.5, R12.2 on Redis: the skip cache and the re-probe clock are per
// session (a key per session, hex-encoded), `/new` forgets one session's
// entries only, and `clear` (`state import --replace`) removes them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_2_shared_tables_are_per_session() {
    let Some(fx) = Fixture::start("tables") else {
        return;
    };
    let s = fx.replica().await;
    let now = now_ms();
    let until = now + 60_000;
    s.skip_put("s1", "openai", "gpt", "auth", until)
        .await
        .unwrap();
    s.skip_put("s:2", "openai", "gpt", "billing", until)
        .await
        .unwrap();
    let skip = |session: &'static str| s.skip_get(session, "openai", "gpt", now);
    assert_eq!(skip("s1").await.unwrap().as_deref(), Some("auth"));
    assert_eq!(skip("s:2").await.unwrap().as_deref(), Some("billing"));
    assert_eq!(skip("s3").await.unwrap(), None);
    let due = |session: &'static str| s.take_reprobe(session, "anthropic/claude", now, 60_000);
    assert!(due("s1").await.unwrap());
    assert!(
        !due("s1").await.unwrap(),
        "taken: not due again within the interval"
    );
    assert!(due("s:2").await.unwrap(), "another session's clock");

    s.forget_session("s1").await.unwrap();
    assert_eq!(skip("s1").await.unwrap(), None);
    assert!(due("s1").await.unwrap(), "forgotten: due again");
    assert_eq!(skip("s:2").await.unwrap().as_deref(), Some("billing"));

    s.clear().await.unwrap();
    assert_eq!(skip("s:2").await.unwrap(), None);
    assert!(due("s:2").await.unwrap(), "cleared");
}

// R12.2: a skip-cache entry may be due for up to 10 minutes; its key's
// TTL only collects garbage, so it must outlive that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r12_2_skip_entries_are_kept_longer_than_they_are_due() {
    let Some(fx) = Fixture::start("ttl") else {
        return;
    };
    let a = fx.replica().await;
    let now = now_ms();
    let until = now + 600_000;
    a.skip_put("s1", "openai", "gpt", "auth", until)
        .await
        .unwrap();
    // Due until its deadline, not at it (R12.2's TTL is the deadline).
    let skip = |at: u64| a.skip_get("s1", "openai", "gpt", at);
    assert_eq!(skip(until - 1).await.unwrap().as_deref(), Some("auth"));
    assert_eq!(skip(until).await.unwrap(), None);
    let mut c = fx.raw();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("ttl:main:skip:*")
        .query(&mut c)
        .unwrap();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let ttl: i64 = redis::cmd("PTTL").arg(&keys[0]).query(&mut c).unwrap();
    assert!(ttl > 600_000, "collected after {ttl} ms");
}

// An edit that changes only a provider's `lastGood` is written like any
// other (the compare-and-set covers both records of a profile edit).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edit_of_last_good_alone_is_written() {
    let Some(fx) = Fixture::start("good") else {
        return;
    };
    let a = fx.replica().await;
    edit_profile(&a, "openai:b", "openai", |st| {
        st.last_good.insert("openai".into(), "openai:b".into());
    })
    .await
    .unwrap();
    let c = fx.replica().await;
    let st = AsyncStore::load_state(&c).await.unwrap();
    assert_eq!(
        st.last_good.get("openai").map(String::as_str),
        Some("openai:b")
    );
    assert!(st.usage_stats.is_empty(), "{:?}", st.usage_stats);
}

// Issue 13's cost model: an update first compares against the records as
// this replica last saw them. A compare lost to another replica means
// this replica's picture of that hash is stale, so it stops trusting it:
// its next edit of another record there (one the other replica created)
// reads first — 2 round trips — instead of losing one more compare (3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_compare_drops_the_stale_picture_of_the_hash() {
    let Some(fx) = Fixture::start("forget") else {
        return;
    };
    let a = fx.replica().await;
    let b = fx.replica().await;
    let count = |id: &'static str, n: u32| {
        move |st: &mut crate::store::AuthState| {
            st.usage_stats.entry(id.into()).or_default().error_count = n;
        }
    };
    // A has read the whole state (every record, and which are absent).
    AsyncStore::load_state(&a).await.unwrap();
    edit_profile(&b, "openai:a", "openai", count("openai:a", 1))
        .await
        .unwrap();
    edit_profile(&b, "openai:b", "openai", count("openai:b", 1))
        .await
        .unwrap();
    // A's compare from memory fails on openai:a; it reads and writes.
    let before = a.round_trips();
    edit_profile(&a, "openai:a", "openai", count("openai:a", 2))
        .await
        .unwrap();
    assert_eq!(a.round_trips() - before, 3, "compare, read, compare");
    let before = a.round_trips();
    edit_profile(&a, "openai:b", "openai", count("openai:b", 2))
        .await
        .unwrap();
    assert_eq!(a.round_trips() - before, 2, "read, compare");
    let st = AsyncStore::load_state(&b).await.unwrap();
    assert_eq!(st.usage_stats["openai:a"].error_count, 2);
    assert_eq!(st.usage_stats["openai:b"].error_count, 2);
}

// A cancelled run's roll-back is written at once (no runtime to await)
// and exactly once: its compare-and-set applies the edit to the record
// as read, so an edit that counts counts one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_without_a_runtime_is_written_once() {
    let Some(fx) = Fixture::start("now") else {
        return;
    };
    let a = fx.replica().await;
    let count = || {
        Box::new(|e: &mut crate::store::SessionEntry| {
            e.compaction_count = Some(e.compaction_count.unwrap_or(0) + 1);
        })
    };
    a.update_session_now("s1", count()).unwrap();
    a.update_session_now("s1", count()).unwrap();
    // An edit that changes nothing writes nothing, and fails nothing.
    a.update_session_now("s1", Box::new(|_| {})).unwrap();
    let b = fx.replica().await;
    let e = AsyncStore::load_session(&b, "s1").await.unwrap().unwrap();
    assert_eq!(e.compaction_count, Some(2));
}

// R16.1 across replicas: one probe of a cooling provider per window,
// whichever replica asks; other providers have their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn r16_1_the_probe_throttle_is_shared_by_replicas() {
    let Some(fx) = Fixture::start("probe") else {
        return;
    };
    let a = fx.replica().await;
    let b = fx.replica().await;
    let t = now_ms();
    assert!(a.try_probe("openai", t, 30_000).await.unwrap());
    assert!(!b.try_probe("openai", t + 1_000, 30_000).await.unwrap());
    assert!(b.try_probe("anthropic", t + 1_000, 30_000).await.unwrap());
    assert!(b.try_probe("openai", t + 30_000, 30_000).await.unwrap());
}

// The secrets stay in files beside a Redis store; a damaged secrets file
// is reported (a problem the gateway logs and `status` shows), not fatal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_secrets_file_is_reported() {
    let Some(fx) = Fixture::start("problems") else {
        return;
    };
    let a = fx.replica().await;
    let file = fx.dir.join("agents/main/agent/auth-profiles.json");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    std::fs::write(&file, "{ not json").unwrap();
    let p = AsyncStore::load_profiles(&a).await.unwrap();
    assert!(p.profiles.is_empty());
    let problems = AsyncStore::take_problems(&a);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(format!("{problems:?}").contains("auth-profiles.json"));
    // The synchronous face reports what it read, too.
    std::fs::write(&file, "[1, 2").unwrap();
    crate::store::Store::load_profiles(&a).unwrap();
    assert_eq!(crate::store::Store::take_problems(&a).len(), 1);
}
