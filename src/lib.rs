//! failover: a policy engine for LLM model failover.
//!
//! Operators describe what a provider error *means* and which selections may
//! fall back in `.rules` files; the engine compiles them into one matcher.
//! Read the stages in pipeline order: [`syntax`] → [`compile`] →
//! [`classify`] → [`policy`] (with [`config`]) → [`auth`] → [`store`] →
//! [`run`]; [`serve`] is the HTTP gateway around them. [`load`] finds rules files (embedded defaults, operator
//! directories); [`diag`] renders problems; [`golden`] runs golden cases;
//! [`cli`] is the thin command line.
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

pub mod auth;
pub mod classify;
pub mod cli;
pub mod compile;
pub mod config;
pub mod diag;
pub mod field;
pub mod fsio;
pub mod golden;
pub mod load;
pub mod lsp;
pub mod model_ref;
pub mod policy;
pub mod redact;
pub mod run;
pub mod serve;
pub mod store;
pub mod syntax;
pub mod yaml;

pub use classify::{Body, Classification, Engine, ProviderError};
