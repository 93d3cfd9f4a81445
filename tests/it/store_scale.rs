//! Scale (issue 13): with 1,000, 10,000 and 100,000 sessions stored, runs
//! on fresh sessions cost the same per run on the embedded database. Each
//! run is a whole runner turn with an instant attempt: session read,
//! profiles, routing state, success record, session write.
//!
//! Seeding writes the sessions in one transaction per step (so the default
//! test stays fast); the per-run cost is the median of batches of runs on
//! new sessions, printed as `store_scale: …` (run with `--nocapture`).
//! Flat means the 100k median is within 3× of the 1k median — a loose
//! bound because other builds share the machine; a store that rewrites
//! every session per run is ~100× slower at 100k than at 1k.

use std::sync::Arc;
use std::time::Instant;

use failover::state::{AuthProfiles, Profile, SessionEntry, SqliteStore, Store, StoreExt};
use failover::time::ManualClock;
use failover::{AttemptError, Engine, Format, GatewayConfig, RunRequest, Runner};

fn runner(store: Arc<SqliteStore>) -> Runner {
    let cfg = GatewayConfig::parse(
        "agents: { defaults: { model: { primary: anthropic/claude, fallbacks: [openai/gpt] } } }",
        Format::Yaml,
        "scale.yaml",
    )
    .unwrap()
    .config;
    Runner::with_store(Arc::new(Engine::builtin()), Arc::new(cfg), store)
        .unwrap()
        .with_clock(Arc::new(ManualClock::new(1_767_225_600_000)))
}

fn entry(i: u64) -> SessionEntry {
    let mut e = SessionEntry {
        provider_override: Some("openai".into()),
        model_override: Some("gpt".into()),
        model_override_source: Some("auto".into()),
        model_override_fallback_origin_provider: Some("anthropic".into()),
        model_override_fallback_origin_model: Some("claude".into()),
        ..Default::default()
    };
    e.extra.insert("sessionId".into(), format!("s{i}").into());
    e.extra.insert("updatedAt".into(), i.into());
    e
}

/// Median µs per run over `batches` batches of `per` runs on new sessions.
async fn per_run_us(r: &Runner, tag: &str, batches: usize, per: usize) -> f64 {
    let mut samples = Vec::new();
    let mut n = 0;
    for _ in 0..batches {
        let t = Instant::now();
        for _ in 0..per {
            n += 1;
            let req = RunRequest::session(format!("fresh:{tag}:{n}"));
            r.run(&req, |_| std::future::ready(Ok::<_, AttemptError>(())))
                .await
                .unwrap();
        }
        samples.push(t.elapsed().as_secs_f64() * 1e6 / per as f64);
    }
    samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
    samples[samples.len() / 2]
}

#[tokio::test]
async fn per_run_cost_is_flat_in_the_number_of_sessions() {
    let dir = std::env::temp_dir().join(format!("failover-scale-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Arc::new(SqliteStore::open(&dir, "main").unwrap());
    let mut p = AuthProfiles::default();
    p.profiles.insert(
        "anthropic:default".into(),
        Profile::api_key("anthropic", "sk-scale-0000000"),
    );
    p.profiles.insert(
        "openai:default".into(),
        Profile::api_key("openai", "sk-scale-1111111"),
    );
    store.update_profiles(|d| *d = p.clone()).unwrap();
    let r = runner(store.clone());

    let mut seeded = 0u64;
    let mut results = Vec::new();
    for target in [1_000u64, 10_000, 100_000] {
        let t = Instant::now();
        let entries: Vec<(String, SessionEntry)> = (seeded..target)
            .map(|i| (format!("agent:main:seed:{i}"), entry(i)))
            .collect();
        store
            .put_sessions(entries.iter().map(|(k, e)| (k.as_str(), e)))
            .unwrap();
        seeded = target;
        let seed_ms = t.elapsed().as_millis();
        let us = per_run_us(&r, &target.to_string(), 7, 100).await;
        let rows = store.session_count().unwrap();
        println!("store_scale: sqlite {target} sessions (seeded in {seed_ms} ms, {rows} rows): {us:.1} µs per run");
        results.push(us);
    }
    // The seeded sessions are still there and intact.
    let e = Store::load_session(store.as_ref(), "agent:main:seed:99999")
        .unwrap()
        .unwrap();
    assert_eq!(e, entry(99_999));
    assert!(
        results[2] <= results[0] * 3.0,
        "per-run cost grew with the sessions: {results:?} µs at 1k/10k/100k"
    );
    drop(r);
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
}
