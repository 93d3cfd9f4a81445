//! The embedded state database: SQLite, `serve`'s default backend.
//!
//! One database per agent, beside the secrets:
//! `<state>/agents/<agentId>/agent/state.sqlite`, in WAL mode (readers
//! never wait for the writer; other processes on the machine share it
//! safely), `synchronous=NORMAL` (a commit is durable against a process
//! crash; a power cut may lose the last commits, never corrupt the file),
//! and a busy timeout so that writers from several processes queue
//! instead of failing. Rows:
//!
//! ```text
//! usage_stats(profile PRIMARY KEY, stats JSON)       one row per profile
//! last_good(provider PRIMARY KEY, profile)
//! provider_order(provider PRIMARY KEY, profiles JSON)
//! sessions(key PRIMARY KEY, entry JSON)              one row per session
//! doc(name PRIMARY KEY, value JSON)                  version, unknown top-level fields
//! ```
//!
//! Each value is the JSON of the original file's entry (`usageStats` of one
//! profile, one session's entry with every field another subsystem owns),
//! so an export to files is the original layout again (SPEC R5).
//!
//! The per-record updates of [`AsyncStore`] are one `BEGIN IMMEDIATE`
//! transaction each on one row (two for a profile: its stats and its
//! provider's `lastGood`): their cost does not grow with the number of
//! sessions. A run's success (`AsyncStore::update_success`) is one
//! transaction for the profile's record and the session's entry, so a
//! process killed in the middle leaves both or neither. The whole-document [`Store`] calls (used by `status`, `state
//! export`/`import` and the tests) read or rewrite every row in one
//! transaction. Secrets never enter the database: profiles are read from
//! and written to `auth-profiles.json` by the file store, as before.
//!
//! Calls run on the calling thread under the connection's mutex; an
//! indexed read or write takes microseconds, far less than handing the
//! work to another thread would. Reads are served from what this
//! connection last read or wrote (the routing state, and each session's
//! entry) for as long as the WAL index shows that no other connection
//! committed since (`WalIndex`); a commit elsewhere sends the next read to
//! the tables.
//!
//! Worked example: the first `SqliteStore::open(state, "main")` on a state
//! directory that holds `auth-state.json` and `sessions.json` from the
//! file store creates the database and copies both documents into it in
//! one transaction (the files are left as they were); from then on the
//! database is the routing state and `status --state DIR` reads it.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::Value;

use super::face::{AsyncStore, ProfileEdit, SessionEdit, StoreFuture};
use super::file::{FileStore, StatePaths};
use super::{
    normalize_provider, AuthProfiles, AuthState, Problem, SessionEntry, SessionStore, Store,
    StoreError, UsageStats,
};

