//! Classification throughput (messages/s) with the default rules, against
//! a baseline in the same run: exhaustive (this engine's verifiers on every
//! rule, no automaton: `Engine::classify_exhaustive`); scaling with +1,000
//! and +10,000 operator rules; compile time. Results and analysis:
//! `benches/README.md`. (The naive-regex baseline of earlier runs reads the
//! compiled rules, which are private since the workspace move: it lives on
//! as the agreement check of the crate's unit tests, `matcher_agrees`.)

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use failover::rules::build_layers;
use failover::{Engine, Scratch};

#[path = "support/corpus.rs"]
mod corpus;

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
            // Issue 34: the same corpus with the embedded model consulted
            // where no text rule decides, side by side with the rules alone.
            let with_model = engine_with(0).with_model(
                failover::evidence::builtin(),
                failover::evidence::Confidence::Costs,
            );
            group.bench_with_input(
                BenchmarkId::new("matcher+model", &label),
                &samples,
                |b, samples| {
                    b.iter(|| {
                        let mut n = 0usize;
                        for s in samples {
                            n += with_model
                                .classify_with(&s.as_error(), &mut scratch)
                                .reason_id
                                .0 as usize;
                        }
                        n
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

/// Per-message cost: each message of the corpus timed alone (the best of
/// `PASSES` runs, so one preemption does not count), reported as p50, p99
/// and max with the slowest message. No message should cost more than
/// about ten times the median (issue 11: a Unicode `\b` once sent any
/// message with a non-ASCII character to the slowest regex engine, 57×).
/// `FAILOVER_BENCH_RULES=DIR` measures that ruleset too, without the
/// defaults, on the same corpus (a before/after of a rules change); the
/// passes alternate between the two, so a change in the shared host's
/// load falls on both alike.
fn latency() {
    const PASSES: usize = 20;
    let samples = corpus::corpus(CORPUS, 0x5eed);
    let mut engines = vec![
        ("defaults".to_string(), engine_with(0)),
        (
            "defaults+model".to_string(),
            engine_with(0).with_model(
                failover::evidence::builtin(),
                failover::evidence::Confidence::Costs,
            ),
        ),
    ];
    if let Ok(dir) = std::env::var("FAILOVER_BENCH_RULES") {
        let build = failover::rules::build(&[dir.clone().into()], false).expect("rules dir");
        let engine = Engine::from_build(build).expect("rules compile");
        engines.push((dir, engine));
    }
    let mut scratches: Vec<Scratch> = engines.iter().map(|_| Scratch::default()).collect();
    let mut bests = vec![vec![u128::MAX; samples.len()]; engines.len()];
    for _ in 0..PASSES {
        for (((_, engine), scratch), best) in engines.iter().zip(&mut scratches).zip(&mut bests) {
            for (i, s) in samples.iter().enumerate() {
                let t = std::time::Instant::now();
                std::hint::black_box(engine.classify_with(&s.as_error(), scratch));
                best[i] = best[i].min(t.elapsed().as_nanos());
            }
        }
    }
    for ((name, _), best) in engines.iter().zip(&bests) {
        let mut sorted = best.clone();
        sorted.sort_unstable();
        let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q) as usize];
        let worst = (0..best.len()).max_by_key(|&i| best[i]).unwrap();
        let mean = best.iter().sum::<u128>() as f64 / best.len() as f64;
        eprintln!(
            "latency {name}: mean {mean:.0} ns, p50 {} ns, p99 {} ns, max {} ns ({:.1}x p50): {:?}",
            at(0.5),
            at(0.99),
            sorted[sorted.len() - 1],
            sorted[sorted.len() - 1] as f64 / at(0.5) as f64,
            samples[worst].message.chars().take(100).collect::<String>()
        );
    }
}

/// Issue 34: the model's own cost per consulted message (one where no text
/// rule decides): `Model::predict` on the normalised error, each message
/// timed alone, the best of `PASSES`; and how many messages consult it.
fn model_latency() {
    const PASSES: usize = 20;
    let samples = corpus::corpus(CORPUS, 0x5eed);
    let engine = engine_with(0);
    let model = failover::evidence::builtin();
    let consulted: Vec<_> = samples
        .iter()
        .filter(|s| engine.classify(&s.as_error()).decided_by != failover::Decider::Rule)
        .collect();
    /// Counts the features, so the hashing alone can be timed.
    struct Count(usize);
    impl failover::evidence::features::Sink for Count {
        fn feature(&mut self, _: failover::evidence::features::Kind, _: &[char], h: u32) {
            self.0 += (h & 1) as usize;
        }
    }
    let mut best = vec![u128::MAX; consulted.len()];
    let mut hashing = vec![u128::MAX; consulted.len()];
    let mut features = 0usize;
    for pass in 0..PASSES {
        for (i, s) in consulted.iter().enumerate() {
            let (ns, hash_ns, n) = engine.with_model_input(&s.as_error(), |input| {
                let t = std::time::Instant::now();
                std::hint::black_box(model.predict(input));
                let ns = t.elapsed().as_nanos();
                let t = std::time::Instant::now();
                let n = failover::evidence::features::visit(input, &mut Count(0));
                (ns, t.elapsed().as_nanos(), std::hint::black_box(n))
            });
            best[i] = best[i].min(ns);
            hashing[i] = hashing[i].min(hash_ns);
            if pass == 0 {
                features += n;
            }
        }
    }
    for v in [&mut best, &mut hashing] {
        v.sort_unstable();
    }
    let at = |v: &[u128], q: f64| v[((v.len().max(1) - 1) as f64 * q) as usize];
    eprintln!(
        "model: consulted on {} of {} messages ({} text features each on average); predict p50 {} ns, p99 {} ns, max {} ns; of which reading and hashing the features p50 {} ns",
        consulted.len(),
        samples.len(),
        features / consulted.len().max(1),
        at(&best, 0.5),
        at(&best, 0.99),
        best.last().copied().unwrap_or(0),
        at(&hashing, 0.5)
    );
}

criterion_group!(benches, classify, compile);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
    if std::env::args().all(|a| a != "--list") {
        latency();
        model_latency();
    }
}
