//! Atoms: the literal text a rule needs before it can match.
//!
//! Classifying a message should not mean trying every rule. For each rule we
//! extract a set of *atoms* — lower-cased literals such that any message the
//! rule matches contains at least one of them (the idea of yara-x's atoms).
//! All atoms of all rules go into one automaton; a message is scanned once,
//! and only the rules whose atoms occur are verified.
//!
//! Worked example. For
//!
//! ```text
//! rule r when status == 402 and message matches /(daily|weekly) (usage )?limit/ => rate_limit
//! ```
//!
//! the `status` predicate has no text, so the `and` takes the atoms of the
//! regex. The regex is a concatenation: the alternation `(daily|weekly)` is
//! exactly {"daily", "weekly"}, the space is exactly {" "}, the optional
//! group is exactly {"", "usage "}, and `limit` is itself. Their cross
//! product is every string the regex can match: {"daily limit", "daily
//! usage limit", "weekly limit", "weekly usage limit"}. A message must
//! contain one of them before the rule is verified; and since the regex has
//! no anchor or word boundary, the scan's hits *are* its answer: on the
//! matcher's path it never runs ([`regex_facts`]; a `c` regex, which is
//! case-sensitive, always runs). When a piece is not exact (`\d+`, `[^\n]*`) it
//! breaks the run, and the rule keeps the best of the sets found — the one
//! whose least selective literal is most selective.
//!
//! A regex that must run still gets *gates*: every set of literals it
//! needs at once. `/\binput\b[^\n]*\bexceeds\b/` needs "input" and
//! "exceeds"; a message with only one of them does not run it.
//!
//! Rules without atoms (a bare `status == 429`) are routed by table lookups
//! instead: by provider, code, type or status ([`route_keys`]). A rule with
//! neither runs on every message; `check` warns when such a rule holds a
//! regex (W002).

use regex_syntax::hir::{Class, Hir, HirKind, Look};

use super::ir::{Expr, LiteralBranches, RegexFacts, Rule, StatusSet, TextField, TextTest};
use crate::diag::{Code, Diagnostic};

/// Atoms shorter than this occur in too many messages to be worth a scan
/// hit; a rule whose best atom set has a shorter literal is routed as if it
/// had none.
pub(crate) const MIN_ATOM_LEN: usize = 3;

/// Exact sets larger than this are not expanded further (a class like
/// `[a-z]` would explode the cross product).
const MAX_EXACT_SET: usize = 64;
/// A character class with more members than this is not a literal.
const MAX_CLASS_CHARS: usize = 4;

/// The atoms of a rule's condition: at least one must occur in the
/// lower-cased message for the condition to hold. `None` when no usable set
/// exists.
pub(crate) fn rule_atoms(expr: &Expr) -> Option<Vec<Vec<u8>>> {
    let atoms = expr_atoms(expr)?;
    (min_len(&atoms) >= MIN_ATOM_LEN).then(|| minimal(atoms))
}

fn expr_atoms(expr: &Expr) -> Option<Vec<Vec<u8>>> {
    match expr {
        Expr::Text(TextField::Message, test) => match test {
            TextTest::Has(l) => usable(vec![l.text.as_bytes().to_vec()]),
            TextTest::HasAny(ls) => usable(ls.iter().map(|l| l.text.as_bytes().to_vec()).collect()),
            TextTest::HasAll(ls) => ls
                .iter()
                .filter_map(|l| usable(vec![l.text.as_bytes().to_vec()]))
                .max_by_key(|s| score(s)),
            TextTest::Eq(s) | TextTest::StartsWith(s) | TextTest::EndsWith(s) => {
                usable(vec![s.as_bytes().to_vec()])
            }
            TextTest::In(list) => usable(list.iter().map(|s| s.as_bytes().to_vec()).collect()),
            TextTest::Matches(re) => re.facts.atoms.clone(),
            TextTest::IsEmpty => None,
        },
        Expr::And(parts) => parts.iter().filter_map(expr_atoms).max_by_key(|s| score(s)),
        Expr::Or(parts) => {
            let mut all = Vec::new();
            for p in parts {
                all.extend(expr_atoms(p)?);
            }
            dedup(&mut all);
            Some(all)
        }
        _ => None,
    }
}

