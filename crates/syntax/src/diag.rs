//! Diagnostics: every problem found in a rules file, with a stable code, a
//! title, a labelled span and help in operator words.
//!
//! Codes are never reused. Errors (`E…`) stop a ruleset from being used;
//! warnings (`W…`) point at rules that work but are slow or dead. All
//! problems of a run are collected and reported together, sorted by file and
//! position, rendered like this:
//!
//! ```text
//! error[E002]: unknown reason `rate_limt`
//!  --> rules/core.rules:3:6
//!   |
//! 3 |   => rate_limt
//!   |      ^^^^^^^^^ no reason of this name is declared
//!   |
//!   = help: did you mean `rate_limit`?
//! ```

/// The widest column a table pads to: longer cells print whole, past
/// the alignment (a padding width past 65,535 panics in `format!`).
pub const MAX_COLUMN: usize = 100;

use std::fmt::Write as _;

use crate::source::{FileId, SourceMap, Span, Unreadable, MAX_FILE_BYTES};

/// A stable diagnostic code. Never renumber; retire a code instead of reusing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum Code {
    /// The text does not follow the grammar.
    E001,
    /// A rule names a reason that no file declares.
    E002,
    /// Two rules share one id.
    E003,
    /// A regex does not compile.
    E004,
    /// A selection declaration names an unknown selection source.
    E005,
    /// An HTTP status outside 100–599.
    E006,
    /// An empty list (`has any []`, `in []`).
    E007,
    /// A string escape that does not exist (`"\q"`).
    E008,
    /// A field compared with an operator or operand it cannot take.
    E009,
    /// A reason declaration with an unknown or conflicting behaviour.
    E010,
    /// A reason or selection source declared twice in one layer.
    E011,
    /// A selection target names an unknown fallback list.
    E012,
    /// A range whose start is after its end.
    E013,
    /// A rules file that cannot be read as text (not UTF-8, too large).
    E014,
    /// Parentheses or lists nested deeper than the engine accepts.
    E015,
    /// A reason the engine itself produces is not declared.
    E016,
    /// A golden-cases file that is not YAML a case list can be read from
    /// (syntax, nesting deeper than 64, an alias bomb).
    E017,
    /// A golden case with a field no case has (`colour:`, `expected:`).
    E018,
    /// A golden case, or the cases file, of the wrong shape: not a list of
    /// mappings, or a field with the wrong type of value.
    E019,
    /// A golden case that says neither `expect` nor `not`: it checks nothing.
    E020,
    /// A gateway config file that cannot be read: missing, a directory, not
    /// UTF-8, larger than 1 MiB.
    E021,
    /// A gateway config that is not YAML (or, for `.json`, not JSON): syntax,
    /// nesting deeper than 64, an alias bomb, a bad `<<` merge key.
    E022,
    /// A gateway config value that cannot be used: the wrong type or shape,
    /// a malformed model reference, an unknown name (state backend,
    /// credential mode), a missing or duplicate id.
    E023,
    /// A rule that can never win: an earlier rule matches everything it matches.
    W001,
    /// A regex with no literal of 3+ bytes: it runs on every message.
    W002,
    /// A gateway config key that is not read (a near miss gets a did-you-mean).
    W003,
    /// A secret in the gateway config (`apiKey: …` under a profile): it is
    /// ignored, never shown; secrets live in the state directory.
    W004,
    /// A gateway config value that works but is likely a mistake: a model or
    /// profile listed twice, a cap below its base, an empty config.
    W005,
}

impl Code {
    /// Every code, in order.
    pub const ALL: [Code; 28] = [
        Code::E001,
        Code::E002,
        Code::E003,
        Code::E004,
        Code::E005,
        Code::E006,
        Code::E007,
        Code::E008,
        Code::E009,
        Code::E010,
        Code::E011,
        Code::E012,
        Code::E013,
        Code::E014,
        Code::E015,
        Code::E016,
        Code::E017,
        Code::E018,
        Code::E019,
        Code::E020,
        Code::E021,
        Code::E022,
        Code::E023,
        Code::W001,
        Code::W002,
        Code::W003,
        Code::W004,
        Code::W005,
    ];

