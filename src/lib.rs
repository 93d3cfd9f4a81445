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
//! [`time`], [`retry`] and, with the `serve` feature, [`gateway`].
//! `ARCHITECTURE.md` walks through the stages behind it; `docs/tracing.md`
//! lists the spans and events a run emits.
//!
//! # Features
//!
//! - `cli` (default): the `failover` command line; turns on `serve`.
//! - `serve`: the OpenAI/Anthropic-compatible HTTP gateway; turns on
//!   `sqlite` and `redis`.
//! - `sqlite`: `state::SqliteStore`, the embedded state database.
//! - `redis`: `state::RedisStore`, state shared by several replicas.
//! - `test-util`: hooks for this crate's own tests; not for production.

#![warn(missing_docs)]
// Without the command line, the helpers only it calls (renderers, report
// tables) are unused; the default build still warns about real dead code.
#![cfg_attr(not(feature = "cli"), allow(dead_code, unused_imports))]

/// Declares a stage module: private, or public (and hidden from the docs)
/// with `test-util`, so the crate's own integration tests can reach the
/// internals without them being part of the public API.
macro_rules! stage {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[cfg(feature = "test-util")]
        #[doc(hidden)]
        #[allow(missing_docs)]
        pub mod $name;
        $(#[$m])*
        #[cfg(not(feature = "test-util"))]
        mod $name;
    };
}

// The stages, in the order data flows (ARCHITECTURE.md): each imports
// only modules declared above it (tests/module_graph.rs checks it).
stage!(fsio);
stage!(redact);
stage!(yaml);
stage!(source);
stage!(diag);
stage!(syntax);
stage!(compile);
stage!(load);
stage!(classify);
stage!(model_ref);
stage!(store);
stage!(auth);
stage!(config);
stage!(policy);
stage!(run);
stage!(golden);
stage!(field);
stage!(
    #[cfg(feature = "serve")]
    serve
);
#[cfg(feature = "cli")]
mod lsp;

/// The `failover` command line (the binary's `main`); not a library API.
#[cfg(feature = "cli")]
#[doc(hidden)]
pub mod cli;

pub mod errors;

pub use classify::{Body, Classification, Engine, Explanation, ProviderError, Rules, Scratch};

pub use config::{
    AgentConfig, AgentsConfig, AuthConfig, ConfigProblem, Format, GatewayConfig, LoadedConfig,
    ModelConfig, StateBackend, StateConfig,
};
pub use policy::{CronPayload, ModelKind, ModelRef};

pub use auth::{CooldownPolicy, ProfileMeta};
pub use compile::DisableLane;
pub use redact::Redactor;
pub use run::{
    session_hash, Attempt, AttemptError, AttemptOutcome, AttemptRecord, Decision, DecisionKind,
    FallbackSummaryError, Notice, ProviderFailure, RunError, RunOutput, RunRequest, Runner,
    StateHealth, StepOutcome, SurfacedError, SKIP_TTL_ENV, TRACING_TARGET,
};
pub use store::{AsyncStore, Store};

/// Time, injected: the wall clock a run reads and the sleeper it waits
/// on. Tests use [`ManualClock`](time::ManualClock) and
/// [`VirtualSleeper`](time::VirtualSleeper) on paused tokio time.
pub mod time {
    pub use crate::run::{Sleep, Sleeper, TokioClock, TokioSleeper, VirtualSleeper};
    pub use crate::store::{Clock, ManualClock, SystemClock};
}

/// State backends: where the routing state (usage stats, cooldowns,
/// disables, `lastGood`, `order`) and the session overrides live, beside
/// the secrets in `auth-profiles.json` (SPEC R5). Every backend
/// implements both [`Store`] (whole documents) and [`AsyncStore`]
/// (per-record updates).
pub mod state {
    pub use crate::run::MemoryStore;
    #[cfg(feature = "redis")]
    pub use crate::store::RedisStore;
    #[cfg(feature = "sqlite")]
    pub use crate::store::SqliteStore;
    pub use crate::store::{AsyncStore, Store};
    pub use crate::store::{
        AuthProfiles, AuthState, Credential, CredentialKind, Extra, FileStore, Problem, Profile,
        Secret, SecretRef, SessionEntry, SessionStore, StatePaths, StoreExt, SyncFace, UsageStats,
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

/// The HTTP gateway behind `failover serve`, to run inside your own
/// process.
#[cfg(feature = "serve")]
pub mod gateway {
    pub use crate::serve::reload::{Sources, Stores};
    pub use crate::serve::{start, Gateway, Options, Running};
}
