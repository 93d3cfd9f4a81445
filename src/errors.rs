//! Every error the library returns, in one place: typed, documented, and
//! each with a `Display` that an operator can act on (file:line:col where
//! there is a file; never a secret). This module only re-exports: each
//! error is defined beside the stage that returns it.
//!
//! | error | returned by |
//! |---|---|
//! | [`RulesError`] | [`Rules::build`](crate::Rules::build) |
//! | [`StreamError`] | [`stream::classify`](crate::stream::classify): the input or the output failed |
//! | [`Diagnostics`] | inside [`RulesError::Invalid`]: every problem in the rules |
//! | [`ConfigError`] | [`GatewayConfig::load`](crate::GatewayConfig::load), [`GatewayConfig::parse`](crate::GatewayConfig::parse) |
//! | [`RunError`] | [`Runner::run`](crate::Runner::run): the run did not produce an answer |
//! | [`AttemptError`] | what an attempt closure returns for one candidate |
//! | [`StoreError`] | a [`Store`](crate::Store) that cannot read or write its state |
//! | [`ModelRefError`] | [`ModelRef::parse`](crate::ModelRef::parse) |
//! | [`RoutingError`] | [`Runner::new`](crate::Runner::new): `auth.profiles` that cannot be routed |
//! | [`PolicyError`] | [`CooldownPolicy::hours`](crate::CooldownPolicy::hours) and friends: a length that is not one |

pub use crate::auth::{PolicyError, RoutingError};
pub use crate::classify::stream::StreamError;
pub use crate::classify::RulesError;
pub use crate::config::ConfigError;
pub use crate::diag::{did_you_mean, Code, Diagnostic, Diagnostics, Note, Severity};
pub use crate::policy::ModelRefError;
pub use crate::run::{AttemptError, RunError};
pub use crate::source::{FileId, SourceFile, SourceMap, Span};
pub use crate::store::StoreError;