    /// The code as written (`E002`, `W001`).
    pub fn as_str(self) -> &'static str {
        match self {
            Code::E001 => "E001",
            Code::E002 => "E002",
            Code::E003 => "E003",
            Code::E004 => "E004",
            Code::E005 => "E005",
            Code::E006 => "E006",
            Code::E007 => "E007",
            Code::E008 => "E008",
            Code::E009 => "E009",
            Code::E010 => "E010",
            Code::E011 => "E011",
            Code::E012 => "E012",
            Code::E013 => "E013",
            Code::E014 => "E014",
            Code::E015 => "E015",
            Code::E016 => "E016",
            Code::E017 => "E017",
            Code::E018 => "E018",
            Code::E019 => "E019",
            Code::E020 => "E020",
            Code::E021 => "E021",
            Code::E022 => "E022",
            Code::E023 => "E023",
            Code::W001 => "W001",
            Code::W002 => "W002",
            Code::W003 => "W003",
            Code::W004 => "W004",
            Code::W005 => "W005",
        }
    }

    /// Errors are `E…`, warnings `W…`.
    pub fn severity(self) -> Severity {
        if self.as_str().starts_with('W') {
            Severity::Warning
        } else {
            Severity::Error
        }
    }
}

/// How bad a diagnostic is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The input cannot be used.
    Error,
    /// The input works but is likely a mistake, or slow.
    Warning,
}

/// A secondary location shown under the main one (e.g. the earlier rule
/// that shadows this one).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Note {
    /// Where.
    pub span: Span,
    /// What is there.
    pub label: String,
}

/// One problem in a rules file or a config: a stable code, a title, a labelled span, notes and help.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Diagnostic {
    /// The stable code.
    pub code: Code,
    /// The one-line title (`unknown reason `rate_limt``).
    pub title: String,
    /// Where the problem is.
    pub span: Span,
    /// What the caret under the span says.
    pub label: String,
    /// Other places that explain it (the earlier rule that shadows this one).
    pub notes: Vec<Note>,
    /// What to do about it.
    pub help: Option<String>,
    /// The problem is about the whole file, or a place that could not be
    /// found (a config key that came from a `<<` merge): `span` only names
    /// the file, and the rendering shows ` --> file` without a line.
    pub whole_file: bool,
    /// Never quote the source line, whatever it holds: the problem is
    /// about a value that is not shown (an unknown credential mode).
    pub conceal_line: bool,
}

impl Diagnostic {
    /// A diagnostic of `code` at `span`.
    pub fn new(code: Code, span: Span, title: impl Into<String>) -> Self {
        Diagnostic {
            code,
            title: title.into(),
            span,
            label: String::new(),
            notes: Vec::new(),
            help: None,
            whole_file: false,
            conceal_line: false,
        }
    }

    /// The E014 diagnostic of a file that cannot be parsed.
    pub fn unreadable(problem: Unreadable) -> Self {
        match problem {
            Unreadable::TooLarge { at, size } => Diagnostic::new(
                Code::E014,
                at,
                format!(
                    "rules file is too large ({:.1} MB; the limit is {} MB)",
                    size as f64 / 1e6,
                    MAX_FILE_BYTES / (1024 * 1024)
                ),
            )
            .label("file starts here")
            .help("split the rules into several files, or check that this is really a rules file"),
            Unreadable::NotUtf8 { at } => Diagnostic::new(
                Code::E014,
                at,
                "rules file is not valid UTF-8",
            )
            .label("this byte is not UTF-8 text")
            .help(
                "save the file as UTF-8; non-ASCII text in strings is fine once encoded as UTF-8",
            ),
        }
    }

    /// A diagnostic about the whole of `file` ([`Diagnostic::whole_file`]).
    pub fn for_file(code: Code, file: FileId, title: impl Into<String>) -> Self {
        let span = Span {
            file,
            ..Span::default()
        };
        let mut d = Diagnostic::new(code, span, title);
        d.whole_file = true;
        d
    }

    /// Never quote the source line ([`Diagnostic::conceal_line`]).
    pub fn conceal_line(mut self) -> Self {
        self.conceal_line = true;
        self
    }

