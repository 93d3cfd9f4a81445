//! Runner overhead: one run whose attempt function answers at once, on an
//! in-memory store (session read, chain, profile order, success record,
//! session update). Run with `cargo bench --bench runner`.

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use failover::config::{Format, GatewayConfig};
use failover::run::{AttemptError, MemoryStore, ProviderFailure, RunRequest, Runner};
use failover::store::{AuthProfiles, ManualClock, Profile};
use failover::Engine;

fn runner() -> Runner {
    let mut p = AuthProfiles::default();
    for (id, prov) in [
        ("anthropic:default", "anthropic"),
        ("openai:default", "openai"),
    ] {
        p.profiles
            .insert(id.into(), Profile::api_key(prov, "sk-bench-000000000"));
    }
    let store = Arc::new(MemoryStore::new("main").with_profiles(p));
    let cfg = GatewayConfig::parse(
        "agents: { defaults: { model: { primary: anthropic/claude, fallbacks: [openai/gpt] } } }",
        Format::Yaml,
        "bench.yaml",
    )
    .unwrap()
    .config;
    Runner::new(Arc::new(Engine::builtin()), Arc::new(cfg), store)
        .unwrap()
        .with_clock(Arc::new(ManualClock::new(1_767_225_600_000)))
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let r = runner();
    let req = RunRequest::session("bench");
    let mut g = c.benchmark_group("runner");
    g.throughput(Throughput::Elements(1));
    g.bench_function("instant_success", |b| {
        b.iter(|| {
            rt.block_on(r.run(&req, |_| std::future::ready(Ok::<_, AttemptError>(1u8))))
                .unwrap()
        })
    });
    // A primary failure classified, recorded, rolled over to the fallback.
    g.bench_function("one_fallback", |b| {
        b.iter(|| {
            let out = rt
                .block_on(r.run(&RunRequest::session("fb"), |a| {
                    std::future::ready(if a.provider == "anthropic" {
                        Err(AttemptError::Provider(
                            ProviderFailure::message("upstream hiccup").with_status(418),
                        ))
                    } else {
                        Ok(1u8)
                    })
                }))
                .unwrap();
            r.reset_session("fb").unwrap();
            out
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
