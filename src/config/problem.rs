//! A problem found in a config file, and how it is rendered.

use std::fmt::Write as _;

use crate::redact::may_hold_secret;

use super::read::Seg;

/// A quoted source line is cut after this many characters.
const SHOWN_LINE_CHARS: usize = 120;

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
    pub(super) segments: Vec<Seg>,
    /// Place the problem at the last key rather than at its value (used
    /// for unknown keys).
    pub(super) at_key: bool,
    /// Never quote the source line: the problem is about a value that is
    /// not shown (an unknown credential mode), whatever its shape.
    pub(super) conceal_line: bool,
}

impl ConfigProblem {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub(super) fn whole_file(message: String) -> Self {
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
