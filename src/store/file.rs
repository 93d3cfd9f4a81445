//! The default [`Store`]: JSON files in a state directory.
//!
//! Reads take no lock (a rename is atomic, so a reader sees a whole file).
//! Updates lock `<file>.lock`, clear temporary files a crashed writer left,
//! read the current file, run the closure, and replace the file only when
//! the document changed. A missing file starts from its legacy source when
//! there is one: the `main` agent's secrets from `<state>/agent/`, routing
//! state from the `usageStats`/`order`/`lastGood` old builds kept in the
//! secrets file, and OAuth logins from `<state>/credentials/oauth.json`
//! when no secrets file exists anywhere yet (SPEC R5.1, R5.4). Legacy files
//! are never modified.
//!
//! Nothing on disk is destroyed by an update: a file that is not JSON is
//! copied aside first (never moved: the live path always holds a file,
//! even when the rewrite then fails), entries that do not parse are written back verbatim,
//! and when an edit to routing state replaces such an entry (new stats
//! recorded for a profile whose record was malformed) the file as it was
//! is first copied to `<file>.corrupt-<ms>` and a [`Problem`] names the
//! copy (`Doc::replaced_unparsed`; profiles and sessions do not report
//! replacements yet).
//!
//! Worked example: a state directory from an old single-agent build holds
//! only `<state>/agent/auth-profiles.json`, with `usageStats` inside it.
//! `FileStore::open(state, "main")` reads both from there; the first
//! `update_state` writes `agents/main/agent/auth-state.json` from those
//! stats plus the edit, and from then on the new file is the one read.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::atomic::{
    create_private_dir, lock_path, remove_stale_temps, write_atomic_with, FaultPlan, FileLock,
};
use super::clock::{Clock, SystemClock};
use super::watch::Watch;
use super::{AuthProfiles, AuthState, Problem, SessionStore, Store, StoreError};

/// The agent id used when none is given.
pub const DEFAULT_AGENT: &str = "main";

/// `auth-profiles.json` (and the legacy `oauth.json`) over this size is
/// refused unread: a profile is a few hundred bytes.
pub(crate) const MAX_PROFILES_BYTES: u64 = 16 << 20;
/// `auth-state.json` over this size is refused unread: a profile's routing
/// state is a few hundred bytes.
pub(crate) const MAX_STATE_BYTES: u64 = 16 << 20;
/// `sessions.json` over this size is refused unread: a session entry is
/// up to a few kilobytes, and gateways keep thousands.
pub(crate) const MAX_SESSIONS_BYTES: u64 = 64 << 20;

const SECRET_MODE: u32 = 0o600;
const PLAIN_MODE: u32 = 0o644;

/// Where one agent's files live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatePaths {
    /// The state directory.
    pub root: PathBuf,
    /// `agents/<id>/agent/auth-profiles.json`: the secrets.
    pub profiles: PathBuf,
    /// `agents/<id>/agent/auth-state.json`: the routing state.
    pub state: PathBuf,
    /// `agents/<id>/sessions/sessions.json`: the sessions.
    pub sessions: PathBuf,
    /// `<state>/agent/auth-profiles.json`, for the default agent only.
    pub legacy_profiles: Option<PathBuf>,
    /// `credentials/oauth.json`, read once for migration.
    pub legacy_oauth: PathBuf,
}

impl StatePaths {
    /// The paths of `agent_id`'s files under `root`.
    pub fn new(root: &Path, agent_id: &str) -> Self {
        let agent = root.join("agents").join(agent_id);
        StatePaths {
            root: root.to_path_buf(),
            profiles: agent.join("agent").join("auth-profiles.json"),
            state: agent.join("agent").join("auth-state.json"),
            sessions: agent.join("sessions").join("sessions.json"),
            legacy_profiles: (agent_id == DEFAULT_AGENT)
                .then(|| root.join("agent").join("auth-profiles.json")),
            legacy_oauth: root.join("credentials").join("oauth.json"),
        }
    }
}

