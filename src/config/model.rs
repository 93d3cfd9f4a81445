//! The typed values of a gateway config: what [`Reader`](super::read)
//! fills from the YAML tree, and what `policy`, `run`, `store` and `serve`
//! read. Nothing here parses or reports; see [`super`] for that.

use std::collections::BTreeMap;

use crate::model_ref::ModelRef;

/// `auth.cooldowns` defaults (SPEC R8.4, R8.5, R16.4; REFERENCE (c)).
pub mod defaults {
    pub const BILLING_BACKOFF_HOURS: f64 = 5.0;
    pub const BILLING_MAX_HOURS: f64 = 24.0;
    pub const FAILURE_WINDOW_HOURS: f64 = 24.0;
    pub const OVERLOADED_PROFILE_ROTATIONS: u32 = 1;
    pub const OVERLOADED_BACKOFF_MS: u64 = 0;
    pub const RATE_LIMITED_PROFILE_ROTATIONS: u32 = 1;
    pub const AUTH_PERMANENT_BACKOFF_MINUTES: f64 = 10.0;
    pub const AUTH_PERMANENT_MAX_MINUTES: f64 = 60.0;
}

/// The parts of the gateway config that model failover reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewayConfig {
    pub agents: AgentsConfig,
    pub auth: AuthConfig,
    /// `state`: where routing state and session overrides live; `None`
    /// (no block) is the embedded database under `--state DIR`.
    pub state: Option<StateConfig>,
}

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
    pub const NAMES: [&'static str; 3] = ["sqlite", "redis", "files"];

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sqlite" => Some(StateBackend::Sqlite),
            "redis" => Some(StateBackend::Redis),
            "files" => Some(StateBackend::Files),
            _ => None,
        }
    }

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
pub struct StateConfig {
    pub backend: StateBackend,
    /// Redis only: the server (`redis://[user:password@]host:port/db`).
    pub url: Option<String>,
    /// Redis only: the key prefix (default `failover:`).
    pub prefix: Option<String>,
}

/// `agents`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentsConfig {
    /// `agents.defaults.model`: the configured default text model.
    pub model: ModelConfig,
    /// `agents.defaults.imageModel`: image routing, its own chain.
    pub image_model: ModelConfig,
    /// `agents.list`, in file order.
    pub list: Vec<AgentConfig>,
}

/// A primary model and its fallbacks. `fallbacks: None` means the key is
/// absent, which differs from an explicit empty list for agents (SPEC R3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelConfig {
    pub primary: Option<ModelRef>,
    pub fallbacks: Option<Vec<ModelRef>>,
}

/// One entry of `agents.list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    pub id: String,
    /// `model`: a string is a primary without fallbacks (strict), an object
    /// may carry its own `fallbacks`. `None` when the agent sets no model.
    pub model: Option<ModelConfig>,
}

/// `auth`: routing metadata only (SPEC R5.3).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthConfig {
    /// `auth.profiles`, in file order.
    pub profiles: Vec<AuthProfileMeta>,
    /// `auth.order`: provider id (lower-cased) → profile ids. An explicitly
    /// empty list is kept: it disables the provider.
    pub order: BTreeMap<String, Vec<String>>,
    pub cooldowns: CooldownConfig,
}

impl AgentsConfig {
    pub fn agent(&self, id: &str) -> Option<&AgentConfig> {
        self.list.iter().find(|a| a.id == id)
    }
}

impl AuthConfig {
    pub fn profile(&self, id: &str) -> Option<&AuthProfileMeta> {
        self.profiles.iter().find(|p| p.id == id)
    }
}

/// One `auth.profiles` entry: what the profile is, never its secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuthProfileMeta {
    /// `provider:default` or `provider:<email>` (SPEC R2.2).
    pub id: String,
    pub provider: String,
    pub mode: Option<CredentialMode>,
    pub email: Option<String>,
}

/// How a profile authenticates (`mode`, or `type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CredentialMode {
    ApiKey,
    OAuth,
    Token,
}

impl CredentialMode {
    pub fn name(self) -> &'static str {
        match self {
            CredentialMode::ApiKey => "api_key",
            CredentialMode::OAuth => "oauth",
            CredentialMode::Token => "token",
        }
    }
}

/// `auth.cooldowns`. `Default` gives the SPEC defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct CooldownConfig {
    pub billing_backoff_hours: f64,
    /// Provider id (lower-cased) → base billing backoff in hours.
    pub billing_backoff_hours_by_provider: BTreeMap<String, f64>,
    pub billing_max_hours: f64,
    pub failure_window_hours: f64,
    pub overloaded_profile_rotations: u32,
    pub overloaded_backoff_ms: u64,
    pub rate_limited_profile_rotations: u32,
    pub auth_permanent_backoff_minutes: f64,
    pub auth_permanent_max_minutes: f64,
}

impl Default for CooldownConfig {
    fn default() -> Self {
        CooldownConfig {
            billing_backoff_hours: defaults::BILLING_BACKOFF_HOURS,
            billing_backoff_hours_by_provider: BTreeMap::new(),
            billing_max_hours: defaults::BILLING_MAX_HOURS,
            failure_window_hours: defaults::FAILURE_WINDOW_HOURS,
            overloaded_profile_rotations: defaults::OVERLOADED_PROFILE_ROTATIONS,
            overloaded_backoff_ms: defaults::OVERLOADED_BACKOFF_MS,
            rate_limited_profile_rotations: defaults::RATE_LIMITED_PROFILE_ROTATIONS,
            auth_permanent_backoff_minutes: defaults::AUTH_PERMANENT_BACKOFF_MINUTES,
            auth_permanent_max_minutes: defaults::AUTH_PERMANENT_MAX_MINUTES,
        }
    }
}
