//! Golden cases: example errors with the reason and deciding rule an
//! operator expects, kept beside each rules file (`*.cases.yaml`).
//!
//! ```yaml
//! - message: "Your credit balance is too low to access the Anthropic API"
//!   status: 400
//!   provider: anthropic
//!   expect: billing
//!   rule: billing.credits
//!   spec: R8.1
//! - message: "LLM request failed with an unknown error."
//!   not: timeout          # must not be (one reason or a list)
//!   expect: unclassified
//!   rule: null            # no rule decides
//! ```
//!
//! [`run`] classifies every case and builds the report `failover test`
//! prints: per reason and per rule, hits, misses and false alarms; a run
//! fails on any miss and on any rule that no case decides.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Deserialize;
use serde_json::Value;

use crate::classify::{Body, Engine, ProviderError};
use crate::diag::preview_line;

/// One golden case as written in a cases file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The provider that sent the error.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model the request asked for.
    #[serde(default)]
    pub model: Option<String>,
    /// The HTTP status.
    #[serde(default)]
    pub status: Option<u16>,
    /// The provider's error code.
    #[serde(default)]
    pub code: Option<String>,
    /// `type`: the provider's error type (e.g. `rate_limit_error`).
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    /// The error message (an SDK's exception text).
    #[serde(default)]
    pub message: Option<String>,
    /// A body as text or as a JSON/YAML object.
    #[serde(default)]
    pub body: Option<Value>,
    /// The expected reason.
    #[serde(default)]
    pub expect: Option<String>,
    /// The expected deciding rule id; `null` for "no rule" (`unclassified`).
    #[serde(default, deserialize_with = "explicit_option")]
    pub rule: Option<Option<String>>,
    /// Reasons this error must not get.
    #[serde(default)]
    pub not: Option<OneOrMany>,
    /// The SPEC id or source the case pins: for the reader of the file
    /// (required by review, not by the runner).
    #[serde(default)]
    #[allow(dead_code)]
    pub spec: Option<String>,
}

fn explicit_option<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::<String>::deserialize(d)?))
}

/// One reason or a list of them (a case's `not`).
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// A single reason.
    One(String),
    /// A list of reasons.
    Many(Vec<String>),
}

impl OneOrMany {
    /// The reasons as a list.
    pub fn as_slice(&self) -> &[String] {
        match self {
            OneOrMany::One(s) => std::slice::from_ref(s),
            OneOrMany::Many(v) => v,
        }
    }
}

/// Cases files larger than this are refused by their size, unread: the
/// largest shipped one is about 20 KB, and 4 MiB of YAML is tens of
/// thousands of cases.
pub const MAX_CASES_BYTES: u64 = 4 << 20;

/// The fields a case may have, in the order `--add-from` writes them.
pub const FIELDS: [&str; 11] = [
    "provider", "model", "status", "code", "type", "message", "body", "expect", "rule", "not",
    "spec",
];

/// A cases file: its name, its text (kept so that `--accept` can edit it
/// where the cases are written), the parsed cases and where each one is.
#[derive(Debug, Clone)]
pub struct CaseFile {
    /// The file name, as shown in reports and diagnostics.
    pub name: String,
    /// The file's text as read.
    pub text: String,
    /// The parsed cases, in file order.
    pub cases: Vec<Case>,
    /// One per case, in order.
    pub spans: Vec<CaseSpan>,
}

/// Where one case is written in its file.
#[derive(Debug, Clone, Default)]
pub struct CaseSpan {
    /// 1-based line and column of the case's mapping.
    pub line: usize,
    /// See [`line`](Self::line).
    pub col: usize,
    /// Byte offset of the case's mapping.
    pub start: usize,
    /// The case's `key: value` pairs, in file order (empty when the entry
    /// is not a mapping).
    pub fields: Vec<FieldSpan>,
}

/// One `key: value` of a case: byte ranges of the key and of the value
/// (for a scalar value, exactly its text, quotes included).
#[derive(Debug, Clone)]
pub struct FieldSpan {
    /// The key as written (`expect`, `rule`, …).
    pub key: String,
    /// Byte range (start, end exclusive) of the key.
    pub key_range: (usize, usize),
    /// Byte range (start, end exclusive) of the value.
    pub value_range: (usize, usize),
    /// The value is a scalar (not a list or mapping).
    pub scalar: bool,
}

impl CaseSpan {
    /// Where the field `key` is written, if the case has it.
    pub fn field(&self, key: &str) -> Option<&FieldSpan> {
        self.fields.iter().find(|f| f.key == key)
    }
}

/// The problems of a cases file, as diagnostics over its text (rendered
/// like the rules' own: code, `file:line:col`, caret, help).
#[derive(Debug)]
pub struct CasesError {
    /// The file's text, for rendering the diagnostics.
    pub sources: crate::syntax::SourceMap,
    /// The problems found, in file order.
    pub diagnostics: Vec<crate::diag::Diagnostic>,
}

