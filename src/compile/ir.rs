//! The validated intermediate representation of classification rules.
//!
//! Everything here is checked: reasons resolved to ids, statuses in range,
//! literals lower-cased, regexes compiled (the embedded defaults' on their
//! first use, see [`CompiledRegex::regex`]). The matcher plan
//! ([`super::plan`]) and the runtime ([`crate::classify`]) work on this.

use std::sync::OnceLock;

use memchr::memmem;
use regex::Regex;

use super::reasons::ReasonId;
use crate::syntax::Span;

/// One classification rule, in precedence order inside a [`super::Ruleset`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Rule {
    /// The stable dotted id (`billing.openrouter.key_limit`).
    pub id: String,
    pub reason: ReasonId,
    pub cond: Expr,
    /// The span of the rule's id (where `--explain` and warnings point).
    pub span: Span,
    /// 0 = the first operator layer; the embedded defaults come last.
    pub layer: usize,
    /// Whether the rule belongs to the embedded default ruleset.
    pub is_default: bool,
    /// `weak rule …`: a text rule whose verdict the evidence model may
    /// overrule, as it may a status rule's (docs/model.md, "Weak rules").
    pub weak: bool,
}

/// A condition tree. Text comparisons are ASCII case-insensitive: both
/// sides are lower-cased (literals here, input once per message).
#[derive(Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum Expr {
    And(Vec<Expr>),
    Or(Vec<Expr>),
    Not(Box<Expr>),
    /// The HTTP status is known and in the set.
    Status(StatusSet),
    /// No HTTP status is known.
    StatusEmpty,
    Text(TextField, TextTest),
}

impl Expr {
    /// Whether the condition tests the text — the message, the body, the
    /// code or the type — outside a `not` (a `not message has …` only
    /// narrows a status rule). The provider and the model id are not the
    /// error's text. A rule that does not is a *status rule*: the evidence
    /// model may overrule it (docs/model.md).
    pub(crate) fn tests_text(&self) -> bool {
        match self {
            Expr::And(p) | Expr::Or(p) => p.iter().any(Expr::tests_text),
            Expr::Not(_) | Expr::Status(_) | Expr::StatusEmpty => false,
            Expr::Text(field, _) => !matches!(field, TextField::Provider | TextField::Model),
        }
    }

    /// Calls `f` on every regex of the condition, whatever field it tests.
    pub(crate) fn for_each_regex<'a>(&'a self, f: &mut impl FnMut(&'a CompiledRegex)) {
        match self {
            Expr::And(p) | Expr::Or(p) => p.iter().for_each(|e| e.for_each_regex(f)),
            Expr::Not(e) => e.for_each_regex(f),
            Expr::Text(_, TextTest::Matches(re)) => f(re),
            Expr::Status(_) | Expr::StatusEmpty | Expr::Text(..) => {}
        }
    }
}

/// Text-valued inputs a predicate can look at.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum TextField {
    Message,
    Provider,
    Model,
    Code,
    Type,
    /// The raw body text.
    BodyRaw,
    /// A scalar at a path of the JSON body.
    BodyPath(Vec<String>),
}

#[derive(Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) enum TextTest {
    /// Equal to the (lower-cased) text.
    Eq(String),
    /// Equal to one of the texts.
    In(Vec<String>),
    Has(Box<Literal>),
    HasAny(Literals),
    HasAll(Literals),
    StartsWith(String),
    EndsWith(String),
    Matches(Box<CompiledRegex>),
    IsEmpty,
}

/// A lower-cased literal with a prebuilt substring searcher.
///
/// A message literal that is also a pattern of the atom automaton carries
/// its pattern id: the scan already found whether it occurs, so verifying
/// `has "…"` is one bit test instead of a second search. Frozen as its
/// text and atom ([`LiteralText`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(into = "LiteralText", from = "LiteralText")]
pub(crate) struct Literal {
    pub text: String,
    finder: memmem::Finder<'static>,
    pub(crate) atom: Option<u32>,
}

/// A [`Literal`] as it is frozen: the searcher is built again from the
/// text.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct LiteralText {
    text: String,
    atom: Option<u32>,
}

