//! Stage 4, policy: from *why* a model was selected to the ordered list of
//! models a run may try (SPEC R3, R4; REFERENCE (d)).
//!
//! A run asks for one model, and the reason it was selected — its
//! [`SelectionSource`] — decides whether it may fall back, and to which list.
//! That decision is not made here: it comes from the `selection`
//! declarations of the rules files ([`SelectionPolicies`]); the default
//! ruleset (`rules/05-selection.rules`) encodes the SPEC R3 table. This
//! module only *applies* a policy:
//!
//! 1. **Pick the selection** by precedence, first that applies: a one-shot
//!    CLI model, a session override (`auto`, `user` or legacy), a cron
//!    payload model, the agent's own model, the configured default. The
//!    selected model is the *requested* model, always first (R4.1).
//! 2. **Resolve the policy** of that source to one of three shapes:
//!    - *strict*: the requested model alone (R3.1);
//!    - *an override list* (the agent's or the cron payload's `fallbacks`):
//!      exactly the requested model plus that list; an empty list is strict
//!      and, in particular, does not append the primary (R4.6);
//!    - *the configured chain*: the requested model, then the configured
//!      fallbacks, then the configured primary appended last (R4.4, R4.5).
//!      The configured fallbacks apply whatever provider the requested
//!      model uses (R4.4, where SPEC overrides one version of the original
//!      code), so a run that already sits on a configured fallback keeps
//!      the full chain (R4.3).
//!
//!    A policy naming an override list that is *absent* (an agent whose
//!    model is a plain string, a cron job without `payload.fallbacks`) uses
//!    its `else` target. The configured list is never absent: no
//!    `fallbacks` key is an empty list, and the primary is still appended.
//! 3. **De-duplicate** by `provider/model`, keeping the first occurrence;
//!    no allow-list ever filters explicit fallbacks (R4.2).
//!
//! Worked example (SPEC R4.4). Config: primary `anthropic/a`, fallbacks
//! `[openai/b]`; the session has an `auto` override to `google/z`. The
//! source is `auto_override`, whose default policy is `fallbacks
//! configured`, so the chain is the configured one:
//!
//! ```text
//! 1. google/z      requested
//! 2. openai/b      configured fallback
//! 3. anthropic/a   configured primary, appended
//! ```
//!
//! Had the override come from the user (`user_override => strict`), the
//! chain would be `google/z` alone and the run strict.
//!
//! Image runs (`agents.defaults.imageModel`) use the same rules with their
//! own configured chain; agents' `model` keys are text models and do not
//! route images.

use std::fmt;

use serde::Serialize;

pub use crate::compile::{
    FallbackList, SelectionPolicies, SelectionPolicy, SelectionSource, SelectionTarget,
};
pub use crate::model_ref::{ModelRef, ModelRefError};

use crate::config::{GatewayConfig, ModelConfig};
use crate::diag::did_you_mean;
use crate::model_ref::shown;

/// Which configured chain a run uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ModelKind {
    /// `agents.defaults.model`.
    #[default]
    Text,
    /// `agents.defaults.imageModel`.
    Image,
}

/// What kind of model override a session carries, as the chain sees it:
/// the stored `modelOverrideSource` plus the legacy case of no source at
/// all, which selects differently (R3, legacy row). Not the two-valued
/// `modelOverrideSource` field as stored (which also tags auth-profile
/// pins).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverrideKind {
    /// Written by the runner on fallback (`"auto"`).
    Auto,
    /// `/model`, the model picker, `sessions.patch` (`"user"`).
    User,
    /// An old entry with `modelOverride` but no source.
    Legacy,
}

impl OverrideKind {
    /// The selection source a session override of this kind gives the run (R3).
    pub fn selection_source(self) -> SelectionSource {
        match self {
            OverrideKind::Auto => SelectionSource::AutoOverride,
            OverrideKind::User => SelectionSource::UserOverride,
            OverrideKind::Legacy => SelectionSource::LegacyOverride,
        }
    }
}

/// A session's persisted model override.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionOverride {
    /// The overriding model (`providerOverride`/`modelOverride`).
    pub model: ModelRef,
    /// Who wrote it (`modelOverrideSource`, or legacy when absent).
    pub source: OverrideKind,
}

/// A cron job's `payload.model` and `payload.fallbacks`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CronPayload {
    /// The job's model.
    pub model: ModelRef,
    /// `None`: the job gives no `fallbacks`; `Some([])`: the run is strict.
    pub fallbacks: Option<Vec<ModelRef>>,
}

