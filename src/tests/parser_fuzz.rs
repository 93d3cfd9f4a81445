//! Property test: random and mutated rule text never panics the parser or
//! the compiler; every input yields a ruleset or error diagnostics.
//!
//! `cargo test` tries 32 inputs per property; `FAILOVER_DEEP=1` (CI sets
//! it) tries 256.

use crate::load::{build_layers, DEFAULT_RULES};
use proptest::prelude::*;

fn compile(text: Vec<u8>) {
    let build = build_layers(
        vec![("fuzz".into(), vec![("fuzz.rules".into(), text)])],
        true,
    );
    assert!(
        build.ruleset.is_some() || build.has_errors(),
        "neither a ruleset nor an error"
    );
    // Rendering must not panic either (spans inside multi-byte text, etc.).
    let _ = crate::diag::render_all(&build.diagnostics, &build.sources);
}

/// Fragments of the language, so random sequences get deep into the grammar.
const TOKENS: &[&str] = &[
    "rule ",
    "reason ",
    "provider ",
    "selection ",
    "when ",
    "=> ",
    "and ",
    "or ",
    "not ",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ";",
    ",",
    "\"",
    "\\",
    "/",
    "..",
    "==",
    "!=",
    "has ",
    "any ",
    "all ",
    "in ",
    "matches ",
    "starts with ",
    "is empty ",
    "message ",
    "status ",
    "body.error.code ",
    "429 ",
    "1000 ",
    "a.b ",
    "rate_limit ",
    "\"quota\" ",
    "/x+/i ",
    "# c\n",
    "\n",
    "é",
    "€",
    "fallbacks ",
    "strict ",
    "else ",
    "failover; ",
    "stop",
    "disable billing",
    "\u{0}",
];

fn token_soup() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop::sample::select(TOKENS), 0..60)
        .prop_map(|ts| ts.concat().into_bytes())
}

fn mutated_defaults() -> impl Strategy<Value = Vec<u8>> {
    let base: Vec<u8> = DEFAULT_RULES
        .iter()
        .map(|(_, t)| *t)
        .collect::<Vec<_>>()
        .join("\n")
        .into_bytes();
    let len = base.len();
    (
        prop::collection::vec((0..len, any::<u8>(), 0u8..3), 1..8),
        Just(base),
    )
        .prop_map(|(edits, mut text)| {
            for (pos, byte, kind) in edits {
                let pos = pos.min(text.len());
                match kind {
                    0 if pos < text.len() => text[pos] = byte,
                    1 => text.insert(pos, byte),
                    _ if pos < text.len() => {
                        text.remove(pos);
                    }
                    _ => {}
                }
            }
            // Operator layer must not redeclare the defaults' names, or every
            // case would only test E011; rename reasons and selections.
            String::from_utf8_lossy(&text)
                .replace("reason ", "reason x_")
                .replace("selection ", "selection x_")
                .into_bytes()
        })
}

fn cases() -> u32 {
    super::cases(32)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), .. ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        compile(bytes);
    }

    #[test]
    fn token_soup_never_panics(text in token_soup()) {
        compile(text);
    }

    #[test]
    fn mutated_rules_never_panic(text in mutated_defaults()) {
        compile(text);
    }
}