/// The database's file name, in the agent's `agent/` directory.
pub(crate) const SQLITE_FILE: &str = "state.sqlite";
/// How long a writer waits for another process's transaction.
const BUSY_TIMEOUT: Duration = Duration::from_secs(10);

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS doc (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS usage_stats (profile TEXT PRIMARY KEY, stats TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS last_good (provider TEXT PRIMARY KEY, profile TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS provider_order (provider TEXT PRIMARY KEY, profiles TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sessions (key TEXT PRIMARY KEY, entry TEXT NOT NULL) WITHOUT ROWID;
";

/// See the module documentation.
pub struct SqliteStore {
    files: FileStore,
    path: PathBuf,
    conn: Mutex<Connection>,
    /// The routing state as this connection last read it. Locked only
    /// while `conn` is held. See `load_state`.
    seen: Mutex<Option<Seen>>,
    /// The database's WAL index, read to tell that nothing committed
    /// (`None` where it cannot be opened: every check is SQLite's own).
    wal_index: Option<WalIndex>,
    problems: Mutex<Vec<Problem>>,
    /// How many times the state tables were read whole (tests).
    #[cfg(test)]
    state_reads: std::sync::atomic::AtomicUsize,
    /// How many times `PRAGMA data_version` was asked (tests).
    #[cfg(test)]
    version_checks: std::sync::atomic::AtomicUsize,
    /// How many times a session entry was read from its table (tests).
    #[cfg(test)]
    session_reads: std::sync::atomic::AtomicUsize,
}

/// The cached routing state and what it was current for.
struct Seen {
    /// The connection's `PRAGMA data_version` at the read.
    version: i64,
    /// The WAL-index header read before a check that found the copy
    /// current, when it was whole (see [`WalIndex`]).
    header: Option<WalHeader>,
    state: AuthState,
    /// Session entries (`None`: no row) read while `state` was current,
    /// and kept as long as it stays current: another connection's commit
    /// that the header or `data_version` shows replaces the whole `Seen`,
    /// and this connection's own writes of an entry put it here
    /// (`note_session`). A kept session's turn then reads its entry, at
    /// the run's start and again at its success, with no statement.
    sessions: rustc_hash::FxHashMap<String, Option<SessionEntry>>,
}

/// At most this many session entries are kept; past it the map starts
/// again (the sessions in use are read back at their next turn).
const SESSIONS_KEPT: usize = 4096;

impl Seen {
    fn keep_session(&mut self, key: &str, entry: Option<SessionEntry>) {
        if self.sessions.len() >= SESSIONS_KEPT && !self.sessions.contains_key(key) {
            self.sessions.clear();
        }
        self.sessions.insert(key.to_string(), entry);
    }
}

/// Both copies of the WAL-index header (see [`WalIndex`]).
type WalHeader = [u8; WAL_HEADER_BYTES];

/// The two 48-byte copies of `WalIndexHdr` at the start of the shm file.
const WAL_HEADER_BYTES: usize = 96;
/// `WALINDEX_MAX_VERSION`, the header format this reading knows.
const WAL_INDEX_VERSION: u32 = 3_007_000;

/// The `-shm` file of the database, opened read-only, to answer "has any
/// connection committed since?" with one `pread` instead of a read
/// transaction (SQLite's `PRAGMA data_version` takes and drops the
/// database's shared lock: two `fcntl` calls and the VDBE, ~5 µs of the
/// gateway's ~20 µs per request; benches/README.md, "The state check
/// without a lock").
///
/// The file's first 96 bytes are two copies of the WAL-index header
/// (<https://sqlite.org/walformat.html>, "The WAL-Index Header"): every
/// commit by any connection rewrites them, with a new change counter
/// (`iChange`), frame count and checksums, first copy then second, and
/// SQLite's own readers trust the header only when both copies agree.
/// So do we: bytes equal to those seen before a check that found the
/// copy current mean that no connection has committed since. Anything
/// else (copies that differ mid-write, a header of another format
/// version, not initialised, a short read) sends the caller to
/// `PRAGMA data_version`, as before. Equal bytes are never taken for a
/// change of nothing by mistake: a commit always moves `iChange`.
/// SQLite keeps the file while this store's connection is open; deleting
/// it under live connections breaks SQLite's own readers as well.
struct WalIndex {
    file: std::fs::File,
}

impl WalIndex {
    fn open(db: &Path) -> Option<WalIndex> {
        let mut name = db.as_os_str().to_owned();
        name.push("-shm");
        let file = std::fs::File::open(PathBuf::from(name)).ok()?;
        Some(WalIndex { file })
    }

    /// The header when it is whole and of the known version.
    fn header(&self) -> Option<WalHeader> {
        let mut h = [0u8; WAL_HEADER_BYTES];
        read_at(&self.file, &mut h)?;
        let (first, second) = h.split_at(WAL_HEADER_BYTES / 2);
        let version = u32::from_ne_bytes(first[..4].try_into().ok()?);
        // `isInit`, the byte after `iChange`.
        let init = first[12];
        (first == second && version == WAL_INDEX_VERSION && init == 1).then_some(h)
    }
}

/// Whether `after` is `before` moved by one connection's transaction
/// alone: `iChange` one further when it wrote rows (its commit wrote
/// frames), the same bytes when it wrote none (its commit wrote nothing).
/// Read while that connection held the write lock (`before`) and right
/// after its commit (`after`), it says that no other connection committed
/// in between; anything else (another commit, a WAL restart in the same
/// write) is "ask SQLite".
fn only_own_commit(before: &WalHeader, after: &WalHeader, wrote: bool) -> bool {
    let change = |h: &WalHeader| u32::from_ne_bytes([h[8], h[9], h[10], h[11]]);
    match wrote {
        true => change(after) == change(before).wrapping_add(1),
        false => after == before,
    }
}

#[cfg(unix)]
fn read_at(file: &std::fs::File, buf: &mut [u8]) -> Option<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, 0).ok()
}

#[cfg(not(unix))]
fn read_at(_: &std::fs::File, _: &mut [u8]) -> Option<()> {
    None
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("agent", &self.files.agent_id())
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

fn db_err(op: &'static str, path: &Path, e: rusqlite::Error) -> StoreError {
    StoreError::Io {
        op,
        path: crate::fsio::display_name(path),
        detail: e.to_string(),
    }
}

/// The database path of `agent` under `root`.
pub(crate) fn sqlite_path(root: &Path, agent: &str) -> PathBuf {
    StatePaths::new(root, agent)
        .profiles
        .with_file_name(SQLITE_FILE)
}

/// Runs one set-up step of `open`, waiting out another connection's lock
/// for up to [`BUSY_TIMEOUT`]: two processes (or tasks) opening a new
/// database at once both switch it to WAL, which takes an exclusive lock,
/// and SQLite answers `SQLITE_BUSY` at once there instead of calling the
/// busy handler.
fn settle<T>(mut step: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        match step() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            r => return r,
        }
    }
}

/// The database at `path` as an immutable snapshot (`immutable=1`: no
/// locks, no `-shm`, no `-wal`), for a reader on a read-only mount. The
/// path goes into a URI, percent-encoded where it must be.
fn open_immutable(path: &Path) -> Result<Connection, StoreError> {
    use rusqlite::OpenFlags;
    let mut uri = String::from("file:");
    for b in path.to_string_lossy().bytes() {
        match b {
            b'?' | b'#' | b'%' => uri.push_str(&format!("%{b:02X}")),
            _ => uri.push(b as char),
        }
    }
    uri.push_str("?immutable=1");
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY
        | OpenFlags::SQLITE_OPEN_NO_MUTEX
        | OpenFlags::SQLITE_OPEN_URI;
    Connection::open_with_flags(&uri, flags).map_err(|e| db_err("open", path, e))
}

impl SqliteStore {
    /// Opens (creating when missing) the database of `agent_id` under
    /// `root`. A new database starts from the file store's routing state
    /// and sessions when there are any (copied, not moved).
    pub fn open(root: impl AsRef<Path>, agent_id: &str) -> Result<Self, StoreError> {
        let root = root.as_ref();
        let files = FileStore::open(root, agent_id)?;
        let path = sqlite_path(root, agent_id);
        let dir = path.parent().unwrap_or(Path::new("."));
        super::create_private_dir(dir).map_err(|e| StoreError::io("create directory", dir, &e))?;
        let fresh = !path.exists();
        let conn = Connection::open(&path).map_err(|e| db_err("open", &path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| db_err("open", &path, e))?;
        settle(|| conn.pragma_update(None, "journal_mode", "WAL"))
            .map_err(|e| db_err("open", &path, e))?;
        settle(|| conn.pragma_update(None, "synchronous", "NORMAL"))
            .map_err(|e| db_err("open", &path, e))?;
        settle(|| conn.execute_batch(SCHEMA)).map_err(|e| db_err("create tables in", &path, e))?;
        let store = SqliteStore {
            files,
            wal_index: WalIndex::open(&path),
            path,
            conn: Mutex::new(conn),
            seen: Mutex::new(None),
            problems: Mutex::new(Vec::new()),
            #[cfg(test)]
            state_reads: Default::default(),
            #[cfg(test)]
            version_checks: Default::default(),
            #[cfg(test)]
            session_reads: Default::default(),
        };
        if fresh {
            store.import_files()?;
        }
        Ok(store)
    }

    /// Opens the database of `agent_id` under `root` for reading only
    /// (`failover status`, `state export`): nothing is created or written.
    /// Where SQLite cannot read a WAL database without writing beside it
    /// (a read-only mount, a directory the reader cannot write: its `-shm`
    /// index cannot be made), the file is opened as an immutable snapshot
    /// instead, which reads what was last checkpointed into it (a gateway
    /// stopped cleanly checkpoints everything). Returns the store and
    /// whether it is such a snapshot.
    pub fn open_read_only(
        root: impl AsRef<Path>,
        agent_id: &str,
    ) -> Result<(Self, bool), StoreError> {
        use rusqlite::OpenFlags;
        let root = root.as_ref();
        let files = FileStore::open(root, agent_id)?;
        let path = sqlite_path(root, agent_id);
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let readable = |conn: &Connection| {
            conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| {
                r.get::<_, i64>(0)
            })
        };
        let (conn, snapshot) = match Connection::open_with_flags(&path, flags) {
            Ok(conn) if readable(&conn).is_ok() => (conn, false),
            _ => {
                let conn = open_immutable(&path)?;
                readable(&conn).map_err(|e| db_err("read", &path, e))?;
                (conn, true)
            }
        };
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| db_err("open", &path, e))?;
        Ok((
            SqliteStore {
                files,
                wal_index: None,
                path,
                conn: Mutex::new(conn),
                seen: Mutex::new(None),
                problems: Mutex::new(Vec::new()),
                #[cfg(test)]
                state_reads: Default::default(),
                #[cfg(test)]
                version_checks: Default::default(),
                #[cfg(test)]
                session_reads: Default::default(),
            },
            snapshot,
        ))
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The file store that holds the secrets.
    pub fn files(&self) -> &FileStore {
        &self.files
    }

    fn conn(&self) -> MutexGuard<'_, Connection> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cached state; take it only while holding [`Self::conn`].
    fn seen(&self) -> MutexGuard<'_, Option<Seen>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The WAL index's header now, when whole.
    fn header_now(&self) -> Option<WalHeader> {
        self.wal_index.as_ref().and_then(WalIndex::header)
    }

    /// After this connection's commit (still holding `conn`, the cached
    /// state already patched): when the header read under the write lock
    /// (`during`) was the one the copy is current for, and only this
    /// commit moved it since (`wrote`: whether the transaction changed
    /// rows), the copy is current for the new header, and the next load
    /// needs no `PRAGMA data_version`. Otherwise the next load asks
    /// SQLite, as before.
    fn committed(&self, during: Option<WalHeader>, wrote: bool) {
        let (Some(during), Some(after)) = (during, self.header_now()) else {
            return;
        };
        let mut seen = self.seen();
        if let Some(s) = seen.as_mut() {
            if s.header == Some(during) && only_own_commit(&during, &after, wrote) {
                s.header = Some(after);
            }
        }
    }

    /// Brings the cached state up to date with this connection's own
    /// committed write of the rows that differ between `before` and
    /// `after` (the same rows [`Self::write_state_diff`] wrote). Its own
    /// writes do not move the connection's `data_version`, so without
    /// this the cache would miss them; another connection's commit does
    /// move it, and the next read sees that. Each written value is read
    /// back from the text that went into the row, exactly as
    /// [`Self::read_state`] would; a change of the top-level fields (rare:
    /// `version`, fields of other subsystems) drops the cache instead.
    fn patch_seen(&self, before: &AuthState, after: &AuthState) {
        let mut seen = self.seen();
        let Some(Seen { state: cached, .. }) = seen.as_mut() else {
            return;
        };
        if before.version != after.version || before.extra != after.extra {
            *seen = None;
            return;
        }
        patch_rows(
            &mut cached.usage_stats,
            &before.usage_stats,
            &after.usage_stats,
            |k, v| self.parse("usage stats of", k, &to_text(v)),
        );
        patch_rows(&mut cached.order, &before.order, &after.order, |k, v| {
            self.parse("order of", k, &to_text(v))
        });
        patch_rows(
            &mut cached.last_good,
            &before.last_good,
            &after.last_good,
            |_, v| Some(v.clone()),
        );
    }

    fn err(&self, op: &'static str) -> impl Fn(rusqlite::Error) -> StoreError + '_ {
        move |e| db_err(op, &self.path, e)
    }

    fn import_files(&self) -> Result<(), StoreError> {
        let state = self.files.load_state()?;
        let sessions = self.files.load_sessions()?;
        if state == AuthState::default() && sessions.entries.is_empty() {
            return Ok(());
        }
        self.update_state_dyn(&mut |s| *s = state.clone())?;
        self.update_sessions_dyn(&mut |s| *s = sessions.clone())
    }

    /// Several sessions in one transaction (seeding, import).
    pub fn put_sessions<'a>(
        &self,
        entries: impl IntoIterator<Item = (&'a str, &'a SessionEntry)>,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin"))?;
        {
            let mut put = tx
                .prepare_cached("INSERT OR REPLACE INTO sessions (key, entry) VALUES (?1, ?2)")
                .map_err(self.err("write"))?;
            for (k, e) in entries {
                put.execute(params![k, to_text(e)])
                    .map_err(self.err("write"))?;
            }
        }
        tx.commit().map_err(self.err("commit"))?;
        self.forget_sessions();
        Ok(())
    }

    /// The number of session rows.
    pub fn session_count(&self) -> Result<u64, StoreError> {
        self.conn()
            .query_row("SELECT count(*) FROM sessions", [], |r| r.get::<_, i64>(0))
            .map(|n| n as u64)
            .map_err(self.err("read"))
    }

    fn report(&self, what: &'static str, key: &str, detail: String) {
        let p = Problem::InvalidEntry {
            path: self.path.clone(),
            what,
            key: key.into(),
            detail,
        };
        let mut ps = self.problems.lock().unwrap_or_else(|e| e.into_inner());
        if !ps.contains(&p) {
            ps.push(p);
        }
    }

    fn parse<T: serde::de::DeserializeOwned>(
        &self,
        what: &'static str,
        key: &str,
        text: &str,
    ) -> Option<T> {
        match serde_json::from_str(text) {
            Ok(v) => Some(v),
            Err(e) => {
                self.report(what, key, crate::redact::scrub_serde_error(&e));
                None
            }
        }
    }

    fn read_state(&self, conn: &Connection) -> Result<AuthState, StoreError> {
        // One statement over the four tables: one read transaction, so a
        // consistent snapshot even while another process commits, and a
        // quarter of the per-statement cost (each autocommit statement
        // takes and drops the WAL read lock). Measured in the gateway:
        // four statements cost ~17,000 instructions per run with every
        // table empty.
        const ALL: &str = "SELECT 0, name, value FROM doc \
            UNION ALL SELECT 1, profile, stats FROM usage_stats \
            UNION ALL SELECT 2, provider, profile FROM last_good \
            UNION ALL SELECT 3, provider, profiles FROM provider_order";
        #[cfg(test)]
        self.state_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut st = AuthState::default();
        let mut q = conn.prepare_cached(ALL).map_err(self.err("read"))?;
        let mut rows = q.query([]).map_err(self.err("read"))?;
        while let Some(r) = rows.next().map_err(self.err("read"))? {
            let table: i64 = r.get(0).map_err(self.err("read"))?;
            let key: String = r.get(1).map_err(self.err("read"))?;
            let value: String = r.get(2).map_err(self.err("read"))?;
            match table {
                0 => {
                    let Some(v) = self.parse::<Value>("field", &key, &value) else {
                        continue;
                    };
                    if key == "version" {
                        st.version = v.as_u64();
                    } else {
                        st.extra.insert(key, v);
                    }
                }
                1 => {
                    if let Some(s) = self.parse::<UsageStats>("usage stats of", &key, &value) {
                        st.usage_stats.insert(key, s);
                    }
                }
                2 => {
                    st.last_good.insert(key, value);
                }
                _ => {
                    if let Some(l) = self.parse::<Vec<String>>("order of", &key, &value) {
                        st.order.insert(key, l);
                    }
                }
            }
        }
        Ok(st)
    }

    fn write_state_diff(
        &self,
        tx: &Connection,
        before: &AuthState,
        after: &AuthState,
    ) -> Result<(), StoreError> {
        let e = self.err("write");
        diff_rows(
            tx,
            "usage_stats",
            "profile",
            "stats",
            &before.usage_stats,
            &after.usage_stats,
            to_text,
        )
        .map_err(&e)?;
        diff_rows(
            tx,
            "last_good",
            "provider",
            "profile",
            &before.last_good,
            &after.last_good,
            |s| s.clone(),
        )
        .map_err(&e)?;
        diff_rows(
            tx,
            "provider_order",
            "provider",
            "profiles",
            &before.order,
            &after.order,
            to_text,
        )
        .map_err(&e)?;
        let doc = |s: &AuthState| -> BTreeMap<String, Value> {
            let mut m: BTreeMap<String, Value> = s
                .extra
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if let Some(v) = s.version {
                m.insert("version".into(), v.into());
            }
            m
        };
        diff_rows(tx, "doc", "name", "value", &doc(before), &doc(after), |v| {
            v.to_string()
        })
        .map_err(&e)
    }
}

fn to_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("state serialises")
}