    /// Sets the caret's label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Sets the help line.
    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }

    /// Adds a note at another place.
    pub fn note(mut self, span: Span, label: impl Into<String>) -> Self {
        self.notes.push(Note {
            span,
            label: label.into(),
        });
        self
    }

    /// Error or warning (from the code).
    pub fn severity(&self) -> Severity {
        self.code.severity()
    }

    /// Whether it stops the input from being used.
    pub fn is_error(&self) -> bool {
        self.severity() == Severity::Error
    }

    /// Renders the diagnostic rustc-style (no colour: stable for snapshots
    /// and logs).
    pub fn render(&self, sources: &SourceMap) -> String {
        let mut out = String::new();
        let kind = match self.severity() {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        let redact = self.masker(sources);
        let _ = writeln!(
            out,
            "{kind}[{}]: {}",
            self.code.as_str(),
            redact(&self.title)
        );
        if self.whole_file {
            let _ = writeln!(out, " --> {}", sources.get(self.span.file).name());
        } else if self.conceal_line {
            let file = sources.get(self.span.file).name();
            let (line, col) = (self.span.line, self.span.col);
            let gutter = line.to_string();
            let _ = writeln!(out, " --> {file}:{line}:{col}");
            let _ = writeln!(out, "{} |", " ".repeat(gutter.len()));
            let _ = writeln!(out, "{gutter} | (line not shown: it may hold a secret)");
        } else {
            render_snippet(&mut out, sources, self.span, &redact(&self.label), "-->");
        }
        for note in &self.notes {
            render_snippet(&mut out, sources, note.span, &redact(&note.label), ":::");
        }
        if let Some(help) = &self.help {
            let _ = writeln!(out, "  = help: {}", redact(help));
        }
        out
    }

    /// How the title, labels and help are shown. They quote the input's
    /// own words (`found `…``, `unknown reason `…``): credential-shaped
    /// ones are masked, and so is any word the lines pointed at hold in a
    /// credential (a quote of it alone is no longer credential-shaped).
    fn masker(&self, sources: &SourceMap) -> impl Fn(&str) -> String {
        let secrets = self.quoted_secrets(sources);
        move |t| secrets.scrub(&crate::redact::redact(t)).into_owned()
    }

    /// The words that the lines this diagnostic points at hold in a
    /// credential ([`crate::redact::masked_words`]), near each span.
    fn quoted_secrets(&self, sources: &SourceMap) -> crate::redact::Redactor {
        let spans = (!self.whole_file)
            .then_some(self.span)
            .into_iter()
            .chain(self.notes.iter().map(|n| n.span));
        let mut words = Vec::new();
        for span in spans {
            let file = sources.get(span.file);
            let text = file.line_text(span.line);
            // Around the span only, as the snippet is (a one-line ruleset
            // is megabytes): what it shows and the margin it checks.
            let at = (span.start as usize).saturating_sub(file.line_start(span.line));
            let reach = SNIPPET_MAX_BYTES + 256;
            let (from, to) = whole_chars(text, at.saturating_sub(reach), at + reach);
            words.extend(crate::redact::masked_words(&text[from..to]));
        }
        crate::redact::Redactor::new(words)
    }
}

/// Source lines longer than this are shown as a window around the span.
const SNIPPET_MAX_BYTES: usize = 240;
/// How much of a long line the window shows on each side of the span.
const SNIPPET_CONTEXT_BYTES: usize = 80;

/// `from..to` within `text`, widened to whole characters (`from` down,
/// `to` up; `str::floor_char_boundary` is newer than the MSRV).
fn whole_chars(text: &str, from: usize, to: usize) -> (usize, usize) {
    let (mut from, mut to) = (from.min(text.len()), to.min(text.len()));
    while !text.is_char_boundary(from) {
        from -= 1;
    }
    while !text.is_char_boundary(to) {
        to += 1;
    }
    (from, to)
}

