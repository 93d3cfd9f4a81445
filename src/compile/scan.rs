//! The atom scan: which atoms occur in a lower-cased message.
//!
//! Every atom of every rule is a pattern of one Aho-Corasick automaton,
//! and a message is read through it once, reporting every occurrence,
//! overlapping ones included. This is the largest cost of a
//! classification, so the automaton is a table made for this one loop,
//! built here from the atoms (trie, failure links, rows filled
//! breadth-first):
//!
//! * **Dense and premultiplied.** A state is the offset of its row in one
//!   `u32` table; the next state is `table[state + class(byte)]`, one load.
//!   Bytes that occur in no atom share one class (they all lead back to
//!   the start), every other byte has its own.
//! * **Rows only where a message spends its time.** A state at depth
//!   [`CHAIN_DEPTH`] or deeper with one edge or none (the tail of a long
//!   atom) is a *chain state*: a 16-byte link (its edge, the state that
//!   edge leads to, its failure state, its matches) instead of a row, the
//!   states of one chain side by side. A step from a chain state compares
//!   the byte's class with its edge and, on a miss, goes on from its
//!   failure state. Most of a long atom's states are such states: the
//!   default atoms' 21,881 states need 5,213 rows (2.7 MB) and 16,668
//!   links (267 KB) instead of 11 MB of rows (see benches/README.md,
//!   "Chain states"), and a message that walks into a long atom reads four
//!   links per cache line instead of one row per state.
//! * **Flags in the state number.** A plain row's number is its offset; a
//!   match row's has the top bit set, a chain state's the top two (and its
//!   link's index below them). "Is this state anything but a plain row?"
//!   is a sign test, with no threshold held in a register.
//! * **No bounds check** in the loop: the table's length is a power of two
//!   and indices are masked with `length − 1`, which is a no-op for every
//!   index the table holds and lets the compiler drop the check.
//! * **Four pieces at once.** A message of 96 bytes or more is cut in
//!   four, scanned side by side: four independent chains of loads the CPU
//!   overlaps (one chain waits on each load; 2, 3, 4 and 5 chains were
//!   measured, 4 was best). Each piece must find the atoms that *start* in it, so it
//!   runs on past its end while its state stands for a partial atom that
//!   began inside it. A state's *depth* is the length of the atom prefix
//!   it stands for, so after byte `p` the pending prefix began at
//!   `p − depth`: usually a few bytes, where a fixed overlap would be the
//!   longest atom.
//!
//! Worked example: atoms `rate limit` and `limit`, message
//! `…your rate limit was hit…` cut at the `l` of `limit`. The first piece
//! ends in the state for `rate ` (depth 5, begun inside it), reads on
//! through `limit` — reporting `rate limit` and, by the suffix link,
//! `limit` — and stops once its pending prefix began after the cut. The
//! second piece starts fresh at `l` and reports `limit` again; the caller
//! keeps a set.
//!
//! When the table would pass 2^26 entries (states × row width: some
//! hundreds of thousands of states), the `aho-corasick` crate's compact
//! NFA scans instead, one chain.
//!
//! The table is built from the trie when it pays for itself: after
//! [`TABLE_AFTER`] scans, or when the engine is warmed (a server warms it
//! before it serves). Until then a scan walks the trie, following failure
//! links: a command line's `classify` reads one message, and building
//! the default atoms' table was a fifth of its start-up.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous;
use aho_corasick::{Anchored, MatchKind};

/// Below this length a message is scanned as one piece.
const SPLIT_SCAN_MIN: usize = 96;
/// How many pieces a long message is scanned as.
const PIECES: usize = 4;

/// The largest table built, in entries (256 MiB of `u32`).
const MAX_TABLE: usize = 1 << 26;

/// Texts a scanner reads through its trie before it builds its table.
/// Building the default atoms' table takes some 3 ms and touches 3 MB
/// (most of a command line's `classify`, which reads one message); a
/// scan through the trie's failure links costs about a microsecond more
/// than through the table: after this many, the table pays for itself.
const TABLE_AFTER: u32 = 1024;

#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) enum Scanner {
    /// The trie, and the table built from it once it pays ([`Lazy`]).
    Table(Box<Lazy>),
    /// Never frozen (`super::frozen`): a ruleset whose table would be too
    /// large is an operator's, and operator layers compile at start.
    #[serde(skip)]
    Nfa(Box<contiguous::NFA>),
}

impl Scanner {
    /// An automaton over `patterns` (non-empty, already lower-cased); a
    /// pattern's id is its index.
    pub(crate) fn build(patterns: &[Vec<u8>]) -> Scanner {
        Scanner::build_within(patterns, MAX_TABLE)
    }

    fn build_within(patterns: &[Vec<u8>], max_table: usize) -> Scanner {
        match Lazy::new(patterns, max_table, Some(CHAIN_DEPTH)) {
            Some(lazy) => Scanner::Table(Box::new(lazy)),
            None => Scanner::Nfa(Box::new(
                contiguous::NFA::builder()
                    .match_kind(MatchKind::Standard)
                    .build(patterns)
                    .expect("literal patterns always build"),
            )),
        }
    }

    /// Builds the table now if it is not built yet, so that no later scan
    /// pays for it (`Engine::warm`).
    pub(crate) fn build_table(&self) {
        if let Scanner::Table(lazy) = self {
            lazy.table();
        }
    }

    /// [`Scanner::scan`] that never counts towards building the table:
    /// for the lookups of the plan while it is built.
    pub(crate) fn probe(&self, haystack: &[u8], hit: impl FnMut(usize)) {
        match self {
            Scanner::Table(lazy) => lazy.scan(haystack, hit, false),
            Scanner::Nfa(_) => self.scan(haystack, hit),
        }
    }

