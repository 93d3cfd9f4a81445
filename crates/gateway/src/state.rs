//! The store as the gateway uses it: the agent's state backend (SQLite by
//! default, see [`failover::StateConfig`]) through its async,
//! per-record face ([`AsyncStore`]), seen through three small adjustments
//! so that the executor stays untouched.
//!
//! 1. **Off the runtime only where needed.** The backends' calls are
//!    short (an indexed row read or write, a Redis round trip), so they
//!    run on the request's task; [`off_runtime`] remains for the rare
//!    blocking work (building a set, reading the config files).
//! 2. **Requests without a session.** A request without `x-session-id`
//!    has no stickiness and persists no override: the runner is given a
//!    key under [`EPHEMERAL_PREFIX`], for which sessions read as empty and
//!    writes go to a scratch entry that is thrown away.
//! 3. **Environment keys.** `apiKey: "${VAR}"` of a provider becomes its
//!    `<provider>:default` profile in loaded profiles (when the file has no
//!    profile of that id), held in memory only: the secrets file never
//!    sees it, so it is never written to disk.
//!
//! It also watches profile updates for the metrics: a cooldown or a
//! disable window that an update started is counted (the runner's own
//! record of it stays inside the executor).

use std::sync::Arc;

use failover::errors::StoreError;
use failover::state::{
    AsyncStore, AuthProfiles, AuthState, Problem, Profile, ProfileEdit, SessionEdit, SessionEntry,
    SessionStore, SharedTables, Store, StoreFuture,
};

use super::metrics::Metrics;

/// Session keys the gateway makes up for requests without `x-session-id`.
/// A NUL cannot arrive in an HTTP header, so no client session collides.
pub(crate) const EPHEMERAL_PREFIX: &str = "\0anonymous:";

pub(crate) use failover::state::off_runtime;

/// See the module documentation.
pub(crate) struct GatewayStore {
    inner: Arc<dyn AsyncStore>,
    /// The same backend as whole documents (metrics, status-like reads).
    docs: Arc<dyn Store>,
    env_profiles: Vec<(String, Profile)>,
    metrics: Arc<Metrics>,
}

impl GatewayStore {
    pub(crate) fn new(
        inner: Arc<dyn AsyncStore>,
        docs: Arc<dyn Store>,
        env_profiles: Vec<(String, Profile)>,
        metrics: Arc<Metrics>,
    ) -> Self {
        GatewayStore {
            inner,
            docs,
            env_profiles,
            metrics,
        }
    }
}

fn is_ephemeral(key: &str) -> bool {
    key.starts_with(EPHEMERAL_PREFIX)
}

/// Whether an edit of `id`'s stats started a window, by kind.
fn started(
    before: Option<&failover::state::UsageStats>,
    doc: &AuthState,
    id: &str,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    if let Some(s) = doc.usage_stats.get(id) {
        let whole = |s: &failover::state::UsageStats| s.profile_cooldown().map(|p| p.0);
        if whole(s).is_some() && whole(s) != before.and_then(whole) {
            out.push("cooldown");
        }
        // R7.3: a model's own window (`modelCooldowns`) counts as one too.
        let model_started = s.model_cooldowns.iter().any(|(m, c)| {
            c.cooldown_until.is_some()
                && c.cooldown_until != before.and_then(|o| o.model_window(m)).map(|w| w.until)
        });
        if model_started {
            out.push("cooldown");
        }
        if s.disabled_until.is_some() && s.disabled_until != before.and_then(|o| o.disabled_until) {
            out.push("disable");
        }
    }
    out
}

impl AsyncStore for GatewayStore {
    fn agent_id(&self) -> &str {
        AsyncStore::agent_id(self.inner.as_ref())
    }

