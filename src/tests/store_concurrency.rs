//! Concurrent writers never lose each other's updates (DESIGN "State").
//!
//! `processes_do_not_lose_updates` spawns this test binary N times with
//! `FAILOVER_STORE_CHILD` set; each child runs `child_worker`, which records
//! M failures and successes on one shared `auth-state.json`. Afterwards
//! every update must be accounted for and the file must parse.
//! `threads_do_not_lose_updates` does the same with threads, each with its
//! own store (its own file descriptions, so `flock` separates them too).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::auth::{mark_failure, mark_success, CooldownPolicy, Failure};
use crate::compile::ReasonBehaviour;
use crate::store::{FileStore, Store, StoreExt};

const WORKERS: usize = 4;
const UPDATES: u64 = 40;
/// A fixed instant: all failures fall in one failure window, so the shared
/// error counter only grows.
const NOW: u64 = 1_767_225_600_000;

fn temp_root(name: &str) -> PathBuf {
    failover_testkit::temp_root("conc", name)
}

fn cooldown() -> ReasonBehaviour {
    ReasonBehaviour {
        failover: true,
        cooldown: true,
        ..Default::default()
    }
}

/// One worker's updates: even steps fail the shared profile, odd steps
/// succeed on the worker's own profile at time `step`, and every step bumps
/// a per-worker counter kept in an unknown top-level field.
fn work(root: &Path, worker: usize) {
    let store = FileStore::open(root, "main").unwrap();
    let b = cooldown();
    let policy = CooldownPolicy::default();
    for step in 0..UPDATES {
        if step % 2 == 0 {
            let f = Failure {
                reason: "auth",
                behaviour: &b,
                model: None,
                reset_at: None,
                probe: false,
                outranks: None,
            };
            mark_failure(&store, "p:shared", "p", &f, &policy, NOW).unwrap();
        } else {
            mark_success(&store, &format!("p:w{worker}"), "p", None, step).unwrap();
        }
        store
            .update_state(|s| {
                let key = format!("counter{worker}");
                let n = s.extra.get(&key).and_then(|v| v.as_u64()).unwrap_or(0);
                s.extra.insert(key, (n + 1).into());
            })
            .unwrap();
    }
}

fn check(root: &Path) {
    let store = FileStore::open(root, "main").unwrap();
    let text = std::fs::read_to_string(&store.paths().state).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).expect("the state file parses");
    let s = store.load_state().unwrap();
    assert!(store.take_problems().is_empty());
    let shared = &s.usage_stats["p:shared"];
    let failures = WORKERS as u32 * (UPDATES as u32).div_ceil(2);
    assert_eq!(shared.error_count, failures, "every failure counted");
    assert_eq!(shared.failure_counts["auth"], failures);
    for w in 0..WORKERS {
        let own = &s.usage_stats[&format!("p:w{w}")];
        assert_eq!(
            own.last_used,
            Some(UPDATES - 1),
            "worker {w}'s last success kept"
        );
        assert_eq!(s.extra[&format!("counter{w}")], serde_json::json!(UPDATES));
    }
    // No temporary file is left behind.
    let dir = store.paths().state.parent().unwrap().to_path_buf();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        assert!(!e.file_name().to_string_lossy().contains(".tmp-"));
    }
}

#[test]
fn processes_do_not_lose_updates() {
    let root = temp_root("procs");
    let exe = std::env::current_exe().unwrap();
    let child = super::test_name(module_path!(), "child_worker");
    let children: Vec<_> = (0..WORKERS)
        .map(|w| {
            Command::new(&exe)
                .args(["--exact", child.as_str(), "--nocapture", "--test-threads=1"])
                .env("FAILOVER_STORE_CHILD", format!("{}|{w}", root.display()))
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a worker process failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    check(&root);
    std::fs::remove_dir_all(root).unwrap();
}

/// The child role: does nothing unless spawned by the test above.
#[test]
fn child_worker() {
    let Ok(spec) = std::env::var("FAILOVER_STORE_CHILD") else {
        return;
    };
    let (root, w) = spec.rsplit_once('|').unwrap();
    work(Path::new(root), w.parse().unwrap());
}

#[test]
fn threads_do_not_lose_updates() {
    let root = temp_root("threads");
    std::thread::scope(|scope| {
        for w in 0..WORKERS {
            let root = &root;
            scope.spawn(move || work(root, w));
        }
    });
    check(&root);
    std::fs::remove_dir_all(root).unwrap();
}

// Session writers from many threads: each owns one session key; all land.
#[test]
fn session_updates_from_threads_all_land() {
    let root = temp_root("sessions");
    std::thread::scope(|scope| {
        for w in 0..WORKERS {
            let root = &root;
            scope.spawn(move || {
                let store = FileStore::open(root, "main").unwrap();
                for i in 0..10u64 {
                    store
                        .update_session(&format!("s{w}"), |e| e.compaction_count = Some(i + 1))
                        .unwrap();
                }
            });
        }
    });
    let store = FileStore::open(&root, "main").unwrap();
    let sessions = store.load_sessions().unwrap();
    for w in 0..WORKERS {
        assert_eq!(
            sessions.entries[&format!("s{w}")].compaction_count,
            Some(10)
        );
    }
    std::fs::remove_dir_all(root).unwrap();
}