/// A state directory on the local file system.
///
/// The secrets are read again only after they changed: an inotify watch
/// on their paths says so on Linux (one non-blocking `read` per load; see
/// `watch.rs` for where it is declined), else the file's size, times and
/// inode do.
pub struct FileStore {
    agent: String,
    paths: StatePaths,
    clock: Arc<dyn Clock>,
    problems: Mutex<Vec<Problem>>,
    reported: Mutex<Vec<Problem>>,
    fault: Option<FaultPlan>,
    /// `auth-profiles.json` as last parsed, with the file's stamp then. A
    /// run reads the secrets at its start; parsing an unchanged file again
    /// cost ~11k instructions and four system calls per gateway request,
    /// where checking the stamp is one `statx`.
    profiles_seen: Mutex<Option<(Stamp, AuthProfiles)>>,
    /// The secrets as last read, while a watch on their paths says nothing
    /// there changed (`watch.rs`): no system call but the watch's one
    /// `read`, where the stamps cost a `statx` per path (three where the
    /// file does not exist).
    profiles_watched: Mutex<Watched>,
    /// Whether to try a watch at all (tests of the stamps turn it off).
    use_watch: bool,
    /// Times `auth-profiles.json` was parsed (what the cache saves).
    #[cfg(test)]
    profile_parses: std::sync::atomic::AtomicUsize,
}

/// The watch over the secrets' paths, and what was read under it.
#[derive(Debug)]
enum Watched {
    /// Not set yet, or spent by a change.
    Unset,
    /// Set before `AuthProfiles` was read: no change since.
    Active(Watch, AuthProfiles),
    /// None could be set (see `Watch::new`), at this instant; tried again
    /// after `WATCH_RETRY`, meanwhile the stamps serve.
    Unavailable(std::time::Instant),
}

/// How long a store goes by the stamps after a watch could not be set
/// (the state directory not created yet, no inotify instance left).
const WATCH_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// What tells a file's versions apart without reading it: size,
/// modification and change times, inode (a rename-into-place, as every
/// writer here does, is a new inode).
#[derive(Clone, PartialEq, Eq, Debug)]
struct Stamp {
    len: u64,
    modified: std::time::SystemTime,
    #[cfg(unix)]
    ino: u64,
    #[cfg(unix)]
    ctime: (i64, i64),
}

/// A file younger than this is never served from the cache: file times
/// tick coarsely (a few ms on Linux), so two same-size writes within one
/// tick would have one stamp. The racy-file rule git applies to its index.
const STAMP_SETTLE: std::time::Duration = std::time::Duration::from_secs(2);

impl Stamp {
    fn of(path: &Path) -> Option<Stamp> {
        let m = std::fs::metadata(path).ok()?;
        Some(Stamp {
            len: m.len(),
            modified: m.modified().ok()?,
            #[cfg(unix)]
            ino: std::os::unix::fs::MetadataExt::ino(&m),
            #[cfg(unix)]
            ctime: (
                std::os::unix::fs::MetadataExt::ctime(&m),
                std::os::unix::fs::MetadataExt::ctime_nsec(&m),
            ),
        })
    }

    /// Old enough that a later write cannot share its stamp.
    fn settled(&self) -> bool {
        std::time::SystemTime::now()
            .duration_since(self.modified)
            .is_ok_and(|age| age >= STAMP_SETTLE)
    }
}

impl std::fmt::Debug for FileStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileStore")
            .field("agent", &self.agent)
            .field("root", &self.paths.root)
            .finish_non_exhaustive()
    }
}

enum Read {
    Missing,
    Corrupt(String),
    Json(Value),
}