    fn load_profiles(&self) -> StoreFuture<'_, AuthProfiles> {
        Box::pin(async move {
            let mut p = self.inner.load_profiles().await?;
            for (id, profile) in &self.env_profiles {
                p.profiles
                    .entry(id.clone())
                    .or_insert_with(|| profile.clone());
            }
            Ok(p)
        })
    }

    fn load_state(&self) -> StoreFuture<'_, AuthState> {
        self.inner.load_state()
    }

    fn load_session<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<SessionEntry>> {
        if is_ephemeral(key) {
            return Box::pin(std::future::ready(Ok(None)));
        }
        self.inner.load_session(key)
    }

    fn update_profile<'a>(
        &'a self,
        profile_id: &'a str,
        provider: &'a str,
        f: ProfileEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut kinds: Vec<&'static str> = Vec::new();
            self.inner
                .update_profile(profile_id, provider, &mut |doc| {
                    let before = doc.usage_stats.get(profile_id).cloned();
                    f(doc);
                    kinds = started(before.as_ref(), doc, profile_id);
                })
                .await?;
            // Counted once the update is durable (a retried closure counts once).
            for kind in kinds {
                self.metrics.window_started(kind);
            }
            Ok(())
        })
    }

    fn update_session<'a>(&'a self, key: &'a str, f: SessionEdit<'a>) -> StoreFuture<'a, ()> {
        // An anonymous request's edits land in a scratch entry.
        if is_ephemeral(key) || ANONYMOUS.try_with(|a| *a).unwrap_or(false) {
            f(&mut SessionEntry::default());
            return Box::pin(std::future::ready(Ok(())));
        }
        self.inner.update_session(key, f)
    }

    fn load_run<'a>(&'a self, key: &'a str) -> StoreFuture<'a, (Option<SessionEntry>, AuthState)> {
        if is_ephemeral(key) {
            return Box::pin(async move { Ok((None, self.inner.load_state().await?)) });
        }
        self.inner.load_run(key)
    }

    fn update_success<'a>(
        &'a self,
        profile: Option<(&'a str, &'a str, ProfileEdit<'a>)>,
        key: &'a str,
        f: SessionEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        if is_ephemeral(key) || ANONYMOUS.try_with(|a| *a).unwrap_or(false) {
            // No session to settle: the profile's update alone (counted).
            f(&mut SessionEntry::default());
            return Box::pin(async move {
                match profile {
                    Some((id, p, pf)) => self.update_profile(id, p, pf).await,
                    None => Ok(()),
                }
            });
        }
        Box::pin(async move {
            let Some((id, p, pf)) = profile else {
                return self.inner.update_success(None, key, f).await;
            };
            let mut kinds: Vec<&'static str> = Vec::new();
            let mut counted = |doc: &mut AuthState| {
                let before = doc.usage_stats.get(id).cloned();
                pf(doc);
                kinds = started(before.as_ref(), doc, id);
            };
            self.inner
                .update_success(Some((id, p, &mut counted)), key, f)
                .await?;
            for kind in kinds {
                self.metrics.window_started(kind);
            }
            Ok(())
        })
    }

    fn update_session_now(
        &self,
        key: &str,
        mut f: Box<dyn FnMut(&mut SessionEntry) + Send + 'static>,
    ) -> Result<(), StoreError> {
        if is_ephemeral(key) || ANONYMOUS.try_with(|a| *a).unwrap_or(false) {
            f(&mut SessionEntry::default());
            return Ok(());
        }
        self.inner.update_session_now(key, f)
    }

    fn take_problems(&self) -> Vec<Problem> {
        AsyncStore::take_problems(self.inner.as_ref())
    }

    fn shared_tables(&self) -> Option<&dyn SharedTables> {
        self.inner.shared_tables()
    }

    fn health(&self) -> Option<(bool, u64)> {
        self.inner.health()
    }
}

