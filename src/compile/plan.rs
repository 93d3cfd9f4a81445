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

use aho_corasick::automaton::{Automaton, StateID};
use aho_corasick::{Anchored, MatchKind};

use super::atoms::{route_keys, usable_atom, Key};
use super::ir::{Expr, Rule, TextField, TextTest};

/// Index of a rule in the ruleset (precedence order).
pub type RuleIdx = u32;

#[derive(Debug)]
pub struct Plan {
    /// One automaton over every atom, lower-cased.
    pub(crate) atoms: Option<Scanner>,
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
        let mut atoms = Patterns::default();
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
                TextTest::HasAny(ls) | TextTest::HasAll(ls) => {
                    ls.iter_mut().for_each(|l| atoms.register(l))
                }
                TextTest::Matches(re) => {
                    re.exact_ids = re
                        .facts
                        .exact
                        .as_ref()
                        .map(|e| e.iter().map(|a| atoms.id(a)).collect());
                }
                _ => {}
            });
        }
        // A regex that must run is gated by the literals it needs, but only
        // by atoms the scan looks for anyway: a new atom would cost every
        // message a little to spare a few messages a regex run.
        for rule in rules.iter_mut() {
            visit_message_tests(&mut rule.cond, &mut |test| {
                if let TextTest::Matches(re) = test {
                    re.gate_ids = re
                        .facts
                        .gates
                        .iter()
                        .filter_map(|g| {
                            g.iter().map(|a| atoms.get(a)).collect::<Option<Vec<u32>>>()
                        })
                        .collect();
                }
            });
        }

        for rule in rules.iter_mut() {
            order_by_cost(&mut rule.cond);
        }

        let scanner = (!atoms.list.is_empty()).then(|| Scanner::build(&atoms.list));
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
    ids: HashMap<Vec<u8>, u32>,
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

/// The atom automaton and its scan loop.
///
/// The scan needs every atom that occurs (overlapping matches), and it is
/// the largest cost of a classification: one dependent table load per
/// byte. So a long message is cut into [`CHAINS`] pieces scanned at once,
/// independent chains of loads the CPU overlaps. Each chain must find the
/// atoms that *start* in its piece, so it runs on past its end for as long
/// as its automaton state stands for a partial atom that began inside the
/// piece: a state's *depth* is the length of the atom prefix it stands
/// for, so after byte `p` the pending prefix began at `p − depth`. That is
/// usually a few bytes, where a fixed overlap would be the longest atom.
/// An occurrence may be reported twice; callers keep a set.
#[derive(Debug)]
pub(crate) enum Scanner {
    Dfa {
        dfa: aho_corasick::dfa::DFA,
        /// Depth of each state, indexed by state id / `unit`.
        depth: Vec<u32>,
        unit: usize,
    },
    /// When the DFA would be too large (hundreds of thousands of atoms):
    /// one chain, no depths.
    Nfa {
        nfa: aho_corasick::nfa::contiguous::NFA,
    },
}

/// Below this length a message is scanned as one piece.
const SPLIT_SCAN_MIN: usize = 96;
/// How many pieces a long message is scanned as.
const CHAINS: usize = 3;

impl Scanner {
    fn build(patterns: &[Vec<u8>]) -> Scanner {
        match aho_corasick::dfa::DFA::builder()
            .match_kind(MatchKind::Standard)
            .build(patterns)
        {
            Ok(dfa) => {
                let (depth, unit) = state_depths(&dfa);
                Scanner::Dfa { dfa, depth, unit }
            }
            Err(_) => Scanner::Nfa {
                nfa: aho_corasick::nfa::contiguous::NFA::builder()
                    .match_kind(MatchKind::Standard)
                    .build(patterns)
                    .expect("literal patterns always build"),
            },
        }
    }

    /// Calls `hit` with the pattern id of every occurrence in `haystack`.
    #[inline]
    pub(crate) fn scan(&self, haystack: &[u8], mut hit: impl FnMut(usize)) {
        match self {
            Scanner::Dfa { dfa, depth, unit } => scan_chains(
                dfa,
                |sid| depth[sid.as_usize() / unit] as usize,
                haystack,
                hit,
            ),
            Scanner::Nfa { nfa } => {
                let mut sid = start(nfa);
                for &b in haystack {
                    sid = nfa.next_state(Anchored::No, sid, b);
                    report(nfa, sid, &mut hit);
                }
            }
        }
    }
}

fn start<A: Automaton>(a: &A) -> StateID {
    a.start_state(Anchored::No)
        .expect("the automaton supports unanchored search")
}

/// The depth of every DFA state: its distance from the start state. (A
/// state reached by input `s` stands for the longest suffix of `s` that is
/// an atom prefix `w`, and `w` itself reaches it: the shortest input that
/// does is `w`.) State ids are multiples of one stride; the table is
/// indexed by id / `unit`, `unit` being the gcd of the ids.
fn state_depths(dfa: &aho_corasick::dfa::DFA) -> (Vec<u32>, usize) {
    let start = start(dfa);
    let mut depth: HashMap<StateID, u32> = HashMap::from([(start, 0)]);
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(sid) = queue.pop_front() {
        let d = depth[&sid];
        for b in 0..=255u8 {
            let next = dfa.next_state(Anchored::No, sid, b);
            depth.entry(next).or_insert_with(|| {
                queue.push_back(next);
                d + 1
            });
        }
    }
    let gcd = |mut a: usize, mut b: usize| {
        while b != 0 {
            (a, b) = (b, a % b);
        }
        a
    };
    let unit = depth.keys().fold(0, |g, sid| gcd(g, sid.as_usize())).max(1);
    let max = depth
        .keys()
        .map(|sid| sid.as_usize() / unit)
        .max()
        .unwrap_or(0);
    let mut table = vec![0u32; max + 1];
    for (sid, d) in depth {
        table[sid.as_usize() / unit] = d;
    }
    (table, unit)
}

