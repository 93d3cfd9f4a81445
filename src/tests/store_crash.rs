//! A write interrupted at any point leaves the old file or the new one,
//! never a torn one (DESIGN "State").
//!
//! `every_interruption_point_in_process` stops the store's writer after
//! each possible byte count of the temporary file, before `fsync`, before
//! the rename and after it, returning an error as if the process had died.
//! `real_crashes_in_child_processes` runs this binary as a child that
//! really aborts (`std::process::abort`, no destructors) at a few of those
//! points. After each, a fresh store must read exactly the old or the new
//! document, report no damage, and the next write must succeed and sweep
//! the leftovers.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::store::{
    AuthState, FaultAction, FaultPlan, FileStore, Profile, Store, StoreExt, WriteFault,
};

fn temp_root(name: &str) -> PathBuf {
    failover_testkit::temp_root("crash", name)
}

/// The old document.
fn write_old(store: &FileStore) {
    store
        .update_state(|s| {
            *s = AuthState::default();
            let st = s.stats_mut("openai:a");
            st.error_count = 1;
            st.cooldown_until = Some(60_000);
        })
        .unwrap();
}

/// The edit that produces the new document.
fn edit(s: &mut AuthState) {
    let st = s.stats_mut("openai:a");
    st.error_count = 2;
    st.cooldown_until = Some(300_000);
    st.cooldown_model = Some("gpt-5".into());
    s.stats_mut("openai:b").last_used = Some(42);
}

fn expected() -> (AuthState, AuthState) {
    let mut old = AuthState::default();
    let st = old.stats_mut("openai:a");
    st.error_count = 1;
    st.cooldown_until = Some(60_000);
    let mut new = old.clone();
    edit(&mut new);
    (old, new)
}

/// Reads the state back and says which version it is.
fn observe(root: &Path) -> &'static str {
    let store = FileStore::open(root, "main").unwrap();
    let text = std::fs::read_to_string(&store.paths().state).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).expect("never a torn file");
    let s = store.load_state().unwrap();
    assert!(store.take_problems().is_empty(), "no damage reported");
    let (old, new) = expected();
    let strip = |mut x: AuthState| {
        x.version = None;
        x
    };
    let s = strip(s);
    if s == strip(old) {
        "old"
    } else if s == strip(new) {
        "new"
    } else {
        panic!("neither old nor new: {s:?}")
    }
}

fn new_len(root: &Path) -> usize {
    let scratch = root.join("scratch");
    let store = FileStore::open(&scratch, "main").unwrap();
    write_old(&store);
    store.update_state(edit).unwrap();
    std::fs::metadata(&store.paths().state).unwrap().len() as usize
}

fn faults(len: usize) -> Vec<WriteFault> {
    let mut v: Vec<WriteFault> = (0..=len).map(WriteFault::AfterBytes).collect();
    v.extend([
        WriteFault::BeforeSync,
        WriteFault::BeforeRename,
        WriteFault::AfterRename,
    ]);
    v
}

#[test]
fn every_interruption_point_in_process() {
    let root = temp_root("inproc");
    let len = new_len(&root);
    let clean = FileStore::open(&root, "main").unwrap();
    for at in faults(len) {
        write_old(&clean);
        let faulty = FileStore::open(&root, "main")
            .unwrap()
            .with_fault(FaultPlan {
                at,
                action: FaultAction::Fail,
            });
        let err = faulty.update_state(edit).unwrap_err().to_string();
        assert!(err.starts_with("cannot write `"), "{err}");
        let want = if at == WriteFault::AfterRename {
            "new"
        } else {
            "old"
        };
        assert_eq!(observe(&root), want, "fault {at:?}");
    }
    // The next clean write succeeds and sweeps the temporary files.
    clean.update_state(edit).unwrap();
    assert_eq!(observe(&root), "new");
    let dir = clean.paths().state.parent().unwrap().to_path_buf();
    let names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().all(|n| !n.contains(".tmp-")), "{names:?}");
    std::fs::remove_dir_all(root).unwrap();
}