impl CasesError {
    /// The diagnostics, rendered, without the closing count.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for d in &self.diagnostics {
            out.push_str(&d.render(&self.sources));
            out.push('\n');
        }
        out
    }
}

impl std::fmt::Display for CasesError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.render())
    }
}

/// Byte offsets of a text's characters (saphyr counts characters).
struct CharToByte<'a> {
    text: &'a str,
    offsets: Option<Vec<usize>>,
}

impl<'a> CharToByte<'a> {
    fn new(text: &'a str) -> Self {
        let offsets = (!text.is_ascii()).then(|| text.char_indices().map(|(i, _)| i).collect());
        CharToByte { text, offsets }
    }

    fn byte(&self, char_index: usize) -> usize {
        match &self.offsets {
            None => char_index.min(self.text.len()),
            Some(v) => v.get(char_index).copied().unwrap_or(self.text.len()),
        }
    }
}

/// The end of a quoted scalar that starts at byte `start` (`"…"` with
/// backslash escapes, `'…'` with `''`), if one starts there: the parser's
/// spans of quoted scalars run on past the closing quote.
fn quoted_end(text: &str, start: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let quote = *bytes.get(start)?;
    if quote != b'"' && quote != b'\'' {
        return None;
    }
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 2,
            b if b == quote => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

/// Where each case of a cases file is (the items of the top-level list that
/// are mappings; other items get an empty span). `None` when the text is
/// not a YAML list (the typed reading then says what it is).
fn outline(text: &str) -> Option<Vec<CaseSpan>> {
    use saphyr_parser::{Event, Parser};
    let bytes = CharToByte::new(text);
    let mut parser = Parser::new_from_str(text);
    let mut next = move || match parser.next_event() {
        Some(Ok((e, span))) => Some((e, span)),
        _ => None,
    };
    // Skips the rest of a node that began with `first`; returns the end
    // marker's character index.
    fn skip<'t>(
        first: &Event<'t>,
        end: usize,
        next: &mut impl FnMut() -> Option<(Event<'t>, saphyr_parser::Span)>,
    ) -> Option<usize> {
        let mut depth = usize::from(matches!(
            first,
            Event::SequenceStart(..) | Event::MappingStart(..)
        ));
        let mut last = end;
        while depth > 0 {
            let (e, span) = next()?;
            last = span.end.index();
            match e {
                Event::SequenceStart(..) | Event::MappingStart(..) => depth += 1,
                Event::SequenceEnd | Event::MappingEnd => depth -= 1,
                _ => {}
            }
        }
        Some(last)
    }
    let root = loop {
        let n = next()?;
        if !matches!(n.0, Event::StreamStart | Event::DocumentStart(_)) {
            break n;
        }
    };
    if !matches!(root.0, Event::SequenceStart(..)) {
        return None;
    }
    let mut spans = Vec::new();
    loop {
        let (item, item_span) = next()?;
        match item {
            Event::SequenceEnd => break,
            Event::MappingStart(..) => {
                let start = bytes.byte(item_span.start.index());
                let mut case = CaseSpan {
                    line: item_span.start.line(),
                    col: item_span.start.col() + 1,
                    start,
                    fields: Vec::new(),
                };
                loop {
                    let (key, key_span) = next()?;
                    if matches!(key, Event::MappingEnd) {
                        break;
                    }
                    let key_end = skip(&key, key_span.end.index(), &mut next)?;
                    let (value, value_span) = next()?;
                    let scalar = matches!(value, Event::Scalar(..));
                    let value_end = skip(&value, value_span.end.index(), &mut next)?;
                    if let Event::Scalar(k, ..) = &key {
                        let range = |from: usize, to: usize, scalar: bool| {
                            let from = bytes.byte(from);
                            let to = match scalar.then(|| quoted_end(text, from)).flatten() {
                                Some(end) => end,
                                None => bytes.byte(to),
                            };
                            (from, to)
                        };
                        case.fields.push(FieldSpan {
                            key: k.to_string(),
                            key_range: range(key_span.start.index(), key_end, true),
                            value_range: range(value_span.start.index(), value_end, scalar),
                            scalar,
                        });
                    }
                }
                spans.push(case);
            }
            other => {
                skip(&other, item_span.end.index(), &mut next)?;
                spans.push(CaseSpan {
                    line: item_span.start.line(),
                    col: item_span.start.col() + 1,
                    start: bytes.byte(item_span.start.index()),
                    fields: Vec::new(),
                });
            }
        }
    }
    Some(spans)
}

/// Parses a cases file. Every problem is a diagnostic with a stable code
/// (E017–E020, E006), its line and column and a caret; an unknown field
/// gets a did-you-mean.
pub fn parse_cases(name: &str, text: &str) -> Result<CaseFile, CasesError> {
    use crate::diag::{did_you_mean, Code, Diagnostic};
    let mut sources = crate::syntax::SourceMap::new();
    let file = sources.add(name, text);
    let at_line_col = |sources: &crate::syntax::SourceMap, line: usize, col: usize| {
        let f = sources.get(file);
        let line = line.max(1) as u32;
        let start = f.line_start(line);
        let line_text = f.line_text(line);
        let within: usize = line_text
            .char_indices()
            .nth(col.saturating_sub(1))
            .map_or(line_text.len(), |(i, _)| i);
        let at = start + within;
        let end = text[at..]
            .char_indices()
            .nth(1)
            .map_or(text.len(), |(i, _)| at + i);
        sources.span(file, at, end)
    };
    let fail = |sources, diagnostics| {
        Err(CasesError {
            sources,
            diagnostics,
        })
    };
    if let Err(refused) = crate::yaml::guard(text) {
        let span = at_line_col(&sources, refused.line, refused.column);
        let d = Diagnostic::new(
            Code::E017,
            span,
            format!("cases file is not readable YAML: {refused}"),
        )
        .label("here")
        .help("a cases file is a YAML list of cases: `- {message: \"…\", expect: REASON}`");
        return fail(sources, vec![d]);
    }
    let spans = outline(text).unwrap_or_default();
    let mut diags = Vec::new();
    for case in &spans {
        for f in &case.fields {
            if FIELDS.contains(&f.key.as_str()) {
                continue;
            }
            let mut d = Diagnostic::new(
                Code::E018,
                sources.span(file, f.key_range.0, f.key_range.1),
                format!("unknown field `{}` in a golden case", f.key),
            )
            .label("no case has this field");
            d = match did_you_mean(&f.key, FIELDS) {
                Some(s) => d.help(format!("did you mean `{s}`?")),
                None => d.help(format!("a case's fields are {}", quoted_list(&FIELDS))),
            };
            diags.push(d);
        }
    }
    if !diags.is_empty() {
        return fail(sources, diags);
    }
    let cases: Vec<Case> = match serde_yaml::from_str::<Option<Vec<Case>>>(text) {
        Ok(cases) => cases.unwrap_or_default(),
        Err(e) => {
            let (message, at) = crate::yaml::error_message(&e);
            let (line, col) = at.unwrap_or((1, 1));
            let span = at_line_col(&sources, line, col);
            let d = Diagnostic::new(Code::E019, span, message)
                .label("here")
                .help(
                    "a cases file is a YAML list of mappings; `status` is a number, \
                     `not` a reason or a list of reasons, the other fields text \
                     (`body` text or a mapping)",
                );
            return fail(sources, vec![d]);
        }
    };
    for (i, c) in cases.iter().enumerate() {
        let at = spans.get(i).cloned().unwrap_or_default();
        let case_span = sources.span(file, at.start, at.start + 1);
        if c.expect.is_none() && c.not.is_none() {
            diags.push(
                Diagnostic::new(
                    Code::E020,
                    case_span,
                    format!("case #{} says neither `expect` nor `not`", i + 1),
                )
                .label("this case checks nothing")
                .help("add `expect: REASON` (and `rule: RULE_ID`), or `not: REASON`"),
            );
        }
        if let Some(s) = c.status.filter(|s| !(100..=599).contains(s)) {
            let span = at.field("status").map_or(case_span, |f| {
                sources.span(file, f.value_range.0, f.value_range.1)
            });
            diags.push(
                Diagnostic::new(
                    Code::E006,
                    span,
                    format!(
                        "case #{}: status {s} is not an HTTP status (100–599)",
                        i + 1
                    ),
                )
                .label("not an HTTP status"),
            );
        }
    }
    if !diags.is_empty() {
        return fail(sources, diags);
    }
    let mut spans = spans;
    spans.resize(cases.len(), CaseSpan::default());
    Ok(CaseFile {
        name: name.to_string(),
        text: text.to_string(),
        cases,
        spans,
    })
}

fn quoted_list(words: &[&str]) -> String {
    words
        .iter()
        .map(|w| format!("`{w}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Case {
    /// The input as the engine sees it.
    pub fn input(&self) -> ProviderError<'_> {
        error_input(
            [
                &self.provider,
                &self.model,
                &self.code,
                &self.error_type,
                &self.message,
            ],
            self.status,
            self.body.as_ref(),
        )
    }

    /// A one-line description of the input, for tables and failures.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.provider {
            parts.push(format!("provider={p}"));
        }
        if let Some(s) = self.status {
            parts.push(format!("status={s}"));
        }
        if let Some(c) = &self.code {
            parts.push(format!("code={c}"));
        }
        if let Some(t) = &self.error_type {
            parts.push(format!("type={t}"));
        }
        if let Some(m) = &self.message {
            parts.push(format!("{:?}", preview_line(m, 70)));
        }
        if let Some(b) = &self.body {
            let text = match b {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            parts.push(format!("body={}", preview_line(&text, 70)));
        }
        if parts.is_empty() {
            "(empty)".into()
        } else {
            parts.join(" ")
        }
    }
}

/// The engine's input from the fields a cases or corpus file writes:
/// `[provider, model, code, type, message]`, the status and the body (text
/// or a JSON/YAML object).
pub(crate) fn error_input<'a>(
    [provider, model, code, error_type, message]: [&'a Option<String>; 5],
    status: Option<u16>,
    body: Option<&'a Value>,
) -> ProviderError<'a> {
    ProviderError {
        provider: provider.as_deref(),
        model: model.as_deref(),
        status,
        code: code.as_deref(),
        error_type: error_type.as_deref(),
        message: message.as_deref(),
        body: body.map(|b| match b {
            Value::String(s) => Body::Text(s),
            other => Body::Json(other),
        }),
    }
}

