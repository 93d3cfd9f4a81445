//! Teaching the engine: the labelled errors (field corpora and golden
//! cases) as training data for the [evidence model](crate::evidence),
//! and its honest evaluation.
//!
//! - [`labelled`] gathers the examples: every field item (a list label
//!   trains on its first reading) and every golden case with an `expect`.
//! - [`train`] fits a model on them, deterministically, and calibrates it:
//!   the temperature that makes its probabilities honest is fitted on the
//!   predictions of models that never saw the items they judge (folds
//!   grouped by source).
//! - [`evaluate`] measures the rules alone, the model alone and the two
//!   together (the precedence, at the cost-derived thresholds or one
//!   `minConfidence`) by k-fold cross-validation on a field corpus — each
//!   fold's items judged by a model that never saw them — twice: with
//!   folds grouped by the items' source (an issue thread, a file: never
//!   split between training and test, the figure that counts) and with
//!   folds dealt item by item (stratified; near-duplicates from one thread
//!   make it optimistic). Then on a held-out corpus with the model trained
//!   on all, and a reliability table: predicted against observed.
//! - [`nearest`] finds the labelled examples closest to an error in the
//!   model's feature space, for `classify --explain`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::classify::{Decider, Engine, ProviderError};
use crate::evidence::train::{self as fit, Example, Options};
use crate::evidence::{self, Confidence, Model, MAX_REASONS};
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
    /// Each example's defensible labels among `reasons` (the first is its
    /// label).
    label_sets: Vec<Vec<usize>>,
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
    let index = |name: &str| reasons.binary_search_by(|r| r.as_str().cmp(name)).ok();
    let examples = items
        .iter()
        .map(|l| Example {
            vector: engine.with_model_input(&l.error, evidence::vector),
            label: index(l.label).unwrap_or(0),
        })
        .collect();
    let label_sets = items
        .iter()
        .map(|l| {
            let mut set: Vec<usize> = std::iter::once(l.label)
                .chain(l.labels.iter().map(String::as_str))
                .filter_map(index)
                .collect();
            set.dedup();
            set
        })
        .collect();
    Ok(Prepared {
        reasons,
        examples,
        label_sets,
    })
}

/// The folds of cross-validation [`train`] calibrates on.
pub const CALIBRATION_FOLDS: usize = 10;

/// Trains a model on `items`, the text normalised as `engine` reads it,
/// and calibrates it: [`CALIBRATION_FOLDS`] models trained on folds
/// grouped by source judge the field items they never saw, and the
/// temperature that fits those judgements best divides the full model's
/// scores ([`fit::fit_temperature`]). With fewer than
/// [`MIN_CALIBRATION_ITEMS`] field items or fewer than two sources there
/// is nothing honest to fit on: uncalibrated (temperature 1).
pub fn train(engine: &Engine, items: &[Labelled], options: Options) -> Result<Model, LearnError> {
    let p = prepare(engine, items)?;
    let temperature = if can_calibrate(items) {
        let fold_of = folds_of(items, CALIBRATION_FOLDS, Folding::BySource);
        let models = fold_models(&p, &fold_of, CALIBRATION_FOLDS, options);
        fit::fit_temperature(&out_of_fold(&p, &fold_of, &models))
    } else {
        1.0
    };
    Ok(fit::train(&p.examples, p.reasons, options).calibrated(temperature))
}

/// The fewest field items a calibration is fitted on.
pub const MIN_CALIBRATION_ITEMS: usize = 50;

fn can_calibrate(items: &[Labelled]) -> bool {
    let field: Vec<&Labelled> = items.iter().filter(|l| l.field).collect();
    let sources: std::collections::BTreeSet<&str> = field.iter().map(|l| source_key(l)).collect();
    field.len() >= MIN_CALIBRATION_ITEMS && sources.len() >= 2
}

/// How cross-validation deals the field items into folds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Folding {
    /// Every item of one source (its `source` without a `#fragment`: an
    /// issue thread, a file) in one fold; sources dealt largest first to
    /// the emptiest fold.
    BySource,
    /// Item by item, per first label in file order, round-robin
    /// (stratified).
    ByItem,
}

/// The source an item is grouped by: its `source` up to a `#`, else
/// itself.
fn source_key<'a>(l: &'a Labelled) -> &'a str {
    match l.source {
        Some(s) => s.split('#').next().unwrap_or(s).trim(),
        None => &l.origin,
    }
}