#[inline(always)]
fn report<A: Automaton>(a: &A, sid: StateID, hit: &mut impl FnMut(usize)) {
    if a.is_match(sid) {
        for i in 0..a.match_len(sid) {
            hit(a.match_pattern(sid, i).as_usize());
        }
    }
}

#[inline(always)]
fn scan_chains<A: Automaton>(
    a: &A,
    depth: impl Fn(StateID) -> usize,
    haystack: &[u8],
    mut hit: impl FnMut(usize),
) {
    let n = haystack.len();
    if n < SPLIT_SCAN_MIN {
        let mut sid = start(a);
        for &b in haystack {
            sid = a.next_state(Anchored::No, sid, b);
            report(a, sid, &mut hit);
        }
        return;
    }
    // Piece j is bounds[j]..bounds[j + 1]: `len` bytes, the last one up
    // to `CHAINS − 1` more.
    let len = n / CHAINS;
    let bounds: [usize; CHAINS + 1] =
        std::array::from_fn(|j| if j == CHAINS { n } else { j * len });
    let mut sid = [start(a); CHAINS];
    for i in 0..len {
        for j in 0..CHAINS {
            sid[j] = a.next_state(Anchored::No, sid[j], haystack[bounds[j] + i]);
            report(a, sid[j], &mut hit);
        }
    }
    // The last piece's extra bytes, then each piece's run past its end.
    let last = CHAINS - 1;
    for &b in &haystack[bounds[last] + len..] {
        sid[last] = a.next_state(Anchored::No, sid[last], b);
        report(a, sid[last], &mut hit);
    }
    for j in 0..last {
        let end = bounds[j + 1];
        let mut p = end;
        let mut s = sid[j];
        // The pending prefix began at p − depth: go on while that is
        // inside piece j.
        while p < n && p - depth(s) < end {
            s = a.next_state(Anchored::No, s, haystack[p]);
            report(a, s, &mut hit);
            p += 1;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The atoms that occur, by brute force.
    fn naive(atoms: &[Vec<u8>], hay: &[u8]) -> Vec<usize> {
        (0..atoms.len())
            .filter(|&i| memchr::memmem::find(hay, &atoms[i]).is_some())
            .collect()
    }

    fn found(scanner: &Scanner, hay: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        scanner.scan(hay, |pid| found.push(pid));
        found.sort_unstable();
        found.dedup();
        found
    }

    /// Every occurrence is found whatever its place relative to the piece
    /// boundaries: every start position, in messages of every length
    /// around the split thresholds.
    #[test]
    fn split_scan_finds_atoms_everywhere() {
        let atoms: Vec<Vec<u8>> = vec![
            b"rate limit".to_vec(),
            b"overloaded".to_vec(),
            b"tpm".to_vec(),
        ];
        let scanner = Scanner::build(&atoms);
        for len in [50usize, 95, 96, 97, 98, 99, 127, 128, 300, 1001] {
            for (atom, a) in atoms.iter().enumerate() {
                for at in 0..=len - a.len() {
                    let mut hay = vec![b'x'; len];
                    hay[at..at + a.len()].copy_from_slice(a);
                    assert_eq!(
                        found(&scanner, &hay),
                        vec![atom],
                        "atom {atom} at {at} in {len} bytes"
                    );
                }
            }
        }
    }

    /// Text that keeps the automaton deep in partial atoms (the case where
    /// a piece's run past its end is longest), with nested and overlapping
    /// atoms, agrees with brute force at every length.
    #[test]
    fn split_scan_agrees_with_brute_force_on_adversarial_text() {
        let atoms: Vec<Vec<u8>> = [
            "rate limit",
            "limit",
            "rate limit exceeded",
            "aaaa",
            "aaab",
            "abab",
            "tpm",
            "rate rate rate rate x",
        ]
        .iter()
        .map(|a| a.as_bytes().to_vec())
        .collect();
        let scanner = Scanner::build(&atoms);
        let mut rng = 0x9e3779b97f4a7c15u64;
        let pieces: [&[u8]; 7] = [
            b"rate ",
            b"limi",
            b"t ",
            b"aaa",
            b"ab",
            b"exceeded",
            b"rate rate ",
        ];
        for len in 90..400usize {
            let mut hay = Vec::with_capacity(len + 16);
            while hay.len() < len {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                hay.extend_from_slice(pieces[(rng % pieces.len() as u64) as usize]);
            }
            hay.truncate(len);
            assert_eq!(
                found(&scanner, &hay),
                naive(&atoms, &hay),
                "{}",
                String::from_utf8_lossy(&hay)
            );
        }
    }
}
