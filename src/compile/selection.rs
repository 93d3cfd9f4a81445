//! Selection-source policies (SPEC R3): which fallback list a run may use,
//! decided by *why* its model was selected.
//!
//! ```text
//! selection agent_primary => fallbacks agent else strict
//! ```
//!
//! reads: a run whose model is an agent's primary uses that agent's own
//! `fallbacks` list when the agent's model object has one (an empty list
//! makes the run strict), and is strict when it has none.

use std::fmt;

/// Why the model of a run was selected (SPEC R3 table).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SelectionSource {
    /// `agents.defaults.model.primary`.
    ConfiguredDefault,
    /// `agents.list[].model`.
    AgentPrimary,
    /// A session override written by the runner (`modelOverrideSource: "auto"`).
    AutoOverride,
    /// `/model`, the model picker, `sessions.patch` (`modelOverrideSource: "user"`).
    UserOverride,
    /// An old session entry with `modelOverride` but no source.
    LegacyOverride,
    /// A cron job's `payload.model`.
    CronPayload,
    /// A provider/model given for one invocation.
    CliOverride,
}

impl SelectionSource {
    /// Every source, in the order of the SPEC R3 table.
    pub const ALL: [SelectionSource; 7] = [
        SelectionSource::ConfiguredDefault,
        SelectionSource::AgentPrimary,
        SelectionSource::AutoOverride,
        SelectionSource::UserOverride,
        SelectionSource::LegacyOverride,
        SelectionSource::CronPayload,
        SelectionSource::CliOverride,
    ];

    /// The name used in rules files.
    pub fn name(self) -> &'static str {
        match self {
            SelectionSource::ConfiguredDefault => "configured_default",
            SelectionSource::AgentPrimary => "agent_primary",
            SelectionSource::AutoOverride => "auto_override",
            SelectionSource::UserOverride => "user_override",
            SelectionSource::LegacyOverride => "legacy_override",
            SelectionSource::CronPayload => "cron_payload",
            SelectionSource::CliOverride => "cli_override",
        }
    }

    /// The source named `s` in a rules file, or `None` for an unknown name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }

    fn index(self) -> usize {
        Self::ALL.iter().position(|x| *x == self).expect("in ALL")
    }
}

impl fmt::Display for SelectionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fallback list a selection may use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FallbackList {
    /// `agents.defaults.model.fallbacks` (or `imageModel.fallbacks`).
    Configured,
    /// The agent's own `agents.list[].model.fallbacks`.
    Agent,
    /// The cron job's `payload.fallbacks`.
    Payload,
}

impl FallbackList {
    /// Every fallback list.
    pub const ALL: [FallbackList; 3] = [
        FallbackList::Configured,
        FallbackList::Agent,
        FallbackList::Payload,
    ];

    /// The name used in rules files (`fallbacks agent`).
    pub fn name(self) -> &'static str {
        match self {
            FallbackList::Configured => "configured",
            FallbackList::Agent => "agent",
            FallbackList::Payload => "payload",
        }
    }

    /// The list named `s` in a rules file, or `None` for an unknown name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }
}

/// Where a selection's fallbacks come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum SelectionTarget {
    /// No fallback: the selected model or the error (R3.1).
    Strict,
    /// Use this list. An empty list (explicitly configured) means strict.
    Fallbacks(FallbackList),
}

impl fmt::Display for SelectionTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SelectionTarget::Strict => f.write_str("strict"),
            SelectionTarget::Fallbacks(l) => write!(f, "fallbacks {}", l.name()),
        }
    }
}

/// The policy of one selection source.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SelectionPolicy {
    /// Where the fallbacks come from when that list is configured (R3).
    pub target: SelectionTarget,
    /// Applies when the target's list is not configured at all (absent, as
    /// opposed to an explicit empty list). Defaults to strict.
    pub otherwise: SelectionTarget,
}

/// The policies of every source; a source nobody declared is strict.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SelectionPolicies {
    by_source: [Option<SelectionPolicy>; 7],
}

impl SelectionPolicies {
    /// The policy declared for `source`, or strict when none was declared.
    pub fn get(&self, source: SelectionSource) -> SelectionPolicy {
        self.by_source[source.index()].unwrap_or(SelectionPolicy {
            target: SelectionTarget::Strict,
            otherwise: SelectionTarget::Strict,
        })
    }

    pub(crate) fn set(&mut self, source: SelectionSource, policy: SelectionPolicy) {
        self.by_source[source.index()] = Some(policy);
    }
}
