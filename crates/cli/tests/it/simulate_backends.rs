//! `failover simulate` honours the config's `state:` block (issue 13, item
//! 5): every shipped scenario runs on the files, SQLite and Redis backends
//! (a real `redis-server` on a free loopback port) and reports exactly
//! what it reports in memory — so the executor's decisions are the same on
//! every backend — on a scratch copy that leaves the configured state
//! untouched; an unreachable backend is an error naming it, exit 2.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use failover::scenario::{simulate_file, to_json, Report, ScenarioError};
use failover::state::{AsyncStore, RedisStore, StoreExt, UsageStats};
use failover::Engine;

fn scenarios() -> Vec<PathBuf> {
    let dir = crate::repo_root().join("examples/scenarios");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    assert!(files.len() >= 9, "{files:?}");
    files
}

/// The scenario at `path`, its config inlined and given `state`, written
/// under its own name to a fresh directory (`simulate_file` runs a file;
/// the report names it as it names the original).
fn with_state(path: &Path, state: Option<serde_yaml::Value>) -> PathBuf {
    let mut s: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let config = s
        .as_mapping_mut()
        .expect("a scenario mapping")
        .get_mut("config")
        .expect("a config");
    if let serde_yaml::Value::String(rel) = &*config {
        let text = std::fs::read_to_string(path.parent().unwrap().join(rel)).unwrap();
        *config = serde_yaml::from_str(&text).unwrap();
    }
    if let Some(state) = state {
        config
            .as_mapping_mut()
            .expect("a config mapping")
            .insert("state".into(), state);
    }
    let dir = temp_dir("scenario");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join(path.file_name().unwrap());
    std::fs::write(&file, serde_yaml::to_string(&s).unwrap()).unwrap();
    file
}

/// Runs the scenario `with_state` wrote, then removes its directory.
fn simulate(file: &Path) -> Result<Report, ScenarioError> {
    let r = simulate_file(file, Arc::new(Engine::builtin()));
    std::fs::remove_dir_all(file.parent().unwrap()).unwrap();
    r
}

fn block(yaml: &str) -> serde_yaml::Value {
    serde_yaml::from_str(yaml).unwrap()
}

/// The report as JSON, without the line that names the backend.
fn report_json(file: &Path, path: &Path) -> serde_json::Value {
    let r = simulate(file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert_eq!(r.mismatches(), 0, "{}", failover::scenario::render(&r));
    let mut j = to_json(&r);
    let named = j.as_object_mut().unwrap().remove("stateBackend");
    assert_eq!(
        named.as_ref().and_then(|v| v.as_str()),
        r.state_backend,
        "`stateBackend` only with a `state:` block"
    );
    j
}

// R6–R14 on every backend: each shipped scenario's whole report (every
// attempt, decision, notice, session and usageStats) equals the in-memory
// one.
#[test]
fn every_scenario_reports_the_same_on_every_backend() {
    let server = failover_testkit::RedisServer::start();
    let mut backends = vec![
        ("files", block("{backend: files}")),
        ("sqlite", block("{backend: sqlite}")),
    ];
    if let Some(server) = &server {
        backends.push((
            "redis",
            block(&format!(
                "{{backend: redis, url: \"{}\", prefix: \"sim-test:\"}}",
                server.url()
            )),
        ));
    }
    let memory: Vec<_> = scenarios()
        .iter()
        .map(|p| report_json(&with_state(p, None), p))
        .collect();
    // One thread per backend (each write is fsynced: files, SQLite and the
    // test's Redis all wait on the disk).
    std::thread::scope(|scope| {
        for (name, state) in &backends {
            let memory = &memory;
            scope.spawn(move || {
                for (path, want) in scenarios().iter().zip(memory) {
                    let on = report_json(&with_state(path, Some(state.clone())), path);
                    assert_eq!(want, &on, "{} on {name}", path.display());
                }
            });
        }
    });
    if let Some(server) = &server {
        // Each copy's keys went with its simulation.
        let mut c = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        let left: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
        assert!(left.is_empty(), "{left:?}");
    }
}

/// Every key of the database with its contents, for comparison.
fn dump(url: &str) -> BTreeMap<String, String> {
    let mut c = redis::Client::open(url).unwrap().get_connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut c).unwrap();
    keys.into_iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(&k).query(&mut c).unwrap();
            let v = match kind.as_str() {
                "hash" => {
                    let h: BTreeMap<String, String> =
                        redis::cmd("HGETALL").arg(&k).query(&mut c).unwrap();
                    format!("{h:?}")
                }
                _ => redis::cmd("GET").arg(&k).query::<String>(&mut c).unwrap(),
            };
            (k, v)
        })
        .collect()
}