/// Applies to `cached` the rows [`diff_rows`] writes for `before` and
/// `after`, each value as `read_back` reads its row (`None`: the row does
/// not read, as [`SqliteStore::read_state`] would skip it).
fn patch_rows<V: PartialEq>(
    cached: &mut BTreeMap<String, V>,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
    read_back: impl Fn(&str, &V) -> Option<V>,
) {
    for (k, v) in after {
        if before.get(k) != Some(v) {
            match read_back(k, v) {
                Some(v) => cached.insert(k.clone(), v),
                None => cached.remove(k),
            };
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            cached.remove(k);
        }
    }
}

/// Writes the rows of `table` that differ between `before` and `after`.
fn diff_rows<V: PartialEq>(
    tx: &Connection,
    table: &str,
    key: &str,
    col: &str,
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
    text: impl Fn(&V) -> String,
) -> Result<(), rusqlite::Error> {
    for (k, v) in after {
        if before.get(k) != Some(v) {
            tx.prepare_cached(&format!(
                "INSERT OR REPLACE INTO {table} ({key}, {col}) VALUES (?1, ?2)"
            ))?
            .execute(params![k, text(v)])?;
        }
    }
    for k in before.keys() {
        if !after.contains_key(k) {
            tx.prepare_cached(&format!("DELETE FROM {table} WHERE {key} = ?1"))?
                .execute(params![k])?;
        }
    }
    Ok(())
}

