//! `failover state export` / `import` between the backends, `status` on
//! the embedded database, the config's `state:` block, and the startup
//! error of an unreachable Redis (issue 13).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .output()
        .expect("run failover")
}

fn ok(o: &Output) -> String {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("failover-statecli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let target = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &target);
        } else {
            std::fs::copy(e.path(), target).unwrap();
        }
    }
}

fn fixture() -> PathBuf {
    crate::repo_root().join("tests/fixtures/state")
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

// files → SQLite → (Redis) → export: the same document each time, unknown
// fields and every session field included.
#[test]
fn export_import_is_lossless_between_backends() {
    let root = temp("lossless");
    let files = root.join("files");
    copy_dir(&fixture(), &files);
    // An entry field this build does not know, and a session field another
    // subsystem owns, must survive the trip.
    let dump = root.join("a.json");
    ok(&failover(&[
        "state",
        "export",
        "--state",
        s(&files),
        "--backend",
        "files",
        "--out",
        s(&dump),
    ]));
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&dump).unwrap()).unwrap();
    assert!(
        !a["authState"]["usageStats"].as_object().unwrap().is_empty(),
        "the fixture has routing state: {a}"
    );
    assert!(!a["sessions"].as_object().unwrap().is_empty(), "{a}");

    let db = root.join("db");
    let o = failover(&[
        "state",
        "import",
        "--state",
        s(&db),
        "--backend",
        "sqlite",
        s(&dump),
    ]);
    ok(&o);
    assert!(db.join("agents/main/agent/state.sqlite").is_file());
    let b: Value = serde_json::from_str(&ok(&failover(&[
        "state",
        "export",
        "--state",
        s(&db),
        "--backend",
        "sqlite",
    ])))
    .unwrap();
    assert_eq!(a, b, "files → sqlite changed the state");

    if let Some(server) = failover_testkit::RedisServer::start() {
        let cfg = root.join("redis.yaml");
        std::fs::write(
            &cfg,
            format!(
                "agents: {{ defaults: {{ model: {{ primary: openai/gpt }} }} }}\nstate: {{ backend: redis, url: \"{}\", prefix: \"lossless:\" }}\n",
                server.url()
            ),
        )
        .unwrap();
        let r = root.join("redis");
        ok(&failover(&[
            "state",
            "import",
            "--state",
            s(&r),
            "--config",
            s(&cfg),
            s(&dump),
        ]));
        let c: Value = serde_json::from_str(&ok(&failover(&[
            "state",
            "export",
            "--state",
            s(&r),
            "--config",
            s(&cfg),
        ])))
        .unwrap();
        assert_eq!(a, c, "files → redis changed the state");
        // And back into files, read by the file store as before.
        let back = root.join("back");
        let dump_c = root.join("c.json");
        std::fs::write(&dump_c, serde_json::to_string(&c).unwrap()).unwrap();
        ok(&failover(&[
            "state",
            "import",
            "--state",
            s(&back),
            "--backend",
            "files",
            s(&dump_c),
        ]));
        let d: Value = serde_json::from_str(&ok(&failover(&[
            "state",
            "export",
            "--state",
            s(&back),
            "--backend",
            "files",
        ])))
        .unwrap();
        assert_eq!(a, d, "redis → files changed the state");
    }
    let _ = std::fs::remove_dir_all(root);
}

// `status --state DIR` reads the embedded database once serve's default
// backend has one, and the files otherwise.
#[test]
fn status_reads_the_database() {
    let root = temp("status");
    let files = root.join("files");
    copy_dir(&fixture(), &files);
    let now = ["--now", "1767225600000", "--json"];
    let mut args = vec!["status", "--state", s(&files)];
    args.extend(now);
    let from_files: Value = serde_json::from_slice(&failover(&args).stdout).unwrap();
    // The same state in a database (secrets beside it, state files gone).
    let dump = root.join("a.json");
    ok(&failover(&[
        "state",
        "export",
        "--state",
        s(&files),
        "--backend",
        "files",
        "--out",
        s(&dump),
    ]));
    let db = root.join("db");
    copy_dir(&fixture(), &db);
    std::fs::remove_file(db.join("agents/main/agent/auth-state.json")).unwrap();
    std::fs::remove_file(db.join("agents/main/sessions/sessions.json")).unwrap();
    ok(&failover(&[
        "state",
        "import",
        "--state",
        s(&db),
        "--backend",
        "sqlite",
        s(&dump),
    ]));
    let mut args = vec!["status", "--state", s(&db)];
    args.extend(now);
    let from_db: Value = serde_json::from_slice(&failover(&args).stdout).unwrap();
    let strip = |mut v: Value| {
        v.as_object_mut().unwrap().remove("state");
        v
    };
    assert_eq!(strip(from_files), strip(from_db));
    let _ = std::fs::remove_dir_all(root);
}

// A `state:` block that is wrong is an error with its line and column.
#[test]
fn state_block_errors_have_positions() {
    let root = temp("badcfg");
    let cfg = root.join("g.yaml");
    std::fs::write(
        &cfg,
        "agents: { defaults: { model: { primary: openai/gpt } } }\nstate:\n  backend: mongo\n",
    )
    .unwrap();
    let o = failover(&["status", "--state", s(&root), "--config", s(&cfg)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown state backend `mongo`"), "{err}");
    assert!(err.contains("g.yaml:3:"), "{err}");
    std::fs::write(
        &cfg,
        "agents: { defaults: { model: { primary: openai/gpt } } }\nstate: { backend: redis }\n",
    )
    .unwrap();
    let o = failover(&["status", "--state", s(&root), "--config", s(&cfg)]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("needs a `url`"), "{err}");
    let _ = std::fs::remove_dir_all(root);
}

// Issue 13 "Faults": Redis unreachable at start → a clear error naming it,
// without its password, and exit 2.
#[test]
fn serve_with_unreachable_redis_exits_2_without_the_password() {
    let root = temp("unreachable");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port(); // closed again at once: nothing listens there
    let cfg = root.join("g.yaml");
    std::fs::write(
        &cfg,
        format!(
            "agents: {{ defaults: {{ model: {{ primary: openai/gpt }} }} }}\nstate: {{ backend: redis, url: \"redis://ops:hunter2secret@127.0.0.1:{port}/0\" }}\n"
        ),
    )
    .unwrap();
    let o = failover(&[
        "serve",
        "--config",
        s(&cfg),
        "--state",
        s(&root),
        "--listen",
        "127.0.0.1:0",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("state backend"), "{err}");
    assert!(
        err.contains(&format!("redis://ops:***@127.0.0.1:{port}/0")),
        "{err}"
    );
    assert!(!err.contains("hunter2secret"), "{err}");
    let _ = std::fs::remove_dir_all(root);
}
