//! Teaching the engine: the labelled errors (field corpora and golden
//! cases) as training data for the [evidence model](crate::evidence),
//! and its honest evaluation.
//!
//! - [`labelled`] gathers the examples: every field item (a list label
//!   trains on its first reading) and every golden case with an `expect`.
//! - [`train`] fits a model on them, deterministically.
//! - [`evaluate`] measures the rules alone, the model alone and the two
//!   together (the precedence) by stratified k-fold cross-validation on a
//!   field corpus — each fold's items judged by a model that never saw
//!   them — and on a held-out corpus with the model trained on all.
//! - [`nearest`] finds the labelled examples closest to an error in the
//!   model's feature space, for `classify --explain`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::classify::{Decider, Engine, ProviderError};
use crate::evidence::train::{self as fit, Example, Options};
use crate::evidence::{self, Model, MAX_REASONS};
use crate::field::{judge, FieldFile, Judged};
use crate::golden::CaseFile;

/// One labelled error, borrowed from its file.
#[derive(Debug, Clone)]
pub struct Labelled<'a> {
    /// The error as the engine reads it.
    pub error: ProviderError<'a>,
    /// Its reason (a field item's first label, a case's `expect`).
    pub label: &'a str,
    /// Every defensible label (a case has one).
    pub labels: &'a [String],
    /// `file:line`.
    pub origin: String,
    /// Where the error text comes from (a field item's `source`; a case's
    /// `spec`), when written.
    pub source: Option<&'a str>,
    /// Whether it comes from a field corpus (cross-validation folds hold
    /// only those; golden cases always train).
    pub field: bool,
}

/// The examples of `fields` and `cases`, in file order.
pub fn labelled<'a>(fields: &'a [FieldFile], cases: &'a [CaseFile]) -> Vec<Labelled<'a>> {
    let mut out = Vec::new();
    for f in fields {
        for (i, item) in f.items.iter().enumerate() {
            let labels = item.expected.as_slice();
            out.push(Labelled {
                error: item.input(),
                label: &labels[0],
                labels,
                origin: format!("{}:{}", f.name, f.lines.get(i).copied().unwrap_or(0)),
                source: Some(&item.source),
                field: true,
            });
        }
    }
    for f in cases {
        for (case, span) in f.cases.iter().zip(&f.spans) {
            let Some(expect) = &case.expect else { continue };
            out.push(Labelled {
                error: case.input(),
                label: expect,
                labels: std::slice::from_ref(expect),
                origin: format!("{}:{}", f.name, span.line),
                source: case.spec.as_deref(),
                field: false,
            });
        }
    }
    out
}

/// Why a model cannot be trained.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LearnError {
    /// Nothing to learn from.
    #[error("no labelled errors to train on (field items or golden cases with `expect`)")]
    Empty,
    /// More reasons than a model tells apart.
    #[error("{0} reasons among the labels; a model tells at most {MAX_REASONS} apart")]
    TooManyReasons(usize),
}

/// The examples as vectors, with the sorted reasons they use.
struct Prepared {
    reasons: Vec<String>,
    examples: Vec<Example>,
}

fn prepare(engine: &Engine, items: &[Labelled]) -> Result<Prepared, LearnError> {
    if items.is_empty() {
        return Err(LearnError::Empty);
    }
    let reasons: Vec<String> = items
        .iter()
        .map(|l| l.label.to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if reasons.len() > MAX_REASONS {
        return Err(LearnError::TooManyReasons(reasons.len()));
    }
    let examples = items
        .iter()
        .map(|l| Example {
            vector: engine.with_model_input(&l.error, evidence::vector),
            label: reasons
                .binary_search_by(|r| r.as_str().cmp(l.label))
                .unwrap_or(0),
        })
        .collect();
    Ok(Prepared { reasons, examples })
}

/// Trains a model on `items`, the text normalised as `engine` reads it.
pub fn train(engine: &Engine, items: &[Labelled], options: Options) -> Result<Model, LearnError> {
    let p = prepare(engine, items)?;
    Ok(fit::train(&p.examples, p.reasons, options))
}

/// Agreement of one way of deciding on a set of items.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Row {
    /// Items judged.
    pub items: usize,
    /// The verdict is one of the labels.
    pub exact: usize,
    /// The verdict makes the runner do what a label would.
    pub decision: usize,
    /// The labels fail over; the verdict stops.
    pub unsafe_stops: usize,
}

