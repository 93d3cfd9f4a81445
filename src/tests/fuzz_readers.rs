//! A fuzz target per reader (issue 16): rules, golden cases, scenarios,
//! gateway config, the three state files, a JSONL line and a provider's
//! JSON body. Each starts from the shipped files of its kind and applies
//! random mutations (byte flips, inserted tokens that matter to that
//! format, deleted and duplicated ranges, truncation). Every input must be
//! read without a panic, within a time bound, and give a result or a
//! clear error.
//!
//! `cargo test` runs 64 inputs per target; `FUZZ_CASES=N` runs N (CI runs
//! a bounded number, see `.ci/run`). Each target prints its random seed
//! when it starts (`FUZZ_SEED=N` replays a run) and how many inputs it
//! tried.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{default_cases, repo_root};
use crate::config::{Format, GatewayConfig};
use crate::load::{build_layers, DEFAULT_RULES};
use crate::store::{AuthProfiles, AuthState, SessionStore};
use crate::{Body, Engine, ProviderError};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};

/// What one input may cost at most (debug build, shared machine).
const PER_INPUT: Duration = Duration::from_secs(10);

fn cases() -> u32 {
    std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

fn root() -> &'static Path {
    static ROOT: OnceLock<std::path::PathBuf> = OnceLock::new();
    ROOT.get_or_init(repo_root)
}

fn read_all(dir: &str, suffix: &str) -> Vec<Vec<u8>> {
    crate::load::files_with_suffix(&root().join(dir), suffix)
        .unwrap()
        .iter()
        .map(|p| std::fs::read(p).unwrap())
        .collect()
}

