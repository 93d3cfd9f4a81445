//! One store test suite, run unchanged against every state backend
//! (issue 13): the in-memory store, the files (SPEC R5 layout), the
//! embedded SQLite database and Redis (a real `redis-server` on a free
//! loopback port), all through the async per-record face the executor
//! uses ([`AsyncStore`]) and the whole-document [`Store`].
//!
//! Each backend is a `Backend` value that opens a handle on a state
//! directory; a durable backend opened twice on one directory gives two
//! independent handles (two connections, as two processes or a restart
//! would have). `suite!` instantiates every test for every backend.

use std::path::PathBuf;
use std::sync::Arc;

use crate::auth::{block_for, record_failure, record_success, Block, CooldownPolicy, Failure};
use crate::compile::ReasonBehaviour;
use crate::store::MemoryStore;
use crate::store::{
    edit_profile, edit_session, AsyncStore, FileStore, RedisStore, SqliteStore, Store, StoreExt,
    SyncFace, HOUR_MS, MINUTE_MS,
};
use crate::Engine;
use serde_json::json;

const T0: u64 = 1_767_225_600_000;

use failover_testkit::RedisServer;

type Handle = (Arc<dyn Store>, Arc<dyn AsyncStore>);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    Files,
    Sqlite,
    Redis,
}

fn memory() -> Backend {
    Backend::Memory
}
fn files() -> Backend {
    Backend::Files
}
fn sqlite() -> Backend {
    Backend::Sqlite
}
fn redis() -> Backend {
    Backend::Redis
}

struct Env {
    backend: Backend,
    dir: PathBuf,
    mem: Arc<MemoryStore>,
    server: Option<RedisServer>,
}

