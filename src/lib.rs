//! failover: a policy engine for LLM model failover.
//!
//! Operators describe what a provider error *means* and which selections may
//! fall back in `.rules` files; the engine compiles them into one matcher
//! ([`Engine`]). A [`Runner`] walks a run's candidate chain (profile
//! rotation, cooldowns, billing disables, probes, session overrides) and
//! asks the engine what every failure means; its state lives in a
//! [`Store`] (the backends of [`state`], or your own).
//!
//! ```
//! use failover::{Engine, ProviderError};
//!
//! let engine = Engine::builtin();
//! let c = engine.classify(
//!     &ProviderError::message("Key limit exceeded")
//!         .with_status(403)
//!         .with_provider("openrouter"),
//! );
//! assert_eq!((c.reason, c.rule), ("billing", Some("billing.openrouter.key_limit")));
//! assert!(c.failover);
//! ```
//!
//! Operator rules are loaded with [`Rules`]; every problem in them is a
//! [`Diagnostic`](errors::Diagnostic) with a stable code and a position:
//!
//! ```
//! # fn main() -> Result<(), failover::errors::RulesError> {
//! let engine = failover::Rules::new()
//!     .source("ops.rules", "rule billing.ops when status == 402 => billing")
//!     .build()?;
//! assert_eq!(engine.classify(&failover::ProviderError::message("Payment required").with_status(402)).reason, "billing");
//! # Ok(()) }
//! ```
//!
//! The public face is this page: the types re-exported here, [`errors`],
//! [`stream`] (the JSONL contract of `failover classify`), [`state`],
//! [`time`], [`retry`], [`routing`], [`selection`], [`rules`],
//! [`scenario`], [`golden`] and [`field`]. The HTTP gateway is the
//! `failover-gateway` crate, built on this one.
//! `ARCHITECTURE.md` walks through the stages behind it; `docs/tracing.md`
//! lists the spans and events a run emits.
//!
//! # Features
//!
//! - `sqlite` (default): `state::SqliteStore`, the embedded state database.
//! - `redis` (default): `state::RedisStore`, state shared by several
//!   replicas.
//!
//! `default-features = false` builds the engine and the runner alone. The
//! gateway is the crate `failover-gateway`, the command line
//! `failover-cli`.

#![deny(missing_docs)]

// The text of the rules, diagnostics and redaction live in
// `failover-syntax`, below this crate; named here as the stages they are.
use failover_syntax::rules as syntax;
use failover_syntax::{diag, fsio, redact, source};

// The stages, in the order data flows (ARCHITECTURE.md): each imports
// only modules declared above it (crates/cli/tests/it/module_graph.rs
// checks it).
mod yaml;
mod compile;
mod load;
pub mod evidence;
mod classify;
mod model_ref;
mod store;
mod auth;
mod config;
mod policy;
mod run;
pub mod golden;
pub mod field;
pub mod learn;

pub mod errors;

// The crate's own tests that reach its internals (src/tests/); the ones
// on the public API alone are tests/it.
#[cfg(test)]
mod tests;
// The benchmarks' support files (benches/support/), which some of those
// tests share, name the crate `failover::`.
#[cfg(test)]
extern crate self as failover;

pub use classify::{
    Body, Classification, Decider, Engine, Explanation, ProviderError, Rules, Scratch,
};

pub use config::{
    place_problems, render_problems, AgentConfig, AgentsConfig, AuthConfig, ConfigProblem, Format,
    GatewayConfig, LoadedConfig, ModelConfig, StateBackend, StateConfig, MAX_CONFIG_BYTES,
};
pub use policy::{CronPayload, ModelKind, ModelRef};

pub use auth::{CooldownPolicy, ProfileMeta};
pub use compile::DisableLane;
pub use redact::Redactor;
pub use run::{
    session_hash, Attempt, AttemptError, AttemptOutcome, AttemptRecord, Cause, Decision,
    DecisionKind, FallbackSummaryError, Notice, ProviderFailure, RetryBudget, RunError, RunOutput,
    RunRequest, Runner, StateHealth, StepOutcome, SurfacedError, SKIP_TTL_ENV, TRACING_TARGET,
};
pub use store::{AsyncStore, Store};