#[derive(Clone, Debug)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, usize),
    Delete(usize, usize),
    Duplicate(usize, usize, u8),
    Truncate(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Flip(a, b)),
        (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        (any::<usize>(), 0usize..64).prop_map(|(a, b)| Mutation::Delete(a, b)),
        (any::<usize>(), 0usize..256, 1u8..8).prop_map(|(a, b, c)| Mutation::Duplicate(a, b, c)),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn mutate(seed: &[u8], muts: &[Mutation], tokens: &[&str]) -> Vec<u8> {
    let mut v = seed.to_vec();
    for m in muts {
        let at = |x: usize, v: &Vec<u8>| if v.is_empty() { 0 } else { x % (v.len() + 1) };
        match *m {
            Mutation::Flip(a, b) if !v.is_empty() => {
                let i = a % v.len();
                v[i] ^= b;
            }
            Mutation::Insert(a, t) => {
                let i = at(a, &v);
                let tok = tokens[t % tokens.len()].as_bytes();
                v.splice(i..i, tok.iter().copied());
            }
            Mutation::Delete(a, n) => {
                let i = at(a, &v);
                let end = (i + n).min(v.len());
                v.drain(i..end);
            }
            Mutation::Duplicate(a, n, times) => {
                let i = at(a, &v);
                let end = (i + n).min(v.len());
                let piece: Vec<u8> = v[i..end].to_vec();
                for _ in 0..times {
                    v.splice(end..end, piece.iter().copied());
                }
            }
            Mutation::Truncate(a) => {
                let i = at(a, &v);
                v.truncate(i);
            }
            _ => {}
        }
    }
    v
}

/// Fake secrets in every form the redaction knows (R16.11), inserted as
/// tokens by every target: `(the token, a part of it no output may hold)`.
const SECRETS: &[(&str, &str)] = &[
    ("sk-FAKE-0123456789abcdefghij", "0123456789abcdef"),
    ("Bearer fAkEtOkEn.PaYlOaDxYz.sIgNaTuRe", "PaYlOaDxYz"),
    ("bearer lowEr.CaSeToKeN42.x", "CaSeToKeN42"),
    ("Basic dXNlcjpodW50ZXIyMg==", "dXNlcjpodW50ZXIy"),
    (
        "https://bob:Hunter2Secret9@example.com/v1",
        "Hunter2Secret9",
    ),
];

/// The secrets' tokens, to add to a target's own.
fn with_secrets(tokens: &[&'static str]) -> Vec<&'static str> {
    tokens
        .iter()
        .copied()
        .chain(SECRETS.iter().map(|s| s.0))
        .collect()
}

/// Whether `c` continues a word a secret could be glued to.
fn word(c: char) -> bool {
    c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+' | '=' | ':' | '@')
}

/// Where `token` stands in `text` whole: not glued to a neighbouring
/// word, which would make it another word (mutations cut and splice).
fn whole_copies<'a>(text: &'a str, token: &'a str) -> impl Iterator<Item = usize> + 'a {
    text.match_indices(token).filter_map(move |(i, _)| {
        let glued = text[..i].chars().next_back().is_some_and(word)
            || text[i + token.len()..].chars().next().is_some_and(word);
        (!glued).then_some(i)
    })
}

fn intact(text: &str, token: &str) -> bool {
    whole_copies(text, token).next().is_some()
}

/// `text` with every whole copy of `token` taken out.
fn without_intact(text: &str, token: &str) -> String {
    let mut rest = String::with_capacity(text.len());
    let mut from = 0;
    for i in whole_copies(text, token) {
        rest.push_str(&text[from..i]);
        from = i + token.len();
    }
    rest.push_str(&text[from..]);
    rest
}

/// R16.11: what a reader prints about `input` (an error, a diagnostic, an
/// output line) holds no secret that stood whole in it, in two checks:
/// - the secret in its form (`bearer x.y`, standing whole) never reaches
///   the output;
/// - when the input holds the secret's core only inside such whole
///   copies, no part of the core does either.
///
/// Mutations cut and splice: a copy glued to a neighbouring word
/// (`agbearer x.yz`) or with its scheme cut (`fallbacarer x.y`) is
/// another word, which no redactor can tell from text, and a reader may
/// quote it as it is. When the input holds such a copy beside a whole
/// one, only the first check applies.
fn assert_no_secret(name: &str, input: &[u8], output: &str) {
    let input = String::from_utf8_lossy(input);
    if let Some(token) = leaked(&input, output) {
        panic!("{name}: the secret `{token}` reached the output:\n{output}\n--- input\n{input}");
    }
}

/// The first secret of [`SECRETS`] that `output` leaks, by the two checks
/// of [`assert_no_secret`].
fn leaked(input: &str, output: &str) -> Option<&'static str> {
    SECRETS.iter().find_map(|&(token, core)| {
        let leak = intact(input, token)
            && (intact(output, token)
                || (!without_intact(input, token).contains(core) && output.contains(core)));
        leak.then_some(token)
    })
}

// The oracle itself, on the two cases CI runs found (the config reader's
// diagnostic quoted a broken copy while the input also held the token
// whole): broken copies quoted as they are pass; the whole secret beside
// them, or any part of its core when the input holds it only whole, fails.
#[test]
fn the_oracle_leaves_out_broken_copies_only() {
    let (token, core) = SECRETS[2];
    let fails = |input: &str, output: &str| leaked(input, output) == Some(token);
    let glued = format!("\"ag{token}ents\"[: {{\n}}{token}\n");
    let quoted = format!("2 |   \"ag{token}ents\"[: {{");
    assert_eq!(
        leaked(&glued, &quoted),
        None,
        "a glued copy is another word"
    );
    assert!(fails(&glued, &format!("{quoted}\n3 | }}{token}")));
    let cut = format!("   {token} model:\n     fallbac{}", &token[3..]);
    assert_eq!(leaked(&cut, &format!("5 |   fallbac{}", &token[3..])), None);
    assert!(fails(&cut, &format!("3 |   {token} model:")));
    let whole_only = format!("   {token} model:\n");
    assert!(
        fails(&whole_only, &format!("3 |   {core}")),
        "a part of the core"
    );
    assert_eq!(leaked(&whole_only, "3 |   bearer *** model:"), None);
}

/// Runs `target` on `cases()` mutations of the seeds; returns the count.
/// `target` returns what the reader would print about the input (errors,
/// diagnostics, output lines): it must hold none of the [`SECRETS`].
fn fuzz(
    name: &str,
    seeds: Vec<Vec<u8>>,
    tokens: &[&'static str],
    target: impl Fn(&[u8]) -> String,
) {
    assert!(!seeds.is_empty(), "{name}: no seed files");
    let tokens = with_secrets(tokens);
    let tried = AtomicU64::new(0);
    let seed = failover_testkit::FuzzSeed::from_env();
    eprintln!("fuzz {name}: {seed}");
    let config = Config {
        cases: cases(),
        failure_persistence: None,
        ..Config::default()
    };
    let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed.bytes());
    let mut runner = TestRunner::new_with_rng(config, rng);
    let strategy = (0..seeds.len(), proptest::collection::vec(mutation(), 1..8));
    let result = runner.run(&strategy, |(s, muts)| {
        let input = mutate(&seeds[s], &muts, &tokens);
        let started = Instant::now();
        let output = target(&input);
        assert_no_secret(name, &input, &output);
        tried.fetch_add(1, Ordering::Relaxed);
        prop_assert!(
            started.elapsed() < PER_INPUT,
            "{name}: {:?} on {} bytes",
            started.elapsed(),
            input.len()
        );
        Ok(())
    });
    eprintln!("fuzz {name}: {} inputs", tried.load(Ordering::Relaxed));
    if let Err(e) = result {
        panic!("{name} ({seed} replays it): {e}");
    }
}

const YAML_TOKENS: &[&str] = &[
    "[", "]", "{", "}", "'", "\"", ": ", "- ", "\n", "\n  ", "#", "&a ", "*a", "<<: *a\n",
    "!!str ", "|\n", ">\n", "---\n", "don't", "\\", "\t", "?", ",", "null", "~", "1e999", "-1",
    "+5m",
];
const JSON_TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ":",
    ",",
    "null",
    "true",
    "-1",
    "1e400",
    "18446744073709551616",
    "\"\\u0000\"",
    "\\",
    "\"x\":",
    "\"key\": \"sk-FAKE-0123456789abcdef\"",
    "\"",
    "\u{feff}",
    "\n",
];

#[test]
fn fuzz_rules() {
    let seeds = DEFAULT_RULES
        .iter()
        .map(|(_, t)| t.as_bytes().to_vec())
        .collect();
    let tokens = &[
        "rule x.y ",
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
        "\"",
        "/",
        "/(a{1000}){1000}/",
        "has any ",
        "matches ",
        "status ",
        "in ",
        "..",
        "#",
        "\n",
        "\\u{",
        "provider ",
        "reason ",
        "selection ",
    ];
    fuzz("rules", seeds, tokens, |input| {
        let build = build_layers(
            vec![("fuzz".into(), vec![("fuzz.rules".into(), input.to_vec())])],
            true,
        );
        assert!(build.ruleset.is_some() || build.has_errors());
        crate::diag::render_all(&build.diagnostics, &build.sources)
    });
}

#[test]
fn fuzz_cases() {
    let seeds = default_cases()
        .iter()
        .map(|(_, t)| t.as_bytes().to_vec())
        .collect();
    fuzz(
        "cases",
        seeds,
        YAML_TOKENS,
        |input| match crate::golden::parse_cases("fuzz.cases.yaml", &String::from_utf8_lossy(input))
        {
            Ok(_) => String::new(),
            Err(e) => crate::diag::render_all(&e.diagnostics, &e.sources),
        },
    );
}

#[test]
fn fuzz_scenarios() {
    let seeds = read_all("examples/scenarios", ".yaml");
    fuzz("scenario", seeds, YAML_TOKENS, |input| {
        let text = String::from_utf8_lossy(input);
        crate::run::scenario::parse_scenario(&text, Path::new("fuzz.yaml"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    });
}

#[test]
fn fuzz_config() {
    let mut seeds = read_all("examples/configs", ".yaml");
    seeds.extend(read_all("tests/fixtures", ".yaml"));
    fuzz("config (YAML)", seeds, YAML_TOKENS, |input| {
        let text = String::from_utf8_lossy(input);
        match GatewayConfig::parse(&text, Format::Yaml, "fuzz.yaml") {
            Ok(c) => crate::config::render_problems(&c.warnings, &c.name, &c.text),
            Err(e) => e.to_string(),
        }
    });
    fuzz(
        "config (JSON)",
        read_all("examples/configs", ".json"),
        JSON_TOKENS,
        |input| {
            let text = String::from_utf8_lossy(input);
            match GatewayConfig::parse(&text, Format::Json, "fuzz.json") {
                Ok(c) => crate::config::render_problems(&c.warnings, &c.name, &c.text),
                Err(e) => e.to_string(),
            }
        },
    );
}

#[test]
fn fuzz_state_files() {
    let seeds = read_all("tests/fixtures/state", ".json");
    fuzz("state files", seeds, JSON_TOKENS, |input| {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(input) else {
            return String::new();
        };
        let path = Path::new("fuzz.json");
        let mut problems = Vec::new();
        if let Ok(p) = AuthProfiles::from_json(v.clone(), path, &mut problems) {
            let _ = p.to_json();
        }
        if let Ok(s) = AuthState::from_json(v.clone(), path, &mut problems) {
            let _ = s.to_json();
        }
        if let Ok(s) = SessionStore::from_json(v, path, &mut problems) {
            let _ = s.to_json();
        }
        problems.iter().map(|p| format!("{p}\n")).collect()
    });
}

fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(Engine::builtin)
}

#[test]
fn fuzz_jsonl_lines() {
    let mut seeds: Vec<Vec<u8>> = Vec::new();
    for f in ["examples/errors.jsonl", "examples/bad-lines.jsonl"] {
        let text = std::fs::read(root().join(f)).unwrap();
        seeds.extend(text.split(|&b| b == b'\n').map(<[u8]>::to_vec));
    }
    fuzz("JSONL line", seeds, JSON_TOKENS, |input| {
        let mut out = Vec::new();
        crate::classify::stream::classify(
            engine(),
            std::io::Cursor::new(input.to_vec()),
            &mut out,
            &crate::classify::stream::Options::default().explain(true),
            |_| {},
        )
        .unwrap();
        // One output line per input line (blank lines are skipped).
        let lines = input
            .split(|&b| b == b'\n')
            .filter(|l| !l.iter().all(u8::is_ascii_whitespace))
            .count();
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), lines);
        String::from_utf8(out).unwrap()
    });
}

#[test]
fn fuzz_provider_bodies() {
    let text = std::fs::read_to_string(root().join("examples/errors.jsonl")).unwrap();
    let seeds: Vec<Vec<u8>> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| v.get("body").map(|b| b.to_string().into_bytes()))
        .collect();
    fuzz("provider JSON body", seeds, JSON_TOKENS, |input| {
        let text = String::from_utf8_lossy(input);
        let e = ProviderError::message("").with_body(Body::Text(&text));
        let mut out = format!("{:?}", engine().classify(&e));
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            let c = engine().classify(
                &ProviderError::message("x")
                    .with_body(Body::Json(&v))
                    .with_status(429),
            );
            out.push_str(&format!("{c:?}"));
        }
        out
    });
}
