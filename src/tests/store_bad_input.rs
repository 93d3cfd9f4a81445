//! Bad input gives clear messages and never leaks a secret (SPEC R16.11):
//! a corrupt `auth-state.json`, an `auth-profiles.json` with an unknown
//! credential type, an expired OAuth token, a profile id without a
//! provider. Every message, and the `Debug` of every value involved, is
//! checked for the secret strings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::auth::{order_profiles, AuthRouting, ProfileMeta, RoutingError};
use crate::store::{FileStore, ManualClock, Store, StoreExt};

const NOW: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z
const SECRETS: [&str; 4] = [
    "sk-live-UNKNOWNTYPE-SECRET-1",
    "sk-live-NOPROVIDER-SECRET-2",
    "EXPIRED-ACCESS-SECRET-3",
    "sk-live-GOOD-SECRET-4",
];

fn temp_root(name: &str) -> PathBuf {
    failover_testkit::temp_root("bad", name)
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn assert_no_secret(what: &str, text: &str) {
    for s in SECRETS {
        assert!(!text.contains(s), "{what} leaks a secret: {text}");
    }
}

fn setup(root: &Path) -> FileStore {
    let store = FileStore::open(root, "main")
        .unwrap()
        .with_clock(Arc::new(ManualClock::new(NOW)));
    write(
        &store.paths().profiles,
        &format!(
            r#"{{"version": 1, "profiles": {{
                "openai:weird": {{"type": "session_cookie", "provider": "openai", "key": "{}"}},
                "nameless": {{"type": "api_key", "key": "{}"}},
                "anthropic:me@x.io": {{"type": "oauth", "provider": "anthropic", "access": "{}", "expires": {}, "email": "me@x.io"}},
                "openai:good": {{"type": "api_key", "provider": "openai", "key": "{}"}}
            }}}}"#,
            SECRETS[0],
            SECRETS[1],
            SECRETS[2],
            NOW - 60_000,
            SECRETS[3]
        ),
    );
    // Truncated mid-file, as a full disk leaves it.
    write(
        &store.paths().state,
        "{\"usageStats\": {\"openai:good\": {\"errorCount\": 1, \"cooldownUnt",
    );
    store
}

#[test]
fn bad_files_are_reported_clearly_and_the_engine_keeps_working() {
    let root = temp_root("report");
    let store = setup(&root);
    let profiles = store.load_profiles().unwrap();
    let state = store.load_state().unwrap();
    let problems: Vec<String> = store
        .take_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    let profiles_path = store.paths().profiles.display().to_string();
    let state_path = store.paths().state.display().to_string();
    assert_eq!(
        problems,
        [
            format!("`{profiles_path}`: profile `nameless` ignored: has no provider: add a `provider` field or name the profile `provider:name`"),
            format!("`{profiles_path}`: profile `openai:weird` ignored: unknown credential type `session_cookie` (expected `api_key`, `oauth`, `token` or `aws`)"),
            format!("`{state_path}` is corrupt (not valid JSON: EOF while parsing a string at line 1 column 61); ignoring it until the next write moves it aside"),
        ]
    );
    for p in &problems {
        assert!(!p.ends_with('.'), "no trailing period: {p}");
    }

    // The engine keeps working: the good profile routes, the expired OAuth
    // login is set aside with a clear reason.
    let anthropic = order_profiles(
        &AuthRouting::default(),
        &profiles,
        &state,
        "anthropic",
        None,
        NOW,
    );
    assert!(anthropic.entries.is_empty());
    assert_eq!(
        anthropic.excluded[0].to_string(),
        "profile `anthropic:me@x.io`: oauth access token expired at 2025-12-31T23:59:00Z and there is no refresh token; log in again"
    );
    let openai = order_profiles(
        &AuthRouting::default(),
        &profiles,
        &state,
        "openai",
        None,
        NOW,
    );
    assert_eq!(openai.ids().collect::<Vec<_>>(), ["openai:good"]);

    // Nothing leaks: messages, Debug of documents, orders and the store.
    assert_no_secret("problems", &problems.join("\n"));
    assert_no_secret("profiles Debug", &format!("{profiles:?} {profiles:#?}"));
    assert_no_secret("order Debug", &format!("{anthropic:?} {openai:?}"));
    assert_no_secret("store Debug", &format!("{store:?}"));
    assert_no_secret(
        "profile Debug",
        &format!("{:?}", profiles.profiles.values().collect::<Vec<_>>()),
    );
    std::fs::remove_dir_all(root).unwrap();
}

