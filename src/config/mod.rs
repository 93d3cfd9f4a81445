//! The gateway config file: the keys of SPEC R15 that model failover reads.
//!
//! The file is YAML (JSON is accepted too; a `.json` file gets JSON syntax
//! errors). It is read in two steps so that every problem is reported with
//! the key path an operator can search for, and a line and column:
//!
//! 1. parse the text into an untyped tree (`serde_yaml::Value`); a syntax
//!    error stops here, with the position the parser gives;
//! 2. walk the tree with a typed reader that knows the R15 keys, records
//!    each problem with its path (`agents.list[2].model.fallbacks`), keeps
//!    going, and reports *all* problems at once. Unknown keys inside the
//!    sections it reads (`agents`, `auth`) are warnings; other top-level
//!    sections (`gateway`, `channels`, …) belong to the gateway and are
//!    left alone unless the name is a near miss (`agnets`). Wrong types and
//!    malformed model references are errors.
//!
//! The untyped tree has no positions, so problems are placed afterwards,
//! all at once: one more read of the text's parser events
//! ([`crate::yaml::places`]) finds the line and column of every problem's
//! path (or of its last key, for an unknown key). It costs one read, and
//! only when there are problems.
//!
//! Each problem is a [`ConfigProblem`] with a stable code (E021 unreadable,
//! E022 not YAML/JSON, E023 a value that cannot be used; W003 unknown key,
//! W004 a secret in the file, W005 a likely mistake), rendered as a
//! [`Diagnostic`] by the renderer of rules
//! problems; [`ConfigError`] holds them with the text they point into.
//!
//! The parts: [`model`](GatewayConfig) holds the typed values, `read` the
//! reader over the tree, `problem` what is reported ([`ConfigProblem`]).
//!
//! Example: with
//!
//! ```yaml
//! agents:
//!   list:
//!     - id: coder
//!       model: { primary: anthropic/claude-opus-4-6, fallbacks: openai/gpt-5.2 }
//! ```
//!
//! the reader reports `agents.list[0].model.fallbacks: expected a list of
//! "provider/model" strings, found a string` at line 4, column 63.
//!
//! The config holds metadata only (SPEC R5.3): an auth profile's provider,
//! mode and e-mail, never keys or tokens. A secret found under
//! `auth.profiles` is dropped with a warning, and its value is never echoed.
//! More broadly, no message quotes a value from the file that looks like a
//! credential, nor a source line that may hold one (SPEC R16.11): the path,
//! line and column say where the problem is instead.

mod model;
mod problem;
mod read;
#[cfg(test)]
mod tests;

use std::fmt;
use std::path::Path;

use serde::de::IgnoredAny;
use serde_yaml::Value;

use crate::diag::{Code, Diagnostic};
use crate::fsio::{display_name, plain_io, read_regular, too_large};
use crate::redact::scrub_quoted;
use crate::syntax::SourceMap;
use crate::yaml::{strip_position, Step};

pub use crate::store::{StateBackend, StateConfig};
pub use model::{AgentConfig, AgentsConfig, AuthConfig, GatewayConfig, ModelConfig};
use problem::Seg;
pub use problem::{render_problems, ConfigProblem};

use read::Reader;

/// A gateway config is a few kilobytes; a file over this size is refused
/// before parsing rather than held in memory as a tree several times its
/// size (a 5 MB file is a mistake, e.g. a log pointed at by `--config`).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How the text is parsed; chosen from the file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// YAML (`.yaml`, `.yml`, and any other name).
    Yaml,
    /// JSON (`.json`).
    Json,
}

impl Format {
    /// `.json` files are JSON; everything else is YAML (which also reads
    /// JSON, with YAML-worded syntax errors).
    pub fn from_path(path: &Path) -> Format {
        match path.extension().and_then(|e| e.to_str()) {
            Some(e) if e.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Yaml,
        }
    }
}