impl SqliteStore {
    fn read_sessions(&self, conn: &Connection) -> Result<SessionStore, StoreError> {
        let mut q = conn
            .prepare_cached("SELECT key, entry FROM sessions")
            .map_err(self.err("read"))?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(self.err("read"))?;
        let mut out = SessionStore::default();
        for row in rows {
            let (k, t) = row.map_err(self.err("read"))?;
            if let Some(e) = self.parse("session", &k, &t) {
                out.entries.insert(k, e);
            }
        }
        Ok(out)
    }

    fn get_session(
        &self,
        conn: &Connection,
        key: &str,
    ) -> Result<Option<SessionEntry>, StoreError> {
        let text: Option<String> = conn
            .prepare_cached("SELECT entry FROM sessions WHERE key = ?1")
            .map_err(self.err("read"))?
            .query_row(params![key], |r| r.get(0))
            .optional()
            .map_err(self.err("read"))?;
        Ok(text.and_then(|t| self.parse("session", key, &t)))
    }

    /// One session's read-modify-write in one transaction.
    pub fn update_session_sync(
        &self,
        key: &str,
        f: &mut dyn FnMut(&mut SessionEntry),
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin"))?;
        let (during, changes) = (self.header_now(), tx.total_changes());
        let entry = self.session_in(&tx, key, f)?;
        tx.commit().map_err(self.err("commit"))?;
        self.note_session(key, entry);
        self.committed(during, conn.total_changes() != changes);
        Ok(())
    }

