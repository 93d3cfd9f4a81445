//! The field corpus: real provider errors, each labelled with the reason
//! SPEC.md gives it, and the agreement report `failover test` prints.
//!
//! Golden cases pin *rules* (this input, this rule); the field corpus
//! measures *the ruleset* against what providers really send. An item is
//! an error as its source published it plus the label a reader of the SPEC
//! gives it (`tests/field/README.md` has the labelling rules):
//!
//! ```yaml
//! - provider: openai
//!   status: 429
//!   body: '{"error": {"message": "You exceeded your current quota, …", "code": "insufficient_quota"}}'
//!   expected: billing            # or a list, where two readings are defensible
//!   why: "a billing lockout even under 429 (R8.1)"
//!   source: https://platform.openai.com/docs/guides/error-codes
//! ```
//!
//! Two agreements are counted. **Exact**: the verdict is one of the
//! labels. **Decision**: the verdict makes the runner do what one of the
//! labels would — fail over or stop, and cool down, disable or neither
//! (read from the reasons' declared behaviour, so an operator layer that
//! changes a reason changes the decision). Two kinds of wrong decision are
//! listed one by one, as they are what users feel: an **unsafe stop** (the
//! label fails over, the verdict stops the run, so the user gets an error
//! a fallback could have answered) and an **unsafe failover** (the label
//! stops, the verdict walks the chain with a request that will fail the
//! same way everywhere).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Deserializer};
use serde_json::Value;

use crate::classify::{Engine, ProviderError};
use crate::compile::DisableLane;
use crate::diag::preview_line;

/// The default floor of the rules' exact agreement (percent) below which
/// `failover test` fails: just under what the default rules give on the
/// embedded corpus (81.3% on 1,010 items, most added where the rules were
/// known to miss), so a change that loses ground fails.
pub const DEFAULT_FLOOR_PCT: f64 = 80.0;

/// One labelled error.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Item {
    /// The provider that sent the error, when known.
    #[serde(default)]
    pub provider: Option<String>,
    /// The model the request asked for, when known.
    #[serde(default)]
    pub model: Option<String>,
    /// The HTTP status the source shows (`null`: none shown).
    #[serde(default)]
    pub status: Option<u16>,
    /// A code given beside the body (text or number).
    #[serde(default, deserialize_with = "text_or_number")]
    pub code: Option<String>,
    /// `type`: an error type given beside the body (e.g. `rate_limit_error`).
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    /// An error message given beside the body (an SDK's exception text).
    #[serde(default)]
    pub message: Option<String>,
    /// The body as published: text, or a JSON/YAML object.
    #[serde(default)]
    pub body: Option<Value>,
    /// The reason (or the defensible reasons) the SPEC gives this error.
    pub expected: Labels,
    /// Why the SPEC gives it that reason, and where the error text comes
    /// from (a citation): required in every entry, for the reviewer; the
    /// runner does not read them.
    #[allow(dead_code)]
    pub why: String,
    /// Where the error text comes from (a citation, usually a URL).
    #[allow(dead_code)]
    pub source: String,
}

/// One reason or a list of them.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Labels {
    /// A single reason.
    One(String),
    /// Several defensible reasons; a verdict agrees with any of them.
    Many(Vec<String>),
}

impl Labels {
    /// The labels as a list, the first one being the primary label.
    pub fn as_slice(&self) -> &[String] {
        match self {
            Labels::One(s) => std::slice::from_ref(s),
            Labels::Many(v) => v,
        }
    }
}

fn text_or_number<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(Value::Number(n)) => Some(n.to_string()),
        Some(Value::Bool(b)) => Some(b.to_string()),
        Some(_) => return Err(serde::de::Error::custom("`code` must be text or a number")),
    })
}

impl Item {
    /// The input as the engine sees it.
    pub fn input(&self) -> ProviderError<'_> {
        crate::golden::error_input(
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

    fn text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(m) = &self.message {
            parts.push(m.clone());
        }
        match &self.body {
            Some(Value::String(s)) => parts.push(s.clone()),
            Some(other) => parts.push(other.to_string()),
            None => {}
        }
        parts.join(" ")
    }
}