impl Row {
    fn add(&mut self, j: Judged) {
        self.items += 1;
        self.exact += usize::from(j.exact);
        self.decision += usize::from(j.decision);
        self.unsafe_stops += usize::from(j.unsafe_stop);
    }

    /// Exact agreement, percent.
    pub fn exact_pct(&self) -> f64 {
        pct(self.exact, self.items)
    }

    /// Decision agreement, percent.
    pub fn decision_pct(&self) -> f64 {
        pct(self.decision, self.items)
    }

    /// Unsafe stops, percent.
    pub fn unsafe_pct(&self) -> f64 {
        pct(self.unsafe_stops, self.items)
    }
}

fn pct(n: usize, of: usize) -> f64 {
    if of == 0 {
        100.0
    } else {
        n as f64 * 100.0 / of as f64
    }
}

/// The three ways of deciding, side by side.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Rows {
    /// The rules alone (`--no-model`).
    pub rules: Row,
    /// The model alone (its top reason, whatever the rules say).
    pub model: Row,
    /// The rules and the model by the precedence, at the threshold.
    pub combined: Row,
    /// Items where the model decided in the combined verdict.
    pub model_decided: usize,
}

/// A text rule and a confident model that disagree: a rule that may
/// over-reach, or a label to look at again.
#[derive(Debug, Clone, PartialEq)]
pub struct Disagreement {
    /// `file:line` of the item or case.
    pub origin: String,
    /// The labels.
    pub labels: Vec<String>,
    /// The text rule that decided and its reason.
    pub rule: String,
    /// The rule's reason.
    pub rule_reason: String,
    /// The model's reason and probability.
    pub model_reason: String,
    /// See [`Disagreement::model_reason`].
    pub probability: f32,
}

/// What [`evaluate`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Folds of the cross-validation.
    pub folds: usize,
    /// The threshold the combined rows use.
    pub min_confidence: f32,
    /// Cross-validated on the field corpus.
    pub cross_validated: Rows,
    /// On the held-out corpus, the model trained on everything.
    pub holdout: Option<Rows>,
    /// Combined decision agreement and unsafe stops (cross-validated) per
    /// threshold: how `minConfidence` is chosen.
    pub thresholds: Vec<(f32, Row)>,
    /// Text rules a confident model contradicts (cross-validated verdicts
    /// for field items; the full model's for golden cases).
    pub review: Vec<Disagreement>,
}

/// The thresholds [`evaluate`] sweeps.
pub const SWEEP: [f32; 9] = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95];

/// One item's verdicts: the rules' (reason, decider, rule) and the
/// model's (reason index, probability).
struct Judging<'e> {
    rules_reason: &'e str,
    decided_by: Decider,
    rule: Option<&'e str>,
    model: (usize, f32),
}

fn combined<'a>(j: &'a Judging, reasons: &'a [String], engine: &Engine, t: f32) -> (&'a str, bool) {
    let model_reason = reasons[j.model.0].as_str();
    if j.decided_by != Decider::Rule && j.model.1 >= t && engine.model_may_give(model_reason) {
        (model_reason, true)
    } else {
        (j.rules_reason, false)
    }
}

fn rows(
    engine: &Engine,
    items: &[&Labelled],
    judged: &[Judging],
    reasons: &[String],
    t: f32,
) -> Rows {
    let mut out = Rows::default();
    for (l, j) in items.iter().zip(judged) {
        out.rules.add(judge(engine, j.rules_reason, l.labels));
        out.model.add(judge(engine, &reasons[j.model.0], l.labels));
        let (reason, by_model) = combined(j, reasons, engine, t);
        out.combined.add(judge(engine, reason, l.labels));
        out.model_decided += usize::from(by_model);
    }
    out
}