/// Each item's fold (`usize::MAX`: not a field item, always trains).
fn folds_of(items: &[Labelled], folds: usize, folding: Folding) -> Vec<usize> {
    let mut fold_of = vec![usize::MAX; items.len()];
    match folding {
        Folding::ByItem => {
            let mut by_label: BTreeMap<&str, usize> = BTreeMap::new();
            for (i, l) in items.iter().enumerate() {
                if l.field {
                    let n = by_label.entry(l.label).or_default();
                    fold_of[i] = *n % folds;
                    *n += 1;
                }
            }
        }
        Folding::BySource => {
            // Groups in order of first appearance, then largest first.
            let mut index: BTreeMap<&str, usize> = BTreeMap::new();
            let mut groups: Vec<Vec<usize>> = Vec::new();
            for (i, l) in items.iter().enumerate() {
                if l.field {
                    let g = *index.entry(source_key(l)).or_insert_with(|| {
                        groups.push(Vec::new());
                        groups.len() - 1
                    });
                    groups[g].push(i);
                }
            }
            let mut order: Vec<usize> = (0..groups.len()).collect();
            order.sort_by(|&a, &b| groups[b].len().cmp(&groups[a].len()).then(a.cmp(&b)));
            let mut size = vec![0usize; folds];
            for g in order {
                let f = (0..folds).min_by_key(|&f| (size[f], f)).unwrap_or(0);
                size[f] += groups[g].len();
                for &i in &groups[g] {
                    fold_of[i] = f;
                }
            }
        }
    }
    fold_of
}