/// What one case produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The cases file the case comes from.
    pub file: String,
    /// 1-based: `case #index`.
    pub index: usize,
    /// Where the case is written (1-based line and column).
    pub line: usize,
    /// See [`line`](Self::line).
    pub col: usize,
    /// The case as written.
    pub case: Case,
    /// The reason the ruleset gave it.
    pub reason: String,
    /// The deciding rule's id; `None` when no rule matched (`unclassified`).
    pub rule: Option<String>,
    /// Empty when the case passed.
    pub problems: Vec<String>,
    /// For a failing case, the `--explain` account of its verdict.
    pub explain: Option<String>,
}

impl Outcome {
    /// What the case expects, in words: `rate_limit (rule x.y)`,
    /// `not billing`.
    pub fn expected(&self) -> String {
        let mut parts = Vec::new();
        if let Some(want) = &self.case.expect {
            parts.push(want.clone());
        }
        match &self.case.rule {
            Some(Some(r)) => parts.push(format!("(rule {r})")),
            Some(None) => parts.push("(no rule)".into()),
            None => {}
        }
        if let Some(not) = &self.case.not {
            parts.push(format!("not {}", not.as_slice().join(", ")));
        }
        parts.join(" ")
    }

    /// `file:line:col` of the case.
    pub fn location(&self) -> String {
        format!("{}:{}:{}", self.file, self.line, self.col)
    }
}

