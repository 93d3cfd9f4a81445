//! Every error the gateway's public API returns, typed. Each `Display` is
//! what an operator reads (`failover serve` prints it as it is): the
//! diagnostics of a config or rules file with their positions, a state
//! backend that cannot be opened, an address that cannot be bound. None
//! holds a secret.

use std::fmt;

/// Why a gateway could not be built, started or reloaded.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The config, its upstreams or the rules have problems: their
    /// diagnostics, rendered (file:line:col, codes, help). A reload with
    /// this error keeps the set that was serving.
    Invalid {
        /// The rendered diagnostics.
        diagnostics: String,
    },
    /// A state backend cannot be opened (an unreachable Redis, a database
    /// that cannot be created).
    State {
        /// What failed, with the backend named (never a password).
        message: String,
    },
    /// The listen address cannot be bound.
    Listen {
        /// The address as given.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// A worker thread or its runtime could not start.
    Worker {
        /// The worker's number.
        lane: usize,
        /// Why.
        source: std::io::Error,
    },
}

impl Error {
    pub(crate) fn invalid(diagnostics: impl Into<String>) -> Self {
        Error::Invalid {
            diagnostics: diagnostics.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Invalid { diagnostics } => f.write_str(diagnostics),
            Error::State { message } => f.write_str(message),
            Error::Listen { addr, source } => {
                write!(f, "error: cannot listen on `{addr}`: {source}")
            }
            Error::Worker { lane, source } => {
                write!(f, "error: cannot start worker {lane}: {source}")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Listen { source, .. } | Error::Worker { source, .. } => Some(source),
            _ => None,
        }
    }
}
