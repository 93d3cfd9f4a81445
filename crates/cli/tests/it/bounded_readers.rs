//! Issue 16 item 2: every reader refuses a file by its size before reading
//! it. Each case is a 1 GiB sparse file (no disk used) given to the
//! command that reads it, run with its address space capped at 256 MiB:
//! a reader that read the file first would fail to allocate (or be killed)
//! instead of printing the documented limit.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const GIB: u64 = 1 << 30;

/// The CLI under `ulimit -v` (KiB): reading 1 GiB cannot fit.
fn capped(args: &[&std::ffi::OsStr]) -> Output {
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg("ulimit -v 262144 && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_failover"))
        .args(args);
    cmd.output().unwrap()
}

fn sparse(path: &Path, size: u64) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::File::create(path).unwrap().set_len(size).unwrap();
}

fn check(out: &Output, code: i32, needle: &str) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(code),
        "stdout: {stdout}\nstderr: {stderr}"
    );
    assert!(
        stdout.contains(needle) || stderr.contains(needle),
        "no `{needle}` in\nstdout: {stdout}\nstderr: {stderr}"
    );
}

fn root(name: &str) -> PathBuf {
    failover_testkit::temp_root("bounded", name)
}

#[test]
fn a_huge_rules_file_is_e014_unread() {
    let dir = root("rules");
    sparse(&dir.join("big.rules"), GIB);
    let out = capped(&["check".as_ref(), "--rules".as_ref(), dir.as_os_str()]);
    check(
        &out,
        1,
        "error[E014]: rules file is too large (1073.7 MB; the limit is 4 MB)",
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_huge_cases_file_is_refused_unread() {
    let dir = root("cases");
    std::fs::write(
        dir.join("a.rules"),
        "rule a.x when message has \"queue full\" => overloaded\n",
    )
    .unwrap();
    sparse(&dir.join("a.cases.yaml"), GIB);
    let out = capped(&["test".as_ref(), "--rules".as_ref(), dir.as_os_str()]);
    check(&out, 2, "the file is 1.0 GiB and the limit for it is 4 MiB");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_huge_scenario_is_refused_unread() {
    let dir = root("scenario");
    let p = dir.join("big.yaml");
    sparse(&p, GIB);
    let out = capped(&["simulate".as_ref(), p.as_os_str()]);
    check(&out, 2, "the file is 1.0 GiB and the limit for it is 1 MiB");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_huge_config_is_refused_unread() {
    let dir = root("config");
    let p = dir.join("gateway.yaml");
    sparse(&p, GIB);
    let out = capped(&["chain".as_ref(), "--config".as_ref(), p.as_os_str()]);
    check(&out, 2, "is larger than 1024 KiB");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn huge_state_files_are_refused_unread_and_left_alone() {
    for (file, limit) in [
        ("agents/main/agent/auth-profiles.json", "16 MiB"),
        ("agents/main/agent/auth-state.json", "16 MiB"),
        ("agents/main/sessions/sessions.json", "64 MiB"),
        ("credentials/oauth.json", "16 MiB"),
    ] {
        let dir = root("state");
        let p = dir.join(file);
        sparse(&p, GIB);
        let out = capped(&["status".as_ref(), "--state".as_ref(), dir.as_os_str()]);
        check(
            &out,
            2,
            &format!("the file is 1.0 GiB and the limit for it is {limit}"),
        );
        // Nothing on disk changed.
        assert_eq!(std::fs::metadata(&p).unwrap().len(), GIB, "{file}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