/// Which rules a report covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every rule of every layer in use.
    All,
    /// The operator layers' rules only (not the embedded defaults).
    Operator,
}

/// Counts for one reason or one rule.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Cases that expect it (for a rule, also passing cases it decided).
    pub cases: usize,
    /// Of those, the cases that passed.
    pub hits: usize,
    /// Of those, the cases that failed.
    pub misses: usize,
    /// Wrong verdicts it gave to cases that expected something else.
    pub false_alarms: usize,
}

/// The result of running golden cases.
#[derive(Debug)]
pub struct Report {
    /// One per case, file by file.
    pub outcomes: Vec<Outcome>,
    /// Counts per reason.
    pub by_reason: BTreeMap<String, Tally>,
    /// In rule order: (rule id, layer name, tally).
    pub by_rule: Vec<(String, String, Tally)>,
    /// Ids of the rules in scope that no passing case decides.
    pub uncovered: Vec<String>,
}

impl Report {
    /// How many cases failed.
    pub fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| !o.problems.is_empty())
            .count()
    }

    /// Whether the run holds: no case failed and every rule is covered.
    pub fn passed(&self) -> bool {
        self.failed() == 0 && self.uncovered.is_empty()
    }
}

/// Classifies every case of every file; the report covers every rule.
pub fn run(engine: &Engine, files: &[CaseFile]) -> Report {
    run_scoped(engine, files, Scope::All)
}

