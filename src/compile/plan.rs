//! The matcher plan: how each rule is reached at run time.
//!
//! Each rule gets a set of *keys* ([`route_keys`]), at least one of which
//! every error it matches must have:
//!
//! * **atoms** go into one automaton over lower-cased text (built by
//!   aho-corasick, scanned by the `scan` module); a rule is a candidate
//!   when one of its atoms occurs in the message;
//! * **provider / code / type / status** keys list the rule in a table;
//!   a rule is a candidate when the error's value is in the table;
//! * rules with no key set are candidates for every message (`check` warns
//!   when one of them holds a regex).
//!
//! Candidates are then verified in rule order; the first whose whole
//! condition holds wins. Because keys are *necessary* conditions, skipping
//! non-candidates never changes the winner.

use rustc_hash::FxHashMap;

use super::atoms::{is_common, route_keys, usable_atom, Key, MIN_ATOM_LEN};
use memchr::memmem::Finder;

use super::ir::{AtomSet, BranchCheck, Expr, Rest, Rule, TextField, TextTest};
use super::scan::Scanner;

/// Index of a rule in the ruleset (precedence order).
pub(crate) type RuleIdx = u32;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Plan {
    /// One automaton over every atom, lower-cased.
    pub(crate) atoms: Option<Scanner>,
    /// Atom pattern id → the rules it makes candidates.
    pub(crate) atom_rules: Vec<Vec<RuleIdx>>,
    /// The atom texts, for `--explain`.
    pub(crate) atom_texts: Vec<String>,
    /// Status − 100 → rules keyed by that status.
    pub(crate) by_status: Vec<Vec<RuleIdx>>,
    /// By lower-cased value (FxHash: one lookup per message each), frozen
    /// in key order.
    #[serde(serialize_with = "by_key")]
    pub(crate) by_provider: FxHashMap<String, Vec<RuleIdx>>,
    #[serde(serialize_with = "by_key")]
    pub(crate) by_code: FxHashMap<String, Vec<RuleIdx>>,
    #[serde(serialize_with = "by_key")]
    pub(crate) by_type: FxHashMap<String, Vec<RuleIdx>>,
    pub(crate) always: Vec<RuleIdx>,
    /// The keys of each rule (`None`: always verified), for `check --plan`.
    pub routes: Vec<Option<Vec<Key>>>,
}

