//! The embedded default ruleset, compiled ahead of time (issue 47).
//!
//! Compiling the defaults — parsing some 60 KB of rules, analysing every
//! regex for the atoms it needs, building the plan and the atoms' trie —
//! was most of a one-shot command's start-up (about 11 ms of 15). The
//! compiled ruleset and plan are instead *frozen*: written once in serde's
//! compact binary form (postcard) to `rules/defaults.frozen`, embedded in
//! the binary, and *thawed* at start-up, which only reads them back.
//!
//! The frozen form is used only where it is exactly what a compile would
//! give: the defaults alone, without lints (`classify`, `serve`, `chain`,
//! the bindings), and only when its header names this format, this
//! version of failover and the very rules texts embedded beside it (a
//! hash of every file's name and text). Anything else — an operator
//! layer, `check` (which runs the lints), a rules file edited since the
//! freeze, a damaged file — compiles as before, so a stale or bad frozen
//! file costs time, never a wrong verdict.
//!
//! Nothing is frozen that a thaw could not rebuild exactly: the regexes
//! stay unbuilt (each builds on its first use, as the defaults' always
//! did), the substring searchers are frozen as their texts, and the scan's
//! table is built when it pays, as a new scanner's is. The test
//! `the_frozen_defaults_are_a_fresh_compile` holds the committed file to a
//! fresh compile, byte for byte, and the thawed ruleset to the compiled
//! one; `FAILOVER_FREEZE=1 cargo test --lib frozen` writes it again after
//! a change to the rules or to the compiler.

use super::{Plan, Ruleset};

/// The frozen defaults, as committed.
pub(crate) static DEFAULTS: &[u8] = include_bytes!("../../rules/defaults.frozen");

/// The file's first bytes. Then: the format (`u32`, little-endian), the
/// version (a length byte and the text), the hash of the rules texts, the
/// hash of the body (`u64`s), and the body: `(Ruleset, Plan)` in postcard.
const MAGIC: &[u8; 8] = b"failover";
/// The layout of what follows the header; a change to the IR or the plan
/// changes the bytes (the test above fails until the file is frozen
/// again), and this number says the old layout is not read.
const FORMAT: u32 = 1;
/// What the file was frozen by.
const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The frozen form of `ruleset` and `plan`, compiled from `rules` (the
/// (name, text) of every file, in order). Only the test above freezes.
#[cfg(test)]
pub(crate) fn freeze(
    ruleset: &Ruleset,
    plan: &Plan,
    rules: &[(&str, &str)],
) -> Result<Vec<u8>, postcard::Error> {
    let mut out = Vec::with_capacity(1 << 20);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&FORMAT.to_le_bytes());
    out.push(VERSION.len() as u8);
    out.extend_from_slice(VERSION.as_bytes());
    out.extend_from_slice(&texts_hash(rules).to_le_bytes());
    let body = postcard::to_allocvec(&(ruleset, plan))?;
    out.extend_from_slice(&hash(0, [body.as_slice()]).to_le_bytes());
    out.extend_from_slice(&body);
    Ok(out)
}

/// The ruleset and plan frozen in `bytes`, when its header names this
/// format and version and the hash of `rules`, and the rest reads back
/// whole and consistent; `None` otherwise (then the caller compiles).
pub(crate) fn thaw(bytes: &[u8], rules: &[(&str, &str)]) -> Option<(Ruleset, Plan)> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (format, rest) = rest.split_first_chunk::<4>()?;
    if u32::from_le_bytes(*format) != FORMAT {
        return None;
    }
    let (&len, rest) = rest.split_first()?;
    let (version, rest) = rest.split_at_checked(usize::from(len))?;
    if version != VERSION.as_bytes() {
        return None;
    }
    let (texts, rest) = rest.split_first_chunk::<8>()?;
    if u64::from_le_bytes(*texts) != texts_hash(rules) {
        return None;
    }
    let (sum, body) = rest.split_first_chunk::<8>()?;
    if u64::from_le_bytes(*sum) != hash(0, [body]) {
        return None;
    }
    let (ruleset, plan): (Ruleset, Plan) = match postcard::from_bytes(body) {
        Ok(frozen) => frozen,
        Err(_) => return None,
    };
    consistent(&ruleset, &plan, rules.len()).then_some((ruleset, plan))
}