/// Classifies every case of every file; the report's rule table (and the
/// rules no case decides) covers the rules of `scope`, its reason table
/// the reasons the cases expect or got (every declared one for
/// [`Scope::All`]).
pub fn run_scoped(engine: &Engine, files: &[CaseFile], scope: Scope) -> Report {
    let rs = engine.ruleset();
    let mut by_reason: BTreeMap<String, Tally> = rs
        .reasons
        .iter()
        .map(|r| (r.name.clone(), Tally::default()))
        .collect();
    let mut by_rule: Vec<Tally> = vec![Tally::default(); rs.rules.len()];
    let rule_index = |id: &str| rs.rules.iter().position(|r| r.id == id);
    let mut outcomes = Vec::new();

    for file in files {
        for (i, case) in file.cases.iter().enumerate() {
            let c = engine.classify_rules(&case.input());
            let mut problems = Vec::new();
            if let Some(want) = &case.expect {
                if want != c.reason {
                    problems.push(format!("expected `{want}`, got `{}`", c.reason));
                }
                if rs.reason_id(want).is_none() {
                    problems.push(format!("`{want}` is not a declared reason"));
                }
            }
            if let Some(want_rule) = &case.rule {
                if want_rule.as_deref() != c.rule {
                    problems.push(format!(
                        "expected rule `{}`, got `{}`",
                        want_rule.as_deref().unwrap_or("none"),
                        c.rule.unwrap_or("none")
                    ));
                }
            }
            if let Some(not) = &case.not {
                if not.as_slice().iter().any(|n| n == c.reason) {
                    problems.push(format!("must not be `{}`", c.reason));
                }
            }
            if let Some(want) = &case.expect {
                if rs.reason_id(want).is_none() {
                    if let Some(close) =
                        crate::diag::did_you_mean(want, rs.reasons.iter().map(|r| r.name.as_str()))
                    {
                        problems.push(format!("did you mean `{close}`?"));
                    }
                }
            }
            let ok = problems.is_empty();
            // Per reason: hits/misses count against the expected reason;
            // a false alarm is a verdict of this reason that was wrong.
            if let Some(want) = &case.expect {
                let t = by_reason.entry(want.clone()).or_default();
                t.cases += 1;
                if want == c.reason {
                    t.hits += 1;
                } else {
                    t.misses += 1;
                }
            }
            let wrong_verdict = case.expect.as_deref().is_some_and(|w| w != c.reason)
                || case
                    .not
                    .as_ref()
                    .is_some_and(|n| n.as_slice().iter().any(|x| x == c.reason));
            if wrong_verdict {
                by_reason
                    .entry(c.reason.to_string())
                    .or_default()
                    .false_alarms += 1;
            }
            // Per rule: the expected rule's hits/misses; a false alarm for
            // the rule that decided wrongly.
            if let Some(Some(want_rule)) = &case.rule {
                if let Some(idx) = rule_index(want_rule) {
                    by_rule[idx].cases += 1;
                    if ok {
                        by_rule[idx].hits += 1;
                    } else {
                        by_rule[idx].misses += 1;
                    }
                }
            } else if ok {
                if let Some(idx) = c.rule_index {
                    by_rule[idx as usize].cases += 1;
                    by_rule[idx as usize].hits += 1;
                }
            }
            let wrong_rule = wrong_verdict
                || case
                    .rule
                    .as_ref()
                    .is_some_and(|want| want.as_deref() != c.rule);
            if wrong_rule {
                if let Some(idx) = c.rule_index {
                    by_rule[idx as usize].false_alarms += 1;
                }
            }
            let explain = (!ok).then(|| {
                let (c, ex) = engine.explain(&case.input());
                crate::classify::render_explanation(engine, &c, &ex)
            });
            let at = file.spans.get(i);
            outcomes.push(Outcome {
                file: file.name.clone(),
                index: i + 1,
                line: at.map_or(0, |s| s.line),
                col: at.map_or(0, |s| s.col),
                case: case.clone(),
                reason: c.reason.to_string(),
                rule: c.rule.map(str::to_string),
                problems,
                explain,
            });
        }
    }

    let by_rule: Vec<(String, String, Tally)> = rs
        .rules
        .iter()
        .zip(by_rule)
        .filter(|(r, _)| scope == Scope::All || !r.is_default)
        .map(|(r, t)| (r.id.clone(), rs.layers[r.layer].name.clone(), t))
        .collect();
    if scope == Scope::Operator {
        by_reason.retain(|_, t| t.cases > 0 || t.false_alarms > 0);
    }
    let uncovered = by_rule
        .iter()
        .filter(|(_, _, t)| t.hits == 0)
        .map(|(id, _, _)| id.clone())
        .collect();
    Report {
        outcomes,
        by_reason,
        by_rule,
        uncovered,
    }
}

/// What `failover test --accept` makes of one cases file.
#[derive(Debug, Default)]
pub struct Accepted {
    /// The file's new text: the old one with the failing cases' `expect`
    /// and `rule` values replaced where they are written; everything else
    /// (comments, order, quoting, layout) byte for byte as it was.
    pub text: String,
    /// How many failing cases were rewritten.
    pub accepted: usize,
    /// Failing cases that could not be: `(file:line:col, why)`.
    pub refused: Vec<(String, String)>,
}

