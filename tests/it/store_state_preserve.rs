//! Bad entries in `auth-state.json` are reported, but an update never
//! destroys them or their valid siblings: valid entries are kept and used,
//! invalid ones are written back verbatim, and when an update does replace
//! a bad entry the file as it was is copied aside first.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use failover::state::{FileStore, Store, StoreExt};
use failover::time::ManualClock;
use serde_json::{json, Value};

const NOW: u64 = 1_767_225_600_000;

const REPRO: &str = r#"{"order":{"openai":["openai:a","openai:b"],"anthropic":"anthropic:me"},"lastGood":{"openai":5},"usageStats":{"openai:a":{"errorCount":2},"anthropic:me":{"disabledUntil":"2026-01-02T00:00:00Z","disabledReason":"billing"}}}"#;

fn setup(name: &str, text: &str) -> (PathBuf, FileStore) {
    let root = failover_testkit::temp_root("preserve", name);
    let store = FileStore::open(&root, "main")
        .unwrap()
        .with_clock(Arc::new(ManualClock::new(NOW)));
    let path = root.join("agents/main/agent/auth-state.json");
    assert_eq!(store.paths().state, path);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, text).unwrap();
    (root, store)
}

fn on_disk(path: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn copies_aside(path: &Path) -> Vec<PathBuf> {
    let name = format!("{}.corrupt-", path.file_name().unwrap().to_string_lossy());
    let mut out: Vec<PathBuf> = std::fs::read_dir(path.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&name))
        .collect();
    out.sort();
    out
}

fn messages(store: &FileStore) -> Vec<String> {
    store
        .take_problems()
        .iter()
        .map(ToString::to_string)
        .collect()
}

// The reviewer's reproduction: load, update, reload from disk.
#[test]
fn bad_state_entries_survive_an_update() {
    let (root, store) = setup("repro", REPRO);
    let path = store.paths().state.clone();
    let shown = path.display().to_string();

    // Load: valid entries are used, including the valid sibling in `order`.
    let s = store.load_state().unwrap();
    assert_eq!(s.order["openai"], ["openai:a", "openai:b"]);
    assert_eq!(s.usage_stats["openai:a"].error_count, 2);
    assert!(!s.order.contains_key("anthropic"));
    assert!(!s.usage_stats.contains_key("anthropic:me"));
    let mut msgs = messages(&store);
    msgs.sort();
    assert_eq!(msgs.len(), 3, "{msgs:?}");
    assert!(msgs.iter().all(|m| m.starts_with(&format!("`{shown}`: "))));
    assert!(
        msgs[0].contains("last good profile of `openai` ignored"),
        "{msgs:?}"
    );
    assert!(msgs[1].contains("order of `anthropic` ignored"), "{msgs:?}");
    assert!(
        msgs[2].contains("usage stats of `anthropic:me` ignored"),
        "{msgs:?}"
    );
    assert!(!msgs.join("\n").contains("2026-01-02"), "{msgs:?}");

    // Update: a small change to a valid entry.
    let n = store
        .update_state(|s| {
            let st = s.stats_mut("openai:a");
            st.error_count += 1;
            st.error_count
        })
        .unwrap();
    assert_eq!(n, 3);

    // Reload the file from disk: everything is still there.
    let v = on_disk(&path);
    assert_eq!(v["usageStats"]["openai:a"]["errorCount"], json!(3));
    assert_eq!(v["order"]["openai"], json!(["openai:a", "openai:b"]));
    assert_eq!(v["order"]["anthropic"], json!("anthropic:me"));
    assert_eq!(v["lastGood"], json!({"openai": 5}));
    assert_eq!(
        v["usageStats"]["anthropic:me"],
        json!({"disabledUntil": "2026-01-02T00:00:00Z", "disabledReason": "billing"})
    );
    // Kept verbatim, so there was nothing to copy aside.
    assert!(copies_aside(&path).is_empty());

    // A fresh store reads the rewritten file the same way: the valid parts
    // are used and the bad ones are still reported.
    let again = FileStore::open(&root, "main").unwrap();
    let s = again.load_state().unwrap();
    assert_eq!(s.order["openai"], ["openai:a", "openai:b"]);
    assert_eq!(s.usage_stats["openai:a"].error_count, 3);
    assert_eq!(messages(&again).len(), 3);
    std::fs::remove_dir_all(root).unwrap();
}

// An update that replaces a bad entry (a new failure recorded for the same
// profile) cannot keep it verbatim: the file as it was is copied aside
// first and the problem says where.
#[test]
fn replacing_a_bad_entry_copies_the_file_aside() {
    let (root, store) = setup("replace", REPRO);
    let path = store.paths().state.clone();
    store
        .update_state(|s| s.stats_mut("anthropic:me").error_count = 1)
        .unwrap();
    let aside = PathBuf::from(format!("{}.corrupt-{NOW}", path.display()));
    assert_eq!(copies_aside(&path), std::slice::from_ref(&aside));
    assert_eq!(std::fs::read_to_string(&aside).unwrap(), REPRO);
    let msgs = messages(&store);
    assert!(
        msgs.iter()
            .any(|m| m.contains("usage stats of `anthropic:me`")
                && m.ends_with(&format!("`{}`", aside.display()))),
        "{msgs:?}"
    );
    let v = on_disk(&path);
    assert_eq!(v["usageStats"]["anthropic:me"], json!({"errorCount": 1}));
    // The other bad entries are still kept verbatim.
    assert_eq!(v["order"]["anthropic"], json!("anthropic:me"));
    assert_eq!(v["lastGood"], json!({"openai": 5}));

    // Once replaced, later updates copy nothing more.
    store
        .update_state(|s| s.stats_mut("openai:a").error_count = 9)
        .unwrap();
    assert_eq!(copies_aside(&path).len(), 1);
    std::fs::remove_dir_all(root).unwrap();
}

// A whole field of the wrong shape, and a version that is not a number,
// are kept verbatim too.
#[test]
fn bad_top_level_fields_are_kept() {
    let text = r#"{"version":"one","order":5,"lastGood":["x"],"usageStats":{"a:b":{"errorCount":1}},"future":{"k":1}}"#;
    let (root, store) = setup("fields", text);
    let path = store.paths().state.clone();
    store
        .update_state(|s| s.stats_mut("a:b").error_count = 2)
        .unwrap();
    let msgs = messages(&store);
    assert!(
        msgs.iter().any(|m| m.contains("field `order` ignored")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("field `lastGood` ignored")),
        "{msgs:?}"
    );
    let v = on_disk(&path);
    assert_eq!(v["version"], json!("one"));
    assert_eq!(v["order"], json!(5));
    assert_eq!(v["lastGood"], json!(["x"]));
    assert_eq!(v["future"], json!({"k": 1}));
    assert_eq!(v["usageStats"]["a:b"]["errorCount"], json!(2));
    assert!(copies_aside(&path).is_empty());
    std::fs::remove_dir_all(root).unwrap();
}