/// Whether the indices the runtime follows stay in range: every rule's
/// reason and file, every rule index of the plan. (The hashes and the
/// format already make a mismatch all but impossible.)
fn consistent(ruleset: &Ruleset, plan: &Plan, files: usize) -> bool {
    let rules = ruleset.rules.len();
    let reasons = ruleset.reasons.len();
    let in_range = |list: &Vec<u32>| list.iter().all(|&r| (r as usize) < rules);
    ruleset
        .rules
        .iter()
        .all(|r| (r.reason.0 as usize) < reasons && (r.span.file.0 as usize) < files)
        && (ruleset.unclassified.0 as usize) < reasons
        && plan.routes.len() == rules
        && plan.by_status.len() == 500
        && plan.atom_rules.len() == plan.atom_texts.len()
        && plan.atom_rules.iter().all(in_range)
        && plan.by_status.iter().all(in_range)
        && plan.always.iter().all(|&r| (r as usize) < rules)
        && [&plan.by_provider, &plan.by_code, &plan.by_type]
            .iter()
            .all(|t| t.values().all(in_range))
}

/// A hash of every file's name and text: enough to tell an edited rules
/// file (it is no defence against a forger, and need not be).
fn texts_hash(rules: &[(&str, &str)]) -> u64 {
    hash(
        rules.len() as u64,
        rules
            .iter()
            .flat_map(|(name, text)| [name.as_bytes(), text.as_bytes()]),
    )
}