    /// Sets bit `id` of `bits` (a bitset over pattern ids, long enough)
    /// for every pattern that occurs in `haystack`, and bit `w % 64` of
    /// `touched` for every word `w` of `bits` it sets a bit in (so a caller
    /// visits and clears only those words: a ruleset of 2,000 atoms has 32).
    #[inline]
    pub(crate) fn scan_bits(&self, haystack: &[u8], bits: &mut [u64], touched: &mut u64) {
        self.scan(haystack, |pid| {
            bits[pid / 64] |= 1u64 << (pid % 64);
            *touched |= 1u64 << ((pid / 64) % 64);
        });
    }

    /// Calls `hit` with the pattern id of every occurrence in `haystack`
    /// (an occurrence may be reported more than once).
    #[inline]
    pub(crate) fn scan(&self, haystack: &[u8], mut hit: impl FnMut(usize)) {
        match self {
            Scanner::Table(lazy) => lazy.scan(haystack, hit, true),
            Scanner::Nfa(nfa) => {
                let mut sid = nfa
                    .start_state(Anchored::No)
                    .expect("the automaton supports unanchored search");
                for &b in haystack {
                    sid = nfa.next_state(Anchored::No, sid, b);
                    if nfa.is_match(sid) {
                        for i in 0..nfa.match_len(sid) {
                            hit(nfa.match_pattern(sid, i).as_usize());
                        }
                    }
                }
            }
        }
    }
}

/// The trie of the atoms, and the table built from it the first time it
/// pays: after [`TABLE_AFTER`] scans, or when asked. A command that
/// classifies one message never builds it.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct Lazy {
    trie: Trie,
    #[serde(with = "fixed")]
    classes: [u8; 256],
    n_classes: usize,
    shift: u32,
    chain_depth: Option<u32>,
    /// `Some(None)`: the table could not be built (the trie scans on).
    /// Not frozen: a thawed scanner builds it when it pays, as a new one.
    #[serde(skip)]
    table: OnceLock<Option<Dfa>>,
    /// Scans through the trie so far.
    #[serde(skip)]
    scans: AtomicU32,
}

impl Lazy {
    /// The trie of `patterns`; `None` when their table would exceed
    /// `max_table` entries ([`MAX_TABLE`]). `chain_depth` is the table's
    /// (see [`Dfa::from_trie`]).
    fn new(patterns: &[Vec<u8>], max_table: usize, chain_depth: Option<u32>) -> Option<Lazy> {
        let (classes, n_classes) = byte_classes(patterns);
        let shift = n_classes.next_power_of_two().trailing_zeros();
        // The size, before building anything.
        let sorted = sorted_ids(patterns);
        let states = trie_states(patterns, &sorted);
        if states << shift > max_table {
            return None;
        }
        Some(Lazy {
            trie: Trie::build(patterns, &sorted, states, &classes),
            classes,
            n_classes,
            shift,
            chain_depth,
            table: OnceLock::new(),
            scans: AtomicU32::new(0),
        })
    }

    /// The table, built now if it is not yet.
    fn table(&self) -> Option<&Dfa> {
        self.table
            .get_or_init(|| {
                Dfa::from_trie(
                    &self.trie,
                    self.classes,
                    self.n_classes,
                    self.shift,
                    self.chain_depth,
                )
            })
            .as_ref()
    }

    /// Scans with the table once it is built; before, through the trie,
    /// counting the scan when `count`.
    #[inline]
    fn scan(&self, haystack: &[u8], hit: impl FnMut(usize), count: bool) {
        match self.table.get() {
            Some(Some(dfa)) => dfa.scan(haystack, hit),
            _ => self.scan_before_table(haystack, hit, count),
        }
    }

    #[inline(never)]
    fn scan_before_table(&self, haystack: &[u8], hit: impl FnMut(usize), count: bool) {
        if count
            && self.table.get().is_none()
            && self.scans.fetch_add(1, Ordering::Relaxed) + 1 >= TABLE_AFTER
        {
            if let Some(dfa) = self.table() {
                return dfa.scan(haystack, hit);
            }
        }
        self.trie.scan(&self.classes, haystack, hit);
    }
}

/// A chain state's link (see the module notes): 16 bytes, four to a
/// cache line, a chain's states side by side.
#[derive(Debug, Clone, Copy, Default)]
struct Link {
    /// The class of the state's one edge, or [`NO_EDGE`]; with
    /// [`REPORTS`] set when the state reports atoms, so that one
    /// comparison with a byte's class says "follow the edge, nothing to
    /// report".
    edge: u32,
    /// The state that edge leads to.
    next: u32,
    /// The failure state.
    fail: u32,
    /// The state's entry in `offsets`, or [`NO_MATCH`].
    matches: u32,
}

const NO_EDGE: u32 = 0x7fff_ffff;
const REPORTS: u32 = 1 << 31;
const NO_MATCH: u32 = u32::MAX;

/// Set in a state's number for every state but a plain row: the loop's
/// test is then a sign test, with no threshold held in a register.
const SPECIAL: u32 = 1 << 31;
/// Set (with [`SPECIAL`]) for a chain state, whose low bits are its index
/// in `links`. A match row's number is its row's offset with [`SPECIAL`]
/// set; masking an index to the table's length drops the flag, so a match
/// row steps like a plain row.
const CHAIN: u32 = 1 << 30;

/// Trie states this deep or deeper with at most one edge are chain
/// states. Shallow states are the ones every message walks through, so
/// they keep their rows. Entering and leaving a chain is a branch the CPU
/// cannot foresee, so chains pay only where a message rarely goes: measured
/// (benches/README.md, "Chain states, second pass"), the scan alone took
/// 680 / 527 / 526 ns per message at depths 5 / 10 / 12 on the default
/// atoms (622 with no chains) and 504 / 405 / 420 on stop 9's (420).
const CHAIN_DEPTH: u32 = 10;

