//! The typed values of a gateway config: what [`Reader`](super::read)
//! fills from the YAML tree, and what `policy`, `run`, `store` and `serve`
//! read. Nothing here parses or reports; see [`super`] for that.

use std::collections::BTreeMap;

use crate::auth::{CooldownPolicy, ProfileMeta};
use crate::model_ref::ModelRef;
use crate::store::StateConfig;

/// The parts of the gateway config that model failover reads.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct GatewayConfig {
    /// `agents`: defaults and the agent list.
    pub agents: AgentsConfig,
    /// `auth`: profile metadata, order and cooldowns.
    pub auth: AuthConfig,
    /// `state`: where routing state and session overrides live; `None`
    /// (no block) is the embedded database under `--state DIR`.
    pub state: Option<StateConfig>,
}

/// `agents`.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct ModelConfig {
    /// The primary model.
    pub primary: Option<ModelRef>,
    /// The fallbacks, in order.
    pub fallbacks: Option<Vec<ModelRef>>,
}

/// One entry of `agents.list`.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AgentConfig {
    /// The agent's id (`agents.list[].id`).
    pub id: String,
    /// `model`: a string is a primary without fallbacks (strict), an object
    /// may carry its own `fallbacks`. `None` when the agent sets no model.
    pub model: Option<ModelConfig>,
}

/// `auth`: routing metadata only (SPEC R5.3).
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct AuthConfig {
    /// `auth.profiles`, in file order.
    pub profiles: Vec<ProfileMeta>,
    /// `auth.order`: provider id (lower-cased) → profile ids. An explicitly
    /// empty list is kept: it disables the provider.
    pub order: BTreeMap<String, Vec<String>>,
    /// `auth.cooldowns`, validated as it was read.
    pub cooldowns: CooldownPolicy,
}

impl AgentsConfig {
    /// The agent of `id`, if listed.
    pub fn agent(&self, id: &str) -> Option<&AgentConfig> {
        self.list.iter().find(|a| a.id == id)
    }
}

impl AuthConfig {
    /// The `auth.profiles` entry of `id`, if listed.
    pub fn profile(&self, id: &str) -> Option<&ProfileMeta> {
        self.profiles.iter().find(|p| p.id == id)
    }
}
