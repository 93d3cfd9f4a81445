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
//! The untyped tree has no positions, so a problem is placed afterwards:
//! the text is deserialized once more by a visitor that walks to the
//! problem's path and raises an error there, and the YAML deserializer
//! stamps that error with the node's line and column. It costs one parse
//! per problem, and only when there are problems (capped by
//! [`LOCATED_PROBLEMS`]).
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

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::path::Path;

use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_yaml::{Mapping, Value};

use crate::auth::{CooldownPolicy, CredentialKind, ProfileMeta};
use crate::diag::did_you_mean;
use crate::load::{plain_io, read_regular, too_large};
use crate::policy::model_ref::shown;
use crate::policy::ModelRef;
use crate::redact::{looks_like_secret, may_hold_secret, secret_key_name};
use crate::syntax::display_name;

/// A gateway config is a few kilobytes; a file over this size is refused
/// before parsing rather than held in memory as a tree several times its
/// size (a 5 MB file is a mistake, e.g. a log pointed at by `--config`).
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A quoted source line is cut after this many characters.
const SHOWN_LINE_CHARS: usize = 120;

/// Problems past this many are still reported, but without a line number:
/// placing each one re-reads the file.
pub const LOCATED_PROBLEMS: usize = 32;

/// The parts of the gateway config that model failover reads.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GatewayConfig {
    pub agents: AgentsConfig,
    pub auth: AuthConfig,
    /// `state`: where routing state and session overrides live; `None`
    /// (no block) is the embedded database under `--state DIR`.
    pub state: Option<StateConfig>,
}

/// A state backend (`state.backend`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateBackend {
    /// The embedded SQLite database under `--state DIR` (the default).
    Sqlite,
    /// Redis at `state.url`, keys under `state.prefix`.
    Redis,
    /// The JSON files of the original layout (SPEC R5).
    Files,
}

impl StateBackend {
    pub const NAMES: [&'static str; 3] = ["sqlite", "redis", "files"];

    pub fn from_name(s: &str) -> Option<Self> {
        match s {
            "sqlite" => Some(StateBackend::Sqlite),
            "redis" => Some(StateBackend::Redis),
            "files" => Some(StateBackend::Files),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            StateBackend::Sqlite => "sqlite",
            StateBackend::Redis => "redis",
            StateBackend::Files => "files",
        }
    }
}

/// `state: { backend: redis, url: "redis://127.0.0.1:6379/0", prefix: "failover:" }`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StateConfig {
    pub backend: StateBackend,
    /// Redis only: the server (`redis://[user:password@]host:port/db`).
    pub url: Option<String>,
    /// Redis only: the key prefix (default `failover:`).
    pub prefix: Option<String>,
}

/// `agents`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AgentsConfig {
    /// `agents.defaults.model`: the configured default text model.
    pub model: ModelConfig,
    /// `agents.defaults.imageModel`: image routing, its own chain.
    pub image_model: ModelConfig,
    /// `agents.list`, in file order.
    pub list: Vec<AgentConfig>,
}

/// A primary model and its fallbacks. `fallbacks: None` means the key is
/// absent, which differs from an explicit empty list for agents (SPEC R3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ModelConfig {
    pub primary: Option<ModelRef>,
    pub fallbacks: Option<Vec<ModelRef>>,
}

/// One entry of `agents.list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentConfig {
    pub id: String,
    /// `model`: a string is a primary without fallbacks (strict), an object
    /// may carry its own `fallbacks`. `None` when the agent sets no model.
    pub model: Option<ModelConfig>,
}

/// `auth`: routing metadata only (SPEC R5.3).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AuthConfig {
    /// `auth.profiles`, in file order.
    pub profiles: Vec<ProfileMeta>,
    /// `auth.order`: provider id (lower-cased) → profile ids. An explicitly
    /// empty list is kept: it disables the provider.
    pub order: BTreeMap<String, Vec<String>>,
    /// `auth.cooldowns`, validated as it was read.
    pub cooldowns: CooldownPolicy,
}

impl AgentsConfig {
    pub fn agent(&self, id: &str) -> Option<&AgentConfig> {
        self.list.iter().find(|a| a.id == id)
    }
}

impl AuthConfig {
    pub fn profile(&self, id: &str) -> Option<&ProfileMeta> {
        self.profiles.iter().find(|p| p.id == id)
    }
}

/// How the text is parsed; chosen from the file name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Yaml,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
}

/// A problem in the config file, with the key path and, when it could be
/// placed, the line and column (1-based).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigProblem {
    pub severity: Severity,
    /// `agents.list[2].model.fallbacks`; empty for whole-file problems.
    pub path: String,
    pub message: String,
    pub help: Option<String>,
    pub line: Option<usize>,
    pub column: Option<usize>,
    segments: Vec<Seg>,
    /// Place the problem at the last key rather than at its value (used
    /// for unknown keys).
    at_key: bool,
    /// Never quote the source line: the problem is about a value that is
    /// not shown (an unknown credential mode), whatever its shape.
    conceal_line: bool,
}

impl ConfigProblem {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    fn whole_file(message: String) -> Self {
        ConfigProblem {
            severity: Severity::Error,
            path: String::new(),
            message,
            help: None,
            line: None,
            column: None,
            segments: Vec::new(),
            at_key: false,
            conceal_line: false,
        }
    }

    /// `error: path: message`, then ` --> file:line:col`, the source line
    /// with a caret, and the help.
    pub fn render(&self, file_name: &str, text: &str) -> String {
        let mut out = String::new();
        let kind = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        if self.path.is_empty() {
            let _ = writeln!(out, "{kind}: {}", self.message);
        } else {
            let _ = writeln!(out, "{kind}: {}: {}", self.path, self.message);
        }
        match (self.line, self.column) {
            (Some(line), Some(col)) => {
                let _ = writeln!(out, " --> {file_name}:{line}:{col}");
                if let Some(src) = text.lines().nth(line - 1) {
                    let gutter = line.to_string();
                    let pad = " ".repeat(gutter.len());
                    let _ = writeln!(out, "{pad} |");
                    if self.conceal_line || may_hold_secret(src) {
                        // Quoting the line back would print the secret.
                        let _ = writeln!(out, "{gutter} | (line not shown: it may hold a secret)");
                    } else {
                        // Long lines (one-line JSON) are cut; the caret
                        // stays where the column points when it fits.
                        let src_shown: String = src.chars().take(SHOWN_LINE_CHARS).collect();
                        let lead: String = src_shown
                            .chars()
                            .take(col.saturating_sub(1))
                            .map(|c| if c == '\t' { '\t' } else { ' ' })
                            .collect();
                        let _ = writeln!(out, "{gutter} | {src_shown}");
                        if col <= SHOWN_LINE_CHARS {
                            let _ = writeln!(out, "{pad} | {lead}^");
                        }
                    }
                }
            }
            _ => {
                let _ = writeln!(out, " --> {file_name}");
            }
        }
        if let Some(help) = &self.help {
            let _ = writeln!(out, "  = help: {help}");
        }
        out
    }
}

/// A config that was read, with its warnings.
#[derive(Clone, Debug)]
pub struct LoadedConfig {
    pub config: GatewayConfig,
    pub warnings: Vec<ConfigProblem>,
    /// The name shown in messages and the text, for rendering warnings.
    pub name: String,
    pub text: String,
}

/// A config that could not be read: every problem found (errors and
/// warnings), or a file that could not be opened.
#[derive(Clone, Debug)]
pub struct ConfigError {
    pub name: String,
    pub text: String,
    pub problems: Vec<ConfigProblem>,
    /// The file could not be read at all: one line says it all.
    unreadable: bool,
}

impl ConfigError {
    fn io(name: String, message: String) -> Self {
        ConfigError {
            name,
            text: String::new(),
            problems: vec![ConfigProblem::whole_file(message)],
            unreadable: true,
        }
    }

    pub fn errors(&self) -> usize {
        self.problems.iter().filter(|p| p.is_error()).count()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.unreadable {
            for p in &self.problems {
                writeln!(f, "error: {}", p.message)?;
            }
            return Ok(());
        }
        f.write_str(&render_problems(&self.problems, &self.name, &self.text))
    }
}