/// Words so frequent in provider error texts that an atom made of one of
/// them alone makes its rule a candidate for most messages. They are still
/// correct atoms (any required literal is); they are just chosen last.
const COMMON_WORDS: &[&str] = &[
    "a",
    "an",
    "and",
    "as",
    "at",
    "be",
    "by",
    "for",
    "if",
    "in",
    "is",
    "it",
    "no",
    "of",
    "on",
    "or",
    "org",
    "to",
    "account",
    "again",
    "api",
    "code",
    "credits",
    "deleted",
    "disabled",
    "error",
    "errors",
    "exceed",
    "exceeded",
    "expired",
    "failed",
    "found",
    "http",
    "https",
    "internal",
    "invalid",
    "key",
    "limit",
    "message",
    "model",
    "not found",
    "please",
    "provider",
    "reached",
    "request",
    "requests",
    "reset",
    "response",
    "revoked",
    "server",
    "service",
    "status",
    "stream",
    "the",
    "time",
    "token",
    "top",
    "try",
    "upstream",
    "usage",
    "your",
];

/// The longest of [`COMMON_WORDS`]: a longer text is none of them.
const LONGEST_COMMON_WORD: usize = {
    let (mut i, mut longest) = (0, 0);
    while i < COMMON_WORDS.len() {
        if COMMON_WORDS[i].len() > longest {
            longest = COMMON_WORDS[i].len();
        }
        i += 1;
    }
    longest
};

/// A literal without the spaces and punctuation around it (empty when it
/// is not UTF-8).
fn core_text(lit: &[u8]) -> &[u8] {
    // Ranking atom sets asks this of every atom of every set, and nearly
    // all are ASCII: those are trimmed byte by byte, which is the same as
    // char by char (an ASCII char is alphanumeric exactly when its byte
    // is), with no UTF-8 check.
    if lit.is_ascii() {
        let start = lit
            .iter()
            .position(u8::is_ascii_alphanumeric)
            .unwrap_or(lit.len());
        let end = lit
            .iter()
            .rposition(u8::is_ascii_alphanumeric)
            .map_or(start, |i| i + 1);
        return &lit[start..end];
    }
    std::str::from_utf8(lit)
        .unwrap_or("")
        .trim_matches(|c: char| !c.is_alphanumeric())
        .as_bytes()
}

/// Whether a literal is one common word (`model`, `limit`, `key`): such a
/// text occurs in most error messages, so as an atom that routes no rule
/// it would cost nearly every scan a report, while the test that needs it
/// runs only for its rule's candidates.
pub(crate) fn is_common(lit: &[u8]) -> bool {
    is_common_core(core_text(lit))
}

/// [`is_common`] of a literal's [`core_text`].
fn is_common_core(core: &[u8]) -> bool {
    core.len() <= LONGEST_COMMON_WORD && COMMON_WORDS.iter().any(|w| w.as_bytes() == core)
}

/// How selective one atom is: the length of its text without surrounding
/// spaces and punctuation, or 1 for a common word.
fn selectivity(atom: &[u8]) -> usize {
    let core = core_text(atom);
    if is_common_core(core) {
        1
    } else {
        core.len().max(1)
    }
}

/// Which atom set to prefer: the one whose least selective atom is most
/// selective, then the one whose shortest atom is longest, then fewer
/// alternatives.
fn score(set: &[Vec<u8>]) -> (usize, usize, std::cmp::Reverse<usize>) {
    let sel = set.iter().map(|a| selectivity(a)).min().unwrap_or(0);
    (sel, min_len(set), std::cmp::Reverse(set.len()))
}

fn min_len(set: &[Vec<u8>]) -> usize {
    set.iter().map(Vec::len).min().unwrap_or(0)
}

fn dedup(set: &mut Vec<Vec<u8>>) {
    set.sort();
    set.dedup();
}

/// Keeps a set only if every literal can be matched against ASCII
/// lower-cased text: non-ASCII letters that have case variants would need
/// Unicode folding, which the scan does not do. (The other way round, `ſ`
/// and the Kelvin sign fold to `s` and `k` in a regex: messages holding
/// them are scanned with `s` and `k` in their place, see
/// [`crate::classify`].)
fn usable(mut set: Vec<Vec<u8>>) -> Option<Vec<Vec<u8>>> {
    for lit in &mut set {
        lit.make_ascii_lowercase();
        // ASCII needs no check (and is most of them).
        if lit.is_ascii() && !lit.is_empty() {
            continue;
        }
        let text = std::str::from_utf8(lit).ok()?;
        let stable = text.chars().all(|c| {
            c.is_ascii()
                || (c.to_lowercase().eq(std::iter::once(c))
                    && c.to_uppercase().eq(std::iter::once(c)))
        });
        if !stable || lit.is_empty() {
            return None;
        }
    }
    dedup(&mut set);
    Some(set)
}