// The corrupt state file is moved aside on the next update, never
// overwritten; the update proceeds from empty state.
#[test]
fn corrupt_state_moved_aside_on_update() {
    let root = temp_root("aside");
    let store = setup(&root);
    let state_path = store.paths().state.clone();
    let damaged = std::fs::read(&state_path).unwrap();
    store
        .update_state(|s| s.stats_mut("openai:good").error_count = 7)
        .unwrap();
    let aside = PathBuf::from(format!("{}.corrupt-{NOW}", state_path.display()));
    assert_eq!(std::fs::read(&aside).unwrap(), damaged);
    assert_eq!(
        store.load_state().unwrap().usage_stats["openai:good"].error_count,
        7
    );
    let msgs: Vec<String> = store
        .take_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert!(
        msgs.iter()
            .any(|m| m.ends_with(&format!("moved it aside to `{}`", aside.display()))),
        "{msgs:?}"
    );
    std::fs::remove_dir_all(root).unwrap();
}

// A corrupt secrets file is moved aside, not overwritten, when a profile
// is added; its secrets stay on disk for the operator to recover.
#[test]
fn corrupt_secrets_never_overwritten() {
    let root = temp_root("secrets");
    let store = FileStore::open(&root, "main")
        .unwrap()
        .with_clock(Arc::new(ManualClock::new(NOW)));
    let path = store.paths().profiles.clone();
    let damaged = format!(
        "{{\"profiles\": {{\"openai:a\": {{\"type\": \"api_key\", \"key\": \"{}\"",
        SECRETS[3]
    );
    write(&path, &damaged);
    store
        .update_profiles(|p| {
            p.profiles.insert(
                "anthropic:default".into(),
                crate::store::Profile::api_key("anthropic", "sk-new-0000000000000"),
            )
        })
        .unwrap();
    let aside = PathBuf::from(format!("{}.corrupt-{NOW}", path.display()));
    assert_eq!(std::fs::read_to_string(aside).unwrap(), damaged);
    let msgs: Vec<String> = store
        .take_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_no_secret("problems", &msgs.join("\n"));
    std::fs::remove_dir_all(root).unwrap();
}

// A configured profile id without a provider is refused when the routing
// config is built.
#[test]
fn configured_profile_without_provider_is_refused() {
    let e = ProfileMeta::from_id("work-account").unwrap_err();
    assert_eq!(
        e.to_string(),
        "auth profile `work-account` has no provider: set `provider` or name it `provider:name`"
    );
    let meta = ProfileMeta::new("work-account", "");
    assert_eq!(
        AuthRouting::new(vec![meta], BTreeMap::new()),
        Err(RoutingError::NoProvider {
            id: "work-account".into()
        })
    );
}

// An unreadable state directory is an error with the path, not a panic.
#[cfg(unix)]
#[test]
fn unreadable_file_is_an_error_with_its_path() {
    use std::os::unix::fs::PermissionsExt;
    let root = temp_root("perm");
    let store = FileStore::open(&root, "main").unwrap();
    let path = store.paths().state.clone();
    write(&path, "{}");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
    // Root reads a mode-000 file anyway: the permission case can only be
    // checked as another user.
    let is_root = std::fs::read(&path).is_ok();
    let result = store.load_state();
    if is_root {
        assert!(result.is_ok(), "root reads the file");
    } else {
        assert_eq!(
            result.unwrap_err().to_string(),
            format!("cannot read `{}`: permission denied", path.display())
        );
    }
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::fs::remove_dir_all(root).unwrap();
}

// A state path that cannot be read even by root (a directory stands
// there): an error naming the path, and the directory is left alone.
#[test]
fn state_path_that_is_a_directory_is_an_error_with_its_path() {
    let root = temp_root("isdir");
    let store = FileStore::open(&root, "main").unwrap();
    let path = store.paths().state.clone();
    std::fs::create_dir_all(path.join("inside")).unwrap();
    let err = store.load_state().unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("cannot read `{}`: ", path.display())),
        "{err}"
    );
    assert!(path.join("inside").is_dir(), "nothing on disk is destroyed");
    std::fs::remove_dir_all(root).unwrap();
}

// A FIFO where the state file belongs is refused at once: reading it would
// wait for a writer for ever.
#[cfg(unix)]
#[test]
fn fifo_state_file_is_an_error_not_a_hang() {
    let root = temp_root("fifo");
    let store = FileStore::open(&root, "main").unwrap();
    let path = store.paths().state.clone();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(made.success());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(store.load_state().map(|_| ()).map_err(|e| e.to_string()));
    });
    // The timeout turns a blocked read into a failure instead of a hang.
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("no block");
    let err = got.unwrap_err();
    assert!(err.contains("not a regular file"), "{err}");
    std::fs::remove_dir_all(root).unwrap();
}
