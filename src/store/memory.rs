//! An in-memory [`Store`]: process-local state for simulations, tests and
//! load runs. Each document sits behind its own mutex, so an update is a
//! locked read-modify-write exactly like the file store's, without the
//! disk.

use std::sync::{Mutex, MutexGuard};

use super::{AuthProfiles, AuthState, Problem, SessionEntry, SessionStore, Store, StoreError};

/// State held in memory. See the module documentation.
#[derive(Debug, Default)]
pub struct MemoryStore {
    agent: String,
    profiles: Mutex<AuthProfiles>,
    state: Mutex<AuthState>,
    sessions: Mutex<SessionStore>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking update closure leaves the document as it was edited so
    // far; the store stays usable (the file store behaves the same).
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl MemoryStore {
    /// An empty store for `agent`.
    pub fn new(agent: &str) -> Self {
        MemoryStore {
            agent: agent.into(),
            ..Default::default()
        }
    }

    /// Starts with these profiles (and their secrets).
    pub fn with_profiles(self, profiles: AuthProfiles) -> Self {
        *lock(&self.profiles) = profiles;
        self
    }

    /// Starts with this routing state.
    pub fn with_state(self, state: AuthState) -> Self {
        *lock(&self.state) = state;
        self
    }

    /// Starts with these sessions.
    pub fn with_sessions(self, sessions: SessionStore) -> Self {
        *lock(&self.sessions) = sessions;
        self
    }
}

impl Store for MemoryStore {
    fn agent_id(&self) -> &str {
        &self.agent
    }

    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        Ok(lock(&self.profiles).clone())
    }

    fn load_state(&self) -> Result<AuthState, StoreError> {
        Ok(lock(&self.state).clone())
    }

    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        Ok(lock(&self.sessions).clone())
    }

    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        f(&mut lock(&self.profiles));
        Ok(())
    }

    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        f(&mut lock(&self.state));
        Ok(())
    }

    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        f(&mut lock(&self.sessions));
        Ok(())
    }

    fn take_problems(&self) -> Vec<Problem> {
        Vec::new()
    }

    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        Ok(lock(&self.sessions).entries.get(key).cloned())
    }
}
