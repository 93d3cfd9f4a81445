//! The matcher plan: how each rule is reached at run time.
//!
//! Every rule lands in exactly one route:
//!
//! * **atoms** — the rule's atoms ([`super::atoms`]) go into one
//!   aho-corasick automaton over lower-cased text; a rule is a candidate
//!   only when one of its atoms occurs in the message;
//! * **gates** — rules without atoms but with a provider, code or status
//!   predicate are listed under those values and become candidates by table
//!   lookup;
//! * **always** — the rest are candidates for every message (`check` warns
//!   when one of them holds a regex).
//!
//! Candidates are then verified in rule order; the first whose whole
//! condition holds wins. Because atoms and gates are *necessary* conditions,
//! skipping non-candidates never changes the winner.

use std::collections::HashMap;

use aho_corasick::{AhoCorasick, AhoCorasickKind, MatchKind};

use super::atoms::{gate, rule_atoms, Gate};
use super::ir::Rule;

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
    /// Status − 100 → rules gated by that status.
    pub(crate) by_status: Vec<Vec<RuleIdx>>,
    pub(crate) by_provider: HashMap<String, Vec<RuleIdx>>,
    pub(crate) by_code: HashMap<String, Vec<RuleIdx>>,
    pub(crate) always: Vec<RuleIdx>,
    /// The route of each rule, for `--explain` and the plan snapshot.
    pub routes: Vec<Route>,
}

/// How one rule is reached.
#[derive(Clone, Debug, PartialEq)]
pub enum Route {
    Atoms(Vec<String>),
    Gate(Gate),
    Always,
}

impl Plan {
    pub fn build(rules: &[Rule]) -> Plan {
        let mut pattern_ids: HashMap<Vec<u8>, usize> = HashMap::new();
        let mut patterns: Vec<Vec<u8>> = Vec::new();
        let mut atom_rules: Vec<Vec<RuleIdx>> = Vec::new();
        let mut by_status: Vec<Vec<RuleIdx>> = vec![Vec::new(); 500];
        let mut by_provider: HashMap<String, Vec<RuleIdx>> = HashMap::new();
        let mut by_code: HashMap<String, Vec<RuleIdx>> = HashMap::new();
        let mut always = Vec::new();
        let mut routes = Vec::with_capacity(rules.len());

        for (i, rule) in rules.iter().enumerate() {
            let idx = i as RuleIdx;
            if let Some(atoms) = rule_atoms(&rule.cond) {
                for atom in &atoms {
                    let pid = *pattern_ids.entry(atom.clone()).or_insert_with(|| {
                        patterns.push(atom.clone());
                        atom_rules.push(Vec::new());
                        patterns.len() - 1
                    });
                    atom_rules[pid].push(idx);
                }
                routes.push(Route::Atoms(
                    atoms
                        .iter()
                        .map(|a| String::from_utf8_lossy(a).into_owned())
                        .collect(),
                ));
                continue;
            }
            match gate(&rule.cond) {
                Some(Gate::Provider(ps)) => {
                    for p in &ps {
                        by_provider.entry(p.clone()).or_default().push(idx);
                    }
                    routes.push(Route::Gate(Gate::Provider(ps)));
                }
                Some(Gate::Code(cs)) => {
                    for c in &cs {
                        by_code.entry(c.clone()).or_default().push(idx);
                    }
                    routes.push(Route::Gate(Gate::Code(cs)));
                }
                Some(Gate::Status(s)) => {
                    for st in s.iter() {
                        by_status[(st - 100) as usize].push(idx);
                    }
                    routes.push(Route::Gate(Gate::Status(s)));
                }
                None => {
                    always.push(idx);
                    routes.push(Route::Always);
                }
            }
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
            always,
            routes,
        }
    }

    pub fn atom_count(&self) -> usize {
        self.atom_texts.len()
    }

    pub fn always_count(&self) -> usize {
        self.always.len()
    }
}