/// The three documents, told apart for the generic read and update paths.
trait Doc: Default {
    const MODE: u32;
    /// A file of this kind over this size is refused unread (an error, not
    /// damage: it is neither read nor replaced).
    const MAX_BYTES: u64;
    fn parse(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String>;
    fn to_json(&self) -> Value;
    /// Parts of the file that did not parse and that `to_json` will not
    /// write back (an edit replaced them), named for a message. The update
    /// copies the file aside before writing when this is not empty.
    fn replaced_unparsed(&self) -> Vec<String> {
        Vec::new()
    }
}

impl Doc for AuthProfiles {
    const MODE: u32 = SECRET_MODE;
    const MAX_BYTES: u64 = MAX_PROFILES_BYTES;
    fn parse(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String> {
        AuthProfiles::from_json(v, path, problems)
    }
    fn to_json(&self) -> Value {
        AuthProfiles::to_json(self)
    }
}

impl Doc for AuthState {
    const MODE: u32 = PLAIN_MODE;
    const MAX_BYTES: u64 = MAX_STATE_BYTES;
    fn parse(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String> {
        AuthState::from_json(v, path, problems)
    }
    fn to_json(&self) -> Value {
        AuthState::to_json(self)
    }
    fn replaced_unparsed(&self) -> Vec<String> {
        AuthState::replaced_unparsed(self)
    }
}

impl Doc for SessionStore {
    const MODE: u32 = PLAIN_MODE;
    const MAX_BYTES: u64 = MAX_SESSIONS_BYTES;
    fn parse(v: Value, path: &Path, problems: &mut Vec<Problem>) -> Result<Self, String> {
        SessionStore::from_json(v, path, problems)
    }
    fn to_json(&self) -> Value {
        SessionStore::to_json(self)
    }
}

fn read_json(path: &Path, limit: u64) -> Result<Read, StoreError> {
    // Only a regular file is read (a FIFO would block for ever, a device
    // such as `/dev/zero` never ends), and only when its size is within
    // `limit`, checked before reading.
    let bytes = match crate::fsio::read_regular(path, limit) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(e) => return Err(StoreError::io("read", path, &e)),
    };
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(Read::Corrupt("the file is empty".into()));
    }
    // serde_json's syntax errors give a position, never the text.
    match serde_json::from_slice(&bytes) {
        Ok(v) => Ok(Read::Json(v)),
        Err(e) => Ok(Read::Corrupt(format!("not valid JSON: {e}"))),
    }
}

impl FileStore {
    /// The store of `agent_id` under `root`. Nothing is created until the
    /// first update.
    pub fn open(root: impl AsRef<Path>, agent_id: &str) -> Result<Self, StoreError> {
        let ok = !agent_id.is_empty()
            && agent_id != "."
            && agent_id != ".."
            && agent_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            return Err(StoreError::InvalidAgentId(agent_id.into()));
        }
        Ok(FileStore {
            agent: agent_id.into(),
            paths: StatePaths::new(root.as_ref(), agent_id),
            clock: Arc::new(SystemClock),
            problems: Mutex::new(Vec::new()),
            reported: Mutex::new(Vec::new()),
            profiles_seen: Mutex::new(None),
            profiles_watched: Mutex::new(Watched::Unset),
            use_watch: true,
            #[cfg(test)]
            profile_parses: Default::default(),
            fault: None,
        })
    }

    /// Uses `clock` for the names of quarantined files.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Crash tests: every write of this store stops as `plan` says.
    #[cfg(test)]
    pub(crate) fn with_fault(mut self, plan: FaultPlan) -> Self {
        self.fault = Some(plan);
        self
    }

    /// Where this store's files are.
    pub fn paths(&self) -> &StatePaths {
        &self.paths
    }

    fn report(&self, new: Vec<Problem>) {
        if new.is_empty() {
            return;
        }
        let reported = self.reported.lock().unwrap_or_else(|e| e.into_inner());
        let mut pending = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        for p in new {
            if !reported.contains(&p) && !pending.contains(&p) {
                pending.push(p);
            }
        }
    }

    /// Reads a document without a lock; damage is reported, not fatal.
    fn read_doc<T: Doc>(&self, path: &Path) -> Result<Option<T>, StoreError> {
        let mut problems = Vec::new();
        let out = match read_json(path, T::MAX_BYTES)? {
            Read::Missing => None,
            Read::Corrupt(detail) => {
                problems.push(Problem::Corrupt {
                    path: path.into(),
                    detail,
                    moved_to: None,
                });
                Some(T::default())
            }
            Read::Json(v) => Some(T::parse(v, path, &mut problems).unwrap_or_else(|detail| {
                problems.push(Problem::Corrupt {
                    path: path.into(),
                    detail,
                    moved_to: None,
                });
                T::default()
            })),
        };
        self.report(problems);
        Ok(out)
    }

