//! Stage 3, classify: a provider error → a reason and the rule that decided.
//!
//! Per message, in order:
//!
//! 1. **Normalise.** Read a JSON body (given, or a message that is JSON)
//!    into message/code/type/status ([`input::extract`]); take a leading
//!    `HTTP 429:` as the status when none is given; lower-case the message
//!    into a reused buffer (ASCII only: 14 ns per 100 bytes, where Unicode
//!    lower-casing costs 50×).
//! 2. **Collect candidates.** One scan of the lower-cased text with the
//!    atom automaton ([`crate::compile`]'s `scan` module), which sets a bit
//!    per atom found; the rules behind those atoms, plus the rules listed
//!    under this error's provider, code, type and status (table lookups),
//!    plus the few rules routed "always", form a bitset over rule indices.
//! 3. **Verify in rule order** (walking that bitset). The first candidate
//!    whose whole condition holds wins. `has` tests are bit tests; a regex
//!    whose language is a small set of literal strings is answered from the
//!    bits too; a regex whose required literals did not all occur is false
//!    without running; a branch of a regex that is a literal with word
//!    boundaries (`\bunknown model\b`) is decided from its atom's hit and
//!    the bytes around the occurrence; any other regex runs only now, on the lower-cased
//!    text (with the `c` flag, on the original). A message holding `ſ` or
//!    the Kelvin sign, which a case-insensitive regex reads as `s` and `k`,
//!    is scanned with `s` and `k` in their place and verified without the
//!    shortcuts.
//!
//! The hot path does not allocate: every buffer lives in [`Scratch`] and is
//! reused (the JSON path allocates while parsing, as it must). Messages
//! longer than [`MAX_SCAN_BYTES`] are judged on their first 1 MiB.
//!
//! Worked example: `HTTP 402: Your weekly usage limit resets tomorrow`
//! → status 402 (from the text), lower-cased
//! `http 402: your weekly usage limit resets tomorrow`; the scan hits the
//! atoms `weekly usage limit`, `usage limit` and `limit resets`; the
//! candidates are the rules behind those atoms plus the rules gated by
//! status 402, in rule order; the first that verifies is the temporary-402
//! rule → `rate_limit` (SPEC R8.3).

mod explain;
pub(crate) mod input;
mod rules;
pub mod stream;

use std::cell::RefCell;
use std::sync::Arc;

use serde_json::Value;

use crate::compile::plan::{Plan, RuleIdx};
use crate::compile::{Build, Expr, ReasonBehaviour, ReasonId, Ruleset, TextField, TextTest};
use crate::diag::{Diagnostic, Diagnostics};
use crate::evidence::cost::{self, Consequence};
use crate::evidence::features::Input as ModelInput;
use crate::evidence::{builtin as builtin_model, Confidence, Model};
use crate::syntax::SourceMap;
pub use explain::render_explanation;
pub use input::{Body, ProviderError};
pub use rules::{Rules, RulesError};

/// Only the first 1 MiB of a message is examined: provider errors are short,
/// and a multi-megabyte "message" is an echoed prompt whose tail cannot
/// change what the error means.
pub(crate) const MAX_SCAN_BYTES: usize = 1 << 20;

/// A compiled ruleset ready to classify: build once, share, call
/// [`Engine::classify`] from any thread.
#[derive(Debug)]
pub struct Engine {
    ruleset: Ruleset,
    plan: Plan,
    /// Whether some rule reads the raw body (`body has …`): only then is a
    /// body given as parsed JSON serialised back to text.
    needs_body_text: bool,
    /// Whether some rule reads a field of the JSON body (`body.PATH`):
    /// only then is a body given as text parsed into a tree.
    needs_body_tree: bool,
    sources: SourceMap,
    warnings: Vec<Diagnostic>,
    /// Per rule: who decides when it matches — a text rule (it tests the
    /// message, body, code or type outside a `not`), a `weak` text rule,
    /// or a status rule. The model may overrule the last two, and no rule.
    deciders: Vec<Decider>,
    model: Option<ModelSlot>,
}

/// The evidence model an engine consults, with its thresholds.
#[derive(Debug, Clone)]
struct ModelSlot {
    model: Arc<Model>,
    confidence: Confidence,
    /// The ruleset's reason for each of the model's reasons (`None`: the
    /// rules do not declare it, and the model cannot give it).
    reasons: Vec<Option<ReasonId>>,
    /// The probability model reason `m` needs to overrule the rules'
    /// verdict `v`: `thresholds[m * ruleset reasons + v]`.
    thresholds: Vec<f32>,
}

impl ModelSlot {
    #[inline]
    fn threshold(&self, top: usize, verdict: ReasonId, reasons: usize) -> f32 {
        self.thresholds[top * reasons + verdict.0 as usize]
    }
}

/// Which step of the precedence decided a verdict (docs/model.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Decider {
    /// A rule that tests the text (message, body, code or type).
    Rule,
    /// The evidence model, at or above its threshold, where only a status
    /// rule or no rule matched.
    Model,
    /// A rule that tests only the status and/or the provider (the model,
    /// if consulted, was below its threshold).
    StatusRule,
    /// A `weak` text rule: a default the model, when consulted, did not
    /// overrule.
    WeakRule,
    /// No rule matched and the model did not decide: `unclassified`.
    None,
}

impl Decider {
    /// The name in JSON and logs: `rule`, `model`, `status rule`, `none`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decider::Rule => "rule",
            Decider::Model => "model",
            Decider::StatusRule => "status rule",
            Decider::WeakRule => "weak rule",
            Decider::None => "none",
        }
    }
}

/// The verdict on one error. Borrowed from the engine: no allocation.
#[derive(Clone, Copy, Debug, PartialEq)]
#[non_exhaustive]
pub struct Classification<'e> {
    /// The reason's name (`rate_limit`, `billing`, …; `unclassified` when no rule matched).
    pub reason: &'e str,
    /// The reason's index in the ruleset.
    pub reason_id: ReasonId,
    /// The deciding rule's id; `None` when no rule matched (`unclassified`).
    pub rule: Option<&'e str>,
    /// The index of the deciding rule in the ruleset, with [`Classification::rule`].
    pub rule_index: Option<RuleIdx>,
    /// Whether the reason's behaviour continues the fallback (R9).
    pub failover: bool,
    /// What the runner does with this reason (the `reason … { … }` clauses).
    pub behaviour: &'e ReasonBehaviour,
    /// The status used: explicit, from the body, or from the message text.
    pub status: Option<u16>,
    /// The message was longer than 1 MiB and was judged on its first 1 MiB.
    pub truncated: bool,
    /// Which step of the precedence decided.
    pub decided_by: Decider,
    /// The model's probability for its top reason, when it was consulted.
    pub probability: Option<f32>,
    /// The model's top reason, when it was consulted (whether it decided
    /// or not).
    pub model_reason: Option<&'e str>,
    /// When the model decided: the status rule it overruled (`None`: no
    /// rule had matched).
    pub overruled: Option<&'e str>,
}

/// What `--explain` shows: how the verdict was reached.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Explanation {
    /// Atoms found in the message, in the order they first occur.
    pub atoms_hit: Vec<String>,
    /// Candidate rules verified, in order, and whether each held.
    pub verified: Vec<(RuleIdx, bool)>,
    /// The normalised inputs the rules saw.
    pub status: Option<u16>,
    /// The error code the engine read (given, or from the body).
    pub code: Option<String>,
    /// The error type the engine read (given, or from the body).
    pub error_type: Option<String>,
    /// The message the rules were matched against (before lower-casing).
    pub message: String,
    /// What the model saw, when it was consulted.
    pub model: Option<ModelExplanation>,
}

/// The model's part in a verdict, for `--explain`.
#[derive(Clone, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct ModelExplanation {
    /// The three most probable reasons, most probable first.
    pub top: Vec<(String, f32)>,
    /// The ten features that added most to the top reason's score.
    pub features: Vec<crate::evidence::Weighed>,
    /// The probability its top reason needed to overrule this verdict.
    pub threshold: f32,
    /// How the thresholds are set.
    pub confidence: Confidence,
}

/// Reusable buffers for classification. One per thread; see
/// [`Engine::classify_with`].
#[derive(Debug, Default)]
pub struct Scratch {
    lower: String,
    text: String,
    provider: String,
    model: String,
    code: String,
    error_type: String,
    body_raw: String,
    /// Bitset over rule indices: the candidates. Verifying walks it in
    /// rule order, so candidates need no sorting.
    candidates: Vec<u64>,
    /// Bitset over atom pattern ids: which atoms this message contains.
    hits: Vec<u64>,
    /// Bit `w % 64` is set for every word `w` of `hits` that may be
    /// non-zero: only those are walked and cleared.
    touched: u64,
    json: Option<Value>,
    /// The lower-cased message with `ſ` and the Kelvin sign spelled `s`
    /// and `k`, for the scan of the (rare) messages that hold them.
    folded: String,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// What step 1a read: the text the rules see and the body's fields.
struct Read<'a> {
    message: &'a str,
    status: Option<u16>,
    body_json: Option<&'a Value>,
    /// `body_raw` holds the body, for the rules that read it.
    has_body_raw: bool,
    /// The code and type came from the body (into the scratch buffers).
    body_code: bool,
    body_type: bool,
}

/// What step 1 ([`Engine::normalise`]) made of an error.
struct Normalised<'a> {
    read: Read<'a>,
    /// The text the rules read, cut to [`MAX_SCAN_BYTES`].
    message: &'a str,
    status: Option<u16>,
    truncated: bool,
    /// `folded` holds the copy to scan (see [`lower_message`]).
    odd_folds: bool,
    fields: Fields<'a>,
}