impl std::error::Error for ConfigError {}

/// Renders problems followed by a one-line count, like `failover check`.
pub fn render_problems(problems: &[ConfigProblem], name: &str, text: &str) -> String {
    let mut out = String::new();
    for p in problems {
        out.push_str(&p.render(name, text));
        out.push('\n');
    }
    let errors = problems.iter().filter(|p| p.is_error()).count();
    let warnings = problems.len() - errors;
    let _ = writeln!(
        out,
        "{errors} error{}, {warnings} warning{} in `{name}`",
        if errors == 1 { "" } else { "s" },
        if warnings == 1 { "" } else { "s" },
    );
    out
}

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
            return Err(fail(vec![ConfigProblem::whole_file(format!(
                "config `{name}` is larger than {} KiB; a gateway config is a few kilobytes, is this the right file?",
                MAX_CONFIG_BYTES / 1024
            ))]));
        }
        let mut root = parse_tree(text, format).map_err(|p| fail(vec![*p]))?;
        // `<<: *anchor` merge keys are YAML's way to share a block; apply
        // them so shared fallback lists work. A bad merge is a type error.
        if let Err(e) = root.apply_merge() {
            let mut p = ConfigProblem::whole_file(format!(
                "cannot apply a `<<` merge key: {}",
                strip_position(&scrub_parser_message(&e.to_string()))
            ));
            if let Some(loc) = e.location() {
                (p.line, p.column) = (Some(loc.line()), Some(loc.column()));
            }
            return Err(fail(vec![p]));
        }
        let mut reader = Reader::default();
        let config = reader.root(&root);
        let mut problems = reader.problems;
        for p in problems.iter_mut().take(LOCATED_PROBLEMS) {
            if p.line.is_none() && !p.segments.is_empty() {
                if let Some((line, col)) = locate(text, &p.segments, p.at_key) {
                    (p.line, p.column) = (Some(line), Some(col));
                }
            }
        }
        // Errors first, then by position, so the first line says what is
        // wrong.
        problems.sort_by_key(|p| (p.severity, p.line.unwrap_or(usize::MAX), p.column));
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
            let mut p = ConfigProblem::whole_file(format!(
                "invalid JSON: {}",
                strip_position(&scrub_parser_message(&e.to_string()))
            ));
            (p.line, p.column) = (Some(e.line()), Some(e.column()));
            return Err(Box::new(p));
        }
    }
    if let Err(refused) = crate::yaml::guard(text) {
        let mut p = ConfigProblem::whole_file(format!("invalid YAML: {refused}"));
        (p.line, p.column) = (Some(refused.line), Some(refused.column));
        return Err(Box::new(p));
    }
    serde_yaml::from_str::<Value>(text).map_err(|e| {
        let mut p = ConfigProblem::whole_file(format!(
            "invalid YAML: {}",
            strip_position(&scrub_parser_message(&e.to_string()))
        ));
        if let Some(loc) = e.location() {
            (p.line, p.column) = (Some(loc.line()), Some(loc.column()));
        }
        Box::new(p)
    })
}

/// Parser messages carry the position (` at line L column C`), which is
/// shown separately, so it is cut; a second position, in the context
/// (`…, while parsing a block mapping at line 3 column 5`), says where the
/// unclosed block began and stays, worded as such. Callers pass the
/// message through [`scrub_parser_message`] first, so no value is shown.
fn strip_position(msg: &str) -> String {
    let msg = msg.trim_end_matches('.');
    let (main, context) = match msg.split_once(", while ") {
        Some((m, c)) => (m, Some(c)),
        None => (msg, None),
    };
    let cut = |s: &str| -> String {
        if let Some(i) = s.rfind(" at line ") {
            let tail = &s[i + " at line ".len()..];
            if tail
                .split(' ')
                .all(|w| w == "column" || w.chars().all(|c| c.is_ascii_digit()))
            {
                return s[..i].to_string();
            }
        }
        s.to_string()
    };
    let mut out = cut(main);
    if let Some(c) = context {
        out.push_str(", while ");
        out.push_str(&c.replace(" at line ", " that starts at line "));
    }
    out
}