/// A config that was read, with its warnings.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct LoadedConfig {
    /// The typed values.
    pub config: GatewayConfig,
    /// Problems that did not stop the config from being used (W003–W005).
    pub warnings: Vec<ConfigProblem>,
    /// The name shown in messages and the text, for rendering warnings.
    pub name: String,
    /// The file's text (warnings point into it).
    pub text: String,
}

/// A config that could not be read: every problem found (errors and
/// warnings, each with its code), or a file that could not be opened
/// (one E021 problem).
///
/// Its `Display` is the rendering an operator sees: each problem as a
/// diagnostic (`error[E023]: path: message`, ` --> file:line:col`, the
/// line with a caret, help), then `N errors, M warnings in `file``; an
/// unreadable file is one line. [`ConfigError::to_diagnostics`] gives the
/// problems as [`Diagnostic`]s, to report them
/// beside rules problems (as [`Diagnostics`](crate::errors::Diagnostics)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ConfigError {
    /// The name shown in messages.
    pub name: String,
    /// The file's text (empty when it could not be read).
    pub text: String,
    /// Every problem found, errors and warnings.
    pub problems: Vec<ConfigProblem>,
    /// The file could not be read at all: one line says it all.
    unreadable: bool,
}

impl ConfigError {
    fn io(name: String, message: String) -> Self {
        ConfigError {
            name,
            text: String::new(),
            problems: vec![ConfigProblem::whole_file(Code::E021, message)],
            unreadable: true,
        }
    }

    /// How many of the problems are errors.
    pub fn errors(&self) -> usize {
        self.problems.iter().filter(|p| p.is_error()).count()
    }

    /// The problems as diagnostics, on the config's text added to
    /// `sources` under its name.
    pub fn to_diagnostics(&self, sources: &mut SourceMap) -> Vec<Diagnostic> {
        let file = sources.add(self.name.as_str(), self.text.as_str());
        self.problems
            .iter()
            .map(|p| p.to_diagnostic(sources, file))
            .collect()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unreadable {
            for p in &self.problems {
                writeln!(f, "error[{}]: {}", p.code.as_str(), p.message)?;
            }
            return Ok(());
        }
        f.write_str(&render_problems(&self.problems, &self.name, &self.text))
    }
}

impl std::error::Error for ConfigError {}