/// The lower-cased fields the tables are keyed on.
struct Fields<'a> {
    provider: Option<&'a str>,
    model: Option<&'a str>,
    code: Option<&'a str>,
    error_type: Option<&'a str>,
}

/// Cuts `message` to its first [`MAX_SCAN_BYTES`] (on a character
/// boundary); whether it was longer.
#[inline]
fn truncate_scan(message: &mut &str) -> bool {
    if message.len() <= MAX_SCAN_BYTES {
        return false;
    }
    let mut end = MAX_SCAN_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    *message = &message[..end];
    true
}

/// Step 1b: `message` ASCII-lower-cased into `lower`. A case-insensitive
/// regex matches `ſ` for `s` and the Kelvin sign for `k` (Unicode simple
/// case folding), which ASCII lower-casing does not turn into `s`/`k`: a
/// scan of `lower` could miss atoms such a regex needs. For the (rare)
/// messages holding them, the scan reads a copy (`folded`) with `s` and `k`
/// in their place — its hits then still route every rule that can match —
/// and verification does not use the hits (a `has` test must not see `s`
/// for `ſ`). Returns whether the copy was made.
#[inline]
fn lower_message(message: &str, lower: &mut String, folded: &mut String) -> bool {
    lower.clear();
    lower.push_str(message);
    lower.make_ascii_lowercase();
    let odd_folds = folds_beyond_ascii(lower);
    if odd_folds {
        folded.clear();
        folded.push_str(&lower.replace('ſ', "s").replace('\u{212A}', "k"));
    }
    odd_folds
}

/// The normalised error the rules look at.
struct View<'a> {
    text: &'a str,
    lower: &'a str,
    hits: &'a [u64],
    status: Option<u16>,
    provider: Option<&'a str>,
    model: Option<&'a str>,
    code: Option<&'a str>,
    error_type: Option<&'a str>,
    body_raw: Option<&'a str>,
    body_json: Option<&'a Value>,
}

impl Engine {
    /// The embedded default ruleset. It is checked by the test suite, so a
    /// failure here is a build defect.
    pub fn builtin() -> Engine {
        Engine::builtin_rules().with_model(builtin_model(), Confidence::Costs)
    }

    /// The embedded default ruleset without the model: `--no-model`.
    pub fn builtin_rules() -> Engine {
        let build = crate::load::build_unlinted(&[], true).expect("embedded rules need no files");
        Engine::from_build(build)
            .unwrap_or_else(|d| panic!("the embedded default ruleset does not compile:\n{d}"))
    }

    /// Consults `model` where no text rule decides, or a `weak` one did
    /// (docs/model.md): its top reason decides when the rules declare it
    /// and its probability reaches the threshold — per reason and
    /// overruled verdict from the costs ([`Confidence::Costs`]), or one
    /// `minConfidence` for all (a bare `f32`, clamped to 0–1).
    pub fn with_model(mut self, model: Arc<Model>, confidence: impl Into<Confidence>) -> Engine {
        let confidence = confidence.into();
        let reasons: Vec<Option<ReasonId>> = model
            .reasons()
            .iter()
            .map(|r| self.model_reason(r))
            .collect();
        let n = self.ruleset.reasons.len();
        let all = self.consequences();
        let mut thresholds = vec![1.0; reasons.len() * n];
        for (m, id) in reasons.iter().enumerate() {
            for v in 0..n {
                thresholds[m * n + v] = match (confidence, id) {
                    (Confidence::Min(t), _) => t,
                    (Confidence::Costs, Some(id)) => cost::threshold(&all, id.0 as usize, v),
                    (Confidence::Costs, None) => 1.0,
                };
            }
        }
        self.model = Some(ModelSlot {
            model,
            confidence,
            reasons,
            thresholds,
        });
        self
    }

    /// The probability the model's `reason` needs to overrule the rules'
    /// verdict `verdict` under `confidence` (`None`: either is not a
    /// reason of these rules, or the model may not give it).
    pub fn threshold(&self, reason: &str, verdict: &str, confidence: Confidence) -> Option<f32> {
        let r = self.model_reason(reason)?;
        let v = self.ruleset.reason_id(verdict)?;
        Some(match confidence {
            Confidence::Min(t) => t,
            Confidence::Costs => cost::threshold(&self.consequences(), r.0 as usize, v.0 as usize),
        })
    }

    /// What each declared reason does to a run, as the costs price it.
    fn consequences(&self) -> Vec<Consequence> {
        self.ruleset
            .reasons
            .iter()
            .map(|d| Consequence::from(&d.behaviour))
            .collect()
    }

    /// The reason a model's `reason` is in the rules, if the model may give
    /// it: declared, and not `unclassified` — the model's "nothing here
    /// says" is no evidence against a status rule.
    fn model_reason(&self, reason: &str) -> Option<ReasonId> {
        self.ruleset
            .reason_id(reason)
            .filter(|&id| id != self.ruleset.unclassified)
    }

    /// Whether a model's top reason `reason` may decide a verdict (see
    /// [`Engine::with_model`]).
    pub fn model_may_give(&self, reason: &str) -> bool {
        self.model_reason(reason).is_some()
    }

    /// The rules alone: today's verdicts, exactly (`--no-model`).
    pub fn without_model(mut self) -> Engine {
        self.model = None;
        self
    }

    /// The model consulted and how its thresholds are set, if any.
    pub fn model(&self) -> Option<(&Arc<Model>, Confidence)> {
        self.model.as_ref().map(|m| (&m.model, m.confidence))
    }

    /// Who decides when the rule at `index` matches: [`Decider::Rule`]
    /// (a text rule: the model never overrules it), [`Decider::WeakRule`]
    /// or [`Decider::StatusRule`] (the model may).
    pub fn decider_of(&self, index: RuleIdx) -> Decider {
        self.deciders
            .get(index as usize)
            .copied()
            .unwrap_or(Decider::StatusRule)
    }

    /// Whether the rule at `index` is a text rule the model never
    /// overrules (not `weak`, not a status rule).
    pub fn is_text_rule(&self, index: RuleIdx) -> bool {
        self.decider_of(index) == Decider::Rule
    }

    /// Builds now what is otherwise built on first use, so that a command
    /// classifying one message starts fast: the embedded defaults'
    /// regexes, each the first time it runs (half a millisecond or so
    /// each), and the atom scan's table, after a thousand messages (some
    /// 3 ms; until then the scan follows the atoms' trie, a microsecond or
    /// so slower per message). A server calls this once it has its
    /// engine, so that no request pays for either. The verdicts are the
    /// same either way.
    pub fn warm(&self) {
        let mut regexes = Vec::new();
        for rule in &self.ruleset.rules {
            rule.cond.for_each_regex(&mut |re| regexes.push(re));
        }
        // Side by side, as the compile builds an operator's regexes.
        crate::compile::par_map(
            &regexes,
            regexes.len() / 8,
            |re| re.source.len(),
            |re| {
                re.runnable();
            },
        );
        if let Some(scanner) = &self.plan.atoms {
            scanner.build_table();
        }
    }

    /// Builds an engine from a compile result; on errors, returns the
    /// diagnostics with their sources.
    pub fn from_build(build: Build) -> Result<Engine, Diagnostics> {
        match (build.ruleset, build.plan) {
            (Some(ruleset), Some(plan)) => {
                let needs_body_text = ruleset.rules.iter().any(|r| reads_body(&r.cond, false));
                let needs_body_tree = ruleset.rules.iter().any(|r| reads_body(&r.cond, true));
                let deciders = ruleset
                    .rules
                    .iter()
                    .map(|r| match (r.cond.tests_text(), r.weak) {
                        (true, false) => Decider::Rule,
                        (true, true) => Decider::WeakRule,
                        (false, _) => Decider::StatusRule,
                    })
                    .collect();
                Ok(Engine {
                    deciders,
                    model: None,
                    ruleset,
                    plan,
                    needs_body_text,
                    needs_body_tree,
                    sources: build.sources,
                    warnings: build.diagnostics,
                })
            }
            _ => Err(Diagnostics::new(build.sources, build.diagnostics)),
        }
    }

    /// The compiled rules, in precedence order.
    pub(crate) fn ruleset(&self) -> &Ruleset {
        &self.ruleset
    }

    /// The matching plan: the atom automaton and the lookup tables.
    #[cfg(test)]
    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    /// The reasons the rules declare, in declaration order (the order of
    /// [`stream::Summary`]'s per-reason counts).
    pub fn reason_names(&self) -> impl Iterator<Item = &str> {
        self.ruleset.reasons.iter().map(|r| r.name.as_str())
    }

    /// The declared behaviour of `reason` (what the runner does with it),
    /// when the rules declare it.
    pub fn behaviour(&self, reason: &str) -> Option<&ReasonBehaviour> {
        let rs = &self.ruleset;
        rs.reason_id(reason).map(|id| &rs.reason(id).behaviour)
    }

    /// The rules files the engine was built from (for positions).
    pub fn sources(&self) -> &SourceMap {
        &self.sources
    }

    /// Warnings found while compiling (errors prevent an engine).
    pub fn warnings(&self) -> &[Diagnostic] {
        &self.warnings
    }