    /// A run's success in one transaction: the profile's record (when
    /// given) and the session's entry, both or neither.
    pub fn update_success_sync(
        &self,
        profile: Option<ProfileUpdate<'_>>,
        key: &str,
        f: &mut dyn FnMut(&mut SessionEntry),
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin"))?;
        let (during, changes) = (self.header_now(), tx.total_changes());
        let written = match profile {
            Some((id, provider, pf)) => self.profile_in(&tx, id, provider, pf)?,
            None => None,
        };
        let entry = self.session_in(&tx, key, f)?;
        tx.commit().map_err(self.err("commit"))?;
        if let Some((before, after)) = written {
            self.patch_seen(&before, &after);
        }
        self.note_session(key, entry);
        self.committed(during, conn.total_changes() != changes);
        Ok(())
    }

    fn session_in(
        &self,
        tx: &Connection,
        key: &str,
        f: &mut dyn FnMut(&mut SessionEntry),
    ) -> Result<Option<SessionEntry>, StoreError> {
        let before = self.get_session(tx, key)?;
        let mut entry = before.clone().unwrap_or_default();
        f(&mut entry);
        if before.as_ref() == Some(&entry) {
            return Ok(before);
        }
        let text = to_text(&entry);
        tx.prepare_cached("INSERT OR REPLACE INTO sessions (key, entry) VALUES (?1, ?2)")
            .map_err(self.err("write"))?
            .execute(params![key, &text])
            .map_err(self.err("write"))?;
        // The row as `get_session` reads it back, from the text written.
        Ok(self.parse("session", key, &text))
    }

    /// After this connection's commit of a session's row (still holding
    /// `conn`): the entry as committed, read under the write lock, is the
    /// table's now, whatever else committed before it.
    fn note_session(&self, key: &str, entry: Option<SessionEntry>) {
        if let Some(s) = self.seen().as_mut() {
            s.keep_session(key, entry);
        }
    }

    /// After a write of many sessions (import, seeding): none is kept.
    fn forget_sessions(&self) {
        if let Some(s) = self.seen().as_mut() {
            s.sessions.clear();
        }
    }

    /// One profile's read-modify-write in one transaction.
    pub fn update_profile_sync(
        &self,
        profile_id: &str,
        provider: &str,
        f: &mut dyn FnMut(&mut AuthState),
    ) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin"))?;
        let (during, changes) = (self.header_now(), tx.total_changes());
        let written = self.profile_in(&tx, profile_id, provider, f)?;
        tx.commit().map_err(self.err("commit"))?;
        if let Some((before, after)) = written {
            self.patch_seen(&before, &after);
        }
        self.committed(during, conn.total_changes() != changes);
        Ok(())
    }

    fn profile_in(
        &self,
        tx: &Connection,
        profile_id: &str,
        provider: &str,
        f: &mut dyn FnMut(&mut AuthState),
    ) -> Result<Option<(AuthState, AuthState)>, StoreError> {
        let mut before = AuthState::default();
        let stats: Option<String> = tx
            .prepare_cached("SELECT stats FROM usage_stats WHERE profile = ?1")
            .map_err(self.err("read"))?
            .query_row(params![profile_id], |r| r.get(0))
            .optional()
            .map_err(self.err("read"))?;
        if let Some(s) = stats.and_then(|t| self.parse("usage stats of", profile_id, &t)) {
            before.usage_stats.insert(profile_id.to_string(), s);
        }
        let p = normalize_provider(provider);
        let good: Option<String> = tx
            .prepare_cached("SELECT profile FROM last_good WHERE provider = ?1")
            .map_err(self.err("read"))?
            .query_row(params![p], |r| r.get(0))
            .optional()
            .map_err(self.err("read"))?;
        if let Some(g) = good {
            before.last_good.insert(p, g);
        }
        let mut after = before.clone();
        f(&mut after);
        // Only the record's rows are written: the partial document has no
        // `order` or top-level fields to compare, and an edit that added
        // them is applied as an upsert.
        let mut base = before;
        base.order = after.order.clone();
        base.extra = after.extra.clone();
        base.version = after.version;
        if base == after {
            return Ok(None);
        }
        self.write_state_diff(tx, &base, &after)?;
        Ok(Some((base, after)))
    }
}

/// A profile's id, its provider and the edit of its record.
pub(crate) type ProfileUpdate<'a> = (&'a str, &'a str, &'a mut dyn FnMut(&mut AuthState));

