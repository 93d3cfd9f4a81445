//! Shared set-up for the runner's tests (`run_*`).
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::config::{Format, GatewayConfig};
use crate::run::{
    Attempt, AttemptError, ProviderFailure, RunRequest, Runner, TokioClock, TokioSleeper,
};
use crate::store::{
    AsyncStore, AuthProfiles, AuthState, FileStore, MemoryStore, Problem, Profile, ProfileEdit,
    RedisStore, SessionEdit, SessionEntry, SessionStore, SharedTables, SqliteStore, Store,
    StoreError, StoreExt, StoreFuture,
};
use crate::Engine;

use failover_testkit::RedisServer;

/// 2026-01-01T00:00:00Z.
pub(crate) const T0: u64 = 1_767_225_600_000;

pub(crate) fn config(yaml: &str) -> GatewayConfig {
    GatewayConfig::parse(yaml, Format::Yaml, "test.yaml")
        .unwrap_or_else(|e| panic!("{}", e.problems[0].message))
        .config
}

pub(crate) fn engine() -> Arc<Engine> {
    static ENGINE: std::sync::OnceLock<Arc<Engine>> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| Arc::new(Engine::builtin())).clone()
}

/// Profiles `(id, key)`; the provider is the id's prefix.
pub(crate) fn profiles(list: &[(&str, &str)]) -> AuthProfiles {
    let mut p = AuthProfiles::default();
    for (id, key) in list {
        let provider = id.split(':').next().unwrap();
        p.profiles
            .insert(id.to_string(), Profile::api_key(provider, key));
    }
    p
}

pub(crate) struct H {
    pub(crate) runner: Arc<Runner>,
    pub(crate) store: Arc<dyn Store>,
    /// The state directory of a durable backend, removed on drop.
    dir: Option<std::path::PathBuf>,
    /// The `redis` backend's server, stopped on drop (after the store).
    _redis: Option<RedisServer>,
}

impl Drop for H {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The state backend the runner tests run on: `FAILOVER_TEST_BACKEND` =
/// `memory` (the default), `files`, `sqlite` or `redis` (a real
/// `redis-server` per test, through [`RealTime`]). CI runs them on each, so
/// the executor's decisions are checked unchanged on every backend.
pub(crate) fn backend() -> String {
    std::env::var("FAILOVER_TEST_BACKEND").unwrap_or_else(|_| "memory".into())
}

/// A fresh, empty state directory for a test.
pub(crate) fn temp_state() -> std::path::PathBuf {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!("failover-run-{}-{nanos}-{n}", std::process::id()))
}

/// A runner on tokio's (paused) clock starting at [`T0`], on the backend
/// [`backend`] names.
pub(crate) fn setup(yaml: &str, list: &[(&str, &str)]) -> H {
    setup_with(yaml, list, |r| r)
}

/// [`setup`], the runner built further by `f` (retry budgets, windows).
pub(crate) fn setup_with(yaml: &str, list: &[(&str, &str)], f: impl FnOnce(Runner) -> Runner) -> H {
    setup_on(engine(), yaml, list, f)
}

/// [`setup_with`] on another engine (an operator layer, a model with
/// another confidence).
pub(crate) fn setup_on(
    engine: Arc<Engine>,
    yaml: &str,
    list: &[(&str, &str)],
    f: impl FnOnce(Runner) -> Runner,
) -> H {
    let cfg = Arc::new(config(yaml));
    let dir = temp_state();
    let mut redis = None;
    let (store, runner): (Arc<dyn Store>, Runner) = match backend().as_str() {
        "redis" => {
            let server = RedisServer::start()
                .expect("FAILOVER_TEST_BACKEND=redis needs redis-server installed");
            let s = Arc::new(RealTime::connect(&server.url(), &dir));
            redis = Some(server);
            s.update_profiles(|p| *p = profiles(list)).unwrap();
            (s.clone(), Runner::with_store(engine, cfg, s).unwrap())
        }
        "sqlite" => {
            let s = Arc::new(SqliteStore::open(&dir, "main").unwrap());
            s.update_profiles(|p| *p = profiles(list)).unwrap();
            (s.clone(), Runner::with_store(engine, cfg, s).unwrap())
        }
        "files" => {
            let s = Arc::new(FileStore::open(&dir, "main").unwrap());
            s.update_profiles(|p| *p = profiles(list)).unwrap();
            (s.clone(), Runner::new(engine, cfg, s).unwrap())
        }
        _ => {
            let s = Arc::new(MemoryStore::new("main").with_profiles(profiles(list)));
            (s.clone(), Runner::new(engine, cfg, s).unwrap())
        }
    };
    let runner = f(runner
        .with_clock(Arc::new(TokioClock::starting_at(T0)))
        .with_sleeper(Arc::new(TokioSleeper)));
    H {
        runner: Arc::new(runner),
        store,
        dir: Some(dir),
        _redis: redis,
    }
}

