//! W001: rules that can never win.
//!
//! Rule B can never win when an earlier rule A matches every error B
//! matches. We prove that conservatively on conjunctions: A shadows B when
//! every predicate of A is implied by some predicate of B. Implications
//! known: equal predicates; `status in T` ⇒ `status in S` when T ⊆ S;
//! text `has "rate limit exceeded"` ⇒ `has "rate limit"` (substring), and
//! the same through `has any`, `has all`, `==`, `starts with`, `ends with`,
//! `in`. Anything else is assumed not to imply (no false warnings).
//!
//! Example: `rule a when status == 429 => rate_limit` followed by
//! `rule b when status == 429 and message has "credit" => billing`: `b`'s
//! `status == 429` implies `a`'s only predicate, so `b` never wins.
//!
//! Finding the candidates stays near-linear in the rules: earlier rules
//! are indexed by their *anchor* (literals one of which any rule they
//! shadow must contain in its own message literals), one automaton over
//! the distinct anchors (the matcher's own, [`Scanner`]); each anchor lists its owners in rule order, and
//! only the first owner of each distinct condition (rules with equal
//! conditions shadow the same rules: 50,000 identical rules are one
//! candidate, not 50,000). Rules without an anchor (status, provider or
//! code rules, few) are listed the same way. Each rule is then checked
//! against at most [`MAX_CANDIDATES`] earlier rules, the nearest ones of
//! each anchor first; past that, a rule that can never win may go
//! unreported (never the reverse: the lint gives no false warnings), which
//! only happens in rulesets with thousands of distinct rules on one
//! literal.

use std::collections::HashMap;

use super::ir::{Expr, Rule, TextField, TextTest};
use super::scan::Scanner;
use crate::diag::{Code, Diagnostic};

/// How many earlier rules one rule is compared with, at most: the bound
/// that keeps the lint linear in the rules whatever their literals.
pub(crate) const MAX_CANDIDATES: usize = 256;

/// Owners of one anchor (or the unanchored rules): rule indices in rule
/// order, each the first rule of its distinct condition in this list.
#[derive(Default)]
struct Owners {
    rules: Vec<usize>,
    /// The conditions already listed, by the first rule that has each.
    seen: std::collections::HashSet<usize>,
}

impl Owners {
    fn add(&mut self, rule: usize, condition: usize) {
        if self.seen.insert(condition) {
            self.rules.push(rule);
        }
    }

    /// The owners before rule `b`, nearest first, at most `budget`.
    fn before(&self, b: usize, budget: usize) -> impl Iterator<Item = usize> + '_ {
        let end = self.rules.partition_point(|&a| a < b);
        self.rules[..end].iter().rev().take(budget).copied()
    }
}

pub(crate) fn lint(rules: &[Rule]) -> Vec<Diagnostic> {
    lint_counted(rules).0
}