/// A single literal as an atom, if it can be one (long enough, and
/// matchable on ASCII-lower-cased text).
pub(crate) fn usable_atom(lit: &[u8]) -> Option<Vec<u8>> {
    if lit.len() < MIN_ATOM_LEN {
        return None;
    }
    usable(vec![lit.to_vec()]).and_then(|mut v| v.pop())
}

/// Atoms of a regex as written (the flags that change parsing applied).
#[cfg(test)]
fn regex_atoms(pattern: &str, flags: &str) -> Option<Vec<Vec<u8>>> {
    best_atoms(&analyze(&parse_as_written(pattern, flags)?))
}

fn best_atoms(info: &Info) -> Option<Vec<Vec<u8>>> {
    let best = [&info.required, &info.exact]
        .into_iter()
        .flatten()
        .max_by_key(|s| score(s))?;
    usable(best.clone())
}

fn parse_as_written(pattern: &str, flags: &str) -> Option<Hir> {
    regex_syntax::ParserBuilder::new()
        .ignore_whitespace(flags.contains('x'))
        .multi_line(flags.contains('m'))
        .dot_matches_new_line(flags.contains('s'))
        .build()
        .parse(pattern)
        .ok()
}

/// At most this many gates are kept per regex (the most selective).
const MAX_GATES: usize = 6;

/// The gates and exact literal set of a message regex (lower-cased
/// atoms). `case_insensitive`: the regex runs ASCII-folded on the
/// lower-cased message; only then can hits answer it outright.
pub(crate) fn regex_facts(pattern: &str, flags: &str, case_insensitive: bool) -> RegexFacts {
    let Some(hir) = parse_as_written(pattern, flags) else {
        return RegexFacts::default();
    };
    let info = analyze(&hir);
    let gaps = count_gaps(&hir);
    let atoms = best_atoms(&info);
    let exact = match (&info.exact, info.look, case_insensitive) {
        (Some(e), false, true) => usable(e.clone())
            .filter(|e| min_len(e) >= MIN_ATOM_LEN)
            .map(minimal),
        _ => None,
    };
    // The same set often comes more than once (a piece's sets are also
    // those of what holds it). A later copy can never be kept below, so it
    // is dropped here, before the costly `minimal`.
    let mut distinct: Vec<Vec<Vec<u8>>> = Vec::new();
    for set in info
        .all
        .into_iter()
        .chain(info.required)
        .chain(info.exact)
        .filter_map(usable)
        .filter(|g| min_len(g) >= MIN_ATOM_LEN)
    {
        if !distinct.contains(&set) {
            distinct.push(set);
        }
    }
    let mut gates: Vec<Vec<Vec<u8>>> = distinct.into_iter().map(minimal).collect();
    // Cached: a score looks at every atom of the set (the sort is stable,
    // as `sort_by_key`'s).
    gates.sort_by_cached_key(|g| std::cmp::Reverse(score(g)));
    gates.dedup();
    // A gate that contains another gate is implied by it.
    let mut kept: Vec<Vec<Vec<u8>>> = Vec::new();
    for g in gates {
        if !kept.iter().any(|k| k.iter().all(|a| g.contains(a))) {
            kept.push(g);
        }
    }
    kept.truncate(MAX_GATES);
    RegexFacts {
        gates: kept,
        exact,
        atoms,
        gaps,
        branches: case_insensitive.then(|| literal_branches(&hir)).flatten(),
    }
}

/// A regex with more literal-branch strings than this runs as before.
const MAX_BRANCH_LITERALS: usize = 256;

/// The regex as literal branches and the rest ([`LiteralBranches`]):
/// alternations are split, a `\b` at the start or end of a concatenation
/// goes to every string of what it encloses (`\b(a|b) c\b` is `\ba c\b`
/// or `\bb c\b`), and a piece whose language is a small set of strings
/// with no other look-around gives those strings. `None` when no branch
/// is a literal one.
///
/// Worked example: `\bunknown model\b|is not a valid model( id)?\b|\b404\b[^\n]*\bnot found\b`
/// gives `unknown model` with boundaries on both sides, `is not a valid
/// model` and `is not a valid model id` with one after, and the rest
/// `\b404\b[^\n]*…`, which needs `404` (or, by its best set, `not
/// found`).
fn literal_branches(hir: &Hir) -> Option<LiteralBranches> {
    let mut out = LiteralBranches {
        literals: Vec::new(),
        rest: Some(Vec::new()),
    };
    split_branches(hir, false, false, &mut out);
    out.literals.sort();
    out.literals.dedup();
    if out.literals.is_empty() || out.literals.len() > MAX_BRANCH_LITERALS {
        return None;
    }
    Some(out)
}

