//! failover: a policy engine for LLM model failover.
//!
//! Operators describe what a provider error *means* and which selections may
//! fall back in `.rules` files; the engine compiles them into one matcher.
//! Read the stages in pipeline order: [`syntax`] → [`compile`] →
//! [`classify`]. [`load`] finds rules files (embedded defaults, operator
//! directories); [`diag`] renders problems.

pub mod auth;
pub mod classify;
pub mod cli;
pub mod compile;
pub mod config;
pub mod diag;
pub mod golden;
pub mod load;
pub mod policy;
pub mod run;
pub mod store;
pub mod syntax;

pub use classify::{Body, Classification, Engine, ProviderError};
