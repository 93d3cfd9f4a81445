//! Classification throughput (messages/s) with the default rules, against
//! two baselines in the same run: naive (every rule's patterns as
//! case-insensitive regexes, tried rule by rule, `support/naive.rs`) and
//! exhaustive (this engine's verifiers on every rule, no automaton); scaling with +1,000 and +10,000 operator rules; compile
//! time. Results and analysis: `benches/README.md`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use failover::classify::Scratch;
use failover::load::build_layers;
use failover::Engine;

#[path = "support/corpus.rs"]
mod corpus;
#[path = "support/naive.rs"]
mod naive;

const CORPUS: usize = 10_000;

fn engine_with(extra: usize) -> Engine {
    let layers = if extra == 0 {
        Vec::new()
    } else {
        vec![(
            "ops".to_string(),
            vec![(
                "ops.rules".to_string(),
                corpus::operator_rules(extra).into_bytes(),
            )],
        )]
    };
    Engine::from_build(build_layers(layers, true)).expect("rules compile")
}

fn classify(c: &mut Criterion) {
    let samples = corpus::corpus(CORPUS, 0x5eed);
    let mut group = c.benchmark_group("classify");
    group.throughput(Throughput::Elements(samples.len() as u64));
    for extra in [0usize, 1_000, 10_000] {
        let engine = engine_with(extra);
        let mut scratch = Scratch::default();
        let label = format!("defaults+{extra}");
        group.bench_with_input(
            BenchmarkId::new("matcher", &label),
            &samples,
            |b, samples| {
                b.iter(|| {
                    let mut n = 0usize;
                    for s in samples {
                        n += engine
                            .classify_with(&s.as_error(), &mut scratch)
                            .reason_id
                            .0 as usize;
                    }
                    n
                })
            },
        );
        if extra == 0 {
            let naive = naive::Naive::new(engine.ruleset());
            group.bench_with_input(
                BenchmarkId::new("naive-regex-baseline", &label),
                &samples,
                |b, samples| {
                    b.iter(|| {
                        samples
                            .iter()
                            .filter_map(|s| naive.classify(s))
                            .sum::<usize>()
                    })
                },
            );
        }
        if extra <= 1_000 {
            group.bench_with_input(
                BenchmarkId::new("exhaustive-baseline", &label),
                &samples,
                |b, samples| {
                    b.iter(|| {
                        let mut n = 0usize;
                        for s in samples {
                            n += engine.classify_exhaustive(&s.as_error()).reason_id.0 as usize;
                        }
                        n
                    })
                },
            );
        }
    }
    group.finish();
}

fn compile(c: &mut Criterion) {
    let mut group = c.benchmark_group("compile");
    group.sample_size(10);
    for extra in [0usize, 1_000, 10_000] {
        group.throughput(Throughput::Elements((75 + extra) as u64));
        group.bench_function(
            BenchmarkId::new("ruleset", format!("defaults+{extra}")),
            |b| b.iter(|| engine_with(extra)),
        );
    }
    group.finish();
}

criterion_group!(benches, classify, compile);
criterion_main!(benches);