/// A [`RedisStore`] whose I/O runs on a runtime of its own, on real time,
/// while the test's runtime stays on paused, virtual time.
///
/// On a paused clock tokio jumps to the next timer whenever every task
/// waits, and a task waiting on a socket counts as waiting: awaiting a
/// Redis reply there fires the client's response timeout at once (and
/// moves the test's virtual time). So each call here is driven to its end
/// on the store's runtime, in a scoped thread, and the test's task blocks
/// until it is: the test's runtime never sees the wait, its virtual clock
/// moves only where the executor sleeps, and the runner's decisions are
/// the same as on every other backend. Only the calls' timing differs,
/// which no executor test observes.
pub(crate) struct RealTime {
    inner: Option<RedisStore>,
    rt: Option<tokio::runtime::Runtime>,
}

/// Drives `f` to its end on `rt`, blocking the calling thread (which may
/// be inside another runtime: the scoped thread is not).
fn drive<T: Send>(
    rt: &tokio::runtime::Runtime,
    f: impl std::future::Future<Output = T> + Send,
) -> T {
    let handle = rt.handle();
    std::thread::scope(|s| s.spawn(|| handle.block_on(f)).join().unwrap())
}

impl RealTime {
    fn connect(url: &str, dir: &std::path::Path) -> Self {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let store = drive(&rt, RedisStore::connect(url, "test:", dir, "main"))
            .expect("connect to the test's redis-server");
        RealTime {
            inner: Some(store),
            rt: Some(rt),
        }
    }

    fn inner(&self) -> &RedisStore {
        self.inner.as_ref().expect("store is open")
    }

    /// Drives `f` to its end on the store's runtime, blocking this thread.
    fn wait<T: Send>(&self, f: impl std::future::Future<Output = T> + Send) -> T {
        drive(self.rt.as_ref().expect("runtime is up"), f)
    }

    fn ready<'a, T: Send + 'a>(r: Result<T, StoreError>) -> StoreFuture<'a, T> {
        Box::pin(std::future::ready(r))
    }
}

impl Drop for RealTime {
    fn drop(&mut self) {
        // The connection's tasks live on `rt`: drop the store first, then
        // stop the runtime without blocking (this may run inside the
        // test's runtime, where a blocking shutdown is not allowed).
        drop(self.inner.take());
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

impl AsyncStore for RealTime {
    fn agent_id(&self) -> &str {
        AsyncStore::agent_id(self.inner())
    }

    fn load_profiles(&self) -> StoreFuture<'_, AuthProfiles> {
        Self::ready(self.wait(AsyncStore::load_profiles(self.inner())))
    }

    fn load_state(&self) -> StoreFuture<'_, AuthState> {
        Self::ready(self.wait(AsyncStore::load_state(self.inner())))
    }

    fn load_session<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<SessionEntry>> {
        Self::ready(self.wait(AsyncStore::load_session(self.inner(), key)))
    }

    fn update_profile<'a>(
        &'a self,
        profile_id: &'a str,
        provider: &'a str,
        f: ProfileEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        Self::ready(self.wait(self.inner().update_profile(profile_id, provider, f)))
    }

    fn update_session<'a>(&'a self, key: &'a str, f: SessionEdit<'a>) -> StoreFuture<'a, ()> {
        Self::ready(self.wait(AsyncStore::update_session(self.inner(), key, f)))
    }

    fn load_run<'a>(&'a self, key: &'a str) -> StoreFuture<'a, (Option<SessionEntry>, AuthState)> {
        Self::ready(self.wait(self.inner().load_run(key)))
    }

    fn update_success<'a>(
        &'a self,
        profile: Option<(&'a str, &'a str, ProfileEdit<'a>)>,
        key: &'a str,
        f: SessionEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        Self::ready(self.wait(self.inner().update_success(profile, key, f)))
    }

    fn update_session_now(
        &self,
        key: &str,
        f: Box<dyn FnMut(&mut SessionEntry) + Send + 'static>,
    ) -> Result<(), StoreError> {
        self.inner().update_session_now(key, f)
    }

    fn take_problems(&self) -> Vec<Problem> {
        AsyncStore::take_problems(self.inner())
    }

    fn shared_tables(&self) -> Option<&dyn SharedTables> {
        // Through this bridge, so the tables' I/O stays off the paused clock.
        self.inner()
            .shared_tables()
            .map(|_| self as &dyn SharedTables)
    }

    fn health(&self) -> Option<(bool, u64)> {
        self.inner().health()
    }
}