    /// Classifies with a thread-local scratch buffer.
    pub fn classify(&self, err: &ProviderError) -> Classification<'_> {
        SCRATCH.with(|s| self.classify_with(err, &mut s.borrow_mut()))
    }

    /// Classifies with caller-owned scratch space (the allocation-free path).
    pub fn classify_with(&self, err: &ProviderError, scratch: &mut Scratch) -> Classification<'_> {
        self.run(err, scratch, None)
    }

    /// The rules' verdict alone, the model not consulted (what the golden
    /// cases pin, and what `--no-model` gives).
    pub fn classify_rules(&self, err: &ProviderError) -> Classification<'_> {
        SCRATCH.with(|s| self.run_full(err, &mut s.borrow_mut(), None, false, false))
    }

    /// What the model reads of `err` — the normalised text, status,
    /// provider, code and type, as [`Engine::classify`] prepares them —
    /// handed to `f`. It uses this thread's scratch space: `f` must not
    /// classify on this thread (a nested call panics on the borrow).
    pub fn with_model_input<R>(
        &self,
        err: &ProviderError,
        f: impl FnOnce(&crate::evidence::features::Input) -> R,
    ) -> R {
        SCRATCH.with(|s| {
            let mut s = s.borrow_mut();
            let Scratch {
                lower,
                text,
                provider,
                model,
                code,
                error_type,
                body_raw,
                json,
                folded,
                ..
            } = &mut *s;
            let n = self.normalise(
                err,
                (text, json, body_raw),
                [provider, model, code, error_type],
                (lower, folded),
            );
            f(&ModelInput {
                text: lower,
                status: n.status,
                provider: n.fields.provider,
                code: n.fields.code,
                error_type: n.fields.error_type,
            })
        })
    }

    /// Classifies and records how the verdict was reached.
    pub fn explain(&self, err: &ProviderError) -> (Classification<'_>, Explanation) {
        let mut ex = Explanation::default();
        let c = SCRATCH.with(|s| self.run(err, &mut s.borrow_mut(), Some(&mut ex)));
        if let (Some(slot), Some(_)) = (&self.model, c.probability) {
            ex.model = Some(self.with_model_input(err, |input| {
                let p = slot.model.predict(input);
                let names = slot.model.reasons();
                ModelExplanation {
                    top: p
                        .ranked(3)
                        .into_iter()
                        .map(|(i, p)| (names[i].clone(), p))
                        .collect(),
                    features: slot.model.weighed(input, p.top().0, 10),
                    threshold: slot.threshold(
                        p.top().0,
                        self.verdict_before_model(&c),
                        self.ruleset.reasons.len(),
                    ),
                    confidence: slot.confidence,
                }
            }));
        }
        (c, ex)
    }

    /// The rules' verdict of `c` before the model had its say: the
    /// overruled rule's reason (`unclassified` when no rule matched).
    fn verdict_before_model(&self, c: &Classification) -> ReasonId {
        if c.decided_by != Decider::Model {
            return c.reason_id;
        }
        c.overruled
            .and_then(|id| self.ruleset.rules.iter().find(|r| r.id == id))
            .map_or(self.ruleset.unclassified, |r| r.reason)
    }

    /// The reference path the matcher is measured and checked against:
    /// verify every rule in order with no automaton and no tables. Same
    /// verdicts as [`Engine::classify`], much slower (it allocates its
    /// scratch space too); for benchmarks and agreement checks, not for
    /// serving.
    pub fn classify_exhaustive(&self, err: &ProviderError) -> Classification<'_> {
        SCRATCH.with(|s| self.run_with(err, &mut s.borrow_mut(), None, true))
    }

    /// Step 1, shared by the classifier and the model: the body read, the
    /// text the rules read (cut to [`MAX_SCAN_BYTES`]) lower-cased into
    /// `lower` (and `folded`, see [`lower_message`]), the status, and the
    /// lower-cased fields.
    #[inline]
    fn normalise<'a>(
        &self,
        err: &'a ProviderError<'_>,
        (text, json, body_raw): (&'a mut String, &'a mut Option<Value>, &mut String),
        [provider, model, code, error_type]: [&'a mut String; 4],
        (lower, folded): (&mut String, &mut String),
    ) -> Normalised<'a> {
        let read = self.read_body(err, text, json, body_raw, code, error_type);
        let mut message = read.message;
        let status = read
            .status
            .or_else(|| input::leading_status(message).map(|(s, _)| s));
        let truncated = truncate_scan(&mut message);
        let odd_folds = lower_message(message, lower, folded);
        let fields = self.fields(err, &read, provider, model, code, error_type);
        Normalised {
            read,
            message,
            status,
            truncated,
            odd_folds,
            fields,
        }
    }

    /// The lower-cased provider, model, code and type (code and type from
    /// the body when the caller gave none).
    fn fields<'s>(
        &self,
        err: &'s ProviderError<'_>,
        read: &Read<'_>,
        provider: &'s mut String,
        model: &'s mut String,
        code: &'s mut String,
        error_type: &'s mut String,
    ) -> Fields<'s> {
        Fields {
            provider: lower_into(err.provider, provider),
            model: lower_into(err.model, model),
            code: if read.body_code {
                code.make_ascii_lowercase();
                Some(code.as_str())
            } else {
                lower_into(err.code, code)
            },
            error_type: if read.body_type {
                error_type.make_ascii_lowercase();
                Some(error_type.as_str())
            } else {
                lower_into(err.error_type, error_type)
            },
        }
    }

    /// Rules that may match: atom hits, table lookups, and the rules
    /// verified for every error: bits of `candidates`, a set over rule indices.
    fn collect_candidates(
        &self,
        lower: &str,
        status: Option<u16>,
        [provider, code, error_type]: [Option<&str>; 3],
        candidates: &mut [u64],
        (hits, touched): (&mut [u64], &mut u64),
        mut explain: Option<&mut Explanation>,
    ) {
        let mut add = |rules: &[RuleIdx]| {
            for &r in rules {
                candidates[r as usize / 64] |= 1u64 << (r % 64);
            }
        };
        let plan = &self.plan;
        if let Some(scanner) = &plan.atoms {
            // The scan only sets bits (an atom may be reported more than
            // once); each atom's rules are added once, afterwards.
            scanner.scan_bits(lower.as_bytes(), hits, touched);
            for w in touched_words(*touched, hits.len()) {
                let mut bits = hits[w];
                while bits != 0 {
                    let pid = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    add(&plan.atom_rules[pid]);
                    if let Some(ex) = explain.as_deref_mut() {
                        ex.atoms_hit.push(plan.atom_texts[pid].clone());
                    }
                }
            }
            if let Some(ex) = explain {
                // In the order they first occur in the message.
                ex.atoms_hit
                    .sort_by_key(|a| memchr::memmem::find(lower.as_bytes(), a.as_bytes()));
            }
        }
        // A status outside 100–599 (a caller's bad value) routes nothing.
        if let Some(rules) =
            status.and_then(|s| plan.by_status.get(usize::from(s).wrapping_sub(100)))
        {
            add(rules);
        }
        for (value, table) in [
            (provider, &plan.by_provider),
            (code, &plan.by_code),
            (error_type, &plan.by_type),
        ] {
            if let Some(rs) = value.and_then(|v| table.get(v)) {
                add(rs);
            }
        }
        add(&plan.always);
    }

    fn verdict(
        &self,
        rule: Option<RuleIdx>,
        status: Option<u16>,
        truncated: bool,
    ) -> Classification<'_> {
        let reason_id = match rule {
            Some(i) => self.ruleset.rules[i as usize].reason,
            None => self.ruleset.unclassified,
        };
        let def = self.ruleset.reason(reason_id);
        Classification {
            reason: &def.name,
            reason_id,
            rule: rule.map(|i| self.ruleset.rules[i as usize].id.as_str()),
            rule_index: rule,
            failover: def.behaviour.failover,
            behaviour: &def.behaviour,
            status,
            truncated,
            decided_by: match rule {
                Some(i) => self.decider_of(i),
                None => Decider::None,
            },
            probability: None,
            model_reason: None,
            overruled: None,
        }
    }

    /// The precedence's last step: where no text rule decided (or a weak
    /// one did), the model reads the same normalised error; when its top
    /// reason differs from the rules' and reaches its threshold, it is the
    /// verdict. Where the two agree, the rule stands (its id stays in the
    /// verdict) with the model's probability beside it.
    fn consult_model<'e>(
        &'e self,
        slot: &'e ModelSlot,
        c: Classification<'e>,
        input: &ModelInput<'_>,
    ) -> Classification<'e> {
        let p = slot.model.predict(input);
        let (top, prob) = p.top();
        let mut c = c;
        c.probability = Some(prob);
        c.model_reason = Some(slot.model.reasons()[top].as_str());
        let Some(reason_id) = slot.reasons[top] else {
            return c;
        };
        if reason_id == c.reason_id
            || prob < slot.threshold(top, c.reason_id, self.ruleset.reasons.len())
        {
            return c;
        }
        let def = self.ruleset.reason(reason_id);
        Classification {
            reason: &def.name,
            reason_id,
            rule: None,
            rule_index: None,
            failover: def.behaviour.failover,
            behaviour: &def.behaviour,
            decided_by: Decider::Model,
            overruled: c.rule,
            ..c
        }
    }

    fn run(
        &self,
        err: &ProviderError,
        scratch: &mut Scratch,
        explain: Option<&mut Explanation>,
    ) -> Classification<'_> {
        self.run_full(err, scratch, explain, false, true)
    }

    fn run_with(
        &self,
        err: &ProviderError,
        scratch: &mut Scratch,
        explain: Option<&mut Explanation>,
        exhaustive: bool,
    ) -> Classification<'_> {
        self.run_full(err, scratch, explain, exhaustive, true)
    }

    /// The hot path, in three steps: normalise the inputs
    /// ([`Self::read_body`], [`truncate_scan`], [`lower_message`]), collect
    /// the candidate rules ([`Self::candidates`]), verify them in rule order
    /// ([`Self::verify`]); where no text rule decided, consult the model
    /// ([`Self::consult_model`]). Nothing here allocates once `scratch` has
    /// grown.
    fn run_full(
        &self,
        err: &ProviderError,
        scratch: &mut Scratch,
        explain: Option<&mut Explanation>,
        exhaustive: bool,
        use_model: bool,
    ) -> Classification<'_> {
        let Scratch {
            lower,
            text,
            provider,
            model,
            code,
            error_type,
            body_raw,
            candidates,
            hits,
            touched,
            json,
            folded,
        } = scratch;

        // 1. Normalise. The plain path (a message, no body) copies nothing
        //    but the lower-cased text.
        let Normalised {
            read,
            message,
            status,
            truncated,
            odd_folds,
            fields,
        } = self.normalise(
            err,
            (text, &mut *json, &mut *body_raw),
            [provider, model, code, error_type],
            (&mut *lower, &mut *folded),
        );
        let scan_text: &str = if odd_folds { folded } else { lower };
        if read.has_body_raw {
            body_raw.make_ascii_lowercase();
        }

        // 2. Candidates (the scan also records which atoms occur).
        let mut explain = explain;
        self.candidates(
            scan_text,
            status,
            &fields,
            exhaustive,
            (candidates, hits, touched),
            explain.as_deref_mut(),
        );
        // A scan of the folded copy, or an exhaustive run, does not decide
        // regexes from the hits.
        let hits_decide = !exhaustive && !odd_folds;
        let view = View {
            text: message,
            lower,
            hits: if hits_decide { hits } else { &[] },
            status,
            provider: fields.provider,
            model: fields.model,
            code: fields.code,
            error_type: fields.error_type,
            body_raw: read.has_body_raw.then_some(body_raw.as_str()),
            body_json: read.body_json,
        };

        // 3. Verify in rule order.
        let winner = self.verify(candidates, &view, explain.as_deref_mut());
        if let Some(ex) = explain {
            ex.status = view.status;
            ex.code = view.code.map(str::to_string);
            ex.error_type = view.error_type.map(str::to_string);
            ex.message = view.text.to_string();
        }
        let c = self.verdict(winner, status, truncated);
        match &self.model {
            Some(slot) if use_model && c.decided_by != Decider::Rule => {
                let input = ModelInput {
                    text: view.lower,
                    status,
                    provider: view.provider,
                    code: view.code,
                    error_type: view.error_type,
                };
                self.consult_model(slot, c, &input)
            }
            _ => c,
        }
    }

    /// Step 1a: the body — given as JSON, given as text, or the message
    /// itself when it is a JSON error (after an optional leading status) —
    /// and the text the rules read: the caller's message, plus what the
    /// body says when the message does not already say it. Code and type
    /// found in the body go into `code` and `error_type`.
    #[inline]
    fn read_body<'a>(
        &self,
        err: &'a ProviderError<'_>,
        text: &'a mut String,
        json: &'a mut Option<Value>,
        body_raw: &mut String,
        code: &mut String,
        error_type: &mut String,
    ) -> Read<'a> {
        let message = err.message.unwrap_or("");
        let (body_text, given_json) = match err.body {
            Some(Body::Json(v)) => (None, Some(v)),
            Some(Body::Text(t)) => (Some(t), None),
            None => {
                let after_status = input::leading_status(message).map_or(message, |(_, rest)| rest);
                (json_start(after_status), None)
            }
        };
        *json = None;
        // The raw body (lower-cased by the caller) only when a rule reads
        // it: copying and lower-casing every body was 3% of a
        // classification where none does (the defaults).
        body_raw.clear();
        let has_body_raw = self.needs_body_text
            && match (body_text, given_json) {
                (Some(t), _) => {
                    body_raw.push_str(t);
                    true
                }
                (None, Some(v)) => {
                    body_raw.push_str(&v.to_string());
                    true
                }
                (None, None) => false,
            };
        // The body's fields: read straight from its text when no rule needs
        // the JSON tree (`body.PATH`), else from the parsed tree.
        let fast = match body_text {
            Some(t) if !self.needs_body_tree && looks_like_json(t) => input::extract_text(t.trim()),
            _ => None,
        };
        if let (None, Some(t)) = (&fast, body_text) {
            parse_json_text(t, json);
        }
        let body_json: Option<&Value> = given_json.or(json.as_ref());
        let mut read = Read {
            message,
            status: err.status,
            body_json,
            has_body_raw,
            body_code: false,
            body_type: false,
        };
        let Some(ex) = fast.or_else(|| body_json.map(input::extract)) else {
            // (No tree, so no JSON was given: only a text body is left.)
            if let (Some(t), true) = (body_text, message.is_empty()) {
                text.clear();
                text.push_str(t);
                read.message = text.as_str();
            }
            return read;
        };
        if read.status.is_none() {
            read.status = ex.status;
        }
        if let (None, Some(c)) = (err.code, &ex.code) {
            code.clear();
            code.push_str(c);
            read.body_code = true;
        }
        if let (None, Some(t)) = (err.error_type, &ex.error_type) {
            error_type.clear();
            error_type.push_str(t);
            read.body_type = true;
        }
        text.clear();
        text.push_str(message);
        for part in [ex.message, ex.raw].into_iter().flatten() {
            if !part.is_empty() && !says(message, &part) {
                if !text.is_empty() {
                    text.push('\n');
                }
                text.push_str(&part);
            }
        }
        if text.is_empty() {
            // Nothing readable in the body's usual places: search its
            // whole text.
            match (body_text, given_json) {
                (Some(t), _) => text.push_str(t),
                (None, Some(v)) => text.push_str(&v.to_string()),
                (None, None) => {}
            }
        }
        read.message = text.as_str();
        read
    }

    /// Step 2: the candidate rules, as bits in `candidates` (every rule
    /// when `exhaustive`); the scan records the atoms it saw in `hits`.
    #[inline]
    fn candidates(
        &self,
        scan_text: &str,
        status: Option<u16>,
        fields: &Fields<'_>,
        exhaustive: bool,
        (candidates, hits, touched): (&mut Vec<u64>, &mut Vec<u64>, &mut u64),
        explain: Option<&mut Explanation>,
    ) {
        candidates.clear();
        candidates.resize(self.ruleset.rules.len().div_ceil(64), 0);
        // Only the words the last scan touched can be non-zero.
        let words = self.plan.atom_count().div_ceil(64);
        if hits.len() == words {
            for w in touched_words(*touched, words) {
                hits[w] = 0;
            }
        } else {
            hits.clear();
            hits.resize(words, 0);
        }
        *touched = 0;
        if exhaustive {
            candidates.fill(u64::MAX);
            return;
        }
        self.collect_candidates(
            scan_text,
            status,
            [fields.provider, fields.code, fields.error_type],
            candidates,
            (hits, touched),
            explain,
        );
    }

    /// Step 3: the first candidate, in rule order, whose condition holds.
    #[inline]
    fn verify(
        &self,
        candidates: &[u64],
        view: &View<'_>,
        mut explain: Option<&mut Explanation>,
    ) -> Option<RuleIdx> {
        let rules = &self.ruleset.rules;
        for (w, &word) in candidates.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let idx = (w * 64) as RuleIdx + bits.trailing_zeros();
                bits &= bits - 1;
                let rule = rules.get(idx as usize)?;
                let holds = eval(&rule.cond, view);
                if let Some(ex) = explain.as_deref_mut() {
                    ex.verified.push((idx, holds));
                }
                if holds {
                    return Some(idx);
                }
            }
        }
        None
    }
}