impl Store for SqliteStore {
    fn agent_id(&self) -> &str {
        self.files.agent_id()
    }

    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        self.files.load_profiles()
    }

    /// The routing state, read again only when another connection (a
    /// process, or another handle on the same file) committed since this
    /// connection last read it: SQLite's `PRAGMA data_version` says so
    /// from the WAL index, in one statement, where reading the four tables
    /// and parsing every profile's row cost the gateway ~7,000
    /// instructions and 5–10 µs per run (benches/README.md, "Gateway").
    /// Before that statement, the WAL index's header: unchanged since the
    /// last check that found the copy current, no connection committed,
    /// and the statement is not needed either (`WalIndex`).
    /// This connection's own writes keep the copy current
    /// (`patch_seen`). A version read before a concurrent commit
    /// can label a newer copy, which costs one more read, never a stale one.
    fn load_state(&self) -> Result<AuthState, StoreError> {
        let conn = self.conn();
        // Read before the check below, under `conn`: a commit of this
        // connection cannot fall between the two, and one of another
        // connection that does changes the header from what is kept.
        let header = self.header_now();
        let mut seen = self.seen();
        if let (Some(h), Some(s)) = (&header, &*seen) {
            if s.header.as_ref() == Some(h) {
                return Ok(s.state.clone());
            }
        }
        #[cfg(test)]
        self.version_checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let version: i64 = conn
            .prepare_cached("PRAGMA data_version")
            .and_then(|mut q| q.query_row([], |r| r.get(0)))
            .map_err(self.err("read"))?;
        if let Some(s) = seen.as_mut() {
            if s.version == version {
                s.header = header;
                return Ok(s.state.clone());
            }
        }
        let state = self.read_state(&conn)?;
        *seen = Some(Seen {
            version,
            header,
            state: state.clone(),
            sessions: Default::default(),
        });
        Ok(state)
    }

    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        let conn = self.conn();
        self.read_sessions(&conn)
    }

    /// A session's entry: kept from an earlier read or this connection's
    /// own write while no other connection has committed since (the WAL
    /// index's header, as for the state), else read. An entry read after
    /// a commit the header check did not see is kept under the older
    /// header, which no later check matches (headers never repeat).
    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        let conn = self.conn();
        let header = self.header_now();
        let current = |seen: &Option<Seen>| match (&header, seen) {
            (Some(h), Some(s)) => s.header.as_ref() == Some(h),
            _ => false,
        };
        {
            let seen = self.seen();
            if current(&seen) {
                if let Some(entry) = seen.as_ref().and_then(|s| s.sessions.get(key)) {
                    return Ok(entry.clone());
                }
            }
        }
        #[cfg(test)]
        self.session_reads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let entry = self.get_session(&conn, key)?;
        let mut seen = self.seen();
        if current(&seen) {
            if let Some(s) = seen.as_mut() {
                s.keep_session(key, entry.clone());
            }
        }
        Ok(entry)
    }

    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        self.files.update_profiles_dyn(f)
    }

    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin"))?;
        let (during, changes) = (self.header_now(), tx.total_changes());
        let before = self.read_state(&tx)?;
        let mut after = before.clone();
        f(&mut after);
        if after == before {
            return tx.commit().map_err(self.err("commit"));
        }
        self.write_state_diff(&tx, &before, &after)?;
        tx.commit().map_err(self.err("commit"))?;
        self.patch_seen(&before, &after);
        self.committed(during, conn.total_changes() != changes);
        Ok(())
    }

    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        // The whole table: for `state import` and the tests, not the runner.
        let mut conn = self.conn();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(self.err("begin"))?;
        let before = self.read_sessions(&tx)?;
        let mut after = before.clone();
        f(&mut after);
        diff_rows(
            &tx,
            "sessions",
            "key",
            "entry",
            &before.entries,
            &after.entries,
            to_text,
        )
        .map_err(self.err("write"))?;
        tx.commit().map_err(self.err("commit"))?;
        self.forget_sessions();
        Ok(())
    }

    fn take_problems(&self) -> Vec<Problem> {
        let mut out = self.files.take_problems();
        out.append(&mut self.problems.lock().unwrap_or_else(|e| e.into_inner()));
        out
    }
}

impl AsyncStore for SqliteStore {
    fn agent_id(&self) -> &str {
        self.files.agent_id()
    }

