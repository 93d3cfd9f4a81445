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
//! To stay fast with thousands of rules, candidate shadowers are found with
//! one automaton over the message literals of earlier rules; rules without
//! a message literal (few: status/provider/code rules) are checked against
//! every later rule.

use aho_corasick::AhoCorasick;

use super::ir::{Expr, Rule, TextField, TextTest};
use crate::diag::{Code, Diagnostic};

pub fn lint(rules: &[Rule]) -> Vec<Diagnostic> {
    let conjs: Vec<Vec<&Expr>> = rules.iter().map(|r| conjunction(&r.cond)).collect();

    // Anchor of each rule: the literals one of which any later rule it
    // shadows must contain in its own message literals.
    let mut patterns: Vec<&str> = Vec::new();
    let mut owners: Vec<usize> = Vec::new();
    let mut unanchored: Vec<usize> = Vec::new();
    for (i, c) in conjs.iter().enumerate() {
        match c.iter().find_map(|e| anchor(e)) {
            Some(lits) => {
                for l in lits {
                    patterns.push(l);
                    owners.push(i);
                }
            }
            None => unanchored.push(i),
        }
    }
    let ac = AhoCorasick::new(&patterns).expect("literal patterns always build");

    let mut out = Vec::new();
    let mut candidates: Vec<usize> = Vec::new();
    for (b, bc) in conjs.iter().enumerate() {
        candidates.clear();
        candidates.extend(unanchored.iter().copied().take_while(|&a| a < b));
        for lit in bc.iter().flat_map(|e| message_literals(e)) {
            for m in ac.find_overlapping_iter(lit) {
                let a = owners[m.pattern().as_usize()];
                if a < b {
                    candidates.push(a);
                }
            }
        }
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
    out
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