/// What a run asks for. Every field is optional; when several selections
/// are given, the first in this order wins: `one_shot`, `session_override`,
/// `cron`, the agent's model, the configured default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ChainRequest {
    /// Which configured chain applies: text or image.
    pub kind: ModelKind,
    /// The agent the run belongs to (`agents.list[].id`).
    pub agent: Option<String>,
    /// A provider/model given for one invocation (strict by default).
    pub one_shot: Option<ModelRef>,
    /// The session's persisted model override, if any.
    pub session_override: Option<SessionOverride>,
    /// The cron job's payload, when the run is a cron job.
    pub cron: Option<CronPayload>,
}

/// Why a candidate is in the chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Why {
    /// The selected model (R4.1).
    Requested,
    /// From `agents.defaults.model.fallbacks` (or `imageModel.fallbacks`).
    ConfiguredFallback,
    /// From the agent's own `model.fallbacks`.
    AgentFallback,
    /// From the cron job's `payload.fallbacks`.
    PayloadFallback,
    /// The configured primary, appended last (R4.5).
    ConfiguredPrimaryAppended,
}

/// One model the run may try.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// The model to try.
    pub model: ModelRef,
    /// Why it is in the chain.
    pub why: Why,
}

/// The models a run may try, in order, and how they were chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CandidateChain {
    /// Why the requested model was selected (R3).
    pub source: SelectionSource,
    /// The policy the rules give `source`.
    pub policy: SelectionPolicy,
    /// The fallback list in use; `None` when the run is strict.
    pub list: Option<FallbackList>,
    /// No fallback at all: the requested model or its error (R3.1). This
    /// reports the policy, not the length: a configured default without
    /// fallbacks has one candidate but is not strict (a later config with
    /// fallbacks would give it more).
    pub strict: bool,
    /// Never empty; the first is the requested model.
    pub candidates: Vec<Candidate>,
    /// Entries dropped because an earlier candidate has the same
    /// `provider/model` (R4.2), for explanations.
    pub duplicates: Vec<Candidate>,
}

impl CandidateChain {
    /// The requested model: the first candidate (R4.1).
    pub fn requested(&self) -> &ModelRef {
        &self.candidates[0].model
    }

    /// The candidates' models, in the order they are tried.
    pub fn models(&self) -> impl Iterator<Item = &ModelRef> {
        self.candidates.iter().map(|c| &c.model)
    }
}

/// Why no chain could be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChainError {
    /// `agent` is not in `agents.list`.
    UnknownAgent {
        /// The agent id asked for.
        id: String,
        /// A close known id, if there is one.
        suggestion: Option<String>,
        /// Every id in `agents.list`.
        known: Vec<String>,
    },
    /// Nothing selects a model: no override and no configured primary.
    NoModel {
        /// The chain that has no primary.
        kind: ModelKind,
    },
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainError::UnknownAgent {
                id,
                suggestion,
                known,
            } => {
                write!(f, "no agent `{}` in `agents.list`", shown(id))?;
                match suggestion {
                    Some(s) => write!(f, "; did you mean `{s}`?"),
                    None if known.is_empty() => f.write_str("; the config lists no agents"),
                    None => write!(f, "; agents: {}", known.join(", ")),
                }
            }
            ChainError::NoModel { kind } => {
                let key = match kind {
                    ModelKind::Text => "agents.defaults.model.primary",
                    ModelKind::Image => "agents.defaults.imageModel.primary",
                };
                write!(
                    f,
                    "no model is selected: the config has no `{key}` and the run gives no model"
                )
            }
        }
    }
}

impl std::error::Error for ChainError {}

/// What the selection step found: the source, the requested model, and the
/// override lists that the policy may name.
struct Selection<'a> {
    source: SelectionSource,
    requested: ModelRef,
    agent_fallbacks: Option<&'a [ModelRef]>,
    payload_fallbacks: Option<&'a [ModelRef]>,
}

#[cfg(test)]
/// Picks the selection source and requested model (step 1 of the essay).
pub(crate) fn select_source(
    config: &GatewayConfig,
    request: &ChainRequest,
) -> Result<SelectionSource, ChainError> {
    select(config, request).map(|s| s.source)
}