/// The table (see the module notes).
#[derive(Debug)]
pub(crate) struct Dfa {
    classes: [u8; 256],
    /// A state's row is `1 << shift` entries long.
    shift: u32,
    /// Next state by `state + class`, for row states; the length is a
    /// power of two, padded with zeros past the last row.
    trans: Box<[u32]>,
    start: u32,
    /// The offset of the first match row (plain rows come first).
    match_rows: u32,
    /// How many states have a row.
    rows: u32,
    /// The chain states' links; the length is a power of two.
    links: Box<[Link]>,
    /// Match `m`'s pattern ids are `pids[offsets[m]..offsets[m + 1]]`: the
    /// match rows' first, in row order, then the chain states'.
    offsets: Box<[u32]>,
    pids: Box<[u32]>,
    /// The length of the atom prefix a state stands for: rows by row
    /// index, then chain states by chain index.
    depth: Box<[u32]>,
}

impl Dfa {
    /// Builds the table straight from the patterns, the textbook way: a
    /// trie over byte classes, failure links breadth-first, and each row
    /// filled from its failure state's row (already complete, being
    /// shallower) with the trie's own edges written over it. Each entry
    /// costs O(1); copying the crate's NFA state by state cost a walk of
    /// failure links per entry (6 ms for the default atoms, now under 1).
    /// `chain_depth`: the least depth of a chain state (`None`: every state
    /// has a row). `None` when the state numbers would not leave the flag
    /// bits free (never within [`MAX_TABLE`]).
    fn from_trie(
        trie: &Trie,
        classes: [u8; 256],
        n_classes: usize,
        shift: u32,
        chain_depth: Option<u32>,
    ) -> Option<Dfa> {
        let layout = Layout::number(trie, chain_depth, shift)?;
        let trans = layout.rows_table(trie, n_classes);
        let (links, offsets, pids) = layout.matches(trie);
        let depth = layout
            .by_row
            .iter()
            .chain(&layout.chain_order)
            .map(|&s| trie.depth[s])
            .collect();
        Some(Dfa {
            classes,
            shift,
            trans,
            start: layout.new_of[0],
            match_rows: (layout.plain as u32) << shift,
            rows: layout.rows as u32,
            links,
            offsets,
            pids,
            depth,
        })
    }

    /// How many states have a row, and how many are chain states.
    #[cfg(test)]
    fn shape(&self) -> (usize, usize) {
        let rows = self.rows as usize;
        (rows, self.depth.len() - rows)
    }

    /// The loop's view of the table, in locals: the compiler keeps them in
    /// registers, and `trans` and `links` are sliced to a power of two so
    /// that a masked index provably needs no bounds check.
    #[inline(always)]
    fn view(&self) -> View<'_> {
        let mask = self.trans.len() - 1;
        let link_mask = self.links.len() - 1;
        View {
            trans: &self.trans[..=mask],
            mask,
            links: &self.links[..=link_mask],
            link_mask,
            classes: &self.classes,
        }
    }

    /// Reports the patterns of special state `s` (a match row, or a chain
    /// state, which may report none).
    #[inline(always)]
    fn report(&self, t: &View<'_>, s: u32, hit: &mut impl FnMut(usize)) {
        if s & CHAIN == 0 {
            self.report_match(
                (((s & !SPECIAL) - self.match_rows) >> self.shift) as usize,
                hit,
            );
        } else if t.link(s).matches != NO_MATCH {
            self.report_match(t.link(s).matches as usize, hit);
        }
    }

    /// Out of line: most steps report nothing.
    #[inline(never)]
    fn report_match(&self, m: usize, hit: &mut impl FnMut(usize)) {
        for &pid in &self.pids[self.offsets[m] as usize..self.offsets[m + 1] as usize] {
            hit(pid as usize);
        }
    }

    /// The next state after byte `b`. A state's matches are reported as
    /// the scan leaves it (and by [`Dfa::finish`] for the last one), so
    /// the one comparison that tells a plain row from the rest serves both
    /// the report and the step. Inside a long atom's text the step
    /// follows the chain: one link read, one comparison.
    #[inline(always)]
    fn advance(&self, t: &View<'_>, s: u32, b: u8, hit: &mut impl FnMut(usize)) -> u32 {
        let c = u32::from(t.classes[b as usize]);
        if s & SPECIAL == 0 {
            t.row_step(s, c)
        } else if s & CHAIN != 0 && t.link(s).edge == c {
            t.link(s).next
        } else {
            self.special_step(t, s, c, hit)
        }
    }

    /// The rest: a match row, a chain state that reports atoms, or a
    /// chain's edge missed. Out of line and marked cold, so that the loop's
    /// own registers hold its pieces' states and the table (with this path
    /// inlined, four pieces' worth of it spilled them to the stack on
    /// every byte).
    #[cold]
    #[inline(never)]
    fn special_step(&self, t: &View<'_>, s: u32, c: u32, hit: &mut impl FnMut(usize)) -> u32 {
        self.report(t, s, hit);
        if s & CHAIN == 0 {
            return t.row_step(s, c);
        }
        let l = t.link(s);
        if l.edge & !REPORTS == c {
            l.next
        } else {
            t.fail_step(l.fail, c)
        }
    }

    /// Reports the matches of the state a scan ends in.
    #[inline(always)]
    fn finish(&self, t: &View<'_>, s: u32, hit: &mut impl FnMut(usize)) {
        if s & SPECIAL != 0 {
            self.report(t, s, hit);
        }
    }

    #[inline(always)]
    fn depth(&self, s: u32) -> usize {
        let i = if s & CHAIN == 0 {
            (s & !SPECIAL) >> self.shift
        } else {
            self.rows + (s & !(SPECIAL | CHAIN))
        };
        self.depth[i as usize] as usize
    }

    fn scan(&self, haystack: &[u8], mut hit: impl FnMut(usize)) {
        let t = self.view();
        let hit = &mut hit;
        let n = haystack.len();
        if n < SPLIT_SCAN_MIN {
            let mut s = self.start;
            for &b in haystack {
                s = self.advance(&t, s, b, hit);
            }
            self.finish(&t, s, hit);
            return;
        }
        // Pieces: [0, len), [len, 2·len), [2·len, 3·len), [3·len, n),
        // walked side by side: four slices of one length indexed by one
        // counter (no bounds checks, and each byte loaded where it is used;
        // zipped iterators kept four pointers and spilled them and the
        // bytes to the stack), the states in four locals.
        const K: usize = PIECES;
        let len = n / K;
        let (p0, rest) = haystack.split_at(len);
        let (p1, rest) = rest.split_at(len);
        let (p2, rest) = rest.split_at(len);
        let p3 = &rest[..len];
        let [mut s0, mut s1, mut s2, mut s3] = [self.start; K];
        for i in 0..len {
            s0 = self.advance(&t, s0, p0[i], hit);
            s1 = self.advance(&t, s1, p1[i], hit);
            s2 = self.advance(&t, s2, p2[i], hit);
            s3 = self.advance(&t, s3, p3[i], hit);
        }
        let mut sid = [s0, s1, s2, s3];
        // The last piece's extra bytes, then the other pieces' runs past
        // their ends while a prefix begun inside them is pending.
        for &b in &haystack[K * len..] {
            sid[K - 1] = self.advance(&t, sid[K - 1], b, hit);
        }
        self.finish(&t, sid[K - 1], hit);
        for (j, &s) in sid.iter().enumerate().take(K - 1) {
            let end = (j + 1) * len;
            let (mut s, mut p) = (s, end);
            while p < n && p - self.depth(s) < end {
                s = self.advance(&t, s, haystack[p], hit);
                p += 1;
            }
            self.finish(&t, s, hit);
        }
    }
}

