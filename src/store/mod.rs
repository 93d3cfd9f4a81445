//! Durable state: secrets, routing state and session overrides (SPEC R5,
//! R11.1; DESIGN "State").
//!
//! Three documents per agent, laid out as the original system lays them:
//!
//! ```text
//! <state>/agents/<agentId>/agent/auth-profiles.json   secrets (0600)      profiles.rs
//! <state>/agents/<agentId>/agent/auth-state.json      routing state       state.rs
//! <state>/agents/<agentId>/sessions/sessions.json     session overrides   sessions.rs
//! <state>/agent/auth-profiles.json                    legacy secrets (agent `main`, read only)
//! <state>/credentials/oauth.json                      legacy OAuth logins (imported, R5.4)
//! ```
//!
//! Everything goes through the [`Store`] trait so a shared backend (Redis,
//! a database) can replace the files without touching the executor. A store
//! offers whole-document loads and read-modify-write updates: the caller
//! passes a closure that edits the document, and the store makes the edit
//! atomic with respect to every other writer. [`FileStore`] does that with
//! an advisory lock on a sidecar `.lock` file and crash-safe replacement
//! (temporary file, `fsync`, rename, directory `fsync`; see `atomic.rs`).
//!
//! Damage is reported, never fatal. A file that is not JSON (truncated by a
//! full disk, edited by hand) is reported as a [`Problem`] with its path;
//! reads carry on as if it were empty, and the next update under the lock
//! moves it aside to `<file>.corrupt-<ms>` before writing — so a damaged
//! secrets file is never silently overwritten. A single bad entry (an
//! unknown credential type, a malformed `usageStats` record) is reported
//! and left out of routing while the rest of the file is used, and the
//! next write puts it back as it was. Problems collect in the store until
//! [`Store::take_problems`] drains them.
//!
//! Worked example:
//!
//! ```
//! use failover::state::{FileStore, Store, StoreExt};
//! let dir = std::env::temp_dir().join(format!("failover-doc-{}", std::process::id()));
//! let store = FileStore::open(&dir, "main").unwrap();
//! let n = store
//!     .update_state(|s| {
//!         let st = s.stats_mut("openai:default");
//!         st.error_count += 1;
//!         st.error_count
//!     })
//!     .unwrap();
//! assert_eq!(n, 1);
//! assert_eq!(store.load_state().unwrap().usage_stats["openai:default"].error_count, 1);
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

mod atomic;
mod backend;
mod clock;
pub use clock::civil_from_days;
mod face;
mod file;
mod json;
mod keys;
mod memory;
mod profiles;
#[cfg(feature = "redis")]
mod redis_store;
mod secret;
mod sessions;
#[cfg(feature = "sqlite")]
mod sqlite;
mod state;
mod watch;

use std::fmt;
use std::path::PathBuf;

/// A fresh path under the system's temporary directory for one test
/// (`failover-<kind>-<name>-<pid>-<ns>`), not created.
#[cfg(test)]
pub(crate) fn test_dir(kind: &str, name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "failover-{kind}-{name}-{}-{nanos}",
        std::process::id()
    ))
}

pub(crate) use atomic::create_private_dir;
#[cfg(test)]
pub(crate) use atomic::{FaultAction, FaultPlan, WriteFault};
pub use backend::{
    backend_of, open as open_backend, open_docs, open_docs_read_only, Opened, StateBackend,
    StateConfig,
};
pub use clock::{
    format_span, format_utc, Clock, ManualClock, SystemClock, DAY_MS, HOUR_MS, MINUTE_MS, SECOND_MS,
};
pub use face::{
    edit_profile, edit_session, off_runtime, AsyncStore, ProfileEdit, SessionEdit, SharedTables,
    StoreFuture, SyncFace,
};
pub use file::{FileStore, StatePaths, DEFAULT_AGENT};
pub use keys::{glob, open_keys, ClientKey, KeyRefusal, KeyStore, KeyTable, KeyUsage, Recent};
pub use memory::MemoryStore;
pub(crate) use profiles::Unusable;
pub use profiles::{
    normalize_provider, provider_of_id, AuthProfiles, Credential, CredentialKind, Extra, Profile,
    SecretRef,
};
#[cfg(feature = "redis")]
pub use redis_store::RedisStore;
#[cfg(feature = "redis")]
pub(crate) use redis_store::DEFAULT_PREFIX as REDIS_DEFAULT_PREFIX;
pub use secret::Secret;
pub(crate) use sessions::OverrideFields;
pub(crate) use sessions::OverrideSource;
pub use sessions::{SessionEntry, SessionStore};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
pub use state::{AuthState, ModelCooldown, ModelWindow, UsageStats};

use crate::fsio::display_name;

