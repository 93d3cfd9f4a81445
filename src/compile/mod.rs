//! Stage 2, compile: ASTs of every layer → validated IR → matcher plan.
//!
//! Layers are ordered by priority: the operator's `--rules` directories in
//! the order given, then the embedded defaults. Within a layer, files are in
//! path order and rules in file order. The first rule (in that order) whose
//! condition holds decides the reason. Reason and selection declarations of
//! a higher-priority layer replace those of lower ones; within one layer a
//! name may be declared once.
//!
//! Every check runs on every file, so one `failover check` reports all
//! problems at once: unknown reasons, duplicate ids, bad regexes, type
//! mismatches, statuses out of range, empty lists, then the lints (rules
//! that can never win, regexes that run on every message).

pub(crate) mod atoms;
mod fold;
pub(crate) mod frozen;
pub(crate) mod ir;
pub(crate) mod plan;
pub(crate) mod reasons;
mod scan;
pub(crate) mod selection;
mod shadow;

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::RegexBuilder;

use crate::diag::{self, did_you_mean, Code, Diagnostic};
use crate::syntax::ast::{self, CondKind, Decl, Field, ListItem, Op, Operand, Spanned};
use crate::syntax::{parse_file, FileId, SourceMap, Span};
pub(crate) use ir::CompiledRegex;
pub(crate) use ir::Expr;
pub(crate) use ir::Literal;
pub(crate) use ir::Rule;
pub(crate) use ir::StatusSet;
pub(crate) use ir::TextField;
pub(crate) use ir::TextTest;
pub(crate) use plan::Plan;
pub(crate) use reasons::ReasonDef;
pub(crate) use reasons::UNCLASSIFIED;
pub use reasons::{DisableLane, ReasonBehaviour};
pub(crate) use reasons::{ReasonId, RotationBudget};
pub use selection::{
    FallbackList, SelectionPolicies, SelectionPolicy, SelectionSource, SelectionTarget,
};

/// Limits on compiled regexes: a pattern that would need more than this is
/// refused with E004 instead of slowing every classification down (the
/// `regex` crate's own default is 10 MB).
const REGEX_SIZE_LIMIT: usize = 8 << 20;
/// A regex longer than this (as written) is refused with E004 before it is
/// parsed: the regex parser holds a node of about 400 bytes per character,
/// so a 3 MB literal took 1.2 GB and seconds just to be found too big. The
/// longest default regex is under 200 bytes; long word lists belong in
/// `has any [...]`, which has no such cost.
pub(crate) const MAX_REGEX_BYTES: usize = 32 << 10;
const REGEX_NEST_LIMIT: u32 = 64;

/// One priority layer of rules files.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Layer {
    /// Shown in `test` tables and `--explain` (`defaults`, or the directory).
    pub name: String,
    pub files: Vec<FileId>,
    pub is_default: bool,
}

/// The compiled classification and selection policy.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Ruleset {
    pub reasons: Vec<ReasonDef>,
    pub rules: Vec<Rule>,
    pub selections: SelectionPolicies,
    pub layers: Vec<Layer>,
    pub unclassified: ReasonId,
}

impl Ruleset {
    pub(crate) fn reason(&self, id: ReasonId) -> &ReasonDef {
        &self.reasons[id.0 as usize]
    }

    pub(crate) fn reason_id(&self, name: &str) -> Option<ReasonId> {
        self.reasons
            .iter()
            .position(|r| r.name == name)
            .map(|i| ReasonId(i as u32))
    }
}

/// The result of compiling: the sources (for rendering), every diagnostic,
/// and the ruleset with its matching plan when there was no error.
#[derive(Debug)]
pub struct Build {
    /// Every file read, for rendering the diagnostics.
    pub sources: SourceMap,
    /// Every problem found, errors and warnings.
    pub diagnostics: Vec<Diagnostic>,
    pub(crate) ruleset: Option<Ruleset>,
    /// The automaton and tables for `ruleset` (built here, once: building
    /// it gives each literal its pattern id in the IR).
    pub(crate) plan: Option<Plan>,
    /// Whether `ruleset` and `plan` were thawed from the frozen defaults
    /// ([`frozen`]) rather than compiled.
    pub(crate) frozen: bool,
}

impl Build {
    /// Whether the rules are the embedded defaults compiled ahead of time
    /// and read back at start-up (issue 47), not compiled now: the
    /// defaults alone, used without the lints.
    pub fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// Whether a diagnostic is an error (then there is no ruleset).
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The rules compiled (0 when there were errors).
    pub fn rule_count(&self) -> usize {
        self.ruleset.as_ref().map_or(0, |r| r.rules.len())
    }

    /// The reasons declared (0 when there were errors).
    pub fn reason_count(&self) -> usize {
        self.ruleset.as_ref().map_or(0, |r| r.reasons.len())
    }

    /// The selection policies the rules give (SPEC R3), when they compiled.
    pub fn selections(&self) -> Option<&SelectionPolicies> {
        self.ruleset.as_ref().map(|r| &r.selections)
    }