fn is_word_boundary(h: &Hir) -> bool {
    matches!(h.kind(), HirKind::Look(Look::WordAscii | Look::WordUnicode))
}

fn split_branches(h: &Hir, before: bool, after: bool, out: &mut LiteralBranches) {
    match h.kind() {
        HirKind::Alternation(subs) => {
            subs.iter()
                .for_each(|sub| split_branches(sub, before, after, out));
            return;
        }
        HirKind::Capture(c) => return split_branches(&c.sub, before, after, out),
        HirKind::Concat(subs) => {
            let (mut lo, mut hi) = (0, subs.len());
            while lo < hi && is_word_boundary(&subs[lo]) {
                lo += 1;
            }
            while hi > lo && is_word_boundary(&subs[hi - 1]) {
                hi -= 1;
            }
            if lo > 0 || hi < subs.len() {
                let inner = Hir::concat(subs[lo..hi].to_vec());
                return split_branches(&inner, before || lo > 0, after || hi < subs.len(), out);
            }
        }
        _ => {}
    }
    let info = analyze(h);
    let literal = match (&info.exact, info.look) {
        (Some(e), false) if !e.iter().any(Vec::is_empty) => usable(e.clone()),
        _ => None,
    };
    match literal {
        Some(strings) => out
            .literals
            .extend(strings.into_iter().map(|t| (t, before, after))),
        None => {
            // Every set the branch needs at once (its gates), the most
            // selective first.
            let mut needs: Vec<Vec<Vec<u8>>> = info
                .all
                .into_iter()
                .chain(best(info.required, info.exact))
                .filter_map(usable)
                .filter(|set| min_len(set) >= MIN_ATOM_LEN)
                .map(minimal)
                .collect();
            needs.sort_by_cached_key(|g| std::cmp::Reverse(score(g)));
            needs.dedup();
            needs.truncate(MAX_GATES);
            match (needs.is_empty(), &mut out.rest) {
                (false, Some(rest)) => rest.push(needs),
                _ => out.rest = None,
            }
        }
    }
}

/// A literal set with every member dropped that contains another member
/// (`input length` when `input` is there): "one of them occurs" is the
/// same, with fewer atoms to scan for. Sets over [`MAX_EXACT_SET`]
/// members (long `has any` lists) are kept as they are: the check is
/// quadratic.
fn minimal(set: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    if set.len() > MAX_EXACT_SET {
        return set;
    }
    let keep: Vec<bool> = set
        .iter()
        .enumerate()
        .map(|(i, a)| {
            !set.iter().enumerate().any(|(j, b)| {
                j != i && b.len() <= a.len() && occurs_in(a, b) && (b.len() < a.len() || j < i)
            })
        })
        .collect();
    set.into_iter()
        .zip(keep)
        .filter_map(|(a, k)| k.then_some(a))
        .collect()
}

/// Whether `needle` occurs in `hay`. Atoms are short, and [`minimal`]
/// tries every pair of a set: a plain loop costs less than setting up a
/// `memmem` searcher for each pair (which was most of its time).
fn occurs_in(hay: &[u8], needle: &[u8]) -> bool {
    let Some((&first, rest)) = needle.split_first() else {
        return true;
    };
    let Some(last_start) = hay.len().checked_sub(needle.len()) else {
        return false;
    };
    hay[..=last_start]
        .iter()
        .enumerate()
        .any(|(i, &b)| b == first && hay[i + 1..i + needle.len()] == *rest)
}

fn count_gaps(hir: &Hir) -> u32 {
    match hir.kind() {
        HirKind::Repetition(r) => u32::from(r.max.is_none()) + count_gaps(&r.sub),
        HirKind::Capture(c) => count_gaps(&c.sub),
        HirKind::Concat(subs) | HirKind::Alternation(subs) => subs.iter().map(count_gaps).sum(),
        _ => 0,
    }
}

/// What is known of the text a regex fragment matches.
#[derive(Clone, Default)]
struct Info {
    /// Every string the fragment can match, when that set is small.
    exact: Option<Vec<Vec<u8>>>,
    /// Strings one of which occurs in every match (inexact).
    required: Option<Vec<Vec<u8>>>,
    /// More such sets, all necessary at once (a conjunction).
    all: Vec<Vec<Vec<u8>>>,
    /// The fragment holds an anchor or a word boundary: its exact strings
    /// are then only a superset of what it matches.
    look: bool,
}