/// Rewrites the failing cases of `file` (its outcomes among `outcomes`) to
/// expect what they got. A case whose `not` holds its verdict is refused
/// (accepting it would contradict the case), as is a value that is not a
/// one-line scalar.
pub fn accept(file: &CaseFile, outcomes: &[Outcome]) -> Accepted {
    let text = &file.text;
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    let mut out = Accepted::default();
    for o in outcomes
        .iter()
        .filter(|o| o.file == file.name && !o.problems.is_empty())
    {
        let Some(at) = file.spans.get(o.index - 1) else {
            continue;
        };
        let refuse = |out: &mut Accepted, why: String| out.refused.push((o.location(), why));
        if let Some(not) = &o.case.not {
            if not.as_slice().contains(&o.reason) {
                refuse(
                    &mut out,
                    format!(
                        "the case says it must not be `{}`; change the rules or the case by hand",
                        o.reason
                    ),
                );
                continue;
            }
        }
        let mut case_edits = Vec::new();
        let mut problem = None;
        let mut replace = |key: &str, new: Option<&str>| {
            let Some(f) = at.field(key) else {
                return;
            };
            let (a, b) = f.value_range;
            let old = &text[a..b];
            if !f.scalar || old.contains('\n') || a == b {
                problem = Some(format!(
                    "`{key}` is not written as a one-line value; edit it by hand"
                ));
                return;
            }
            let new = match (new, old.as_bytes()[0]) {
                (None, _) => "null".to_string(),
                (Some(v), b'"') => format!("\"{v}\""),
                (Some(v), b'\'') => format!("'{v}'"),
                (Some(v), _) => v.to_string(),
            };
            case_edits.push((a, b, new));
        };
        if o.case.expect.as_deref().is_some_and(|w| w != o.reason) {
            replace("expect", Some(o.reason.as_str()));
        }
        if let Some(want) = &o.case.rule {
            if want.as_deref() != o.rule.as_deref() {
                replace("rule", o.rule.as_deref());
            }
        }
        match problem {
            Some(why) => refuse(&mut out, why),
            None if case_edits.is_empty() => refuse(
                &mut out,
                "nothing in the case to rewrite; edit it by hand".into(),
            ),
            None => {
                out.accepted += 1;
                edits.extend(case_edits);
            }
        }
    }
    edits.sort_by_key(|e| std::cmp::Reverse(e.0));
    let mut new = text.clone();
    for (a, b, with) in edits {
        new.replace_range(a..b, &with);
    }
    out.text = new;
    out
}

/// A unified diff of two texts with the same number of lines (what
/// [`accept`] produces), without context lines.
pub fn line_diff(name: &str, old: &str, new: &str) -> String {
    let mut out = String::new();
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let mut i = 0;
    while i < old_lines.len().max(new_lines.len()) {
        if old_lines.get(i) == new_lines.get(i) {
            i += 1;
            continue;
        }
        let start = i;
        while i < old_lines.len().max(new_lines.len()) && old_lines.get(i) != new_lines.get(i) {
            i += 1;
        }
        if out.is_empty() {
            let _ = writeln!(out, "--- {name}\n+++ {name}");
        }
        let n = i - start;
        let _ = writeln!(out, "@@ -{},{n} +{},{n} @@", start + 1, start + 1);
        for l in old_lines.iter().take(i).skip(start) {
            let _ = writeln!(out, "-{l}");
        }
        for l in new_lines.iter().take(i).skip(start) {
            let _ = writeln!(out, "+{l}");
        }
    }
    out
}

/// A case for `--add-from`: what the engine says of `case` now, written
/// as a YAML list item (values as JSON, which YAML reads), after a comment
/// naming where it came from.
pub fn case_yaml(case: &Case, reason: &str, rule: Option<&str>, origin: &str) -> String {
    let mut out = format!("# {origin} (added with its current verdict: review it)\n");
    let mut first = true;
    // `value` is the text after `key:`; one starting with a newline is a
    // nested block.
    let mut field = |out: &mut String, key: &str, value: String| {
        let lead = if first { "- " } else { "  " };
        first = false;
        let sep = if value.starts_with('\n') { "" } else { " " };
        let _ = writeln!(out, "{lead}{key}:{sep}{value}");
    };
    let json = |s: &str| serde_json::to_string(s).unwrap_or_default();
    for (key, v) in [("provider", &case.provider), ("model", &case.model)] {
        if let Some(v) = v {
            field(&mut out, key, json(v));
        }
    }
    if let Some(s) = case.status {
        field(&mut out, "status", s.to_string());
    }
    for (key, v) in [
        ("code", &case.code),
        ("type", &case.error_type),
        ("message", &case.message),
    ] {
        if let Some(v) = v {
            field(&mut out, key, json(v));
        }
    }
    match &case.body {
        None => {}
        Some(Value::String(b)) => field(&mut out, "body", json(b)),
        // An object as a nested block, the way a person would write it.
        Some(b) => {
            let yaml = serde_yaml::to_string(b).unwrap_or_default();
            let mut block = String::new();
            for line in yaml.lines() {
                block.push_str("\n    ");
                block.push_str(line);
            }
            field(&mut out, "body", block);
        }
    }
    field(&mut out, "expect", reason.to_string());
    field(&mut out, "rule", rule.unwrap_or("null").to_string());
    out
}