struct View<'a> {
    trans: &'a [u32],
    mask: usize,
    links: &'a [Link],
    link_mask: usize,
    classes: &'a [u8; 256],
}

impl View<'_> {
    #[inline(always)]
    fn row_step(&self, s: u32, c: u32) -> u32 {
        self.trans[(s + c) as usize & self.mask]
    }

    #[inline(always)]
    fn link(&self, s: u32) -> &Link {
        // The mask (below 2^30) also drops the flags.
        &self.links[s as usize & self.link_mask]
    }

    /// The step from failure state `s` after a chain state's edge missed:
    /// usually a row; a chain state compares its one edge and, on a miss,
    /// goes on from its own failure state.
    #[inline(always)]
    fn fail_step(&self, mut s: u32, c: u32) -> u32 {
        while s & CHAIN != 0 {
            let l = self.link(s);
            if l.edge & !REPORTS == c {
                return l.next;
            }
            s = l.fail;
        }
        self.row_step(s, c)
    }
}

/// Bytes in the order their classes are numbered: the space and the
/// lower-case letters by their frequency in English text, then digits and
/// the punctuation of error messages, then every other byte by value.
/// A row's entries are laid out by class, so the entries a scan of
/// (lower-cased, mostly English) text reads from a state share its first
/// cache lines: with classes in byte order, `a`–`z`, the space and the
/// digits of one row were spread over three or four lines of 64 bytes.
const CLASS_ORDER: &[u8] = b" etaoinshrdlcumwfgypbvkjxqz_.:,-'\"/0123456789()[]{}=";

/// Byte classes: each byte that occurs in a pattern has its own class,
/// numbered in [`CLASS_ORDER`]; the bytes in no pattern (when there are
/// any) share the class after them. Returns the map and the class count.
fn byte_classes(patterns: &[Vec<u8>]) -> ([u8; 256], usize) {
    let mut used = [false; 256];
    patterns
        .iter()
        .flatten()
        .for_each(|&b| used[b as usize] = true);
    let mut order: Vec<u8> = CLASS_ORDER.to_vec();
    order.extend((0..=255u8).filter(|b| !CLASS_ORDER.contains(b)));
    let mut classes = [0u8; 256];
    let mut n_classes = 0usize;
    for &b in order.iter().filter(|&&b| used[b as usize]) {
        classes[b as usize] = n_classes as u8;
        n_classes += 1;
    }
    if used.iter().any(|u| !u) {
        for b in (0..256).filter(|&b| !used[b]) {
            classes[b] = n_classes as u8;
        }
        n_classes += 1;
    }
    (classes, n_classes)
}

/// The patterns' ids in byte order (equal patterns by id): patterns
/// sharing a prefix are side by side, which is what [`Trie::build`] needs.
fn sorted_ids(patterns: &[Vec<u8>]) -> Vec<u32> {
    let mut sorted: Vec<(&[u8], u32)> = patterns
        .iter()
        .zip(0..)
        .map(|(p, id)| (p.as_slice(), id))
        .collect();
    sorted.sort_unstable();
    sorted.into_iter().map(|(_, id)| id).collect()
}

/// The trie's size without building it: one state per distinct prefix,
/// plus the start (`sorted` from [`sorted_ids`]).
fn trie_states(patterns: &[Vec<u8>], sorted: &[u32]) -> usize {
    let mut n = 1usize;
    let mut prev: &[u8] = &[];
    for &id in sorted {
        let p = patterns[id as usize].as_slice();
        let common = p.iter().zip(prev).take_while(|(a, b)| a == b).count();
        n += p.len() - common;
        prev = p;
    }
    n
}