/// Alternations whose branches' necessary sets multiply beyond this keep
/// only the union of each branch's best set.
const MAX_GATE_PRODUCT: usize = 16;

fn analyze(hir: &Hir) -> Info {
    match hir.kind() {
        HirKind::Empty => Info {
            exact: Some(vec![Vec::new()]),
            ..Info::default()
        },
        HirKind::Look(_) => Info {
            exact: Some(vec![Vec::new()]),
            look: true,
            ..Info::default()
        },
        HirKind::Literal(lit) => {
            let mut bytes = lit.0.to_vec();
            bytes.make_ascii_lowercase();
            Info {
                exact: Some(vec![bytes]),
                ..Info::default()
            }
        }
        HirKind::Class(class) => Info {
            exact: class_members(class),
            ..Info::default()
        },
        HirKind::Capture(c) => analyze(&c.sub),
        HirKind::Repetition(rep) => {
            let inner = analyze(&rep.sub);
            if rep.min == 0 {
                // `x?` is exactly "" or x; anything longer is unknown.
                let exact = match (rep.max, inner.exact) {
                    (Some(1), Some(mut e)) if e.len() < MAX_EXACT_SET => {
                        e.push(Vec::new());
                        dedup(&mut e);
                        Some(e)
                    }
                    _ => None,
                };
                return Info {
                    exact,
                    look: inner.look,
                    ..Info::default()
                };
            }
            let exact = if rep.min == 1 && rep.max == Some(1) {
                inner.exact.clone()
            } else {
                None
            };
            Info {
                exact,
                required: best(inner.required, inner.exact),
                all: inner.all,
                look: inner.look,
            }
        }
        HirKind::Alternation(subs) => {
            let infos: Vec<Info> = subs.iter().map(analyze).collect();
            let look = infos.iter().any(|i| i.look);
            let exact = union(infos.iter().map(|i| i.exact.clone()));
            // Each branch's necessary sets; the alternation needs, for every
            // way of picking one set per branch, the union of the picks.
            let necessary: Vec<Vec<Vec<Vec<u8>>>> = infos
                .iter()
                .map(|i| {
                    let mut n = i.all.clone();
                    n.extend(best(i.required.clone(), i.exact.clone()));
                    n.retain(|s| !s.iter().any(Vec::is_empty));
                    n.sort();
                    n.dedup();
                    n
                })
                .collect();
            let required = union_up_to(
                infos.into_iter().map(|i| best(i.required, i.exact)),
                MAX_REQUIRED_SET,
            );
            let product: usize = necessary.iter().map(Vec::len).product();
            let all = if product > 1 && product <= MAX_GATE_PRODUCT {
                let mut picks: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
                for sets in &necessary {
                    picks = picks
                        .iter()
                        .flat_map(|p| {
                            sets.iter().map(move |s| {
                                let mut u = p.clone();
                                u.extend(s.iter().cloned());
                                dedup(&mut u);
                                u
                            })
                        })
                        .collect();
                }
                picks
            } else {
                Vec::new()
            };
            Info {
                exact,
                required,
                all,
                look,
            }
        }
        HirKind::Concat(subs) => {
            let mut run: Option<Vec<Vec<u8>>> = Some(vec![Vec::new()]);
            let mut candidates: Vec<Vec<Vec<u8>>> = Vec::new();
            let mut whole_exact = true;
            let mut look = false;
            for sub in subs {
                let info = analyze(sub);
                look |= info.look;
                candidates.extend(info.all.iter().cloned());
                let product = match (&run, &info.exact) {
                    (Some(r), Some(e)) if r.len() * e.len() <= MAX_EXACT_SET => Some(cross(r, e)),
                    _ => None,
                };
                match product {
                    Some(p) => run = Some(p),
                    None => {
                        whole_exact = false;
                        if let Some(r) = run.take() {
                            candidates.push(r);
                        }
                        if let Some(r) = best(info.required, info.exact.clone()) {
                            candidates.push(r);
                        }
                        // A fresh run may start with this piece when it is exact.
                        run = info
                            .exact
                            .filter(|e| e.len() <= MAX_EXACT_SET)
                            .or(Some(vec![Vec::new()]));
                    }
                }
            }
            if let Some(r) = &run {
                candidates.push(r.clone());
            }
            // Sets holding "" say nothing.
            candidates.retain(|s| !s.iter().any(Vec::is_empty));
            let required = candidates.iter().max_by_key(|s| score(s)).cloned();
            Info {
                exact: if whole_exact { run } else { None },
                required,
                all: candidates,
                look,
            }
        }
    }
}

