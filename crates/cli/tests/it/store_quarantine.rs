//! Issue 16 item 10: when a corrupt state file was moved aside and the
//! rewrite then failed (disk full), the live path was left empty, and
//! `status` printed "(none stored)" and exited 0 without naming the
//! `.corrupt-*` file. The damaged file is now copied aside, never moved,
//! so the live path always holds a file; and `status` names every kept
//! copy and exits 1 while one exists.
//!
//! The store's half — the rewrite fails after the copy, and the live path
//! still holds the damaged file byte for byte — needs the store's
//! write-fault hook (`FileStore::with_fault`), which exists in the failover
//! crate's own test builds only: it is the unit test
//! `a_failed_rewrite_after_quarantine_leaves_the_live_file` in
//! src/tests/store_quarantine.rs. Here, `status` is run on
//! the state that failure leaves (the damaged live file beside one
//! `.corrupt-*` copy of it), made with the public API.

use std::process::Command;

use failover::state::{FileStore, StoreExt};

#[test]
fn status_names_the_kept_copy_of_a_damaged_file() {
    let root = failover_testkit::temp_root("quarantine", "rewrite");
    let agent = root.join("agents/main/agent");
    std::fs::create_dir_all(&agent).unwrap();
    let live = agent.join("auth-profiles.json");
    let damaged = b"{\"version\": 1, \"profiles\": {\"openai:default\": {\"key\": \"sk-FAKE";
    std::fs::write(&live, damaged).unwrap();
    // What a rewrite that failed after the quarantine leaves: an update
    // copies the damaged file aside and replaces it, then the damaged
    // bytes are put back at the live path.
    let store = FileStore::open(&root, "main").unwrap();
    store
        .update_profiles(|p| {
            p.profiles.clear();
        })
        .unwrap();
    std::fs::write(&live, damaged).unwrap();
    assert_eq!(std::fs::read(&live).unwrap(), damaged);
    let copies: Vec<_> = std::fs::read_dir(&agent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("auth-profiles.json.corrupt-"))
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(std::fs::read(agent.join(&copies[0])).unwrap(), damaged);

    // `status` reports the damage and the kept copy, and exits 1.
    let o = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["status", "--state"])
        .arg(&root)
        .output()
        .unwrap();
    let out = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains(&copies[0]), "{out}");
    assert!(!out.contains("FAKE"), "{out}");

    // A later good update copies the still-damaged file aside once more
    // and replaces it; the copies stay, and `status` still names them
    // (exit 1) until someone deletes them.
    let store = FileStore::open(&root, "main").unwrap();
    store.update_profiles(|p| p.profiles.clear()).unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["status", "--state"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_ne!(std::fs::read(&live).unwrap(), damaged);
    for e in std::fs::read_dir(&agent).unwrap().flatten() {
        if e.file_name().to_string_lossy().contains(".corrupt-") {
            std::fs::remove_file(e.path()).unwrap();
        }
    }
    let o = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["status", "--state"])
        .arg(&root)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    std::fs::remove_dir_all(&root).unwrap();
}