impl Plan {
    /// Builds the plan and gives every usable message literal of every
    /// rule its pattern id in the automaton (see [`super::ir::Literal`]).
    pub(crate) fn build(rules: &mut [Rule]) -> Plan {
        let mut atoms = Patterns::default();
        let mut by_status: Vec<Vec<RuleIdx>> = vec![Vec::new(); 500];
        let mut by_provider: FxHashMap<String, Vec<RuleIdx>> = FxHashMap::default();
        let mut by_code: FxHashMap<String, Vec<RuleIdx>> = FxHashMap::default();
        let mut by_type: FxHashMap<String, Vec<RuleIdx>> = FxHashMap::default();
        let mut always = Vec::new();
        let mut routes = Vec::with_capacity(rules.len());

        for (i, rule) in rules.iter().enumerate() {
            let idx = i as RuleIdx;
            let keys = route_keys(&rule.cond);
            match &keys {
                None => always.push(idx),
                Some(keys) => {
                    for key in keys {
                        match key {
                            Key::Atoms(list) => {
                                for atom in list {
                                    let pid = atoms.id(atom) as usize;
                                    push_once(&mut atoms.rules[pid], idx);
                                }
                            }
                            Key::Provider(vs) => vs.iter().for_each(|v| {
                                push_once(by_provider.entry(v.clone()).or_default(), idx)
                            }),
                            Key::Code(vs) => vs.iter().for_each(|v| {
                                push_once(by_code.entry(v.clone()).or_default(), idx)
                            }),
                            Key::Type(vs) => vs.iter().for_each(|v| {
                                push_once(by_type.entry(v.clone()).or_default(), idx)
                            }),
                            Key::Status(set) => set
                                .iter()
                                .for_each(|st| push_once(&mut by_status[(st - 100) as usize], idx)),
                        }
                    }
                }
            }
            routes.push(keys);
        }

        // Every message literal becomes a pattern too, so `has` tests read
        // the scan's hits; so does every literal of a regex the hits can
        // answer outright. Patterns that route no rule just set their bit.
        for rule in rules.iter_mut() {
            visit_message_tests(&mut rule.cond, &mut |test| match test {
                TextTest::Has(l) => atoms.register(l),
                TextTest::HasAny(ls) => {
                    ls.iter_mut().for_each(|l| atoms.register(l));
                    ls.atoms = ls
                        .iter()
                        .map(|l| l.atom)
                        .collect::<Option<Vec<u32>>>()
                        .map(AtomSet::new);
                }
                TextTest::HasAll(ls) => ls.iter_mut().for_each(|l| atoms.register(l)),
                TextTest::Matches(re) => {
                    re.exact_ids = re
                        .facts
                        .exact
                        .as_ref()
                        .map(|e| AtomSet::new(e.iter().map(|a| atoms.id(a))));
                    // The strings of literal branches become atoms too: a
                    // hit then says the string occurs, and only its
                    // boundaries are left to look at. Common words are
                    // left out: a branch check searches for them itself,
                    // and only when its rule is verified.
                    if let (None, true, Some(b)) =
                        (&re.exact_ids, re.on_lowercase, &re.facts.branches)
                    {
                        if b.literals.iter().all(|(t, ..)| t.len() >= MIN_ATOM_LEN) {
                            b.literals.iter().filter(|(t, ..)| !is_common(t)).for_each(
                                |(t, ..)| {
                                    atoms.id(t);
                                },
                            );
                        }
                    }
                }
                _ => {}
            });
        }
        let scanner = (!atoms.list.is_empty()).then(|| Scanner::build(&atoms.list));
        // A regex that must run is gated by the literals it needs, but only
        // through atoms the scan looks for anyway (a new atom would cost
        // every message a little to spare a few messages a regex run): a
        // literal that is no atom itself stands for the longest atom inside
        // it, whose hit it needs. A gate with a literal that holds no atom
        // says nothing and is dropped.
        if let Some(scanner) = &scanner {
            for rule in rules.iter_mut() {
                visit_message_tests(&mut rule.cond, &mut |test| {
                    if let TextTest::Matches(re) = test {
                        re.gate_ids = re
                            .facts
                            .gates
                            .iter()
                            .filter_map(|g| {
                                g.iter()
                                    .map(|lit| contained_atom(&atoms, scanner, lit))
                                    .collect::<Option<Vec<u32>>>()
                                    .map(AtomSet::new)
                            })
                            .collect();
                        if re.exact_ids.is_none() && re.on_lowercase {
                            re.branch_check = re
                                .facts
                                .branches
                                .as_ref()
                                .and_then(|b| branch_check(&atoms, scanner, b));
                        }
                    }
                });
            }
        }

        for rule in rules.iter_mut() {
            order_by_cost(&mut rule.cond);
        }

        let atom_texts = atoms
            .list
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Plan {
            atoms: scanner,
            atom_rules: atoms.rules,
            atom_texts,
            by_status,
            by_provider,
            by_code,
            by_type,
            always,
            routes,
        }
    }

    pub(crate) fn atom_count(&self) -> usize {
        self.atom_texts.len()
    }

    /// The atom texts, in pattern order.
    #[cfg(test)]
    pub(crate) fn atom_texts(&self) -> &[String] {
        &self.atom_texts
    }

    pub(crate) fn always_count(&self) -> usize {
        self.always.len()
    }
}

/// A table frozen in key order, so that one ruleset always freezes to the
/// same bytes.
fn by_key<S: serde::Serializer>(
    table: &FxHashMap<String, Vec<RuleIdx>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    s.collect_map(table.iter().collect::<std::collections::BTreeMap<_, _>>())
}

/// Sorts the parts of every `and` / `or` so the cheap tests run first (a
/// status before a regex; a regex the hits decide before one that runs).
/// Tests have no side effects, so the order never changes a verdict, only
/// how soon a failing `and` or a holding `or` stops. Returns the
/// estimated cost of `expr`.
fn order_by_cost(expr: &mut Expr) -> u32 {
    match expr {
        Expr::And(parts) | Expr::Or(parts) => {
            let mut costed: Vec<(u32, Expr)> = parts
                .drain(..)
                .map(|mut p| (order_by_cost(&mut p), p))
                .collect();
            costed.sort_by_key(|(c, _)| *c);
            let total = costed.iter().map(|(c, _)| c).sum();
            parts.extend(costed.into_iter().map(|(_, p)| p));
            total
        }
        Expr::Not(inner) => order_by_cost(inner),
        Expr::Status(_) | Expr::StatusEmpty => 1,
        Expr::Text(TextField::Message, test) => match test {
            TextTest::Has(l) => literal_cost(l),
            TextTest::HasAny(ls) if ls.atoms.is_some() => 1,
            TextTest::HasAny(ls) | TextTest::HasAll(ls) => ls.iter().map(literal_cost).sum(),
            TextTest::Matches(re) if re.exact_ids.is_some() => 2,
            TextTest::Matches(re) => 50 + 200 * re.facts.gaps,
            _ => 10,
        },
        Expr::Text(TextField::BodyPath(_), _) => 20,
        Expr::Text(_, TextTest::Matches(_)) => 30,
        Expr::Text(..) => 2,
    }
}