fn best(a: Option<Vec<Vec<u8>>>, b: Option<Vec<Vec<u8>>>) -> Option<Vec<Vec<u8>>> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if score(&a) >= score(&b) { a } else { b }),
        (a, b) => a.or(b),
    }
}

fn union(sets: impl Iterator<Item = Option<Vec<Vec<u8>>>>) -> Option<Vec<Vec<u8>>> {
    union_up_to(sets, MAX_EXACT_SET)
}

/// An alternation's required literals are the union of its branches'
/// (one of them occurs in every match). Unlike exact sets they never
/// multiply, so a long alternation of wordings (a family of provider
/// texts) keeps its atoms up to this many, each one scan entry.
const MAX_REQUIRED_SET: usize = 512;

fn union_up_to(
    sets: impl Iterator<Item = Option<Vec<Vec<u8>>>>,
    limit: usize,
) -> Option<Vec<Vec<u8>>> {
    let mut all = Vec::new();
    for s in sets {
        all.extend(s?);
        if all.len() > limit {
            return None;
        }
    }
    dedup(&mut all);
    Some(all)
}

fn cross(a: &[Vec<u8>], b: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut out = Vec::with_capacity(a.len() * b.len());
    for x in a {
        for y in b {
            let mut s = x.clone();
            s.extend_from_slice(y);
            out.push(s);
        }
    }
    dedup(&mut out);
    out
}

/// The members of a small class, ASCII lower-cased (`[Aa]` is one member).
fn class_members(class: &Class) -> Option<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    match class {
        Class::Unicode(c) => {
            for r in c.ranges() {
                let (lo, hi) = (r.start() as u32, r.end() as u32);
                if (hi - lo) as usize >= MAX_CLASS_CHARS * 2 {
                    return None;
                }
                for cp in lo..=hi {
                    let ch = char::from_u32(cp)?.to_ascii_lowercase();
                    let mut buf = [0u8; 4];
                    out.push(ch.encode_utf8(&mut buf).as_bytes().to_vec());
                }
            }
        }
        Class::Bytes(c) => {
            for r in c.ranges() {
                if (r.end() - r.start()) as usize >= MAX_CLASS_CHARS * 2 {
                    return None;
                }
                for b in r.start()..=r.end() {
                    out.push(vec![b.to_ascii_lowercase()]);
                }
            }
        }
    }
    dedup(&mut out);
    (out.len() <= MAX_CLASS_CHARS).then_some(out)
}

/// One way a rule becomes a candidate: an atom scan hit or a table lookup.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Key {
    /// One of these atoms occurs in the lower-cased message.
    Atoms(Vec<Vec<u8>>),
    /// The error's provider (lower-cased) is one of these.
    Provider(Vec<String>),
    /// The error's code (lower-cased) is one of these.
    Code(Vec<String>),
    /// The error's type (lower-cased) is one of these.
    Type(Vec<String>),
    /// The error's status is in this set.
    Status(StatusSet),
}

impl Key {
    /// How selective a key is, higher is better: specific table lookups,
    /// then long atoms, short atoms, and statuses (shared by many errors).
    fn rank(&self) -> u8 {
        match self {
            Key::Provider(_) => 5,
            Key::Type(_) | Key::Code(_) => 4,
            Key::Atoms(a) if score(a).0 >= 6 => 3,
            Key::Atoms(a) if score(a).0 == 1 => 1,
            Key::Atoms(_) => 2,
            Key::Status(_) => 1,
        }
    }
}

/// The keys of a condition: every error it matches has at least one of
/// them (a necessary condition), so a rule need only be verified when one
/// of its keys fires. `None` when no such set exists (the rule must be
/// verified for every error).
///
/// `and` takes the most selective key set of its parts; `or` needs a key
/// set for every branch and takes their union (a rule may be reachable by
/// an atom *or* a type, e.g. `type == "throttlingexception" or message has
/// "throttlingexception"`).
pub(crate) fn route_keys(expr: &Expr) -> Option<Vec<Key>> {
    match expr {
        Expr::Text(TextField::Message, _) => rule_atoms(expr).map(|a| vec![Key::Atoms(a)]),
        Expr::Status(s) => Some(vec![Key::Status(s.clone())]),
        Expr::Text(field @ (TextField::Provider | TextField::Code | TextField::Type), test) => {
            let values = match test {
                TextTest::Eq(v) => vec![v.clone()],
                TextTest::In(vs) => vs.clone(),
                _ => return None,
            };
            Some(vec![match field {
                TextField::Provider => Key::Provider(values),
                TextField::Code => Key::Code(values),
                _ => Key::Type(values),
            }])
        }
        Expr::And(parts) => {
            let mut best: Option<Vec<Key>> = None;
            let quality = |ks: &Vec<Key>| ks.iter().map(Key::rank).min().unwrap_or(0);
            // Atoms of the whole conjunction may combine several message
            // predicates better than any single part does.
            let candidates = parts
                .iter()
                .filter_map(route_keys)
                .chain(rule_atoms(expr).map(|a| vec![Key::Atoms(a)]));
            for ks in candidates {
                if best.as_ref().is_none_or(|b| quality(&ks) > quality(b)) {
                    best = Some(ks);
                }
            }
            best
        }
        Expr::Or(parts) => {
            let mut all = Vec::new();
            for p in parts {
                all.extend(route_keys(p)?);
            }
            Some(all)
        }
        _ => None,
    }
}