/// One step of a key path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// A key path as shown: keys shaped like credentials (a profile id that is
/// itself a pasted key) are masked like values (SPEC R16.11).
fn path_string(segs: &[Seg]) -> String {
    let mut out = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) if looks_like_secret(k) => {
                let _ = write!(
                    out,
                    "[{}]",
                    serde_json::Value::String(crate::redact::redact(k).into_owned())
                );
            }
            Seg::Key(k) if is_plain_key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Key(k) => {
                let _ = write!(out, "[{}]", serde_json::Value::String(shown(k)));
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The type of a value in operator words.
fn found(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A value from the file for a message, or `None` when it looks like a
/// credential ([`looks_like_secret`]): the message then says what is wrong
/// without it.
fn quotable(value: &str) -> Option<String> {
    (!looks_like_secret(value)).then(|| shown(value))
}

/// A parser message with what it quotes from the file taken out: the YAML
/// parser quotes a scalar it cannot read as its tag says (`invalid value:
/// string "…", expected an integer`), and a duplicate key by name. A
/// quoted value is always cut; a quoted key only when it looks like a
/// secret.
fn scrub_parser_message(msg: &str) -> String {
    let mut out = String::new();
    let mut rest = msg;
    while let Some(open) = rest.find('"') {
        let body = &rest[open + 1..];
        let mut escaped = false;
        let close = body.char_indices().find_map(|(j, c)| {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => return Some(j),
                _ => {}
            }
            None
        });
        let Some(close) = close else { break };
        out.push_str(&rest[..open]);
        let quoted = &body[..close];
        if out.ends_with("string ") || looks_like_secret(quoted) {
            out.push_str("\"…\"");
        } else {
            out.push('"');
            out.push_str(quoted);
            out.push('"');
        }
        rest = &body[close + 1..];
    }
    out.push_str(rest);
    out
}

#[derive(Default)]
struct Reader {
    problems: Vec<ConfigProblem>,
    path: Vec<Seg>,
}

impl Reader {
    fn push(&mut self, severity: Severity, message: String, help: Option<String>, at_key: bool) {
        self.problems.push(ConfigProblem {
            severity,
            path: path_string(&self.path),
            message,
            help,
            line: None,
            column: None,
            segments: self.path.clone(),
            at_key,
            conceal_line: false,
        });
    }

    fn error(&mut self, message: impl Into<String>) {
        self.push(Severity::Error, message.into(), None, false);
    }

    fn error_help(&mut self, message: impl Into<String>, help: impl Into<String>) {
        self.push(Severity::Error, message.into(), Some(help.into()), false);
    }

    fn warn(&mut self, message: impl Into<String>) {
        self.push(Severity::Warning, message.into(), None, false);
    }

    /// Runs `f` with `seg` appended to the current path.
    fn at<T>(&mut self, seg: Seg, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(seg);
        let out = f(self);
        self.path.pop();
        out
    }

    fn key<T>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        self.at(Seg::Key(key.to_string()), f)
    }

    /// A mapping, or an error (`null` counts as an empty mapping: `auth:`
    /// with nothing under it).
    fn mapping<'v>(&mut self, v: &'v Value) -> Option<&'v Mapping> {
        match v {
            Value::Mapping(m) => Some(m),
            Value::Null => None,
            other => {
                self.error(format!(
                    "expected a mapping of keys, found {}",
                    found(other)
                ));
                None
            }
        }
    }

    /// Warns about every key of `map` not in `known`; returns the
    /// string-keyed entries.
    fn entries<'v>(&mut self, map: &'v Mapping, known: &[&str]) -> Vec<(&'v str, &'v Value)> {
        let mut out = Vec::new();
        for (k, v) in map {
            let Some(name) = key_text(k) else {
                self.warn(format!("a key of {} is not a name; ignored", found(k)));
                continue;
            };
            if known.contains(&name) {
                out.push((name, v));
                continue;
            }
            let help = suggest(name, known)
                .map(|m| format!("did you mean `{m}`?"))
                .unwrap_or_else(|| format!("known keys here: {}", known.join(", ")));
            self.unknown_key(name, help);
        }
        out
    }

    /// Warns that key `name` is not read (`help`: a near miss, or the
    /// known keys).
    fn unknown_key(&mut self, name: &str, help: String) {
        self.at(Seg::Key(name.to_string()), |r| {
            r.push(
                Severity::Warning,
                "unknown key, ignored".to_string(),
                Some(help),
                true,
            )
        });
    }

    fn root(&mut self, v: &Value) -> GatewayConfig {
        let mut config = GatewayConfig::default();
        let map = match v {
            Value::Mapping(m) => m,
            Value::Null => {
                self.warn("the config is empty");
                return config;
            }
            other => {
                self.error(format!(
                    "the config must be a mapping of keys, found {}",
                    found(other)
                ));
                return config;
            }
        };
        for (k, v) in self.entries_lenient(map, &["agents", "auth", "state"]) {
            match k {
                "agents" => config.agents = self.key(k, |r| r.agents(v)),
                "auth" => config.auth = self.key(k, |r| r.auth(v)),
                "state" => config.state = self.key(k, |r| r.state(v)),
                _ => unreachable!("filtered by entries"),
            }
        }
        config
    }

    /// The top level of a gateway config holds many sections this tool does
    /// not read (`gateway`, `channels`, …); they are not worth a warning,
    /// but a near miss of a section it does read (`agnets`) is.
    fn entries_lenient<'v>(
        &mut self,
        map: &'v Mapping,
        known: &[&str],
    ) -> Vec<(&'v str, &'v Value)> {
        let mut out = Vec::new();
        for (k, v) in map {
            let Some(name) = key_text(k) else { continue };
            if known.contains(&name) {
                out.push((name, v));
            } else if let Some(m) = suggest(name, known) {
                self.unknown_key(name, format!("did you mean `{m}`?"));
            }
        }
        out
    }

    fn agents(&mut self, v: &Value) -> AgentsConfig {
        let mut out = AgentsConfig::default();
        let Some(map) = self.mapping(v) else {
            return out;
        };
        for (k, v) in self.entries(map, &["defaults", "list"]) {
            self.key(k, |r| match k {
                "defaults" => {
                    let Some(map) = r.mapping(v) else { return };
                    for (k, v) in r.entries(map, &["model", "imageModel"]) {
                        r.key(k, |r| {
                            let slot = r.model_config(v, false);
                            match k {
                                "model" => out.model = slot.unwrap_or_default(),
                                _ => out.image_model = slot.unwrap_or_default(),
                            }
                        });
                    }
                }
                _ => out.list = r.agent_list(v),
            });
        }
        out
    }

    fn agent_list(&mut self, v: &Value) -> Vec<AgentConfig> {
        let items = match v {
            Value::Sequence(items) => items,
            Value::Null => return Vec::new(),
            other => {
                self.error(format!(
                    "expected a list of agents (`- id: …`), found {}",
                    found(other)
                ));
                return Vec::new();
            }
        };
        let mut out: Vec<AgentConfig> = Vec::new();
        // The list index of each agent in `out`, for messages.
        let mut indices: Vec<usize> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            self.at(Seg::Index(i), |r| {
                let Some(map) = r.mapping(item) else {
                    if item.is_null() {
                        r.error("expected an agent (`id: …`), found nothing");
                    }
                    return;
                };
                let mut id = None;
                let mut model = None;
                for (k, v) in r.entries(map, &["id", "model"]) {
                    r.key(k, |r| match k {
                        "id" => match v {
                            Value::String(s) if !s.trim().is_empty() => id = Some(s.clone()),
                            Value::String(_) => r.error("agent id is empty"),
                            other => r.error(format!(
                                "expected an agent id string, found {}",
                                found(other)
                            )),
                        },
                        _ => model = r.model_config(v, true),
                    });
                }
                let Some(id) = id else {
                    if !map.contains_key("id") {
                        r.error("agent has no `id`");
                    }
                    return;
                };
                if let Some(first) = out.iter().position(|a| a.id.eq_ignore_ascii_case(&id)) {
                    let first = indices[first];
                    r.key("id", |r| {
                        r.error(match quotable(&id) {
                            Some(id) => format!(
                                "agent id `{id}` is used twice (first at `agents.list[{first}]`)"
                            ),
                            None => format!(
                                "this agent id is used twice (first at `agents.list[{first}]`); it is not shown, as it looks like a secret"
                            ),
                        })
                    });
                    return;
                }
                out.push(AgentConfig { id, model });
                indices.push(i);
            });
        }
        out
    }

    /// A model slot: a `provider/model` string (a primary without
    /// fallbacks), or `{primary, fallbacks}`.
    fn model_config(&mut self, v: &Value, agent: bool) -> Option<ModelConfig> {
        match v {
            Value::Null => None,
            Value::String(_) => Some(ModelConfig {
                primary: self.model_ref(v),
                fallbacks: None,
            }),
            Value::Mapping(map) => {
                let mut out = ModelConfig::default();
                for (k, v) in self.entries(map, &["primary", "fallbacks"]) {
                    self.key(k, |r| match k {
                        "primary" => out.primary = r.model_ref(v),
                        _ => out.fallbacks = r.model_list(v),
                    });
                }
                if agent && map.is_empty() {
                    self.warn("empty model object: the agent uses the configured default");
                }
                Some(out)
            }
            other => {
                self.error(format!(
                    "expected a \"provider/model\" string or `{{primary, fallbacks}}`, found {}",
                    found(other)
                ));
                None
            }
        }
    }

    fn model_ref(&mut self, v: &Value) -> Option<ModelRef> {
        match v {
            Value::String(s) => match ModelRef::parse(s) {
                Ok(m) => Some(m),
                // The parser's message quotes the value.
                Err(_) if looks_like_secret(s) => {
                    self.error(
                        "expected a \"provider/model\" string; the value is not shown, as it looks like a secret",
                    );
                    None
                }
                Err(e) => {
                    self.error(e.to_string());
                    None
                }
            },
            Value::Null => None,
            other => {
                self.error(format!(
                    "expected a \"provider/model\" string, found {}",
                    found(other)
                ));
                None
            }
        }
    }

    /// A list of model references; duplicates are warned about and kept
    /// (the chain builder drops them, SPEC R4.2).
    fn model_list(&mut self, v: &Value) -> Option<Vec<ModelRef>> {
        let items = match v {
            Value::Sequence(items) => items,
            Value::Null => return None,
            Value::String(s) => {
                let example = if let Some(s) = quotable(s).filter(|_| ModelRef::parse(s).is_ok()) {
                    format!("write `[{s}]`, or one `- provider/model` line per fallback")
                } else {
                    "write `[provider/model, …]`, or one `- provider/model` line per fallback"
                        .to_string()
                };
                self.error_help(
                    "expected a list of \"provider/model\" strings, found a string",
                    example,
                );
                return None;
            }
            other => {
                self.error(format!(
                    "expected a list of \"provider/model\" strings, found {}",
                    found(other)
                ));
                return None;
            }
        };
        let mut out: Vec<ModelRef> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            self.at(Seg::Index(i), |r| {
                if item.is_null() {
                    r.error("expected a \"provider/model\" string, found nothing");
                    return;
                }
                let Some(m) = r.model_ref(item) else { return };
                if let Some(first) = out.iter().position(|x| *x == m) {
                    r.warn(match quotable(m.as_str()) {
                        Some(m) => format!(
                            "`{m}` is listed twice (first at index {first}); the repeat is ignored"
                        ),
                        None => format!(
                            "this model is listed twice (first at index {first}); the repeat is ignored"
                        ),
                    });
                }
                out.push(m);
            });
        }
        Some(out)
    }

    fn auth(&mut self, v: &Value) -> AuthConfig {
        let mut out = AuthConfig::default();
        let Some(map) = self.mapping(v) else {
            return out;
        };
        for (k, v) in self.entries(map, &["profiles", "order", "cooldowns"]) {
            self.key(k, |r| match k {
                "profiles" => out.profiles = r.profiles(v),
                "order" => out.order = r.order(v),
                _ => out.cooldowns = r.cooldowns(v),
            });
        }
        out
    }

    /// `state` (issue 13): `backend` is required; `url` only and always
    /// with `redis`; `prefix` only with `redis`.
    fn state(&mut self, v: &Value) -> Option<StateConfig> {
        if matches!(v, Value::Null) {
            return None;
        }
        let map = self.mapping(v)?;
        let (mut backend, mut url, mut prefix) = (None, None, None);
        for (k, v) in self.entries(map, &["backend", "url", "prefix"]) {
            self.key(k, |r| match k {
                "backend" => {
                    if let Some(name) = r.string(v, "a backend name") {
                        match StateBackend::from_name(&name) {
                            Some(b) => backend = Some(b),
                            None => r.error(format!(
                                "unknown state backend `{name}`: expected `sqlite`, `redis` or `files`"
                            )),
                        }
                    }
                }
                "url" => url = r.string(v, "a URL such as \"redis://127.0.0.1:6379/0\""),
                _ => prefix = r.string(v, "a key prefix"),
            });
        }
        let Some(backend) = backend else {
            self.error("`state` needs a `backend`: `sqlite`, `redis` or `files`");
            return None;
        };
        match backend {
            StateBackend::Redis => {
                match &url {
                    None => self.error("`state.backend: redis` needs a `url`"),
                    Some(u) if !(u.starts_with("redis://") || u.starts_with("unix://")) => self
                        .key("url", |r| {
                            r.error("expected a `redis://` URL (or `unix://` for a socket)")
                        }),
                    _ => {}
                }
                if prefix.as_deref() == Some("") {
                    self.key("prefix", |r| r.error("the prefix must not be empty"));
                }
            }
            _ => {
                for (name, set) in [("url", url.is_some()), ("prefix", prefix.is_some())] {
                    if set {
                        self.key(name, |r| {
                            r.error(format!(
                                "`{name}` applies only to `backend: redis`; remove it"
                            ))
                        });
                    }
                }
            }
        }
        Some(StateConfig {
            backend,
            url,
            prefix,
        })
    }

    fn profiles(&mut self, v: &Value) -> Vec<ProfileMeta> {
        let Some(map) = self.mapping(v) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in map {
            let Some(id) = key_text(k) else {
                self.error(format!("a profile id must be a name, found {}", found(k)));
                continue;
            };
            if let Some(p) = self.key(id, |r| r.profile(id, v)) {
                out.push(p);
            }
        }
        out
    }

    fn profile(&mut self, id: &str, v: &Value) -> Option<ProfileMeta> {
        let map = self.mapping(v)?;
        const META: [&str; 4] = ["provider", "mode", "type", "email"];
        const MODES: [&str; 3] = ["api_key", "oauth", "token"];
        // A key whose name says it holds a secret (`apiKey`, `accessToken`,
        // `client-secret`) is not an unknown key but a secret in the wrong
        // place. The value is never read, stored or shown.
        let mut meta = Mapping::new();
        for (k, v) in map {
            match key_text(k) {
                Some(name) if !META.contains(&name) && secret_key_name(name) => {
                    self.key(name, |r| {
                        r.push(
                            Severity::Warning,
                            "secrets do not belong in the config file; this value is ignored".into(),
                            Some(
                                "keep keys and tokens in `<state>/agents/<agentId>/agent/auth-profiles.json` (SPEC R5.1)"
                                    .into(),
                            ),
                            true,
                        )
                    });
                }
                _ => {
                    meta.insert(k.clone(), v.clone());
                }
            }
        }
        let mut provider = None;
        let mut mode = None;
        let mut email = None;
        for (k, v) in self.entries(&meta, &META) {
            self.key(k, |r| match k {
                "provider" => provider = r.string(v, "a provider id"),
                "mode" | "type" => {
                    let Some(s) = r.string(v, "`api_key`, `oauth` or `token`") else {
                        return;
                    };
                    mode = match s.as_str() {
                        "api_key" => Some(CredentialKind::ApiKey),
                        "oauth" => Some(CredentialKind::OAuth),
                        "token" => Some(CredentialKind::Token),
                        // The value is never echoed, whatever its shape: a
                        // mode field is where a pasted credential lands, and
                        // no shape test can tell a secret from a word (a
                        // short lower-case word may be a password). The
                        // message says what is allowed instead, and a near
                        // miss (`OAuth`, `apikey`) names the known mode,
                        // which shows nothing of the value.
                        other => {
                            let help = suggest(other.trim(), &MODES)
                                .map(|m| format!("did you mean `{m}`?"))
                                .unwrap_or_else(|| {
                                    "the value is not shown, in case it is a secret".to_string()
                                });
                            r.error_help(
                                "unknown credential mode: expected `api_key`, `oauth` or `token`",
                                help,
                            );
                            // The source line would show the value.
                            if let Some(p) = r.problems.last_mut() {
                                p.conceal_line = true;
                            }
                            None
                        }
                    };
                }
                _ => email = r.string(v, "an e-mail address"),
            });
        }
        let Some(provider) = provider else {
            if !map.contains_key("provider") {
                self.error_help(
                    "profile has no `provider`",
                    format!("add `provider: {}`", id.split(':').next().unwrap_or("…")),
                );
            }
            return None;
        };
        let provider = provider.trim().to_ascii_lowercase();
        let prefix = id.split(':').next().unwrap_or("");
        if !id.contains(':') || !prefix.eq_ignore_ascii_case(&provider) {
            // `provider` is a value from the file; the id is a key, shown
            // in the path too.
            self.warn(match (quotable(id), quotable(&provider)) {
                (Some(id), Some(provider)) => format!(
                    "profile id `{id}` does not start with `{provider}:` (ids are `provider:default` or `provider:<email>`)"
                ),
                _ => "profile id does not start with the profile's provider and `:` (ids are `provider:default` or `provider:<email>`); the value is not shown, as it looks like a secret"
                    .to_string(),
            });
        }
        Some(
            ProfileMeta::new(id, provider)
                .with_mode(mode)
                .with_email(email),
        )
    }

    fn order(&mut self, v: &Value) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        let Some(map) = self.mapping(v) else {
            return out;
        };
        for (k, v) in map {
            let Some(provider) = key_text(k) else {
                self.error(format!("a provider id must be a name, found {}", found(k)));
                continue;
            };
            self.key(provider, |r| {
                let items = match v {
                    Value::Sequence(items) => items,
                    other => {
                        r.error(format!(
                            "expected a list of profile ids, found {}",
                            found(other)
                        ));
                        return;
                    }
                };
                let mut ids: Vec<String> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    r.at(Seg::Index(i), |r| {
                        let Some(id) = r.string(item, "a profile id") else {
                            return;
                        };
                        if ids.contains(&id) {
                            r.warn(match quotable(&id) {
                                Some(id) => {
                                    format!("profile `{id}` is listed twice; the repeat is ignored")
                                }
                                None => "this profile is listed twice; the repeat is ignored"
                                    .to_string(),
                            });
                        } else {
                            ids.push(id);
                        }
                    });
                }
                out.insert(provider.trim().to_ascii_lowercase(), ids);
            });
        }
        out
    }

    fn cooldowns(&mut self, v: &Value) -> CooldownPolicy {
        let Some(map) = self.mapping(v) else {
            return CooldownPolicy::new();
        };
        // The figures as written (hours, minutes), for the cap checks and
        // their messages; unset ones are the policy's defaults.
        let d = CooldownPolicy::new();
        let in_hours = |d: std::time::Duration| d.as_secs_f64() / 3600.0;
        let in_minutes = |d: std::time::Duration| d.as_secs_f64() / 60.0;
        let mut billing_backoff_hours = in_hours(d.billing_backoff());
        let mut billing_max_hours = in_hours(d.billing_max());
        let mut failure_window_hours = in_hours(d.failure_window());
        let mut auth_permanent_backoff_minutes = in_minutes(d.auth_permanent_backoff());
        let mut auth_permanent_max_minutes = in_minutes(d.auth_permanent_max());
        let mut overloaded_profile_rotations = crate::auth::DEFAULT_OVERLOADED_PROFILE_ROTATIONS;
        let mut rate_limited_profile_rotations =
            crate::auth::DEFAULT_RATE_LIMITED_PROFILE_ROTATIONS;
        let mut overloaded_backoff = crate::auth::DEFAULT_OVERLOADED_BACKOFF;
        let mut by_provider = Vec::new();
        let known = [
            "billingBackoffHours",
            "billingBackoffHoursByProvider",
            "billingMaxHours",
            "failureWindowHours",
            "overloadedProfileRotations",
            "overloadedBackoffMs",
            "rateLimitedProfileRotations",
            "authPermanentBackoffMinutes",
            "authPermanentMaxMinutes",
        ];
        for (k, v) in self.entries(map, &known) {
            self.key(k, |r| match k {
                "billingBackoffHours" => r.positive(v, &mut billing_backoff_hours),
                "billingMaxHours" => r.positive(v, &mut billing_max_hours),
                "failureWindowHours" => r.positive(v, &mut failure_window_hours),
                "authPermanentBackoffMinutes" => r.positive(v, &mut auth_permanent_backoff_minutes),
                "authPermanentMaxMinutes" => r.positive(v, &mut auth_permanent_max_minutes),
                "overloadedProfileRotations" => r.count(v, u32::MAX.into(), |n| {
                    overloaded_profile_rotations = n as u32
                }),
                "rateLimitedProfileRotations" => r.count(v, u32::MAX.into(), |n| {
                    rate_limited_profile_rotations = n as u32
                }),
                "overloadedBackoffMs" => r.count(v, u64::MAX, |n| {
                    overloaded_backoff = std::time::Duration::from_millis(n)
                }),
                _ => {
                    let Some(map) = r.mapping(v) else { return };
                    for (k, v) in map {
                        let Some(provider) = key_text(k) else {
                            r.error(format!("a provider id must be a name, found {}", found(k)));
                            continue;
                        };
                        let mut hours = f64::NAN;
                        r.key(provider, |r| r.positive(v, &mut hours));
                        if hours.is_finite() {
                            by_provider.push((provider.trim().to_ascii_lowercase(), hours));
                        }
                    }
                }
            });
        }
        if billing_max_hours < billing_backoff_hours {
            self.key("billingMaxHours", |r| {
                r.warn(format!(
                    "the cap ({} h) is below the base billing backoff ({} h); every billing disable lasts {} h",
                    billing_max_hours, billing_backoff_hours, billing_max_hours
                ))
            });
        }
        if auth_permanent_max_minutes < auth_permanent_backoff_minutes {
            self.key("authPermanentMaxMinutes", |r| {
                r.warn(format!(
                    "the cap ({} min) is below the base backoff ({} min)",
                    auth_permanent_max_minutes, auth_permanent_backoff_minutes
                ))
            });
        }
        // Every figure passed `positive` (finite, above zero), so each
        // converts; a default stands in for the impossible failure.
        let hours = |h: f64, or| CooldownPolicy::hours(h).unwrap_or(or);
        let minutes = |m: f64, or| CooldownPolicy::minutes(m).unwrap_or(or);
        let base = hours(billing_backoff_hours, d.billing_backoff());
        let mut c = CooldownPolicy::new()
            .with_billing_backoff(base)
            .with_billing_max(hours(billing_max_hours, d.billing_max()))
            .with_failure_window(hours(failure_window_hours, d.failure_window()))
            .with_auth_permanent_backoff(minutes(
                auth_permanent_backoff_minutes,
                d.auth_permanent_backoff(),
            ))
            .with_auth_permanent_max(minutes(auth_permanent_max_minutes, d.auth_permanent_max()))
            .with_overloaded_profile_rotations(overloaded_profile_rotations)
            .with_rate_limited_profile_rotations(rate_limited_profile_rotations)
            .with_overloaded_backoff(overloaded_backoff);
        for (provider, h) in by_provider {
            c = c.with_billing_backoff_for(provider, hours(h, base));
        }
        c
    }

    fn string(&mut self, v: &Value, what: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.error(format!("expected {what}, found {}", found(other)));
                None
            }
        }
    }

    /// A positive, finite number (hours, minutes).
    fn positive(&mut self, v: &Value, slot: &mut f64) {
        match v.as_f64() {
            Some(n) if n.is_finite() && n > 0.0 => *slot = n,
            Some(_) => self.error("expected a positive number"),
            None => self.error(format!("expected a positive number, found {}", found(v))),
        }
    }

    /// A whole number from 0 to `max`.
    fn count(&mut self, v: &Value, max: u64, set: impl FnOnce(u64)) {
        match v.as_u64() {
            Some(n) if n <= max => set(n),
            Some(_) => self.error(format!("expected a whole number up to {max}")),
            None if v.is_number() => self.error("expected a whole number, 0 or more"),
            None => self.error(format!(
                "expected a whole number, 0 or more, found {}",
                found(v)
            )),
        }
    }
}

