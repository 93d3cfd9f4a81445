//! Issue 16 item 10, the store's half: when a corrupt state file was moved
//! aside and the rewrite then failed (disk full), the live path was left
//! empty. The damaged file is now copied aside, never moved, so the live
//! path always holds a file. (`status` on the state this leaves — it names
//! every kept copy and exits 1 — is crates/cli/tests/it/store_quarantine.rs:
//! the write-fault hook used here exists in this crate's test builds only.)

use crate::store::{FaultAction, FaultPlan, FileStore, StoreExt, WriteFault};

#[test]
fn a_failed_rewrite_after_quarantine_leaves_the_live_file() {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let root = std::env::temp_dir().join(format!(
        "failover-quarantine-rewrite-{}-{nanos}",
        std::process::id()
    ));
    let agent = root.join("agents/main/agent");
    std::fs::create_dir_all(&agent).unwrap();
    let live = agent.join("auth-profiles.json");
    let damaged = b"{\"version\": 1, \"profiles\": {\"openai:default\": {\"key\": \"sk-FAKE";
    std::fs::write(&live, damaged).unwrap();
    // Every write of this store fails, as on a full disk.
    let store = FileStore::open(&root, "main")
        .unwrap()
        .with_fault(FaultPlan {
            at: WriteFault::AfterBytes(0),
            action: FaultAction::Fail,
        });
    let result = store.update_profiles(|p| {
        p.profiles.clear();
    });
    assert!(result.is_err(), "the injected fault fails the rewrite");
    // The live path still holds the damaged file, byte for byte.
    assert_eq!(std::fs::read(&live).unwrap(), damaged);
    let copies: Vec<_> = std::fs::read_dir(&agent)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("auth-profiles.json.corrupt-"))
        .collect();
    assert_eq!(copies.len(), 1, "{copies:?}");
    assert_eq!(std::fs::read(agent.join(&copies[0])).unwrap(), damaged);
    std::fs::remove_dir_all(&root).unwrap();
}