/// A hash of `parts`, eight bytes at a time (one multiplication per
/// word: the whole thaw, these hashes included, takes about 1.4 ms).
/// Written out rather than taken from a hashing crate so that its value
/// never changes with a dependency's version.
fn hash<'a>(seed: u64, parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut h = seed;
    let mut mix = |w: u64| h = (h ^ w).wrapping_mul(K).rotate_left(29);
    for part in parts {
        mix(part.len() as u64);
        let mut words = part.chunks_exact(8);
        for w in &mut words {
            mix(u64::from_le_bytes(w.try_into().unwrap_or_default()));
        }
        let mut tail = [0u8; 8];
        tail[..words.remainder().len()].copy_from_slice(words.remainder());
        mix(u64::from_le_bytes(tail));
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::DEFAULT_RULES;

    /// A fresh compile of the defaults, never thawed.
    fn compiled() -> (Ruleset, Plan) {
        let build = crate::load::compile_defaults_now();
        (build.ruleset.unwrap(), build.plan.unwrap())
    }

    /// Issue 47: the committed frozen file is exactly what the compiler
    /// gives today, and what thaws from it is the compiled ruleset and
    /// plan (their whole `Debug` text: rules, conditions, literals, atom
    /// sets, tables, trie). `FAILOVER_FREEZE=1` writes the file again.
    #[test]
    fn the_frozen_defaults_are_a_fresh_compile() {
        let (ruleset, plan) = compiled();
        let fresh = freeze(&ruleset, &plan, DEFAULT_RULES).unwrap();
        if fresh != DEFAULTS {
            let path = concat!(env!("CARGO_MANIFEST_DIR"), "/rules/defaults.frozen");
            if std::env::var_os("FAILOVER_FREEZE").is_some() {
                std::fs::write(path, &fresh).unwrap();
                panic!("wrote {path} ({} bytes): build again", fresh.len());
            }
            panic!(
                "{path} is not what the compiler gives today (the rules or the compiler \
                 changed): run `FAILOVER_FREEZE=1 cargo test --lib frozen` and commit it"
            );
        }
        let (thawed, thawed_plan) = thaw(DEFAULTS, DEFAULT_RULES).expect("the frozen file thaws");
        assert_eq!(format!("{thawed:?}"), format!("{ruleset:?}"));
        // It freezes again to the same bytes.
        assert_eq!(
            freeze(&thawed, &thawed_plan, DEFAULT_RULES).unwrap(),
            DEFAULTS
        );
        assert_eq!(debug(thawed_plan), debug(plan));
    }

    /// The plan's `Debug` text, its hash tables in key order.
    fn debug(mut plan: Plan) -> String {
        let tables = [&mut plan.by_provider, &mut plan.by_code, &mut plan.by_type].map(|t| {
            std::mem::take(t)
                .into_iter()
                .collect::<std::collections::BTreeMap<_, _>>()
        });
        format!("{plan:?} {tables:?}")
    }

    /// The engine the command line builds thaws the file, and classifies
    /// as the compiled rules do (every golden case runs through it in
    /// `golden_cases`; this checks that it is the thawed one).
    #[test]
    fn the_embedded_defaults_are_thawed() {
        let build = crate::load::build_unlinted(&[], true).unwrap();
        assert!(build.is_frozen());
        assert!(build.diagnostics.is_empty());
        assert_eq!(build.rule_count(), compiled().0.rules.len());
        // Operator layers and `check`'s lints compile.
        assert!(!crate::load::build(&[], true).unwrap().is_frozen());
        let op = crate::load::build_layers(
            vec![(
                "ops".to_string(),
                vec![(
                    "a.rules".to_string(),
                    b"rule a.x when message has \"zzz\" => rate_limit\n".to_vec(),
                )],
            )],
            true,
        );
        assert!(!op.is_frozen());
    }

    /// A rules text edited since the freeze, another version, another
    /// format, a cut or damaged file: none thaws (the caller compiles),
    /// and none panics.
    #[test]
    fn a_stale_or_damaged_file_is_not_thawed() {
        assert!(thaw(DEFAULTS, DEFAULT_RULES).is_some());
        let mut edited: Vec<(&str, &str)> = DEFAULT_RULES.to_vec();
        edited[3].1 = "rule x.y when status 429 => rate_limit\n";
        assert!(thaw(DEFAULTS, &edited).is_none());
        assert!(thaw(DEFAULTS, &DEFAULT_RULES[1..]).is_none());
        let mut other = DEFAULTS.to_vec();
        other[8] ^= 1; // the format
        assert!(thaw(&other, DEFAULT_RULES).is_none());
        let mut other = DEFAULTS.to_vec();
        other[13] ^= 1; // the version's text
        assert!(thaw(&other, DEFAULT_RULES).is_none());
        for cut in [0, 7, 12, 30, DEFAULTS.len() / 2, DEFAULTS.len() - 1] {
            assert!(
                thaw(&DEFAULTS[..cut], DEFAULT_RULES).is_none(),
                "cut at {cut}"
            );
        }
        // A byte flipped anywhere: refused (the body's hash), never a
        // panic.
        for i in (0..DEFAULTS.len()).step_by(DEFAULTS.len() / 211) {
            let mut damaged = DEFAULTS.to_vec();
            damaged[i] ^= 0x5a;
            assert!(thaw(&damaged, DEFAULT_RULES).is_none(), "byte {i}");
        }
    }

    /// The hash reads every byte of names and texts, the tail included.
    #[test]
    fn the_hash_sees_every_byte() {
        let base = texts_hash(&[("a.rules", "0123456789abc")]);
        assert_ne!(
            hash(0, [b"12345678".as_slice()]),
            hash(0, [b"12345679".as_slice()])
        );
        assert_ne!(base, texts_hash(&[("a.rules", "0123456789abd")]));
        assert_ne!(base, texts_hash(&[("b.rules", "0123456789abc")]));
        assert_ne!(base, texts_hash(&[("a.rules", "0123456789ab")]));
        assert_ne!(base, texts_hash(&[("a.rules0123456789abc", "")]));
        assert_eq!(base, texts_hash(&[("a.rules", "0123456789abc")]));
    }
}