/// The patterns' trie with its Aho-Corasick failure links.
///
/// States are numbered breadth-first, children in byte order, so a
/// state's children are consecutive states and every array here is flat.
/// The trie is built level by level from the sorted patterns: the states
/// of depth `d` are the distinct prefixes of length `d`, in sorted order.
/// (A `Vec` of edges and one of matches per state, for the default atoms'
/// 22,000 states, made building the trie half of building the scanner.)
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Trie {
    /// The edge into state `t` is `edges[t - 1]`: (its class, `t`).
    edges: Vec<(u8, u32)>,
    /// State `s`'s edges are `edges[first[s]..first[s + 1]]`.
    first: Vec<u32>,
    /// The patterns ending at state `s` are
    /// `ends[ends_at[s]..ends_at[s + 1]]`: its own, then its failure
    /// state's (every atom ending here).
    ends: Vec<u32>,
    ends_at: Vec<u32>,
    fail: Vec<usize>,
    depth: Vec<u32>,
    /// The start's edges by class (0: none; no edge leads to the start):
    /// every failure path ends there, so it is asked most, and it has the
    /// most edges.
    #[serde(with = "fixed")]
    root: [u32; 256],
}

/// A fixed-size array frozen as a sequence (serde derives arrays only up
/// to 32 long); one of another length does not thaw.
mod fixed {
    use serde::{de::Error, Deserialize, Deserializer, Serialize, Serializer};

    pub(super) fn serialize<S: Serializer, T: Serialize, const N: usize>(
        a: &[T; N],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        a.as_slice().serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>, T: Deserialize<'de>, const N: usize>(
        d: D,
    ) -> Result<[T; N], D::Error> {
        let v = Vec::<T>::deserialize(d)?;
        let len = v.len();
        v.try_into()
            .map_err(|_| D::Error::invalid_length(len, &"the array's length"))
    }
}

impl Trie {
    /// `sorted` is `patterns` in [`sorted_ids`]' order, `states` their
    /// [`trie_states`] (each array is allocated once, at its size).
    fn build(patterns: &[Vec<u8>], sorted: &[u32], states: usize, classes: &[u8; 256]) -> Trie {
        let byte = |i: usize, d: usize| patterns[sorted[i] as usize].get(d).copied();
        let mut trie = Trie {
            edges: Vec::with_capacity(states),
            first: Vec::with_capacity(states + 1),
            ends: Vec::new(),
            ends_at: Vec::with_capacity(states + 1),
            fail: Vec::with_capacity(states),
            depth: Vec::with_capacity(states),
            root: [0; 256],
        };
        trie.depth.push(0);
        // The states of depth `d`, met in number order, each with its
        // parent, the class of its edge, and the range of `sorted` that
        // starts with its prefix.
        let mut level: Vec<(u32, u8, usize, usize)> = vec![(0, 0, 0, sorted.len())];
        let mut below: Vec<(u32, u8, usize, usize)> = Vec::new();
        let mut d = 0usize;
        while !level.is_empty() {
            for &(parent, c, lo, hi) in &level {
                let s = trie.first.len();
                trie.first.push(trie.edges.len() as u32);
                // The failure state is shallower: its edges, and those of
                // every state on its failure path, are all made.
                let fail = if d < 2 {
                    0
                } else {
                    let mut f = trie.fail[parent as usize];
                    loop {
                        if let Some(x) = trie.edge(f, c) {
                            break x;
                        }
                        if f == 0 {
                            break 0;
                        }
                        f = trie.fail[f];
                    }
                };
                trie.fail.push(fail);
                // Its own patterns (they sort before the longer ones), then
                // its failure state's, already complete.
                let mut i = lo;
                while i < hi && byte(i, d).is_none() {
                    i += 1;
                }
                trie.ends_at.push(trie.ends.len() as u32);
                trie.ends.extend_from_slice(&sorted[lo..i]);
                if s > 0 {
                    let inherited = trie.ends_at[fail] as usize..trie.ends_at[fail + 1] as usize;
                    trie.ends.extend_from_within(inherited);
                }
                while i < hi {
                    let b = byte(i, d);
                    let mut j = i + 1;
                    while j < hi && byte(j, d) == b {
                        j += 1;
                    }
                    let t = trie.edges.len() as u32 + 1;
                    let class = classes[usize::from(b.unwrap_or_default())];
                    trie.edges.push((class, t));
                    trie.depth.push(d as u32 + 1);
                    below.push((s as u32, class, i, j));
                    i = j;
                }
            }
            if d == 0 {
                for &(c, t) in &trie.edges {
                    trie.root[usize::from(c)] = t;
                }
            }
            std::mem::swap(&mut level, &mut below);
            below.clear();
            d += 1;
        }
        trie.first.push(trie.edges.len() as u32);
        trie.ends_at.push(trie.ends.len() as u32);
        debug_assert_eq!(trie.len(), states);
        trie
    }

    /// How many states there are.
    fn len(&self) -> usize {
        self.depth.len()
    }

    /// State `s`'s edges, (class, state), in byte order.
    fn edges(&self, s: usize) -> &[(u8, u32)] {
        &self.edges[self.first[s] as usize..self.first[s + 1] as usize]
    }

    /// The patterns that end at state `s`.
    fn ends(&self, s: usize) -> &[u32] {
        &self.ends[self.ends_at[s] as usize..self.ends_at[s + 1] as usize]
    }

    fn edge(&self, s: usize, c: u8) -> Option<usize> {
        if s == 0 {
            return Some(self.root[usize::from(c)] as usize).filter(|&t| t != 0);
        }
        // Below the start most states have one edge, few more than a handful.
        self.edges(s)
            .iter()
            .find(|e| e.0 == c)
            .map(|e| e.1 as usize)
    }