fn render_snippet(out: &mut String, sources: &SourceMap, span: Span, label: &str, arrow: &str) {
    let file = sources.get(span.file);
    let (line, col) = (span.line, span.col);
    let _ = writeln!(out, " {arrow} {}:{line}:{col}", file.name());
    let text = file.line_text(line);
    let gutter = line.to_string();
    let pad = " ".repeat(gutter.len());
    // The caret runs under the span, clipped to the first line.
    let start_byte = file.line_start(line);
    let line_end = start_byte + text.len();
    // Spans are byte ranges; snap them to character boundaries so a span
    // that ends inside a character (lossily decoded input) still renders.
    let snap = |mut i: usize| {
        while !file.text().is_char_boundary(i) {
            i += 1;
        }
        i
    };
    let span_start = snap((span.start as usize).clamp(start_byte, line_end)) - start_byte;
    let span_end = snap((span.end as usize).clamp(span_start + start_byte, line_end)) - start_byte;
    // A long line (a whole ruleset written on one line) is shown as a
    // window around the span: quoting it whole under each of thousands of
    // diagnostics took gigabytes.
    let (from, to) = if text.len() > SNIPPET_MAX_BYTES {
        whole_chars(
            text,
            span_start.saturating_sub(SNIPPET_CONTEXT_BYTES),
            (span_end.max(span_start + 1) + SNIPPET_CONTEXT_BYTES)
                .min(span_start + SNIPPET_MAX_BYTES),
        )
    } else {
        (0, text.len())
    };
    let (before, after) = (
        if from > 0 { "…" } else { "" },
        if to < text.len() { "…" } else { "" },
    );
    let _ = writeln!(out, "{pad} |");
    // What is shown, and a margin around it where a token cut by the
    // window's edges may continue (checking the whole line would cost its
    // length per diagnostic).
    let (near_from, near_to) = whole_chars(text, from.saturating_sub(256), to + 256);
    if crate::redact::may_hold_secret(&text[near_from..near_to]) {
        // Quoting the line back (a key pasted into a comment, say) would
        // print the secret: where it is must do (SPEC R16.11).
        let _ = writeln!(out, "{gutter} | (line not shown: it may hold a secret)");
        if !label.is_empty() {
            let _ = writeln!(out, "{pad} = {label}");
        }
        return;
    }
    let _ = writeln!(out, "{gutter} | {before}{}{after}", &text[from..to]);
    let lead: String = before
        .chars()
        .map(|_| ' ')
        .chain(
            text[from..span_start]
                .chars()
                .map(|c| if c == '\t' { '\t' } else { ' ' }),
        )
        .collect();
    let width = text[span_start..span_end.min(to)].chars().count().max(1);
    let carets = "^".repeat(width);
    if label.is_empty() {
        let _ = writeln!(out, "{pad} | {lead}{carets}");
    } else {
        let _ = writeln!(out, "{pad} | {lead}{carets} {label}");
    }
}

/// Diagnostics together with the sources they point into: what a failed
/// build of the rules returns (`failover::errors::RulesError::Invalid`).
/// `Display` renders them all, rustc-style, with a count at the end;
/// `Debug` lists them with the files' names (not their texts).
pub struct Diagnostics {
    sources: SourceMap,
    list: Vec<Diagnostic>,
}

impl Diagnostics {
    /// Diagnostics over `sources` (sorted by file and position).
    pub fn new(sources: SourceMap, mut list: Vec<Diagnostic>) -> Self {
        sort(&mut list);
        Diagnostics { sources, list }
    }

    /// Every diagnostic, errors and warnings, by file and position.
    pub fn as_slice(&self) -> &[Diagnostic] {
        &self.list
    }

    /// The files the spans point into.
    pub fn sources(&self) -> &SourceMap {
        &self.sources
    }

    /// How many are errors (the rest are warnings).
    pub fn error_count(&self) -> usize {
        self.list.iter().filter(|d| d.is_error()).count()
    }

    /// All of them rendered, followed by the one-line count (what
    /// `failover check` prints).
    pub fn render(&self) -> String {
        render_all(&self.list, &self.sources)
    }

    /// The sources and the list, to take apart.
    pub fn into_parts(self) -> (SourceMap, Vec<Diagnostic>) {
        (self.sources, self.list)
    }
}

impl std::fmt::Debug for Diagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let files: Vec<&str> = self.sources.files().map(|(_, file)| file.name()).collect();
        f.debug_struct("Diagnostics")
            .field("files", &files)
            .field("list", &self.list)
            .finish()
    }
}