/// A corpus file: its name, its items and the line each item starts on.
#[derive(Debug, Clone)]
pub struct FieldFile {
    /// The file name, as shown in reports.
    pub name: String,
    /// The labelled errors, in file order.
    pub items: Vec<Item>,
    /// The 1-based line each item starts on, parallel to `items`.
    pub lines: Vec<usize>,
}

/// Parses a corpus file (a YAML list of items).
pub fn parse(name: &str, text: &str) -> Result<FieldFile, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    if let Err(refused) = crate::yaml::guard(text) {
        return Err(format!(
            "{name}:{}:{}: {refused}",
            refused.line, refused.column
        ));
    }
    let items: Vec<Item> = serde_yaml::from_str(text).map_err(|e| {
        let (msg, at) = crate::yaml::error_message(&e);
        let at = at.map(|(l, c)| format!(":{l}:{c}")).unwrap_or_default();
        format!("{name}{at}: {msg}")
    })?;
    let lines = item_lines(text);
    for (i, item) in items.iter().enumerate() {
        let line = lines.get(i).copied().unwrap_or(0);
        if let Some(s) = item.status.filter(|s| !(100..=599).contains(s)) {
            return Err(format!(
                "{name}:{line}: status {s} is not an HTTP status (100–599)"
            ));
        }
        if item.expected.as_slice().is_empty() {
            return Err(format!("{name}:{line}: `expected` names no reason"));
        }
        if item.body.is_none() && item.message.is_none() {
            return Err(format!(
                "{name}:{line}: an item needs a `body` or a `message`"
            ));
        }
    }
    Ok(FieldFile {
        name: name.to_string(),
        items,
        lines,
    })
}

/// The 1-based line of each top-level list entry (`- ` in column 1): the
/// corpus files are block lists, one item per entry.
fn item_lines(text: &str) -> Vec<usize> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| *l == "-" || l.starts_with("- "))
        .map(|(i, _)| i + 1)
        .collect()
}

/// What the runner does with a reason: the part of its behaviour a user
/// feels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Surface the error (`stop`).
    Stop,
    /// Fail over; the profile is neither cooled down nor disabled.
    Failover,
    /// Fail over and cool the profile down.
    FailoverCooldown,
    /// Fail over and disable the profile on a long lane.
    FailoverDisable(DisableLane),
}

impl Decision {
    fn of(engine: &Engine, reason: &str) -> Option<Decision> {
        let rs = engine.ruleset();
        let b = &rs.reason(rs.reason_id(reason)?).behaviour;
        Some(if !b.failover {
            Decision::Stop
        } else if let Some(lane) = b.disable {
            Decision::FailoverDisable(lane)
        } else if b.cooldown {
            Decision::FailoverCooldown
        } else {
            Decision::Failover
        })
    }

    /// Whether the runner moves on to another profile or candidate (anything
    /// but [`Decision::Stop`]).
    pub fn fails_over(self) -> bool {
        self != Decision::Stop
    }
}

/// How a verdict compares with an item's labels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Judged {
    pub exact: bool,
    pub decision: bool,
    pub unsafe_stop: bool,
    pub unsafe_failover: bool,
}

/// Judges `reason` against `labels` by the reasons' behaviour in `engine`.
pub(crate) fn judge(engine: &Engine, reason: &str, labels: &[String]) -> Judged {
    let got = Decision::of(engine, reason);
    let wanted: Vec<Decision> = labels
        .iter()
        .filter_map(|l| Decision::of(engine, l))
        .collect();
    let got_fails_over = got.is_some_and(Decision::fails_over);
    Judged {
        exact: labels.iter().any(|l| l == reason),
        decision: got.is_some_and(|g| wanted.contains(&g)),
        // A defensible label that agrees with the verdict's direction
        // makes the direction safe.
        unsafe_stop: !got_fails_over && !wanted.is_empty() && wanted.iter().all(|w| w.fails_over()),
        unsafe_failover: got_fails_over
            && !wanted.is_empty()
            && wanted.iter().all(|w| !w.fails_over()),
    }
}