/// Time, injected: the wall clock a run reads and the sleeper it waits
/// on. Tests use [`ManualClock`](time::ManualClock) and
/// [`VirtualSleeper`](time::VirtualSleeper) on paused tokio time.
pub mod time {
    pub use crate::run::{Sleep, Sleeper, TokioClock, TokioSleeper, VirtualSleeper};
    pub use crate::store::{
        civil_from_days, format_span, format_utc, Clock, ManualClock, SystemClock, DAY_MS, HOUR_MS,
        MINUTE_MS, SECOND_MS,
    };
}

/// State backends: where the routing state (usage stats, cooldowns,
/// disables, `lastGood`, `order`) and the session overrides live, beside
/// the secrets in `auth-profiles.json` (SPEC R5). Every backend
/// implements both [`Store`] (whole documents) and [`AsyncStore`]
/// (per-record updates); [`open`](state::open) opens the one a config's
/// `state:` block names.
pub mod state {
    pub use crate::store::MemoryStore;
    #[cfg(feature = "redis")]
    pub use crate::store::RedisStore;
    #[cfg(feature = "sqlite")]
    pub use crate::store::SqliteStore;
    pub use crate::store::{
        backend_of, edit_profile, edit_session, normalize_provider, off_runtime,
        open_backend as open, open_docs, open_docs_read_only, provider_of_id, Opened, ProfileEdit,
        SessionEdit, SharedTables, StateBackend, StateConfig, StoreFuture, DEFAULT_AGENT,
    };
    pub use crate::store::{AsyncStore, Store};
    pub use crate::store::{
        AuthProfiles, AuthState, Credential, CredentialKind, Extra, FileStore, ModelCooldown,
        ModelWindow, Problem, Profile, Secret, SecretRef, SessionEntry, SessionStore, StatePaths,
        StoreExt, SyncFace, UsageStats,
    };
    /// The gateway's client keys (SPEC R18): records by hash, in the
    /// backend the config names.
    pub mod keys {
        pub use crate::store::{
            glob, open_keys as open, ClientKey, KeyRefusal, KeyStore, KeyTable, KeyUsage, Recent,
        };
    }
}

/// Which profile of a provider a run tries, in what order, and what blocks
/// one now (SPEC R6, R7, R8, R10): the questions `failover status` asks of
/// a state, as pure functions over its documents.
pub mod routing {
    pub use crate::auth::{block_for, order_profiles, AuthRouting, Block, Excluded, ProfileOrder};
    pub use crate::run::routing_of;
}

/// Which candidate chain a run may walk (SPEC R3, R4): the selection
/// source of a request and the policy the rules give it.
pub mod selection {
    pub use crate::policy::{
        build_chain, Candidate, CandidateChain, ChainError, ChainRequest, CronPayload,
        FallbackList, ModelKind, ModelRef, OverrideKind, SelectionPolicies, SelectionPolicy,
        SelectionSource, SelectionTarget, SessionOverride, Why,
    };
}

/// The rules as operator tools read them: directories of `.rules` files
/// as layers over the embedded defaults, compiled with every diagnostic
/// ([`Build`](rules::Build)); the default ruleset's text.
pub mod rules {
    pub use crate::classify::render_explanation;
    pub use crate::compile::{Build, ReasonBehaviour};
    pub use crate::load::{
        build, build_layers, build_unlinted, files_with_suffix, read_layer, InputError,
        OperatorLayer, RulesBytes, DEFAULT_RULES,
    };
}

/// The SDK retry-after cap (SPEC R7.5): for an embedder whose provider SDK
/// retries by itself, whether to let it wait out a `Retry-After` or to
/// surface the error at once so failover runs.
pub mod retry {
    pub use crate::run::{
        requested_wait, should_wait, RetryCap, RetryDecision, DEFAULT_RETRY_MAX_WAIT,
        MAX_REQUESTED_WAIT, RETRY_MAX_WAIT_ENV,
    };
}

pub use classify::stream;
pub use run::scenario;