/// The whole-document view: the backend's, with the environment keys
/// added to loaded profiles and anonymous sessions never written.
impl Store for GatewayStore {
    fn agent_id(&self) -> &str {
        self.docs.agent_id()
    }

    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        let mut p = self.docs.load_profiles()?;
        for (id, profile) in &self.env_profiles {
            p.profiles
                .entry(id.clone())
                .or_insert_with(|| profile.clone());
        }
        Ok(p)
    }

    fn load_state(&self) -> Result<AuthState, StoreError> {
        self.docs.load_state()
    }

    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        self.docs.load_sessions()
    }

    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        self.docs.update_profiles_dyn(f)
    }

    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        self.docs.update_state_dyn(f)
    }

    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        self.docs.update_sessions_dyn(&mut |doc| {
            f(doc);
            doc.entries.retain(|k, _| !is_ephemeral(k));
        })
    }

    fn take_problems(&self) -> Vec<Problem> {
        self.docs.take_problems()
    }
}

tokio::task_local! {
    /// Set for the future of a request without `x-session-id`.
    pub static ANONYMOUS: bool;
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover::state::MemoryStore;
    use failover::state::{edit_session, SyncFace};

    fn store() -> (Arc<MemoryStore>, GatewayStore) {
        let mem = Arc::new(MemoryStore::new("main"));
        let g = GatewayStore::new(
            Arc::new(SyncFace::new(mem.clone())),
            mem.clone(),
            vec![(
                "openai:default".into(),
                Profile::api_key("openai", "sk-env-0123456789"),
            )],
            Arc::new(Metrics::new()),
        );
        (mem, g)
    }

    // Env keys are visible to routing but never written (SPEC R5).
    #[tokio::test]
    async fn env_profiles_are_loaded_not_stored() {
        let (mem, s) = store();
        assert!(AsyncStore::load_profiles(&s)
            .await
            .unwrap()
            .profiles
            .contains_key("openai:default"));
        assert!(mem.load_profiles().unwrap().profiles.is_empty());
    }

    #[tokio::test]
    async fn anonymous_sessions_are_never_persisted() {
        let (mem, s) = store();
        let key = format!("{EPHEMERAL_PREFIX}1");
        ANONYMOUS
            .scope(true, async {
                edit_session(&s, "named-but-anonymous", |e| {
                    e.model_override = Some("x".into())
                })
                .await
                .unwrap();
            })
            .await;
        edit_session(&s, &key, |e| e.model_override = Some("x".into()))
            .await
            .unwrap();
        assert!(AsyncStore::load_session(&s, &key).await.unwrap().is_none());
        assert!(mem.load_sessions().unwrap().entries.is_empty());
        edit_session(&s, "real", |e| e.model_override = Some("y".into()))
            .await
            .unwrap();
        assert!(AsyncStore::load_session(&s, "real")
            .await
            .unwrap()
            .is_some());
    }

    // A run's success on an anonymous request records the profile's
    // success but never its scratch session; a named one records both.
    #[tokio::test]
    async fn an_anonymous_success_records_the_profile_only() {
        let (mem, s) = store();
        let key = format!("{EPHEMERAL_PREFIX}2");
        let success = |at: u64| {
            move |st: &mut AuthState| {
                st.stats_mut("openai:default").last_used = Some(at);
            }
        };
        let mut first = success(1);
        s.update_success(
            Some(("openai:default", "openai", &mut first)),
            &key,
            &mut |e| e.model_override = Some("x".into()),
        )
        .await
        .unwrap();
        assert_eq!(
            mem.load_state().unwrap().usage_stats["openai:default"].last_used,
            Some(1)
        );
        assert!(mem.load_sessions().unwrap().entries.is_empty());
        let (entry, state) = s.load_run(&key).await.unwrap();
        assert!(entry.is_none());
        assert!(state.usage_stats.contains_key("openai:default"));
        let mut second = success(2);
        s.update_success(
            Some(("openai:default", "openai", &mut second)),
            "named",
            &mut |e| e.model_override = Some("y".into()),
        )
        .await
        .unwrap();
        assert_eq!(
            mem.load_session("named")
                .unwrap()
                .unwrap()
                .model_override
                .as_deref(),
            Some("y")
        );
        assert_eq!(
            mem.load_state().unwrap().usage_stats["openai:default"].last_used,
            Some(2)
        );
    }
}