    /// Calls `hit` with the pattern id of every occurrence in `haystack`,
    /// the textbook way: on a byte with no edge, the failure links are
    /// followed until one has it.
    fn scan(&self, classes: &[u8; 256], haystack: &[u8], mut hit: impl FnMut(usize)) {
        let mut s = 0usize;
        for &b in haystack {
            let c = classes[b as usize];
            s = loop {
                if let Some(t) = self.edge(s, c) {
                    break t;
                }
                if s == 0 {
                    break 0;
                }
                s = self.fail[s];
            };
            for &pid in self.ends(s) {
                hit(pid as usize);
            }
        }
    }
}

/// The states' numbers in the table: plain rows, then match rows (each in
/// breadth-first order, premultiplied), then chain states, each chain's
/// states consecutive from its head down.
struct Layout {
    new_of: Vec<u32>,
    chain_order: Vec<usize>,
    /// The non-chain states by row.
    by_row: Vec<usize>,
    /// Rows without matches (they come first), and all rows.
    plain: usize,
    rows: usize,
    shift: u32,
    chain: Vec<bool>,
}

impl Layout {
    fn number(trie: &Trie, chain_depth: Option<u32>, shift: u32) -> Option<Layout> {
        let n = trie.len();
        let chain: Vec<bool> = (0..n)
            .map(|s| chain_depth.is_some_and(|d| trie.depth[s] >= d && trie.edges(s).len() <= 1))
            .collect();
        let is_plain_row = |s: usize| !chain[s] && trie.ends(s).is_empty();
        let plain = (0..n).filter(|&s| is_plain_row(s)).count();
        let rows = (0..n).filter(|&s| !chain[s]).count();
        // State numbers (see SPECIAL and CHAIN) must leave the two flag bits
        // free: rows << shift is at most `max_table` (2^26), chains fewer.
        if (rows << shift) as u64 >= u64::from(CHAIN) || (n - rows) as u64 >= u64::from(CHAIN) {
            return None;
        }
        let mut new_of = vec![0u32; n];
        let (mut next_plain, mut next_match) = (0u32, plain as u32);
        let mut chain_order = Vec::with_capacity(n - rows);
        for s in 0..n {
            if chain[s] {
                // A chain's head is the first of its states met
                // breadth-first; the states below it are numbered with it
                // (a chain state is never numbered 0).
                if new_of[s] != 0 {
                    continue;
                }
                let mut c = s;
                loop {
                    new_of[c] = SPECIAL | CHAIN | chain_order.len() as u32;
                    chain_order.push(c);
                    match trie.edges(c).first() {
                        Some(&(_, t)) if chain[t as usize] => c = t as usize,
                        _ => break,
                    }
                }
            } else {
                let (slot, flag) = if trie.ends(s).is_empty() {
                    (&mut next_plain, 0)
                } else {
                    (&mut next_match, SPECIAL)
                };
                new_of[s] = (*slot << shift) | flag;
                *slot += 1;
            }
        }
        debug_assert_eq!(chain_order.len(), n - rows);
        let mut by_row = vec![0usize; rows];
        for s in (0..n).filter(|&s| !chain[s]) {
            by_row[((new_of[s] & !SPECIAL) >> shift) as usize] = s;
        }
        Some(Layout {
            new_of,
            chain_order,
            by_row,
            plain,
            rows,
            shift,
            chain,
        })
    }

    fn row_of(&self, s: usize) -> usize {
        (self.new_of[s] & !SPECIAL) as usize
    }

    /// The rows, breadth-first. A row starts as its failure state's
    /// transitions: the nearest row on the failure path (complete, being
    /// shallower) with the edges of the chain states passed on the way
    /// written over it, the deepest last.
    fn rows_table(&self, trie: &Trie, n_classes: usize) -> Box<[u32]> {
        let mut trans =
            vec![0u32; (self.rows << self.shift).next_power_of_two()].into_boxed_slice();
        let mut passed = Vec::new();
        for s in (0..trie.len()).filter(|&s| !self.chain[s]) {
            let row = self.row_of(s);
            if s == 0 {
                trans[row..row + n_classes].fill(self.new_of[0]);
            } else {
                let mut f = trie.fail[s];
                passed.clear();
                while self.chain[f] {
                    passed.push(f);
                    f = trie.fail[f];
                }
                let from = self.row_of(f);
                trans.copy_within(from..from + n_classes, row);
                for &p in passed.iter().rev() {
                    for &(c, t) in trie.edges(p) {
                        trans[row + c as usize] = self.new_of[t as usize];
                    }
                }
            }
            for &(c, t) in trie.edges(s) {
                trans[row + c as usize] = self.new_of[t as usize];
            }
        }
        trans
    }

