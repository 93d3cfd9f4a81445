//! The naive baseline: what a gateway without this engine does — every
//! rule's patterns as case-insensitive regexes on the original text, tried
//! rule by rule in order (REFERENCE a.7's pattern lists work this way).
//! Same verdicts on the message, status, provider, code and type predicates
//! the default rules use; no lower-casing, no automaton, no tables.

#![allow(dead_code)]

use failover::compile::{Expr, Ruleset, TextField, TextTest};
use regex::{Regex, RegexBuilder};

use super::corpus::Sample;

enum Test {
    And(Vec<Test>),
    Or(Vec<Test>),
    Not(Box<Test>),
    Status(Vec<(u16, u16)>),
    StatusEmpty,
    /// A field (not the message) equal to one of these (lower-case).
    FieldIn(Field, Vec<String>),
    FieldHas(Field, Vec<String>),
    FieldEmpty(Field),
    /// The message matches this case-insensitive regex.
    Message(Regex),
    MessageEmpty,
    /// Predicates the naive baseline does not model (JSON body paths).
    Never,
}

#[derive(Clone, Copy)]
enum Field {
    Provider,
    Code,
    Type,
    Model,
}

pub(crate) struct Naive {
    rules: Vec<(usize, Test)>,
}

/// The pattern of a regex as written, `/pattern/flags`: between the
/// slashes (flags are letters).
fn pattern(source: &str) -> &str {
    let end = source.rfind('/').expect("a regex as written");
    &source[1..end]
}

fn ci(pattern: &str) -> Regex {
    RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
        .expect("pattern compiles")
}

fn build(e: &Expr) -> Test {
    match e {
        Expr::And(p) => Test::And(p.iter().map(build).collect()),
        Expr::Or(p) => Test::Or(p.iter().map(build).collect()),
        Expr::Not(x) => Test::Not(Box::new(build(x))),
        Expr::Status(s) => Test::Status(s.ranges().to_vec()),
        Expr::StatusEmpty => Test::StatusEmpty,
        Expr::Text(TextField::Message, t) => match t {
            TextTest::Has(l) => Test::Message(ci(&regex::escape(&l.text))),
            TextTest::HasAny(ls) => Test::Message(ci(&ls
                .iter()
                .map(|l| regex::escape(&l.text))
                .collect::<Vec<_>>()
                .join("|"))),
            TextTest::HasAll(ls) => Test::And(
                ls.iter()
                    .map(|l| Test::Message(ci(&regex::escape(&l.text))))
                    .collect(),
            ),
            TextTest::Eq(s) => Test::Message(ci(&format!(r"^\s*{}\s*$", regex::escape(s)))),
            TextTest::In(ss) => Test::Message(ci(&format!(
                r"^\s*(?:{})\s*$",
                ss.iter()
                    .map(|s| regex::escape(s))
                    .collect::<Vec<_>>()
                    .join("|")
            ))),
            TextTest::StartsWith(s) => Test::Message(ci(&format!(r"^\s*{}", regex::escape(s)))),
            TextTest::EndsWith(s) => Test::Message(ci(&format!(r"{}\s*$", regex::escape(s)))),
            TextTest::Matches(re) => Test::Message(ci(pattern(&re.source))),
            TextTest::IsEmpty => Test::MessageEmpty,
        },
        Expr::Text(field, t) => {
            let f = match field {
                TextField::Provider => Field::Provider,
                TextField::Code => Field::Code,
                TextField::Type => Field::Type,
                TextField::Model => Field::Model,
                _ => return Test::Never,
            };
            match t {
                TextTest::Eq(s) => Test::FieldIn(f, vec![s.clone()]),
                TextTest::In(ss) => Test::FieldIn(f, ss.clone()),
                TextTest::Has(l) => Test::FieldHas(f, vec![l.text.clone()]),
                TextTest::HasAny(ls) => {
                    Test::FieldHas(f, ls.iter().map(|l| l.text.clone()).collect())
                }
                TextTest::IsEmpty => Test::FieldEmpty(f),
                _ => Test::Never,
            }
        }
    }
}

impl Naive {
    pub(crate) fn new(rs: &Ruleset) -> Naive {
        Naive {
            rules: rs
                .rules
                .iter()
                .map(|r| (r.reason.0 as usize, build(&r.cond)))
                .collect(),
        }
    }

    /// The reason index of the first rule that matches, or `None`.
    pub(crate) fn classify(&self, s: &Sample) -> Option<usize> {
        let status = s
            .status
            .or_else(|| failover::classify::input::leading_status(&s.message).map(|(st, _)| st));
        self.rules
            .iter()
            .find(|(_, t)| eval(t, s, status))
            .map(|(r, _)| *r)
    }
}

fn field(s: &Sample, f: Field) -> Option<&str> {
    match f {
        Field::Provider => s.provider.as_deref(),
        Field::Code => s.code.as_deref(),
        Field::Type => s.error_type.as_deref(),
        Field::Model => None,
    }
}

fn eval(t: &Test, s: &Sample, status: Option<u16>) -> bool {
    match t {
        Test::And(p) => p.iter().all(|x| eval(x, s, status)),
        Test::Or(p) => p.iter().any(|x| eval(x, s, status)),
        Test::Not(x) => !eval(x, s, status),
        Test::Status(ranges) => {
            status.is_some_and(|st| ranges.iter().any(|&(a, b)| a <= st && st <= b))
        }
        Test::StatusEmpty => status.is_none(),
        Test::FieldIn(f, vs) => {
            field(s, *f).is_some_and(|v| vs.iter().any(|x| x.eq_ignore_ascii_case(v.trim())))
        }
        Test::FieldHas(f, vs) => field(s, *f).is_some_and(|v| {
            let v = v.to_lowercase();
            vs.iter().any(|x| v.contains(x.as_str()))
        }),
        Test::FieldEmpty(f) => field(s, *f).is_none_or(|v| v.trim().is_empty()),
        Test::Message(re) => re.is_match(&s.message),
        Test::MessageEmpty => s.message.trim().is_empty(),
        Test::Never => false,
    }
}
