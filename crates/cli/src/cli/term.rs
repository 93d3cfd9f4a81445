//! Terminal conventions: colour on a terminal, none when the output is
//! piped, when `NO_COLOR` is set (<https://no-color.org>) or with
//! `--color never`; `--color always` forces it.
//!
//! The library renders plain text (stable for snapshots and logs); colour
//! is painted over that text here, line by line, so piped output is
//! byte for byte what the tests snapshot.

use std::io::IsTerminal;
use std::sync::OnceLock;

/// `--color`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Default)]
pub(super) enum ColorWhen {
    /// Colour when the output is a terminal and `NO_COLOR` is unset.
    #[default]
    Auto,
    Always,
    Never,
}

static CHOICE: OnceLock<ColorWhen> = OnceLock::new();

/// Records the `--color` choice (the first call wins).
pub(super) fn set_color(when: ColorWhen) {
    let _ = CHOICE.set(when);
}

/// The choice for clap's own output (help, usage errors).
pub(super) fn clap_choice(when: ColorWhen) -> clap::ColorChoice {
    match resolve(when, std::io::stdout().is_terminal()) {
        true => clap::ColorChoice::Always,
        false => clap::ColorChoice::Never,
    }
}

fn resolve(when: ColorWhen, is_terminal: bool) -> bool {
    match when {
        ColorWhen::Always => true,
        ColorWhen::Never => false,
        ColorWhen::Auto => {
            is_terminal
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
                && std::env::var_os("TERM").is_none_or(|t| t != "dumb")
        }
    }
}

/// Whether output to stdout (`stderr == false`) or stderr is coloured.
pub(super) fn enabled(stderr: bool) -> bool {
    let when = CHOICE.get().copied().unwrap_or_default();
    let tty = if stderr {
        std::io::stderr().is_terminal()
    } else {
        std::io::stdout().is_terminal()
    };
    resolve(when, tty)
}

const RED: &str = "\x1b[1;31m";
const YELLOW: &str = "\x1b[1;33m";
const GREEN: &str = "\x1b[32m";
const BLUE: &str = "\x1b[1;34m";
const CYAN: &str = "\x1b[36m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

fn each_line(text: &str, mut paint: impl FnMut(&str) -> String) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        out.push_str(&paint(body));
        out.push_str(nl);
    }
    out
}

/// Diagnostics as `check` renders them (for stderr when `stderr`).
pub(crate) fn paint_diagnostics_to(text: &str, stderr: bool) -> String {
    if !enabled(stderr) {
        return text.to_string();
    }
    paint_diagnostics_text(text)
}

/// Diagnostics printed to stderr.
pub(crate) fn paint_diagnostics(text: &str) -> String {
    paint_diagnostics_to(text, true)
}

fn paint_diagnostics_text(text: &str) -> String {
    let mut caret = RED;
    each_line(text, |l| {
        if let Some(rest) = l.strip_prefix("error") {
            caret = RED;
            return format!("{RED}error{RESET}{BOLD}{rest}{RESET}");
        }
        if let Some(rest) = l.strip_prefix("warning") {
            caret = YELLOW;
            return format!("{YELLOW}warning{RESET}{BOLD}{rest}{RESET}");
        }
        if let Some(rest) = l.strip_prefix("  = help:") {
            return format!("  {CYAN}= help:{RESET}{rest}");
        }
        let trimmed = l.trim_start();
        if trimmed.starts_with("--> ") || trimmed.starts_with("::: ") {
            let lead = &l[..l.len() - trimmed.len()];
            return format!("{lead}{BLUE}{}{RESET}{}", &trimmed[..3], &trimmed[3..]);
        }
        // A gutter of spaces then `|`: the caret line or a spacer; a
        // source line's gutter holds its number.
        if let Some(bar) = l.find('|') {
            let (gutter, rest) = l.split_at(bar);
            if gutter.chars().all(|c| c == ' ') && rest.contains('^') {
                let at = rest.find('^').unwrap_or(0);
                let end = rest[at..].find(|c| c != '^').map_or(rest.len(), |e| at + e);
                return format!(
                    "{gutter}{BLUE}|{RESET}{}{caret}{}{}{RESET}",
                    &rest[1..at],
                    &rest[at..end],
                    &rest[end..]
                );
            }
            if gutter.trim().chars().all(|c| c.is_ascii_digit()) {
                return format!("{BLUE}{gutter}|{RESET}{}", &rest[1..]);
            }
        }
        l.to_string()
    })
}

/// `failover test`'s tables and failures, on stdout.
pub(crate) fn paint_report(text: &str) -> String {
    if !enabled(false) {
        return text.to_string();
    }
    each_line(text, |l| {
        if l == "failures:" || l == "rules that no case decides:" {
            return format!("{RED}{l}{RESET}");
        }
        if l.starts_with("  ") && l.contains(": case #") {
            return format!("{RED}{l}{RESET}");
        }
        if l.contains(" passed, ") && l.contains(" failed") {
            let colour = if l.contains(" passed, 0 failed") {
                GREEN
            } else {
                RED
            };
            return format!("{colour}{l}{RESET}");
        }
        l.to_string()
    })
}

/// A unified diff, on stdout.
pub(crate) fn paint_diff(text: &str) -> String {
    if !enabled(false) {
        return text.to_string();
    }
    each_line(text, |l| {
        if l.starts_with("---") || l.starts_with("+++") {
            format!("{BOLD}{l}{RESET}")
        } else if l.starts_with("@@") {
            format!("{CYAN}{l}{RESET}")
        } else if l.starts_with('-') {
            format!("{RED}{l}{RESET}")
        } else if l.starts_with('+') {
            format!("{GREEN}{l}{RESET}")
        } else {
            l.to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_and_always_ignore_the_terminal() {
        assert!(!resolve(ColorWhen::Never, true));
        assert!(resolve(ColorWhen::Always, false));
        assert!(!resolve(ColorWhen::Auto, false));
    }

    /// Painting adds escapes only: stripped, the text is what was given.
    #[test]
    fn paint_keeps_the_text() {
        let text = "error[E002]: unknown reason `x`\n --> a.rules:3:6\n  |\n3 |   => x ^\n  |      ^ no reason\n  = help: did you mean `y`?\n";
        let painted = paint_diagnostics_text(text);
        assert!(painted.contains("\x1b[1;31m^"), "{painted:?}");
        let stripped = regex::Regex::new("\x1b\\[[0-9;]*m")
            .unwrap()
            .replace_all(&painted, "");
        assert_eq!(stripped, text);
    }
}