    /// The rules that test no text (status and/or provider only), in
    /// precedence order: where one of them, or no rule, matches, the
    /// evidence model may decide (docs/model.md).
    pub fn status_rules(&self) -> Vec<&str> {
        self.ruleset.as_ref().map_or_else(Vec::new, |rs| {
            rs.rules
                .iter()
                .filter(|r| !r.cond.tests_text())
                .map(|r| r.id.as_str())
                .collect()
        })
    }

    /// The ids of the `weak` text rules (docs/model.md, "Weak rules"), in
    /// rule order.
    pub fn weak_rules(&self) -> Vec<&str> {
        self.ruleset.as_ref().map_or_else(Vec::new, |rs| {
            rs.rules
                .iter()
                .filter(|r| r.weak && r.cond.tests_text())
                .map(|r| r.id.as_str())
                .collect()
        })
    }

    /// How each rule is reached and each regex decided (`failover check
    /// --plan`), when the rules compiled.
    pub fn render_plan(&self) -> Option<String> {
        let (rs, plan) = (self.ruleset.as_ref()?, self.plan.as_ref()?);
        Some(plan::render(plan, &rs.rules))
    }
}

/// Whether compiling runs the lints (W001, W002): `check` wants them; a
/// command that only uses the rules (`classify`, `test`, `simulate`,
/// `chain`) prints errors only, so it skips them and starts faster.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lints {
    Run,
    Skip,
}

/// Parses and compiles every layer, with the lints (tests). `early` holds
/// diagnostics found while loading (unreadable bytes); files they concern
/// are not parsed.
#[cfg(test)]
pub(crate) fn compile(sources: SourceMap, layers: Vec<Layer>, early: Vec<Diagnostic>) -> Build {
    compile_with(sources, layers, early, Lints::Run)
}

/// [`compile`], running the lints or not.
pub(crate) fn compile_with(
    sources: SourceMap,
    layers: Vec<Layer>,
    early: Vec<Diagnostic>,
    lints: Lints,
) -> Build {
    let skip: Vec<FileId> = early.iter().map(|d| d.span.file).collect();
    let mut diags = early;
    let to_parse: Vec<(usize, FileId)> = layers
        .iter()
        .enumerate()
        .flat_map(|(li, layer)| layer.files.iter().map(move |&f| (li, f)))
        .filter(|(_, f)| !skip.contains(f))
        .collect();
    // Files are parsed side by side when there is enough text to pay for
    // a thread (the default rules are some 60 KB, a tenth of start-up).
    let text: usize = to_parse
        .iter()
        .map(|&(_, f)| sources.get(f).text().len())
        .sum();
    let parsed = par_map(
        &to_parse,
        text / PARSE_BYTES_PER_THREAD,
        |&(_, f)| sources.get(f).text().len(),
        |&(_, f)| parse_file(&sources, f),
    );
    let mut files: Vec<(usize, ast::RuleFile)> = Vec::with_capacity(parsed.len());
    for (&(li, _), (ast, d)) in to_parse.iter().zip(parsed) {
        diags.extend(d);
        files.push((li, ast));
    }
    let mut cx = Compiler {
        sources: &sources,
        layers: &layers,
        diags,
        prebuilt: prebuild_regexes(&files, &layers),
        lints,
    };
    let ruleset = cx.build(&files);
    let mut diagnostics = cx.diags;
    diag::sort(&mut diagnostics);
    let mut ruleset = if diagnostics.iter().any(Diagnostic::is_error) {
        None
    } else {
        ruleset
    };
    let plan = ruleset.as_mut().map(|rs| Plan::build(&mut rs.rules));
    Build {
        sources,
        diagnostics,
        ruleset,
        plan,
        frozen: false,
    }
}

/// The regex flags an operator may write.
const REGEX_FLAGS: &str = "icsmx";

/// Rules text parsed per thread, at least: below this a thread costs
/// more than it saves.
const PARSE_BYTES_PER_THREAD: usize = 16 << 10;

/// `f` of every item, in item order, computed on up to `threads` threads
/// (this one among them, and never more than four or than the machine
/// has) that take the items one at a time, the costliest first by
/// `cost`: files and regexes differ in cost by a hundred times, so a
/// fixed share each left a thread idle while another worked on.
pub(crate) fn par_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    cost: impl Fn(&T) -> usize,
    f: impl Fn(&T) -> R + Sync,
) -> Vec<R> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4)
        .min(threads)
        .min(items.len());
    if threads <= 1 {
        return items.iter().map(f).collect();
    }
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(cost(&items[i])));
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let Some(&i) = order.get(k) else {
                return done;
            };
            done.push((i, f(&items[i])));
        }
    };
    let mut done = std::thread::scope(|scope| {
        let others: Vec<_> = (1..threads).map(|_| scope.spawn(work)).collect();
        let mut done = work();
        for other in others {
            done.extend(
                other
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic)),
            );
        }
        done
    });
    done.sort_unstable_by_key(|&(i, _)| i);
    done.into_iter().map(|(_, r)| r).collect()
}

