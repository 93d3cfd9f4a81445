//! Client keys of the gateway (SPEC R18, issue 45): who may call
//! `failover serve`, with which scopes and limits.
//!
//! A key is data, never configuration: the table holds the SHA-256 of each
//! key (hex), never the key, with its name, scopes, limits, times and
//! usage. It lives in the state backend the config names, so every
//! replica that shares the state sees the same keys:
//!
//! | backend | where |
//! |---|---|
//! | `files` | `<state>/client-keys.json` (0600, locked read-modify-write) |
//! | `sqlite` (default) | `<state>/client-keys.sqlite`, table `client_keys` |
//! | `redis` | the hash `<prefix>client-keys` (field: the key's hash) |
//!
//! This module stores and reads records; making keys and hashing them is
//! the gateway's (`failover_gateway::keys`), which owns the cryptography.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::backend::{backend_of, StateBackend, StateConfig};
use super::StoreError;

/// One client key's record. Serialized in camelCase; unknown fields are
/// kept by serde's default of ignoring them on read (a newer writer's
/// fields are lost on an older writer's update: the record is small and
/// versioned by `v`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct ClientKey {
    /// The operator's name for the key: what logs, metrics and errors show.
    pub name: String,
    /// The key's first characters (`fo-1a2b…`), to tell keys apart in a
    /// listing; 4 of its random hex digits, never enough to guess it.
    pub hint: String,
    /// Agents the key may use; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agents: Vec<String>,
    /// Model names the key may request (`*` matches any run of
    /// characters); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<String>,
    /// Requests per minute (per replica); none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpm: Option<u32>,
    /// Requests at once (per replica); none: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
    /// When it was created (ms since the epoch).
    pub created_ms: u64,
    /// When it stops working; none: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_ms: Option<u64>,
    /// When it was revoked; a revoked key never works again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_ms: Option<u64>,
    /// When `keys rotate` replaced it (it works until `expires_ms`, the
    /// end of the grace period).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rotated_ms: Option<u64>,
    /// The last request it authenticated (written at most every few
    /// seconds by each replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_ms: Option<u64>,
    /// What it has used so far.
    #[serde(default)]
    pub usage: KeyUsage,
    /// Requests in the current and the previous minute, for the rate
    /// `failover status` shows (R18.7).
    #[serde(default, skip_serializing_if = "Recent::is_empty")]
    pub recent: Recent,
}

/// Requests per wall-clock minute, the current one and the one before:
/// enough to estimate a key's current rate without a time series. Written
/// with the usage, so it lags by at most one flush (a few seconds).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct Recent {
    /// The minute `this` counts (ms since the epoch / 60,000).
    #[serde(default)]
    pub minute: u64,
    /// Requests in `minute`.
    #[serde(default)]
    pub this: u64,
    /// Requests in the minute before it.
    #[serde(default)]
    pub previous: u64,
}

impl Recent {
    fn is_empty(&self) -> bool {
        *self == Recent::default()
    }

    /// Adds `requests` made at `now_ms`.
    pub fn add(&mut self, now_ms: u64, requests: u64) {
        self.roll(now_ms / 60_000);
        self.this = self.this.saturating_add(requests);
    }

    fn roll(&mut self, minute: u64) {
        // An earlier minute (another replica's clock a little behind)
        // counts into the current one rather than resetting it.
        if minute <= self.minute {
            return;
        }
        self.previous = if minute == self.minute + 1 {
            self.this
        } else {
            0
        };
        self.this = 0;
        self.minute = minute;
    }

    /// Requests per minute at `now_ms`: the previous minute weighted by
    /// the part of it still inside the last 60 s, plus this minute's (the
    /// sliding-window estimate of a two-bucket counter).
    pub fn per_minute(&self, now_ms: u64) -> u64 {
        let mut r = *self;
        r.roll(now_ms / 60_000);
        let into = (now_ms % 60_000) as f64 / 60_000.0;
        (r.previous as f64 * (1.0 - into)).round() as u64 + r.this
    }
}