    /// A free `<file>.corrupt-<ms>` name for `path`.
    fn aside_path(&self, path: &Path) -> PathBuf {
        let stamp = self.clock.now_ms();
        let mut target = PathBuf::from(format!("{}.corrupt-{stamp}", path.display()));
        let mut n = 1;
        while target.exists() {
            target = PathBuf::from(format!("{}.corrupt-{stamp}-{n}", path.display()));
            n += 1;
        }
        target
    }

    /// Keeps a damaged file aside as `<file>.corrupt-<ms>`: a durable copy
    /// (same mode), not a rename, so the live path is never empty. The
    /// update's own atomic write then replaces the live file; if that
    /// write fails (disk full), the damaged file is still where it was and
    /// `status` names the copy.
    fn quarantine(
        &self,
        path: &Path,
        mode: u32,
        limit: u64,
        detail: String,
    ) -> Result<(), StoreError> {
        let bytes =
            crate::fsio::read_regular(path, limit).map_err(|e| StoreError::io("read", path, &e))?;
        let target = self.aside_path(path);
        write_atomic_with(&target, &bytes, mode, None)
            .map_err(|e| StoreError::io("move aside", path, &e))?;
        self.report(vec![Problem::Corrupt {
            path: path.into(),
            detail,
            moved_to: Some(target),
        }]);
        Ok(())
    }

    /// Before a write that replaces parts of `path` that did not parse
    /// (`replaced`), keeps the file as it was in `<file>.corrupt-<ms>`
    /// (written durably, same mode) and says so. Called under the lock.
    fn copy_aside(
        &self,
        path: &Path,
        mode: u32,
        limit: u64,
        replaced: &[String],
    ) -> Result<(), StoreError> {
        let bytes =
            crate::fsio::read_regular(path, limit).map_err(|e| StoreError::io("read", path, &e))?;
        let target = self.aside_path(path);
        write_atomic_with(&target, &bytes, mode, None)
            .map_err(|e| StoreError::io("copy aside", &target, &e))?;
        self.report(vec![Problem::Corrupt {
            path: path.into(),
            detail: format!(
                "{} did not parse and this update replaced it",
                replaced.join(", ")
            ),
            moved_to: Some(target),
        }]);
        Ok(())
    }

    /// Read-modify-write of one document under its lock.
    fn update_doc<T: Doc>(
        &self,
        path: &Path,
        initial: impl FnOnce(&Self) -> Result<T, StoreError>,
        f: &mut dyn FnMut(&mut T),
    ) -> Result<(), StoreError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        create_private_dir(dir).map_err(|e| StoreError::io("create directory", dir, &e))?;
        let lock = lock_path(path);
        let _guard = FileLock::acquire(&lock).map_err(|e| StoreError::io("lock", &lock, &e))?;
        remove_stale_temps(path);
        let mut problems = Vec::new();
        let (mut doc, before) = match read_json(path, T::MAX_BYTES)? {
            Read::Missing => (initial(self)?, None),
            Read::Corrupt(detail) => {
                self.quarantine(path, T::MODE, T::MAX_BYTES, detail)?;
                (T::default(), None)
            }
            Read::Json(v) => match T::parse(v, path, &mut problems) {
                Ok(doc) => {
                    let before = doc.to_json();
                    (doc, Some(before))
                }
                Err(detail) => {
                    self.quarantine(path, T::MODE, T::MAX_BYTES, detail)?;
                    (T::default(), None)
                }
            },
        };
        self.report(problems);
        f(&mut doc);
        let after = doc.to_json();
        if before.as_ref() == Some(&after) {
            return Ok(());
        }
        // Unparsed parts are written back verbatim; one an edit replaced
        // would be lost, so the file as it was is kept aside first.
        let replaced = doc.replaced_unparsed();
        if before.is_some() && !replaced.is_empty() {
            self.copy_aside(path, T::MODE, T::MAX_BYTES, &replaced)?;
        }
        let mut bytes = serde_json::to_vec_pretty(&after).expect("JSON serialises");
        bytes.push(b'\n');
        write_atomic_with(path, &bytes, T::MODE, self.fault)
            .map_err(|e| StoreError::io("write", path, &e))
    }

    /// The secrets, read again unless the file's stamp says it is the one
    /// last parsed (the way without a watch).
    fn load_profiles_stamped(&self) -> Result<AuthProfiles, StoreError> {
        let path = &self.paths.profiles;
        // Missing (as far as one look can tell): the legacy places.
        let Some(before) = Stamp::of(path) else {
            return self.initial_profiles();
        };
        let seen = || self.profiles_seen.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((s, p)) = &*seen() {
            if *s == before && s.settled() {
                return Ok(p.clone());
            }
        }
        #[cfg(test)]
        self.profile_parses
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some(profiles) = self.read_doc::<AuthProfiles>(path)? else {
            return self.initial_profiles();
        };
        // Kept only when the file did not change while it was read.
        *seen() = (Stamp::of(path).as_ref() == Some(&before)).then(|| (before, profiles.clone()));
        Ok(profiles)
    }

    /// Secrets when `auth-profiles.json` does not exist: the legacy file,
    /// else the legacy OAuth logins, else nothing.
    fn initial_profiles(&self) -> Result<AuthProfiles, StoreError> {
        if let Some(legacy) = &self.paths.legacy_profiles {
            if let Some(p) = self.read_doc::<AuthProfiles>(legacy)? {
                return Ok(p);
            }
        }
        let mut profiles = AuthProfiles::default();
        match read_json(&self.paths.legacy_oauth, MAX_PROFILES_BYTES)? {
            Read::Missing => {}
            Read::Corrupt(detail) => self.report(vec![Problem::Corrupt {
                path: self.paths.legacy_oauth.clone(),
                detail,
                moved_to: None,
            }]),
            Read::Json(v) => {
                let mut problems = Vec::new();
                profiles.import_legacy_oauth(&v, &self.paths.legacy_oauth, &mut problems);
                self.report(problems);
            }
        }
        Ok(profiles)
    }

    /// Routing state when `auth-state.json` does not exist: what old builds
    /// kept inside the secrets file.
    fn initial_state(&self) -> Result<AuthState, StoreError> {
        let profiles = self.load_profiles()?;
        let mut problems = Vec::new();
        let state = profiles
            .legacy_state(&self.paths.profiles, &mut problems)
            .unwrap_or_default();
        self.report(problems);
        Ok(state)
    }
}