/// One item's verdict.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// The corpus file the item comes from.
    pub file: String,
    /// The line the item starts on.
    pub line: usize,
    /// The labelled error itself.
    pub item: Item,
    /// The reason the ruleset gave it.
    pub reason: String,
    /// The deciding rule's id; `None` when no rule matched (`unclassified`).
    pub rule: Option<String>,
    /// Exact agreement: the reason is one of the labels.
    pub exact: bool,
    /// Decision agreement: the reason makes the runner do what one of the
    /// labels would.
    pub decision: bool,
    /// The label fails over; the verdict stops the run.
    pub unsafe_stop: bool,
    /// The label stops; the verdict fails over.
    pub unsafe_failover: bool,
    /// Labels no layer in use declares.
    pub undeclared: Vec<String>,
}

/// Counts for one group (a provider, a reason, the whole corpus).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Agreement {
    /// Items in the group.
    pub items: usize,
    /// Items whose verdict is one of their labels.
    pub exact: usize,
    /// Items whose verdict makes the runner do what one of their labels would.
    pub decision: usize,
}

impl Agreement {
    fn add(&mut self, v: &Verdict) {
        self.items += 1;
        self.exact += usize::from(v.exact);
        self.decision += usize::from(v.decision);
    }

    /// Exact agreement in percent (100 for an empty group).
    pub fn exact_pct(&self) -> f64 {
        pct(self.exact, self.items)
    }

    /// Decision agreement in percent (100 for an empty group).
    pub fn decision_pct(&self) -> f64 {
        pct(self.decision, self.items)
    }
}

