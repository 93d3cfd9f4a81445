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

/// One golden case as written in a cases file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    #[serde(default)]
    pub provider: Option<String>,
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub status: Option<u16>,
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
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
    /// The SPEC id or source the case pins.
    #[serde(default)]
    pub spec: Option<String>,
}

fn explicit_option<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<String>>, D::Error> {
    Ok(Some(Option::<String>::deserialize(d)?))
}

#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
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

/// A cases file: its name and the parsed cases.
#[derive(Debug, Clone)]
pub struct CaseFile {
    pub name: String,
    pub cases: Vec<Case>,
}

/// Parses a cases file; errors name the file and, where known, the line.
pub fn parse_cases(name: &str, text: &str) -> Result<CaseFile, String> {
    if let Err(refused) = crate::yaml::guard(text) {
        return Err(format!(
            "{name}:{}:{}: {refused}",
            refused.line, refused.column
        ));
    }
    let cases: Vec<Case> = serde_yaml::from_str(text).map_err(|e| {
        let at = e
            .location()
            .map(|l| format!(":{}:{}", l.line(), l.column()))
            .unwrap_or_default();
        format!("{name}{at}: {}", strip_location(&e.to_string()))
    })?;
    for (i, c) in cases.iter().enumerate() {
        if c.expect.is_none() && c.not.is_none() {
            return Err(format!(
                "{name}: case #{} says neither `expect` nor `not`",
                i + 1
            ));
        }
        if let Some(s) = c.status.filter(|s| !(100..=599).contains(s)) {
            return Err(format!(
                "{name}: case #{}: status {s} is not an HTTP status (100–599)",
                i + 1
            ));
        }
    }
    Ok(CaseFile {
        name: name.to_string(),
        cases,
    })
}

fn strip_location(msg: &str) -> String {
    match msg.find(" at line ") {
        Some(i) => msg[..i].to_string(),
        None => msg.to_string(),
    }
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
            parts.push(format!("{:?}", preview(m, 70)));
        }
        if let Some(b) = &self.body {
            let text = match b {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            parts.push(format!("body={}", preview(&text, 70)));
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

/// One line of at most `max` characters (a newline shown as `⏎`).
pub(crate) fn preview(s: &str, max: usize) -> String {
    let one_line = s.replace('\n', "⏎");
    if one_line.chars().count() <= max {
        one_line
    } else {
        let mut t: String = one_line.chars().take(max).collect();
        t.push('…');
        t
    }
}

/// What one case produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub file: String,
    pub index: usize,
    pub case: Case,
    pub reason: String,
    pub rule: Option<String>,
    /// Empty when the case passed.
    pub problems: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    pub cases: usize,
    pub hits: usize,
    pub misses: usize,
    pub false_alarms: usize,
}

/// The result of running golden cases.
#[derive(Debug)]
pub struct Report {
    pub outcomes: Vec<Outcome>,
    pub by_reason: BTreeMap<String, Tally>,
    /// In rule order: (rule id, layer name, tally).
    pub by_rule: Vec<(String, String, Tally)>,
    pub uncovered: Vec<String>,
}

impl Report {
    pub fn failed(&self) -> usize {
        self.outcomes
            .iter()
            .filter(|o| !o.problems.is_empty())
            .count()
    }

    pub fn passed(&self) -> bool {
        self.failed() == 0 && self.uncovered.is_empty()
    }
}

/// Classifies every case of every file.
pub fn run(engine: &Engine, files: &[CaseFile]) -> Report {
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
            let c = engine.classify(&case.input());
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
            outcomes.push(Outcome {
                file: file.name.clone(),
                index: i + 1,
                case: case.clone(),
                reason: c.reason.to_string(),
                rule: c.rule.map(str::to_string),
                problems,
            });
        }
    }

    let by_rule: Vec<(String, String, Tally)> = rs
        .rules
        .iter()
        .zip(by_rule)
        .map(|(r, t)| (r.id.clone(), rs.layers[r.layer].name.clone(), t))
        .collect();
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
                "  {} case #{}: {}",
                o.file,
                o.index,
                o.problems.join("; ")
            );
            let _ = writeln!(out, "    input: {}", o.case.describe());
            let _ = writeln!(
                out,
                "    got:   {} ({})",
                o.reason,
                o.rule.as_deref().unwrap_or("no rule")
            );
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

/// The review table of one cases file (what the insta snapshot shows):
/// each case's input and verdict.
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
        assert_eq!(err, "c.yaml:1:293: collections nested more than 64 deep");
        // Issue 16 item 1: an apostrophe in a plain value before the
        // brackets switched the former guard off.
        let text = format!(
            "- message: don't\n  expect: timeout\n  body: {}{}\n",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let err = parse_cases("c.yaml", &text).unwrap_err();
        assert!(err.starts_with("c.yaml:3:"), "{err}");
        assert!(err.ends_with("nested more than 64 deep"), "{err}");
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
            assert_eq!(
                err,
                format!("c.yaml: case #1: status {bad} is not an HTTP status (100–599)")
            );
        }
    }
}