/// One model per fold, each trained on every example outside it, on the
/// machine's threads; in fold order.
fn fold_models(p: &Prepared, fold_of: &[usize], folds: usize, options: Options) -> Vec<Model> {
    std::thread::scope(|s| {
        let workers = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(folds);
        let handles: Vec<_> = (0..workers)
            .map(|w| {
                let mine: Vec<usize> = (0..folds).filter(|f| f % workers == w).collect();
                s.spawn(move || {
                    mine.into_iter()
                        .map(|f| {
                            let train: Vec<Example> = p
                                .examples
                                .iter()
                                .zip(fold_of)
                                .filter(|(_, &k)| k != f)
                                .map(|(e, _)| e.clone())
                                .collect();
                            (f, fit::train(&train, p.reasons.clone(), options))
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
    })
}

/// The field items' log-probabilities under the model of their fold, with
/// their defensible labels: what the temperature is fitted on.
fn out_of_fold(p: &Prepared, fold_of: &[usize], models: &[Model]) -> Vec<(Vec<f32>, Vec<usize>)> {
    p.examples
        .iter()
        .zip(&p.label_sets)
        .zip(fold_of)
        .filter(|(_, &f)| f < models.len())
        .map(|((e, labels), &f)| {
            let probs = models[f].predict_vector(&e.vector);
            (
                probs
                    .probabilities()
                    .iter()
                    .map(|&q| q.max(1e-30).ln())
                    .collect(),
                labels.clone(),
            )
        })
        .collect()
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
    /// The rules and the model by the precedence, at the thresholds.
    pub combined: Row,
    /// Items whose verdict the model changed (it overruled a status rule,
    /// a weak rule or `unclassified`).
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

/// One bin of the reliability table: the items whose top probability
/// (calibrated, cross-validated by source) falls in `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    /// The bin's lower bound.
    pub from: f32,
    /// Its upper bound (the last bin holds 1).
    pub to: f32,
    /// Items in it.
    pub items: usize,
    /// The sum of their top probabilities.
    pub predicted: f64,
    /// Items whose top reason is one of their labels.
    pub observed: usize,
}

impl Bin {
    /// The mean top probability, percent.
    pub fn predicted_pct(&self) -> f64 {
        if self.items == 0 {
            0.0
        } else {
            self.predicted * 100.0 / self.items as f64
        }
    }

    /// How often the top reason was right, percent.
    pub fn observed_pct(&self) -> f64 {
        pct(self.observed, self.items)
    }
}

/// The reliability table's bins.
pub const BINS: [f32; 8] = [0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0];

/// A text rule's verdict goes to the review queue when the model
/// contradicts it at least this confidently.
pub const REVIEW_CONFIDENCE: f32 = 0.9;

/// What [`evaluate`] measured.
#[derive(Debug, Clone, PartialEq)]
pub struct Evaluation {
    /// Folds of each cross-validation.
    pub folds: usize,
    /// How the combined rows decide.
    pub confidence: Confidence,
    /// Distinct sources among the field items (the by-source folds'
    /// groups).
    pub sources: usize,
    /// The calibration's temperature (fitted on the by-source folds).
    pub temperature: f32,
    /// Cross-validated on the field corpus, folds grouped by source: the
    /// figure that counts.
    pub by_source: Rows,
    /// Cross-validated with folds dealt item by item (stratified).
    pub by_item: Rows,
    /// On the held-out corpus, the model trained on everything.
    pub holdout: Option<Rows>,
    /// The combined row (by source) under the costs and under each single
    /// threshold of [`SWEEP`].
    pub thresholds: Vec<(Confidence, Row)>,
    /// Predicted against observed, by source.
    pub reliability: Vec<Bin>,
    /// Text rules a confident model contradicts (cross-validated verdicts
    /// for field items; the full model's for golden cases).
    pub review: Vec<Disagreement>,
}

/// The single thresholds [`evaluate`] sweeps beside the costs.
pub const SWEEP: [f32; 9] = [0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95];

/// One item's verdicts: the rules' (reason, decider) and the
/// model's (reason index, calibrated probability).
struct Judging<'e> {
    rules_reason: &'e str,
    decided_by: Decider,
    model: (usize, f32),
}

/// The verdict by the precedence, and whether the model changed it.
fn combined<'a>(
    j: &'a Judging,
    reasons: &'a [String],
    engine: &Engine,
    confidence: Confidence,
) -> (&'a str, bool) {
    let model_reason = reasons[j.model.0].as_str();
    let may = matches!(
        j.decided_by,
        Decider::StatusRule | Decider::WeakRule | Decider::None
    ) && model_reason != j.rules_reason;
    match engine.threshold(model_reason, j.rules_reason, confidence) {
        Some(t) if may && j.model.1 >= t => (model_reason, true),
        _ => (j.rules_reason, false),
    }
}

fn rows(
    engine: &Engine,
    items: &[&Labelled],
    judged: &[Judging],
    reasons: &[String],
    confidence: Confidence,
) -> Rows {
    let mut out = Rows::default();
    for (l, j) in items.iter().zip(judged) {
        out.rules.add(judge(engine, j.rules_reason, l.labels));
        out.model.add(judge(engine, &reasons[j.model.0], l.labels));
        let (reason, by_model) = combined(j, reasons, engine, confidence);
        out.combined.add(judge(engine, reason, l.labels));
        out.model_decided += usize::from(by_model);
    }
    out
}

/// The top reason and its probability at `temperature`, from
/// log-probabilities.
fn calibrated_top(logp: &[f32], temperature: f32) -> (usize, f32) {
    let mut top = 0;
    for (i, &l) in logp.iter().enumerate() {
        if l > logp[top] {
            top = i;
        }
    }
    let sum: f32 = logp
        .iter()
        .map(|&l| ((l - logp[top]) / temperature).exp())
        .sum();
    (top, 1.0 / sum)
}

/// One cross-validation: each field item's calibrated top reason under a
/// model that never saw it (index by item; golden cases: `None`), and the
/// temperature.
fn cross_validate(
    p: &Prepared,
    items: &[Labelled],
    folds: usize,
    folding: Folding,
    options: Options,
) -> (Vec<Option<(usize, f32)>>, f32) {
    let fold_of = folds_of(items, folds, folding);
    let models = fold_models(p, &fold_of, folds, options);
    let oof = out_of_fold(p, &fold_of, &models);
    let temperature = if can_calibrate(items) {
        fit::fit_temperature(&oof)
    } else {
        1.0
    };
    let mut at = oof.iter();
    let tops = fold_of
        .iter()
        .map(|&f| {
            (f < folds).then(|| {
                let (logp, _) = at.next().expect("one prediction per field item");
                calibrated_top(logp, temperature)
            })
        })
        .collect();
    (tops, temperature)
}

/// Cross-validates on the field items of `items` (golden cases always
/// train), by source and item by item, then judges `holdout` with a
/// model trained on all of `items`. The rules are `engine`'s, without its
/// model; the combined rows decide as `confidence` says.
pub fn evaluate(
    engine: &Engine,
    items: &[Labelled],
    holdout: &[Labelled],
    folds: usize,
    confidence: Confidence,
    options: Options,
) -> Result<Evaluation, LearnError> {
    let folds = folds.max(2);
    let prepared = prepare(engine, items)?;
    let reasons = &prepared.reasons;
    let (by_source, temperature) =
        cross_validate(&prepared, items, folds, Folding::BySource, options);
    let (by_item, _) = cross_validate(&prepared, items, folds, Folding::ByItem, options);
    let full = fit::train(&prepared.examples, reasons.clone(), options).calibrated(temperature);
    let sources = items
        .iter()
        .filter(|l| l.field)
        .map(source_key)
        .collect::<std::collections::BTreeSet<_>>()
        .len();

    let rules_of = |l: &Labelled| {
        let c = engine.classify_rules(&l.error);
        (c.reason, c.decided_by, c.rule)
    };
    let mut cv_items = Vec::new();
    let mut judged_source = Vec::new();
    let mut judged_item = Vec::new();
    let mut review = Vec::new();
    let mut reliability: Vec<Bin> = BINS
        .windows(2)
        .map(|w| Bin {
            from: w[0],
            to: w[1],
            items: 0,
            predicted: 0.0,
            observed: 0,
        })
        .collect();
    for (i, l) in items.iter().enumerate() {
        let (rules_reason, decided_by, rule) = rules_of(l);
        let model =
            by_source[i].unwrap_or_else(|| full.predict_vector(&prepared.examples[i].vector).top());
        let model_reason = &reasons[model.0];
        if decided_by == Decider::Rule
            && model.1 >= REVIEW_CONFIDENCE
            && model_reason != rules_reason
        {
            review.push(Disagreement {
                origin: l.origin.clone(),
                labels: l.labels.to_vec(),
                rule: rule.unwrap_or("").to_string(),
                rule_reason: rules_reason.to_string(),
                model_reason: model_reason.clone(),
                probability: model.1,
            });
        }
        if let (Some(source), Some(item)) = (by_source[i], by_item[i]) {
            let bin = reliability
                .iter_mut()
                .rfind(|b| source.1 >= b.from)
                .expect("the first bin starts at 0");
            bin.items += 1;
            bin.predicted += f64::from(source.1);
            bin.observed += usize::from(l.labels.iter().any(|x| *x == reasons[source.0]));
            cv_items.push(l);
            let judging = |model| Judging {
                rules_reason,
                decided_by,
                model,
            };
            judged_source.push(judging(source));
            judged_item.push(judging(item));
        }
    }
    review.sort_by(|a, b| {
        b.probability
            .total_cmp(&a.probability)
            .then(a.origin.cmp(&b.origin))
    });
    let thresholds = std::iter::once(Confidence::Costs)
        .chain(SWEEP.iter().map(|&t| Confidence::Min(t)))
        .map(|c| {
            (
                c,
                rows(engine, &cv_items, &judged_source, reasons, c).combined,
            )
        })
        .collect();
    let holdout = (!holdout.is_empty()).then(|| {
        let refs: Vec<&Labelled> = holdout.iter().collect();
        let judged: Vec<Judging> = holdout
            .iter()
            .map(|l| {
                let (rules_reason, decided_by, _) = rules_of(l);
                Judging {
                    rules_reason,
                    decided_by,
                    model: engine
                        .with_model_input(&l.error, |inp| full.predict(inp))
                        .top(),
                }
            })
            .collect();
        rows(engine, &refs, &judged, reasons, confidence)
    });
    Ok(Evaluation {
        folds,
        confidence,
        sources,
        temperature,
        by_source: rows(engine, &cv_items, &judged_source, reasons, confidence),
        by_item: rows(engine, &cv_items, &judged_item, reasons, confidence),
        holdout,
        thresholds,
        reliability,
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
    let _ = writeln!(
        out,
        "\nevidence model, {}-fold cross-validated on the field corpus ({} items from {} sources; {}):",
        e.folds, e.by_source.rules.items, e.sources, e.confidence
    );
    render_rows(
        &mut out,
        &format!(
            "folds grouped by source, the figure that counts (the model changed {} verdicts):",
            e.by_source.model_decided
        ),
        &e.by_source,
    );
    render_rows(
        &mut out,
        &format!(
            "folds dealt item by item, stratified (optimistic: one thread's items on both sides; the model changed {}):",
            e.by_item.model_decided
        ),
        &e.by_item,
    );
    if let Some(h) = &e.holdout {
        render_rows(
            &mut out,
            &format!(
                "held out ({} items, never trained on; the model changed {}):",
                h.rules.items, h.model_decided
            ),
            h,
        );
    }
    let _ = writeln!(
        out,
        "reliability, folds by source (calibrated: temperature {:.2}): the top reason's probability against how often it is right",
        e.temperature
    );
    for b in &e.reliability {
        if b.items == 0 {
            continue;
        }
        let _ = writeln!(
            out,
            "  {:.2}–{:.2}  {:>5} items  predicted {:>5.1}%  observed {:>5.1}%",
            b.from,
            b.to,
            b.items,
            b.predicted_pct(),
            b.observed_pct()
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

/// The thresholds table of `model train --cv`: the combined row (folds
/// by source) under the costs and under each single `minConfidence`.
pub fn render_thresholds(e: &Evaluation) -> String {
    let mut out = String::from(
        "\nthresholds                              exact  decision  unsafe stops  (rules + model, folds by source)\n",
    );
    for (c, row) in &e.thresholds {
        let _ = writeln!(
            out,
            "  {:<37} {:>5.1}%  {:>6.1}%  {:>5.1}% ({})",
            c.to_string(),
            row.exact_pct(),
            row.decision_pct(),
            row.unsafe_pct(),
            row.unsafe_stops
        );
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
    let min_confidence = |c: &Confidence| match c {
        Confidence::Costs => serde_json::Value::Null,
        Confidence::Min(t) => serde_json::json!(t),
    };
    serde_json::json!({
        "folds": e.folds,
        "min_confidence": min_confidence(&e.confidence),
        "sources": e.sources,
        "temperature": e.temperature,
        "cross_validated": rows(&e.by_source),
        "by_source": rows(&e.by_source),
        "by_item": rows(&e.by_item),
        "holdout": e.holdout.as_ref().map(rows),
        "thresholds": e.thresholds.iter().map(|(c, r)| {
            let mut v = row(r);
            v["min_confidence"] = min_confidence(c);
            v
        }).collect::<Vec<_>>(),
        "reliability": e.reliability.iter().map(|b| serde_json::json!({
            "from": b.from,
            "to": b.to,
            "items": b.items,
            "predicted_pct": b.predicted_pct(),
            "observed_pct": b.observed_pct(),
        })).collect::<Vec<_>>(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::field;

    /// Issue 46: folds by source never split a source (an issue thread up
    /// to its `#fragment`) between training and test, and deal the sources
    /// so the folds are near the same size; folds by item deal each label
    /// round-robin. Golden cases are in no fold (they always train).
    #[test]
    fn folds_by_source_keep_a_source_together() {
        let mut text = String::new();
        for i in 0..30 {
            let source = format!("https://example.test/issues/{}#c{i}", i % 7);
            text.push_str(&format!(
                "- {{message: \"m{i}\", expected: {}, why: t, source: \"{source}\"}}\n",
                if i % 2 == 0 { "timeout" } else { "auth" }
            ));
        }
        let files = vec![field::parse("f.yaml", &text).unwrap()];
        let items = labelled(&files, &[]);
        let folds = 3;
        let by_source = folds_of(&items, folds, Folding::BySource);
        let mut fold_of_source: BTreeMap<&str, usize> = BTreeMap::new();
        for (l, &f) in items.iter().zip(&by_source) {
            assert!(f < folds);
            let first = *fold_of_source.entry(source_key(l)).or_insert(f);
            assert_eq!(first, f, "{} split between folds", source_key(l));
        }
        assert_eq!(
            fold_of_source.len(),
            7,
            "the #fragment is not a source of its own"
        );
        let mut sizes = vec![0; folds];
        by_source.iter().for_each(|&f| sizes[f] += 1);
        assert!(sizes.iter().all(|&n| (8..=12).contains(&n)), "{sizes:?}");

        let by_item = folds_of(&items, folds, Folding::ByItem);
        assert_eq!(&by_item[..6], &[0, 0, 1, 1, 2, 2]);
        assert!(can_calibrate(&items) == (items.len() >= MIN_CALIBRATION_ITEMS));
    }
}