impl std::fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.render().trim_end())
    }
}

impl std::error::Error for Diagnostics {}

/// At most `max` characters of `s`, and `…` when it was cut.
pub fn preview(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(max).collect();
        t.push('…');
        t
    }
}

/// [`preview`] on one line: a newline shown as `⏎`.
pub fn preview_line(s: &str, max: usize) -> String {
    preview(&s.replace('\n', "⏎"), max)
}

/// Renders a batch of diagnostics followed by a one-line count, the way
/// `failover check` prints them.
pub fn render_all(diags: &[Diagnostic], sources: &SourceMap) -> String {
    let mut out = String::new();
    for d in diags {
        out.push_str(&d.render(sources));
        out.push('\n');
    }
    let errors = diags.iter().filter(|d| d.is_error()).count();
    let warnings = diags.len() - errors;
    let _ = writeln!(
        out,
        "{} error{}, {} warning{}",
        errors,
        if errors == 1 { "" } else { "s" },
        warnings,
        if warnings == 1 { "" } else { "s" }
    );
    out
}

/// One diagnostic as the `--json` documents of `check` and `test` give it
/// (`docs/json.md`): the same code, words and place as the rendering,
/// credential-shaped words masked alike.
pub fn to_json(d: &Diagnostic, sources: &SourceMap) -> serde_json::Value {
    let redact = d.masker(sources);
    let place = |span: Span| {
        let f = sources.get(span.file);
        let (end_line, end_col) = f.line_col(span.end as usize);
        serde_json::json!({
            "file": f.name(),
            "line": span.line,
            "col": span.col,
            "end_line": end_line,
            "end_col": end_col,
        })
    };
    let mut v = place(d.span);
    v["code"] = d.code.as_str().into();
    v["severity"] = match d.severity() {
        Severity::Error => "error",
        Severity::Warning => "warning",
    }
    .into();
    v["title"] = redact(&d.title).into();
    v["label"] = redact(&d.label).into();
    v["help"] = d.help.as_deref().map(&redact).into();
    v["notes"] = d
        .notes
        .iter()
        .map(|n| {
            let mut p = place(n.span);
            p["label"] = redact(&n.label).into();
            p
        })
        .collect::<Vec<_>>()
        .into();
    v
}

/// Sorts diagnostics by file, then position, then code, so output is stable.
pub fn sort(diags: &mut [Diagnostic]) {
    diags.sort_by_key(|d| (d.span.file, d.span.start, d.code, d.span.end));
}

/// The candidate `word` was probably meant to be, for "did you mean" help:
/// the first that differs only in letter case (`imagemodel`) or by two
/// swapped neighbouring letters (`modle`), else the closest by edit
/// distance, within a third of the word's length. The one matcher for rule
/// names, golden-case fields and config keys.
pub fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let candidates: Vec<&'a str> = candidates.into_iter().collect();
    let a: Vec<char> = word.chars().collect();
    let swapped = |k: &str| {
        let b: Vec<char> = k.chars().collect();
        a.len() == b.len() && {
            let diff: Vec<usize> = (0..a.len()).filter(|&i| a[i] != b[i]).collect();
            diff.len() == 2
                && diff[1] == diff[0] + 1
                && a[diff[0]] == b[diff[1]]
                && a[diff[1]] == b[diff[0]]
        }
    };
    if let Some(k) = candidates
        .iter()
        .find(|k| k.eq_ignore_ascii_case(word) || swapped(k))
    {
        return Some(k);
    }
    let limit = (word.len() / 3).max(1);
    candidates
        .into_iter()
        .map(|c| (edit_distance(word, c), c))
        .filter(|(d, _)| *d <= limit)
        .min()
        .map(|(_, c)| c)
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

