//! The async, per-record face of the state that the executor uses
//! ([`AsyncStore`]).
//!
//! The synchronous [`Store`] trait offers whole documents: a routing-state
//! update reads and rewrites every profile's record, a session update the
//! whole `sessions.json`. That is the files' nature (SPEC R5 lays them out
//! so), but a database can do better, so the executor speaks to this face
//! instead, in which every update names its record:
//!
//! * [`AsyncStore::update_profile`]: one profile's `usageStats` entry and
//!   its provider's `lastGood` entry, nothing else;
//! * [`AsyncStore::update_session`]: one session's entry;
//! * [`AsyncStore::load_run`] and [`AsyncStore::update_success`]: a run's
//!   first read (its session and the routing state) and its success (the
//!   profile's record and the session's entry), which a backend may do in
//!   one step each — Redis in one round trip each, SQLite the success in
//!   one transaction; the defaults call the per-record methods above.
//!
//! Each update is an atomic read-modify-write of that record with respect
//! to every other writer (other tasks, other processes, other replicas):
//! the closure sees the record's latest value. Closures may run more than
//! once (a backend with optimistic concurrency retries), so they must only
//! edit what they are given.
//!
//! Backends: [`SyncFace`] puts any [`Store`] (the in-memory store, the file
//! store) behind this face, calling it directly — its updates stay
//! whole-document underneath, exactly as before; the SQLite store
//! (`sqlite.rs`) and the Redis store (`redis.rs`) implement it per record.
//!
//! Worked example: the runner records a 429 of `openai:a` as
//! `update_profile("openai:a", "openai", f)`; the SQLite store runs
//! `BEGIN IMMEDIATE`, reads the one row of `openai:a` and the `lastGood`
//! row of `openai`, hands them to `f` as a small [`AuthState`], writes back
//! what changed and commits — whatever the number of sessions or profiles.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::{AuthProfiles, AuthState, Problem, SessionEntry, Store, StoreError};

/// The future an [`AsyncStore`] call returns.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// An edit of one profile's record: the [`AuthState`] holds only that
/// profile's `usageStats` entry (when it has one) and its provider's
/// `lastGood` entry; whole-document backends pass the whole document.
pub type ProfileEdit<'a> = &'a mut (dyn FnMut(&mut AuthState) + Send);
/// An edit of one session's entry (created empty when missing).
pub type SessionEdit<'a> = &'a mut (dyn FnMut(&mut SessionEntry) + Send);

/// Durable state of one agent, per record and async. See the module
/// documentation.
pub trait AsyncStore: Send + Sync {
    /// The agent whose state this is.
    fn agent_id(&self) -> &str;
    /// The secrets (`auth-profiles.json`; never held by a shared backend).
    fn load_profiles(&self) -> StoreFuture<'_, AuthProfiles>;
    /// Every profile's routing state (the profiles are few; sessions are
    /// the many).
    fn load_state(&self) -> StoreFuture<'_, AuthState>;
    /// One session's entry, or `None` when the session has none.
    fn load_session<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<SessionEntry>>;
    /// Atomic read-modify-write of `profile_id`'s record (and of the
    /// `lastGood` entry of `provider`, normalised).
    fn update_profile<'a>(
        &'a self,
        profile_id: &'a str,
        provider: &'a str,
        f: ProfileEdit<'a>,
    ) -> StoreFuture<'a, ()>;
    /// Atomic read-modify-write of one session's entry.
    fn update_session<'a>(&'a self, key: &'a str, f: SessionEdit<'a>) -> StoreFuture<'a, ()>;
    /// A run's first read: the session's entry and every profile's routing
    /// state, as [`AsyncStore::load_session`] then
    /// [`AsyncStore::load_state`] give them (the default does exactly
    /// that). A backend across a network reads both in one round trip.
    fn load_run<'a>(&'a self, key: &'a str) -> StoreFuture<'a, (Option<SessionEntry>, AuthState)> {
        Box::pin(async move {
            let entry = self.load_session(key).await?;
            let state = self.load_state().await?;
            Ok((entry, state))
        })
    }
    /// A run's success: [`AsyncStore::update_profile`] of the profile that
    /// answered (when the candidate had one), then
    /// [`AsyncStore::update_session`] of the session (the default does
    /// exactly that). A backend across a network may apply both as one
    /// atomic step, each edit still seeing its record's latest value.
    fn update_success<'a>(
        &'a self,
        profile: Option<(&'a str, &'a str, ProfileEdit<'a>)>,
        key: &'a str,
        f: SessionEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if let Some((id, provider, pf)) = profile {
                self.update_profile(id, provider, pf).await?;
            }
            self.update_session(key, f).await
        })
    }
    /// [`AsyncStore::update_session`] without a runtime, for the one place
    /// that cannot await: the roll-back of a cancelled run (a `Drop`). A
    /// backend that cannot block may apply it in the background.
    fn update_session_now(
        &self,
        key: &str,
        f: Box<dyn FnMut(&mut SessionEntry) + Send + 'static>,
    ) -> Result<(), StoreError>;
    /// Problems found since the last call (each reported once).
    fn take_problems(&self) -> Vec<Problem>;
    /// The cross-request tables (probe throttle, skip cache, re-probe
    /// times) when this backend shares them between processes; `None`
    /// keeps them in the runner's memory. The transient-probe slot is not
    /// among them: SPEC R10.5 gives one per provider *per run*, and a run
    /// lives on one replica, so it stays in the run.
    fn shared_tables(&self) -> Option<&dyn SharedTables> {
        None
    }
    /// A shared backend's health: (answering now, outages since start).
    fn health(&self) -> Option<(bool, u64)> {
        None
    }
}