/// Every regex of the rules (with valid flags) and its facts, prepared
/// before the compile proper on up to four threads ([`par_map`]).
/// Identical regexes are prepared once.
type Prebuilt = HashMap<(String, String), Prepared>;

/// A regex as prepared: what runs (`None` when it is left for its first
/// use) and what the scan can tell about it, or why it does not build.
type Prepared = Result<(Option<regex::Regex>, ir::RegexFacts), regex::Error>;

/// Prepares every regex of `files`. An operator's regexes are built, so
/// one that does not build is a diagnostic. The embedded defaults' only
/// get their facts: building them was about half of compiling the default
/// rules, and a command that classifies one message runs few of them; the
/// test suite builds them all (`Engine::warm`).
fn prebuild_regexes(files: &[(usize, ast::RuleFile)], layers: &[Layer]) -> Prebuilt {
    fn collect<'a>(c: &'a ast::Condition, lazy: bool, out: &mut Vec<(&'a str, &'a str, bool)>) {
        match &c.kind {
            CondKind::Or(parts) | CondKind::And(parts) => {
                parts.iter().for_each(|p| collect(p, lazy, out))
            }
            CondKind::Not(inner) => collect(inner, lazy, out),
            CondKind::Predicate(p) => {
                if let Some(Spanned {
                    node: Operand::Regex { pattern, flags },
                    ..
                }) = &p.operand
                {
                    if flags.node.chars().all(|f| REGEX_FLAGS.contains(f))
                        && pattern.len() <= MAX_REGEX_BYTES
                    {
                        out.push((pattern, &flags.node, lazy));
                    }
                }
            }
        }
    }
    let mut found = Vec::new();
    for (li, file) in files {
        let lazy = layers[*li].is_default;
        for decl in &file.decls {
            match decl {
                Decl::Rule(r) => collect(&r.condition, lazy, &mut found),
                Decl::Provider(b) => b
                    .rules
                    .iter()
                    .for_each(|r| collect(&r.condition, lazy, &mut found)),
                _ => {}
            }
        }
    }
    // A regex an operator wrote too is built (`false` sorts first and
    // dedup keeps the first).
    found.sort_unstable();
    found.dedup_by(|a, b| (a.0, a.1) == (b.0, b.1));
    // A thread pays for itself from some eight regexes.
    let prepared = par_map(
        &found,
        found.len() / 8,
        |&(p, _, lazy)| if lazy { p.len() } else { p.len() * 4 },
        |&(p, f, lazy)| {
            if lazy {
                Ok((None, regex_facts(p, f)))
            } else {
                build_regex(p, f).map(|(regex, facts)| (Some(regex), facts))
            }
        },
    );
    found
        .iter()
        .zip(prepared)
        .map(|(&(p, f, _), prepared)| ((p.to_string(), f.to_string()), prepared))
        .collect()
}

/// Builds a regex with valid `flags`, and what the scan can tell about it.
fn build_regex(pattern: &str, flags: &str) -> Result<(regex::Regex, ir::RegexFacts), regex::Error> {
    let regex = build_regex_only(pattern, flags)?;
    Ok((regex, regex_facts(pattern, flags)))
}

/// What the scan can tell about a regex with valid `flags`.
fn regex_facts(pattern: &str, flags: &str) -> ir::RegexFacts {
    atoms::regex_facts(pattern, flags, !flags.contains('c'))
}

/// What runs is the ASCII-folded pattern (unless case-sensitive); when it
/// does not build, the pattern as written gives the error to report, in
/// the operator's own terms.
fn build_regex_only(pattern: &str, flags: &str) -> Result<regex::Regex, regex::Error> {
    let mut builder = RegexBuilder::new(pattern);
    builder
        .case_insensitive(!flags.contains('c'))
        .dot_matches_new_line(flags.contains('s'))
        .multi_line(flags.contains('m'))
        .ignore_whitespace(flags.contains('x'))
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .nest_limit(REGEX_NEST_LIMIT);
    if flags.contains('c') {
        return builder.build();
    }
    let folded = fold::ascii_fold(pattern, flags, REGEX_NEST_LIMIT)
        .map_err(regex::Error::Syntax)
        .and_then(|p| {
            RegexBuilder::new(&p)
                .size_limit(REGEX_SIZE_LIMIT)
                .dfa_size_limit(REGEX_SIZE_LIMIT)
                .nest_limit(REGEX_NEST_LIMIT)
                .build()
        });
    match folded {
        Ok(regex) => Ok(regex),
        Err(folded_err) => builder.build().and(Err(folded_err)),
    }
}

struct Compiler<'a> {
    sources: &'a SourceMap,
    layers: &'a [Layer],
    diags: Vec<Diagnostic>,
    prebuilt: Prebuilt,
    lints: Lints,
}