/// The table `failover test` prints.
pub fn render_report(report: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<20} {:>6} {:>6} {:>7} {:>13}",
        "reason", "cases", "hits", "misses", "false alarms"
    );
    for (reason, t) in &report.by_reason {
        let _ = writeln!(
            out,
            "{:<20} {:>6} {:>6} {:>7} {:>13}",
            reason, t.cases, t.hits, t.misses, t.false_alarms
        );
    }
    let width = report
        .by_rule
        .iter()
        .map(|(id, _, _)| id.len())
        .max()
        .unwrap_or(4)
        .clamp(4, crate::diag::MAX_COLUMN);
    let _ = writeln!(out);
    let lw = report
        .by_rule
        .iter()
        .map(|(_, l, _)| l.len())
        .max()
        .unwrap_or(5)
        .clamp(5, crate::diag::MAX_COLUMN);
    let _ = writeln!(
        out,
        "{:<width$} {:<lw$} {:>6} {:>7} {:>13}",
        "rule", "layer", "hits", "misses", "false alarms"
    );
    for (id, layer, t) in &report.by_rule {
        let _ = writeln!(
            out,
            "{:<width$} {:<lw$} {:>6} {:>7} {:>13}",
            id, layer, t.hits, t.misses, t.false_alarms
        );
    }
    let failed: Vec<&Outcome> = report
        .outcomes
        .iter()
        .filter(|o| !o.problems.is_empty())
        .collect();
    if !failed.is_empty() {
        let _ = writeln!(out, "\nfailures:");
        for o in &failed {
            let _ = writeln!(
                out,
                "  {}: case #{}: {}",
                o.location(),
                o.index,
                o.problems.join("; ")
            );
            let _ = writeln!(out, "    input:    {}", o.case.describe());
            let _ = writeln!(out, "    expected: {}", o.expected());
            let _ = writeln!(
                out,
                "    got:      {} ({})",
                o.reason,
                o.rule
                    .as_deref()
                    .map_or("no rule".into(), |r| format!("rule {r}"))
            );
            if let Some(why) = &o.explain {
                let _ = writeln!(out, "    why:");
                for line in why.lines() {
                    let _ = writeln!(out, "      {line}");
                }
            }
        }
    }
    if !report.uncovered.is_empty() {
        let _ = writeln!(out, "\nrules that no case decides:");
        for id in &report.uncovered {
            let _ = writeln!(out, "  {id}");
        }
    }
    let total = report.outcomes.len();
    let rules = report.by_rule.len();
    let _ = writeln!(
        out,
        "\n{} passed, {} failed; {} of {} rules decided by a case",
        total - failed.len(),
        failed.len(),
        rules - report.uncovered.len(),
        rules
    );
    out
}

/// The version of the `failover test --json` document (`schema`); bumped
/// only when a field changes meaning or goes away (new fields may appear).
pub const TEST_JSON_SCHEMA: &str = "failover.test/2";

fn tally_json(t: &Tally) -> Value {
    serde_json::json!({
        "cases": t.cases,
        "hits": t.hits,
        "misses": t.misses,
        "false_alarms": t.false_alarms,
    })
}

/// The golden part of `failover test --json` (`docs/json.md`).
pub fn report_json(report: &Report) -> Value {
    let failures: Vec<Value> = report
        .outcomes
        .iter()
        .filter(|o| !o.problems.is_empty())
        .map(|o| {
            serde_json::json!({
                "file": o.file,
                "line": o.line,
                "col": o.col,
                "case": o.index,
                "input": o.case.describe(),
                "expected": {
                    "reason": o.case.expect,
                    "rule": o.case.rule,
                    "not": o.case.not.as_ref().map(|n| n.as_slice().to_vec()),
                },
                "actual": {"reason": o.reason, "rule": o.rule},
                "problems": o.problems,
                "explain": o.explain,
            })
        })
        .collect();
    let reasons: Vec<Value> = report
        .by_reason
        .iter()
        .map(|(r, t)| {
            let mut v = tally_json(t);
            v["reason"] = Value::from(r.as_str());
            v
        })
        .collect();
    let rules: Vec<Value> = report
        .by_rule
        .iter()
        .map(|(id, layer, t)| {
            let mut v = tally_json(t);
            v["rule"] = Value::from(id.as_str());
            v["layer"] = Value::from(layer.as_str());
            v
        })
        .collect();
    serde_json::json!({
        "cases": report.outcomes.len(),
        "failed": report.failed(),
        "reasons": reasons,
        "rules": rules,
        "uncovered": report.uncovered,
        "failures": failures,
    })
}