/// The known key `word` was probably meant to be: a case slip
/// (`imagemodel`), two swapped letters (`modle`), or a near miss by edit
/// distance.
fn suggest<'a>(word: &str, known: &[&'a str]) -> Option<&'a str> {
    let swapped = |k: &str| {
        let (a, b): (Vec<char>, Vec<char>) = (word.chars().collect(), k.chars().collect());
        a.len() == b.len() && {
            let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            diff.len() == 2
                && diff[1] == diff[0] + 1
                && a[diff[0]] == b[diff[1]]
                && a[diff[1]] == b[diff[0]]
        }
    };
    known
        .iter()
        .copied()
        .find(|k| k.eq_ignore_ascii_case(word) || swapped(k))
        .or_else(|| did_you_mean(word, known.iter().copied()))
}

/// A mapping key as text (keys that are numbers, lists… are not names).
fn key_text(k: &Value) -> Option<&str> {
    match k {
        Value::String(s) => Some(s),
        _ => None,
    }
}

/// Finds the line and column of the node at `path` (or of its last key,
/// when `at_key`) by deserializing `text` with a visitor that walks to it
/// and fails there; the YAML deserializer stamps the failure with the
/// position of the node it was reading.
fn locate(text: &str, path: &[Seg], at_key: bool) -> Option<(usize, usize)> {
    let de = serde_yaml::Deserializer::from_str(text);
    match (Find { path, at_key }).deserialize(de) {
        Err(e) if e.to_string().contains(HERE) => e.location().map(|l| (l.line(), l.column())),
        _ => None,
    }
}