fn has_regex(expr: &Expr) -> bool {
    match expr {
        Expr::Text(_, TextTest::Matches(_)) => true,
        Expr::And(p) | Expr::Or(p) => p.iter().any(has_regex),
        Expr::Not(e) => has_regex(e),
        _ => false,
    }
}

/// W002: a rule whose regex would run on every message.
pub(crate) fn lint_slow_regexes(rules: &[Rule]) -> Vec<Diagnostic> {
    rules
        .iter()
        .filter(|r| has_regex(&r.cond) && route_keys(&r.cond).is_none())
        .map(|r| {
            Diagnostic::new(
                Code::W002,
                r.span,
                format!("rule `{}` has no literal text of {MIN_ATOM_LEN}+ bytes: its regex runs on every message", r.id),
            )
            .label("no atom and no provider, code, type or status to route by")
            .help("add a literal the message must contain (`message has \"…\" and …`), or write the regex around a fixed word")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn atoms_of(pattern: &str) -> Option<Vec<String>> {
        regex_atoms(pattern, "").map(|s| {
            s.into_iter()
                .map(|b| String::from_utf8(b).unwrap())
                .collect()
        })
    }

    #[test]
    fn worked_example_from_the_module_essay() {
        assert_eq!(
            atoms_of("(daily|weekly) (usage )?limit").unwrap(),
            vec![
                "daily limit",
                "daily usage limit",
                "weekly limit",
                "weekly usage limit"
            ]
        );
        let facts = regex_facts("(daily|weekly) (usage )?limit", "", true);
        assert_eq!(facts.exact.map(|e| e.len()), Some(4));
        // A non-exact piece breaks the run: the best set before it wins.
        assert_eq!(
            atoms_of(r"(daily|weekly) \d+ limit").unwrap(),
            vec!["daily ", "weekly "]
        );
    }

    fn strings(sets: &[Vec<Vec<u8>>]) -> Vec<Vec<String>> {
        sets.iter()
            .map(|s| {
                s.iter()
                    .map(|b| String::from_utf8(b.clone()).unwrap())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn gates_are_every_set_a_match_needs() {
        let f = regex_facts(r"\binput\b[^\n]*\bexceeds\b", "", true);
        assert_eq!(strings(&f.gates), vec![vec!["exceeds"], vec!["input"]]);
        // Word boundaries make the literal set only a superset: it must run.
        assert_eq!(f.exact, None);
        // Alternations multiply: each branch gives one set to every gate.
        let f = regex_facts(r"alpha[^\n]*bravo|charlie[^\n]*delta", "", true);
        assert_eq!(
            strings(&f.gates),
            vec![
                vec!["alpha", "charlie"],
                vec!["alpha", "delta"],
                vec!["bravo", "charlie"],
                vec!["bravo", "delta"]
            ]
        );
        // Common words are weak gates but cost nothing when the scan looks
        // for them anyway: they are kept, after the selective ones.
        let f = regex_facts(r"error[^\n]*quota", "", true);
        assert_eq!(strings(&f.gates), vec![vec!["quota"], vec!["error"]]);
        // Nothing literal: no gate.
        assert_eq!(regex_facts(r"\d{3}", "", true), RegexFacts::default());
    }

    #[test]
    fn literal_branches_split_alternations_and_keep_their_boundaries() {
        let b = regex_facts(
            r"\bunknown model\b|is not a valid model( id)?\b|\b404\b[^\n]*\bnot found\b",
            "",
            true,
        )
        .branches
        .expect("literal branches");
        let lits: Vec<(String, bool, bool)> = b
            .literals
            .iter()
            .map(|(t, x, y)| (String::from_utf8(t.clone()).unwrap(), *x, *y))
            .collect();
        assert_eq!(
            lits,
            vec![
                ("is not a valid model".to_string(), false, true),
                ("is not a valid model id".to_string(), false, true),
                ("unknown model".to_string(), true, true),
            ]
        );
        // The third branch needs `404` and `not found` (a common phrase,
        // so tested second).
        assert_eq!(
            b.rest,
            Some(vec![vec![
                vec![b"404".to_vec()],
                vec![b"not found".to_vec()]
            ]])
        );
        // A boundary lifted out of the branches goes back to each of them.
        let b = regex_facts(r"\b(invalid|bad) key\b", "", true)
            .branches
            .unwrap();
        assert_eq!(b.literals.len(), 2);
        assert!(b.literals.iter().all(|(_, x, y)| *x && *y));
        assert_eq!(b.rest, Some(Vec::new()));
        // The rest needs what its branches need; with no literal at all,
        // it must run.
        let b = regex_facts(r"\btpm\b|\d{3} tokens", "", true)
            .branches
            .unwrap();
        assert_eq!(b.rest, Some(vec![vec![vec![b" tokens".to_vec()]]]));
        let b = regex_facts(r"\btpm\b|\d{3}", "", true).branches.unwrap();
        assert_eq!(b.rest, None);
        // Case-sensitive, anchored, or no literal branch: nothing.
        assert_eq!(regex_facts(r"\bbusy\b", "c", false).branches, None);
        assert_eq!(regex_facts(r"^busy$", "", true).branches, None);
        assert_eq!(regex_facts(r"a\bb", "", true).branches, None);
    }

    #[test]
    fn exact_needs_plain_literals_and_case_insensitivity() {
        let f = regex_facts("overload|at capacity|High Demand", "", true);
        assert_eq!(
            strings(&f.exact.into_iter().collect::<Vec<_>>()),
            vec![vec!["at capacity", "high demand", "overload"]]
        );
        // Case-sensitive (`c`): the lower-cased scan cannot answer it.
        assert_eq!(regex_facts("overload|busy", "c", false).exact, None);
        // Anchors and boundaries: not exact.
        assert_eq!(regex_facts("^overload", "", true).exact, None);
        assert_eq!(regex_facts(r"\bbusy\b", "", true).exact, None);
        // A literal under 3 bytes cannot be an atom.
        assert_eq!(regex_facts("overload|ab", "", true).exact, None);
    }

    #[test]
    fn small_classes_expand_and_case_folds() {
        assert_eq!(
            atoms_of("Rate[_ ]Limit").unwrap(),
            vec!["rate limit", "rate_limit"]
        );
    }

    #[test]
    fn alternation_needs_atoms_in_every_branch() {
        assert_eq!(
            atoms_of(r"throttl(ed|ing)|too many requests").unwrap(),
            vec!["throttled", "throttling", "too many requests"]
        );
        assert_eq!(atoms_of(r"\d+|foo"), None);
    }

    #[test]
    fn word_boundaries_and_anchors_are_transparent() {
        assert_eq!(atoms_of(r"^\s*\btpm\b").unwrap(), vec!["tpm"]);
    }

    #[test]
    fn no_literal_means_no_atoms() {
        assert_eq!(atoms_of(r"^\d{3}\s*$"), None);
        assert_eq!(atoms_of(r".*"), None);
    }

    /// The shortcuts for ASCII and short texts answer as the general
    /// code does.
    #[test]
    fn core_text_and_occurs_in_agree_with_the_general_code() {
        let samples: &[&[u8]] = &[
            b"",
            b" ",
            b"--",
            b"limit",
            b" limit.",
            b"(not found)",
            b"rate_limit",
            b"a",
            b"ab",
            b"aab",
            b"429 ",
            "  余额不足 ".as_bytes(),
            "é-limit-é".as_bytes(),
            b"\xff limit",
            &[0xff, b' ', b'k', b'e', b'y'],
        ];
        for &a in samples {
            let general = std::str::from_utf8(a)
                .unwrap_or("")
                .trim_matches(|c: char| !c.is_alphanumeric());
            assert_eq!(core_text(a), general.as_bytes(), "{a:?}");
            for &b in samples {
                assert_eq!(
                    occurs_in(a, b),
                    memchr::memmem::find(a, b).is_some(),
                    "{a:?} {b:?}"
                );
            }
        }
        assert!(is_common(b" limit."));
        assert!(!is_common(b"limits"));
    }

    #[test]
    fn cjk_literals_are_atoms() {
        assert_eq!(atoms_of("余额不足").unwrap(), vec!["余额不足"]);
    }
}