/// A key's use, summed over replicas: the record a budget will be
/// enforced on later without changing the store's shape.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct KeyUsage {
    /// Requests authenticated.
    #[serde(default)]
    pub requests: u64,
    /// Prompt (input) tokens the upstreams reported.
    #[serde(default)]
    pub prompt_tokens: u64,
    /// Completion (output) tokens the upstreams reported.
    #[serde(default)]
    pub completion_tokens: u64,
}

impl KeyUsage {
    /// Adds `other`, saturating.
    pub fn add(&mut self, other: KeyUsage) {
        self.requests = self.requests.saturating_add(other.requests);
        self.prompt_tokens = self.prompt_tokens.saturating_add(other.prompt_tokens);
        self.completion_tokens = self
            .completion_tokens
            .saturating_add(other.completion_tokens);
    }

    /// Usage of `requests` requests and the tokens given.
    pub fn of(requests: u64, prompt_tokens: u64, completion_tokens: u64) -> Self {
        KeyUsage {
            requests,
            prompt_tokens,
            completion_tokens,
        }
    }
}

/// Why a key does not let a request in now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRefusal {
    /// Revoked by `keys revoke`.
    Revoked,
    /// Past its expiry (or the grace period of a rotation).
    Expired,
}

impl ClientKey {
    /// A new record.
    pub fn new(name: impl Into<String>, hint: impl Into<String>, created_ms: u64) -> Self {
        ClientKey {
            name: name.into(),
            hint: hint.into(),
            created_ms,
            ..ClientKey::default()
        }
    }

    /// Whether the key lets a request in at `now_ms`.
    pub fn usable(&self, now_ms: u64) -> Result<(), KeyRefusal> {
        if self.revoked_ms.is_some() {
            return Err(KeyRefusal::Revoked);
        }
        if self.expires_ms.is_some_and(|e| now_ms >= e) {
            return Err(KeyRefusal::Expired);
        }
        Ok(())
    }

    /// Whether this is the current key of its name (not revoked, not
    /// replaced by a rotation).
    pub fn is_current(&self) -> bool {
        self.revoked_ms.is_none() && self.rotated_ms.is_none()
    }

    /// Whether the key may run `agent` for the model name `model`.
    pub fn allows(&self, agent: &str, model: &str) -> bool {
        (self.agents.is_empty() || self.agents.iter().any(|a| a == agent))
            && (self.models.is_empty() || self.models.iter().any(|p| glob(p, model)))
    }
}

/// `*` matches any run of characters (none included); everything else
/// matches itself. Linear in practice: one backtrack point at a time.
pub fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut i, mut j) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while j < t.len() {
        if i < p.len() && p[i] == b'*' {
            star = Some((i, j));
            i += 1;
        } else if i < p.len() && p[i] == t[j] {
            i += 1;
            j += 1;
        } else if let Some((si, sj)) = star {
            i = si + 1;
            j = sj + 1;
            star = Some((si, sj + 1));
        } else {
            return false;
        }
    }
    p[i..].iter().all(|&c| c == b'*')
}

/// Every client key, by the hex SHA-256 of the key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct KeyTable {
    /// The records, by hash.
    pub keys: BTreeMap<String, ClientKey>,
}

impl KeyTable {
    /// The current record of `name` and its hash.
    pub fn current(&self, name: &str) -> Option<(&String, &ClientKey)> {
        self.keys
            .iter()
            .find(|(_, k)| k.name == name && k.is_current())
    }

    /// Whether any key exists that is not revoked.
    pub fn any_live(&self) -> bool {
        self.keys.values().any(|k| k.revoked_ms.is_none())
    }
}

