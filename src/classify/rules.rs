//! [`Rules`]: loading operator rules into an [`Engine`], for embedders.
//!
//! The command line's `--rules DIR … [--no-defaults]` in library form:
//! operator layers in the order given (the first wins), then the embedded
//! defaults. Every problem comes back as one typed error, never printed.

use std::path::PathBuf;

use super::Engine;
use crate::diag::Diagnostics;
use crate::load::{self, OperatorLayer, RulesBytes};

/// Where an engine's rules come from: operator layers (directories or
/// files in memory), highest priority first, then the embedded defaults.
///
/// ```
/// # fn main() -> Result<(), failover::errors::RulesError> {
/// use failover::{ProviderError, Rules};
///
/// let engine = Rules::new()
///     .source("acme.rules", r#"
///         provider acme {
///           rule billing.acme.quota_gone
///             when message has "quota gone"
///             => billing
///         }
///     "#)
///     .build()?;
/// let c = engine.classify(&ProviderError::message("Quota gone.").with_provider("acme"));
/// assert_eq!((c.reason, c.rule), ("billing", Some("billing.acme.quota_gone")));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Rules {
    layers: Vec<Source>,
    defaults: bool,
    lints: bool,
}

#[derive(Debug, Clone)]
enum Source {
    Dir(PathBuf),
    Memory(OperatorLayer<Vec<u8>>),
}

impl Default for Rules {
    fn default() -> Self {
        Rules::new()
    }
}

impl Rules {
    /// The embedded defaults alone, until layers are added.
    pub fn new() -> Self {
        Rules {
            layers: Vec::new(),
            defaults: true,
            lints: false,
        }
    }

    /// Adds a directory: every `.rules` file in it, recursively, in path
    /// order, as one layer (like `--rules DIR`).
    pub fn dir(mut self, path: impl Into<PathBuf>) -> Self {
        self.layers.push(Source::Dir(path.into()));
        self
    }

    /// Adds one rules file held in memory as a layer of its own; `name`
    /// is what diagnostics call it.
    pub fn source(mut self, name: impl Into<String>, text: impl Into<String>) -> Self {
        let name = name.into();
        let file = (name.clone(), text.into().into_bytes());
        self.layers.push(Source::Memory((name, vec![file])));
        self
    }

    /// Leaves the embedded defaults out (like `--no-defaults`).
    pub fn without_defaults(mut self) -> Self {
        self.defaults = false;
        self
    }

    /// Also runs the lints (W001, W002: slow or dead rules), as `failover
    /// check` does; their warnings are on [`Engine::warnings`].
    pub fn with_lints(mut self) -> Self {
        self.lints = true;
        self
    }

    /// Reads and compiles the rules. A directory that cannot be read is
    /// [`RulesError::Read`]; rules with errors are [`RulesError::Invalid`]
    /// with every diagnostic.
    pub fn build(self) -> Result<Engine, RulesError> {
        let mut layers: Vec<OperatorLayer<RulesBytes>> = Vec::with_capacity(self.layers.len());
        for source in self.layers {
            layers.push(match source {
                Source::Dir(dir) => {
                    load::read_layer(&dir).map_err(|e| RulesError::Read { message: e.0 })?
                }
                Source::Memory((name, files)) => (
                    name,
                    files
                        .into_iter()
                        .map(|(f, b)| (f, RulesBytes::Read(b)))
                        .collect(),
                ),
            });
        }
        let lints = if self.lints {
            crate::compile::Lints::Run
        } else {
            crate::compile::Lints::Skip
        };
        let build = load::build_layers_with(layers, self.defaults, lints);
        Engine::from_build(build).map_err(RulesError::Invalid)
    }
}

/// Operator rules that cannot be used.
#[derive(Debug)]
#[non_exhaustive]
pub enum RulesError {
    /// A rules directory or file could not be read: it does not exist, is
    /// not a directory, holds no `.rules` files, or permission was denied.
    Read {
        /// What went wrong, naming the path.
        message: String,
    },
    /// The rules were read and have errors: every diagnostic, with its
    /// stable code (`E001` …, listed in docs/rules.md, "Diagnostics") and position.
    Invalid(Diagnostics),
}

impl std::fmt::Display for RulesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RulesError::Read { message } => f.write_str(message),
            RulesError::Invalid(d) => write!(f, "the rules have errors:\n{d}"),
        }
    }
}

impl std::error::Error for RulesError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            RulesError::Read { .. } => None,
            RulesError::Invalid(d) => Some(d),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ProviderError;

    /// Operator layers come first (DESIGN.md "Layers"): an operator rule
    /// wins over the default it overlaps.
    #[test]
    fn an_operator_layer_wins_over_the_defaults() {
        let e = Rules::new()
            .source(
                "mine.rules",
                "rule billing.mine when message has \"rate limit\" => billing",
            )
            .build()
            .unwrap();
        let c = e.classify(&ProviderError::message("Rate limit reached").with_status(429));
        assert_eq!((c.reason, c.rule), ("billing", Some("billing.mine")));
        let d = Rules::new().build().unwrap();
        let c = d.classify(&ProviderError::message("Rate limit reached").with_status(429));
        assert_eq!(c.reason, "rate_limit");
    }

    /// Bad rules are one typed error that renders every diagnostic with
    /// its code and file:line:col; nothing is printed.
    #[test]
    fn bad_rules_are_a_typed_error_with_positions() {
        let err = Rules::new()
            .source("bad.rules", "rule x when message has \"a\" => rate_limt\n")
            .build()
            .unwrap_err();
        let RulesError::Invalid(d) = &err else {
            panic!("{err:?}")
        };
        assert_eq!(d.error_count(), 1);
        assert_eq!(d.as_slice()[0].code.as_str(), "E002");
        let shown = err.to_string();
        assert!(shown.contains("bad.rules:1:"), "{shown}");
        assert!(shown.contains("did you mean `rate_limit`"), "{shown}");
    }

    /// A directory that does not exist is a read error naming it.
    #[test]
    fn a_missing_directory_is_a_read_error() {
        let err = Rules::new()
            .dir("/nonexistent/failover-rules")
            .build()
            .unwrap_err();
        assert!(matches!(err, RulesError::Read { .. }), "{err:?}");
        assert!(
            err.to_string().contains("/nonexistent/failover-rules"),
            "{err}"
        );
    }

    /// Issue 35: an empty directory fails `build()` too, saying why (not a
    /// silent engine of the defaults alone).
    #[test]
    fn an_empty_directory_is_a_read_error() {
        let dir = std::env::temp_dir().join(format!("failover-empty-rules-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let err = Rules::new().dir(&dir).build().unwrap_err();
        let _ = std::fs::remove_dir(&dir);
        assert!(matches!(err, RulesError::Read { .. }), "{err:?}");
        assert!(err.to_string().contains("holds no `.rules` files"), "{err}");
    }
}
