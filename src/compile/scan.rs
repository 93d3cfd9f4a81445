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
//! * **Match states first**, so "does this state report atoms?" is one
//!   comparison.
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

use aho_corasick::automaton::Automaton;
use aho_corasick::nfa::contiguous;
use aho_corasick::{Anchored, MatchKind};

/// Below this length a message is scanned as one piece.
const SPLIT_SCAN_MIN: usize = 96;
/// How many pieces a long message is scanned as.
const PIECES: usize = 4;

/// The largest table built, in entries (256 MiB of `u32`).
const MAX_TABLE: usize = 1 << 26;

#[derive(Debug)]
pub(crate) enum Scanner {
    Dfa(Dfa),
    Nfa(contiguous::NFA),
}

impl Scanner {
    /// An automaton over `patterns` (non-empty, already lower-cased); a
    /// pattern's id is its index.
    pub(crate) fn build(patterns: &[Vec<u8>]) -> Scanner {
        Scanner::build_within(patterns, MAX_TABLE)
    }

    fn build_within(patterns: &[Vec<u8>], max_table: usize) -> Scanner {
        match Dfa::from_patterns(patterns, max_table) {
            Some(dfa) => Scanner::Dfa(dfa),
            None => Scanner::Nfa(
                contiguous::NFA::builder()
                    .match_kind(MatchKind::Standard)
                    .build(patterns)
                    .expect("literal patterns always build"),
            ),
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
            Scanner::Dfa(dfa) => dfa.scan(haystack, hit),
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

/// The dense table (see the module notes).
#[derive(Debug)]
pub(crate) struct Dfa {
    classes: [u8; 256],
    /// A state's row is `1 << shift` entries long.
    shift: u32,
    /// Next state (premultiplied) by `state + class`; the length is a
    /// power of two, padded with zeros past the last row.
    trans: Box<[u32]>,
    start: u32,
    /// States below this are match states.
    match_limit: u32,
    /// Match state `m`'s pattern ids are `pids[offsets[m]..offsets[m + 1]]`.
    offsets: Box<[u32]>,
    pids: Box<[u32]>,
    /// By state index: the length of the atom prefix the state stands for.
    depth: Box<[u32]>,
}

impl Dfa {
    /// Builds the table straight from the patterns, the textbook way: a
    /// trie over byte classes, failure links breadth-first, and each row
    /// filled from its failure state's row (already complete, being
    /// shallower) with the trie's own edges written over it. Each entry
    /// costs O(1); copying the crate's NFA state by state cost a walk of
    /// failure links per entry (6 ms for the default atoms, now under 1).
    /// States are numbered match states first. `None` when the table would
    /// exceed `max_table` entries ([`MAX_TABLE`]).
    fn from_patterns(patterns: &[Vec<u8>], max_table: usize) -> Option<Dfa> {
        // Class 0: bytes in no pattern (when there are any). Each other
        // byte: its own class.
        let mut used = [false; 256];
        patterns
            .iter()
            .flatten()
            .for_each(|&b| used[b as usize] = true);
        let mut classes = [0u8; 256];
        let mut n_classes = usize::from(used.iter().any(|u| !u));
        for b in (0..256).filter(|&b| used[b]) {
            classes[b] = n_classes as u8;
            n_classes += 1;
        }
        let shift = n_classes.next_power_of_two().trailing_zeros();

        // The size, before building anything: one state per distinct
        // prefix, plus the start.
        let mut sorted: Vec<&[u8]> = patterns.iter().map(Vec::as_slice).collect();
        sorted.sort_unstable();
        sorted.dedup();
        let mut n = 1usize;
        let mut prev: &[u8] = &[];
        for p in &sorted {
            let common = p.iter().zip(prev).take_while(|(a, b)| a == b).count();
            n += p.len() - common;
            prev = p;
        }
        if n << shift > max_table {
            return None;
        }

        // The trie: sparse edges by class, and the patterns ending at each
        // state.
        let mut edges: Vec<Vec<(u8, u32)>> = vec![Vec::new()];
        let mut ends: Vec<Vec<u32>> = vec![Vec::new()];
        for (pid, p) in patterns.iter().enumerate() {
            let mut s = 0usize;
            for &b in p {
                let c = classes[b as usize];
                s = match edges[s].iter().find(|e| e.0 == c) {
                    Some(&(_, t)) => t as usize,
                    None => {
                        let t = edges.len();
                        edges[s].push((c, t as u32));
                        edges.push(Vec::new());
                        ends.push(Vec::new());
                        t
                    }
                };
            }
            ends[s].push(pid as u32);
        }
        debug_assert_eq!(edges.len(), n);
        // Children in class order: states of one depth are then numbered
        // as before (a layout measured for the scan).
        edges.iter_mut().for_each(|e| e.sort_unstable());
        let edge = |s: usize, c: u8| edges[s].iter().find(|e| e.0 == c).map(|e| e.1 as usize);

        // Breadth-first: failure links, depths, and each state's matches
        // (its own and its failure state's: every atom ending here).
        let mut order = vec![0usize];
        let mut fail = vec![0usize; n];
        let mut depth = vec![0u32; n];
        let mut at = 0;
        while at < order.len() {
            let s = order[at];
            at += 1;
            for &(c, t) in &edges[s] {
                let t = t as usize;
                fail[t] = if s == 0 {
                    0
                } else {
                    let mut f = fail[s];
                    loop {
                        if let Some(x) = edge(f, c) {
                            break x;
                        }
                        if f == 0 {
                            break 0;
                        }
                        f = fail[f];
                    }
                };
                depth[t] = depth[s] + 1;
                let inherited = ends[fail[t]].clone();
                ends[t].extend(inherited);
                order.push(t);
            }
        }

        // Number match states first (each group in breadth-first order),
        // then fill the rows in breadth-first order.
        let mut new_of = vec![0u32; n];
        let match_states = order.iter().filter(|&&s| !ends[s].is_empty()).count();
        let (mut next_match, mut next_other) = (0u32, match_states as u32);
        for &s in &order {
            let slot = if ends[s].is_empty() {
                &mut next_other
            } else {
                &mut next_match
            };
            new_of[s] = *slot;
            *slot += 1;
        }
        let mut trans = vec![0u32; (n << shift).next_power_of_two()].into_boxed_slice();
        for &s in &order {
            let row = (new_of[s] as usize) << shift;
            if s == 0 {
                trans[row..row + n_classes].fill(new_of[0] << shift);
            } else {
                let from = (new_of[fail[s]] as usize) << shift;
                trans.copy_within(from..from + n_classes, row);
            }
            for &(c, t) in &edges[s] {
                trans[row + c as usize] = new_of[t as usize] << shift;
            }
        }
        let mut by_new = vec![0usize; n];
        for s in 0..n {
            by_new[new_of[s] as usize] = s;
        }
        let mut offsets = vec![0u32];
        let mut pids = Vec::new();
        for &s in &by_new[..match_states] {
            pids.extend_from_slice(&ends[s]);
            offsets.push(pids.len() as u32);
        }
        Some(Dfa {
            classes,
            shift,
            trans,
            start: new_of[0] << shift,
            match_limit: (match_states as u32) << shift,
            offsets: offsets.into_boxed_slice(),
            pids: pids.into_boxed_slice(),
            depth: by_new.iter().map(|&s| depth[s]).collect(),
        })
    }

    /// The loop's view of the table, in locals: the compiler keeps them in
    /// registers, and `trans` is sliced to `mask + 1` entries so that a
    /// masked index provably needs no bounds check.
    #[inline(always)]
    fn view(&self) -> View<'_> {
        let mask = self.trans.len() - 1;
        View {
            trans: &self.trans[..=mask],
            mask,
            classes: &self.classes,
            limit: self.match_limit,
        }
    }

    #[inline(always)]
    fn report(&self, s: u32, hit: &mut impl FnMut(usize)) {
        let m = (s >> self.shift) as usize;
        for &pid in &self.pids[self.offsets[m] as usize..self.offsets[m + 1] as usize] {
            hit(pid as usize);
        }
    }

    // Byte `i` of every piece per turn: an index, not an iterator.
    #[allow(clippy::needless_range_loop)]
    fn scan(&self, haystack: &[u8], mut hit: impl FnMut(usize)) {
        let t = self.view();
        let hit = &mut hit;
        let n = haystack.len();
        if n < SPLIT_SCAN_MIN {
            let mut s = self.start;
            for &b in haystack {
                s = t.step(s, b);
                if t.is_match(s) {
                    self.report(s, hit);
                }
            }
            return;
        }
        // Pieces: [0, len), [len, 2·len), …, [(K−1)·len, n).
        const K: usize = PIECES;
        let len = n / K;
        let mut sid = [self.start; K];
        let pieces: [&[u8]; K] = std::array::from_fn(|j| &haystack[j * len..j * len + len]);
        for i in 0..len {
            for j in 0..K {
                sid[j] = t.step(sid[j], pieces[j][i]);
            }
            for s in sid {
                if t.is_match(s) {
                    self.report(s, hit);
                }
            }
        }
        // The last piece's extra bytes, then the other pieces' runs past
        // their ends while a prefix begun inside them is pending.
        for &b in &haystack[K * len..] {
            sid[K - 1] = t.step(sid[K - 1], b);
            if t.is_match(sid[K - 1]) {
                self.report(sid[K - 1], hit);
            }
        }
        for (j, &s) in sid.iter().enumerate().take(K - 1) {
            let end = (j + 1) * len;
            let (mut s, mut p) = (s, end);
            while p < n && p - (self.depth[(s >> self.shift) as usize] as usize) < end {
                s = t.step(s, haystack[p]);
                if t.is_match(s) {
                    self.report(s, hit);
                }
                p += 1;
            }
        }
    }
}

struct View<'a> {
    trans: &'a [u32],
    mask: usize,
    classes: &'a [u8; 256],
    limit: u32,
}

impl View<'_> {
    #[inline(always)]
    fn step(&self, s: u32, b: u8) -> u32 {
        self.trans[(s as usize + self.classes[b as usize] as usize) & self.mask]
    }