    fn load_profiles(&self) -> StoreFuture<'_, AuthProfiles> {
        Box::pin(std::future::ready(self.files.load_profiles()))
    }

    fn load_state(&self) -> StoreFuture<'_, AuthState> {
        Box::pin(std::future::ready(Store::load_state(self)))
    }

    fn load_session<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<SessionEntry>> {
        Box::pin(std::future::ready(Store::load_session(self, key)))
    }

    fn update_profile<'a>(
        &'a self,
        profile_id: &'a str,
        provider: &'a str,
        f: ProfileEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        let r = self.update_profile_sync(profile_id, provider, &mut |s| f(s));
        Box::pin(std::future::ready(r))
    }

    fn update_session<'a>(&'a self, key: &'a str, f: SessionEdit<'a>) -> StoreFuture<'a, ()> {
        let r = self.update_session_sync(key, &mut |e| f(e));
        Box::pin(std::future::ready(r))
    }

    fn update_success<'a>(
        &'a self,
        profile: Option<(&'a str, &'a str, ProfileEdit<'a>)>,
        key: &'a str,
        f: SessionEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        let r = match profile {
            Some((id, p, pf)) => {
                self.update_success_sync(Some((id, p, &mut |s| pf(s))), key, &mut |e| f(e))
            }
            None => self.update_success_sync(None, key, &mut |e| f(e)),
        };
        Box::pin(std::future::ready(r))
    }

    fn update_session_now(
        &self,
        key: &str,
        mut f: Box<dyn FnMut(&mut SessionEntry) + Send + 'static>,
    ) -> Result<(), StoreError> {
        self.update_session_sync(key, &mut |e| f(e))
    }

    fn take_problems(&self) -> Vec<Problem> {
        Store::take_problems(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        crate::store::test_dir("sqlite", name)
    }

    fn reads(s: &SqliteStore) -> usize {
        s.state_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn checks(s: &SqliteStore) -> usize {
        s.version_checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the tables hold now, read past the cache.
    fn fresh(s: &SqliteStore) -> AuthState {
        let conn = s.conn();
        s.read_state(&conn).unwrap()
    }

    fn stats(last_used: u64) -> UsageStats {
        UsageStats {
            last_used: Some(last_used),
            ..Default::default()
        }
    }

    fn session_reads(s: &SqliteStore) -> usize {
        s.session_reads.load(std::sync::atomic::Ordering::Relaxed)
    }

    // Issue 30 item 7: `status` reads a state without writing to it: the
    // database opened read-only, or as an immutable snapshot where even
    // that cannot be done (a read-only mount, checked by hand: see the
    // closing note of issue 30).
    #[test]
    fn a_state_that_cannot_be_written_is_read_as_a_snapshot() {
        let root = temp("read-only");
        {
            let s = SqliteStore::open(&root, "main").unwrap();
            Store::update_state_dyn(&s, &mut |st| st.stats_mut("openai:a").error_count = 3)
                .unwrap();
        }
        let db = sqlite_path(&root, "main");
        // Readable in place: opened read-only, not as a snapshot.
        let (s, snapshot) = SqliteStore::open_read_only(&root, "main").unwrap();
        assert!(!snapshot);
        assert_eq!(
            Store::load_state(&s).unwrap().usage_stats["openai:a"].error_count,
            3
        );
        drop(s);
        // The snapshot a read-only mount falls back to (the plain
        // read-only open fails there: `-shm` cannot be made): it reads the
        // tables, in a path that needs escaping in a URI, and writes
        // nothing beside the file.
        let odd = root.join("a dir?#%");
        std::fs::create_dir_all(&odd).unwrap();
        let copy = odd.join("state.sqlite");
        std::fs::copy(&db, &copy).unwrap();
        let before = std::fs::read(&copy).unwrap();
        let conn = open_immutable(&copy).unwrap();
        let n: i64 = conn
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .unwrap();
        assert!(n > 0);
        drop(conn);
        assert_eq!(std::fs::read(&copy).unwrap(), before, "nothing written");
        assert_eq!(
            std::fs::read_dir(&odd).unwrap().count(),
            1,
            "no -shm, no -wal"
        );
        let _ = std::fs::remove_dir_all(&root);
    }

    fn pinned(profile: &str) -> impl FnMut(&mut SessionEntry) + '_ {
        move |e| e.auth_profile_override = Some(profile.into())
    }

    /// SPEC R11.1: a session's entry (and its absence) is read once and
    /// served again while no other connection commits; this connection's
    /// own writes of it, and of other rows, keep it served; another
    /// connection's write of it is read at the next load; a write of many
    /// sessions forgets them all.
    #[cfg(unix)]
    #[test]
    fn a_session_entry_is_read_again_only_after_another_connection_commits() {
        let dir = temp("sessions");
        let a = SqliteStore::open(&dir, "main").unwrap();
        let b = SqliteStore::open(&dir, "main").unwrap();
        Store::load_state(&a).unwrap();
        let load = |s: &SqliteStore, k: &str| Store::load_session(s, k).unwrap();
        let profile = |s: &SqliteStore, k: &str| load(s, k).and_then(|e| e.auth_profile_override);

        assert_eq!(load(&a, "s1"), None);
        assert_eq!(load(&a, "s1"), None);
        assert_eq!(session_reads(&a), 1, "no row: read once");

        // Own writes: the entry, another session, a profile's record.
        a.update_session_sync("s1", &mut pinned("openai:a"))
            .unwrap();
        a.update_session_sync("s2", &mut pinned("openai:b"))
            .unwrap();
        a.update_profile_sync("openai:a", "openai", &mut |s| {
            s.usage_stats.insert("openai:a".into(), stats(1));
        })
        .unwrap();
        let mut edit = |s: &mut AuthState| {
            s.usage_stats.insert("openai:a".into(), stats(2));
        };
        a.update_success_sync(Some(("openai:a", "openai", &mut edit)), "s1", &mut |_| {})
            .unwrap();
        assert_eq!(profile(&a, "s1").as_deref(), Some("openai:a"));
        assert_eq!(profile(&a, "s2").as_deref(), Some("openai:b"));
        assert_eq!(session_reads(&a), 1, "own writes are kept, not read");

        // Another connection's write of the entry.
        b.update_session_sync("s1", &mut pinned("openai:c"))
            .unwrap();
        assert_eq!(profile(&a, "s1").as_deref(), Some("openai:c"));
        assert_eq!(session_reads(&a), 2);
        // Its commit is seen by the next state load, which starts a new
        // copy: the other session is read again too, once.
        Store::load_state(&a).unwrap();
        assert_eq!(profile(&a, "s1").as_deref(), Some("openai:c"));
        assert_eq!(profile(&a, "s2").as_deref(), Some("openai:b"));
        assert_eq!(profile(&a, "s2").as_deref(), Some("openai:b"));
        assert_eq!(session_reads(&a), 4);

        // A commit of the other connection that wrote no session still
        // sends the next load to the table (the header moved).
        b.update_profile_sync("openai:b", "openai", &mut |s| {
            s.usage_stats.insert("openai:b".into(), stats(3));
        })
        .unwrap();
        assert_eq!(profile(&a, "s2").as_deref(), Some("openai:b"));
        assert_eq!(session_reads(&a), 5);

        // Many sessions written at once: none kept.
        Store::load_state(&a).unwrap();
        assert_eq!(profile(&a, "s1").as_deref(), Some("openai:c"));
        let n = session_reads(&a);
        let entry = SessionEntry {
            auth_profile_override: Some("openai:d".into()),
            ..Default::default()
        };
        a.put_sessions([("s1", &entry)]).unwrap();
        assert_eq!(profile(&a, "s1").as_deref(), Some("openai:d"));
        assert_eq!(session_reads(&a), n + 1);
        a.update_sessions_dyn(&mut |all| {
            all.entries.remove("s1");
        })
        .unwrap();
        assert_eq!(load(&a, "s1"), None);
        assert_eq!(session_reads(&a), n + 2);
        assert_eq!(load(&b, "s1"), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    /// The routing state is read once and served again while no other
    /// connection commits; the handle's own edits (per record, whole
    /// document, removals, the top-level fields) keep the copy equal to
    /// the tables.
    #[test]
    fn the_state_is_read_again_only_after_another_connection_commits() {
        let dir = temp("seen");
        let a = SqliteStore::open(&dir, "main").unwrap();
        let first = Store::load_state(&a).unwrap();
        let (n, c) = (reads(&a), checks(&a));
        assert_eq!(Store::load_state(&a).unwrap(), first);
        assert_eq!(reads(&a), n, "served again, not read");
        #[cfg(unix)]
        assert_eq!(checks(&a), c, "the WAL index said nothing committed");

        // Own edits: the copy follows without a read.
        a.update_profile_sync("openai:a", "openai", &mut |s| {
            s.usage_stats.insert("openai:a".into(), stats(1));
            s.last_good.insert("openai".into(), "openai:a".into());
        })
        .unwrap();
        a.update_state_dyn(&mut |s| {
            s.usage_stats.insert("openai:b".into(), stats(2));
            s.order.insert("openai".into(), vec!["openai:b".into()]);
        })
        .unwrap();
        let mut edit = |s: &mut AuthState| {
            s.usage_stats.insert("openai:b".into(), stats(3));
        };
        a.update_success_sync(Some(("openai:b", "openai", &mut edit)), "s1", &mut |_| {})
            .unwrap();
        a.update_state_dyn(&mut |s| {
            s.usage_stats.remove("openai:a");
            s.last_good.clear();
        })
        .unwrap();
        let (before, c) = (reads(&a), checks(&a));
        let served = Store::load_state(&a).unwrap();
        assert_eq!(reads(&a), before, "own edits need no read");
        // Each own commit moved the WAL index by one, seen under the
        // write lock and right after: no check needed either.
        #[cfg(unix)]
        assert_eq!(checks(&a), c, "own commits need no check");
        assert_eq!(Store::load_state(&a).unwrap(), served);
        assert_eq!(served, fresh(&a));
        assert_eq!(served.usage_stats.get("openai:b"), Some(&stats(3)));
        assert!(!served.usage_stats.contains_key("openai:a"));
        assert!(served.last_good.is_empty());

        // A top-level field changed: the copy is dropped, the next load
        // reads.
        a.update_state_dyn(&mut |s| {
            s.extra.insert("other".into(), serde_json::json!({"k": 1}));
        })
        .unwrap();
        let before = reads(&a);
        assert_eq!(Store::load_state(&a).unwrap(), fresh(&a));
        assert_eq!(reads(&a), before + 2, "one load and the check's own");

        // Another connection's commit (another process, or another handle
        // on the file) is seen at the next load.
        let b = SqliteStore::open(&dir, "main").unwrap();
        b.update_profile_sync("openai:b", "openai", &mut |s| {
            s.usage_stats.insert("openai:b".into(), stats(4));
        })
        .unwrap();
        let before = reads(&a);
        let seen = Store::load_state(&a).unwrap();
        assert_eq!(reads(&a), before + 1);
        assert_eq!(seen.usage_stats.get("openai:b"), Some(&stats(4)));
        assert_eq!(seen, fresh(&a));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// What [`WalIndex`] relies on, pinned for the bundled SQLite: the
    /// header is whole and of the known version once the database is
    /// open, and every commit, of any connection, of any size, and
    /// through a checkpoint that restarts the WAL, changes it.
    #[cfg(unix)]
    #[test]
    fn every_commit_changes_the_wal_index_header() {
        let dir = temp("walindex");
        let a = SqliteStore::open(&dir, "main").unwrap();
        let b = SqliteStore::open(&dir, "main").unwrap();
        let index = a.wal_index.as_ref().expect("the -shm file is open");
        let mut last = index.header().expect("a whole header of the known version");
        let mut seen = vec![last];
        for i in 0..40u64 {
            let writer = if i % 2 == 0 { &a } else { &b };
            // The same row rewritten with the same-size value: nothing
            // but the commit itself tells the versions apart.
            writer
                .update_profile_sync("openai:a", "openai", &mut |s| {
                    s.usage_stats.insert("openai:a".into(), stats(i % 2));
                })
                .unwrap();
            if i == 20 {
                b.conn()
                    .execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                    .unwrap();
            }
            let h = index.header().expect("whole between commits");
            assert_ne!(h, last, "commit {i} left the header as it was");
            assert!(!seen.contains(&h), "commit {i} repeated an earlier header");
            seen.push(h);
            last = h;
        }
        // And the store's own reads see the other's last commit.
        assert_eq!(Store::load_state(&a).unwrap(), fresh(&b));

        // One commit moves `iChange` by one; two (another connection's
        // right after) by more, which `committed` takes as "ask SQLite".
        let write = |s: &SqliteStore, n: u64| {
            s.update_session_sync("s", &mut |e| e.model_override = Some(n.to_string()))
                .unwrap()
        };
        let h0 = index.header().unwrap();
        write(&a, 1);
        let h1 = index.header().unwrap();
        assert!(only_own_commit(&h0, &h1, true));
        assert!(!only_own_commit(&h0, &h1, false));
        // A transaction that changes no row commits nothing: the header
        // stays, and a commit of another connection after it is not its.
        write(&a, 1);
        assert_eq!(index.header().unwrap(), h1);
        assert!(only_own_commit(&h1, &h1, false));
        write(&b, 2);
        assert!(!only_own_commit(&h1, &index.header().unwrap(), false));
        let h2 = index.header().unwrap();
        write(&a, 3);
        write(&b, 4);
        assert!(!only_own_commit(&h2, &index.header().unwrap(), true));

        // So a commit of `b` right after one of `a` is seen by `a`.
        let (c, r) = (checks(&a), reads(&a));
        a.update_profile_sync("openai:a", "openai", &mut |s| {
            s.usage_stats.insert("openai:a".into(), stats(7));
        })
        .unwrap();
        b.update_profile_sync("openai:a", "openai", &mut |s| {
            s.usage_stats.insert("openai:a".into(), stats(8));
        })
        .unwrap();
        let st = Store::load_state(&a).unwrap();
        assert_eq!(st.usage_stats.get("openai:a"), Some(&stats(8)));
        assert_eq!((checks(&a), reads(&a)), (c + 1, r + 1));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Eight handles opening one new database at once (processes or
    /// gateway tasks starting together) all open it: the WAL switch that
    /// SQLite refuses at once with `SQLITE_BUSY` is waited out.
    #[test]
    fn concurrent_opens_of_a_new_database_all_succeed() {
        for round in 0..20 {
            let dir = std::env::temp_dir().join(format!(
                "failover-sqlite-open-{}-{round}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_nanos()
            ));
            let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
            let handles: Vec<_> = (0..8)
                .map(|_| {
                    let (dir, barrier) = (dir.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        SqliteStore::open(&dir, "main").map(|_| ())
                    })
                })
                .collect();
            let opened: Vec<_> = handles.into_iter().map(|t| t.join().unwrap()).collect();
            let _ = std::fs::remove_dir_all(&dir);
            for r in opened {
                r.unwrap_or_else(|e| panic!("round {round}: {e}"));
            }
        }
    }
}