/// The marker of the locating error, to tell it from a real one.
const HERE: &str = "located-config-node";

struct Find<'p> {
    path: &'p [Seg],
    at_key: bool,
}

impl<'de> DeserializeSeed<'de> for Find<'_> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(FindVisitor(self))
    }
}

struct FindVisitor<'p>(Find<'p>);

impl<'de> Visitor<'de> for FindVisitor<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<(), E> {
        self.leaf()
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<(), E> {
        self.leaf()
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<(), E> {
        self.leaf()
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        self.leaf()
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let find = self.0;
        let Some((first, rest)) = find.path.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let target = match first {
            Seg::Index(i) => Some(*i),
            Seg::Key(_) => None,
        };
        let mut i = 0;
        loop {
            let found = if Some(i) == target {
                seq.next_element_seed(Find {
                    path: rest,
                    at_key: find.at_key,
                })?
                .is_some()
            } else {
                seq.next_element::<IgnoredAny>()?.is_some()
            };
            if !found {
                return Ok(());
            }
            i += 1;
        }
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let find = self.0;
        let Some((first, rest)) = find.path.split_first() else {
            return Err(de::Error::custom(HERE));
        };
        let target = match first {
            Seg::Key(k) => Some(k.as_str()),
            Seg::Index(_) => None,
        };
        let fail_at_key = find.at_key && rest.is_empty();
        while let Some(hit) = map.next_key_seed(KeySeed {
            target,
            fail: fail_at_key,
        })? {
            if hit {
                map.next_value_seed(Find {
                    path: rest,
                    at_key: find.at_key,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }
}

impl FindVisitor<'_> {
    fn leaf<E: de::Error>(self) -> Result<(), E> {
        if self.0.path.is_empty() {
            Err(E::custom(HERE))
        } else {
            Ok(())
        }
    }
}

/// Reads a mapping key; says whether it is the target, or fails at it.
struct KeySeed<'p> {
    target: Option<&'p str>,
    fail: bool,
}

impl<'de> DeserializeSeed<'de> for KeySeed<'_> {
    type Value = bool;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for KeySeed<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<bool, E> {
        let hit = self.target == Some(v);
        if hit && self.fail {
            Err(E::custom(HERE))
        } else {
            Ok(hit)
        }
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_unit<E: de::Error>(self) -> Result<bool, E> {
        Ok(false)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::reasons::RotationBudget;
    use crate::redact::{key_words, random_token};
    use std::time::Duration;

    /// Nesting past the limit is refused before the YAML parser sees it
    /// (that parser takes quadratic time on deep input), with line:col.
    #[test]
    fn deep_nesting_is_refused_up_front() {
        let text = format!("note: don't\nagents: {}", "[".repeat(300_000));
        let err = GatewayConfig::parse(&text, Format::Yaml, "deep.yaml").unwrap_err();
        assert!(
            err.to_string().contains("nested more than 64 deep"),
            "{err}"
        );
        assert!(err.to_string().contains("deep.yaml:2:"), "{err}");
    }

    fn read(text: &str) -> LoadedConfig {
        GatewayConfig::parse(text, Format::Yaml, "t.yaml").unwrap_or_else(|e| panic!("{e}"))
    }

    fn problems(text: &str, format: Format) -> Vec<ConfigProblem> {
        match GatewayConfig::parse(text, format, "t") {
            Ok(c) => c.warnings,
            Err(e) => e.problems,
        }
    }

    /// (severity, path, line, column, message) for compact assertions.
    fn brief(p: &ConfigProblem) -> (Severity, &str, Option<usize>, Option<usize>, &str) {
        (
            p.severity,
            p.path.as_str(),
            p.line,
            p.column,
            p.message.as_str(),
        )
    }

    const FULL: &str = r#"
agents:
  defaults:
    model:
      primary: anthropic/claude-opus-4-6
      fallbacks:
        - openai/gpt-5.2
        - openrouter/meta-llama/llama-3-70b
        - ollama/qwen3.5:27b
    imageModel: { primary: openai/gpt-image-1, fallbacks: [google/imagen-4] }
  list:
    - id: coder
      model: anthropic/claude-sonnet-4-5
    - id: researcher
      model: { primary: google/gemini-3-pro, fallbacks: [openai/gpt-5.2] }
auth:
  profiles:
    "anthropic:me@example.com": { provider: anthropic, mode: oauth, email: me@example.com }
    "openai:default": { provider: openai, type: api_key }
  order:
    OpenAI: ["openai:default"]
    anthropic: []
  cooldowns:
    billingBackoffHours: 2.5
    billingBackoffHoursByProvider: { openrouter: 1 }
    overloadedProfileRotations: 3
    overloadedBackoffMs: 250
"#;

    // R15: every key is read into its typed place.
    #[test]
    fn r15_reads_every_key() {
        let c = read(FULL);
        assert!(c.warnings.is_empty(), "{:?}", c.warnings);
        let c = c.config;
        let a = &c.agents;
        assert_eq!(
            a.model.primary.as_ref().map(ModelRef::as_str),
            Some("anthropic/claude-opus-4-6")
        );
        let fallbacks: Vec<&str> = a
            .model
            .fallbacks
            .iter()
            .flatten()
            .map(ModelRef::as_str)
            .collect();
        assert_eq!(
            fallbacks,
            [
                "openai/gpt-5.2",
                "openrouter/meta-llama/llama-3-70b",
                "ollama/qwen3.5:27b"
            ]
        );
        assert_eq!(a.image_model.fallbacks.as_ref().map(Vec::len), Some(1));
        assert_eq!(a.list.len(), 2);
        let coder = a.agent("coder").unwrap().model.as_ref().unwrap();
        assert_eq!(coder.fallbacks, None, "a string model has no fallbacks key");
        let researcher = a.agent("researcher").unwrap().model.as_ref().unwrap();
        assert_eq!(researcher.fallbacks.as_ref().map(Vec::len), Some(1));
        let me = c.auth.profile("anthropic:me@example.com").unwrap();
        assert_eq!(me.mode, Some(CredentialKind::OAuth));
        assert_eq!(me.email.as_deref(), Some("me@example.com"));
        assert_eq!(
            c.auth.profile("openai:default").unwrap().mode,
            Some(CredentialKind::ApiKey)
        );
        assert_eq!(c.auth.order["openai"], ["openai:default"]);
        assert_eq!(c.auth.order["anthropic"], Vec::<String>::new());
        let cd = &c.auth.cooldowns;
        let hours = |h: u64| Duration::from_secs(h * 3600);
        assert_eq!(cd.billing_backoff(), Duration::from_secs(9000));
        assert_eq!(cd.billing_backoff_for("openrouter"), hours(1));
        assert_eq!(cd.rotations(RotationBudget::Overloaded), 3);
        assert_eq!(
            cd.rotation_backoff(RotationBudget::Overloaded),
            Duration::from_millis(250)
        );
        // Unset keys keep their defaults.
        assert_eq!(cd.billing_max(), hours(24));
        assert_eq!(cd.rotations(RotationBudget::RateLimited), 1);
    }

    // R8.4, R8.5, R16.4: the documented cooldown defaults.
    #[test]
    fn r8_4_cooldown_defaults() {
        let c = CooldownPolicy::default();
        let (hours, minutes) = (
            |h: u64| Duration::from_secs(h * 3600),
            |m: u64| Duration::from_secs(m * 60),
        );
        assert_eq!(c.billing_backoff(), hours(5));
        assert_eq!(c.billing_backoff_by_provider().count(), 0);
        assert_eq!(c.billing_max(), hours(24));
        assert_eq!(c.failure_window(), hours(24));
        assert_eq!(c.rotations(RotationBudget::Overloaded), 1);
        assert_eq!(
            c.rotation_backoff(RotationBudget::Overloaded),
            Duration::ZERO
        );
        assert_eq!(c.rotations(RotationBudget::RateLimited), 1);
        assert_eq!(c.auth_permanent_backoff(), minutes(10));
        assert_eq!(c.auth_permanent_max(), minutes(60));
        assert_eq!(read("auth: {}").config.auth.cooldowns, c);
        // Written out, the defaults read back as the same policy.
        let written = "auth:\n  cooldowns:\n    billingBackoffHours: 5\n    billingMaxHours: 24\n    failureWindowHours: 24\n    authPermanentBackoffMinutes: 10\n    authPermanentMaxMinutes: 60\n    overloadedProfileRotations: 1\n    overloadedBackoffMs: 0\n    rateLimitedProfileRotations: 1\n";
        assert_eq!(read(written).config.auth.cooldowns, c);
    }

    #[test]
    fn type_errors_carry_path_line_and_column() {
        let text = "\
agents:
  list:
    - id: a
    - id: b
    - id: c
      model:
        primary: openai/gpt
        fallbacks: openai/gpt-mini
";
        let p = problems(text, Format::Yaml);
        assert_eq!(
            p.iter().map(brief).collect::<Vec<_>>(),
            [(
                Severity::Error,
                "agents.list[2].model.fallbacks",
                Some(8),
                Some(20),
                "expected a list of \"provider/model\" strings, found a string"
            )]
        );
        assert_eq!(
            p[0].help.as_deref(),
            Some("write `[openai/gpt-mini]`, or one `- provider/model` line per fallback")
        );
    }

    // The example of the module essay.
    #[test]
    fn essay_example_is_placed_where_it_says() {
        let text = "\
agents:
  list:
    - id: coder
      model: { primary: anthropic/claude-opus-4-6, fallbacks: openai/gpt-5.2 }
";
        let p = problems(text, Format::Yaml);
        assert_eq!(
            brief(&p[0]),
            (
                Severity::Error,
                "agents.list[0].model.fallbacks",
                Some(4),
                Some(63),
                "expected a list of \"provider/model\" strings, found a string"
            )
        );
    }

    #[test]
    fn all_problems_are_reported_in_one_run() {
        let text = "\
agents:
  defaults:
    model:
      primary: claude-opus
      fallbacks: [openai/b, 42, openai/b]
  list: { id: x }
auth:
  cooldowns:
    billingBackoffHours: -1
    overloadedProfileRotations: 1.5
    retries: 3
";
        let p = problems(text, Format::Yaml);
        let got: Vec<_> = p.iter().map(brief).collect();
        assert_eq!(
            got,
            [
                (
                    Severity::Error,
                    "agents.defaults.model.primary",
                    Some(4),
                    Some(16),
                    "`claude-opus` has no provider: write it as `provider/model`"
                ),
                (
                    Severity::Error,
                    "agents.defaults.model.fallbacks[1]",
                    Some(5),
                    Some(29),
                    "expected a \"provider/model\" string, found a number"
                ),
                (
                    Severity::Error,
                    "agents.list",
                    Some(6),
                    Some(9),
                    "expected a list of agents (`- id: …`), found a mapping"
                ),
                (
                    Severity::Error,
                    "auth.cooldowns.billingBackoffHours",
                    Some(9),
                    Some(26),
                    "expected a positive number"
                ),
                (
                    Severity::Error,
                    "auth.cooldowns.overloadedProfileRotations",
                    Some(10),
                    Some(33),
                    "expected a whole number, 0 or more"
                ),
                (
                    Severity::Warning,
                    "agents.defaults.model.fallbacks[2]",
                    Some(5),
                    Some(33),
                    "`openai/b` is listed twice (first at index 0); the repeat is ignored"
                ),
                (
                    Severity::Warning,
                    "auth.cooldowns.retries",
                    Some(11),
                    Some(5),
                    "unknown key, ignored"
                ),
            ]
        );
    }

    #[test]
    fn unknown_keys_are_warnings_with_a_suggestion() {
        let text =
            "agents:\n  defaults:\n    modle: anthropic/a\nagnets: {}\ngateway: { port: 1 }\n";
        let c = read(text);
        let got: Vec<_> = c.warnings.iter().map(brief).collect();
        assert_eq!(
            got,
            [
                (
                    Severity::Warning,
                    "agents.defaults.modle",
                    Some(3),
                    Some(5),
                    "unknown key, ignored"
                ),
                (
                    Severity::Warning,
                    "agnets",
                    Some(4),
                    Some(1),
                    "unknown key, ignored"
                ),
            ],
            "top-level sections this tool does not read (gateway) are not warned about"
        );
        assert_eq!(c.warnings[0].help.as_deref(), Some("did you mean `model`?"));
        assert_eq!(
            c.warnings[1].help.as_deref(),
            Some("did you mean `agents`?")
        );
    }

    #[test]
    fn yaml_syntax_errors_give_line_and_column() {
        let text = "agents:\n  defaults:\n    model: [anthropic/a\n  list: []\n";
        let p = problems(text, Format::Yaml);
        assert_eq!(p.len(), 1);
        assert!(
            p[0].message.starts_with("invalid YAML: "),
            "{}",
            p[0].message
        );
        assert!(p[0].line.is_some() && p[0].column.is_some(), "{p:?}");
        assert!(!p[0].message.ends_with('.'));
    }

    #[test]
    fn json_configs_get_json_syntax_errors() {
        let good =
            r#"{"agents": {"defaults": {"model": {"primary": "a/b", "fallbacks": ["c/d"]}}}}"#;
        let c = GatewayConfig::parse(good, Format::Json, "c.json").unwrap();
        assert_eq!(
            c.config.agents.model.fallbacks.as_ref().map(Vec::len),
            Some(1)
        );
        let bad = "{\n  \"agents\": {\n    \"defaults\": {,}\n  }\n}\n";
        let p = problems(bad, Format::Json);
        assert_eq!(
            p.iter().map(brief).collect::<Vec<_>>(),
            [(
                Severity::Error,
                "",
                Some(3),
                Some(18),
                "invalid JSON: key must be a string"
            )]
        );
        // Type errors in JSON are placed too.
        let typed =
            "{\n  \"agents\": {\n    \"defaults\": {\"model\": {\"fallbacks\": \"c/d\"}}\n  }\n}\n";
        let p = problems(typed, Format::Json);
        assert_eq!(
            (p[0].path.as_str(), p[0].line, p[0].column),
            ("agents.defaults.model.fallbacks", Some(3), Some(41))
        );
    }

    // R5.3: the config holds metadata only; a secret is dropped and never
    // shown.
    #[test]
    fn r5_3_secrets_are_dropped_and_never_echoed() {
        let text = "auth:\n  profiles:\n    openai:default:\n      provider: openai\n      apiKey: sk-SECRET-123\n";
        let c = read(text);
        assert_eq!(c.warnings.len(), 1);
        let w = &c.warnings[0];
        assert_eq!(
            brief(w),
            (
                Severity::Warning,
                "auth.profiles[\"openai:default\"].apiKey",
                Some(5),
                Some(7),
                "secrets do not belong in the config file; this value is ignored"
            )
        );
        let shown = format!("{:?}{}", c.config, w.render(&c.name, &c.text));
        assert!(!shown.contains("SECRET"), "{shown}");
        assert!(
            shown.contains("(line not shown: it may hold a secret)"),
            "{shown}"
        );
        // A type error next to a secret in a flow mapping hides the line too.
        let flow = "auth:\n  profiles:\n    x:default: { provider: 5, token: tok-SECRET }\n";
        let e = GatewayConfig::parse(flow, Format::Yaml, "f.yaml").unwrap_err();
        assert!(!e.to_string().contains("SECRET"), "{e}");
        assert!(may_hold_secret(r#"  "apiKey" : "x""#));
        assert!(!may_hold_secret("  primary: ollama/monkey:7b"));
    }

    // R16.11: an unknown credential mode is never echoed, whatever it is;
    // a near miss names the known mode instead.
    #[test]
    fn r16_11_unknown_mode_is_not_echoed() {
        let text = "auth:\n  profiles:\n    a:default: { provider: a, mode: OAuth }\n    b:default: { provider: b, type: magic }\n    c:default: { provider: c, mode: sk-live-FAKE-0001 }\n";
        let e = GatewayConfig::parse(text, Format::Yaml, "m.yaml").unwrap_err();
        let helps: Vec<_> = e.problems.iter().map(|p| p.help.as_deref()).collect();
        assert_eq!(
            helps,
            [
                Some("did you mean `oauth`?"),
                Some("the value is not shown, in case it is a secret"),
                Some("the value is not shown, in case it is a secret"),
            ]
        );
        let shown = e.to_string();
        for value in ["OAuth", "magic", "FAKE"] {
            assert!(!shown.contains(value), "{value}: {shown}");
        }
        assert_eq!(e.problems[2].line, Some(5), "still placed");
        assert_eq!(
            shown
                .matches("(line not shown: it may hold a secret)")
                .count(),
            3,
            "{shown}"
        );
    }

    // R16.11: a key that names a secret hides its line in any spelling.
    #[test]
    fn r16_11_secret_keys_in_any_spelling_hide_the_line() {
        for line in [
            "      accessToken: FAKE",
            "      access_token: FAKE",
            "      refreshToken: FAKE",
            "      refresh: FAKE",
            "      access: FAKE",
            "      apiToken: FAKE",
            "      APIKey: FAKE",
            "      API-KEY: FAKE",
            "      apikey: FAKE",
            "      x-api-key: FAKE",
            "      key: FAKE",
            "      privateKey: FAKE",
            "      private_key_pem: FAKE",
            "      bearer: FAKE",
            "      bearerToken: FAKE",
            "      authorization: FAKE",
            "      Authorization : FAKE",
            "      auth_header: FAKE",
            "      authHeader: FAKE",
            "      client_secret: FAKE",
            "      clientSecret: FAKE",
            "      CLIENT-SECRET: FAKE",
            "      password: FAKE",
            "      Passwd: FAKE",
            "      pwd: FAKE",
            "      credentials: FAKE",
            "      sessionCookie: FAKE",
            r#"  "apiKey" : "x""#,
            r#"{"agents": {}, "auth": {"profiles": {"a:b": {"accessToken":"FAKE"}}}}"#,
            "    x:default: { provider: x, oauthRefreshToken: FAKE }",
            "    'refresh-token': FAKE",
            "      accessToken:",
        ] {
            assert!(may_hold_secret(line), "{line}");
        }
        assert_eq!(key_words("APIKey"), ["api", "key"]);
        assert_eq!(
            key_words("oauth2AccessToken"),
            ["oauth2", "access", "token"]
        );
        assert_eq!(key_words("x-api_key.v2"), ["x", "api", "key", "v2"]);
    }

    // R16.11: a value shaped like a credential hides its line whatever the
    // key, and is never echoed in a message.
    #[test]
    fn r16_11_secret_values_hide_the_line() {
        for line in [
            "      note: sk-live-FAKE-0001",
            "      note: sk-ant-api03-FAKE",
            "      note: sk_live_FAKE0001",
            "        sk-live-FAKE-0001",
            "    - ghp_FAKEFAKEFAKE0001",
            "      slack: xoxb-1234-FAKE",
            "      id: AKIAFAKEFAKEFAKE0001",
            "      hint: \"Bearer FAKE\"",
            "      hint: bearer abc",
            "      hint: Basic dXNlcjpwYXNzd29yZA==",
            "      url: https://user:FAKE@example.com/v1",
            "      blob: 9fA3kQ7zL2mW8vR4tY6uP1sD0",
            "      blob: 3f9a0c2e7b4d1f6a8c5e9b2d7f4a1c3e",
            "      blob: eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.FAKE",
            "      primary: openai/sk-live-FAKE-0001",
        ] {
            assert!(may_hold_secret(line), "{line}");
        }
        assert_eq!(quotable("sk-live-FAKE-0001"), None);
        assert_eq!(
            quotable("openai/gpt-5.2").as_deref(),
            Some("openai/gpt-5.2")
        );
    }

    // What the config really holds is still quoted: keys it reads, model
    // ids, profile ids, e-mails, modes.
    #[test]
    fn harmless_lines_are_still_shown() {
        let texts = [
            FULL,
            include_str!("../examples/configs/gateway.yaml"),
            include_str!("../examples/configs/gateway.json"),
            include_str!("../examples/configs/minimal.yaml"),
        ];
        for line in texts.iter().flat_map(|t| t.lines()) {
            assert!(!may_hold_secret(line), "{line}");
        }
        for line in [
            "  primary: ollama/monkey:7b",
            "auth:",
            "    authPermanentBackoffMinutes: 10",
            "    billingBackoffHoursByProvider: { openrouter: 1 }",
            "    rateLimitedProfileRotations: 2",
            "  order:",
            "    openai: [\"openai:default\", \"openai:me@example.com\"]",
            "      mode: token",
            "      type: api_key",
            "      primary: anthropic/claude-3-5-sonnet-20241022",
            "      fallbacks: [together/Meta-Llama-3.1-70B-Instruct-Turbo, groq/deepseek-r1-distill-llama-70b]",
            "      fallbacks: [bedrock/us.anthropic.claude-3-5-sonnet-20241022-v2:0]",
            "      fallbacks: [ollama/qwen2.5-coder-32b-instruct-q4_K_M, google/gemini-2.0-flash-thinking-exp-01-21]",
            "      email: firstname.lastname99@example.com",
            "# keep tokens out of this file",
        ] {
            assert!(!may_hold_secret(line), "{line}");
        }
    }

    // Random keys of 32 characters are nearly always taken for secrets,
    // whatever their alphabet (a fixed generator keeps the test stable).
    #[test]
    fn random_tokens_are_recognised() {
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let alphabets = [
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789",
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_",
            "0123456789abcdef",
            "abcdefghijklmnopqrstuvwxyz0123456789",
        ];
        for alphabet in alphabets {
            let chars: Vec<char> = alphabet.chars().collect();
            let found = (0..1000)
                .filter(|_| {
                    let token: String = (0..32)
                        .map(|_| chars[(next() % chars.len() as u64) as usize])
                        .collect();
                    random_token(&token)
                })
                .count();
            assert!(found >= 990, "{alphabet}: {found} of 1000");
        }
        assert!(!random_token("billingBackoffHoursByProvider"));
        assert!(!random_token("claude-3-7-sonnet-20250219"));
    }

    // The YAML parser quotes a value it cannot read as its tag says; the
    // message keeps what went wrong, not the value.
    #[test]
    fn parser_messages_do_not_quote_values() {
        let text = "auth:\n  cooldowns:\n    billingMaxHours: !!int sk-live-FAKE-0001\n";
        let p = problems(text, Format::Yaml);
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(
            p[0].message,
            "invalid YAML: auth.cooldowns.billingMaxHours: invalid value: string \"…\", expected an integer"
        );
        assert_eq!((p[0].line, p[0].column), (Some(3), Some(22)));
        assert_eq!(
            scrub_parser_message(r#"duplicate entry with key "order""#),
            r#"duplicate entry with key "order""#
        );
        assert_eq!(
            scrub_parser_message(r#"duplicate entry with key "sk-live-FAKE-01""#),
            r#"duplicate entry with key "…""#
        );
        assert_eq!(
            scrub_parser_message(r#"invalid value: string "a \"b\" c", expected x"#),
            r#"invalid value: string "…", expected x"#
        );
    }

    #[test]
    fn profile_and_order_problems() {
        let text = "\
auth:
  profiles:
    openai:default: { mode: magic }
    anthropic:x: { provider: openai }
  order:
    openai: openai:default
    google: [google:a, google:a]
";
        let p = problems(text, Format::Yaml);
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.severity, p.path.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    Severity::Error,
                    "auth.profiles[\"openai:default\"]",
                    "profile has no `provider`"
                ),
                (
                    Severity::Error,
                    "auth.profiles[\"openai:default\"].mode",
                    "unknown credential mode: expected `api_key`, `oauth` or `token`"
                ),
                (
                    Severity::Error,
                    "auth.order.openai",
                    "expected a list of profile ids, found a string"
                ),
                (
                    Severity::Warning,
                    "auth.profiles[\"anthropic:x\"]",
                    "profile id `anthropic:x` does not start with `openai:` (ids are `provider:default` or `provider:<email>`)"
                ),
                (
                    Severity::Warning,
                    "auth.order.google[1]",
                    "profile `google:a` is listed twice; the repeat is ignored"
                ),
            ]
        );
    }

    #[test]
    fn agent_list_problems() {
        let text = "\
agents:
  list:
    - model: a/b
    - id: x
      model: 7
    - id: X
    -
";
        let p = problems(text, Format::Yaml);
        let got: Vec<_> = p
            .iter()
            .map(|p| (p.path.as_str(), p.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                ("agents.list[0]", "agent has no `id`"),
                (
                    "agents.list[1].model",
                    "expected a \"provider/model\" string or `{primary, fallbacks}`, found a number"
                ),
                (
                    "agents.list[2].id",
                    "agent id `X` is used twice (first at `agents.list[1]`)"
                ),
                ("agents.list[3]", "expected an agent (`id: …`), found nothing"),
            ]
        );
    }

    #[test]
    fn oversized_and_odd_inputs_are_refused_cleanly() {
        let big = format!("agents: {{}}\n#{}\n", "x".repeat(MAX_CONFIG_BYTES as usize));
        let p = problems(&big, Format::Yaml);
        assert!(p[0].message.contains("is larger than 1024 KiB"), "{p:?}");
        let p = problems("- a\n- b\n", Format::Yaml);
        assert_eq!(
            p[0].message,
            "the config must be a mapping of keys, found a list"
        );
        assert_eq!(read("").warnings[0].message, "the config is empty");
        // Merge keys share a fallback list.
        let merged = "\
common: &common { fallbacks: [openai/b] }
agents:
  defaults:
    model: { <<: *common, primary: anthropic/a }
";
        let c = read(merged).config;
        assert_eq!(c.agents.model.fallbacks.as_ref().map(Vec::len), Some(1));
    }

    #[test]
    fn rendering_shows_the_source_line() {
        let text = "agents:\n  defaults:\n    model: { primary: gpt }\n";
        let e = GatewayConfig::parse(text, Format::Yaml, "g.yaml").unwrap_err();
        assert_eq!(
            e.to_string(),
            "\
error: agents.defaults.model.primary: `gpt` has no provider: write it as `provider/model`
 --> g.yaml:3:23
  |
3 |     model: { primary: gpt }
  |                       ^

1 error, 0 warnings in `g.yaml`
"
        );
    }
}