/// The words `w < len` of a bitset whose bit `w % 64` is set in
/// `touched` (in increasing order when `len` ≤ 64).
fn touched_words(touched: u64, len: usize) -> impl Iterator<Item = usize> {
    let mut t = touched;
    std::iter::from_fn(move || {
        (t != 0).then(|| {
            let lane = t.trailing_zeros() as usize;
            t &= t - 1;
            lane
        })
    })
    .flat_map(move |lane| (lane..len).step_by(64))
}

/// Whether the text holds `ſ` (U+017F) or `K` (U+212A), the two
/// characters that case-fold to an ASCII letter without being one.
///
/// Their UTF-8 forms are `C5 BF` and `E2 84 AA`: a `memchr2` over the two
/// lead bytes and a look at what follows. (`memmem::find` builds a
/// searcher on every call, about 1,000 instructions for a two-byte
/// needle; this ran on every message with a non-ASCII character.)
fn folds_beyond_ascii(lower: &str) -> bool {
    if lower.is_ascii() {
        return false;
    }
    let b = lower.as_bytes();
    memchr::memchr2_iter(0xC5, 0xE2, b).any(|i| match b[i] {
        0xC5 => b.get(i + 1) == Some(&0xBF),
        _ => b.get(i + 1..i + 3) == Some(&[0x84, 0xAA][..]),
    })
}

/// Whether `message` already holds `part`. A part read out of the
/// message's own JSON without unescaping borrows from it (an unescaped one
/// is a new string): that is answered by comparing addresses, as building
/// a substring searcher costs some thousand instructions for a 100-byte
/// part (and this runs on every JSON message).
fn says(message: &str, part: &str) -> bool {
    let (outer, inner) = (
        message.as_bytes().as_ptr_range(),
        part.as_bytes().as_ptr_range(),
    );
    if outer.start <= inner.start && inner.end <= outer.end {
        return true;
    }
    memchr::memmem::find(message.as_bytes(), part.as_bytes()).is_some()
}

/// Where a JSON body starts in a message: at the start (`{"error":…}`), or
/// after a prefix when the message ends like an object
/// (`Anthropic API error: {"type":"error",…}`). O(1) for plain text.
fn json_start(s: &str) -> Option<&str> {
    let t = s.trim();
    if looks_like_json(t) {
        return Some(t);
    }
    if !t.ends_with('}') {
        return None;
    }
    memchr::memchr(b'{', t.as_bytes()).map(|i| &t[i..])
}

