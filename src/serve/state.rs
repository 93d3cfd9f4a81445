//! The store as the gateway uses it: the agent's [`FileStore`](crate::store::FileStore) seen through
//! three small adjustments, each a [`Store`] wrapper so that the executor
//! stays untouched.
//!
//! 1. **Off the runtime.** The store's calls are synchronous file I/O
//!    (lock, read, `fsync`, rename). Called from a tokio worker they would
//!    stall every request on that worker, so each call runs inside
//!    [`tokio::task::block_in_place`] on the multi-thread runtime `serve`
//!    builds: the worker hands its other tasks to a fresh thread while this
//!    one blocks. Off a multi-thread runtime (a unit test) the call is
//!    direct. This is the seam for an async store (issue 13): only this
//!    file needs to change.
//! 2. **Requests without a session.** A request without `x-session-id`
//!    has no stickiness and persists no override: the runner is given a
//!    key under [`EPHEMERAL_PREFIX`], for which sessions read as empty and
//!    writes go to a scratch document that is thrown away.
//! 3. **Environment keys.** `apiKey: "${VAR}"` of a provider becomes its
//!    `<provider>:default` profile in loaded profiles (when the file has no
//!    profile of that id), held in memory only: an update of the secrets
//!    file never sees it, so it is never written to disk.
//!
//! It also watches routing-state updates for the metrics: a cooldown or a
//! disable window that an update started is counted (the runner's own
//! record of it stays inside the executor).

use std::sync::Arc;

use crate::store::{
    AuthProfiles, AuthState, Problem, Profile, SessionEntry, SessionStore, Store, StoreError,
};

use super::metrics::Metrics;

/// Session keys the gateway makes up for requests without `x-session-id`.
/// A NUL cannot arrive in an HTTP header, so no client session collides.
pub const EPHEMERAL_PREFIX: &str = "\0anonymous:";

/// Runs `f` where blocking is allowed (see the module documentation).
pub fn off_runtime<R>(f: impl FnOnce() -> R) -> R {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(f)
        }
        _ => f(),
    }
}

/// See the module documentation.
pub struct GatewayStore {
    inner: Arc<dyn Store>,
    env_profiles: Vec<(String, Profile)>,
    metrics: Arc<Metrics>,
}

impl GatewayStore {
    pub fn new(
        inner: Arc<dyn Store>,
        env_profiles: Vec<(String, Profile)>,
        metrics: Arc<Metrics>,
    ) -> Self {
        GatewayStore {
            inner,
            env_profiles,
            metrics,
        }
    }
}

fn is_ephemeral(key: &str) -> bool {
    key.starts_with(EPHEMERAL_PREFIX)
}

impl Store for GatewayStore {
    fn agent_id(&self) -> &str {
        self.inner.agent_id()
    }

    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        let mut p = off_runtime(|| self.inner.load_profiles())?;
        for (id, profile) in &self.env_profiles {
            p.profiles
                .entry(id.clone())
                .or_insert_with(|| profile.clone());
        }
        Ok(p)
    }

    fn load_state(&self) -> Result<AuthState, StoreError> {
        off_runtime(|| self.inner.load_state())
    }

    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        off_runtime(|| self.inner.load_sessions())
    }

    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        if is_ephemeral(key) {
            return Ok(None);
        }
        off_runtime(|| self.inner.load_session(key))
    }

    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        off_runtime(|| self.inner.update_profiles_dyn(f))
    }

    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        let metrics = &self.metrics;
        let mut started: Vec<&'static str> = Vec::new();
        off_runtime(|| {
            self.inner.update_state_dyn(&mut |doc| {
                let before = doc.usage_stats.clone();
                f(doc);
                started.clear();
                for (id, s) in &doc.usage_stats {
                    let old = before.get(id);
                    if s.cooldown_until.is_some()
                        && s.cooldown_until != old.and_then(|o| o.cooldown_until)
                    {
                        started.push("cooldown");
                    }
                    if s.disabled_until.is_some()
                        && s.disabled_until != old.and_then(|o| o.disabled_until)
                    {
                        started.push("disable");
                    }
                }
            })
        })?;
        // Counted once the update is durable (a retried closure counts once).
        for kind in started {
            metrics.window_started(kind);
        }
        Ok(())
    }

    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        // The runner edits one entry per update; an edit of an ephemeral
        // session lands in a scratch document. An update cannot say which
        // key it touches, so the scratch is tried first only when the
        // calling task is serving an anonymous request.
        if ANONYMOUS.try_with(|a| *a).unwrap_or(false) {
            let mut scratch = SessionStore::default();
            f(&mut scratch);
            return Ok(());
        }
        off_runtime(|| {
            self.inner.update_sessions_dyn(&mut |doc| {
                f(doc);
                // Belt and braces: an anonymous entry never reaches the disk.
                doc.entries.retain(|k, _| !is_ephemeral(k));
            })
        })
    }

    fn take_problems(&self) -> Vec<Problem> {
        self.inner.take_problems()
    }
}

tokio::task_local! {
    /// Set for the future of a request without `x-session-id`.
    pub static ANONYMOUS: bool;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::MemoryStore;
    use crate::store::StoreExt;

    fn store() -> GatewayStore {
        GatewayStore::new(
            Arc::new(MemoryStore::new("main")),
            vec![(
                "openai:default".into(),
                Profile::api_key("openai", "sk-env-0123456789"),
            )],
            Arc::new(Metrics::new()),
        )
    }

    // Env keys are visible to routing but never written (SPEC R5).
    #[test]
    fn env_profiles_are_loaded_not_stored() {
        let s = store();
        assert!(s
            .load_profiles()
            .unwrap()
            .profiles
            .contains_key("openai:default"));
        s.update_profiles(|p| p.profiles.len()).unwrap();
        assert!(s.inner.load_profiles().unwrap().profiles.is_empty());
    }

    #[tokio::test]
    async fn anonymous_sessions_are_never_persisted() {
        let s = store();
        let key = format!("{EPHEMERAL_PREFIX}1");
        ANONYMOUS
            .scope(true, async {
                s.update_session(&key, |e| e.model_override = Some("x".into()))
                    .unwrap();
            })
            .await;
        s.update_session(&key, |e| e.model_override = Some("x".into()))
            .unwrap();
        assert!(s.load_session(&key).unwrap().is_none());
        assert!(s.inner.load_sessions().unwrap().entries.is_empty());
        s.update_session("real", |e| e.model_override = Some("y".into()))
            .unwrap();
        assert!(s.load_session("real").unwrap().is_some());
    }
}