impl Store for FileStore {
    fn agent_id(&self) -> &str {
        &self.agent
    }

    /// The secrets, from what was last read while a watch on their paths
    /// saw no change; else read, under a watch set first (a change while
    /// they are read is an event the next call sees).
    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        if !self.use_watch {
            return self.load_profiles_stamped();
        }
        let mut watched = self
            .profiles_watched
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        match &*watched {
            Watched::Active(watch, profiles) if !watch.changed() => return Ok(profiles.clone()),
            Watched::Unavailable(at) if at.elapsed() < WATCH_RETRY => {
                drop(watched);
                return self.load_profiles_stamped();
            }
            _ => {}
        }
        *watched = Watched::Unset;
        let paths = &self.paths;
        let mut files = vec![paths.profiles.as_path(), paths.legacy_oauth.as_path()];
        files.extend(paths.legacy_profiles.as_deref());
        let Some(watch) = Watch::new(&paths.root, &files) else {
            *watched = Watched::Unavailable(std::time::Instant::now());
            drop(watched);
            return self.load_profiles_stamped();
        };
        // Held while the files are read: a concurrent call waits for this
        // read rather than reading them too.
        let profiles = self.load_profiles_stamped()?;
        *watched = Watched::Active(watch, profiles.clone());
        Ok(profiles)
    }

    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        let path = self.paths.profiles.clone();
        *self.profiles_seen.lock().unwrap_or_else(|e| e.into_inner()) = None;
        *self
            .profiles_watched
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Watched::Unset;
        self.update_doc(&path, Self::initial_profiles, f)
    }

    fn load_state(&self) -> Result<AuthState, StoreError> {
        match self.read_doc(&self.paths.state)? {
            Some(s) => Ok(s),
            None => self.initial_state(),
        }
    }

    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        Ok(self.read_doc(&self.paths.sessions)?.unwrap_or_default())
    }

    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        let path = self.paths.state.clone();
        self.update_doc(&path, Self::initial_state, f)
    }

    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        let path = self.paths.sessions.clone();
        self.update_doc(&path, |_| Ok(SessionStore::default()), f)
    }

    fn take_problems(&self) -> Vec<Problem> {
        let mut pending = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        let out = std::mem::take(&mut *pending);
        self.reported
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(out.iter().cloned());
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ManualClock, Profile, StoreExt};
    use serde_json::json;
    use std::fs;

    fn tmp(name: &str) -> PathBuf {
        crate::store::test_dir("fs", name)
    }

    fn write(path: &Path, text: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    // R5.1: secrets written with mode 0600 in the agent directory.
    #[test]
    fn r5_1_profiles_written_private() {
        let root = tmp("mode");
        let store = FileStore::open(&root, "main").unwrap();
        store
            .update_profiles(|p| {
                p.profiles
                    .insert("openai:default".into(), Profile::api_key("openai", "sk-x"))
            })
            .unwrap();
        let path = root.join("agents/main/agent/auth-profiles.json");
        let v: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        assert_eq!(v["profiles"]["openai:default"]["type"], json!("api_key"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&path).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        fs::remove_dir_all(root).unwrap();
    }

    fn doc(k: &str) -> String {
        format!(
            r#"{{"profiles": {{"openai:default": {{"type": "api_key", "provider": "openai", "key": "{k}"}}}}}}"#
        )
    }

    /// The store's own write of the secrets is read back; then the file is
    /// removed: the secrets read after that.
    fn own_write_then_removal(store: &FileStore, path: &Path) -> AuthProfiles {
        store
            .update_profiles(|p| {
                p.profiles.insert(
                    "openai:default".into(),
                    Profile::api_key("openai", "sk-dddd"),
                )
            })
            .unwrap();
        assert_eq!(key_of(store), "sk-dddd");
        fs::remove_file(path).unwrap();
        store.load_profiles().unwrap()
    }

    fn key_of(store: &FileStore) -> String {
        match &store.load_profiles().unwrap().profiles["openai:default"].credential {
            crate::store::Credential::ApiKey { key, .. } => {
                key.as_ref().unwrap().expose().to_string()
            }
            other => panic!("{other:?}"),
        }
    }

    fn set_mtime(path: &Path, t: std::time::SystemTime) {
        fs::File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_modified(t)
            .unwrap();
    }

    fn age(path: &Path, secs: u64) {
        set_mtime(
            path,
            std::time::SystemTime::now() - std::time::Duration::from_secs(secs),
        );
    }

    // R5.1: an unchanged secrets file is parsed once; every kind of change
    // is seen on the next read: an edit in place of the same size and the
    // same modification time (its change time moves), a file renamed into
    // place, a file younger than the settle time, a removal.
    #[test]
    fn r5_1_profiles_are_reparsed_only_when_the_file_changes() {
        let root = tmp("seen");
        let path = root.join("agents/main/agent/auth-profiles.json");
        write(&path, &doc("sk-aaaa"));
        age(&path, 60);
        let mut store = FileStore::open(&root, "main").unwrap();
        // The stamps alone (the watch is tested below).
        store.use_watch = false;
        let store = store;
        let parses = || {
            store
                .profile_parses
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        assert_eq!(key_of(&store), "sk-aaaa");
        assert_eq!(key_of(&store), "sk-aaaa");
        assert_eq!(key_of(&store), "sk-aaaa");
        assert_eq!(parses(), 1, "an unchanged file is parsed once");

        // In place, same size, modification time put back.
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();
        // File times tick every few ms: past one tick, the change time of
        // the edit below differs from the first write's.
        std::thread::sleep(std::time::Duration::from_millis(20));
        fs::write(&path, doc("sk-bbbb")).unwrap();
        set_mtime(&path, mtime);
        assert_eq!(key_of(&store), "sk-bbbb");
        assert_eq!(parses(), 2);

        // Renamed into place (a new inode), and fresh: read every time
        // until it has settled.
        let next = root.join("next.json");
        write(&next, &doc("sk-cccc"));
        fs::rename(&next, &path).unwrap();
        assert_eq!(key_of(&store), "sk-cccc");
        assert_eq!(key_of(&store), "sk-cccc");
        assert_eq!(
            parses(),
            4,
            "a file younger than the settle time is read each time"
        );
        age(&path, 60);
        assert_eq!(key_of(&store), "sk-cccc");
        assert_eq!(key_of(&store), "sk-cccc");
        assert_eq!(parses(), 5);

        assert!(own_write_then_removal(&store, &path).profiles.is_empty());
        fs::remove_dir_all(root).unwrap();
    }

    // R5.1 with the watch (`watch.rs`): an unchanged secrets file is
    // parsed once, even a fresh one (no settle time); every change is seen
    // by the next read, a missing file's legacy places included, and
    // writes beside it (the routing state, the database) parse nothing.
    #[test]
    fn r5_1_a_watched_secrets_file_is_reparsed_only_after_a_change() {
        let root = tmp("watched");
        let path = root.join("agents/main/agent/auth-profiles.json");
        fs::create_dir_all(&root).unwrap();
        let store = FileStore::open(&root, "main").unwrap();
        let parses = || {
            store
                .profile_parses
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let active = || matches!(*store.profiles_watched.lock().unwrap(), Watched::Active(..));
        // Nothing exists yet: the legacy places are watched for too.
        assert!(store.load_profiles().unwrap().profiles.is_empty());
        assert!(active(), "the test directory's file system takes a watch");
        write(
            &root.join("credentials/oauth.json"),
            r#"{"anthropic": {"access": "a", "refresh": "r", "expires": 1, "email": "me@x.io"}}"#,
        );
        assert!(store
            .load_profiles()
            .unwrap()
            .profiles
            .contains_key("anthropic:me@x.io"));

        write(&path, &doc("sk-aaaa"));
        assert_eq!(key_of(&store), "sk-aaaa");
        let after_first = parses();
        assert_eq!(key_of(&store), "sk-aaaa");
        assert_eq!(key_of(&store), "sk-aaaa");
        assert_eq!(
            parses(),
            after_first,
            "a fresh, unchanged file is not parsed again"
        );

        // Beside it: the routing state, a database's log.
        store
            .update_state(|s| s.stats_mut("openai:default").error_count += 1)
            .unwrap();
        fs::write(path.with_file_name("state.sqlite-wal"), "x").unwrap();
        assert_eq!(key_of(&store), "sk-aaaa");
        assert_eq!(parses(), after_first, "other files' writes");

        // In place, same size, modification time put back, within the
        // same tick of the file times: the stamps could not tell.
        let mtime = fs::metadata(&path).unwrap().modified().unwrap();
        fs::write(&path, doc("sk-bbbb")).unwrap();
        set_mtime(&path, mtime);
        assert_eq!(key_of(&store), "sk-bbbb");
        assert_eq!(parses(), after_first + 1);

        // Renamed into place.
        let next = root.join("next.json");
        write(&next, &doc("sk-cccc"));
        fs::rename(&next, &path).unwrap();
        assert_eq!(key_of(&store), "sk-cccc");
        assert_eq!(key_of(&store), "sk-cccc");
        assert_eq!(parses(), after_first + 2);

        assert!(!own_write_then_removal(&store, &path)
            .profiles
            .contains_key("openai:default"));
        fs::remove_dir_all(root).unwrap();
    }

    // Where no watch can be set (the state directory not there yet), the
    // stamps serve, and a watch is tried again later.
    #[test]
    fn r5_1_without_a_watch_the_stamps_serve() {
        let root = tmp("unwatched");
        let store = FileStore::open(&root, "main").unwrap();
        assert!(store.load_profiles().unwrap().profiles.is_empty());
        assert!(matches!(
            *store.profiles_watched.lock().unwrap(),
            Watched::Unavailable(_)
        ));
        write(
            &root.join("agents/main/agent/auth-profiles.json"),
            r#"{"profiles": {"openai:default": {"type": "api_key", "provider": "openai", "key": "sk-eeee"}}}"#,
        );
        assert_eq!(key_of(&store), "sk-eeee");
        *store.profiles_watched.lock().unwrap() =
            Watched::Unavailable(std::time::Instant::now() - WATCH_RETRY);
        assert_eq!(key_of(&store), "sk-eeee");
        assert!(matches!(
            *store.profiles_watched.lock().unwrap(),
            Watched::Active(..)
        ));
        fs::remove_dir_all(root).unwrap();
    }

    // R5.1 legacy location, R5.2 legacy state inside the secrets file.
    #[test]
    fn r5_1_legacy_locations_are_read() {
        let root = tmp("legacy");
        write(
            &root.join("agent/auth-profiles.json"),
            r#"{"profiles": {"openai:default": {"type": "api_key", "provider": "openai", "key": "k"}},
                "usageStats": {"openai:default": {"errorCount": 2, "lastUsed": 7}}}"#,
        );
        let store = FileStore::open(&root, "main").unwrap();
        assert!(store
            .load_profiles()
            .unwrap()
            .profiles
            .contains_key("openai:default"));
        assert_eq!(
            store.load_state().unwrap().usage_stats["openai:default"].error_count,
            2
        );
        // Another agent does not inherit the legacy secrets.
        let other = FileStore::open(&root, "ops").unwrap();
        assert!(other.load_profiles().unwrap().profiles.is_empty());
        fs::remove_dir_all(root).unwrap();
    }

    // R5.4: legacy OAuth logins are imported on first use and persisted.
    #[test]
    fn r5_4_legacy_oauth_imported_on_first_write() {
        let root = tmp("oauth");
        write(
            &root.join("credentials/oauth.json"),
            r#"{"anthropic": {"access": "a", "refresh": "r", "expires": 1, "email": "me@x.io"}}"#,
        );
        let store = FileStore::open(&root, "main").unwrap();
        assert!(store
            .load_profiles()
            .unwrap()
            .profiles
            .contains_key("anthropic:me@x.io"));
        store.update_profiles(|_| ()).unwrap();
        let text = fs::read_to_string(root.join("agents/main/agent/auth-profiles.json")).unwrap();
        assert!(text.contains("anthropic:me@x.io"));
        fs::remove_dir_all(root).unwrap();
    }

    // Corrupt file: reported with its path, moved aside on the next update
    // (never overwritten), and the store keeps working.
    #[test]
    fn corrupt_file_is_reported_then_moved_aside() {
        let root = tmp("corrupt");
        let store = FileStore::open(&root, "main")
            .unwrap()
            .with_clock(Arc::new(ManualClock::new(1234)));
        let path = store.paths().state.clone();
        write(&path, "{\"usageStats\": {\"a:b\": {\"errorCount\": 3");
        let s = store.load_state().unwrap();
        assert!(s.usage_stats.is_empty());
        let problems = store.take_problems();
        assert_eq!(problems.len(), 1);
        let msg = problems[0].to_string();
        assert!(
            msg.contains("auth-state.json` is corrupt (not valid JSON: EOF while parsing"),
            "{msg}"
        );
        // Reported once.
        store.load_state().unwrap();
        assert!(store.take_problems().is_empty());

        store
            .update_state(|s| s.stats_mut("a:b").error_count = 1)
            .unwrap();
        let aside = PathBuf::from(format!("{}.corrupt-1234", path.display()));
        assert!(fs::read_to_string(&aside)
            .unwrap()
            .contains("errorCount\": 3"));
        let msg = store.take_problems()[0].to_string();
        assert!(
            msg.contains("was corrupt") && msg.contains(".corrupt-1234`"),
            "{msg}"
        );
        assert_eq!(
            store.load_state().unwrap().usage_stats["a:b"].error_count,
            1
        );
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn unchanged_document_is_not_rewritten() {
        let root = tmp("unchanged");
        let store = FileStore::open(&root, "main").unwrap();
        store
            .update_state(|s| s.stats_mut("a:b").error_count = 1)
            .unwrap();
        let path = store.paths().state.clone();
        let first = fs::metadata(&path).unwrap();
        store.update_state(|_| ()).unwrap();
        #[cfg(unix)]
        {
            // A rewrite would have renamed a new inode into place.
            use std::os::unix::fs::MetadataExt;
            assert_eq!(fs::metadata(&path).unwrap().ino(), first.ino());
        }
        fs::remove_dir_all(root).unwrap();
    }

    #[test]
    fn rejects_path_like_agent_ids() {
        for bad in ["", "..", "a/b", "a b"] {
            let e = FileStore::open("/tmp", bad).unwrap_err().to_string();
            assert!(e.starts_with("invalid agent id `"), "{e}");
        }
    }
}