fn literal_cost(l: &super::ir::Literal) -> u32 {
    if l.atom.is_some() {
        1
    } else {
        20
    }
}

/// The automaton's patterns while the plan is built: pattern id → text
/// and the rules it makes candidates.
#[derive(Default)]
struct Patterns {
    ids: FxHashMap<Vec<u8>, u32>,
    list: Vec<Vec<u8>>,
    rules: Vec<Vec<RuleIdx>>,
}

impl Patterns {
    /// The pattern id of `atom`, added when new.
    fn id(&mut self, atom: &[u8]) -> u32 {
        if let Some(&id) = self.ids.get(atom) {
            return id;
        }
        let id = self.list.len() as u32;
        self.ids.insert(atom.to_vec(), id);
        self.list.push(atom.to_vec());
        self.rules.push(Vec::new());
        id
    }

    fn get(&self, atom: &[u8]) -> Option<u32> {
        self.ids.get(atom).copied()
    }

    /// Gives a message literal its pattern id when it can be an atom.
    fn register(&mut self, lit: &mut super::ir::Literal) {
        if let Some(atom) = usable_atom(lit.text.as_bytes()) {
            lit.atom = Some(self.id(&atom));
        }
    }
}

fn visit_message_tests(expr: &mut Expr, f: &mut impl FnMut(&mut TextTest)) {
    match expr {
        Expr::And(parts) | Expr::Or(parts) => {
            parts.iter_mut().for_each(|p| visit_message_tests(p, f))
        }
        Expr::Not(inner) => visit_message_tests(inner, f),
        Expr::Text(TextField::Message, test) => f(test),
        _ => {}
    }
}

/// The atom a literal needs: the literal itself when it is an atom, else
/// the longest atom that occurs inside it; `None` when it holds none.
fn contained_atom(atoms: &Patterns, scanner: &Scanner, lit: &[u8]) -> Option<u32> {
    if let Some(id) = atoms.get(lit) {
        return Some(id);
    }
    let mut bits = vec![0u64; atoms.list.len().div_ceil(64)];
    // A probe: building the plan does not build the scan's table.
    scanner.probe(lit, |pid| bits[pid / 64] |= 1u64 << (pid % 64));
    let mut best: Option<usize> = None;
    for (w, &word) in bits.iter().enumerate() {
        let mut rest = word;
        while rest != 0 {
            let pid = w * 64 + rest.trailing_zeros() as usize;
            rest &= rest - 1;
            if best.is_none_or(|b| atoms.list[pid].len() > atoms.list[b].len()) {
                best = Some(pid);
            }
        }
    }
    best.map(|b| b as u32)
}

/// The literal branches of a regex as they run: each literal with its own
/// atom (registered with the message literals), or searched for directly
/// when it is a common word left out of the scan; `None` when one is too
/// short to be an atom.
fn branch_check(
    atoms: &Patterns,
    scanner: &Scanner,
    branches: &super::ir::LiteralBranches,
) -> Option<BranchCheck> {
    let mut literals = Vec::new();
    let mut searched = Vec::new();
    for (text, before, after) in &branches.literals {
        let finder = Finder::new(text).into_owned();
        match atoms.get(text) {
            Some(atom) => literals.push((atom, finder, *before, *after)),
            None if text.len() >= MIN_ATOM_LEN => searched.push((finder, *before, *after)),
            None => return None,
        }
    }
    literals.sort_by_key(|l| l.0);
    // Each other branch keeps the gates whose literals all hold an atom;
    // a branch left with none could match anything, so the rest runs.
    let rest = match &branches.rest {
        None => Rest::Run,
        Some(others) if others.is_empty() => Rest::Nothing,
        Some(others) => others
            .iter()
            .map(|gates| {
                let kept: Vec<AtomSet> = gates
                    .iter()
                    .filter_map(|g| {
                        g.iter()
                            .map(|lit| contained_atom(atoms, scanner, lit))
                            .collect::<Option<Vec<u32>>>()
                            .map(AtomSet::new)
                    })
                    .collect();
                (!kept.is_empty()).then_some(kept)
            })
            .collect::<Option<Vec<_>>>()
            .map_or(Rest::Run, Rest::Gated),
    };
    Some(BranchCheck {
        any: AtomSet::new(literals.iter().map(|l| l.0)),
        literals,
        searched,
        rest,
    })
}

