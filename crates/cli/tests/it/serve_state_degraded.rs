//! SPEC R17.2, issue 30 item 4: the state's disk stops taking writes under a running
//! gateway. The real `failover serve` process, its SQLite state, and a real
//! write failure: the process's file-size limit (`RLIMIT_FSIZE`, set from
//! outside with `prlimit` while it runs) drops to one byte, so every write
//! of its database fails with `EFBIG` as it would with `ENOSPC` on a full
//! disk, while reads go on. Answers that exist still go out; the failure
//! is logged once, not per request; `/readyz` says `degraded` and why;
//! `/metrics` counts; when the disk takes writes again the gateway
//! recovers on its own and says so once.
#![cfg(target_os = "linux")]
// `prlimit` on the child, `pre_exec` and `kill`: libc calls, each with its
// SAFETY note.
#![allow(unsafe_code)]

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::serve_support::*;

fn set_file_size_limit(pid: u32, bytes: Option<u64>) {
    let limit = libc::rlimit {
        rlim_cur: bytes.unwrap_or(libc::RLIM_INFINITY),
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: plain syscall on a child of this process, with valid pointers.
    let r = unsafe {
        libc::prlimit(
            pid as libc::pid_t,
            libc::RLIMIT_FSIZE,
            &limit,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(r, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_that_cannot_be_written_degrades_the_gateway_and_recovers() {
    let prim = Mock::start().await;
    let back = Mock::start().await;
    // The primary fails (a cooldown to write), the fallback answers (a
    // new session's override to write).
    prim.always(error(
        500,
        r#"{"error":{"message":"internal server error"}}"#,
    ));
    back.always(ok_openai("from back"));
    let dir = temp_dir("degraded");
    write_profiles(&dir);
    std::fs::write(
        dir.join("gateway.yaml"),
        config_text(&Setup::default(), &prim, &back),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_failover"));
    child
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(dir.join("gateway.yaml"))
        .arg("--state")
        .arg(dir.join("state"))
        .stderr(Stdio::piped())
        .stdout(Stdio::null());
    // SAFETY: only an async-signal-safe call between fork and exec: the
    // file-size limit must give `EFBIG`, not kill the process (the
    // default action of SIGXFSZ).
    unsafe {
        child.pre_exec(|| {
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = child.spawn().unwrap();
    let pid = child.id();
    // Its log lines, collected; the listen address from the first.
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let (addr_tx, addr_rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    let seen = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("\"listening\"") {
                let v: serde_json::Value = serde_json::from_str(&line).unwrap();
                let _ = addr_tx.send(v["listen"].as_str().unwrap().to_string());
            }
            seen.lock().unwrap().push(line);
        }
    });
    let addr = addr_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("the gateway starts");
    let http = reqwest::Client::new();
    let url = |p: &str| format!("http://{addr}{p}");
    let ask = |session: String| {
        let http = http.clone();
        let u = url("/v1/chat/completions");
        async move {
            let r = http
                .post(u)
                .header("x-session-id", session)
                .json(&chat("prim/model-a"))
                .send()
                .await
                .unwrap();
            Resp::from(r).await
        }
    };
    let r = ask("warm".into()).await;
    assert_eq!(r.status, 200, "{}", r.text);

    // The disk takes no more writes.
    set_file_size_limit(pid, Some(1));
    for i in 0..40 {
        let r = ask(format!("s{i}")).await;
        assert_eq!(r.status, 200, "request {i}: {}", r.text);
        assert_eq!(r.json()["choices"][0]["message"]["content"], "from back");
    }
    let ready: serde_json::Value = http
        .get(url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "degraded", "{ready}");
    assert!(
        ready["reason"].as_str().unwrap().starts_with("cannot "),
        "{ready}"
    );
    let metrics = http
        .get(url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let failed: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("failover_state_write_errors_total "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("{metrics}"));
    assert!(failed >= 40, "{failed} failed writes counted");
    assert!(metrics.contains("failover_state_degraded 1"), "{metrics}");
    let count = |what: &str| {
        lines
            .lock()
            .unwrap()
            .iter()
            .filter(|l| l.contains(what))
            .count()
    };
    // One line for the whole outage so far, not one per request.
    assert_eq!(count("state_write_failed"), 1);

    // The disk takes writes again: the next write recovers, said once.
    set_file_size_limit(pid, None);
    let r = ask("after".into()).await;
    assert_eq!(r.status, 200);
    let ready: serde_json::Value = http
        .get(url("/readyz"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(ready["status"], "ready", "{ready}");
    eventually("the recovery line", || count("state_write_recovered") == 1).await;

    // SIGTERM: a clean stop.
    // SAFETY: a signal to our own child.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGTERM);
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{status:?}");
    let _ = std::fs::remove_dir_all(&dir);
}