/// A failure to read or write the state (the disk, permissions). Damaged
/// contents are [`Problem`]s instead.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The disk (or the server) refused an operation.
    #[error("cannot {op} `{path}`: {detail}")]
    Io {
        /// What was being done (`read`, `write`, `lock`, …).
        op: &'static str,
        /// The file or server, as shown to operators (no password).
        path: String,
        /// The cause, in words.
        detail: String,
    },
    /// An agent id that cannot name a directory.
    #[error("invalid agent id `{0}`: use letters, digits, `-`, `_` or `.`")]
    InvalidAgentId(String),
    /// The config names a backend this build leaves out.
    #[error("state backend `{0}` is not in this build (enable the `{0}` feature of failover)")]
    NotBuilt(&'static str),
}

impl StoreError {
    pub(crate) fn io(op: &'static str, path: &std::path::Path, e: &std::io::Error) -> Self {
        StoreError::Io {
            op,
            path: display_name(path),
            detail: crate::fsio::plain_io(e),
        }
    }
}

/// Damage found in a state file. The store keeps working around it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The file is not JSON, or not the document it should be.
    Corrupt {
        /// The damaged file.
        path: PathBuf,
        /// What is wrong with it.
        detail: String,
        /// Where it was moved aside, once an update did so.
        moved_to: Option<PathBuf>,
    },
    /// One entry of an otherwise good file was skipped.
    InvalidEntry {
        /// The file holding the entry.
        path: PathBuf,
        /// `profile`, `session`, `usage stats of`, `field`, …
        what: &'static str,
        /// The entry's key (profile id, session key).
        key: String,
        /// What is wrong with it.
        detail: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Corrupt {
                path,
                detail,
                moved_to: None,
            } => write!(
                f,
                "`{}` is corrupt ({detail}); ignoring it until the next write moves it aside",
                display_name(path)
            ),
            Problem::Corrupt {
                path,
                detail,
                moved_to: Some(to),
            } => write!(
                f,
                "`{}` was corrupt ({detail}); moved it aside to `{}`",
                display_name(path),
                display_name(to)
            ),
            Problem::InvalidEntry {
                path,
                what,
                key,
                detail,
            } => write!(
                f,
                "`{}`: {what} `{key}` ignored: {detail}",
                display_name(path)
            ),
        }
    }
}

/// Durable state of one agent. See the module documentation.
///
/// Update closures may run more than once (a backend with optimistic
/// concurrency retries on conflict), so they must only edit the document
/// they are given.
pub trait Store: Send + Sync {
    /// The agent whose state this is.
    fn agent_id(&self) -> &str;
    /// The auth profiles (`auth-profiles.json`), secrets included.
    fn load_profiles(&self) -> Result<AuthProfiles, StoreError>;
    /// The routing state: usage stats, cooldowns, disables, `order`, `lastGood`.
    fn load_state(&self) -> Result<AuthState, StoreError>;
    /// Every session's entry.
    fn load_sessions(&self) -> Result<SessionStore, StoreError>;
    /// Read-modify-write of the profiles, atomically (see [`StoreExt`] for the typed form).
    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError>;
    /// Read-modify-write of the routing state, atomically.
    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError>;
    /// Read-modify-write of the sessions, atomically.
    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError>;
    /// Problems found since the last call (each reported once).
    fn take_problems(&self) -> Vec<Problem>;
    /// One session's entry. The default reads the whole document; a
    /// backend that can read one entry cheaply should (the runner reads
    /// the entry at the start of every run).
    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        Ok(self.load_sessions()?.entries.remove(key))
    }
}

/// Closure-returning forms of the [`Store`] updates.
pub trait StoreExt: Store {
    /// [`Store::update_profiles_dyn`] returning the closure's value.
    fn update_profiles<R>(
        &self,
        mut f: impl FnMut(&mut AuthProfiles) -> R,
    ) -> Result<R, StoreError> {
        let mut out = None;
        self.update_profiles_dyn(&mut |d| out = Some(f(d)))?;
        Ok(out.expect("update ran the closure"))
    }

    /// [`Store::update_state_dyn`] returning the closure's value.
    fn update_state<R>(&self, mut f: impl FnMut(&mut AuthState) -> R) -> Result<R, StoreError> {
        let mut out = None;
        self.update_state_dyn(&mut |d| out = Some(f(d)))?;
        Ok(out.expect("update ran the closure"))
    }

    /// [`Store::update_sessions_dyn`] returning the closure's value.
    fn update_sessions<R>(
        &self,
        mut f: impl FnMut(&mut SessionStore) -> R,
    ) -> Result<R, StoreError> {
        let mut out = None;
        self.update_sessions_dyn(&mut |d| out = Some(f(d)))?;
        Ok(out.expect("update ran the closure"))
    }

    /// Edits one session entry (created if missing).
    fn update_session<R>(
        &self,
        key: &str,
        mut f: impl FnMut(&mut SessionEntry) -> R,
    ) -> Result<R, StoreError> {
        self.update_sessions(|s| f(s.entry_mut(key)))
    }
}

impl<S: Store + ?Sized> StoreExt for S {}