    #[inline(always)]
    fn is_match(&self, s: u32) -> bool {
        s < self.limit
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

    fn bytes(atoms: &[&str]) -> Vec<Vec<u8>> {
        atoms.iter().map(|a| a.as_bytes().to_vec()).collect()
    }

    /// Every occurrence is found whatever its place relative to the piece
    /// boundaries: every start position, in messages of every length
    /// around the split threshold.
    #[test]
    fn finds_atoms_everywhere() {
        let atoms = bytes(&["rate limit", "overloaded", "tpm"]);
        let scanner = Scanner::build(&atoms);
        assert!(matches!(scanner, Scanner::Dfa(_)));
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

    /// Past the size limit the compact NFA scans instead, and finds the
    /// same atoms.
    #[test]
    fn falls_back_to_the_nfa_past_the_size_limit() {
        let atoms = bytes(&["rate limit", "limit", "overloaded", "tpm"]);
        let small = Scanner::build_within(&atoms, 64);
        assert!(matches!(small, Scanner::Nfa(_)));
        let big = Scanner::build(&atoms);
        assert!(matches!(big, Scanner::Dfa(_)));
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
        let table = Scanner::build(&atoms);
        let nfa = Scanner::build_within(&atoms, 1);
        assert!(matches!(table, Scanner::Dfa(_)));
        assert!(matches!(nfa, Scanner::Nfa(_)));
        for len in [0usize, 1, 5, 40, 95, 96, 97, 200, 513] {
            for _ in 0..20 {
                let hay: Vec<u8> = (0..len).map(|_| b"abcx"[next(4) as usize]).collect();
                let want = naive(&atoms, &hay);
                assert_eq!(
                    found(&table, &hay),
                    want,
                    "{}",
                    String::from_utf8_lossy(&hay)
                );
                assert_eq!(found(&nfa, &hay), want);
            }
        }
    }

    /// Multi-byte UTF-8 atoms, bytes no atom holds, and an alphabet where
    /// every byte value occurs in some atom (no shared class).
    #[test]
    fn utf8_and_full_alphabets() {
        let atoms = bytes(&["余额不足", "限流", "quota"]);
        let scanner = Scanner::build(&atoms);
        let hay = "账户余额不足，请充值 quota 限流".repeat(5);
        assert_eq!(found(&scanner, hay.as_bytes()), vec![0, 1, 2]);

        let mut atoms: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b, b, b]).collect();
        atoms.push(b"abc".to_vec());
        let scanner = Scanner::build(&atoms);
        let hay: Vec<u8> = (0..600u32)
            .map(|i| (i * 7 % 256) as u8)
            .chain(*b"zzzabc")
            .collect();
        assert_eq!(found(&scanner, &hay), naive(&atoms, &hay));
    }
}