impl Env {
    /// `None` when the backend cannot run here (no `redis-server`).
    fn new(backend: Backend) -> Option<Self> {
        static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "failover-backends-{}-{}-{n}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let server = match backend {
            Backend::Redis => Some(RedisServer::start()?),
            _ => None,
        };
        Some(Env {
            backend,
            dir,
            mem: Arc::new(MemoryStore::new("main")),
            server,
        })
    }

    fn durable(&self) -> bool {
        self.backend != Backend::Memory
    }

    /// A handle on the state: a new, independent one (own connection,
    /// own file handles) for every durable backend.
    async fn open(&self) -> Handle {
        match self.backend {
            Backend::Memory => (self.mem.clone(), Arc::new(SyncFace::new(self.mem.clone()))),
            Backend::Files => {
                let s = Arc::new(FileStore::open(&self.dir, "main").unwrap());
                (s.clone(), Arc::new(SyncFace::new(s)))
            }
            Backend::Sqlite => {
                let s = Arc::new(SqliteStore::open(&self.dir, "main").unwrap());
                (s.clone(), s)
            }
            Backend::Redis => {
                let url = self.server.as_ref().unwrap().url();
                let s = Arc::new(
                    RedisStore::connect(&url, "failover-test:", &self.dir, "main")
                        .await
                        .unwrap(),
                );
                (s.clone(), s)
            }
        }
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn behaviour(reason: &str) -> ReasonBehaviour {
    static ENGINE: std::sync::OnceLock<Engine> = std::sync::OnceLock::new();
    let rs = ENGINE.get_or_init(Engine::builtin).ruleset();
    let id = rs.reason_id(reason).unwrap();
    rs.reason(id).behaviour.clone()
}

async fn fail(store: &dyn AsyncStore, id: &str, reason: &str, now: u64) {
    let b = behaviour(reason);
    let f = Failure {
        reason,
        behaviour: &b,
        model: Some("gpt"),
        reset_at: None,
        probe: false,
        outranks: None,
    };
    let policy = CooldownPolicy::default();
    edit_profile(store, id, "openai", |s| {
        record_failure(s, id, "openai", &f, &policy, now)
    })
    .await
    .unwrap();
}

async fn block(store: &dyn AsyncStore, id: &str, now: u64) -> Option<Block> {
    let st = store.load_state().await.unwrap();
    st.usage_stats
        .get(id)
        .and_then(|s| block_for(s, Some("gpt"), now))
}

// A session's entry round-trips with every field another subsystem owns;
// other sessions are untouched; a second handle sees it.
async fn session_entries_round_trip(env: Env) {
    let (_, a) = env.open().await;
    edit_session(a.as_ref(), "agent:main:web:1", |e| {
        e.model_override = Some("gpt".into());
        e.model_override_source = Some("auto".into());
        e.extra
            .insert("deliveryContext".into(), json!({"channel": "web"}));
    })
    .await
    .unwrap();
    edit_session(a.as_ref(), "agent:main:web:2", |e| {
        e.provider_override = Some("anthropic".into())
    })
    .await
    .unwrap();
    let (sync_b, b) = env.open().await;
    let e = b.load_session("agent:main:web:1").await.unwrap().unwrap();
    assert_eq!(e.model_override.as_deref(), Some("gpt"));
    assert_eq!(e.extra["deliveryContext"], json!({"channel": "web"}));
    assert!(b.load_session("agent:main:web:3").await.unwrap().is_none());
    let all = sync_b.load_sessions().unwrap();
    assert_eq!(all.entries.len(), 2);
    assert_eq!(
        all.entries["agent:main:web:2"].provider_override.as_deref(),
        Some("anthropic")
    );
}

// A per-record update changes one profile's record and its provider's
// lastGood; whole-document fields (order, unknown fields) survive it.
async fn profile_updates_are_per_record(env: Env) {
    let (sync, a) = env.open().await;
    sync.update_state(|s| {
        s.order
            .insert("openai".into(), vec!["openai:a".into(), "openai:b".into()]);
        s.extra.insert("futureField".into(), json!({"x": 1}));
    })
    .unwrap();
    fail(a.as_ref(), "openai:a", "rate_limit", T0).await;
    edit_profile(a.as_ref(), "openai:b", "openai", |s| {
        record_success(s, "openai:b", "openai", Some("gpt"), T0)
    })
    .await
    .unwrap();
    let (_, b) = env.open().await;
    let st = b.load_state().await.unwrap();
    assert_eq!(st.usage_stats["openai:a"].error_count, 1);
    assert_eq!(
        st.usage_stats["openai:a"].cooldown_until,
        Some(T0 + MINUTE_MS)
    );
    assert_eq!(st.usage_stats["openai:b"].last_used, Some(T0));
    assert_eq!(st.last_good["openai"], "openai:b");
    assert_eq!(st.order["openai"], ["openai:a", "openai:b"]);
    assert_eq!(st.extra["futureField"], json!({"x": 1}));
}

// 8 writers (separate handles on a durable backend) × 250 updates each on
// one profile and one session: no update is lost.
async fn concurrent_updates_are_exact(env: Env) {
    let env = Arc::new(env);
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let env = env.clone();
        tasks.push(tokio::spawn(async move {
            let (_, s) = env.open().await;
            for _ in 0..250 {
                edit_profile(s.as_ref(), "openai:a", "openai", |st| {
                    let x = st.stats_mut("openai:a");
                    x.error_count += 1;
                })
                .await
                .unwrap();
                edit_session(s.as_ref(), "shared", |e| {
                    let n = e.extra.get("n").and_then(|v| v.as_u64()).unwrap_or(0);
                    e.extra.insert("n".into(), json!(n + 1));
                })
                .await
                .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let (_, s) = env.open().await;
    let st = s.load_state().await.unwrap();
    assert_eq!(st.usage_stats["openai:a"].error_count, 2000);
    let e = s.load_session("shared").await.unwrap().unwrap();
    assert_eq!(e.extra["n"], json!(2000));
}

// LiteLLM #40130 inverted: a later, shorter window never shortens a longer
// one; and a longer one (a billing disable) counts over a running cooldown.
async fn deadlines_are_never_shortened(env: Env) {
    let (_, a) = env.open().await;
    let (_, b) = env.open().await;
    fail(a.as_ref(), "openai:a", "rate_limit", T0).await; // 1 min
    fail(b.as_ref(), "openai:a", "billing", T0 + 1000).await; // hours
    let until = block(a.as_ref(), "openai:a", T0 + 2000)
        .await
        .unwrap()
        .until();
    assert!(until >= T0 + 5 * HOUR_MS, "{until}");
    // A later rate limit (a 1-minute window) leaves the disable as it was.
    fail(a.as_ref(), "openai:a", "rate_limit", T0 + 3000).await;
    let b2 = block(b.as_ref(), "openai:a", T0 + 4000).await.unwrap();
    assert!(matches!(b2, Block::Disabled { .. }), "{b2:?}");
    assert_eq!(b2.until(), until);
    // Still blocked after the cooldown alone would have ended.
    assert!(block(b.as_ref(), "openai:a", T0 + 10 * MINUTE_MS)
        .await
        .is_some());
}

// LiteLLM #35104: deadlines are absolute, so a restart (a new handle, the
// old one dropped) keeps the remaining cooldown time.
async fn restart_keeps_remaining_cooldown(env: Env) {
    if !env.durable() {
        return;
    }
    {
        let (_, a) = env.open().await;
        fail(a.as_ref(), "openai:a", "rate_limit", T0).await;
    }
    let (_, b) = env.open().await;
    let left = block(b.as_ref(), "openai:a", T0 + 20_000)
        .await
        .expect("still cooling after the restart");
    assert_eq!(
        left.until(),
        T0 + MINUTE_MS,
        "40 s remain, not a new minute"
    );
    assert!(block(b.as_ref(), "openai:a", T0 + MINUTE_MS)
        .await
        .is_none());
}

// The whole-document face (status, export, import) sees what the
// per-record face wrote, and a whole-document write is seen per record.
async fn whole_and_per_record_agree(env: Env) {
    let (sync, a) = env.open().await;
    edit_session(a.as_ref(), "s1", |e| e.model_override = Some("m".into()))
        .await
        .unwrap();
    sync.update_session("s2", |e| e.model_override = Some("n".into()))
        .unwrap();
    assert_eq!(
        a.load_session("s2")
            .await
            .unwrap()
            .unwrap()
            .model_override
            .as_deref(),
        Some("n")
    );
    let all = sync.load_sessions().unwrap();
    assert_eq!(all.entries["s1"].model_override.as_deref(), Some("m"));
    sync.update_sessions(|s| {
        s.entries.remove("s1");
    })
    .unwrap();
    assert!(a.load_session("s1").await.unwrap().is_none());
}

macro_rules! suite {
    ($($backend:ident),*) => {
        $(mod $backend {
            use super::*;
            fn env() -> Option<Env> {
                Env::new(super::$backend())
            }
            #[tokio::test]
            async fn session_entries_round_trip() {
                let Some(e) = env() else { return };
                super::session_entries_round_trip(e).await
            }
            #[tokio::test]
            async fn profile_updates_are_per_record() {
                let Some(e) = env() else { return };
                super::profile_updates_are_per_record(e).await
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn concurrent_updates_are_exact() {
                let Some(e) = env() else { return };
                super::concurrent_updates_are_exact(e).await
            }
            #[tokio::test]
            async fn deadlines_are_never_shortened() {
                let Some(e) = env() else { return };
                super::deadlines_are_never_shortened(e).await
            }
            #[tokio::test]
            async fn restart_keeps_remaining_cooldown() {
                let Some(e) = env() else { return };
                super::restart_keeps_remaining_cooldown(e).await
            }
            #[tokio::test]
            async fn whole_and_per_record_agree() {
                let Some(e) = env() else { return };
                super::whole_and_per_record_agree(e).await
            }
        })*
    };
}

suite!(memory, files, sqlite, redis);
