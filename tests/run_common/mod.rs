//! Shared set-up for the runner's integration tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use failover::config::{Format, GatewayConfig};
use failover::run::{
    Attempt, AttemptError, MemoryStore, ProviderFailure, RunRequest, Runner, TokioClock,
    TokioSleeper,
};
use failover::store::{
    AuthProfiles, FileStore, Profile, SessionEntry, SqliteStore, Store, StoreExt,
};
use failover::Engine;

/// 2026-01-01T00:00:00Z.
pub const T0: u64 = 1_767_225_600_000;

pub fn config(yaml: &str) -> GatewayConfig {
    GatewayConfig::parse(yaml, Format::Yaml, "test.yaml")
        .unwrap_or_else(|e| panic!("{}", e.problems[0].message))
        .config
}

pub fn engine() -> Arc<Engine> {
    static ENGINE: std::sync::OnceLock<Arc<Engine>> = std::sync::OnceLock::new();
    ENGINE.get_or_init(|| Arc::new(Engine::builtin())).clone()
}

/// Profiles `(id, key)`; the provider is the id's prefix.
pub fn profiles(list: &[(&str, &str)]) -> AuthProfiles {
    let mut p = AuthProfiles::default();
    for (id, key) in list {
        let provider = id.split(':').next().unwrap();
        p.profiles
            .insert(id.to_string(), Profile::api_key(provider, key));
    }
    p
}

pub struct H {
    pub runner: Arc<Runner>,
    pub store: Arc<dyn Store>,
    /// The state directory of a durable backend, removed on drop.
    dir: Option<std::path::PathBuf>,
}

impl Drop for H {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The state backend the runner tests run on: `FAILOVER_TEST_BACKEND` =
/// `memory` (the default), `files` or `sqlite`. CI runs them on each, so
/// the executor's decisions are checked unchanged on every backend.
pub fn backend() -> String {
    std::env::var("FAILOVER_TEST_BACKEND").unwrap_or_else(|_| "memory".into())
}

/// A fresh, empty state directory for a test.
pub fn temp_state() -> std::path::PathBuf {
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
pub fn setup(yaml: &str, list: &[(&str, &str)]) -> H {
    let cfg = Arc::new(config(yaml));
    let dir = temp_state();
    let (store, runner): (Arc<dyn Store>, Runner) = match backend().as_str() {
        "sqlite" => {
            let s = Arc::new(SqliteStore::open(&dir, "main").unwrap());
            s.update_profiles(|p| *p = profiles(list)).unwrap();
            (s.clone(), Runner::with_store(engine(), cfg, s).unwrap())
        }
        "files" => {
            let s = Arc::new(FileStore::open(&dir, "main").unwrap());
            s.update_profiles(|p| *p = profiles(list)).unwrap();
            (s.clone(), Runner::new(engine(), cfg, s).unwrap())
        }
        _ => {
            let s = Arc::new(MemoryStore::new("main").with_profiles(profiles(list)));
            (s.clone(), Runner::new(engine(), cfg, s).unwrap())
        }
    };
    let runner = runner
        .with_clock(Arc::new(TokioClock::starting_at(T0)))
        .with_sleeper(Arc::new(TokioSleeper));
    H {
        runner: Arc::new(runner),
        store,
        dir: Some(dir),
    }
}

impl H {
    pub fn entry(&self, key: &str) -> SessionEntry {
        self.store
            .load_sessions()
            .unwrap()
            .entries
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    pub fn stats(&self, id: &str) -> failover::store::UsageStats {
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
pub type Outcome = Result<(), AttemptError>;

#[derive(Clone, Default)]
pub struct Script {
    outcomes: Arc<Mutex<HashMap<String, Vec<Outcome>>>>,
    pub calls: Arc<Mutex<Vec<String>>>,
}

pub fn http(status: u16, message: &str) -> Result<(), AttemptError> {
    Err(AttemptError::Provider(
        ProviderFailure::message(message).with_status(status),
    ))
}

pub fn msg(message: &str) -> Result<(), AttemptError> {
    Err(AttemptError::Provider(ProviderFailure::message(message)))
}

pub fn ok() -> Result<(), AttemptError> {
    Ok(())
}

impl Script {
    pub fn on(self, target: &str, outcomes: Vec<Result<(), AttemptError>>) -> Self {
        self.outcomes
            .lock()
            .unwrap()
            .insert(target.to_string(), outcomes);
        self
    }

    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }

    pub fn clear_calls(&self) {
        self.calls.lock().unwrap().clear();
    }

    pub fn answer(&self, a: &Attempt) -> Result<String, AttemptError> {
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
    pub fn f(
        &self,
    ) -> impl FnMut(Attempt) -> std::future::Ready<Result<String, AttemptError>> + '_ {
        move |a| std::future::ready(self.answer(&a))
    }
}

/// A primary and one fallback.
pub const BASIC: &str = "
agents:
  defaults:
    model:
      primary: anthropic/claude
      fallbacks: [openai/gpt]
";

/// A primary and two fallbacks.
pub const THREE: &str = "
agents:
  defaults:
    model:
      primary: anthropic/claude
      fallbacks: [openai/gpt, google/gemini]
";

/// One API key per provider of `THREE` (fake secrets).
pub const KEYS: &[(&str, &str)] = &[
    ("anthropic:default", "sk-ant-SECRET-0001"),
    ("openai:default", "sk-oai-SECRET-0002"),
    ("google:default", "gk-SECRET-0003"),
];

/// A request of session `s1`.
pub fn req() -> RunRequest {
    RunRequest::session("s1")
}
