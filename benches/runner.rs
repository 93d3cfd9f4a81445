//! Runner overhead: one run whose attempt function answers at once, on an
//! in-memory store (session read, chain, profile order, success record,
//! session update). Run with `cargo bench --bench runner`.
//!
//! `runner_backends/*`: the same instant run on each state backend
//! (issue 13): in-memory, the files, the embedded SQLite database, and
//! Redis on loopback (a `redis-server` this bench starts on a free port;
//! skipped with a message when it is not installed).

use std::sync::Arc;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use failover::state::{
    AuthProfiles, FileStore, MemoryStore, Profile, RedisStore, SqliteStore, StoreExt,
};
use failover::time::ManualClock;
use failover::{AttemptError, Engine, Format, GatewayConfig, ProviderFailure, RunRequest, Runner};
use failover_testkit::RedisServer;

fn profiles() -> AuthProfiles {
    let mut p = AuthProfiles::default();
    for (id, prov) in [
        ("anthropic:default", "anthropic"),
        ("openai:default", "openai"),
    ] {
        p.profiles
            .insert(id.into(), Profile::api_key(prov, "sk-bench-000000000"));
    }
    p
}

fn config() -> Arc<GatewayConfig> {
    let cfg = GatewayConfig::parse(
        "agents: { defaults: { model: { primary: anthropic/claude, fallbacks: [openai/gpt] } } }",
        Format::Yaml,
        "bench.yaml",
    )
    .unwrap()
    .config;
    Arc::new(cfg)
}

fn clock() -> Arc<ManualClock> {
    Arc::new(ManualClock::new(1_767_225_600_000))
}

fn runner() -> Runner {
    let store = Arc::new(MemoryStore::new("main").with_profiles(profiles()));
    Runner::new(Arc::new(Engine::builtin()), config(), store)
        .unwrap()
        .with_clock(clock())
}

fn bench_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("failover-bench-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn backends(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let engine = Arc::new(Engine::builtin());
    let mut runners: Vec<(&str, Runner)> = vec![("memory", runner())];
    let files_dir = bench_dir("files");
    let f = Arc::new(FileStore::open(&files_dir, "main").unwrap());
    f.update_profiles(|p| *p = profiles()).unwrap();
    runners.push((
        "files",
        Runner::new(engine.clone(), config(), f)
            .unwrap()
            .with_clock(clock()),
    ));
    let sqlite_dir = bench_dir("sqlite");
    let s = Arc::new(SqliteStore::open(&sqlite_dir, "main").unwrap());
    s.update_profiles(|p| *p = profiles()).unwrap();
    runners.push((
        "sqlite",
        Runner::with_store(engine.clone(), config(), s)
            .unwrap()
            .with_clock(clock()),
    ));
    let server = RedisServer::start();
    let redis_dir = bench_dir("redis");
    if let Some(server) = &server {
        let r = Arc::new(
            rt.block_on(RedisStore::connect(
                &server.url(),
                "bench:",
                &redis_dir,
                "main",
            ))
            .unwrap(),
        );
        r.update_profiles(|p| *p = profiles()).unwrap();
        runners.push((
            "redis",
            Runner::with_store(engine.clone(), config(), r)
                .unwrap()
                .with_clock(clock()),
        ));
    }
    let req = RunRequest::session("bench");
    let mut g = c.benchmark_group("runner_backends");
    g.throughput(Throughput::Elements(1));
    for (name, r) in &runners {
        g.bench_function(*name, |b| {
            b.iter(|| {
                rt.block_on(r.run(&req, |_| std::future::ready(Ok::<_, AttemptError>(1u8))))
                    .unwrap()
            })
        });
    }
    g.finish();
    drop(runners);
    for d in [files_dir, sqlite_dir, redis_dir] {
        let _ = std::fs::remove_dir_all(d);
    }
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

criterion_group!(benches, bench, backends);
criterion_main!(benches);
