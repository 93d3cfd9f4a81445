//! Choosing and opening a state backend from the config's `state:` block
//! (issue 13; docs/gateway.md "State backends").
//!
//! | `state.backend` | where the routing state and sessions live |
//! |---|---|
//! | (no block), `sqlite` | `<state>/agents/<id>/agent/state.sqlite` |
//! | `files` | `auth-state.json`, `sessions.json` (SPEC R5 layout) |
//! | `redis` | the server at `state.url`, keys under `state.prefix` |
//!
//! Secrets stay in `<state>/agents/<id>/agent/auth-profiles.json` with
//! every backend. [`open`] is for the gateway (async face and whole
//! documents); [`open_docs`] is for read-only tools (`status`), which must
//! not create a database: with no `state:` block, or `sqlite`, they read
//! the database when it exists and the files otherwise (what a new
//! database would import).

use std::path::Path;
use std::sync::Arc;

use super::face::{AsyncStore, SyncFace};
use super::file::FileStore;
#[cfg(feature = "redis")]
use super::redis_store::{RedisStore, DEFAULT_PREFIX};
#[cfg(feature = "sqlite")]
use super::sqlite::{sqlite_path, SqliteStore};
use super::{Store, StoreError};

/// A state backend (`state.backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateBackend {
    /// The embedded SQLite database under `--state DIR` (the default).
    Sqlite,
    /// Redis at `state.url`, keys under `state.prefix`.
    Redis,
    /// The JSON files of the original layout (SPEC R5).
    Files,
}

impl StateBackend {
    /// Every backend's name, the default first.
    pub const NAMES: [&'static str; 3] = ["sqlite", "redis", "files"];

    /// The backend of a name (`sqlite`, `redis`, `files`).
    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sqlite" => Some(StateBackend::Sqlite),
            "redis" => Some(StateBackend::Redis),
            "files" => Some(StateBackend::Files),
            _ => None,
        }
    }

    /// The backend's name in the config.
    pub fn name(self) -> &'static str {
        match self {
            StateBackend::Sqlite => "sqlite",
            StateBackend::Redis => "redis",
            StateBackend::Files => "files",
        }
    }
}

/// `state: { backend: redis, url: "redis://127.0.0.1:6379/0", prefix: "failover:" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct StateConfig {
    /// Which backend.
    pub backend: StateBackend,
    /// Redis only: the server (`redis://[user:password@]host:port/db`).
    pub url: Option<String>,
    /// Redis only: the key prefix (default `failover:`).
    pub prefix: Option<String>,
}

impl StateConfig {
    /// `state: { backend: … }` with no URL or prefix.
    pub fn new(backend: StateBackend) -> Self {
        StateConfig {
            backend,
            url: None,
            prefix: None,
        }
    }
}

/// One agent's state, both faces of one backend.
#[derive(Clone)]
pub struct Opened {
    /// The async, per-record face the runner uses.
    pub face: Arc<dyn AsyncStore>,
    /// The same state as whole documents ([`Store`]).
    pub docs: Arc<dyn Store>,
    /// The backend opened.
    pub backend: StateBackend,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened")
            .field("backend", &self.backend)
            .finish_non_exhaustive()
    }
}

/// The backend a config names (`None`: the embedded database).
pub fn backend_of(cfg: Option<&StateConfig>) -> StateBackend {
    cfg.map_or(StateBackend::Sqlite, |c| c.backend)
}

/// Opens `agent`'s state for serving. A Redis server that does not answer
/// is an error naming it (never its password).
pub async fn open(
    cfg: Option<&StateConfig>,
    root: &Path,
    agent: &str,
) -> Result<Opened, StoreError> {
    let backend = backend_of(cfg);
    Ok(match backend {
        StateBackend::Files => {
            let f = Arc::new(FileStore::open(root, agent)?);
            Opened {
                face: Arc::new(SyncFace::blocking(f.clone())),
                docs: f,
                backend,
            }
        }
        #[cfg(not(feature = "sqlite"))]
        StateBackend::Sqlite => return Err(StoreError::NotBuilt("sqlite")),
        #[cfg(feature = "sqlite")]
        StateBackend::Sqlite => {
            let s = Arc::new(SqliteStore::open(root, agent)?);
            Opened {
                face: s.clone(),
                docs: s,
                backend,
            }
        }
        #[cfg(not(feature = "redis"))]
        StateBackend::Redis => return Err(StoreError::NotBuilt("redis")),
        #[cfg(feature = "redis")]
        StateBackend::Redis => {
            let c = cfg.expect("redis comes from a state block");
            let url = c.url.as_deref().unwrap_or("redis://127.0.0.1:6379/0");
            let prefix = c.prefix.as_deref().unwrap_or(DEFAULT_PREFIX);
            let r = Arc::new(RedisStore::connect(url, prefix, root, agent).await?);
            Opened {
                face: r.clone(),
                docs: r,
                backend,
            }
        }
    })
}

/// [`open_docs`] for a reader that writes nothing (`failover status`):
/// the embedded database is opened read-only, as an immutable snapshot
/// where the directory cannot be written (then the `bool` is `true`).
pub fn open_docs_read_only(
    cfg: Option<&StateConfig>,
    root: &Path,
    agent: &str,
) -> Result<(Arc<dyn Store>, StateBackend, bool), StoreError> {
    #[cfg(feature = "sqlite")]
    if backend_of(cfg) == StateBackend::Sqlite && sqlite_path(root, agent).exists() {
        let (store, snapshot) = SqliteStore::open_read_only(root, agent)?;
        return Ok((Arc::new(store), StateBackend::Sqlite, snapshot));
    }
    let (store, backend) = open_docs(cfg, root, agent)?;
    Ok((store, backend, false))
}

/// Opens `agent`'s state as whole documents for a read-only tool, without
/// creating anything (see the module documentation). Returns the store and
/// the backend actually read: `files` when the database does not exist yet
/// (or SQLite is not built in). Redis is reached on a small runtime of its
/// own.
pub fn open_docs(
    cfg: Option<&StateConfig>,
    root: &Path,
    agent: &str,
) -> Result<(Arc<dyn Store>, StateBackend), StoreError> {
    match backend_of(cfg) {
        StateBackend::Files => Ok((Arc::new(FileStore::open(root, agent)?), StateBackend::Files)),
        #[cfg(not(feature = "sqlite"))]
        StateBackend::Sqlite => Ok((Arc::new(FileStore::open(root, agent)?), StateBackend::Files)),
        #[cfg(feature = "sqlite")]
        StateBackend::Sqlite => {
            if sqlite_path(root, agent).exists() {
                Ok((
                    Arc::new(SqliteStore::open(root, agent)?),
                    StateBackend::Sqlite,
                ))
            } else {
                Ok((Arc::new(FileStore::open(root, agent)?), StateBackend::Files))
            }
        }
        StateBackend::Redis => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| StoreError::io("start a runtime for", root, &e))?;
            let opened = rt.block_on(open(cfg, root, agent))?;
            // The connection manager's task lives on `rt`; the whole-document
            // calls use their own plain connection, so `rt` may go.
            drop(rt);
            Ok((opened.docs, StateBackend::Redis))
        }
    }
}