/// A JSON object (`{…}`) or an array of objects (`[{…}]`, Google's
/// shape). Texts like `[1305][busy]` or `[trace_id=…]` are not tried:
/// a failed parse costs an allocation.
/// Whether a condition reads the raw body text (`tree` false) or a field
/// of the JSON body (`tree` true).
fn reads_body(e: &Expr, tree: bool) -> bool {
    match e {
        Expr::And(p) | Expr::Or(p) => p.iter().any(|x| reads_body(x, tree)),
        Expr::Not(x) => reads_body(x, tree),
        Expr::Text(TextField::BodyRaw, _) => !tree,
        Expr::Text(TextField::BodyPath(_), _) => tree,
        _ => false,
    }
}

fn looks_like_json(s: &str) -> bool {
    let t = s.trim();
    if t.starts_with('{') {
        t.ends_with('}')
    } else if let Some(rest) = t.strip_prefix('[') {
        rest.trim_start().starts_with('{') && t.ends_with(']')
    } else {
        false
    }
}

fn parse_json_text<'j>(t: &str, slot: &'j mut Option<Value>) -> Option<&'j Value> {
    if !looks_like_json(t) {
        return None;
    }
    *slot = serde_json::from_str(t.trim()).ok();
    slot.as_ref()
}

fn lower_into<'b>(value: Option<&str>, buf: &'b mut String) -> Option<&'b str> {
    let v = value?;
    buf.clear();
    buf.push_str(v);
    buf.make_ascii_lowercase();
    Some(buf.as_str())
}

fn eval(expr: &Expr, v: &View) -> bool {
    match expr {
        Expr::And(parts) => parts.iter().all(|p| eval(p, v)),
        Expr::Or(parts) => parts.iter().any(|p| eval(p, v)),
        Expr::Not(inner) => !eval(inner, v),
        Expr::Status(set) => v.status.is_some_and(|s| set.contains(s)),
        Expr::StatusEmpty => v.status.is_none(),
        Expr::Text(field, test) => match field {
            TextField::Message => {
                let hits = (!v.hits.is_empty()).then_some(v.hits);
                text_test(test, v.lower, v.text, hits)
            }
            TextField::Provider => short_test(test, v.provider),
            TextField::Model => short_test(test, v.model),
            TextField::Code => short_test(test, v.code),
            TextField::Type => short_test(test, v.error_type),
            TextField::BodyRaw => short_test(test, v.body_raw),
            TextField::BodyPath(path) => {
                let value = v.body_json.and_then(|j| json_path(j, path));
                match value {
                    None | Some(Value::Null) => matches!(test, TextTest::IsEmpty),
                    Some(Value::String(s)) => owned_test(test, s),
                    Some(Value::Number(n)) => owned_test(test, &n.to_string()),
                    Some(Value::Bool(b)) => owned_test(test, if *b { "true" } else { "false" }),
                    Some(other) => owned_test(test, &other.to_string()),
                }
            }
        },
    }
}

/// A test on an already lower-cased field (or absent).
fn short_test(test: &TextTest, value: Option<&str>) -> bool {
    match value {
        None => matches!(test, TextTest::IsEmpty),
        Some(s) => text_test(test, s, s, None),
    }
}

/// A test on a value that is not lower-cased yet (JSON body fields).
fn owned_test(test: &TextTest, value: &str) -> bool {
    let lower = value.to_ascii_lowercase();
    text_test(test, &lower, value, None)
}

/// `lower` is the ASCII-lower-cased form of `original`.
/// `hits`: the scan's atom bitset, for message tests only.
fn text_test(test: &TextTest, lower: &str, original: &str, hits: Option<&[u64]>) -> bool {
    let lower_str = lower;
    let lower = lower.as_bytes();
    match test {
        TextTest::IsEmpty => lower.iter().all(u8::is_ascii_whitespace),
        TextTest::Eq(s) => trim(lower) == s.as_bytes(),
        TextTest::In(list) => {
            let t = trim(lower);
            list.iter().any(|s| t == s.as_bytes())
        }
        TextTest::Has(l) => l.occurs(lower, hits),
        TextTest::HasAny(ls) => ls.any_occurs(lower, hits),
        TextTest::HasAll(ls) => ls.all_occur(lower, hits),
        TextTest::StartsWith(s) => trim(lower).starts_with(s.as_bytes()),
        TextTest::EndsWith(s) => trim(lower).ends_with(s.as_bytes()),
        TextTest::Matches(re) => re.is_match_message(lower_str, original, hits),
    }
}

/// Equality and prefix tests ignore surrounding whitespace: providers and
/// gateways pad messages inconsistently.
fn trim(b: &[u8]) -> &[u8] {
    b.trim_ascii()
}

