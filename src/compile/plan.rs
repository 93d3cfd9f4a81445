//! The matcher plan: how each rule is reached at run time.
//!
//! Each rule gets a set of *keys* ([`route_keys`]), at least one of which
//! every error it matches must have:
//!
//! * **atoms** go into one aho-corasick automaton over lower-cased text; a
//!   rule is a candidate when one of its atoms occurs in the message;
//! * **provider / code / type / status** keys list the rule in a table;
//!   a rule is a candidate when the error's value is in the table;
//! * rules with no key set are candidates for every message (`check` warns
//!   when one of them holds a regex).
//!
//! Candidates are then verified in rule order; the first whose whole
//! condition holds wins. Because keys are *necessary* conditions, skipping
//! non-candidates never changes the winner.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};

use super::atoms::{route_keys, usable_atom, Key};
use super::ir::{Expr, Rule, TextField, TextTest};

/// Index of a rule in the ruleset (precedence order).
pub type RuleIdx = u32;

#[derive(Debug)]
pub struct Plan {
    /// One automaton over every atom, lower-cased.
    pub(crate) atoms: Option<AhoCorasick>,
    /// Atom pattern id → the rules it makes candidates.
    pub(crate) atom_rules: Vec<Vec<RuleIdx>>,
    /// The atom texts, for `--explain`.
    pub(crate) atom_texts: Vec<String>,
    /// Status − 100 → rules keyed by that status.
    pub(crate) by_status: Vec<Vec<RuleIdx>>,
    pub(crate) by_provider: HashMap<String, Vec<RuleIdx>>,
    pub(crate) by_code: HashMap<String, Vec<RuleIdx>>,
    pub(crate) by_type: HashMap<String, Vec<RuleIdx>>,
    pub(crate) always: Vec<RuleIdx>,
    /// The keys of each rule (`None`: always verified), for `check --plan`.
    pub routes: Vec<Option<Vec<Key>>>,
}

impl Plan {
    /// Builds the plan and gives every usable message literal of every
    /// rule its pattern id in the automaton (see [`super::ir::Literal`]).
    pub fn build(rules: &mut [Rule]) -> Plan {
        let mut pattern_ids: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut atom_rules: Vec<Vec<RuleIdx>> = Vec::new();
        let mut by_status: Vec<Vec<RuleIdx>> = vec![Vec::new(); 500];
        let mut by_provider: HashMap<String, Vec<RuleIdx>> = HashMap::new();
        let mut by_code: HashMap<String, Vec<RuleIdx>> = HashMap::new();
        let mut by_type: HashMap<String, Vec<RuleIdx>> = HashMap::new();
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
                            Key::Atoms(atoms) => {
                                for atom in atoms {
                                    let pid =
                                        *pattern_ids.entry(atom.clone()).or_insert_with(|| {
                                            patterns.push(atom.clone());
                                            atom_rules.push(Vec::new());
                                            patterns.len() - 1
                                        });
                                    push_once(&mut atom_rules[pid], idx);
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
        // the scan's hits. Patterns that route no rule just set their bit.
        for rule in rules.iter_mut() {
            visit_literals(&mut rule.cond, &mut |lit| {
                if let Some(atom) = usable_atom(lit.text.as_bytes()) {
                    let pid = *pattern_ids.entry(atom.clone()).or_insert_with(|| {
                        patterns.push(atom);
                        atom_rules.push(Vec::new());
                        patterns.len() - 1
                    });
                    lit.atom = Some(pid as u32);
                }
            });
        }

        let atoms = (!patterns.is_empty()).then(|| {
            AhoCorasick::builder()
                .match_kind(MatchKind::Standard)
                .kind(Some(AhoCorasickKind::DFA))
                .build(&patterns)
                .or_else(|_| {
                    AhoCorasick::builder()
                        .match_kind(MatchKind::Standard)
                        .build(&patterns)
                })
                .expect("literal patterns always build")
        });
        let atom_texts = patterns
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect();
        Plan {
            atoms,
            atom_rules,
            atom_texts,
            by_status,
            by_provider,
            by_code,
            by_type,
            always,
            routes,
        }
    }

    pub fn atom_count(&self) -> usize {
        self.atom_texts.len()
    }

    /// The atom texts, in pattern order.
    pub fn atom_texts(&self) -> &[String] {
        &self.atom_texts
    }

    pub fn always_count(&self) -> usize {
        self.always.len()
    }
}

fn visit_literals(expr: &mut Expr, f: &mut impl FnMut(&mut super::ir::Literal)) {
    match expr {
        Expr::And(parts) | Expr::Or(parts) => parts.iter_mut().for_each(|p| visit_literals(p, f)),
        Expr::Not(inner) => visit_literals(inner, f),
        Expr::Text(TextField::Message, TextTest::Has(l)) => f(l),
        Expr::Text(TextField::Message, TextTest::HasAny(ls) | TextTest::HasAll(ls)) => {
            ls.iter_mut().for_each(f)
        }
        _ => {}
    }
}

/// Rules are added in index order, so a duplicate can only be the last.
fn push_once(list: &mut Vec<RuleIdx>, idx: RuleIdx) {
    if list.last() != Some(&idx) {
        list.push(idx);
    }
}

/// The plan as an operator reads it: how each rule is reached.
pub fn render(plan: &Plan, rules: &[Rule]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let width = rules.iter().map(|r| r.id.len()).max().unwrap_or(4);
    for (rule, keys) in rules.iter().zip(&plan.routes) {
        let how = match keys {
            None => "always verified".to_string(),
            Some(keys) => keys
                .iter()
                .map(describe_key)
                .collect::<Vec<_>>()
                .join(" | "),
        };
        let _ = writeln!(out, "{:<width$}  {}", rule.id, how);
    }
    let _ = writeln!(
        out,
        "\n{} rules: {} atoms in one automaton, {} rules verified on every message",
        rules.len(),
        plan.atom_count(),
        plan.always_count()
    );
    out
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