impl GatewayConfig {
    /// Reads a config file (YAML, or JSON for `.json` files).
    pub fn load(path: &Path) -> Result<LoadedConfig, ConfigError> {
        let name = display_name(path);
        if std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
            return Err(ConfigError::io(
                name.clone(),
                format!("config `{name}` is a directory, not a file"),
            ));
        }
        // Refused by its size before anything is read.
        let bytes = read_regular(path, MAX_CONFIG_BYTES).map_err(|e| {
            let message = if too_large(&e).is_some() {
                format!(
                    "config `{name}` is larger than {} KiB; a gateway config is a few kilobytes, is this the right file?",
                    MAX_CONFIG_BYTES / 1024
                )
            } else {
                format!("cannot read config `{name}`: {}", plain_io(&e))
            };
            ConfigError::io(name.clone(), message)
        })?;
        let text = String::from_utf8(bytes).map_err(|e| {
            ConfigError::io(
                name.clone(),
                format!(
                    "config `{name}` is not UTF-8 text (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        Self::parse(&text, Format::from_path(path), &name)
    }

    /// Reads config text; `name` is used in messages.
    pub fn parse(text: &str, format: Format, name: &str) -> Result<LoadedConfig, ConfigError> {
        let fail = |problems: Vec<ConfigProblem>| ConfigError {
            name: name.to_string(),
            text: text.to_string(),
            problems,
            unreadable: false,
        };
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(fail(vec![ConfigProblem::whole_file(
                Code::E021,
                format!(
                "config `{name}` is larger than {} KiB; a gateway config is a few kilobytes, is this the right file?",
                MAX_CONFIG_BYTES / 1024
            ))]));
        }
        let mut root = parse_tree(text, format).map_err(|p| fail(vec![*p]))?;
        // `<<: *anchor` merge keys are YAML's way to share a block; apply
        // them so shared fallback lists work. A bad merge is a type error.
        if let Err(e) = root.apply_merge() {
            let (message, at) = yaml_message(&e);
            let mut p = ConfigProblem::whole_file(
                Code::E022,
                format!("cannot apply a `<<` merge key: {message}"),
            );
            (p.line, p.column) = (at.map(|a| a.0), at.map(|a| a.1));
            return Err(fail(vec![p]));
        }
        let mut reader = Reader::default();
        let config = reader.root(&root);
        let mut problems = reader.problems;
        place(text, &mut problems);
        // Errors first, then by position, so the first line says what is
        // wrong.
        problems.sort_by_key(|p| (p.severity(), p.line.unwrap_or(usize::MAX), p.column));
        if problems.iter().any(|p| p.is_error()) {
            Err(fail(problems))
        } else {
            Ok(LoadedConfig {
                config,
                warnings: problems,
                name: name.to_string(),
                text: text.to_string(),
            })
        }
    }
}

fn parse_tree(text: &str, format: Format) -> Result<Value, Box<ConfigProblem>> {
    if format == Format::Json {
        // Syntax errors worded for JSON; the tree is then read as YAML
        // (JSON is YAML's subset), so positions can be found the same way.
        if let Err(e) = serde_json::from_str::<IgnoredAny>(text) {
            let at = Some((e.line(), e.column()));
            let mut p = ConfigProblem::whole_file(
                Code::E022,
                format!(
                    "invalid JSON: {}",
                    strip_position(&scrub_quoted(&e.to_string()), at)
                ),
            );
            (p.line, p.column) = (Some(e.line()), Some(e.column()));
            return Err(Box::new(p));
        }
    }
    if let Err(refused) = crate::yaml::guard(text) {
        let mut p = ConfigProblem::whole_file(Code::E022, format!("invalid YAML: {refused}"));
        (p.line, p.column) = (Some(refused.line), Some(refused.column));
        return Err(Box::new(p));
    }
    serde_yaml::from_str::<Value>(text).map_err(|e| {
        let (message, at) = yaml_message(&e);
        let mut p = ConfigProblem::whole_file(Code::E022, format!("invalid YAML: {message}"));
        (p.line, p.column) = (at.map(|a| a.0), at.map(|a| a.1));
        Box::new(p)
    })
}

/// A YAML error's words, without what it quotes from the file or its
/// position (returned beside).
fn yaml_message(e: &serde_yaml::Error) -> (String, Option<(usize, usize)>) {
    let at = e.location().map(|l| (l.line(), l.column()));
    (strip_position(&scrub_quoted(&e.to_string()), at), at)
}

/// Gives each problem with a key path and no position yet the line and
/// column of its node, all found in one read of `text` (for problems made
/// with [`ConfigProblem::at_keys`]).
pub fn place_problems(text: &str, problems: &mut [ConfigProblem]) {
    place(text, problems);
}

/// Gives each problem with a key path the line and column of its node (or
/// key), all found in one read of `text`.
fn place(text: &str, problems: &mut [ConfigProblem]) {
    let unplaced: Vec<usize> = (0..problems.len())
        .filter(|&i| problems[i].line.is_none() && !problems[i].segments.is_empty())
        .collect();
    if unplaced.is_empty() {
        return;
    }
    let paths: Vec<Vec<Step>> = unplaced
        .iter()
        .map(|&i| {
            problems[i]
                .segments
                .iter()
                .map(|s| match s {
                    Seg::Key(k) => Step::Key(k),
                    Seg::Index(n) => Step::Index(*n),
                })
                .collect()
        })
        .collect();
    let wanted: Vec<(&[Step], bool)> = unplaced
        .iter()
        .zip(&paths)
        .map(|(&i, path)| (path.as_slice(), problems[i].at_key))
        .collect();
    let found = crate::yaml::places(text, &wanted);
    for (&i, at) in unplaced.iter().zip(found) {
        if let Some((line, column)) = at {
            (problems[i].line, problems[i].column) = (Some(line), Some(column));
        }
    }
}