// The secrets file too: an interrupted write never loses a key.
#[test]
fn secrets_survive_interrupted_writes() {
    let root = temp_root("secrets");
    let clean = FileStore::open(&root, "main").unwrap();
    clean
        .update_profiles(|p| {
            p.profiles.insert(
                "openai:a".into(),
                Profile::api_key("openai", "sk-old-key-0000000000"),
            )
        })
        .unwrap();
    for at in [
        WriteFault::AfterBytes(0),
        WriteFault::AfterBytes(20),
        WriteFault::BeforeRename,
    ] {
        let faulty = FileStore::open(&root, "main")
            .unwrap()
            .with_fault(FaultPlan {
                at,
                action: FaultAction::Fail,
            });
        faulty
            .update_profiles(|p| {
                p.profiles.insert(
                    "openai:b".into(),
                    Profile::api_key("openai", "sk-new-key-1111111111"),
                )
            })
            .unwrap_err();
        let p = clean.load_profiles().unwrap();
        assert!(clean.take_problems().is_empty());
        assert_eq!(p.profiles.len(), 1, "fault {at:?}");
        assert_eq!(
            p.profiles["openai:a"]
                .credential
                .primary_secret()
                .unwrap()
                .expose(),
            "sk-old-key-0000000000"
        );
    }
    std::fs::remove_dir_all(root).unwrap();
}

fn fault_by_name(name: &str, len: usize) -> WriteFault {
    match name {
        "start" => WriteFault::AfterBytes(0),
        "middle" => WriteFault::AfterBytes(len / 2),
        "all-bytes" => WriteFault::AfterBytes(len),
        "before-sync" => WriteFault::BeforeSync,
        "before-rename" => WriteFault::BeforeRename,
        "after-rename" => WriteFault::AfterRename,
        other => panic!("unknown fault {other}"),
    }
}

#[test]
fn real_crashes_in_child_processes() {
    let root = temp_root("abort");
    let len = new_len(&root);
    let clean = FileStore::open(&root, "main").unwrap();
    let exe = std::env::current_exe().unwrap();
    let child = super::test_name(module_path!(), "crash_child");
    for name in [
        "start",
        "middle",
        "all-bytes",
        "before-sync",
        "before-rename",
        "after-rename",
    ] {
        write_old(&clean);
        // Through `sh` so the abort leaves no core file behind.
        let out = Command::new("sh")
            .args(["-c", "ulimit -c 0; exec \"$0\" \"$@\""])
            .arg(&exe)
            .args(["--exact", child.as_str(), "--nocapture", "--test-threads=1"])
            .env(
                "FAILOVER_CRASH_CHILD",
                format!("{}|{name}|{len}", root.display()),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        assert!(!out.success(), "the child must crash at {name}");
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            assert_eq!(
                out.signal(),
                Some(6),
                "the child aborted (SIGABRT) at {name}"
            );
        }
        let want = if name == "after-rename" { "new" } else { "old" };
        assert_eq!(observe(&root), want, "crash at {name}");
    }
    clean.update_state(edit).unwrap();
    assert_eq!(observe(&root), "new");
    std::fs::remove_dir_all(root).unwrap();
}

/// The child role: crashes inside a write when spawned by the test above.
#[test]
fn crash_child() {
    let Ok(spec) = std::env::var("FAILOVER_CRASH_CHILD") else {
        return;
    };
    let mut parts = spec.rsplitn(3, '|');
    let len: usize = parts.next().unwrap().parse().unwrap();
    let name = parts.next().unwrap();
    let root = parts.next().unwrap();
    let store = FileStore::open(root, "main")
        .unwrap()
        .with_fault(FaultPlan {
            at: fault_by_name(name, len),
            action: FaultAction::Abort,
        });
    let _ = store.update_state(edit);
    unreachable!("the write should have aborted the process");
}