/// The review table of one cases file (what the insta snapshot shows):
/// each case's input and verdict.
#[cfg(test)]
pub fn render_case_table(report: &Report, file: &str) -> String {
    let mut out = String::new();
    for o in report.outcomes.iter().filter(|o| o.file == file) {
        let mark = if o.problems.is_empty() {
            "ok  "
        } else {
            "FAIL"
        };
        let _ = writeln!(
            out,
            "{mark} #{:<3} {:<16} {:<44} {}",
            o.index,
            o.reason,
            o.rule.as_deref().unwrap_or("(no rule)"),
            o.case.describe()
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deeply_nested_cases_are_refused_up_front() {
        let text = format!(
            "- {{message: x, expect: timeout, body: {}}}\n",
            "[".repeat(100_000)
        );
        let err = parse_cases("c.yaml", &text).unwrap_err();
        assert_eq!(err.diagnostics[0].code, crate::diag::Code::E017);
        let shown = err.render();
        assert!(shown.contains(" --> c.yaml:1:293"), "{shown}");
        assert!(
            shown.contains("collections nested more than 64 deep"),
            "{shown}"
        );
        // Issue 16 item 1: an apostrophe in a plain value before the
        // brackets switched the former guard off.
        let text = format!(
            "- message: don't\n  expect: timeout\n  body: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let shown = parse_cases("c.yaml", &text).unwrap_err().render();
        assert!(shown.contains(" --> c.yaml:3:"), "{shown}");
        assert!(shown.contains("nested more than 64 deep"), "{shown}");
    }

    #[test]
    fn a_case_status_must_be_an_http_status() {
        assert!(parse_cases("c.yaml", "- {message: x, status: 429, expect: timeout}\n").is_ok());
        for bad in [0, 99, 600, 700] {
            let err = parse_cases(
                "c.yaml",
                &format!("- {{message: x, status: {bad}, expect: timeout}}\n"),
            )
            .unwrap_err();
            assert_eq!(err.diagnostics[0].code, crate::diag::Code::E006);
            let shown = err.render();
            assert!(
                shown.contains(&format!(
                    "case #1: status {bad} is not an HTTP status (100–599)"
                )),
                "{shown}"
            );
            // The caret is under the value.
            assert!(shown.contains(" --> c.yaml:1:24"), "{shown}");
        }
    }

    /// The outline finds each case and its values where they are written,
    /// quotes included, in block and flow style, with non-ASCII text before.
    #[test]
    fn the_outline_locates_cases_and_values() {
        let text = "# é comment\n- message: \"é\"   # why\n  expect: 'billing'\n  rule: null\n- {message: x, expect: timeout}\n";
        let file = parse_cases("c.yaml", text).unwrap();
        assert_eq!((file.spans[0].line, file.spans[0].col), (2, 3));
        assert_eq!((file.spans[1].line, file.spans[1].col), (5, 3));
        let v = |i: usize, k: &str| {
            let (a, b) = file.spans[i].field(k).unwrap().value_range;
            &text[a..b]
        };
        assert_eq!(v(0, "message"), "\"é\"");
        assert_eq!(v(0, "expect"), "'billing'");
        assert_eq!(v(0, "rule"), "null");
        assert_eq!(v(1, "expect"), "timeout");
    }

    #[test]
    fn accept_rewrites_only_the_failing_values() {
        let engine = Engine::builtin();
        let text = "# pinned by hand\n- message: \"Too many requests\"\n  status: 429\n  expect: \"billing\"     # wrong on purpose\n  rule: billing.credits\n- {message: \"Too many requests\", status: 429, expect: rate_limit}\n- {message: \"Too many requests\", status: 429, not: rate_limit}\n";
        let file = parse_cases("c.cases.yaml", text).unwrap();
        let report = run(&engine, std::slice::from_ref(&file));
        let got = &report.outcomes[0];
        let a = accept(&file, &report.outcomes);
        assert_eq!(a.accepted, 1);
        assert_eq!(a.refused.len(), 1, "{:?}", a.refused);
        assert!(
            a.refused[0].0.starts_with("c.cases.yaml:7:3"),
            "{:?}",
            a.refused
        );
        let want = text
            .replace("\"billing\"     #", &format!("\"{}\"     #", got.reason))
            .replace(
                "rule: billing.credits",
                &format!("rule: {}", got.rule.as_deref().unwrap()),
            );
        assert_eq!(a.text, want);
        let diff = line_diff("c.cases.yaml", text, &a.text);
        assert!(
            diff.starts_with("--- c.cases.yaml\n+++ c.cases.yaml\n@@ -4,2 +4,2 @@\n"),
            "{diff}"
        );
        // Accepted, the case passes.
        let again = parse_cases("c.cases.yaml", &a.text).unwrap();
        let report = run(&engine, std::slice::from_ref(&again));
        assert_eq!(report.failed(), 1, "only the `not` case still fails");
    }
}