    /// The matches: the match rows', then the chain states' (with each
    /// chain state's link). Returns the links, the offsets and the pattern
    /// ids.
    #[allow(clippy::type_complexity)]
    fn matches(&self, trie: &Trie) -> (Box<[Link]>, Box<[u32]>, Box<[u32]>) {
        let mut offsets = vec![0u32];
        let mut pids = Vec::new();
        for &s in &self.by_row[self.plain..] {
            pids.extend_from_slice(trie.ends(s));
            offsets.push(pids.len() as u32);
        }
        let mut links = vec![Link::default(); self.chain_order.len().next_power_of_two()];
        for (k, &s) in self.chain_order.iter().enumerate() {
            let (edge, next) = match trie.edges(s).first() {
                Some(&(c, t)) => (u32::from(c), self.new_of[t as usize]),
                None => (NO_EDGE, 0),
            };
            let matches = if trie.ends(s).is_empty() {
                NO_MATCH
            } else {
                pids.extend_from_slice(trie.ends(s));
                offsets.push(pids.len() as u32);
                offsets.len() as u32 - 2
            };
            links[k] = Link {
                edge: if matches == NO_MATCH {
                    edge
                } else {
                    edge | REPORTS
                },
                next,
                fail: self.new_of[trie.fail[s]],
                matches,
            };
        }
        (
            links.into_boxed_slice(),
            offsets.into_boxed_slice(),
            pids.into_boxed_slice(),
        )
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

    /// What a scanner finds (a probe: a trie never builds its table).
    fn found(scanner: &Scanner, hay: &[u8]) -> Vec<usize> {
        let mut found = Vec::new();
        scanner.probe(hay, |pid| found.push(pid));
        found.sort_unstable();
        found.dedup();
        found
    }

    fn bytes(atoms: &[&str]) -> Vec<Vec<u8>> {
        atoms.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    /// The scanner with its table built, chain states from `depth`.
    fn table_at(atoms: &[Vec<u8>], depth: Option<u32>) -> Scanner {
        let lazy = Lazy::new(atoms, MAX_TABLE, depth).expect("small");
        assert!(lazy.table().is_some());
        Scanner::Table(Box::new(lazy))
    }

    /// The table four ways: chain states from depth 1 (nearly every
    /// state), from depth 4 (chains below branching rows, for short test
    /// atoms), from the default depth, and none (every state a row); and
    /// the trie its table is built from, scanning before it is.
    fn tables(atoms: &[Vec<u8>]) -> [Scanner; 5] {
        let trie = Lazy::new(atoms, MAX_TABLE, Some(CHAIN_DEPTH)).expect("small");
        [
            table_at(atoms, Some(1)),
            table_at(atoms, Some(4)),
            table_at(atoms, Some(CHAIN_DEPTH)),
            table_at(atoms, None),
            Scanner::Table(Box::new(trie)),
        ]
    }

    /// The table's rows and chain states (`None`: no table, yet).
    fn shape(scanner: &Scanner) -> Option<(usize, usize)> {
        match scanner {
            Scanner::Table(lazy) => lazy.table.get().and_then(Option::as_ref).map(Dfa::shape),
            Scanner::Nfa(_) => None,
        }
    }

    /// Chain states are built where they should be: none when disabled,
    /// and from the given depth on for every state with one edge or none;
    /// branching and shallow states keep their rows.
    #[test]
    fn chains_are_built_for_deep_single_edge_states() {
        // "rate limit exceeded" and "rate limit reached": one trie path
        // to "rate limit " (11 states below the start) that branches there.
        let atoms = bytes(&["rate limit exceeded", "rate limit reached", "tpm"]);
        let states = 1 + "rate limit ".len() + "exceeded".len() + "reached".len() + 3;
        let shape_at = |depth| shape(&table_at(&atoms, depth)).expect("a table");
        assert_eq!(shape_at(None), (states, 0));
        // From depth 3: the start, "r", "ra", "t", "tp" and the branching
        // "rate limit " keep rows.
        assert_eq!(shape_at(Some(3)), (6, states - 6));
        // From depth 1: the start and the branching state only.
        assert_eq!(shape_at(Some(1)), (2, states - 2));
        // The default depth builds chains for these atoms.
        assert!(shape_at(Some(CHAIN_DEPTH)).1 > 0);
    }

    /// Every occurrence is found whatever its place relative to the piece
    /// boundaries: every start position, in messages of every length
    /// around the split threshold.
    #[test]
    fn finds_atoms_everywhere() {
        let atoms = bytes(&["rate limit", "overloaded", "tpm"]);
        assert!(matches!(Scanner::build(&atoms), Scanner::Table(_)));
        for scanner in tables(&atoms) {
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
    }

    /// The trie is built from the patterns sorted, whatever their order
    /// and repeats: a pattern given twice reports both ids, a prefix of
    /// another its own, and each state's matches come as they were when
    /// the trie was built in pattern order (own ids in order, then its
    /// failure state's).
    #[test]
    fn unsorted_repeated_and_prefix_patterns() {
        let atoms = bytes(&["limits", "limit", "imit", "limit", "a", "rate limit"]);
        let sorted = sorted_ids(&atoms);
        assert_eq!(trie_states(&atoms, &sorted), 1 + 6 + 4 + 1 + 10);
        let (classes, _) = byte_classes(&atoms);
        let trie = Trie::build(&atoms, &sorted, 22, &classes);
        assert_eq!(trie.len(), 1 + 6 + 4 + 1 + 10);
        let state_of = |text: &[u8]| {
            text.iter().fold(0usize, |s, &b| {
                trie.edge(s, classes[b as usize]).expect("a prefix")
            })
        };
        assert_eq!(trie.ends(state_of(b"limit")), &[1, 3, 2]);
        assert_eq!(trie.ends(state_of(b"rate limit")), &[5, 1, 3, 2]);
        assert_eq!(trie.ends(state_of(b"ra")), &[4]);
        for scanner in tables(&atoms) {
            for hay in [&b"rate limits"[..], b"a limit", b"imi", b""] {
                assert_eq!(found(&scanner, hay), naive(&atoms, hay), "{hay:?}");
            }
        }
    }

    /// The trie scans until the table pays: the table is built by the
    /// [`TABLE_AFTER`]th counted scan (probes do not count), or at once
    /// when asked; what is found is the same throughout.
    #[test]
    fn the_table_is_built_once_it_pays() {
        let atoms = bytes(&["rate limit", "limit", "overloaded", "tpm"]);
        let hay = b"your rate limit was hit: 100 tpm";
        let scan = |scanner: &Scanner| {
            let mut found = Vec::new();
            scanner.scan(hay, |pid| found.push(pid));
            found.sort_unstable();
            found.dedup();
            found
        };
        let scanner = Scanner::build(&atoms);
        for _ in 0..2 * TABLE_AFTER {
            assert_eq!(found(&scanner, hay), naive(&atoms, hay));
        }
        assert_eq!(shape(&scanner), None, "probes do not build the table");
        for _ in 1..TABLE_AFTER {
            assert_eq!(scan(&scanner), naive(&atoms, hay));
        }
        assert_eq!(shape(&scanner), None);
        assert_eq!(scan(&scanner), naive(&atoms, hay));
        assert!(shape(&scanner).is_some(), "built by the last scan");
        assert_eq!(scan(&scanner), naive(&atoms, hay));

        let asked = Scanner::build(&atoms);
        asked.build_table();
        assert!(shape(&asked).is_some());
        assert_eq!(found(&asked, hay), naive(&atoms, hay));
    }

    /// Past the size limit the compact NFA scans instead, and finds the
    /// same atoms.
    #[test]
    fn falls_back_to_the_nfa_past_the_size_limit() {
        let atoms = bytes(&["rate limit", "limit", "overloaded", "tpm"]);
        let small = Scanner::build_within(&atoms, 64);
        assert!(matches!(small, Scanner::Nfa(_)));
        let big = Scanner::build(&atoms);
        assert!(matches!(big, Scanner::Table(_)));
        for hay in [
            &b"your rate limit was hit: 100 tpm"[..],
            b"overloaded overloaded limit",
            b"",
            b"nothing here at all, just a long sentence with no atom inside of it, padded out past the split",
        ] {
            assert_eq!(found(&small, hay), naive(&atoms, hay));
            assert_eq!(found(&big, hay), naive(&atoms, hay));
        }
    }

    /// Text that keeps the automaton deep in partial atoms (where a
    /// piece's run past its end is longest), with nested and overlapping
    /// atoms, agrees with brute force at every length.
    #[test]
    fn agrees_with_brute_force_on_adversarial_text() {
        let atoms = bytes(&[
            "rate limit",
            "limit",
            "rate limit exceeded",
            "aaaa",
            "aaab",
            "abab",
            "tpm",
            "rate rate rate rate x",
        ]);
        for scanner in tables(&atoms) {
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
            for len in 1..400usize {
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

    /// Many atoms over a three-letter alphabet, so that nearly every atom
    /// is a suffix or a prefix of others (long failure chains, states
    /// reporting several atoms), against brute force on random text; the
    /// table and the NFA fallback agree.
    #[test]
    fn failure_links_agree_with_brute_force() {
        let mut rng = 0x2545f4914f6cdd1du64;
        let mut next = move |m: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % m
        };
        let mut atoms: Vec<Vec<u8>> = (0..300)
            .map(|_| {
                let len = 1 + next(7) as usize;
                (0..len).map(|_| b"abc"[next(3) as usize]).collect()
            })
            .collect();
        atoms.sort();
        atoms.dedup();
        let tables = tables(&atoms);
        assert!(
            shape(&tables[1]).expect("a table").1 > 0,
            "depth 4 builds chains"
        );
        let nfa = Scanner::build_within(&atoms, 1);
        assert!(matches!(nfa, Scanner::Nfa(_)));
        for len in [0usize, 1, 5, 40, 95, 96, 97, 200, 513] {
            for _ in 0..20 {
                let hay: Vec<u8> = (0..len).map(|_| b"abcx"[next(4) as usize]).collect();
                let want = naive(&atoms, &hay);
                for table in &tables {
                    assert_eq!(
                        found(table, &hay),
                        want,
                        "{} ({:?})",
                        String::from_utf8_lossy(&hay),
                        shape(table)
                    );
                }
                assert_eq!(found(&nfa, &hay), want);
            }
        }
    }

    /// Classes follow CLASS_ORDER, not byte values: the space and common
    /// letters first, the bytes of no atom sharing the last class.
    #[test]
    fn classes_are_numbered_by_frequency() {
        let (classes, n) = byte_classes(&bytes(&["zebra 42", "é"]));
        let class = |b: u8| classes[b as usize];
        assert_eq!((class(b' '), class(b'e'), class(b'a')), (0, 1, 2));
        assert!(class(b'r') < class(b'b') && class(b'b') < class(b'z'));
        assert!(class(b'z') < class(b'2') && class(b'2') < class(b'4'));
        // `é` is C3 A9: two bytes beyond CLASS_ORDER, by value, then the
        // shared class.
        assert_eq!((class(0xa9), class(0xc3)), (8, 9));
        assert_eq!(n, 11);
        for b in [b'x', b'A', 0u8, 0xff] {
            assert_eq!(class(b), 10, "{b:#x}");
        }
    }

    /// Multi-byte UTF-8 atoms, bytes no atom holds, and an alphabet where
    /// every byte value occurs in some atom (no shared class).
    #[test]
    fn utf8_and_full_alphabets() {
        let atoms = bytes(&["余额不足", "限流", "quota"]);
        let hay = "账户余额不足，请充值 quota 限流".repeat(5);
        for scanner in tables(&atoms) {
            assert_eq!(found(&scanner, hay.as_bytes()), vec![0, 1, 2]);
        }

        let mut atoms: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b, b, b]).collect();
        atoms.push(b"abc".to_vec());
        let hay: Vec<u8> = (0..600u32)
            .map(|i| (i * 7 % 256) as u8)
            .chain(*b"zzzabc")
            .collect();
        for scanner in tables(&atoms) {
            assert_eq!(found(&scanner, &hay), naive(&atoms, &hay));
        }
    }
}