/// Where the client keys live: see the module documentation. Updates are
/// atomic with respect to every other writer; the closure may run more
/// than once (Redis retries on conflict).
pub trait KeyStore: Send + Sync {
    /// Every record.
    fn load(&self) -> Result<KeyTable, StoreError>;
    /// Read-modify-write of the table, atomically.
    fn update_dyn(&self, f: &mut dyn FnMut(&mut KeyTable)) -> Result<(), StoreError>;
    /// Where, as shown to operators (never a password).
    fn location(&self) -> String;
    /// Whether one record is cheap enough to read on every request, so a
    /// revocation takes effect at once (Redis: one `HGET`); otherwise
    /// readers cache the table briefly.
    fn per_request(&self) -> bool {
        false
    }
    /// The record of `hash`, read now.
    fn get(&self, hash: &str) -> Result<Option<ClientKey>, StoreError> {
        Ok(self.load()?.keys.remove(hash))
    }
}

impl dyn KeyStore + '_ {
    /// [`KeyStore::update_dyn`] returning the closure's value.
    pub fn update<R>(&self, mut f: impl FnMut(&mut KeyTable) -> R) -> Result<R, StoreError> {
        let mut out = None;
        self.update_dyn(&mut |t| out = Some(f(t)))?;
        Ok(out.expect("update ran the closure"))
    }
}

/// Opens the client keys of the backend `cfg` names, under `root` (the
/// state directory). Creates nothing until the first write.
pub fn open_keys(
    cfg: Option<&StateConfig>,
    root: &Path,
) -> Result<std::sync::Arc<dyn KeyStore>, StoreError> {
    Ok(match backend_of(cfg) {
        StateBackend::Files => std::sync::Arc::new(FileKeys::new(root)),
        #[cfg(feature = "sqlite")]
        StateBackend::Sqlite => std::sync::Arc::new(sqlite_keys::SqliteKeys::new(root)),
        #[cfg(not(feature = "sqlite"))]
        StateBackend::Sqlite => return Err(StoreError::NotBuilt("sqlite")),
        #[cfg(feature = "redis")]
        StateBackend::Redis => {
            let c = cfg.expect("redis comes from a state block");
            let url = c.url.as_deref().unwrap_or("redis://127.0.0.1:6379/0");
            let prefix = c
                .prefix
                .as_deref()
                .unwrap_or(super::redis_store::DEFAULT_PREFIX);
            std::sync::Arc::new(redis_keys::RedisKeys::open(url, prefix)?)
        }
        #[cfg(not(feature = "redis"))]
        StateBackend::Redis => return Err(StoreError::NotBuilt("redis")),
    })
}

#[cfg(any(feature = "sqlite", feature = "redis"))]
fn parse_record(hash: &str, text: &str) -> Option<ClientKey> {
    // A record that does not parse is left out (it lets nobody in) and
    // kept as it is by updates of other records.
    let k: ClientKey = serde_json::from_str(text).ok()?;
    is_hash(hash).then_some(k)
}

fn parse_value(hash: &str, v: serde_json::Value) -> Option<ClientKey> {
    let k: ClientKey = serde_json::from_value(v).ok()?;
    is_hash(hash).then_some(k)
}

