//! failover: a policy engine for LLM model failover.
//!
//! Operators describe what a provider error *means* and which selections may
//! fall back in `.rules` files; the engine compiles them into one matcher.
//! Read the stages in pipeline order: [`syntax`] → [`compile`] → [`classify`].

pub mod diag;
pub mod syntax;