fn json_path<'v>(v: &'v Value, path: &[String]) -> Option<&'v Value> {
    let mut cur = v;
    for seg in path {
        cur = match cur {
            Value::Object(m) => m.get(seg)?,
            Value::Array(a) => a.get(seg.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine(rules: &str) -> Engine {
        let mut sources = SourceMap::new();
        let f = sources.add(
            "t.rules",
            format!("reason unclassified {{ failover }}\n{rules}"),
        );
        let layer = crate::compile::Layer {
            name: "t".into(),
            files: vec![f],
            is_default: false,
        };
        let build = crate::compile::compile(sources, vec![layer], Vec::new());
        Engine::from_build(build).unwrap_or_else(|d| panic!("{d}"))
    }

    #[test]
    fn first_matching_rule_in_order_wins() {
        let e = engine(
            r#"
            reason a { failover }
            reason b { stop }
            rule first when message has "limit" and status == 402 => a
            rule second when message has "limit" => b
            "#,
        );
        let c = e.classify(&ProviderError::message("Limit reached").with_status(402));
        assert_eq!((c.reason, c.rule), ("a", Some("first")));
        let c = e.classify(&ProviderError::message("limit reached"));
        assert_eq!((c.reason, c.rule, c.failover), ("b", Some("second"), false));
        let c = e.classify(&ProviderError::message("nothing"));
        assert_eq!((c.reason, c.rule), ("unclassified", None));
    }

    #[test]
    fn leading_status_in_text_counts_as_status() {
        let e = engine("reason r { failover }\nrule s when status == 429 => r");
        let c = e.classify(&ProviderError::message("HTTP 429: slow down"));
        assert_eq!((c.rule, c.status), (Some("s"), Some(429)));
        assert_eq!(
            e.classify(&ProviderError::message("echo: HTTP 429")).rule,
            None
        );
    }

    /// Reason ids are not narrowed: with more than 65,536 reasons the rule
    /// still names its own (ids were `u16` and wrapped around).
    #[test]
    fn a_ruleset_with_seventy_thousand_reasons_keeps_them_apart() {
        let mut rules: String = (0..70_000)
            .map(|i| format!("reason r{i} {{ stop }}\n"))
            .collect();
        rules.push_str("rule last when message has \"zzqq\" => r69999\n");
        let e = engine(&rules);
        let c = e.classify(&ProviderError::message("zzqq"));
        assert_eq!((c.reason, c.rule), ("r69999", Some("last")));
        assert_eq!(
            e.classify(&ProviderError::message("other")).reason,
            "unclassified"
        );
    }

    /// A caller's status outside 100–599 is no HTTP status: no status rule
    /// holds for it, and nothing panics (it indexed the status table).
    #[test]
    fn status_outside_the_http_range_matches_no_status_rule() {
        let e = engine(
            "reason r { failover }\nrule s when status in [100..599] => r\nrule t when message has \"late\" => r",
        );
        for status in [0, 7, 99, 600, 65535] {
            let err = ProviderError {
                status: Some(status),
                ..ProviderError::message("too late")
            };
            let c = e.classify(&err);
            assert_eq!(c.rule, Some("t"), "status {status}");
            assert_eq!(c.status, Some(status));
        }
        let err = ProviderError {
            status: Some(599),
            ..ProviderError::message("too late")
        };
        assert_eq!(e.classify(&err).rule, Some("s"));
    }

    #[test]
    fn json_body_fields_and_message() {
        let e = engine(
            r#"
            reason r { failover }
            rule z when body.error.code == 1311 => r
            rule t when type == "overloaded_error" => r
            rule m when message has "upstream said no" => r
            "#,
        );
        let z = r#"{"error":{"code":1311,"message":"plan"}}"#;
        assert_eq!(
            e.classify(&ProviderError::default().with_body(Body::Text(z)))
                .rule,
            Some("z")
        );
        let a = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(e.classify(&ProviderError::message(a)).rule, Some("t"));
        let o = r#"{"error":{"message":"Provider returned error","code":429,"metadata":{"raw":"upstream said no"}}}"#;
        let c = e.classify(&ProviderError::default().with_body(Body::Text(o)));
        assert_eq!((c.rule, c.status), (Some("m"), Some(429)));
    }

    // A body that is not JSON (an HTML error page) is read as the message
    // only when the caller gave none: the caller's message is kept.
    #[test]
    fn a_body_that_is_not_json_does_not_replace_the_message() {
        let e = engine("reason r { failover }\nrule m when message has \"rate limited\" => r\nrule h when message has \"bad gateway\" => r");
        let html = "<html><body>Bad Gateway</body></html>";
        let c = e.classify(&ProviderError::message("rate limited").with_body(Body::Text(html)));
        assert_eq!(c.rule, Some("m"));
        let c = e.classify(&ProviderError::default().with_body(Body::Text(html)));
        assert_eq!(c.rule, Some("h"));
    }

    // What `explain` shows as the text read: a body's message that the
    // caller's message already says is not added again.
    #[test]
    fn explain_shows_each_part_of_the_message_once() {
        let e = engine("reason r { failover }\nrule q when message has \"quota\" => r");
        let body = r#"{"error":{"message":"Quota exceeded","metadata":{"raw":""}}}"#;
        let err = ProviderError::message("Quota exceeded").with_body(Body::Text(body));
        let (c, ex) = e.explain(&err);
        assert_eq!((c.rule, ex.message.as_str()), (Some("q"), "Quota exceeded"));
        let body = r#"{"error":{"message":"for this month"}}"#;
        let (_, ex) =
            e.explain(&ProviderError::message("Quota exceeded").with_body(Body::Text(body)));
        assert_eq!(ex.message, "Quota exceeded\nfor this month");
    }

    // The caller's message and the body's message (and `raw`) are read as
    // lines of one text: a word at the start of one line is a word, not
    // glued to the end of the other.
    #[test]
    fn message_parts_are_separate_lines() {
        let e = engine("reason r { failover }\nrule q when message matches /\\bquota\\b/ => r");
        let body = r#"{"error":{"message":"quota exceeded","metadata":{"raw":"quota again"}}}"#;
        let c = e.classify(&ProviderError::message("rate").with_body(Body::Text(body)));
        assert_eq!(c.rule, Some("q"));
        let body = r#"{"error":{"message":"limit","metadata":{"raw":"quota"}}}"#;
        let c = e.classify(&ProviderError::default().with_body(Body::Text(body)));
        assert_eq!(c.rule, Some("q"));
    }

    #[test]
    fn raw_body_predicates_see_json_bodies_however_given() {
        let e = engine("reason r { failover }\nrule b when body has \"\\\"weird\\\"\" => r");
        let v = serde_json::json!({"weird": [1, {"x": true}]});
        assert_eq!(
            e.classify(&ProviderError::default().with_body(Body::Json(&v)))
                .rule,
            Some("b")
        );
        let t = r#"{"weird": 1}"#;
        assert_eq!(
            e.classify(&ProviderError::default().with_body(Body::Text(t)))
                .rule,
            Some("b")
        );
        assert_eq!(e.classify(&ProviderError::message(t)).rule, Some("b"));
        assert_eq!(e.classify(&ProviderError::message("weird")).rule, None);
        // Read under a `not` too: the body is there to be tested.
        let e = engine(
            "reason r { failover }\nrule n when status == 500 and not body has \"weird\" => r",
        );
        let err = ProviderError::default().with_status(500);
        assert_eq!(e.classify(&err.with_body(Body::Json(&v))).rule, None);
        assert_eq!(e.classify(&err).rule, Some("n"));
    }

    // The builders a caller states an error with: each field is read by
    // the rules that test it. A body path walks arrays by index.
    #[test]
    fn every_field_of_an_error_reaches_the_rules() {
        let e = engine(
            "reason r { failover }\n\
             rule p when provider == \"openrouter\" => r\n\
             rule m when model == \"gpt-x\" => r\n\
             rule c when code == \"insufficient_quota\" => r\n\
             rule t when type == \"overloaded_error\" => r\n\
             rule a when body.errors.1.reason == \"quota\" => r",
        );
        let base = || ProviderError::message("something");
        let rule = |err: ProviderError| e.classify(&err).rule;
        assert_eq!(rule(base().with_provider("OpenRouter")), Some("p"));
        assert_eq!(rule(base().with_model("gpt-x")), Some("m"));
        assert_eq!(rule(base().with_code("insufficient_quota")), Some("c"));
        assert_eq!(rule(base().with_type("overloaded_error")), Some("t"));
        assert_eq!(rule(base()), None);
        let body = r#"{"errors": [{"reason": "other"}, {"reason": "quota"}]}"#;
        assert_eq!(rule(base().with_body(Body::Text(body))), Some("a"));
    }

    // What counts as JSON to parse: an object, or an array of objects;
    // text that only starts like one is not.
    #[test]
    fn looks_like_json_wants_both_ends() {
        for json in ["{}", " {\"a\": 1} ", "[{\"a\": 1}]", "[ {}]"] {
            assert!(looks_like_json(json), "{json}");
        }
        for text in ["{ not closed", "[1, 2]", "[{} and more", "x {}", "[]", ""] {
            assert!(!looks_like_json(text), "{text}");
        }
    }

    #[test]
    fn regex_runs_on_original_text_case_insensitively() {
        let e = engine("reason r { failover }\nrule x when message matches /Key\\s+Limit/ => r\nrule y when message matches /ABC/c => r");
        assert_eq!(
            e.classify(&ProviderError::message("KEY   limit")).rule,
            Some("x")
        );
        assert_eq!(e.classify(&ProviderError::message("abc")).rule, None);
        assert_eq!(e.classify(&ProviderError::message("ABC")).rule, Some("y"));
    }

    #[test]
    fn huge_message_is_truncated_not_rejected() {
        let e = engine("reason r { failover }\nrule x when message has \"quota\" => r");
        let big = format!("quota {}", "x".repeat(3 * MAX_SCAN_BYTES));
        let c = e.classify(&ProviderError::message(&big));
        assert_eq!((c.rule, c.truncated), (Some("x"), true));
    }

    // The cut is on a character boundary before the limit: a character
    // that straddles it is left out whole, and a short message is not cut.
    #[test]
    fn the_scan_cut_keeps_whole_characters() {
        let e = engine("reason r { failover }\nrule x when message has \"xé\" => r");
        let c = e.classify(&ProviderError::message("a short xé"));
        assert_eq!((c.rule, c.truncated), (Some("x"), false));
        let exact = "x".repeat(MAX_SCAN_BYTES);
        assert!(!e.classify(&ProviderError::message(&exact)).truncated);
        let straddling = format!("{}é tail", "x".repeat(MAX_SCAN_BYTES - 1));
        let c = e.classify(&ProviderError::message(&straddling));
        assert_eq!((c.rule, c.truncated), (None, true));
    }

    // docs/model.md: the names of the deciders in JSON and logs.
    #[test]
    fn decider_names_are_the_documented_ones() {
        let names = [
            Decider::Rule,
            Decider::Model,
            Decider::StatusRule,
            Decider::None,
        ]
        .map(Decider::as_str);
        assert_eq!(names, ["rule", "model", "status rule", "none"]);
        assert_eq!(Decider::WeakRule.as_str(), "weak rule");
    }

    // docs/model.md: the model overrules a rule that reads only the status
    // (500 → timeout here), never one that reads the text; it may give
    // only reasons the rules declare, never `unclassified`; its threshold
    // is clamped to 0–1.
    #[test]
    fn the_model_overrules_status_rules_only() {
        let rules = Engine::builtin_rules();
        assert!(rules.model().is_none());
        let bare = ProviderError::message("zorp fnord quux").with_status(500);
        let c = rules.classify(&bare);
        assert_eq!((c.reason, c.decided_by), ("timeout", Decider::StatusRule));

        let eager = Engine::builtin_rules().with_model(builtin_model(), 0.0);
        assert_eq!(eager.model().map(|(_, t)| t), Some(Confidence::Min(0.0)));
        // At threshold 0 the model decides wherever it disagrees; where it
        // agrees, the status rule stands with the model's probability.
        let c = eager.classify(&bare);
        if c.model_reason == Some("timeout") {
            assert_eq!(
                (c.decided_by, c.rule),
                (Decider::StatusRule, Some("timeout.status_5xx"))
            );
        } else {
            assert_eq!(c.decided_by, Decider::Model);
        }
        assert!(c.probability.is_some());
        let text = ProviderError::message("Too many requests").with_status(429);
        let c = eager.classify(&text);
        assert_eq!((c.reason, c.decided_by), ("rate_limit", Decider::Rule));

        // Where the model overrules, the verdict is wholly its reason's
        // ("the prompt" under a 500: an overflow, which stops, not the
        // status rule's timeout, which fails over); the status rule is
        // kept as the one overruled. It decides at its threshold exactly.
        let prompt = ProviderError::message("the prompt").with_status(500);
        let c = eager.classify(&prompt);
        assert_eq!(
            (c.reason, c.decided_by),
            ("context_overflow", Decider::Model)
        );
        assert_eq!(
            c.reason_id,
            eager.ruleset().reason_id("context_overflow").unwrap()
        );
        assert!(!c.failover);
        assert_eq!(c.behaviour.handoff.as_deref(), Some("compaction"));
        assert_eq!((c.rule, c.overruled), (None, Some("timeout.status_5xx")));
        let p = c.probability.expect("the model's probability");
        let at = |t: f32| {
            Engine::builtin_rules()
                .with_model(builtin_model(), t)
                .classify(&prompt)
                .decided_by
        };
        assert_eq!(at(p), Decider::Model);
        assert_eq!(at(f32::from_bits(p.to_bits() + 1)), Decider::StatusRule);

        assert!(eager.model_may_give("billing"));
        assert!(!eager.model_may_give("unclassified"));
        assert!(!eager.model_may_give("no_such_reason"));
        let clamp = |t: f32| {
            Engine::builtin_rules()
                .with_model(builtin_model(), t)
                .model()
                .map(|(_, t)| t)
        };
        assert_eq!(clamp(1.5), Some(Confidence::Min(1.0)));
        assert_eq!(clamp(-1.0), Some(Confidence::Min(0.0)));
        assert_eq!(
            clamp(f32::NAN),
            Some(Confidence::Min(crate::evidence::DEFAULT_MIN_CONFIDENCE))
        );
        assert_eq!(
            Engine::builtin().model().map(|(_, c)| c),
            Some(Confidence::Costs)
        );
        assert!(eager.without_model().model().is_none());
    }

    /// The engine's table of thresholds is the costs' formula for every
    /// (model reason, verdict) pair of the embedded rules and model.
    #[test]
    fn the_threshold_table_is_the_costs_formula() {
        let e = Engine::builtin();
        let slot = e.model.as_ref().unwrap();
        let n = e.ruleset.reasons.len();
        let mut checked = 0;
        for (m, name) in slot.model.reasons().iter().enumerate() {
            for (v, def) in e.ruleset.reasons.iter().enumerate() {
                let want = e
                    .threshold(name, &def.name, Confidence::Costs)
                    .unwrap_or(1.0);
                assert_eq!(
                    slot.threshold(m, ReasonId(v as _), n),
                    want,
                    "{name} over {}",
                    def.name
                );
                checked += 1;
            }
        }
        assert!(checked > 100, "{checked}");
        assert_eq!(
            e.threshold("billing", "rate_limit", Confidence::Min(0.3)),
            Some(0.3)
        );
        assert_eq!(
            e.threshold("unclassified", "rate_limit", Confidence::Costs),
            None
        );
    }

    /// A toy model over `engine`'s reasons, trained on `(message, reason)`
    /// pairs as the engine reads them.
    fn toy_model(engine: &Engine, items: &[(&str, &str)]) -> Arc<Model> {
        let mut reasons: Vec<String> = items.iter().map(|i| i.1.to_string()).collect();
        reasons.sort();
        reasons.dedup();
        let examples: Vec<_> = items
            .iter()
            .map(|(m, r)| crate::evidence::train::Example {
                vector: engine
                    .with_model_input(&ProviderError::message(m), crate::evidence::vector),
                label: reasons.iter().position(|x| x == r).unwrap(),
            })
            .collect();
        Arc::new(crate::evidence::train::train(
            &examples,
            reasons,
            crate::evidence::train::Options::default(),
        ))
    }

    // docs/model.md "Weak rules": a `weak` text rule is a default the
    // model overrules at the cost-derived threshold (a failover reason
    // over a stop: the floor, 0.5); a text rule it never overrules;
    // `--explain` says which rule was overruled and why.
    #[test]
    fn a_confident_model_overrules_weak_rules_never_text_rules() {
        let rules = "reason rate_limit { failover; cooldown }\n\
                     reason format { stop }\n\
                     rule a.decoy when message has \"never-said\" => format\n\
                     weak rule w.weak when message has \"weakword\" => format\n\
                     rule w.strong when message has \"strongword\" => format\n\
                     weak rule w.weak2 when message has \"weaktwo\" => rate_limit\n";
        let plain = engine(rules);
        let mut items = Vec::new();
        for _ in 0..5 {
            items.push(("weakword slow down please", "rate_limit"));
            items.push(("strongword slow down please", "rate_limit"));
            items.push(("your payload is broken", "format"));
            items.push(("weaktwo: your payload is broken", "format"));
        }
        let index = |id: &str| {
            plain
                .ruleset()
                .rules
                .iter()
                .position(|r| r.id == id)
                .unwrap() as RuleIdx
        };
        assert!(plain.is_text_rule(index("w.strong")));
        assert!(!plain.is_text_rule(index("w.weak")));
        assert_eq!(plain.decider_of(index("w.weak")), Decider::WeakRule);
        let e = engine(rules).with_model(toy_model(&plain, &items), Confidence::Costs);
        let weak = ProviderError::message("weakword slow down please");
        assert_eq!(plain.classify(&weak).decided_by, Decider::WeakRule);
        let c = e.classify(&weak);
        assert_eq!(
            (c.reason, c.decided_by, c.overruled),
            ("rate_limit", Decider::Model, Some("w.weak"))
        );
        assert!(c.probability.unwrap() >= cost::FLOOR);
        assert_eq!(
            e.threshold("rate_limit", "format", Confidence::Costs),
            Some(cost::FLOOR)
        );
        let (_, ex) = e.explain(&weak);
        let text = render_explanation(&e, &c, &ex);
        assert!(text.contains("a weak rule matched"), "{text}");
        assert!(text.contains("it overruled `w.weak`"), "{text}");

        let strong = ProviderError::message("strongword slow down please");
        let c = e.classify(&strong);
        assert_eq!(
            (c.reason, c.decided_by, c.rule),
            ("format", Decider::Rule, Some("w.strong"))
        );
        assert_eq!(
            c.probability, None,
            "a text rule's verdict: the model is not consulted"
        );

        // Where the model agrees with the weak rule, the rule stands.
        let c = e.classify(&ProviderError::message("weakword: your payload is broken"));
        assert_eq!(c.model_reason, Some("format"));
        assert_eq!((c.decided_by, c.rule), (Decider::WeakRule, Some("w.weak")));
        assert!(c.probability.is_some());
        // A stop over a weak rule's cooldown needs more (0.77): the
        // explanation names the threshold of the verdict it overruled.
        let two = ProviderError::message("weaktwo: your payload is broken");
        let c = e.classify(&two);
        assert_eq!(
            (c.reason, c.decided_by, c.overruled),
            ("format", Decider::Model, Some("w.weak2"))
        );
        let (_, ex) = e.explain(&two);
        let want = e
            .threshold("format", "rate_limit", Confidence::Costs)
            .unwrap();
        assert!(want > 0.7, "{want}");
        assert_eq!(ex.model.unwrap().threshold, want);
        // Where no rule matched, the threshold over `unclassified`.
        let (c, ex) = e.explain(&ProviderError::message("your payload is broken"));
        assert_eq!(
            (c.reason, c.decided_by, c.overruled),
            ("format", Decider::Model, None)
        );
        assert_eq!(
            ex.model.unwrap().threshold,
            e.threshold("format", "unclassified", Confidence::Costs)
                .unwrap()
        );
        // The single threshold overrides the costs: at 1.0 nothing moves.
        let strict = engine(rules).with_model(toy_model(&plain, &items), 1.0);
        assert_eq!(strict.classify(&weak).decided_by, Decider::WeakRule);
    }

    // The declared reasons, in declaration order, and their behaviour;
    // compile warnings stay with the engine.
    #[test]
    fn reasons_behaviours_and_warnings_are_the_rules() {
        let e = engine(
            "reason r { failover; disable billing }\n\
             rule a when message has \"x\" => r\n\
             rule b when message has \"x\" => r",
        );
        assert_eq!(e.reason_names().collect::<Vec<_>>(), ["unclassified", "r"]);
        assert!(e
            .behaviour("r")
            .is_some_and(|b| b.failover && b.disable.is_some()));
        assert!(e
            .behaviour("unclassified")
            .is_some_and(|b| b.disable.is_none()));
        assert!(e.behaviour("nope").is_none());
        let w: Vec<_> = e.warnings().iter().map(|d| d.code).collect();
        assert_eq!(w, [crate::diag::Code::W001], "rule b can never win");
    }

    #[test]
    fn explain_lists_atoms_and_verified_rules() {
        let e = engine("reason r { failover }\nrule a when message has \"quota\" and status == 500 => r\nrule b when message has \"quota\" => r");
        let (c, ex) = e.explain(&ProviderError::message("Quota exceeded"));
        assert_eq!(c.rule, Some("b"));
        assert_eq!(ex.atoms_hit, vec!["quota".to_string()]);
        assert_eq!(ex.verified, vec![(0, false), (1, true)]);
    }

    /// The plan puts cheap tests first, answers a plain literal alternation
    /// from the scan's hits, and gates a regex that must run by the atoms
    /// it needs; verdicts stay those of running every regex.
    #[test]
    fn regexes_are_answered_or_gated_by_the_scan() {
        let e = engine(
            r#"
            reason r { failover }
            rule gated when message matches /alpha[^\n]*bravo/ and status == 402 => r
            rule plain when message matches /Over[ -]?load|at capacity/ => r
            rule word when message has "alpha" => r
            "#,
        );
        let rules = &e.ruleset().rules;
        let Expr::And(parts) = &rules[0].cond else {
            panic!("an and: {:?}", rules[0].cond)
        };
        assert!(
            matches!(parts[0], Expr::Status(_)),
            "status first: {parts:?}"
        );
        let Expr::Text(_, TextTest::Matches(gated)) = &parts[1] else {
            panic!("a regex: {parts:?}")
        };
        assert_eq!(gated.exact_ids, None);
        // `bravo` routes the rule, `alpha` is an atom of the third rule.
        assert_eq!(gated.gate_ids.len(), 2, "gated by `alpha` and `bravo`");
        let Expr::Text(_, TextTest::Matches(plain)) = &rules[1].cond else {
            panic!("a regex: {:?}", rules[1].cond)
        };
        assert_eq!(
            plain
                .exact_ids
                .as_ref()
                .map(crate::compile::ir::AtomSet::len),
            Some(4)
        );

        let cases = [
            ("alpha then bravo", Some(402), Some("gated")),
            ("bravo then alpha", Some(402), Some("word")),
            ("alpha then bravo", None, Some("word")),
            ("We are OVER-LOAD-ed", None, Some("plain")),
            ("over  load", None, None),
            ("AT CAPACITY", None, Some("plain")),
        ];
        for (msg, status, want) in cases {
            let mut err = ProviderError::message(msg);
            err.status = status;
            assert_eq!(e.classify(&err).rule, want, "{msg}");
            assert_eq!(e.classify_exhaustive(&err).rule, want, "{msg} (exhaustive)");
        }
    }

    /// A literal a regex needs that is no atom itself still gates it
    /// through an atom inside it (`alpha` in `alpha-one`), and a common
    /// word the scan looks for anyway (`error`) gates too; verdicts stay
    /// those of running every regex.
    #[test]
    fn regexes_are_gated_by_atoms_inside_their_literals() {
        let e = engine(
            r#"
            reason r { failover }
            rule gated when message matches /\balpha-one\b[^\n]*\bbravo-two\b[^\n]*\berror\b/ => r
            rule a when message has "alpha" and status == 500 => r
            rule b when message has "bravo" and status == 500 => r
            rule c when message has "error" and status == 500 => r
            "#,
        );
        let Expr::Text(_, TextTest::Matches(gated)) = &e.ruleset().rules[0].cond else {
            panic!("a regex: {:?}", e.ruleset().rules[0].cond)
        };
        // One of the two long literals routes the rule (an atom); the other
        // stands for `alpha` or `bravo`; `error` is an atom of rule c.
        assert_eq!(gated.gate_ids.len(), 3, "{:?}", gated.facts.gates);
        let cases = [
            ("alpha-one, bravo-two: error", Some("gated")),
            ("alpha-one, bravo-two: fine", None),
            ("alpha-one then bravo-twoish error", None),
            ("bravo-two, alpha-one: error", None),
            ("ALPHA-ONE x BRAVO-TWO x ERROR", Some("gated")),
        ];
        for (msg, want) in cases {
            let err = ProviderError::message(msg);
            assert_eq!(e.classify(&err).rule, want, "{msg}");
            assert_eq!(e.classify_exhaustive(&err).rule, want, "{msg} (exhaustive)");
        }
    }

    /// A literal branch that is one common word (`model`) is no atom, so
    /// the scan does not report it in every message: the branch check
    /// searches for it, with its boundaries, only when its rule is
    /// verified. Verdicts agree with running the regex.
    #[test]
    fn common_word_branches_are_searched_not_scanned() {
        let e = engine(
            r#"
            reason r { failover }
            rule gone when message has any ["revoked", "leaked"]
               and not message matches /\bquota\b|\bmodel\b|\btemporar/ => r
            "#,
        );
        let texts = e.plan().atom_texts();
        assert!(!texts.iter().any(|a| a == "model"), "{texts:?}");
        assert!(texts.iter().any(|a| a == "quota"), "{texts:?}");
        let cases = [
            ("key revoked", Some("gone")),
            ("key revoked for this model", None),
            ("Model key revoked", None),
            ("key revoked (models list)", Some("gone")),
            ("key revoked: remodel", Some("gone")),
            ("key revoked, quota", None),
            ("key leaked, temporarily", None),
        ];
        for (msg, want) in cases {
            let err = ProviderError::message(msg);
            assert_eq!(e.classify(&err).rule, want, "{msg}");
            assert_eq!(e.classify_exhaustive(&err).rule, want, "{msg} (exhaustive)");
        }
    }

    /// Literal branches are decided by their atoms and the bytes around
    /// each occurrence; the rest runs only when its atoms occur. Every
    /// case agrees with running the regex.
    #[test]
    fn literal_branches_decide_without_running_the_regex() {
        let e = engine(
            r#"
            reason r { failover }
            rule words when message matches /\b(unknown|no such) model\b|\btpm\b|:eof\b|bad gateway|\b429\b[^\n]*\bslow\b/ => r
            rule other when message has "model" => r
            "#,
        );
        let Expr::Text(_, TextTest::Matches(re)) = &e.ruleset().rules[0].cond else {
            panic!("a regex: {:?}", e.ruleset().rules[0].cond)
        };
        assert!(re.branch_check.is_some(), "{:?}", re.facts.branches);
        let cases = [
            ("unknown model", Some("words")),
            ("Unknown Model: x", Some("words")),
            ("the unknown models list", Some("other")),
            ("an_unknown model", Some("other")),
            ("xunknown model; unknown model", Some("words")),
            ("no such model", Some("words")),
            ("tpm", Some("words")),
            ("tpms tpm_ xtpm", None),
            ("(tpm)", Some("words")),
            ("read:eof", Some("words")),
            ("read:eofx", None),
            ("read: eof", None),
            ("502 Bad Gateway", Some("words")),
            ("badgateway", None),
            ("429: slow down", Some("words")),
            ("4290: slow down", None),
            ("slow 429", None),
            ("unknown modèle", None),
            ("unknown model\u{e9}", Some("words")),
        ];
        for (msg, want) in cases {
            let err = ProviderError::message(msg);
            assert_eq!(e.classify(&err).rule, want, "{msg}");
            assert_eq!(e.classify_exhaustive(&err).rule, want, "{msg} (exhaustive)");
        }
    }

    /// Only the hit words the last scan touched are cleared: one scratch
    /// shared by engines with different atom counts, message after
    /// message, gives what a fresh scratch gives.
    #[test]
    fn a_scratch_shared_by_engines_gives_fresh_verdicts() {
        let many: String = (0..300)
            .map(|i| format!("rule w{i} when message has \"word{i:03}x\" => r\n"))
            .collect();
        let big = engine(&format!(
            "reason r {{ failover }}\n{many}rule z when message has \"zeta\" => r"
        ));
        let small = engine("reason r { failover }\nrule z when message has \"zeta\" => r\nrule y when message has \"word299x\" => r");
        let messages = [
            "word299x and word001x",
            "zeta",
            "nothing here",
            "word150x",
            "zeta word299x",
        ];
        let mut shared = Scratch::default();
        for round in 0..3 {
            for (i, msg) in messages.iter().enumerate() {
                let e = if (i + round) % 2 == 0 { &big } else { &small };
                let err = ProviderError::message(msg);
                let got = e.classify_with(&err, &mut shared).rule;
                let fresh = e.classify_with(&err, &mut Scratch::default()).rule;
                assert_eq!(got, fresh, "{msg} (round {round})");
            }
        }
        assert_eq!(
            big.classify_with(&ProviderError::message("zeta"), &mut shared)
                .rule,
            Some("z")
        );
        assert_eq!(
            big.classify_with(&ProviderError::message("nothing"), &mut shared)
                .rule,
            None
        );
    }

    /// `ſ` and the Kelvin sign fold to `s` and `k` in a case-insensitive
    /// regex but are not lower-cased to them: the shortcuts must not hide
    /// a match (found in review).
    #[test]
    fn unicode_folds_of_ascii_letters_do_not_fool_the_scan() {
        let e = engine(
            r#"
            reason r { failover }
            rule routed when provider == "openai" and message matches /insufficient quota/ => r
            rule gated when message matches /token limit\b/ => r
            rule word when message has "token limit" => r
            "#,
        );
        let cases = [
            ("Inſufficient quota", Some("openai"), Some("routed")),
            ("insufficient quota", Some("openai"), Some("routed")),
            ("to\u{212A}en limit", None, Some("gated")),
            ("token limit", None, Some("gated")),
            ("to\u{212A}en limitless", None, None),
        ];
        for (msg, provider, want) in cases {
            let mut err = ProviderError::message(msg);
            err.provider = provider;
            assert_eq!(e.classify(&err).rule, want, "{msg}");
            assert_eq!(e.classify_exhaustive(&err).rule, want, "{msg} (exhaustive)");
        }
    }

    /// The byte test agrees with looking for the two characters, around
    /// their neighbours that share a lead byte (`Ż` is `C5 BB`, `€` is
    /// `E2 82 AC`) and at the end of the text.
    #[test]
    fn folds_beyond_ascii_finds_exactly_the_two_characters() {
        for text in [
            "",
            "plain",
            "ſ",
            "xſ",
            "a\u{212A}b",
            "\u{212A}",
            "żółć ż",
            "€ 5",
            "ąſ",
            "\u{2129}",
            "\u{212B}",
            "é€\u{212A}",
            "quota 配额不足",
            "Ż",
        ] {
            let want = text.contains('ſ') || text.contains('\u{212A}');
            assert_eq!(folds_beyond_ascii(text), want, "{text:?}");
        }
    }

    /// A part borrowed from the message is answered by its address; any
    /// other part by a search, whatever buffer holds it.
    #[test]
    fn says_answers_borrowed_parts_and_searches_the_rest() {
        let message = r#"{"error":{"message":"Rate limit reached"}}"#;
        let borrowed = &message[21..39];
        assert_eq!(borrowed, "Rate limit reached");
        assert!(says(message, borrowed));
        assert!(says(message, &String::from("limit reached")));
        assert!(!says(message, &String::from("quota exceeded")));
        let elsewhere = String::from("xx Rate limit");
        assert!(says(message, &elsewhere[3..]));
        assert!(!says(message, &elsewhere));
        // Beside the message in one buffer, not inside it: searched.
        let buf = "Rate limit quota";
        assert!(!says(&buf[..10], &buf[11..]));
        assert!(!says(&buf[11..], &buf[..10]));
    }

    /// The embedded defaults' regexes are left for their first use; `warm`
    /// builds them all, and each is the regex an operator layer holding
    /// the same rules gets built while compiling.
    #[test]
    fn warm_builds_each_default_regex_as_the_compile_builds_it() {
        fn regexes(engine: &Engine) -> Vec<&crate::compile::CompiledRegex> {
            let mut out = Vec::new();
            for rule in &engine.ruleset().rules {
                rule.cond.for_each_regex(&mut |re| out.push(re));
            }
            out
        }
        // A regex built on first use stays shareable across threads.
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Engine>();
        let lazy = Engine::builtin_rules();
        let left = regexes(&lazy);
        assert!(left.len() > 50, "{} regexes", left.len());
        assert!(left.iter().all(|re| re.regex.get().is_none()));
        lazy.warm();
        assert!(left.iter().all(|re| re.regex.get().is_some()));

        let as_operator = crate::load::build_layers(
            vec![(
                "operator".to_string(),
                crate::load::DEFAULT_RULES
                    .iter()
                    .map(|(name, text)| (name.to_string(), text.as_bytes().to_vec()))
                    .collect(),
            )],
            false,
        );
        let eager = Engine::from_build(as_operator).unwrap_or_else(|d| panic!("{d}"));
        let built = regexes(&eager);
        assert!(built.iter().all(|re| re.regex.get().is_some()));
        assert_eq!(left.len(), built.len());
        for (l, b) in left.iter().zip(&built) {
            assert_eq!(l.source, b.source);
            assert_eq!(l.on_lowercase, b.on_lowercase);
            assert_eq!(l.facts, b.facts);
            assert_eq!(l.runnable().as_str(), b.runnable().as_str(), "{}", l.source);
        }
    }
}
