//! The transient-probe slot across replicas (SPEC R10.5, issue 13): two
//! runners on one real `redis-server` (a free loopback port), as two
//! gateway replicas. R10.5 limits transient cooldown probes to one per
//! provider *per fallback run*; a run lives on one replica, so the slot is
//! the run's and is not shared: each replica's run probes the cooling
//! sibling once and skips the next with "probe already attempted this
//! run" — exactly what two runs on one replica (or the in-memory store)
//! do. (The probe throttle of R16.1, which is per provider across runs, is
//! shared through Redis: `serve_replicas.rs`.)

use std::sync::Arc;

use failover::state::{Profile, RedisStore, StoreExt};
use failover::{
    AttemptError, AttemptOutcome, Engine, Format, GatewayConfig, ProviderFailure, RunRequest,
    Runner,
};

use failover_testkit::RedisServer;

const CONFIG: &str = "agents:\n  defaults:\n    model:\n      primary: openai/a\n      fallbacks: [openai/b, openai/c, anthropic/claude]\n";

#[tokio::test]
async fn each_replicas_run_probes_the_cooling_sibling_once() {
    let Some(server) = RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = std::env::temp_dir().join(format!("failover-slot-{}", std::process::id()));
    let config = Arc::new(
        GatewayConfig::parse(CONFIG, Format::Yaml, "t.yaml")
            .unwrap()
            .config,
    );
    let mut runners = Vec::new();
    for _ in 0..2 {
        let s = Arc::new(
            RedisStore::connect(&server.url(), "slot:", &dir, "main")
                .await
                .unwrap(),
        );
        runners.push(Runner::with_store(Arc::new(Engine::builtin()), config.clone(), s).unwrap());
    }
    let first = runners[0].store();
    first
        .update_profiles(|p| {
            p.profiles.insert(
                "openai:default".into(),
                Profile::api_key("openai", "sk-o-1"),
            );
            p.profiles.insert(
                "anthropic:default".into(),
                Profile::api_key("anthropic", "sk-a-1"),
            );
        })
        .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    first
        .update_state(|st| {
            let o = st.stats_mut("openai:default");
            o.cooldown_until = Some(now + 30 * 60_000);
            o.cooldown_reason = Some("rate_limit".into());
            o.error_count = 1;
        })
        .unwrap();
    for (i, runner) in runners.iter().enumerate() {
        let out = runner
            .run(
                &RunRequest::session(format!("agent:main:slot-{i}")),
                |a| async move {
                    if a.provider == "openai" {
                        let mut f = ProviderFailure::default();
                        f.status = Some(429);
                        f.message = Some("rate limit".into());
                        Err(AttemptError::Provider(f))
                    } else {
                        Ok(a.model)
                    }
                },
            )
            .await
            .unwrap();
        let seen: Vec<(String, AttemptOutcome)> = out
            .attempts
            .iter()
            .map(|a| (a.model.clone(), a.outcome))
            .collect();
        assert_eq!(
            seen,
            vec![
                ("a".into(), AttemptOutcome::Skipped),
                ("b".into(), AttemptOutcome::Failed),
                ("c".into(), AttemptOutcome::Skipped),
                ("claude".into(), AttemptOutcome::Succeeded),
            ],
            "replica {i}"
        );
        assert!(out.attempts[1].probe, "replica {i}: b was the probe");
        assert_eq!(
            out.attempts[2].error.as_deref(),
            Some("Provider openai is in cooldown (probe already attempted this run)"),
            "replica {i}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