fn pct(n: usize, of: usize) -> f64 {
    if of == 0 {
        100.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// The agreement report.
#[derive(Debug)]
pub struct Report {
    /// Every item's verdict, file by file.
    pub verdicts: Vec<Verdict>,
    /// Counts over the whole corpus.
    pub total: Agreement,
    /// Counts per provider (`(none)` for items without one).
    pub by_provider: BTreeMap<String, Agreement>,
    /// Keyed by the first label.
    pub by_reason: BTreeMap<String, Agreement>,
    /// (first label, verdict) → count, for the items that disagree.
    pub confusion: BTreeMap<(String, String), usize>,
    /// Items no rule matched.
    pub unclassified: usize,
    /// Exact agreement (percent) below which the report fails.
    pub floor_pct: f64,
}

impl Report {
    /// The verdicts that stop a run a label would fail over.
    pub fn unsafe_stops(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.unsafe_stop)
    }

    /// The verdicts that fail over where every label would stop.
    pub fn unsafe_failovers(&self) -> impl Iterator<Item = &Verdict> {
        self.verdicts.iter().filter(|v| v.unsafe_failover)
    }

    /// Whether the corpus holds: exact agreement at or above the floor,
    /// no unsafe stop, every label a declared reason.
    pub fn passed(&self) -> bool {
        self.total.exact_pct() >= self.floor_pct
            && self.unsafe_stops().next().is_none()
            && self.verdicts.iter().all(|v| v.undeclared.is_empty())
    }
}

/// The field-corpus part of `failover test --json` (`docs/json.md`).
pub fn report_json(report: &Report) -> serde_json::Value {
    let verdict = |v: &Verdict| {
        serde_json::json!({
            "file": v.file,
            "line": v.line,
            "expected": v.item.expected.as_slice(),
            "actual": {"reason": v.reason, "rule": v.rule},
        })
    };
    let agreement = |a: &Agreement| {
        serde_json::json!({
            "items": a.items,
            "exact": a.exact,
            "decision": a.decision,
        })
    };
    serde_json::json!({
        "passed": report.passed(),
        "items": report.total.items,
        "exact": report.total.exact,
        "decision": report.total.decision,
        "exact_pct": report.total.exact_pct(),
        "decision_pct": report.total.decision_pct(),
        "floor_pct": report.floor_pct,
        "unclassified": report.unclassified,
        "by_provider": report.by_provider.iter().map(|(k, a)| (k.clone(), agreement(a))).collect::<serde_json::Map<_, _>>(),
        "by_reason": report.by_reason.iter().map(|(k, a)| (k.clone(), agreement(a))).collect::<serde_json::Map<_, _>>(),
        "unsafe_stops": report.unsafe_stops().map(verdict).collect::<Vec<_>>(),
        "unsafe_failovers": report.unsafe_failovers().map(verdict).collect::<Vec<_>>(),
        "disagreements": report.verdicts.iter().filter(|v| !v.exact).map(verdict).collect::<Vec<_>>(),
    })
}

/// Classifies every item of every file.
pub fn run(engine: &Engine, files: &[FieldFile], floor_pct: f64) -> Report {
    let mut report = Report {
        verdicts: Vec::new(),
        total: Agreement::default(),
        by_provider: BTreeMap::new(),
        by_reason: BTreeMap::new(),
        confusion: BTreeMap::new(),
        unclassified: 0,
        floor_pct,
    };
    for file in files {
        for (i, item) in file.items.iter().enumerate() {
            let c = engine.classify(&item.input());
            let labels = item.expected.as_slice();
            let undeclared: Vec<String> = labels
                .iter()
                .filter(|l| Decision::of(engine, l).is_none())
                .cloned()
                .collect();
            let Judged {
                exact,
                decision,
                unsafe_stop,
                unsafe_failover,
            } = judge(engine, c.reason, labels);
            let v = Verdict {
                file: file.name.clone(),
                line: file.lines.get(i).copied().unwrap_or(0),
                item: item.clone(),
                reason: c.reason.to_string(),
                rule: c.rule.map(str::to_string),
                exact,
                decision,
                unsafe_stop,
                unsafe_failover,
                undeclared,
            };
            report.total.add(&v);
            let provider = item.provider.clone().unwrap_or_else(|| "(none)".into());
            report.by_provider.entry(provider).or_default().add(&v);
            report
                .by_reason
                .entry(labels[0].clone())
                .or_default()
                .add(&v);
            if !exact {
                *report
                    .confusion
                    .entry((labels.join("|"), v.reason.clone()))
                    .or_default() += 1;
            }
            if c.decided_by == crate::classify::Decider::None {
                report.unclassified += 1;
            }
            report.verdicts.push(v);
        }
    }
    report
}

fn agreement_table(out: &mut String, group: &str, rows: &BTreeMap<String, Agreement>) {
    let _ = writeln!(
        out,
        "\n  {group:<24} {:>5} {:>8} {:>10}",
        "items", "exact", "decision"
    );
    for (name, a) in rows {
        let _ = writeln!(
            out,
            "  {:<24} {:>5} {:>7.1}% {:>9.1}%",
            preview_line(name, 24),
            a.items,
            a.exact_pct(),
            a.decision_pct()
        );
    }
}

fn verdict_line(out: &mut String, v: &Verdict) {
    let _ = writeln!(
        out,
        "  {}:{}: expected {}, got {} ({})",
        v.file,
        v.line,
        v.item.expected.as_slice().join(" or "),
        v.reason,
        v.rule.as_deref().unwrap_or("no rule")
    );
    let status = v
        .item
        .status
        .map(|s| format!(" status={s}"))
        .unwrap_or_default();
    let _ = writeln!(
        out,
        "    provider={}{status} {}",
        v.item.provider.as_deref().unwrap_or("-"),
        preview_line(&v.item.text(), 110)
    );
}

/// The report `failover test` prints after the golden table.
pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let (stops, failovers) = summary_lines(&mut out, report);
    render_details(&mut out, report, stops, failovers);
    out
}

