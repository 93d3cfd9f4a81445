//! Reason declarations: what the executor does when an error gets a reason.
//!
//! The engine knows no reason by name except [`UNCLASSIFIED`] (the label it
//! gives an error no rule matches). Everything else — which reasons fail
//! over, cool a profile down, disable it, are transient, are model-scoped —
//! comes from `reason` declarations, so the executor stays generic and the
//! default ruleset carries the SPEC's semantics.

use std::fmt;

/// The reason of an error that no rule matched (SPEC R2.4, R9.7). Must be
/// declared by some layer (the defaults do), so its behaviour is explicit.
pub(crate) const UNCLASSIFIED: &str = "unclassified";

/// Index of a reason in a [`crate::compile::Ruleset`].
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct ReasonId(pub u32);

/// A disabled lane: a long backoff that blocks the whole profile
/// (`disabledUntil` / `disabledReason`), SPEC R8 and R16.4.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DisableLane {
    /// 5 h base, doubling, 24 h cap (`auth.cooldowns.billing*`).
    Billing,
    /// 10 min base, doubling, 60 min cap.
    AuthPermanent,
}

impl DisableLane {
    /// Both lanes.
    pub const ALL: [DisableLane; 2] = [DisableLane::Billing, DisableLane::AuthPermanent];

    /// The lane's name in the rules (`disable billing`).
    pub fn name(self) -> &'static str {
        match self {
            DisableLane::Billing => "billing",
            DisableLane::AuthPermanent => "auth_permanent",
        }
    }

    /// The lane of a name.
    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// Which profile-rotation budget applies before model fallback (SPEC R8.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum RotationBudget {
    /// `auth.cooldowns.overloadedProfileRotations` (+ `overloadedBackoffMs`).
    Overloaded,
    /// `auth.cooldowns.rateLimitedProfileRotations`.
    RateLimited,
}

impl RotationBudget {
    pub const ALL: [RotationBudget; 2] = [RotationBudget::Overloaded, RotationBudget::RateLimited];

    pub fn name(self) -> &'static str {
        match self {
            RotationBudget::Overloaded => "overloaded",
            RotationBudget::RateLimited => "rate_limited",
        }
    }

    pub fn from_name(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.name() == s)
    }
}

/// The declared behaviour of a reason. Each field is one clause of the
/// `reason NAME { … }` declaration.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReasonBehaviour {
    /// `failover` (true) or `stop` (false): does the run continue to the
    /// next profile/candidate (SPEC R9)?
    pub failover: bool,
    /// `cooldown`: the profile enters the exponential cooldown (R7).
    pub cooldown: bool,
    /// `disable LANE`: the profile is disabled on a long backoff lane (R8, R16.4).
    pub disable: Option<DisableLane>,
    /// `transient`: cooling siblings may still be probed (R10.4).
    pub transient: bool,
    /// `scope model`: the cooldown is the failing model's own window (`modelCooldowns`, R7.3).
    pub model_scoped: bool,
    /// `skip provider`: every model of the provider is skipped (R10.1).
    pub skip_provider: bool,
    /// `handoff NAME`: the error is handed back to another subsystem
    /// (`compaction` for context overflow, R9.2) instead of falling back.
    pub handoff: Option<String>,
    /// `rotations BUDGET`: how many same-provider profile rotations are
    /// allowed before model fallback (R8.5).
    pub rotations: Option<RotationBudget>,
    /// `probe free`: a failed cooldown probe with this reason does not use
    /// up the provider's one transient-probe slot (R16.3).
    pub probe_free: bool,
    /// `advance model`: another profile of the same provider cannot help
    /// (e.g. the model does not exist): go straight to the next candidate.
    pub advance_model: bool,
}

/// One declared reason.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct ReasonDef {
    pub name: String,
    pub behaviour: ReasonBehaviour,
}

impl fmt::Display for ReasonBehaviour {
    /// Canonical clause list, as it would be written in a declaration.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = vec![if self.failover { "failover" } else { "stop" }.into()];
        if self.cooldown {
            parts.push("cooldown".into());
        }
        if let Some(l) = self.disable {
            parts.push(format!("disable {}", l.name()));
        }
        if self.transient {
            parts.push("transient".into());
        }
        if self.model_scoped {
            parts.push("scope model".into());
        }
        if self.skip_provider {
            parts.push("skip provider".into());
        }
        if let Some(h) = &self.handoff {
            parts.push(format!("handoff {h}"));
        }
        if let Some(r) = self.rotations {
            parts.push(format!("rotations {}", r.name()));
        }
        if self.probe_free {
            parts.push("probe free".into());
        }
        if self.advance_model {
            parts.push("advance model".into());
        }
        write!(f, "{}", parts.join("; "))
    }
}

/// The behaviour words, with the argument each takes (for help text).
pub(crate) const BEHAVIOUR_WORDS: &[(&str, Option<&str>)] = &[
    ("failover", None),
    ("stop", None),
    ("cooldown", None),
    ("disable", Some("billing | auth_permanent")),
    ("transient", None),
    ("scope", Some("model | profile")),
    ("skip", Some("provider")),
    ("handoff", Some("compaction")),
    ("rotations", Some("overloaded | rate_limited")),
    ("probe", Some("free")),
    ("advance", Some("model")),
];