impl From<Literal> for LiteralText {
    fn from(l: Literal) -> Self {
        LiteralText {
            text: l.text,
            atom: l.atom,
        }
    }
}

impl From<LiteralText> for Literal {
    fn from(l: LiteralText) -> Self {
        Literal {
            finder: finder(l.text.as_bytes()),
            text: l.text,
            atom: l.atom,
        }
    }
}

impl Literal {
    pub(crate) fn new(text: &str) -> Self {
        let text = text.to_ascii_lowercase();
        let finder = memmem::Finder::new(text.as_bytes()).into_owned();
        Literal {
            text,
            finder,
            atom: None,
        }
    }

    /// Whether the literal occurs, using the scan's hits when it was part
    /// of the scan (`hits` is a bitset over atom pattern ids).
    #[inline]
    pub(crate) fn occurs(&self, haystack_lower: &[u8], hits: Option<&[u64]>) -> bool {
        match (self.atom, hits) {
            (Some(id), Some(h)) => has_bit(h, id),
            _ => self.is_in(haystack_lower),
        }
    }

    /// Whether the literal occurs in an already lower-cased haystack.
    #[inline]
    pub(crate) fn is_in(&self, haystack_lower: &[u8]) -> bool {
        self.finder.find(haystack_lower).is_some()
    }
}

/// The literals of a `has any` / `has all` list (it reads as the
/// `Vec<Literal>` it holds).
///
/// When every literal of a `has any` is an atom, the plan also keeps them as
/// one atom set: the test is then an AND per word of the hit bitset, not
/// a bit test per literal (lists of a hundred wordings are common, and
/// one that fails tested every literal).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Literals {
    list: Vec<Literal>,
    pub(crate) atoms: Option<AtomSet>,
}

impl Literals {
    /// Whether one of the literals occurs (see [`Literal::occurs`]).
    #[inline]
    pub(crate) fn any_occurs(&self, haystack_lower: &[u8], hits: Option<&[u64]>) -> bool {
        match (&self.atoms, hits) {
            (Some(set), Some(h)) => set.any(h),
            _ => self.list.iter().any(|l| l.occurs(haystack_lower, hits)),
        }
    }

    /// Whether every literal occurs.
    #[inline]
    pub(crate) fn all_occur(&self, haystack_lower: &[u8], hits: Option<&[u64]>) -> bool {
        self.list.iter().all(|l| l.occurs(haystack_lower, hits))
    }
}

impl From<Vec<Literal>> for Literals {
    fn from(list: Vec<Literal>) -> Self {
        Literals { list, atoms: None }
    }
}

impl std::ops::Deref for Literals {
    type Target = Vec<Literal>;
    fn deref(&self) -> &Vec<Literal> {
        &self.list
    }
}

impl std::ops::DerefMut for Literals {
    fn deref_mut(&mut self) -> &mut Vec<Literal> {
        &mut self.list
    }
}

impl PartialEq for Literals {
    fn eq(&self, other: &Self) -> bool {
        self.list == other.list
    }
}

impl Eq for Literals {}

/// As equality: by the literals.
impl std::hash::Hash for Literals {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.list.hash(state);
    }
}

/// Whether atom `id` is set in the scan's hit bitset.
#[inline]
fn has_bit(hits: &[u64], id: u32) -> bool {
    hits[(id / 64) as usize] & (1u64 << (id % 64)) != 0
}