/// The report's headline: the totals in six lines and, since they fail
/// the test, every unsafe stop; [`render`] adds the tables and every
/// disagreement.
pub fn render_summary(report: &Report) -> String {
    let mut out = String::new();
    let (stops, _) = summary_lines(&mut out, report);
    if stops > 0 {
        let _ = writeln!(
            out,
            "\nunsafe stops (the label fails over, the verdict stops the run):"
        );
        for v in report.unsafe_stops() {
            verdict_line(&mut out, v);
        }
    }
    out
}

/// The totals; returns the unsafe stops and failovers.
fn summary_lines(out: &mut String, report: &Report) -> (usize, usize) {
    let t = &report.total;
    let stops = report.unsafe_stops().count();
    let failovers = report.unsafe_failovers().count();
    let _ = writeln!(out, "field corpus: {} real provider errors", t.items);
    let _ = writeln!(
        out,
        "  exact agreement    {:>5.1}% ({} of {}; floor {:.1}%)",
        t.exact_pct(),
        t.exact,
        t.items,
        report.floor_pct
    );
    let _ = writeln!(
        out,
        "  decision agreement {:>5.1}% ({} of {})",
        t.decision_pct(),
        t.decision,
        t.items
    );
    let _ = writeln!(
        out,
        "  unclassified       {:>5.1}% ({})",
        pct(report.unclassified, t.items),
        report.unclassified
    );
    let _ = writeln!(
        out,
        "  unsafe stops       {:>5.1}% ({stops})",
        pct(stops, t.items)
    );
    let _ = writeln!(
        out,
        "  unsafe failovers   {:>5.1}% ({failovers})",
        pct(failovers, t.items)
    );
    (stops, failovers)
}