fn is_hash(hash: &str) -> bool {
    hash.len() == 64 && hash.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<state>/client-keys.json`.
struct FileKeys {
    path: PathBuf,
}

impl FileKeys {
    fn new(root: &Path) -> Self {
        FileKeys {
            path: root.join("client-keys.json"),
        }
    }

    fn read(&self) -> Result<(KeyTable, BTreeMap<String, serde_json::Value>), StoreError> {
        let text = match std::fs::read_to_string(&self.path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Default::default()),
            Err(e) => return Err(StoreError::io("read", &self.path, &e)),
        };
        let doc: BTreeMap<String, serde_json::Value> =
            serde_json::from_str(&text).map_err(|e| StoreError::Io {
                op: "read",
                path: crate::fsio::display_name(&self.path),
                detail: format!("not a client-keys document: {e}"),
            })?;
        let mut table = KeyTable::default();
        let mut bad = BTreeMap::new();
        for (hash, v) in doc {
            match parse_value(&hash, v.clone()) {
                Some(k) => {
                    table.keys.insert(hash, k);
                }
                None => {
                    bad.insert(hash, v);
                }
            }
        }
        Ok((table, bad))
    }
}

impl KeyStore for FileKeys {
    fn load(&self) -> Result<KeyTable, StoreError> {
        Ok(self.read()?.0)
    }

    fn update_dyn(&self, f: &mut dyn FnMut(&mut KeyTable)) -> Result<(), StoreError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        super::create_private_dir(dir).map_err(|e| StoreError::io("create directory", dir, &e))?;
        let lock = super::atomic::lock_path(&self.path);
        let _held = super::atomic::FileLock::acquire(&lock)
            .map_err(|e| StoreError::io("lock", &lock, &e))?;
        let (mut table, bad) = self.read()?;
        f(&mut table);
        let mut doc: BTreeMap<String, serde_json::Value> = bad;
        for (hash, k) in &table.keys {
            doc.insert(
                hash.clone(),
                serde_json::to_value(k).expect("a key record serializes"),
            );
        }
        let mut bytes = serde_json::to_vec_pretty(&doc).expect("a map serializes");
        bytes.push(b'\n');
        super::atomic::write_atomic_with(&self.path, &bytes, 0o600, None)
            .map_err(|e| StoreError::io("write", &self.path, &e))
    }

    fn location(&self) -> String {
        crate::fsio::display_name(&self.path)
    }
}

#[cfg(feature = "sqlite")]
mod sqlite_keys {
    use super::*;
    use rusqlite::Connection;
    use std::sync::Mutex;

    /// `<state>/client-keys.sqlite`: one row per key, `(hash, record)`.
    pub(super) struct SqliteKeys {
        path: PathBuf,
        conn: Mutex<Option<Connection>>,
    }

    fn err(op: &'static str, path: &Path, e: rusqlite::Error) -> StoreError {
        StoreError::Io {
            op,
            path: crate::fsio::display_name(path),
            detail: e.to_string(),
        }
    }

    impl SqliteKeys {
        pub(super) fn new(root: &Path) -> Self {
            SqliteKeys {
                path: root.join("client-keys.sqlite"),
                conn: Mutex::new(None),
            }
        }

        /// The connection, opened (and the table created) on first use;
        /// a reader finds no table when nothing was written yet.
        fn with<R>(
            &self,
            create: bool,
            f: impl FnOnce(&mut Connection) -> rusqlite::Result<R>,
        ) -> Result<Option<R>, StoreError> {
            let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            if guard.is_none() {
                if !create && !self.path.exists() {
                    return Ok(None);
                }
                let dir = self.path.parent().unwrap_or(Path::new("."));
                super::super::create_private_dir(dir)
                    .map_err(|e| StoreError::io("create directory", dir, &e))?;
                let fresh = !self.path.exists();
                let c = Connection::open(&self.path).map_err(|e| err("open", &self.path, e))?;
                #[cfg(unix)]
                if fresh {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = std::fs::set_permissions(
                        &self.path,
                        std::fs::Permissions::from_mode(0o600),
                    );
                }
                c.busy_timeout(std::time::Duration::from_secs(10))
                    .map_err(|e| err("open", &self.path, e))?;
                c.execute_batch(
                    "PRAGMA journal_mode=WAL;
                     CREATE TABLE IF NOT EXISTS client_keys (hash TEXT PRIMARY KEY, record TEXT NOT NULL) WITHOUT ROWID;",
                )
                .map_err(|e| err("create tables in", &self.path, e))?;
                *guard = Some(c);
            }
            let r = f(guard.as_mut().expect("connection"));
            if r.is_err() {
                *guard = None;
            }
            r.map(Some).map_err(|e| err("use", &self.path, e))
        }
    }

    fn read_all(c: &Connection) -> rusqlite::Result<Vec<(String, String)>> {
        let mut st = c.prepare_cached("SELECT hash, record FROM client_keys")?;
        let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect()
    }

    impl KeyStore for SqliteKeys {
        fn load(&self) -> Result<KeyTable, StoreError> {
            let rows = self.with(false, |c| read_all(c))?.unwrap_or_default();
            let mut t = KeyTable::default();
            for (h, r) in rows {
                if let Some(k) = parse_record(&h, &r) {
                    t.keys.insert(h, k);
                }
            }
            Ok(t)
        }

        fn update_dyn(&self, f: &mut dyn FnMut(&mut KeyTable)) -> Result<(), StoreError> {
            self.with(true, |c| {
                let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
                let rows = read_all(&tx)?;
                let mut t = KeyTable::default();
                for (h, r) in &rows {
                    if let Some(k) = parse_record(h, r) {
                        t.keys.insert(h.clone(), k);
                    }
                }
                let before = t.clone();
                f(&mut t);
                for (h, k) in &t.keys {
                    if before.keys.get(h) != Some(k) {
                        tx.execute(
                            "INSERT OR REPLACE INTO client_keys (hash, record) VALUES (?1, ?2)",
                            (
                                h,
                                serde_json::to_string(k).expect("a key record serializes"),
                            ),
                        )?;
                    }
                }
                for h in before.keys.keys() {
                    if !t.keys.contains_key(h) {
                        tx.execute("DELETE FROM client_keys WHERE hash = ?1", [h])?;
                    }
                }
                tx.commit()
            })?;
            Ok(())
        }

        fn location(&self) -> String {
            crate::fsio::display_name(&self.path)
        }
    }
}

#[cfg(feature = "redis")]
mod redis_keys {
    use super::super::redis_store::redact_url;
    use super::*;
    use redis::Commands;
    use std::sync::Mutex;
    use std::time::Duration;

    const TIMEOUT: Duration = Duration::from_secs(2);
    const CAS_RETRIES: usize = 16;

    /// The hash `<prefix>client-keys`: field = the key's hash, value = its
    /// record (JSON).
    pub(super) struct RedisKeys {
        client: redis::Client,
        key: String,
        shown: String,
        conn: Mutex<Option<redis::Connection>>,
    }

    impl RedisKeys {
        pub(super) fn open(url: &str, prefix: &str) -> Result<Self, StoreError> {
            let shown = redact_url(url);
            let client = redis::Client::open(url).map_err(|e| StoreError::Io {
                op: "connect to redis",
                path: shown.clone(),
                detail: e.to_string().replace(url, &shown),
            })?;
            Ok(RedisKeys {
                client,
                key: format!("{prefix}client-keys"),
                shown,
                conn: Mutex::new(None),
            })
        }

        fn with<R>(
            &self,
            op: &'static str,
            f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<R>,
        ) -> Result<R, StoreError> {
            let fail = |e: redis::RedisError| StoreError::Io {
                op,
                path: self.shown.clone(),
                detail: e.to_string(),
            };
            let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
            if guard.is_none() {
                let c = self
                    .client
                    .get_connection_with_timeout(TIMEOUT)
                    .map_err(fail)?;
                c.set_read_timeout(Some(TIMEOUT)).map_err(fail)?;
                c.set_write_timeout(Some(TIMEOUT)).map_err(fail)?;
                *guard = Some(c);
            }
            let r = f(guard.as_mut().expect("connection"));
            if r.is_err() {
                *guard = None;
            }
            r.map_err(fail)
        }
    }

    fn table_of(all: BTreeMap<String, String>) -> KeyTable {
        let mut t = KeyTable::default();
        for (h, r) in all {
            if let Some(k) = parse_record(&h, &r) {
                t.keys.insert(h, k);
            }
        }
        t
    }

    impl KeyStore for RedisKeys {
        fn load(&self) -> Result<KeyTable, StoreError> {
            let all: BTreeMap<String, String> = self.with("read", |c| c.hgetall(&self.key))?;
            Ok(table_of(all))
        }

        fn update_dyn(&self, f: &mut dyn FnMut(&mut KeyTable)) -> Result<(), StoreError> {
            let key = &self.key;
            self.with("update", |c| {
                for _ in 0..CAS_RETRIES {
                    redis::cmd("WATCH").arg(key).query::<()>(c)?;
                    let all: BTreeMap<String, String> = c.hgetall(key)?;
                    let before = table_of(all);
                    let mut after = before.clone();
                    f(&mut after);
                    let mut pipe = redis::pipe();
                    pipe.atomic();
                    for (h, k) in &after.keys {
                        if before.keys.get(h) != Some(k) {
                            pipe.hset(
                                key,
                                h,
                                serde_json::to_string(k).expect("a key record serializes"),
                            )
                            .ignore();
                        }
                    }
                    for h in before.keys.keys() {
                        if !after.keys.contains_key(h) {
                            pipe.hdel(key, h).ignore();
                        }
                    }
                    // `EXEC` answers nil when the watched hash changed.
                    let done: Option<()> = pipe.query(c)?;
                    if done.is_some() {
                        return Ok(());
                    }
                }
                redis::cmd("UNWATCH").query::<()>(c)?;
                Err(redis::RedisError::from((
                    redis::ErrorKind::Client,
                    "too many concurrent updates of the client keys",
                )))
            })
        }

        fn location(&self) -> String {
            format!("{} ({})", self.shown, self.key)
        }

        fn per_request(&self) -> bool {
            true
        }

        fn get(&self, hash: &str) -> Result<Option<ClientKey>, StoreError> {
            let r: Option<String> = self.with("read", |c| c.hget(&self.key, hash))?;
            Ok(r.and_then(|r| parse_record(hash, &r)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(name: &str) -> ClientKey {
        ClientKey::new(name, "fo-abcd", 1_000)
    }

    /// R18.3: a revoked key never works; an expired one stops at its
    /// expiry, exclusive.
    /// R18.8: the two-minute counter behind `requestsPerMinute`.
    #[test]
    fn r18_8_recent_requests_give_a_rate_per_minute() {
        let m = 1_000 * 60_000; // the start of minute 1000
        let mut r = Recent::default();
        r.add(m + 10_000, 30);
        r.add(m + 50_000, 10);
        assert_eq!((r.minute, r.this, r.previous), (1000, 40, 0));
        assert_eq!(r.per_minute(m + 59_000), 40);
        // A quarter into the next minute: 3/4 of the last one, and this one's.
        r.add(m + 60_000 + 15_000, 6);
        assert_eq!((r.this, r.previous), (6, 40));
        assert_eq!(r.per_minute(m + 60_000 + 15_000), 30 + 6);
        // Read later without writes: the counts age out.
        assert_eq!(r.per_minute(m + 120_000 + 30_000), 3);
        assert_eq!(r.per_minute(m + 180_000), 0);
        // A gap of minutes forgets everything.
        r.add(m + 600_000, 1);
        assert_eq!((r.this, r.previous), (1, 0));
        // A replica whose clock is a minute behind adds to this minute.
        r.add(m + 540_000, 2);
        assert_eq!((r.minute, r.this, r.previous), (1010, 3, 0));
        // Written in the record only when used.
        let mut k = rec("a");
        assert!(!serde_json::to_string(&k).unwrap().contains("recent"));
        k.recent.add(m, 1);
        let back: ClientKey = serde_json::from_str(&serde_json::to_string(&k).unwrap()).unwrap();
        assert_eq!(back.recent, k.recent);
    }

    #[test]
    fn r18_3_revoked_and_expired_keys_refuse() {
        let mut k = rec("ci");
        assert_eq!(k.usable(5_000), Ok(()));
        k.expires_ms = Some(5_000);
        assert_eq!(k.usable(4_999), Ok(()));
        assert_eq!(k.usable(5_000), Err(KeyRefusal::Expired));
        k.expires_ms = None;
        k.revoked_ms = Some(2_000);
        assert_eq!(k.usable(1_500), Err(KeyRefusal::Revoked));
    }

    /// R18.4: scopes; empty lists allow any.
    #[test]
    fn r18_4_scopes_by_agent_and_model_pattern() {
        let mut k = rec("ci");
        assert!(k.allows("main", "openai/gpt-4o"));
        k.agents = vec!["main".into()];
        k.models = vec!["openai/*".into(), "claude-*-mini".into()];
        assert!(k.allows("main", "openai/gpt-4o"));
        assert!(k.allows("main", "claude-3-mini"));
        assert!(!k.allows("main", "anthropic/claude"));
        assert!(!k.allows("coder", "openai/gpt-4o"));
        assert!(glob("*", ""));
        assert!(glob("a*b*c", "aXXbYYc"));
        assert!(!glob("a*b", "aXXc"));
        assert!(!glob("abc", "abcd"));
        assert!(glob("**", "x"));
    }

    fn roundtrip(store: &dyn KeyStore) {
        assert!(store.load().unwrap().keys.is_empty());
        let h = "a".repeat(64);
        store
            .update(|t| {
                t.keys.insert(h.clone(), rec("ci"));
            })
            .unwrap();
        store
            .update(|t| {
                t.keys
                    .get_mut(&h)
                    .unwrap()
                    .usage
                    .add(KeyUsage::of(2, 10, 20));
                t.keys.insert("b".repeat(64), rec("other"));
            })
            .unwrap();
        let t = store.load().unwrap();
        assert_eq!(t.keys.len(), 2);
        assert_eq!(t.keys[&h].usage, KeyUsage::of(2, 10, 20));
        assert_eq!(t.current("other").unwrap().0, &"b".repeat(64));
        store
            .update(|t| {
                t.keys.remove(&"b".repeat(64));
            })
            .unwrap();
        assert_eq!(store.load().unwrap().keys.len(), 1);
        // One record by hash, as the gateway reads it per request.
        assert_eq!(store.get(&h).unwrap().unwrap().name, "ci");
        assert_eq!(store.get(&"b".repeat(64)).unwrap(), None);
    }

    /// R18.1: the table round-trips in the files and SQLite backends, and
    /// holds only hashes.
    #[test]
    fn r18_1_key_tables_round_trip() {
        let dir = super::super::test_dir("keys", "files");
        let files = open_keys(Some(&StateConfig::new(StateBackend::Files)), &dir).unwrap();
        roundtrip(&*files);
        let text = std::fs::read_to_string(dir.join("client-keys.json")).unwrap();
        assert!(text.contains(&"a".repeat(64)) && text.contains("\"name\": \"ci\""));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join("client-keys.json"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        #[cfg(feature = "sqlite")]
        {
            let sq = open_keys(None, &dir).unwrap();
            roundtrip(&*sq);
            assert!(dir.join("client-keys.sqlite").exists());
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A damaged record is left out and kept by other records' updates.
    #[test]
    fn a_damaged_record_is_kept_and_ignored() {
        let dir = super::super::test_dir("keys", "damaged");
        std::fs::create_dir_all(&dir).unwrap();
        let bad = "c".repeat(64);
        std::fs::write(
            dir.join("client-keys.json"),
            format!("{{\"{bad}\": {{\"name\": 7}}}}"),
        )
        .unwrap();
        let files = open_keys(Some(&StateConfig::new(StateBackend::Files)), &dir).unwrap();
        assert!(files.load().unwrap().keys.is_empty());
        files
            .update(|t| {
                t.keys.insert("a".repeat(64), rec("ci"));
            })
            .unwrap();
        let text = std::fs::read_to_string(dir.join("client-keys.json")).unwrap();
        assert!(text.contains(&bad), "{text}");
        std::fs::write(dir.join("client-keys.json"), "not json").unwrap();
        let e = files.load().unwrap_err().to_string();
        assert!(e.contains("not a client-keys document"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