fn temp_dir(tag: &str) -> PathBuf {
    // The backends' threads each write scenarios: a count keeps them apart.
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    std::env::temp_dir().join(format!(
        "failover-simback-{tag}-{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ))
}

// The operator's live state under the configured prefix — a cooldown of
// the profile the scenario fails, the scenario's own session key, a probe
// slot — is neither read nor written by a simulation configured with that
// very prefix: every key and value is the same afterwards, and nothing
// else is left behind.
#[tokio::test]
async fn a_simulation_leaves_the_configured_redis_state_untouched() {
    let Some(server) = failover_testkit::RedisServer::start() else {
        eprintln!("skipped: no redis-server");
        return;
    };
    let dir = temp_dir("live");
    let live = RedisStore::connect(&server.url(), "failover:", &dir, "main")
        .await
        .unwrap();
    let far = 4_102_444_800_000u64; // 2100-01-01: a live cooldown
    live.update_state(|st| {
        st.usage_stats.insert(
            "openai:default".into(),
            UsageStats {
                error_count: 7,
                cooldown_until: Some(far),
                cooldown_reason: Some("rate_limit".into()),
                ..Default::default()
            },
        );
        st.last_good
            .insert("openai".into(), "openai:default".into());
    })
    .unwrap();
    failover::state::edit_session(&live, "agent:main:main", |e| {
        e.model_override = Some("live-model".into());
    })
    .await
    .unwrap();
    failover::state::SharedTables::try_probe(&live, "openai", far, 30_000)
        .await
        .unwrap();
    let before = dump(&server.url());
    assert!(before.len() >= 4, "{before:?}");
    let path = crate::repo_root().join("examples/scenarios/r7-cooldowns.yaml");
    let state = block(&format!(
        "{{backend: redis, url: \"{}\", prefix: \"failover:\"}}",
        server.url()
    ));
    let file = with_state(&path, Some(state));
    // `simulate` runs its own runtime: off this test's.
    let report = tokio::task::spawn_blocking(move || simulate(&file).unwrap())
        .await
        .unwrap();
    assert_eq!(report.mismatches(), 0);
    assert_eq!(report.state_backend, Some("redis"));
    assert_eq!(to_json(&report)["stateBackend"], "redis");
    assert_eq!(dump(&server.url()), before);
    let st = AsyncStore::load_state(&live).await.unwrap();
    assert_eq!(st.usage_stats["openai:default"].error_count, 7);
    let _ = std::fs::remove_dir_all(&dir);
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_failover"))
}

/// A scenario file whose inline config has `state`.
fn scenario_file(dir: &Path, state: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let src = crate::repo_root().join("examples/scenarios/r9-errors.yaml");
    let mut text = std::fs::read_to_string(&src).unwrap();
    let at = text.find("\nconfig:\n").expect("an inline config") + "\nconfig:\n".len();
    text.insert_str(at, &format!("  state: {state}\n"));
    let p = dir.join("scenario.yaml");
    std::fs::write(&p, text).unwrap();
    p
}

// The CLI: the report names the backend; a server that does not answer is
// exit 2 with the server named and its password hidden.
#[test]
fn the_cli_names_the_backend_and_refuses_an_unreachable_one() {
    let dir = temp_dir("cli");
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let p = scenario_file(
        &dir,
        &format!("{{backend: redis, url: \"redis://:hunter2-secret@127.0.0.1:{port}/0\"}}"),
    );
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("redis://:***@127.0.0.1:{port}/0")),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
    assert!(!out.status.success());

    let p = scenario_file(&dir.join("sqlite"), "{backend: sqlite}");
    let out = bin().arg("simulate").arg(&p).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("state: sqlite"), "{text}");
    // Nothing was created beside the scenario.
    let beside: Vec<_> = std::fs::read_dir(dir.join("sqlite")).unwrap().collect();
    assert_eq!(beside.len(), 1, "{beside:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