/// The tables and every disagreement.
fn render_details(out: &mut String, report: &Report, stops: usize, failovers: usize) {
    let t = &report.total;
    agreement_table(out, "provider", &report.by_provider);
    agreement_table(out, "expected reason", &report.by_reason);
    if !report.confusion.is_empty() {
        let mut pairs: Vec<(&(String, String), &usize)> = report.confusion.iter().collect();
        pairs.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let _ = writeln!(out, "\n  confusion (expected → got, disagreements only)");
        for ((want, got), n) in pairs {
            let _ = writeln!(out, "  {:>5}  {} → {}", n, want, got);
        }
    }
    let undeclared: Vec<&Verdict> = report
        .verdicts
        .iter()
        .filter(|v| !v.undeclared.is_empty())
        .collect();
    if !undeclared.is_empty() {
        let _ = writeln!(out, "\nlabels that no layer in use declares:");
        for v in undeclared {
            let _ = writeln!(out, "  {}:{}: {}", v.file, v.line, v.undeclared.join(", "));
        }
    }
    if stops > 0 {
        let _ = writeln!(
            out,
            "\nunsafe stops (the label fails over, the verdict stops the run):"
        );
        for v in report.unsafe_stops() {
            verdict_line(out, v);
        }
    }
    if failovers > 0 {
        let _ = writeln!(
            out,
            "\nunsafe failovers (the label stops, the verdict fails over):"
        );
        for v in report.unsafe_failovers() {
            verdict_line(out, v);
        }
    }
    let others: Vec<&Verdict> = report
        .verdicts
        .iter()
        .filter(|v| !v.exact && !v.unsafe_stop && !v.unsafe_failover)
        .collect();
    if !others.is_empty() {
        let _ = writeln!(out, "\nother disagreements:");
        for v in others {
            verdict_line(out, v);
        }
    }
    let _ = writeln!(
        out,
        "\nfield corpus: {} (exact {:.1}%, floor {:.1}%; {} unsafe stops)",
        if report.passed() { "ok" } else { "FAILED" },
        t.exact_pct(),
        report.floor_pct,
        stops
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    const CORPUS: &str = r#"# a comment
- provider: openai
  status: 429
  body: '{"error": {"message": "You exceeded your current quota, please check your plan and billing details.", "type": "insufficient_quota", "code": "insufficient_quota"}}'
  expected: billing
  why: R8.1
  source: test
- provider: anthropic
  status: 400
  body: "prompt is too long: 210000 tokens > 200000 maximum"
  expected: context_overflow
  why: R9.2
  source: test
- provider: x
  status: 400
  body: "some invalid parameter"
  expected: [rate_limit, timeout]
  why: a made-up disagreement for the test
  source: test
- provider: x
  status: 503
  body: "upstream connect error"
  expected: context_overflow
  why: a made-up unsafe failover for the test
  source: test
"#;

    #[test]
    fn items_keep_their_lines_and_codes_may_be_numbers() {
        let f = parse(
            "c.yaml",
            "- body: x\n  code: 1113\n  expected: billing\n  why: w\n  source: s\n",
        )
        .unwrap();
        assert_eq!(f.items[0].code.as_deref(), Some("1113"));
        let f = parse("c.yaml", CORPUS).unwrap();
        assert_eq!(f.lines, vec![2, 8, 14, 20]);
    }

    #[test]
    fn bad_items_are_refused_with_their_line() {
        let e = parse("c.yaml", "- body: x\n  expected: billing\n  why: w\n  source: s\n- status: 700\n  body: x\n  expected: billing\n  why: w\n  source: s\n").unwrap_err();
        assert!(e.starts_with("c.yaml:5:"), "{e}");
        let e = parse(
            "c.yaml",
            "- status: 400\n  expected: format\n  why: w\n  source: s\n",
        )
        .unwrap_err();
        assert!(e.contains("needs a `body`"), "{e}");
        let e = parse("c.yaml", "- body: x\n  expected: format\n  why: w\n").unwrap_err();
        assert!(e.contains("source"), "{e}");
    }

    #[test]
    fn agreement_counts_exact_decision_and_the_unsafe_directions() {
        let engine = Engine::builtin();
        let f = parse("c.yaml", CORPUS).unwrap();
        let r = run(&engine, &[f], 95.0);
        let by: Vec<(&str, bool, bool, bool, bool)> = r
            .verdicts
            .iter()
            .map(|v| {
                (
                    v.reason.as_str(),
                    v.exact,
                    v.decision,
                    v.unsafe_stop,
                    v.unsafe_failover,
                )
            })
            .collect();
        assert_eq!(by[0], ("billing", true, true, false, false));
        assert_eq!(by[1], ("context_overflow", true, true, false, false));
        // format (stops) against a label that fails over: an unsafe stop.
        assert_eq!(by[2], ("format", false, false, true, false));
        // timeout (fails over) against a label that stops.
        assert_eq!(by[3], ("timeout", false, false, false, true));
        assert_eq!(
            r.total,
            Agreement {
                items: 4,
                exact: 2,
                decision: 2
            }
        );
        assert!(!r.passed());
        assert_eq!(
            r.confusion
                .get(&("rate_limit|timeout".into(), "format".into())),
            Some(&1)
        );
        let text = render(&r);
        assert!(
            text.contains("c.yaml:14: expected rate_limit or timeout, got format"),
            "{text}"
        );
        assert!(text.contains("field corpus: FAILED"), "{text}");
    }

    #[test]
    fn a_corpus_that_agrees_passes_and_a_floor_decides() {
        let engine = Engine::builtin();
        let f = parse("c.yaml", &CORPUS[..CORPUS.find("- provider: x").unwrap()]).unwrap();
        let r = run(&engine, std::slice::from_ref(&f), 95.0);
        assert!(r.passed(), "{}", render(&r));
        let f = parse("c.yaml", CORPUS).unwrap();
        // 50% exact, one unsafe stop: fails at any floor.
        assert!(!run(&engine, &[f], 0.0).passed());
    }

    #[test]
    fn a_label_no_layer_declares_fails_the_corpus() {
        let engine = Engine::builtin();
        let f = parse(
            "c.yaml",
            "- body: x\n  expected: no_such_reason\n  why: w\n  source: s\n",
        )
        .unwrap();
        let r = run(&engine, &[f], 0.0);
        assert!(!r.passed());
        assert!(render(&r).contains("no layer in use declares"));
    }
}