fn select<'a>(
    config: &'a GatewayConfig,
    request: &'a ChainRequest,
) -> Result<Selection<'a>, ChainError> {
    let configured = configured_slot(config, request.kind);
    let agent_model: Option<&ModelConfig> = match &request.agent {
        None => None,
        Some(id) => {
            let Some(agent) = config.agents.agent(id) else {
                let known: Vec<String> = config.agents.list.iter().map(|a| a.id.clone()).collect();
                return Err(ChainError::UnknownAgent {
                    id: id.clone(),
                    suggestion: did_you_mean(id, known.iter().map(String::as_str))
                        .map(str::to_string),
                    known,
                });
            };
            match request.kind {
                ModelKind::Text => agent.model.as_ref(),
                ModelKind::Image => None,
            }
        }
    };
    let agent_fallbacks = agent_model.and_then(|m| m.fallbacks.as_deref());
    let payload_fallbacks = request.cron.as_ref().and_then(|c| c.fallbacks.as_deref());
    let (source, requested) = if let Some(m) = &request.one_shot {
        (SelectionSource::CliOverride, m.clone())
    } else if let Some(o) = &request.session_override {
        (o.source.selection_source(), o.model.clone())
    } else if let Some(c) = &request.cron {
        (SelectionSource::CronPayload, c.model.clone())
    } else if let Some(m) = agent_model {
        // An agent model object without `primary` keeps the configured
        // primary but still decides the fallbacks.
        let primary = m.primary.as_ref().or(configured.primary.as_ref());
        let primary = primary.ok_or(ChainError::NoModel { kind: request.kind })?;
        (SelectionSource::AgentPrimary, primary.clone())
    } else {
        let primary = configured
            .primary
            .as_ref()
            .ok_or(ChainError::NoModel { kind: request.kind })?;
        (SelectionSource::ConfiguredDefault, primary.clone())
    };
    Ok(Selection {
        source,
        requested,
        agent_fallbacks,
        payload_fallbacks,
    })
}

fn configured_slot(config: &GatewayConfig, kind: ModelKind) -> &ModelConfig {
    match kind {
        ModelKind::Text => &config.agents.model,
        ModelKind::Image => &config.agents.image_model,
    }
}

/// The chain a policy resolves to (step 2 of the essay).
enum Plan<'a> {
    Strict,
    Override(FallbackList, &'a [ModelRef]),
    Configured,
}

fn resolve<'a>(target: SelectionTarget, sel: &Selection<'a>) -> Option<Plan<'a>> {
    match target {
        SelectionTarget::Strict => Some(Plan::Strict),
        SelectionTarget::Fallbacks(FallbackList::Configured) => Some(Plan::Configured),
        SelectionTarget::Fallbacks(list @ FallbackList::Agent) => {
            sel.agent_fallbacks.map(|l| Plan::Override(list, l))
        }
        SelectionTarget::Fallbacks(list @ FallbackList::Payload) => {
            sel.payload_fallbacks.map(|l| Plan::Override(list, l))
        }
    }
}

/// Builds the candidate chain of a run (SPEC R3, R4).
pub fn build_chain(
    config: &GatewayConfig,
    policies: &SelectionPolicies,
    request: &ChainRequest,
) -> Result<CandidateChain, ChainError> {
    let sel = select(config, request)?;
    let policy = policies.get(sel.source);
    let plan = resolve(policy.target, &sel)
        .or_else(|| resolve(policy.otherwise, &sel))
        .unwrap_or(Plan::Strict);

    let mut chain = ChainBuilder::new(sel.requested.clone());
    let (list, strict) = match plan {
        Plan::Strict => (None, true),
        // R4.6: exactly requested + override; empty means strict and no
        // hidden primary.
        Plan::Override(list, models) => {
            let why = match list {
                FallbackList::Agent => Why::AgentFallback,
                FallbackList::Payload => Why::PayloadFallback,
                FallbackList::Configured => Why::ConfiguredFallback,
            };
            for m in models {
                chain.push(m, why);
            }
            if models.is_empty() {
                (None, true)
            } else {
                (Some(list), false)
            }
        }
        // R4.2–R4.5: configured fallbacks whatever the requested provider,
        // then the primary last.
        Plan::Configured => {
            let slot = configured_slot(config, request.kind);
            for m in slot.fallbacks.iter().flatten() {
                chain.push(m, Why::ConfiguredFallback);
            }
            if let Some(p) = &slot.primary {
                chain.push(p, Why::ConfiguredPrimaryAppended);
            }
            (Some(FallbackList::Configured), false)
        }
    };
    Ok(CandidateChain {
        source: sel.source,
        policy,
        list,
        strict,
        candidates: chain.candidates,
        duplicates: chain.duplicates,
    })
}

/// Appends candidates, dropping repeats of a `provider/model` (R4.2).
struct ChainBuilder {
    candidates: Vec<Candidate>,
    duplicates: Vec<Candidate>,
}

impl ChainBuilder {
    fn new(requested: ModelRef) -> Self {
        ChainBuilder {
            candidates: vec![Candidate {
                model: requested,
                why: Why::Requested,
            }],
            duplicates: Vec::new(),
        }
    }

    fn push(&mut self, model: &ModelRef, why: Why) {
        let c = Candidate {
            model: model.clone(),
            why,
        };
        if self.candidates.iter().any(|x| x.model == *model) {
            self.duplicates.push(c);
        } else {
            self.candidates.push(c);
        }
    }
}

#[cfg(test)]
mod tests;
