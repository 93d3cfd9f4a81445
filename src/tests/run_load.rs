//! Load: 10,000 concurrent runs across 1,000 sessions with seeded random
//! failures on one shared in-memory store. No panic, no lost state update,
//! every run ends with a value or an error the runner explains.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::run_common::*;
use crate::run::{AttemptError, ProviderFailure, RunError, RunRequest, Runner};
use crate::store::MemoryStore;
use crate::store::{
    AuthProfiles, AuthState, ManualClock, Problem, SessionEntry, SessionStore, Store, StoreError,
};

const RUNS: u64 = 10_000;
const SESSIONS: u64 = 1_000;

/// SplitMix64: a seeded, dependency-free random stream.
fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// A store that holds every read open for a few microseconds (a busy
/// wait, no sleep) before returning it. A state update done as "read, then
/// write back" instead of one locked update would then lose the other
/// worker's updates often enough for the count below to catch it; the
/// store's own locked updates are untouched.
struct SlowReads(MemoryStore);

impl SlowReads {
    fn hold<T>(&self, value: T) -> T {
        let until = std::time::Instant::now() + std::time::Duration::from_micros(20);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        value
    }
}

impl Store for SlowReads {
    fn agent_id(&self) -> &str {
        self.0.agent_id()
    }
    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        self.0.load_profiles()
    }
    fn load_state(&self) -> Result<AuthState, StoreError> {
        self.hold(self.0.load_state())
    }
    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        self.hold(self.0.load_sessions())
    }
    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        self.hold(self.0.load_session(key))
    }
    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        self.0.update_profiles_dyn(f)
    }
    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        self.0.update_state_dyn(f)
    }
    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        self.0.update_sessions_dyn(f)
    }
    fn take_problems(&self) -> Vec<Problem> {
        self.0.take_problems()
    }
}

#[test]
fn ten_thousand_concurrent_runs() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    let store = Arc::new(SlowReads(MemoryStore::new("main").with_profiles(profiles(
        &[
            ("doomed:a", "sk-doomed-aaaaaaaa"),
            ("flaky:a", "sk-flaky-aaaaaaaa"),
            ("flaky:b", "sk-flaky-bbbbbbbb"),
            ("steady:a", "sk-steady-aaaaaaa"),
        ],
    ))));
    let cfg = config(
        "agents: { defaults: { model: { primary: doomed/x, fallbacks: [flaky/m, steady/m] } } }",
    );
    let runner = Arc::new(
        Runner::new(engine(), Arc::new(cfg), store.clone())
            .unwrap()
            .with_clock(Arc::new(ManualClock::new(T0))),
    );
    let doomed_calls = Arc::new(AtomicU64::new(0));
    let calls = Arc::new(AtomicU64::new(0));
    let started = std::time::Instant::now();
    let results = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..RUNS {
            let runner = runner.clone();
            let doomed = doomed_calls.clone();
            let calls = calls.clone();
            tasks.push(tokio::spawn(async move {
                let req = RunRequest::session(format!("s{}", i % SESSIONS));
                let mut n = 0u64;
                runner
                    .run(&req, move |a| {
                        n += 1;
                        let doomed = doomed.clone();
                        let calls = calls.clone();
                        async move {
                            calls.fetch_add(1, Ordering::Relaxed);
                            // Interleave with the other runs mid-attempt.
                            tokio::task::yield_now().await;
                            let r = mix(i * 31 + n) % 100;
                            let fail = |s: u16, m: &str| {
                                Err(AttemptError::Provider(
                                    ProviderFailure::message(m).with_status(s),
                                ))
                            };
                            match a.provider.as_str() {
                                "doomed" => {
                                    doomed.fetch_add(1, Ordering::Relaxed);
                                    fail(401, "invalid api key")
                                }
                                "flaky" if r < 30 => fail(529, "overloaded"),
                                "flaky" if r < 40 => fail(429, "rate limit"),
                                "steady" if r < 5 => fail(500, "internal server error"),
                                _ => Ok(i),
                            }
                        }
                    })
                    .await
            }));
        }
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.expect("no run panicked"));
        }
        out
    });
    let elapsed = started.elapsed();

    let (mut ok, mut summary, mut surfaced) = (0, 0, 0);
    for r in &results {
        match r {
            Ok(_) => ok += 1,
            Err(RunError::Summary(s)) => {
                assert!(!s.attempts.is_empty());
                summary += 1
            }
            Err(RunError::Provider { .. }) => surfaced += 1,
            Err(e) => panic!("unexpected error: {e}"),
        }
    }
    assert_eq!(ok + summary + surfaced, RUNS as usize);
    assert!(ok > RUNS as usize / 2, "ok {ok} summary {summary}");

    // No lost update: every failed call of `doomed:a` was counted, even
    // the ones that raced each other (two worker threads, reads held open
    // by `SlowReads`).
    let state = store.load_state().unwrap();
    let doomed = &state.usage_stats["doomed:a"];
    assert_eq!(
        u64::from(doomed.error_count),
        doomed_calls.load(Ordering::Relaxed)
    );
    assert!(doomed.cooldown_until.is_some());

    // Every session entry is consistent: an override is a whole auto
    // override pointing back at the primary.
    let sessions = store.load_sessions().unwrap();
    assert_eq!(sessions.entries.len(), SESSIONS as usize);
    for (k, e) in &sessions.entries {
        if e.model_override.is_some() {
            assert_eq!(e.model_override_source.as_deref(), Some("auto"), "{k}");
            assert!(e.provider_override.is_some(), "{k}");
            assert_eq!(
                e.model_override_fallback_origin_provider.as_deref(),
                Some("doomed"),
                "{k}"
            );
        }
    }
    eprintln!(
        "{RUNS} runs ({} attempts) in {elapsed:?}: ok {ok}, summary {summary}, surfaced {surfaced}",
        calls.load(Ordering::Relaxed)
    );
}
