//! The JSONL stream (`failover::stream`, what `failover classify
//! FILE` runs), lines/s, against baselines in the same run: the matcher
//! alone on pre-parsed errors (no JSON), and a plain loop that parses each
//! line with serde, classifies it and writes its verdict with
//! `stream::verdict_line` (what an embedder would write without the
//! pipeline); the pipeline with 1, 2 and 4 workers. Results and analysis:
//! `benches/README.md`.
//!
//! `FAILOVER_BENCH_ONCE=none|matcher|plain|pipeline1|pipeline2 [FAILOVER_BENCH_LINES=N]`
//! runs one pass over the corpus instead and exits, for
//! `valgrind --tool=callgrind` instruction counts.

use std::borrow::Cow;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use failover::stream::{self, Options};
use failover::{Engine, ProviderError, Scratch};
use serde::Deserialize;

#[path = "support/corpus.rs"]
mod corpus;

const LINES: usize = 10_000;

/// `n` JSONL lines of the classify contract: the corpus, with one line in
/// a hundred replaced by a bad line (broken JSON, not an object, a status
/// that is not a number, a body of the wrong type), as in
/// `examples/bad-lines.jsonl`.
fn input(n: usize) -> (Vec<corpus::Sample>, Vec<u8>) {
    const BAD: [&str; 4] = [
        r#"{"provider": "openai", "message": "this line has a broken quote}"#,
        r#"["not", "an", "object"]"#,
        r#"{"status": "soon", "message": "status that is not a number"}"#,
        r#"{"body": 42}"#,
    ];
    let samples = corpus::corpus(n, 0x5eed);
    let mut text = Vec::new();
    for (i, s) in samples.iter().enumerate() {
        if i % 100 == 99 {
            text.extend_from_slice(BAD[(i / 100) % BAD.len()].as_bytes());
        } else {
            text.extend_from_slice(s.to_jsonl().as_bytes());
        }
        text.push(b'\n');
    }
    (samples, text)
}

/// The baseline's line: the contract's fields, borrowed where unescaped.
#[derive(Deserialize)]
struct Line<'a> {
    #[serde(borrow, default)]
    message: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    provider: Option<Cow<'a, str>>,
    #[serde(default)]
    status: Option<u16>,
    #[serde(borrow, default)]
    code: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    error_type: Option<Cow<'a, str>>,
}

/// The plain loop: parse, classify, write, one line after another on one
/// thread (bad lines get a short error line).
fn plain_loop(engine: &Engine, scratch: &mut Scratch, text: &[u8], out: &mut Vec<u8>) -> usize {
    out.clear();
    let mut n = 0;
    for line in text.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        n += 1;
        let parsed = std::str::from_utf8(line)
            .ok()
            .and_then(|t| serde_json::from_str::<Line>(t).ok());
        match parsed {
            Some(l) => {
                let err = ProviderError {
                    provider: l.provider.as_deref(),
                    status: l.status,
                    code: l.code.as_deref(),
                    error_type: l.error_type.as_deref(),
                    message: l.message.as_deref(),
                    ..ProviderError::default()
                };
                let c = engine.classify_with(&err, scratch);
                out.extend_from_slice(stream::verdict_line(&c).as_bytes());
            }
            None => out.extend_from_slice(br#"{"error":"bad line"}"#),
        }
        out.push(b'\n');
    }
    n
}

fn matcher_only(engine: &Engine, scratch: &mut Scratch, samples: &[corpus::Sample]) -> usize {
    samples
        .iter()
        .map(|s| engine.classify_with(&s.as_error(), scratch).reason_id.0 as usize)
        .sum()
}

fn pipeline(engine: &Engine, text: &[u8], workers: usize, out: &mut Vec<u8>) -> u64 {
    out.clear();
    let options = Options::default().workers(workers);
    stream::classify(engine, text, &mut *out, &options, |_| {})
        .expect("writing to a Vec cannot fail")
        .lines
}

fn streams(c: &mut Criterion) {
    let engine = Engine::builtin();
    let (samples, text) = input(LINES);
    let mut scratch = Scratch::default();
    let mut out = Vec::with_capacity(text.len());
    let mut group = c.benchmark_group("stream");
    group.throughput(Throughput::Elements(LINES as u64));
    group.bench_function("matcher-only-baseline", |b| {
        b.iter(|| matcher_only(&engine, &mut scratch, &samples))
    });
    group.bench_function("plain-loop-baseline", |b| {
        b.iter(|| plain_loop(&engine, &mut scratch, &text, &mut out))
    });
    for workers in [1usize, 2, 4] {
        group.bench_with_input(
            BenchmarkId::new("pipeline", format!("workers={workers}")),
            &workers,
            |b, &workers| b.iter(|| pipeline(&engine, &text, workers, &mut out)),
        );
    }
    group.finish();
}

criterion_group!(benches, streams);

fn main() {
    if let Ok(what) = std::env::var("FAILOVER_BENCH_ONCE") {
        let lines = std::env::var("FAILOVER_BENCH_LINES")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(LINES);
        let engine = Engine::builtin();
        let (samples, text) = input(lines);
        let mut scratch = Scratch::default();
        let mut out = Vec::with_capacity(text.len());
        let n = match what.as_str() {
            "matcher" => matcher_only(&engine, &mut scratch, &samples),
            "plain" => plain_loop(&engine, &mut scratch, &text, &mut out),
            "pipeline1" => pipeline(&engine, &text, 1, &mut out) as usize,
            "pipeline2" => pipeline(&engine, &text, 2, &mut out) as usize,
            // Building the engine and the corpus only: subtracted from the others.
            "none" => 0,
            other => {
                panic!("FAILOVER_BENCH_ONCE={other}: none, matcher, plain, pipeline1 or pipeline2")
            }
        };
        std::hint::black_box(n);
        eprintln!("{what}: {lines} lines, {} output bytes", out.len());
        return;
    }
    benches();
    Criterion::default().configure_from_args().final_summary();
}