impl PartialEq for Literal {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Literal {}

/// As equality: by the text.
impl std::hash::Hash for Literal {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

/// A compiled regex with the source it came from.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct CompiledRegex {
    /// As written, with slashes and flags: `/…/flags`.
    pub source: String,
    /// What runs: the ASCII-folded pattern (the `fold` module) on the
    /// lower-cased message, or with the `c` flag the pattern as written on
    /// the original text. An operator's regexes are built while compiling
    /// (a bad one is a diagnostic); the embedded defaults' are built the
    /// first time they run: building all of them was most of the command
    /// line's start-up, and most never run for one message. The test suite
    /// builds every default regex ([`crate::Engine::warm`]). Not frozen
    /// (`super::frozen`): a thawed regex is built on its first use.
    #[serde(skip)]
    pub(crate) regex: OnceLock<Regex>,
    pub on_lowercase: bool,
    /// What the atom scan can decide about this regex on the message
    /// ([`super::atoms::regex_facts`]), as literals.
    pub facts: RegexFacts,
    /// The same as atom pattern ids, filled in by the plan: the regex runs
    /// only when every gate has a hit, and not at all when `exact` is set.
    pub(crate) gate_ids: Vec<AtomSet>,
    pub(crate) exact_ids: Option<AtomSet>,
    /// The literal branches as they run, filled in by the plan.
    pub(crate) branch_check: Option<BranchCheck>,
}

/// A set of atom pattern ids kept as words of the scan's hit bitset, so
/// "did any of them occur" costs one AND per 64-id word the set touches,
/// not one bit test per id: a gate of a long alternation holds up to
/// hundreds of atoms, and a failing gate tested them all.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct AtomSet {
    /// (word index, bits), by word index.
    words: Box<[(u32, u64)]>,
    len: usize,
}

impl AtomSet {
    pub(crate) fn new(ids: impl IntoIterator<Item = u32>) -> AtomSet {
        let mut ids: Vec<u32> = ids.into_iter().collect();
        ids.sort_unstable();
        ids.dedup();
        let mut words: Vec<(u32, u64)> = Vec::new();
        for &id in &ids {
            let bit = 1u64 << (id % 64);
            match words.last_mut() {
                Some((w, bits)) if *w == id / 64 => *bits |= bit,
                _ => words.push((id / 64, bit)),
            }
        }
        AtomSet {
            words: words.into_boxed_slice(),
            len: ids.len(),
        }
    }

    /// How many atoms the set holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether one of the atoms is set in the scan's hit bitset.
    #[inline]
    pub(crate) fn any(&self, hits: &[u64]) -> bool {
        self.words
            .iter()
            .any(|&(w, bits)| hits.get(w as usize).is_some_and(|h| h & bits != 0))
    }
}

impl CompiledRegex {
    /// Whether the regex matches the message, given the scan's atom hits
    /// (`None` when the scan did not run: then the regex decides alone).
    #[inline]
    pub(crate) fn is_match_message(
        &self,
        lower: &str,
        original: &str,
        hits: Option<&[u64]>,
    ) -> bool {
        if let Some(h) = hits {
            if !self.gate_ids.iter().all(|g| g.any(h)) {
                return false;
            }
            if let Some(exact) = &self.exact_ids {
                return exact.any(h);
            }
            if let Some(verdict) = self
                .branch_check
                .as_ref()
                .and_then(|b| b.decide(lower.as_bytes(), h))
            {
                return verdict;
            }
        }
        self.is_match(lower, original)
    }

    /// Whether the regex matches (`lower` is `original` ASCII-lower-cased).
    #[inline]
    pub(crate) fn is_match(&self, lower: &str, original: &str) -> bool {
        let regex = self.runnable();
        if self.on_lowercase {
            regex.is_match(lower)
        } else {
            regex.is_match(original)
        }
    }

    /// The regex that runs, built now if it was left for its first use
    /// (only the embedded defaults' are: they are known to build).
    #[inline]
    pub(crate) fn runnable(&self) -> &Regex {
        self.regex.get_or_init(|| self.build_now())
    }

    /// Builds a regex left for its first use, as the compile would have.
    #[cold]
    #[inline(never)]
    fn build_now(&self) -> Regex {
        // `/pattern/flags`: the flags are letters, so the last slash ends
        // the pattern.
        let end = self.source.rfind('/').unwrap_or(0);
        let pattern = self.source.get(1..end).unwrap_or_default();
        let flags = self.source.get(end + 1..).unwrap_or_default();
        super::build_regex_only(pattern, flags).unwrap_or_else(|e| {
            panic!(
                "the embedded default regex {} does not build: {e}",
                self.source
            )
        })
    }
}