pub use crate::fsio::bytes_shown;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn did_you_mean_finds_close_words_only() {
        let words = ["rate_limit", "billing", "overloaded"];
        assert_eq!(did_you_mean("rate_limt", words), Some("rate_limit"));
        assert_eq!(did_you_mean("biling", words), Some("billing"));
        assert_eq!(did_you_mean("zzz", words), None);
        // A case slip or two swapped letters, whatever the length.
        assert_eq!(did_you_mean("BILLING", words), Some("billing"));
        assert_eq!(did_you_mean("modle", ["model", "mode"]), Some("model"));
    }

    /// On a long line the snippet is a window around the span, marked with
    /// `…` at the cut ends, and the caret still sits under the span.
    #[test]
    fn long_lines_are_shown_as_a_window_around_the_span() {
        let mut sources = SourceMap::new();
        let text = format!("{}BAD{}\n", "a".repeat(5_000), "b".repeat(5_000));
        let f = sources.add("long.rules", text);
        let d = Diagnostic::new(Code::E001, sources.span(f, 5_000, 5_003), "bad").label("here");
        let out = d.render(&sources);
        assert!(out.len() < 700, "{} bytes", out.len());
        assert!(out.contains(" --> long.rules:1:5001"), "{out}");
        let lines: Vec<&str> = out.lines().collect();
        let (code, carets) = (lines[3], lines[4]);
        assert!(code.starts_with("1 | …a") && code.ends_with("b…"), "{code}");
        let at = carets.find('^').unwrap();
        assert_eq!(code.chars().nth(carets[..at].chars().count()), Some('B'));
        assert!(carets.ends_with("^^^ here"), "{carets}");
        // Short lines are shown whole.
        let g = sources.add("short.rules", "rule x when BAD\n".to_string());
        let d = Diagnostic::new(Code::E001, sources.span(g, 12, 15), "bad");
        assert!(d.render(&sources).contains("1 | rule x when BAD\n"));
    }

    // R16.11: a line holding a credential is not shown, and the title,
    // label, help and notes do not quote the credential's words either,
    // though a word alone is no longer credential-shaped. Found by the
    // rules reader's fuzz target: pest's `found `…`` quoted the base64
    // after a `Basic` the mutations had moved into a rule.
    #[test]
    fn r16_11_messages_do_not_quote_a_credential_of_the_line() {
        let mut sources = SourceMap::new();
        let line = "   and Basic dXNlcjpodW50ZXIyMg==(type in [\"validationexception\"])\n";
        let f = sources.add("fuzz.rules", format!("rule x\n  when a\n{line}"));
        let at = 17 + line.find("dXNl").unwrap();
        let span = sources.span(f, at, at + 18);
        let d = Diagnostic::new(
            Code::E001,
            span,
            "expected an operator, found `dXNlcjpodW50ZXIyMg`",
        )
        .label("unexpected `dXNlcjpodW50ZXIyMg`")
        .help("not `DXNLCJPODW50ZXIYMG` either")
        .note(span, "see `dXNlcjpodW50ZXIyMg`");
        let out = d.render(&sources);
        assert!(!out.to_ascii_lowercase().contains("dxnlcjpodw50"), "{out}");
        assert_eq!(out.matches("<redacted>").count(), 4, "{out}");
        let json = to_json(&d, &sources).to_string();
        assert!(
            !json.to_ascii_lowercase().contains("dxnlcjpodw50"),
            "{json}"
        );
        assert_eq!(json.matches("<redacted>").count(), 4, "{json}");
        assert!(
            out.contains("(line not shown: it may hold a secret)"),
            "{out}"
        );
        // The rest of the message stays, and so does a word of the line
        // that is no credential.
        let d = Diagnostic::new(
            Code::E001,
            span,
            "found `validationexception` after `dXNlcjpodW50ZXIyMg`",
        );
        let out = d.render(&sources);
        assert!(
            out.contains("error[E001]: found `validationexception` after `<redacted>`"),
            "{out}"
        );
        // A line with no credential: its words are quoted as they are.
        let g = sources.add(
            "plain.rules",
            "rule x when message has dXNlcjpodW50ZXIyMg\n".to_string(),
        );
        let d = Diagnostic::new(
            Code::E001,
            sources.span(g, 24, 42),
            "found `dXNlcjpodW50ZXIyMg`",
        );
        assert!(d.render(&sources).contains("found `dXNlcjpodW50ZXIyMg`"));
    }

    #[test]
    fn warning_codes_are_warnings() {
        assert_eq!(Code::W001.severity(), Severity::Warning);
        assert_eq!(Code::E004.severity(), Severity::Error);
    }
}