/// Rules are added in index order, so a duplicate can only be the last.
fn push_once(list: &mut Vec<RuleIdx>, idx: RuleIdx) {
    if list.last() != Some(&idx) {
        list.push(idx);
    }
}

/// The plan as an operator reads it: how each rule is reached.
pub(crate) fn render(plan: &Plan, rules: &[Rule]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = rules
        .iter()
        .map(|r| r.id.len())
        .max()
        .unwrap_or(4)
        .min(crate::diag::MAX_COLUMN);
    for (rule, keys) in rules.iter().zip(&plan.routes) {
        let how = match keys {
            None => "always verified".to_string(),
            Some(keys) => keys
                .iter()
                .map(describe_key)
                .collect::<Vec<_>>()
                .join(" | "),
        };
        let _ = writeln!(
            out,
            "{:<width$}  {}{}",
            rule.id,
            how,
            describe_regexes(&rule.cond)
        );
    }
    let (mut exact, mut gated, mut run) = (0, 0, 0);
    for rule in rules {
        visit_regexes(&rule.cond, &mut |re| match decision(re) {
            Decision::Scan => exact += 1,
            Decision::Gated(_) => gated += 1,
            Decision::Runs => run += 1,
        });
    }
    let _ = writeln!(
        out,
        "\n{} rules: {} atoms in one automaton, {} rules verified on every message",
        rules.len(),
        plan.atom_count(),
        plan.always_count()
    );
    let _ = writeln!(
        out,
        "message regexes: {exact} answered by the scan, {gated} run only when their literals occur, {run} run whenever their rule is verified"
    );
    out
}

/// How a rule's message regexes are decided: `  [regex: scan]` when the
/// scan's hits answer it, `[regex: gated by N]` when it runs only once N
/// literal sets all occurred, nothing when it simply runs.
fn describe_regexes(cond: &Expr) -> String {
    let mut parts = Vec::new();
    visit_regexes(cond, &mut |re| {
        parts.push(match decision(re) {
            Decision::Scan => "scan".to_string(),
            Decision::Gated(n) => format!("gated by {n}"),
            Decision::Runs => "runs".to_string(),
        })
    });
    if parts.is_empty() {
        String::new()
    } else {
        format!("  [regex: {}]", parts.join(", "))
    }
}

/// How a message regex is decided at run time.
enum Decision {
    /// The scan's hits answer it.
    Scan,
    /// It runs once this many literal sets all had hits.
    Gated(usize),
    /// It runs whenever its rule is verified.
    Runs,
}

fn decision(re: &super::ir::CompiledRegex) -> Decision {
    match (&re.exact_ids, re.gate_ids.len()) {
        (Some(_), _) => Decision::Scan,
        (None, 0) => Decision::Runs,
        (None, n) => Decision::Gated(n),
    }
}

fn visit_regexes(expr: &Expr, f: &mut impl FnMut(&super::ir::CompiledRegex)) {
    match expr {
        Expr::And(parts) | Expr::Or(parts) => parts.iter().for_each(|p| visit_regexes(p, f)),
        Expr::Not(inner) => visit_regexes(inner, f),
        Expr::Text(TextField::Message, TextTest::Matches(re)) => f(re),
        _ => {}
    }
}

fn describe_key(k: &Key) -> String {
    fn list(vs: &[String]) -> String {
        vs.iter()
            .map(|v| format!("{v:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
    match k {
        Key::Atoms(a) => format!(
            "atoms [{}]",
            a.iter()
                .map(|x| format!("{:?}", String::from_utf8_lossy(x)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Key::Provider(v) => format!("provider [{}]", list(v)),
        Key::Code(v) => format!("code [{}]", list(v)),
        Key::Type(v) => format!("type [{}]", list(v)),
        Key::Status(s) => format!(
            "status [{}]",
            s.ranges()
                .iter()
                .map(|(a, b)| if a == b {
                    a.to_string()
                } else {
                    format!("{a}..{b}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}
