//! A problem found in a config file, and how it is rendered.

use std::fmt::Write as _;

use crate::diag::Severity;
use crate::diag::{Code, Diagnostic};
use crate::syntax::{FileId, SourceMap, Span};

/// One step of a key path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Seg {
    Key(String),
    Index(usize),
}

/// A problem in the config file, with its stable code (E021–E023,
/// W003–W005), the key path and, when it could be placed, the line and
/// column (1-based). It is shown as a [`Diagnostic`]
/// ([`ConfigProblem::to_diagnostic`]), by the renderer of rules problems.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConfigProblem {
    /// The stable code (E021–E023 errors, W003–W005 warnings).
    pub code: Code,
    /// `agents.list[2].model.fallbacks`; empty for whole-file problems.
    pub path: String,
    /// What is wrong, in operator words.
    pub message: String,
    /// What to do about it, when there is something to say.
    pub help: Option<String>,
    /// The 1-based line, when the problem could be placed.
    pub line: Option<usize>,
    /// The 1-based column, when the problem could be placed.
    pub column: Option<usize>,
    pub(super) segments: Vec<Seg>,
    /// Place the problem at the last key rather than at its value (used
    /// for unknown keys).
    pub(super) at_key: bool,
    /// Never quote the source line: the problem is about a value that is
    /// not shown (an unknown credential mode), whatever its shape.
    pub(super) conceal_line: bool,
}

impl ConfigProblem {
    /// Error or warning (from the code).
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }

    /// Whether it stops the config from being used.
    pub fn is_error(&self) -> bool {
        self.severity() == Severity::Error
    }

    /// A problem another reader of the config found (the gateway's reader
    /// of `models.providers`, `serve`, `classify`), at a key path given as
    /// its segments from the root (`["models", "providers", "llama.cpp",
    /// "apiKey"]`; a segment `name[2]` is a list item). [`place_problems`](crate::place_problems)
    /// gives it its line and column. A problem at a key that holds a
    /// credential never quotes its line.
    pub fn at_keys(code: Code, keys: &[&str], message: String, help: Option<String>) -> Self {
        let mut segments = Vec::new();
        for k in keys {
            let (name, mut rest) = match k.find('[') {
                Some(i) => (&k[..i], &k[i..]),
                None => (*k, ""),
            };
            segments.push(Seg::Key(name.to_string()));
            while let Some(close) = rest.find(']') {
                if let Ok(n) = rest[1..close].parse() {
                    segments.push(Seg::Index(n));
                }
                rest = &rest[close + 1..];
            }
        }
        let secret = keys.last().is_some_and(|k| {
            let k = k.to_ascii_lowercase();
            ["key", "token", "secret", "password", "authorization"]
                .iter()
                .any(|w| k.contains(w))
        });
        ConfigProblem {
            code,
            path: keys.join("."),
            message,
            help,
            line: None,
            column: None,
            segments,
            at_key: false,
            conceal_line: secret,
        }
    }

    pub(super) fn whole_file(code: Code, message: String) -> Self {
        ConfigProblem {
            code,
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

    /// The problem as a diagnostic on `file` of `sources` (the config's
    /// text): `path: message` as its title, placed at its line and column
    /// (one character), or on the whole file when it has no place.
    pub fn to_diagnostic(&self, sources: &SourceMap, file: FileId) -> Diagnostic {
        let title = if self.path.is_empty() {
            self.message.clone()
        } else {
            format!("{}: {}", self.path, self.message)
        };
        let mut d = match (self.line, self.column) {
            (Some(line), Some(col)) => {
                let f = sources.get(file);
                let line32 = u32::try_from(line).unwrap_or(u32::MAX);
                let text = f.line_text(line32);
                let start = f.line_start(line32)
                    + text
                        .char_indices()
                        .nth(col.saturating_sub(1))
                        .map_or(text.len(), |(i, _)| i);
                let end = text[start - f.line_start(line32)..]
                    .chars()
                    .next()
                    .map_or(start, |c| start + c.len_utf8());
                let span = Span {
                    file,
                    start: start as u32,
                    end: end as u32,
                    line: line32,
                    col: u32::try_from(col).unwrap_or(u32::MAX),
                };
                Diagnostic::new(self.code, span, title)
            }
            _ => Diagnostic::for_file(self.code, file, title),
        };
        if let Some(help) = &self.help {
            d = d.help(help.clone());
        }
        if self.conceal_line {
            d = d.conceal_line();
        }
        d
    }

    /// The problem rendered as a diagnostic: `error[E023]: path: message`,
    /// then ` --> file:line:col`, the source line with a caret (unless it
    /// may hold a secret), and the help.
    pub fn render(&self, file_name: &str, text: &str) -> String {
        let mut sources = SourceMap::new();
        let file = sources.add(file_name, text);
        self.to_diagnostic(&sources, file).render(&sources)
    }
}

/// Renders problems followed by a one-line count, like `failover check`.
pub fn render_problems(problems: &[ConfigProblem], name: &str, text: &str) -> String {
    let mut out = String::new();
    let mut sources = SourceMap::new();
    let file = sources.add(name, text);
    for p in problems {
        out.push_str(&p.to_diagnostic(&sources, file).render(&sources));
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