/// [`lint`], and how many (rule, earlier rule) candidate pairs it looked
/// at: the work the tests bound.
fn lint_counted(rules: &[Rule]) -> (Vec<Diagnostic>, usize) {
    let mut considered = 0usize;
    let conjs: Vec<Vec<&Expr>> = rules.iter().map(|r| conjunction(&r.cond)).collect();
    // Each rule's condition, named by the first rule with an equal one
    // (hashed once per rule).
    // Hash and equality of an `Expr` read only its texts, statuses and
    // regex sources, never the searchers inside (what clippy sees as
    // mutable), and nothing is mutated while the map lives.
    #[allow(clippy::mutable_key_type)]
    let mut first_with: HashMap<&[&Expr], usize> = HashMap::new();
    let condition: Vec<usize> = conjs
        .iter()
        .enumerate()
        .map(|(i, c)| *first_with.entry(c.as_slice()).or_insert(i))
        .collect();
    drop(first_with);

    let mut anchor_ids: HashMap<&str, usize> = HashMap::new();
    let mut patterns: Vec<&str> = Vec::new();
    let mut owners: Vec<Owners> = Vec::new();
    let mut unanchored = Owners::default();
    for (i, c) in conjs.iter().enumerate() {
        match c.iter().find_map(|e| anchor(e)) {
            Some(lits) if !lits.iter().any(|l| l.is_empty()) => {
                for l in lits {
                    let id = *anchor_ids.entry(l).or_insert_with(|| {
                        patterns.push(l);
                        owners.push(Owners::default());
                        patterns.len() - 1
                    });
                    owners[id].add(i, condition[i]);
                }
            }
            _ => unanchored.add(i, condition[i]),
        }
    }
    // The matcher's own automaton: aho-corasick's builder takes quadratic
    // time on some large sets (100,000 literals `e0` … `e99999`: 17 s).
    let bytes: Vec<Vec<u8>> = patterns.iter().map(|p| p.as_bytes().to_vec()).collect();
    let scanner = (!bytes.is_empty()).then(|| Scanner::build(&bytes));

    let mut out = Vec::new();
    let mut candidates: Vec<usize> = Vec::new();
    let mut hit: Vec<usize> = Vec::new();
    for (b, bc) in conjs.iter().enumerate() {
        candidates.clear();
        candidates.extend(unanchored.before(b, MAX_CANDIDATES));
        hit.clear();
        if let Some(scanner) = &scanner {
            for lit in bc.iter().flat_map(|e| message_literals(e)) {
                scanner.scan(lit.as_bytes(), |p| hit.push(p));
            }
        }
        hit.sort_unstable();
        hit.dedup();
        for &p in &hit {
            let room = MAX_CANDIDATES.saturating_sub(candidates.len());
            if room == 0 {
                break;
            }
            candidates.extend(owners[p].before(b, room));
        }
        considered += candidates.len();
        candidates.sort_unstable();
        candidates.dedup();
        let Some(&a) = candidates.iter().find(|&&a| shadows(&conjs[a], bc)) else {
            continue;
        };
        let (ra, rb) = (&rules[a], &rules[b]);
        let d = if rb.is_default && !ra.is_default {
            Diagnostic::new(Code::W001, ra.span, format!("rule `{}` hides default rule `{}`", ra.id, rb.id))
                .label("matches every error the default rule matches")
                .note(rb.span, "this default rule can never win")
                .help("operator rules come before the defaults; narrow this rule if the default should still apply")
        } else {
            Diagnostic::new(
                Code::W001,
                rb.span,
                format!("rule `{}` can never win", rb.id),
            )
            .label("an earlier rule matches every error this one matches")
            .note(ra.span, "this earlier rule wins first")
            .help(format!(
                "first match wins: move `{}` above `{}`, or narrow `{}`",
                rb.id, ra.id, ra.id
            ))
        };
        out.push(d);
    }
    (out, considered)
}

fn conjunction(e: &Expr) -> Vec<&Expr> {
    match e {
        Expr::And(parts) => parts.iter().flat_map(conjunction).collect(),
        other => vec![other],
    }
}

/// Literals of a predicate of the shadowing rule, one of which must appear
/// inside a message literal of the shadowed rule.
fn anchor(e: &Expr) -> Option<Vec<&str>> {
    match e {
        Expr::Text(TextField::Message, t) => match t {
            TextTest::Has(l) => Some(vec![l.text.as_str()]),
            TextTest::HasAny(ls) => Some(ls.iter().map(|l| l.text.as_str()).collect()),
            TextTest::HasAll(ls) => ls.first().map(|l| vec![l.text.as_str()]),
            TextTest::Eq(s) | TextTest::StartsWith(s) | TextTest::EndsWith(s) => {
                Some(vec![s.as_str()])
            }
            TextTest::In(ss) => Some(ss.iter().map(String::as_str).collect()),
            _ => None,
        },
        _ => None,
    }
}

/// Every message literal a predicate guarantees or names.
fn message_literals(e: &Expr) -> Vec<&str> {
    match e {
        Expr::Text(TextField::Message, t) => match t {
            TextTest::Has(l) => vec![l.text.as_str()],
            TextTest::HasAny(ls) | TextTest::HasAll(ls) => {
                ls.iter().map(|l| l.text.as_str()).collect()
            }
            TextTest::Eq(s) | TextTest::StartsWith(s) | TextTest::EndsWith(s) => vec![s.as_str()],
            TextTest::In(ss) => ss.iter().map(String::as_str).collect(),
            _ => Vec::new(),
        },
        _ => Vec::new(),
    }
}

/// Whether a rule with conjunction `a` matches everything `b` matches.
fn shadows(a: &[&Expr], b: &[&Expr]) -> bool {
    a.iter().all(|pa| b.iter().any(|pb| implies(pb, pa)))
}

fn implies(b: &Expr, a: &Expr) -> bool {
    if b == a {
        return true;
    }
    match (b, a) {
        (Expr::Status(t), Expr::Status(s)) => t.is_subset(s),
        (Expr::Text(fb, tb), Expr::Text(fa, ta)) if fb == fa => text_implies(tb, ta),
        (_, Expr::Or(alts)) => alts.iter().any(|x| implies(b, x)),
        _ => false,
    }
}