/// Cross-validates on the field items of `items` (golden cases always
/// train), then judges `holdout` with a model trained on all of `items`.
/// The rules are `engine`'s, without its model.
pub fn evaluate(
    engine: &Engine,
    items: &[Labelled],
    holdout: &[Labelled],
    folds: usize,
    min_confidence: f32,
    options: Options,
) -> Result<Evaluation, LearnError> {
    let folds = folds.max(2);
    let prepared = prepare(engine, items)?;
    let reasons = &prepared.reasons;
    // Stratified folds: per first label, the items in file order deal
    // round-robin.
    let mut fold_of = vec![usize::MAX; items.len()];
    let mut by_label: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, l) in items.iter().enumerate() {
        if l.field {
            let n = by_label.entry(l.label).or_default();
            fold_of[i] = *n % folds;
            *n += 1;
        }
    }
    let fold_models: Vec<Model> = std::thread::scope(|s| {
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(folds);
        let chunks: Vec<Vec<usize>> = (0..workers)
            .map(|w| (0..folds).filter(|f| f % workers == w).collect())
            .collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|mine| {
                let examples = &prepared.examples;
                let fold_of = &fold_of;
                s.spawn(move || {
                    mine.into_iter()
                        .map(|f| {
                            let train: Vec<Example> = examples
                                .iter()
                                .zip(fold_of)
                                .filter(|(_, &k)| k != f)
                                .map(|(e, _)| e.clone())
                                .collect();
                            (f, fit::train(&train, reasons.clone(), options))
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut all: Vec<(usize, Model)> = handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect();
        all.sort_by_key(|(f, _)| *f);
        all.into_iter().map(|(_, m)| m).collect()
    });
    let full = fit::train(&prepared.examples, reasons.clone(), options);

    let rules_of = |l: &Labelled| {
        let c = engine.classify_rules(&l.error);
        (c.reason, c.decided_by, c.rule)
    };
    let mut cv_items = Vec::new();
    let mut cv_judged = Vec::new();
    let mut review = Vec::new();
    for (i, l) in items.iter().enumerate() {
        let model = if l.field {
            &fold_models[fold_of[i]]
        } else {
            &full
        };
        let (rules_reason, decided_by, rule) = rules_of(l);
        let j = Judging {
            rules_reason,
            decided_by,
            rule,
            model: model.predict_vector(&prepared.examples[i].vector).top(),
        };
        let model_reason = &reasons[j.model.0];
        if j.decided_by == Decider::Rule
            && j.model.1 >= min_confidence
            && model_reason != j.rules_reason
        {
            review.push(Disagreement {
                origin: l.origin.clone(),
                labels: l.labels.to_vec(),
                rule: j.rule.unwrap_or("").to_string(),
                rule_reason: j.rules_reason.to_string(),
                model_reason: model_reason.clone(),
                probability: j.model.1,
            });
        }
        if l.field {
            cv_items.push(l);
            cv_judged.push(j);
        }
    }
    review.sort_by(|a, b| {
        b.probability
            .total_cmp(&a.probability)
            .then(a.origin.cmp(&b.origin))
    });
    let cross_validated = rows(engine, &cv_items, &cv_judged, reasons, min_confidence);
    let thresholds = SWEEP
        .iter()
        .map(|&t| (t, rows(engine, &cv_items, &cv_judged, reasons, t).combined))
        .collect();
    let holdout = (!holdout.is_empty()).then(|| {
        let refs: Vec<&Labelled> = holdout.iter().collect();
        let judged: Vec<Judging> = holdout
            .iter()
            .map(|l| {
                let (rules_reason, decided_by, rule) = rules_of(l);
                Judging {
                    rules_reason,
                    decided_by,
                    rule,
                    model: engine
                        .with_model_input(&l.error, |inp| full.predict(inp))
                        .top(),
                }
            })
            .collect();
        rows(engine, &refs, &judged, reasons, min_confidence)
    });
    Ok(Evaluation {
        folds,
        min_confidence,
        cross_validated,
        holdout,
        thresholds,
        review,
    })
}

/// The `k` labelled examples nearest to `error` (cosine of the model's
/// feature vectors), most similar first.
pub fn nearest<'l, 'a>(
    engine: &Engine,
    error: &ProviderError,
    items: &'l [Labelled<'a>],
    k: usize,
) -> Vec<(f32, &'l Labelled<'a>)> {
    let me = engine.with_model_input(error, evidence::vector);
    let mut scored: Vec<(f32, usize)> = items
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let v = engine.with_model_input(&l.error, evidence::vector);
            (evidence::cosine(&me, &v), i)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    scored.truncate(k);
    scored.into_iter().map(|(s, i)| (s, &items[i])).collect()
}

/// The three rows as `failover test` prints them.
pub fn render_rows(out: &mut String, title: &str, r: &Rows) {
    let _ = writeln!(out, "{title}");
    for (name, row) in [
        ("rules alone", &r.rules),
        ("model alone", &r.model),
        ("rules + model", &r.combined),
    ] {
        let _ = writeln!(
            out,
            "  {name:<14} exact {:>5.1}%  decision {:>5.1}%  unsafe stops {:>4.1}% ({})",
            row.exact_pct(),
            row.decision_pct(),
            row.unsafe_pct(),
            row.unsafe_stops
        );
    }
}

/// The evaluation as `failover test` prints it after the field report.
pub fn render(e: &Evaluation, review_limit: usize, all_with: &str) -> String {
    let mut out = String::new();
    render_rows(
        &mut out,
        &format!(
            "\nevidence model, {}-fold cross-validated on the field corpus ({} items; minConfidence {:.2}; the model decided {}):",
            e.folds, e.cross_validated.rules.items, e.min_confidence, e.cross_validated.model_decided
        ),
        &e.cross_validated,
    );
    if let Some(h) = &e.holdout {
        render_rows(
            &mut out,
            &format!(
                "held out ({} items, never trained on; the model decided {}):",
                h.rules.items, h.model_decided
            ),
            h,
        );
    }
    if !e.review.is_empty() {
        let _ = writeln!(
            out,
            "review queue: {} text-rule verdicts a confident model contradicts{}",
            e.review.len(),
            if review_limit == 0 {
                format!(" ({all_with})")
            } else if e.review.len() > review_limit {
                format!(" (first {review_limit}; {all_with})")
            } else {
                String::new()
            }
        );
        for d in e.review.iter().take(review_limit) {
            let _ = writeln!(
                out,
                "  {}: {} ({}) but the model says {} ({:.2}); labelled {}",
                d.origin,
                d.rule_reason,
                d.rule,
                d.model_reason,
                d.probability,
                d.labels.join(" or ")
            );
        }
    }
    out
}

/// The evaluation in `failover test --json` (`field.model`, docs/json.md).
pub fn evaluation_json(e: &Evaluation) -> serde_json::Value {
    let row = |r: &Row| {
        serde_json::json!({
            "items": r.items,
            "exact": r.exact,
            "decision": r.decision,
            "unsafe_stops": r.unsafe_stops,
            "exact_pct": r.exact_pct(),
            "decision_pct": r.decision_pct(),
        })
    };
    let rows = |r: &Rows| {
        serde_json::json!({
            "rules": row(&r.rules),
            "model": row(&r.model),
            "combined": row(&r.combined),
            "model_decided": r.model_decided,
        })
    };
    serde_json::json!({
        "folds": e.folds,
        "min_confidence": e.min_confidence,
        "cross_validated": rows(&e.cross_validated),
        "holdout": e.holdout.as_ref().map(rows),
        "thresholds": e.thresholds.iter().map(|(t, r)| {
            let mut v = row(r);
            v["min_confidence"] = serde_json::json!(t);
            v
        }).collect::<Vec<_>>(),
        "review": e.review.iter().map(|d| serde_json::json!({
            "origin": d.origin,
            "labels": d.labels,
            "rule": d.rule,
            "rule_reason": d.rule_reason,
            "model_reason": d.model_reason,
            "probability": d.probability,
        })).collect::<Vec<_>>(),
    })
}
