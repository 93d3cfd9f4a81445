//! Concurrency across processes (issue 13): 8 processes, each running
//! concurrent read-modify-writes of the same profile and the same session
//! on one backend, then the counts must be exact — no update lost, no
//! count gone back. Each process is this test binary again, running the
//! ignored `worker` entry with its orders in the environment.
//!
//! Each update round is two updates: the profile's count and the shared
//! session's count; every fourth round adds a run's success
//! (`update_success`: the profile's record and the process's own session
//! at once), exact on both afterwards too.
//! Per process: 4 tasks × 250 rounds = 1,000 (the files: 4 × 25 = 100,
//! since every update of a file rewrites and fsyncs it). Plus Redis
//! itself restarted (SIGKILL) between two rounds of writers: everything it
//! acknowledged is still there, and the state is consistent.

use std::process::Command;
use std::sync::Arc;

use failover::state::{
    edit_profile, edit_session, AsyncStore, FileStore, RedisStore, SqliteStore, SyncFace,
};
use serde_json::json;

use failover_testkit::RedisServer;

const PROCESSES: usize = 8;
const TASKS: usize = 4;
/// A run's success every this many rounds (it contends on the profile
/// with every other writer: kept to a quarter to bound the test's time).
const SUCCESS_EVERY: usize = 4;

async fn open(backend: &str, dir: &str, url: &str) -> Arc<dyn AsyncStore> {
    match backend {
        "files" => Arc::new(SyncFace::new(Arc::new(
            FileStore::open(dir, "main").unwrap(),
        ))),
        "sqlite" => Arc::new(SqliteStore::open(dir, "main").unwrap()),
        _ => Arc::new(
            RedisStore::connect(url, "failover-proc:", dir, "main")
                .await
                .unwrap(),
        ),
    }
}

/// One worker process: `FAILOVER_WORKER=backend,dir,url,updates-per-task`.
#[test]
#[ignore = "run by the tests below as a child process"]
fn worker() {
    let spec = std::env::var("FAILOVER_WORKER").expect("started by a test");
    let parts: Vec<&str> = spec.split(',').collect();
    let (backend, dir, url) = (parts[0], parts[1], parts[2]);
    let per: usize = parts[3].parse().unwrap();
    let own = format!("agent:main:succ-{}", parts[4]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = open(backend, dir, url).await;
        let mut tasks = Vec::new();
        for _ in 0..TASKS {
            let store = store.clone();
            let own = own.clone();
            tasks.push(tokio::spawn(async move {
                for round in 0..per {
                    edit_profile(store.as_ref(), "openai:a", "openai", |s| {
                        s.stats_mut("openai:a").error_count += 1;
                    })
                    .await
                    .unwrap();
                    edit_session(store.as_ref(), "agent:main:shared", |e| {
                        let n = e.extra.get("n").and_then(|v| v.as_u64()).unwrap_or(0);
                        e.extra.insert("n".into(), json!(n + 1));
                    })
                    .await
                    .unwrap();
                    if round % SUCCESS_EVERY != 0 {
                        continue;
                    }
                    // A run's success: the profile's record (shared by
                    // every process) and this process's session together
                    // (one compare-and-set on Redis, one transaction on
                    // SQLite).
                    let bump = |m: &mut serde_json::Map<String, serde_json::Value>| {
                        let n = m.get("succ").and_then(|v| v.as_u64()).unwrap_or(0);
                        m.insert("succ".into(), json!(n + 1));
                    };
                    store
                        .update_success(
                            Some(("openai:a", "openai", &mut |st| {
                                bump(&mut st.stats_mut("openai:a").extra)
                            })),
                            &own,
                            &mut |e| bump(&mut e.extra),
                        )
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
}

fn run_workers(backend: &str, dir: &std::path::Path, url: &str, per: usize) {
    let exe = std::env::current_exe().unwrap();
    let worker = super::test_name(module_path!(), "worker");
    let children: Vec<_> = (0..PROCESSES)
        .map(|i| {
            Command::new(&exe)
                .args([worker.as_str(), "--exact", "--ignored", "--quiet"])
                .env(
                    "FAILOVER_WORKER",
                    format!("{backend},{},{url},{per},{i}", dir.display()),
                )
                // The child's own "running 1 test … filtered out" lines
                // are not this run's results (issue 48); its failures
                // still reach stderr.
                .stdout(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "a worker failed");
    }
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("failover-proc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

async fn counts(backend: &str, dir: &std::path::Path, url: &str) -> (u64, u64) {
    let s = open(backend, dir.to_str().unwrap(), url).await;
    let st = s.load_state().await.unwrap();
    let e = s.load_session("agent:main:shared").await.unwrap().unwrap();
    (
        st.usage_stats["openai:a"].error_count as u64,
        e.extra["n"].as_u64().unwrap(),
    )
}

async fn check(backend: &str, per: usize, url: &str) {
    let dir = temp(backend);
    let t = std::time::Instant::now();
    run_workers(backend, &dir, url, per);
    let total = (PROCESSES * TASKS * per) as u64;
    let secs = t.elapsed().as_secs_f64();
    println!(
        "store_processes: {backend}: {PROCESSES} processes × {} updates of one profile and one session, and {} successes, in {secs:.2} s ({:.0} updates/s)",
        TASKS * per,
        TASKS * per.div_ceil(SUCCESS_EVERY),
        (2 * total + (PROCESSES * TASKS * per.div_ceil(SUCCESS_EVERY)) as u64) as f64 / secs
    );
    assert_eq!(counts(backend, &dir, url).await, (total, total));
    // The successes: exact on both records.
    let s = open(backend, dir.to_str().unwrap(), url).await;
    let st = s.load_state().await.unwrap();
    let successes = (PROCESSES * TASKS * per.div_ceil(SUCCESS_EVERY)) as u64;
    assert_eq!(st.usage_stats["openai:a"].extra["succ"], json!(successes));
    for i in 0..PROCESSES {
        let e = s
            .load_session(&format!("agent:main:succ-{i}"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            e.extra["succ"],
            json!(successes / PROCESSES as u64),
            "process {i}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn eight_processes_sqlite() {
    check("sqlite", 250, "").await;
}

#[tokio::test]
async fn eight_processes_files() {
    check("files", 25, "").await;
}

#[tokio::test]
async fn eight_processes_redis() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    check("redis", 250, &server.url()).await;
}

// A Redis restart (SIGKILL, then start on the same data) between two
// rounds of writers: every acknowledged update is still there (append
// only file, fsync always), the count is exact, and the cooldown deadline
// written before the crash is the same absolute time after it.
#[tokio::test]
async fn redis_restart_keeps_every_acknowledged_update() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let url = server.url();
    let dir = temp("redis-restart");
    run_workers("redis", &dir, &url, 50);
    let first = (PROCESSES * TASKS * 50) as u64;
    {
        let s = open("redis", dir.to_str().unwrap(), &url).await;
        edit_profile(s.as_ref(), "openai:b", "openai", |st| {
            st.stats_mut("openai:b").cooldown_until = Some(1_767_225_660_000);
        })
        .await
        .unwrap();
    }
    server.restart();
    assert_eq!(counts("redis", &dir, &url).await, (first, first));
    run_workers("redis", &dir, &url, 50);
    assert_eq!(counts("redis", &dir, &url).await, (2 * first, 2 * first));
    let s = open("redis", dir.to_str().unwrap(), &url).await;
    let st = s.load_state().await.unwrap();
    assert_eq!(
        st.usage_stats["openai:b"].cooldown_until,
        Some(1_767_225_660_000)
    );
    let _ = std::fs::remove_dir_all(&dir);
}