impl SharedTables for RealTime {
    fn try_probe<'a>(
        &'a self,
        provider: &'a str,
        now: u64,
        window_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Self::ready(self.wait(SharedTables::try_probe(
            self.inner(),
            provider,
            now,
            window_ms,
        )))
    }

    fn take_reprobe<'a>(
        &'a self,
        session: &'a str,
        primary: &'a str,
        now: u64,
        interval_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Self::ready(self.wait(SharedTables::take_reprobe(
            self.inner(),
            session,
            primary,
            now,
            interval_ms,
        )))
    }

    fn note_reprobe<'a>(
        &'a self,
        session: &'a str,
        primary: &'a str,
        now: u64,
    ) -> StoreFuture<'a, ()> {
        Self::ready(self.wait(SharedTables::note_reprobe(
            self.inner(),
            session,
            primary,
            now,
        )))
    }

    fn skip_get<'a>(
        &'a self,
        session: &'a str,
        provider: &'a str,
        model: &'a str,
        now: u64,
    ) -> StoreFuture<'a, Option<String>> {
        Self::ready(self.wait(SharedTables::skip_get(
            self.inner(),
            session,
            provider,
            model,
            now,
        )))
    }

    fn skip_put<'a>(
        &'a self,
        session: &'a str,
        provider: &'a str,
        model: &'a str,
        reason: &'a str,
        until: u64,
    ) -> StoreFuture<'a, ()> {
        Self::ready(self.wait(SharedTables::skip_put(
            self.inner(),
            session,
            provider,
            model,
            reason,
            until,
        )))
    }

    fn forget_session<'a>(&'a self, session: &'a str) -> StoreFuture<'a, ()> {
        Self::ready(self.wait(SharedTables::forget_session(self.inner(), session)))
    }
}

/// The whole-document calls (`status`, the tests' reads) use the store's
/// own blocking connection, which needs no runtime.
impl Store for RealTime {
    fn agent_id(&self) -> &str {
        Store::agent_id(self.inner())
    }
    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        Store::load_profiles(self.inner())
    }
    fn load_state(&self) -> Result<AuthState, StoreError> {
        Store::load_state(self.inner())
    }
    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        self.inner().load_sessions()
    }
    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        self.inner().update_profiles_dyn(f)
    }
    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        self.inner().update_state_dyn(f)
    }
    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        self.inner().update_sessions_dyn(f)
    }
    fn take_problems(&self) -> Vec<Problem> {
        Store::take_problems(self.inner())
    }
    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        Store::load_session(self.inner(), key)
    }
}

impl H {
    pub(crate) fn entry(&self, key: &str) -> SessionEntry {
        self.store
            .load_sessions()
            .unwrap()
            .entries
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    pub(crate) fn stats(&self, id: &str) -> crate::store::UsageStats {
        self.store
            .load_state()
            .unwrap()
            .usage_stats
            .get(id)
            .cloned()
            .unwrap_or_default()
    }
}

/// A scripted provider: outcomes per `provider/model` (or
/// `provider/model@profile`), consumed in order; the last one repeats.
/// Unscripted calls succeed. Every call is logged.
pub(crate) type Outcome = Result<(), AttemptError>;

#[derive(Clone, Default)]
pub(crate) struct Script {
    outcomes: Arc<Mutex<HashMap<String, Vec<Outcome>>>>,
    pub(crate) calls: Arc<Mutex<Vec<String>>>,
}

pub(crate) fn http(status: u16, message: &str) -> Result<(), AttemptError> {
    Err(AttemptError::Provider(
        ProviderFailure::message(message).with_status(status),
    ))
}

pub(crate) fn msg(message: &str) -> Result<(), AttemptError> {
    Err(AttemptError::Provider(ProviderFailure::message(message)))
}

pub(crate) fn ok() -> Result<(), AttemptError> {
    Ok(())
}

impl Script {
    pub(crate) fn on(self, target: &str, outcomes: Vec<Result<(), AttemptError>>) -> Self {
        self.outcomes
            .lock()
            .unwrap()
            .insert(target.to_string(), outcomes);
        self
    }

    pub(crate) fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    pub(crate) fn clear_calls(&self) {
        self.calls.lock().unwrap().clear();
    }

    pub(crate) fn answer(&self, a: &Attempt) -> Result<String, AttemptError> {
        let m = format!("{}/{}", a.provider, a.model);
        let with_profile = format!("{m}@{}", a.profile_id.as_deref().unwrap_or("-"));
        self.calls.lock().unwrap().push(with_profile.clone());
        let mut map = self.outcomes.lock().unwrap();
        let key = if map.contains_key(&with_profile) {
            with_profile
        } else {
            m.clone()
        };
        let r = match map.get_mut(&key) {
            Some(l) if l.len() > 1 => l.remove(0),
            Some(l) if l.len() == 1 => l[0].clone(),
            _ => Ok(()),
        };
        r.map(|()| format!("reply from {m}"))
    }

    /// The attempt function for `Runner::run`.
    pub(crate) fn f(
        &self,
    ) -> impl FnMut(Attempt) -> std::future::Ready<Result<String, AttemptError>> + '_ {
        move |a| std::future::ready(self.answer(&a))
    }
}

/// A primary and one fallback.
pub(crate) const BASIC: &str = "
agents:
  defaults:
    model:
      primary: anthropic/claude
      fallbacks: [openai/gpt]
";

/// A primary and two fallbacks.
pub(crate) const THREE: &str = "
agents:
  defaults:
    model:
      primary: anthropic/claude
      fallbacks: [openai/gpt, google/gemini]
";

/// One API key per provider of `THREE` (fake secrets).
pub(crate) const KEYS: &[(&str, &str)] = &[
    ("anthropic:default", "sk-ant-SECRET-0001"),
    ("openai:default", "sk-oai-SECRET-0002"),
    ("google:default", "gk-SECRET-0003"),
];

/// A request of session `s1`.
pub(crate) fn req() -> RunRequest {
    RunRequest::session("s1")
}