impl Compiler<'_> {
    fn push(&mut self, d: Diagnostic) {
        self.diags.push(d);
    }

    fn build(&mut self, files: &[(usize, ast::RuleFile)]) -> Option<Ruleset> {
        let reasons = self.reasons(files);
        let selections = self.selections(files);
        let names: HashMap<&str, ReasonId> = reasons
            .iter()
            .enumerate()
            .map(|(i, r)| (r.name.as_str(), ReasonId(i as u32)))
            .collect();

        let mut rules = Vec::new();
        let mut seen_ids: HashMap<String, Span> = HashMap::new();
        for (li, file) in files {
            let is_default = self.layers[*li].is_default;
            for decl in &file.decls {
                let (scope, decls): (Option<&[Spanned<String>]>, Vec<&ast::RuleDecl>) = match decl {
                    Decl::Rule(r) => (None, vec![r]),
                    Decl::Provider(b) => (Some(&b.providers), b.rules.iter().collect()),
                    _ => continue,
                };
                for r in decls {
                    if let Some(first) = seen_ids.get(&r.id.node) {
                        let d = Diagnostic::new(Code::E003, r.id.span, format!("duplicate rule id `{}`", r.id.node))
                            .label("this id is already used")
                            .note(*first, "first used here")
                            .help("rule ids are stable names shown in every classification: give each rule its own");
                        self.push(d);
                        continue;
                    }
                    seen_ids.insert(r.id.node.clone(), r.id.span);
                    let reason = match names.get(r.reason.node.as_str()) {
                        Some(id) => Some(*id),
                        None => {
                            self.unknown_reason(&r.reason, &reasons);
                            None
                        }
                    };
                    let mut cond = self.condition(&r.condition);
                    if let (Some(providers), Some(c)) = (scope, cond.as_mut()) {
                        let names: Vec<String> = providers
                            .iter()
                            .map(|p| p.node.to_ascii_lowercase())
                            .collect();
                        let gate = Expr::Text(TextField::Provider, TextTest::In(names));
                        let inner = std::mem::replace(c, Expr::And(Vec::new()));
                        *c = Expr::And(vec![gate, inner]);
                    }
                    if let (Some(reason), Some(cond)) = (reason, cond) {
                        rules.push(Rule {
                            id: r.id.node.clone(),
                            reason,
                            cond,
                            span: r.id.span,
                            layer: *li,
                            is_default,
                            weak: r.weak,
                        });
                    }
                }
            }
        }

        let unclassified = names.get(UNCLASSIFIED).copied();
        if unclassified.is_none() {
            let span = self
                .layers
                .iter()
                .flat_map(|l| l.files.first())
                .next()
                .map(|f| self.sources.span(*f, 0, 0))
                .unwrap_or_default();
            if !self.sources.is_empty() {
                self.push(
                    Diagnostic::new(Code::E016, span, format!("reason `{UNCLASSIFIED}` is not declared"))
                        .label("no layer declares it")
                        .help(format!(
                            "the engine gives errors that no rule matches the reason `{UNCLASSIFIED}`; declare it, e.g. `reason {UNCLASSIFIED} {{ failover }}`"
                        )),
                );
            }
        }

        if self.lints == Lints::Run {
            self.diags.extend(shadow::lint(&rules));
            self.diags.extend(atoms::lint_slow_regexes(&rules));
        }

        Some(Ruleset {
            reasons,
            rules,
            selections,
            layers: self.layers.to_vec(),
            unclassified: unclassified?,
        })
    }

    fn unknown_reason(&mut self, name: &Spanned<String>, reasons: &[ReasonDef]) {
        let mut d = Diagnostic::new(
            Code::E002,
            name.span,
            format!("unknown reason `{}`", name.node),
        )
        .label("no reason of this name is declared");
        d = match did_you_mean(&name.node, reasons.iter().map(|r| r.name.as_str())) {
            Some(s) => d.help(format!("did you mean `{s}`?")),
            None => {
                let mut all: Vec<&str> = reasons.iter().map(|r| r.name.as_str()).collect();
                all.sort_unstable();
                d.help(format!(
                    "declare it with `reason {} {{ failover }}`, or use one of: {}",
                    name.node,
                    all.join(", ")
                ))
            }
        };
        self.push(d);
    }

    /// Reason declarations, higher layers replacing lower ones.
    fn reasons(&mut self, files: &[(usize, ast::RuleFile)]) -> Vec<ReasonDef> {
        let mut out: Vec<ReasonDef> = Vec::new();
        let mut owner: HashMap<String, (usize, Span)> = HashMap::new();
        for (li, file) in files {
            for decl in &file.decls {
                let Decl::Reason(r) = decl else { continue };
                let behaviour = self.behaviour(r);
                match owner.get(&r.name.node) {
                    Some((l, first)) if l == li => {
                        self.push(
                            Diagnostic::new(Code::E011, r.name.span, format!("reason `{}` is declared twice", r.name.node))
                                .label("second declaration")
                                .note(*first, "first declared here")
                                .help("merge the two declarations; a later layer (the defaults) may declare it again"),
                        );
                    }
                    // Declared by a higher-priority layer already: it wins.
                    Some(_) => {}
                    None => {
                        owner.insert(r.name.node.clone(), (*li, r.name.span));
                        if let Some(b) = behaviour {
                            out.push(ReasonDef {
                                name: r.name.node.clone(),
                                behaviour: b,
                            });
                        }
                    }
                }
            }
        }
        out
    }

    fn behaviour(&mut self, r: &ast::ReasonDecl) -> Option<ReasonBehaviour> {
        let mut b = ReasonBehaviour::default();
        let mut verdict: Option<(bool, Span)> = None;
        let mut ok = true;
        for clause in &r.behaviours {
            let word = clause.word.node.as_str();
            let arg = clause.arg.as_ref();
            let argument = arg.map(|a| a.node.as_str());
            let expected_arg = reasons::BEHAVIOUR_WORDS
                .iter()
                .find(|(w, _)| *w == word)
                .map(|(_, a)| *a);
            let Some(expected_arg) = expected_arg else {
                let mut d = Diagnostic::new(
                    Code::E010,
                    clause.word.span,
                    format!("unknown behaviour `{word}`"),
                )
                .label("not a behaviour");
                d = match did_you_mean(word, reasons::BEHAVIOUR_WORDS.iter().map(|(w, _)| *w)) {
                    Some(s) => d.help(format!("did you mean `{s}`?")),
                    None => d.help(behaviour_help()),
                };
                self.push(d);
                ok = false;
                continue;
            };
            match (expected_arg, arg) {
                (None, Some(a)) => {
                    self.push(
                        Diagnostic::new(Code::E010, a.span, format!("`{word}` takes no argument"))
                            .label("unexpected argument")
                            .help("separate clauses with `;`"),
                    );
                    ok = false;
                    continue;
                }
                (Some(choices), None) => {
                    self.push(
                        Diagnostic::new(
                            Code::E010,
                            clause.span,
                            format!("`{word}` needs an argument"),
                        )
                        .label("argument missing")
                        .help(format!("write `{word} {choices}`")),
                    );
                    ok = false;
                    continue;
                }
                _ => {}
            }
            let bad_arg = |this: &mut Self, choices: &str| {
                let a = arg.expect("checked above");
                this.push(
                    Diagnostic::new(
                        Code::E010,
                        a.span,
                        format!("`{word}` cannot take `{}`", a.node),
                    )
                    .label("unknown argument")
                    .help(format!("write `{word} {choices}`")),
                );
            };
            match word {
                "failover" | "stop" => {
                    let v = word == "failover";
                    if let Some((prev, span)) = verdict {
                        if prev != v {
                            self.push(
                                Diagnostic::new(
                                    Code::E010,
                                    clause.span,
                                    "a reason cannot both `failover` and `stop`",
                                )
                                .label("conflicts with the earlier clause")
                                .note(span, "earlier clause")
                                .help("keep one of them"),
                            );
                            ok = false;
                        }
                    }
                    verdict = Some((v, clause.span));
                    b.failover = v;
                }
                "cooldown" => b.cooldown = true,
                "transient" => b.transient = true,
                "disable" => match DisableLane::from_name(argument.unwrap_or_default()) {
                    Some(l) => b.disable = Some(l),
                    None => {
                        bad_arg(self, "billing | auth_permanent");
                        ok = false;
                    }
                },
                "scope" => match argument {
                    Some("model") => b.model_scoped = true,
                    Some("profile") => b.model_scoped = false,
                    _ => {
                        bad_arg(self, "model | profile");
                        ok = false;
                    }
                },
                "skip" => match argument {
                    Some("provider") => b.skip_provider = true,
                    _ => {
                        bad_arg(self, "provider");
                        ok = false;
                    }
                },
                "handoff" => match argument {
                    Some("compaction") => b.handoff = Some("compaction".into()),
                    _ => {
                        bad_arg(self, "compaction");
                        ok = false;
                    }
                },
                "rotations" => match RotationBudget::from_name(argument.unwrap_or_default()) {
                    Some(r) => b.rotations = Some(r),
                    None => {
                        bad_arg(self, "overloaded | rate_limited");
                        ok = false;
                    }
                },
                "probe" => match argument {
                    Some("free") => b.probe_free = true,
                    _ => {
                        bad_arg(self, "free");
                        ok = false;
                    }
                },
                "advance" => match argument {
                    Some("model") => b.advance_model = true,
                    _ => {
                        bad_arg(self, "model");
                        ok = false;
                    }
                },
                _ => unreachable!("every word of BEHAVIOUR_WORDS is handled"),
            }
        }
        if verdict.is_none() && ok {
            self.push(
                Diagnostic::new(
                    Code::E010,
                    r.name.span,
                    format!(
                        "reason `{}` says neither `failover` nor `stop`",
                        r.name.node
                    ),
                )
                .label("what should the runner do with this reason?")
                .help(
                    "add `failover` (try the next profile or model) or `stop` (surface the error)",
                ),
            );
            ok = false;
        }
        ok.then_some(b)
    }

    fn selections(&mut self, files: &[(usize, ast::RuleFile)]) -> SelectionPolicies {
        let mut out = SelectionPolicies::default();
        let mut owner: HashMap<SelectionSource, (usize, Span)> = HashMap::new();
        for (li, file) in files {
            for decl in &file.decls {
                let Decl::Selection(s) = decl else { continue };
                let Some(source) = SelectionSource::from_name(&s.source.node) else {
                    let mut d = Diagnostic::new(
                        Code::E005,
                        s.source.span,
                        format!("unknown selection source `{}`", s.source.node),
                    )
                    .label("not a selection source");
                    d = match did_you_mean(
                        &s.source.node,
                        SelectionSource::ALL.iter().map(|x| x.name()),
                    ) {
                        Some(m) => d.help(format!("did you mean `{m}`?")),
                        None => d.help(format!(
                            "selection sources are: {}",
                            SelectionSource::ALL
                                .iter()
                                .map(|x| x.name())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                    };
                    self.push(d);
                    continue;
                };
                let target = self.selection_target(&s.target);
                let otherwise = match &s.otherwise {
                    Some(t) => self.selection_target(t),
                    None => Some(SelectionTarget::Strict),
                };
                match owner.get(&source) {
                    Some((l, first)) if l == li => {
                        self.push(
                            Diagnostic::new(
                                Code::E011,
                                s.source.span,
                                format!("selection `{}` is declared twice", source),
                            )
                            .label("second declaration")
                            .note(*first, "first declared here")
                            .help("keep one policy per selection source in a layer"),
                        );
                    }
                    Some(_) => {}
                    None => {
                        owner.insert(source, (*li, s.source.span));
                        if let (Some(target), Some(otherwise)) = (target, otherwise) {
                            out.set(source, SelectionPolicy { target, otherwise });
                        }
                    }
                }
            }
        }
        out
    }

    fn selection_target(&mut self, t: &Spanned<ast::SelectionTarget>) -> Option<SelectionTarget> {
        match &t.node {
            ast::SelectionTarget::Strict => Some(SelectionTarget::Strict),
            ast::SelectionTarget::Fallbacks(name) => match FallbackList::from_name(&name.node) {
                Some(l) => Some(SelectionTarget::Fallbacks(l)),
                None => {
                    self.push(
                        Diagnostic::new(
                            Code::E012,
                            name.span,
                            format!("unknown fallback list `{}`", name.node),
                        )
                        .label("not a fallback list")
                        .help("fallback lists are `configured`, `agent` and `payload`"),
                    );
                    None
                }
            },
        }
    }

    fn condition(&mut self, c: &ast::Condition) -> Option<Expr> {
        match &c.kind {
            CondKind::Or(parts) | CondKind::And(parts) => {
                let lowered: Vec<Option<Expr>> = parts.iter().map(|p| self.condition(p)).collect();
                let lowered: Option<Vec<Expr>> = lowered.into_iter().collect();
                let lowered = lowered?;
                Some(if matches!(c.kind, CondKind::Or(_)) {
                    Expr::Or(lowered)
                } else {
                    Expr::And(lowered)
                })
            }
            CondKind::Not(inner) => Some(Expr::Not(Box::new(self.condition(inner)?))),
            CondKind::Predicate(p) => self.predicate(p),
        }
    }

    fn mismatch(&mut self, span: Span, title: String, label: &str, help: &str) -> Option<Expr> {
        self.push(
            Diagnostic::new(Code::E009, span, title)
                .label(label)
                .help(help),
        );
        None
    }

    fn predicate(&mut self, p: &ast::Predicate) -> Option<Expr> {
        let field = &p.field.node;
        let op = p.op.node;
        if op == Op::IsEmpty {
            if let Some(o) = &p.operand {
                return self.mismatch(
                    o.span,
                    "`is empty` takes no value".into(),
                    "unexpected value",
                    "write `FIELD is empty`",
                );
            }
            return Some(match field {
                Field::Status => Expr::StatusEmpty,
                _ => Expr::Text(text_field(field), TextTest::IsEmpty),
            });
        }
        let Some(operand) = &p.operand else {
            return self.mismatch(
                p.op.span,
                format!("`{}` needs a value", op.display()),
                "value missing after this",
                "e.g. `status == 429`, `message has \"quota\"`, `code in [\"A\", \"B\"]`",
            );
        };
        let expr = if *field == Field::Status {
            self.status_predicate(op, operand)?
        } else {
            self.text_predicate(field, op, operand)?
        };
        Some(if op == Op::Ne {
            Expr::Not(Box::new(expr))
        } else {
            expr
        })
    }

    fn status_value(&mut self, v: u64, span: Span) -> Option<u16> {
        if (100..=599).contains(&v) {
            Some(v as u16)
        } else {
            self.push(
                Diagnostic::new(
                    Code::E006,
                    span,
                    format!("HTTP status {} is outside 100–599", v),
                )
                .label("not an HTTP status")
                .help("HTTP statuses run from 100 to 599; for a range write `500..599`"),
            );
            None
        }
    }

    fn status_range(&mut self, lo: u64, hi: u64, span: Span) -> Option<(u16, u16)> {
        let (lo_ok, hi_ok) = (self.status_value(lo, span), self.status_value(hi, span));
        let (lo, hi) = (lo_ok?, hi_ok?);
        if lo > hi {
            self.push(
                Diagnostic::new(
                    Code::E013,
                    span,
                    format!("range `{lo}..{hi}` is empty: it starts after it ends"),
                )
                .label("empty range")
                .help(format!("write `{hi}..{lo}`")),
            );
            return None;
        }
        Some((lo, hi))
    }

    fn status_predicate(&mut self, op: Op, operand: &Spanned<Operand>) -> Option<Expr> {
        let span = operand.span;
        let ranges =
            match (op, &operand.node) {
                (Op::Eq | Op::Ne, Operand::Int(v)) => {
                    vec![(self.status_value(*v, span)?, self.status_value(*v, span)?)]
                }
                (Op::Eq | Op::Ne | Op::In, Operand::Range(lo, hi)) => {
                    vec![self.status_range(*lo, *hi, span)?]
                }
                (Op::In, Operand::List(items)) => {
                    if items.is_empty() {
                        return self.empty_list(span);
                    }
                    let mut out = Vec::new();
                    let mut ok = true;
                    for item in items {
                        let r = match &item.node {
                            ListItem::Int(v) => self.status_value(*v, item.span).map(|s| (s, s)),
                            ListItem::Range(lo, hi) => self.status_range(*lo, *hi, item.span),
                            ListItem::Str(_) => {
                                self.mismatch(
                                    item.span,
                                    "`status` is a number, but this is a string".into(),
                                    "a string",
                                    "write statuses without quotes: `status in [500, 502..504]`",
                                );
                                None
                            }
                        };
                        match r {
                            Some(r) => out.push(r),
                            None => ok = false,
                        }
                    }
                    if !ok {
                        return None;
                    }
                    out
                }
                (Op::Eq | Op::Ne | Op::In, other) => {
                    return self.mismatch(
                        span,
                        format!("`status` is a number, but this is {}", other.kind()),
                        "not a status",
                        "compare statuses with numbers: `status == 429`, `status in [500..599]`",
                    )
                }
                (op, _) => return self.mismatch(
                    span,
                    format!(
                        "`status` is a number and cannot be used with `{}`",
                        op.display()
                    ),
                    "operator not valid for `status`",
                    "use `status == N`, `status != N`, `status in [N, A..B]` or `status is empty`",
                ),
            };
        Some(Expr::Status(StatusSet::from_ranges(ranges)))
    }

    fn empty_list(&mut self, span: Span) -> Option<Expr> {
        self.push(
            Diagnostic::new(Code::E007, span, "empty list")
                .label("this list has no items, so the condition can never hold")
                .help("add at least one item, or remove the predicate"),
        );
        None
    }

    fn text_list(
        &mut self,
        items: &[Spanned<ListItem>],
        span: Span,
        field: &Field,
    ) -> Option<Vec<String>> {
        if items.is_empty() {
            self.empty_list(span);
            return None;
        }
        let mut out = Vec::new();
        for item in items {
            match &item.node {
                ListItem::Str(s) if s.is_empty() => {
                    self.empty_text(item.span);
                    return None;
                }
                ListItem::Str(s) => out.push(s.clone()),
                // Codes such as Z.ai's `1311` are numbers in JSON bodies.
                ListItem::Int(v) if *field != Field::Message => out.push(v.to_string()),
                _ => {
                    self.mismatch(
                        item.span,
                        format!("`{}` is text, but this is not a string", field.display()),
                        "not a string",
                        "quote text values: `[\"a\", \"b\"]`",
                    );
                    return None;
                }
            }
        }
        Some(out)
    }

    fn empty_text(&mut self, span: Span) {
        self.push(
            Diagnostic::new(Code::E007, span, "empty text")
                .label("an empty string matches every message")
                .help("give the text to look for, or use `FIELD is empty`"),
        );
    }

    fn text_predicate(
        &mut self,
        field: &Field,
        op: Op,
        operand: &Spanned<Operand>,
    ) -> Option<Expr> {
        let span = operand.span;
        let tf = text_field(field);
        let name = field.display();
        let test = match (op, &operand.node) {
            (Op::Eq | Op::Ne, Operand::Str(s)) => TextTest::Eq(s.to_ascii_lowercase()),
            (Op::Eq | Op::Ne, Operand::Int(v)) if *field != Field::Message => {
                TextTest::Eq(v.to_string())
            }
            (Op::In, Operand::List(items)) => TextTest::In(
                self.text_list(items, span, field)?
                    .iter()
                    .map(|s| s.to_ascii_lowercase())
                    .collect(),
            ),
            (Op::Has | Op::StartsWith | Op::EndsWith, Operand::Str(s)) => {
                if s.is_empty() {
                    self.empty_text(span);
                    return None;
                }
                match op {
                    Op::Has => TextTest::Has(Box::new(Literal::new(s))),
                    Op::StartsWith => TextTest::StartsWith(s.to_ascii_lowercase()),
                    _ => TextTest::EndsWith(s.to_ascii_lowercase()),
                }
            }
            (Op::HasAny | Op::HasAll, Operand::List(items)) => {
                let lits: Vec<Literal> = self
                    .text_list(items, span, field)?
                    .iter()
                    .map(|s| Literal::new(s))
                    .collect();
                if op == Op::HasAny {
                    TextTest::HasAny(lits.into())
                } else {
                    TextTest::HasAll(lits.into())
                }
            }
            (Op::Matches, Operand::Regex { pattern, flags }) => {
                TextTest::Matches(Box::new(self.regex(pattern, flags, span)?))
            }
            (op, other) => {
                let want = match op {
                    Op::Eq | Op::Ne | Op::Has | Op::StartsWith | Op::EndsWith => "a string",
                    Op::In | Op::HasAny | Op::HasAll => "a list of strings",
                    Op::Matches => "a regex `/…/`",
                    Op::IsEmpty => "no value",
                };
                return self.mismatch(
                    span,
                    format!(
                        "`{name} {}` needs {want}, but this is {}",
                        op.display(),
                        other.kind()
                    ),
                    "wrong kind of value",
                    &format!("e.g. `{name} {} {}`", op.display(), example(op)),
                );
            }
        };
        Some(Expr::Text(tf, test))
    }

    fn regex(
        &mut self,
        pattern: &str,
        flags: &Spanned<String>,
        span: Span,
    ) -> Option<CompiledRegex> {
        if let Some((i, other)) = flags
            .node
            .char_indices()
            .find(|(_, f)| !REGEX_FLAGS.contains(*f))
        {
            let start = flags.span.start as usize + i;
            let fspan = self
                .sources
                .span(flags.span.file, start, start + other.len_utf8());
            self.push(
                Diagnostic::new(Code::E004, fspan, format!("unknown regex flag `{other}`"))
                    .label("not a flag")
                    .help("flags are `i` (the default), `c` (case-sensitive), `s`, `m` and `x`"),
            );
            return None;
        }
        if pattern.len() > MAX_REGEX_BYTES {
            self.push(
                Diagnostic::new(Code::E004, span, "regex is too long")
                    .label(format!(
                        "this pattern is {}; the limit is {}",
                        diag::bytes_shown(pattern.len() as u64),
                        diag::bytes_shown(MAX_REGEX_BYTES as u64)
                    ))
                    .help("a long list of alternatives reads better, and compiles far faster, as `message has any [\"a\", \"b\", …]`"),
            );
            return None;
        }
        let case_sensitive = flags.node.contains('c');
        let key = (pattern.to_string(), flags.node.clone());
        let built = match self.prebuilt.get(&key) {
            Some(built) => built.clone(),
            None => build_regex(pattern, &flags.node).map(|(regex, facts)| (Some(regex), facts)),
        };
        match built {
            Ok((regex, facts)) => Some(CompiledRegex {
                source: format!("/{pattern}/{}", flags.node),
                regex: regex.map_or_else(OnceLock::new, OnceLock::from),
                on_lowercase: !case_sensitive,
                facts,
                gate_ids: Vec::new(),
                exact_ids: None,
                branch_check: None,
            }),
            Err(err) => {
                let detail = match &err {
                    regex::Error::CompiledTooBig(limit) => format!(
                        "the compiled pattern would exceed {} KB; simplify nested repetitions such as `(a{{100}}){{100}}`",
                        limit / 1024
                    ),
                    other => other.to_string().lines().last().unwrap_or_default().trim().trim_start_matches("error: ").to_string(),
                };
                self.push(
                    Diagnostic::new(Code::E004, span, "regex does not compile")
                        .label(detail)
                        .help("the syntax is that of the Rust `regex` crate (no look-around, no backreferences)"),
                );
                None
            }
        }
    }
}

fn text_field(field: &Field) -> TextField {
    match field {
        Field::Message => TextField::Message,
        Field::Provider => TextField::Provider,
        Field::Model => TextField::Model,
        Field::Code => TextField::Code,
        Field::Type => TextField::Type,
        Field::Body(p) if p.is_empty() => TextField::BodyRaw,
        Field::Body(p) => TextField::BodyPath(p.clone()),
        Field::Status => unreachable!("status is not a text field"),
    }
}

fn example(op: Op) -> &'static str {
    match op {
        Op::Eq | Op::Ne | Op::Has | Op::StartsWith | Op::EndsWith => "\"text\"",
        Op::In | Op::HasAny | Op::HasAll => "[\"a\", \"b\"]",
        Op::Matches => "/pattern/",
        Op::IsEmpty => "",
    }
}

fn behaviour_help() -> String {
    let words: Vec<String> = reasons::BEHAVIOUR_WORDS
        .iter()
        .map(|(w, a)| match a {
            Some(a) => format!("`{w} {a}`"),
            None => format!("`{w}`"),
        })
        .collect();
    format!("behaviours are {}", words.join(", "))
}