/// The runner's cross-request tables held by a shared backend, so that
/// every replica sees one probe throttle, one skip cache and one set of
/// re-probe times. Each call is one atomic step.
pub trait SharedTables: Send + Sync {
    /// The probe throttle (R16.1): takes the provider's probe slot when it
    /// is free at `now` (held for `window_ms`), atomically.
    fn try_probe<'a>(
        &'a self,
        provider: &'a str,
        now: u64,
        window_ms: u64,
    ) -> StoreFuture<'a, bool>;
    /// R11.5: is the re-probe of `primary` in `session` due (`interval_ms`
    /// since the last)? When it is, records `now` atomically.
    fn take_reprobe<'a>(
        &'a self,
        session: &'a str,
        primary: &'a str,
        now: u64,
        interval_ms: u64,
    ) -> StoreFuture<'a, bool>;
    /// Records `now` as the session's last try of `primary`.
    fn note_reprobe<'a>(
        &'a self,
        session: &'a str,
        primary: &'a str,
        now: u64,
    ) -> StoreFuture<'a, ()>;
    /// R12: the skip-cache reason for (session, provider, model), if live.
    fn skip_get<'a>(
        &'a self,
        session: &'a str,
        provider: &'a str,
        model: &'a str,
        now: u64,
    ) -> StoreFuture<'a, Option<String>>;
    /// R12: records the skip-cache `reason` for (session, provider, model),
    /// live until `until` (epoch ms).
    fn skip_put<'a>(
        &'a self,
        session: &'a str,
        provider: &'a str,
        model: &'a str,
        reason: &'a str,
        until: u64,
    ) -> StoreFuture<'a, ()>;
    /// Forgets a session's re-probe and skip entries (`/new`).
    fn forget_session<'a>(&'a self, session: &'a str) -> StoreFuture<'a, ()>;
}

/// Runs `f` on one session entry and returns its result.
pub async fn edit_session<R: Send>(
    store: &dyn AsyncStore,
    key: &str,
    mut f: impl FnMut(&mut SessionEntry) -> R + Send,
) -> Result<R, StoreError> {
    let mut out = None;
    store.update_session(key, &mut |e| out = Some(f(e))).await?;
    Ok(out.expect("update ran the closure"))
}

/// Runs `f` on one profile's record and returns its result.
pub async fn edit_profile<R: Send>(
    store: &dyn AsyncStore,
    profile_id: &str,
    provider: &str,
    mut f: impl FnMut(&mut AuthState) -> R + Send,
) -> Result<R, StoreError> {
    let mut out = None;
    store
        .update_profile(profile_id, provider, &mut |s| out = Some(f(s)))
        .await?;
    Ok(out.expect("update ran the closure"))
}

/// Any [`Store`] behind the async face. Updates stay whole-document.
/// [`SyncFace::new`] calls the store directly (memory, tests);
/// [`SyncFace::blocking`] runs each call inside
/// [`tokio::task::block_in_place`] on a multi-thread runtime, for the file
/// store in the gateway, whose lock and `fsync` must not stall the other
/// tasks of a worker.
pub struct SyncFace {
    inner: Arc<dyn Store>,
    blocking: bool,
}

impl SyncFace {
    /// Calls `store` directly, on the calling task (memory stores, tests).
    pub fn new(store: Arc<dyn Store>) -> Self {
        SyncFace {
            inner: store,
            blocking: false,
        }
    }

    /// Runs each call where blocking is allowed (`block_in_place` on a multi-thread runtime): for stores that lock files and `fsync`.
    pub fn blocking(store: Arc<dyn Store>) -> Self {
        SyncFace {
            inner: store,
            blocking: true,
        }
    }

    /// The store behind the face.
    pub fn inner(&self) -> &Arc<dyn Store> {
        &self.inner
    }

    fn call<R>(&self, f: impl FnOnce(&dyn Store) -> R) -> R {
        if self.blocking {
            off_runtime(|| f(self.inner.as_ref()))
        } else {
            f(self.inner.as_ref())
        }
    }
}

/// Runs `f` where blocking is allowed: inside `block_in_place` on a
/// multi-thread runtime, directly elsewhere.
pub fn off_runtime<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

impl AsyncStore for SyncFace {
    fn agent_id(&self) -> &str {
        self.inner.agent_id()
    }

    fn load_profiles(&self) -> StoreFuture<'_, AuthProfiles> {
        let r = self.call(|s| s.load_profiles());
        Box::pin(std::future::ready(r))
    }

    fn load_state(&self) -> StoreFuture<'_, AuthState> {
        let r = self.call(|s| s.load_state());
        Box::pin(std::future::ready(r))
    }

    fn load_session<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<SessionEntry>> {
        let r = self.call(|s| s.load_session(key));
        Box::pin(std::future::ready(r))
    }

    fn update_profile<'a>(
        &'a self,
        _profile_id: &'a str,
        _provider: &'a str,
        f: ProfileEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        let r = self.call(|s| s.update_state_dyn(&mut |d| f(d)));
        Box::pin(std::future::ready(r))
    }

    fn update_session<'a>(&'a self, key: &'a str, f: SessionEdit<'a>) -> StoreFuture<'a, ()> {
        let r = self.call(|s| s.update_sessions_dyn(&mut |d| f(d.entry_mut(key))));
        Box::pin(std::future::ready(r))
    }

    fn update_session_now(
        &self,
        key: &str,
        mut f: Box<dyn FnMut(&mut SessionEntry) + Send + 'static>,
    ) -> Result<(), StoreError> {
        self.call(|s| s.update_sessions_dyn(&mut |d| f(d.entry_mut(key))))
    }

    fn take_problems(&self) -> Vec<Problem> {
        self.inner.take_problems()
    }
}