impl PartialEq for CompiledRegex {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Eq for CompiledRegex {}

/// As equality: by the source.
impl std::hash::Hash for CompiledRegex {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.source.hash(state);
    }
}

/// A set of HTTP statuses as sorted, disjoint, inclusive ranges.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub(crate) struct StatusSet {
    ranges: Vec<(u16, u16)>,
}

impl StatusSet {
    pub(crate) fn from_ranges(mut ranges: Vec<(u16, u16)>) -> Self {
        ranges.sort_unstable();
        let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
        for (lo, hi) in ranges {
            match merged.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => merged.push((lo, hi)),
            }
        }
        StatusSet { ranges: merged }
    }

    #[inline]
    pub(crate) fn contains(&self, status: u16) -> bool {
        self.ranges
            .iter()
            .any(|&(lo, hi)| lo <= status && status <= hi)
    }

    /// Whether every status of `self` is in `other`.
    pub(crate) fn is_subset(&self, other: &StatusSet) -> bool {
        self.ranges.iter().all(|&(lo, hi)| {
            other
                .ranges
                .iter()
                .any(|&(olo, ohi)| olo <= lo && hi <= ohi)
        })
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        self.ranges.iter().flat_map(|&(lo, hi)| lo..=hi)
    }

    pub(crate) fn ranges(&self) -> &[(u16, u16)] {
        &self.ranges
    }
}

/// What the scan can tell about a regex before it runs.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct RegexFacts {
    /// Every match contains at least one literal of each set: when some
    /// set has no scan hit, the regex cannot match and is not run.
    pub gates: Vec<Vec<Vec<u8>>>,
    /// The regex matches exactly when the text contains one of these
    /// literals: its language is a small finite set of strings (literals,
    /// alternations, small classes, optional groups) with no anchor or
    /// word boundary. The scan's hits answer it and it never runs.
    pub exact: Option<Vec<Vec<u8>>>,
    /// The regex's best atom set: one of these occurs in every match
    /// (what `atoms::rule_atoms` uses for routing).
    pub atoms: Option<Vec<Vec<u8>>>,
    /// Unbounded repetitions (`[^\n]*`, `\w+`): each can make the regex
    /// engine walk the rest of the message from every place it starts.
    pub gaps: u32,
    /// The regex as branches that are literals with optional word
    /// boundaries at their ends (`\bunknown model\b`) and the rest
    /// (found by the atom analysis, `super::atoms`); `None` when it has no
    /// such branch, or is case-sensitive.
    pub branches: Option<LiteralBranches>,
}

/// A regex read as `L1 | L2 | … | REST`: each `L` a literal string with
/// or without a word boundary before and after it, `REST` the branches
/// that are not. A literal branch is decided by finding its string in the
/// lower-cased message and looking at the bytes around it, so a message
/// it matches needs no regex run.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct LiteralBranches {
    /// (lower-cased text, `\b` before it, `\b` after it).
    pub literals: Vec<(Vec<u8>, bool, bool)>,
    /// What the other branches need: for each, the literal sets of which
    /// one literal each occurs in every match of it (empty: there are no
    /// other branches); `None` when some other branch needs no literal.
    pub rest: Option<Vec<Vec<Vec<Vec<u8>>>>>,
}