/// Whether text test `b` holding guarantees `a` holds (same field).
fn text_implies(b: &TextTest, a: &TextTest) -> bool {
    use TextTest::*;
    // Does every text satisfying `b` contain `x`?
    let contains = |x: &str| -> bool {
        match b {
            Has(y) => y.text.contains(x),
            HasAny(ys) => ys.iter().all(|y| y.text.contains(x)),
            HasAll(ys) => ys.iter().any(|y| y.text.contains(x)),
            Eq(s) | StartsWith(s) | EndsWith(s) => s.contains(x),
            In(ss) => ss.iter().all(|s| s.contains(x)),
            _ => false,
        }
    };
    match a {
        Has(x) => contains(&x.text),
        HasAll(xs) => xs.iter().all(|x| contains(&x.text)),
        HasAny(xs) => match b {
            HasAny(ys) => ys
                .iter()
                .all(|y| xs.iter().any(|x| y.text.contains(&x.text))),
            In(ss) => ss.iter().all(|s| xs.iter().any(|x| s.contains(&x.text))),
            _ => xs.iter().any(|x| contains(&x.text)),
        },
        Eq(s) => match b {
            Eq(t) => t == s,
            In(ts) => ts.iter().all(|t| t == s),
            _ => false,
        },
        In(ss) => match b {
            Eq(t) => ss.contains(t),
            In(ts) => ts.iter().all(|t| ss.contains(t)),
            _ => false,
        },
        StartsWith(p) => match b {
            Eq(s) | StartsWith(s) => s.starts_with(p.as_str()),
            In(ts) => ts.iter().all(|t| t.starts_with(p.as_str())),
            _ => false,
        },
        EndsWith(p) => match b {
            Eq(s) | EndsWith(s) => s.ends_with(p.as_str()),
            In(ts) => ts.iter().all(|t| t.ends_with(p.as_str())),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::SourceMap;

    fn rules(text: &str) -> Vec<Rule> {
        let mut sources = SourceMap::new();
        let f = sources.add(
            "t.rules",
            format!("reason r {{ failover }}\nreason unclassified {{ failover }}\n{text}"),
        );
        let layer = crate::compile::Layer {
            name: "t".into(),
            files: vec![f],
            is_default: false,
        };
        let build = crate::compile::compile_with(
            sources,
            vec![layer],
            Vec::new(),
            crate::compile::Lints::Skip,
        );
        assert!(!build.has_errors(), "{:?}", build.diagnostics);
        build.ruleset.unwrap().rules
    }

    /// Issue 16 item 3: 50,000 identical rules took 49 s in `check` (every
    /// rule collected every earlier one as a candidate). Equal conditions
    /// are now one candidate; every later copy is still reported.
    #[test]
    fn identical_rules_are_one_candidate() {
        let n = 20_000;
        let text: String = (0..n)
            .map(|i| format!("rule s.r{i} when message has \"rate limit\" => r\n"))
            .collect();
        let rules = rules(&text);
        let (diags, considered) = lint_counted(&rules);
        assert_eq!(diags.len(), n - 1);
        assert!(considered <= 2 * n, "{considered} pairs looked at");
    }

    /// Issue 16 item 3: literals that contain each other (`x`, `xx`, …)
    /// made every rule a candidate of every later one (19.5 s for 60,000
    /// rules). Each rule now looks at most at MAX_CANDIDATES earlier ones,
    /// and the shadowing is still found.
    #[test]
    fn candidates_per_rule_are_bounded() {
        let n = 6_000;
        let text: String = (0..n)
            .map(|i| {
                format!(
                    "rule n.r{i} when message has \"{}\" and status == {} => r\n",
                    "x".repeat(i % 40 + 1),
                    400 + i % 100
                )
            })
            .collect();
        let rules = rules(&text);
        let (diags, considered) = lint_counted(&rules);
        assert!(
            considered <= n * MAX_CANDIDATES,
            "{considered} pairs looked at"
        );
        // Rule 4000 (`x` ×1, status 400) is shadowed by rule 0 (same).
        assert!(diags
            .iter()
            .any(|d| d.title.contains("`n.r4000` can never win")));
    }

    /// Issue 16 item 3: a `has any` of 100,000 literals `e0` … `e99999`
    /// took 17 s, all in aho-corasick's builder (quadratic on that set);
    /// the lint now uses the matcher's own automaton.
    #[test]
    fn a_huge_has_any_lints_quickly() {
        let list: Vec<String> = (0..100_000).map(|i| format!("\"e{i}\"")).collect();
        let text = format!(
            "rule a.big when message has any [{}] => r\nrule a.one when message has \"e12345\" => r\n",
            list.join(", ")
        );
        let rules = rules(&text);
        let started = std::time::Instant::now();
        let diags = lint(&rules);
        assert!(diags
            .iter()
            .any(|d| d.title.contains("`a.one` can never win")));
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "{:?}",
            started.elapsed()
        );
    }
}