/// A literal branch as it runs: the atom of its text (a hit says the text
/// occurs), a searcher for the text, and its boundaries. Frozen as the
/// searchers' texts ([`BranchCheckText`]).
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
#[serde(into = "BranchCheckText", from = "BranchCheckText")]
pub(crate) struct BranchCheck {
    /// Sorted by atom.
    pub(crate) literals: Vec<(u32, memmem::Finder<'static>, bool, bool)>,
    /// Every literal's atom, to skip the list in one test.
    pub(crate) any: AtomSet,
    /// Literals that are no atom (common words, see
    /// [`super::atoms::is_common`]): searched for in the message.
    pub(crate) searched: Vec<(memmem::Finder<'static>, bool, bool)>,
    pub(crate) rest: Rest,
}

/// A [`BranchCheck`] as it is frozen: each searcher as its text.
#[derive(serde::Serialize, serde::Deserialize)]
pub(crate) struct BranchCheckText {
    literals: Vec<(u32, Vec<u8>, bool, bool)>,
    any: AtomSet,
    searched: Vec<(Vec<u8>, bool, bool)>,
    rest: Rest,
}

fn finder(text: &[u8]) -> memmem::Finder<'static> {
    memmem::Finder::new(text).into_owned()
}

impl From<BranchCheck> for BranchCheckText {
    fn from(b: BranchCheck) -> Self {
        BranchCheckText {
            literals: (b.literals.into_iter())
                .map(|(a, f, x, y)| (a, f.needle().to_vec(), x, y))
                .collect(),
            any: b.any,
            searched: (b.searched.into_iter())
                .map(|(f, x, y)| (f.needle().to_vec(), x, y))
                .collect(),
            rest: b.rest,
        }
    }
}

impl From<BranchCheckText> for BranchCheck {
    fn from(b: BranchCheckText) -> Self {
        BranchCheck {
            literals: (b.literals.iter())
                .map(|(a, t, x, y)| (*a, finder(t), *x, *y))
                .collect(),
            any: b.any,
            searched: (b.searched.iter())
                .map(|(t, x, y)| (finder(t), *x, *y))
                .collect(),
            rest: b.rest,
        }
    }
}

/// What the non-literal branches of a [`BranchCheck`] need.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Rest {
    /// There are none: no literal branch found means no match.
    Nothing,
    /// Per branch, atom sets that each have a hit in every match of it.
    Gated(Vec<Vec<AtomSet>>),
    /// They must run.
    Run,
}

impl BranchCheck {
    /// `Some(verdict)` when the literal branches and the hits decide the
    /// regex; `None` when it must run.
    #[inline]
    fn decide(&self, lower: &[u8], hits: &[u64]) -> Option<bool> {
        // Only the literals whose atoms occurred (usually one or two of up
        // to hundreds): the set's words against the hits, then each hit
        // atom's literals (sorted by atom) found by binary search.
        for &(w, bits) in self.any.words.iter() {
            let mut found = hits.get(w as usize).map_or(0, |h| h & bits);
            while found != 0 {
                let atom = w * 64 + found.trailing_zeros();
                found &= found - 1;
                let from = self.literals.partition_point(|l| l.0 < atom);
                for (_, finder, before, after) in
                    self.literals[from..].iter().take_while(|l| l.0 == atom)
                {
                    if !(*before || *after) || occurs_bounded(lower, finder, *before, *after) {
                        return Some(true);
                    }
                }
            }
        }
        if self
            .searched
            .iter()
            .any(|(finder, before, after)| occurs_bounded(lower, finder, *before, *after))
        {
            return Some(true);
        }
        match &self.rest {
            Rest::Nothing => Some(false),
            Rest::Gated(branches)
                if !branches
                    .iter()
                    .any(|gates| gates.iter().all(|g| g.any(hits))) =>
            {
                Some(false)
            }
            _ => None,
        }
    }
}

/// An ASCII word byte, as the folded regexes' `\b` reads it.
#[inline]
fn is_word(b: Option<&u8>) -> bool {
    b.is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Whether the finder's text occurs in `hay` with a word boundary before
/// it (when `before`) and after it (when `after`). Every occurrence is
/// tried, overlapping ones included.
fn occurs_bounded(hay: &[u8], finder: &memmem::Finder<'_>, before: bool, after: bool) -> bool {
    let n = finder.needle().len();
    let mut start = 0;
    while let Some(i) = finder.find(&hay[start..]) {
        let at = start + i;
        let ok_before =
            !before || is_word(at.checked_sub(1).and_then(|j| hay.get(j))) != is_word(hay.get(at));
        let end = at + n;
        let ok_after =
            !after || is_word(end.checked_sub(1).and_then(|j| hay.get(j))) != is_word(hay.get(end));
        if ok_before && ok_after {
            return true;
        }
        start = at + 1;
        if start >= hay.len() {
            break;
        }
    }
    false
}
