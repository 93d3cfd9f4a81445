//! Shared state for several gateway replicas: Redis.
//!
//! Everything the replicas must agree on lives under one configurable
//! prefix (`failover:` by default), per agent `A`:
//!
//! ```text
//! <prefix><A>:stats        hash  profile  → usageStats entry (JSON)
//! <prefix><A>:lastgood     hash  provider → profile id
//! <prefix><A>:order        hash  provider → profile ids (JSON)
//! <prefix><A>:doc          hash  version and unknown top-level fields
//! <prefix><A>:sessions     hash  session key → entry (JSON)
//! <prefix><A>:probe:<p>            the probe throttle of provider p (R16.1)
//! <prefix><A>:reprobe:<hex s>:<m>  the session's last try of primary m (R11.5)
//! <prefix><A>:skip:<hex s>:<p/m>   the skip cache (R12)
//! ```
//!
//! Secrets are never sent to Redis: profiles stay in each replica's
//! `auth-profiles.json` (the file store). The transient-probe slot (SPEC
//! R10.5) is not here: it is one per provider per run, and a run lives on
//! one replica.
//!
//! **Round trips.** A successful run costs 2: `load_run` pipelines the
//! session's `HGET` with the routing state's `HGETALL`s, and
//! `update_success` is one `CAS` call over the session's entry and the
//! profile's two records, compared against the values that read returned
//! (kept in `seen`). A record changed by another writer in between fails
//! the compare; the three are then read in one pipeline and the edits run
//! again on them.
//!
//! **Atomicity.** Every per-record update is an optimistic
//! compare-and-set: read the record, run the edit locally, then a Lua
//! script (`CAS`) writes the new value only if the record still holds
//! what was read, else the edit runs again on the new value. So no update
//! is lost between replicas, an error count never goes back, and an edit
//! never sees a stale deadline — the arithmetic of [`crate::auth`] keeps
//! an active window and lets only a later deadline replace it. Deadlines
//! are absolute epoch milliseconds in the values, so a restart keeps the
//! remaining time; Redis TTLs are set only on the throttle, re-probe and
//! skip keys, to collect garbage. The whole-document calls ([`Store`]:
//! `status`, `state export`/`import`) use `WATCH`/`MULTI` on a dedicated
//! connection.
//!
//! **Outages.** When the server stops answering (connection refused or
//! dropped, a timeout), the store warns once, counts the outage
//! ([`RedisStore::outages`], the `failover_state_backend_up` metric) and
//! serves from this replica's local view: the last state read plus every
//! record it has read or written, and the runner's own in-memory tables
//! for the probe throttle, re-probes and skip cache. Updates apply to the
//! local view and are remembered; the server is tried again with backoff
//! (100 ms doubling to 5 s, on the next call due), and when it answers
//! the remembered records are merged back before it is used again: a
//! record nobody else wrote meanwhile takes the local value (a success
//! seen during the outage clears its window, as online); a local success
//! newer than every failure the server holds resets them too (keeping a
//! model-scoped cooldown another replica set meanwhile); otherwise counts
//! take the larger value and deadlines the later one (see `merge_stats`).
//! A session's entry written during the outage replaces the server's.
//!
//! **Connections.** Async calls share one multiplexed connection through
//! redis' [`ConnectionManager`] (reconnects with backoff, response
//! timeout); the whole-document calls open a plain connection with read
//! and write timeouts. The URL's password is never shown: errors name the
//! server as [`redact_url`] prints it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncCommands, Commands, Script};

use super::face::{AsyncStore, ProfileEdit, SessionEdit, SharedTables, StoreFuture};
use super::file::FileStore;
use super::{
    normalize_provider, AuthProfiles, AuthState, Problem, SessionEntry, SessionStore, Store,
    StoreError, UsageStats, DAY_MS,
};

/// The default key prefix.
pub(crate) const DEFAULT_PREFIX: &str = "failover:";
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(if cfg!(test) {
    // The crate's unit tests run ~340 at once on two cores: a starved
    // runtime must not read as an outage there (the outage tests stop the
    // server, which fails fast, not by this timeout).
    10
} else {
    2
});
/// Skip-cache keys are collected this long after they were written (the
/// cache's TTL is at most 10 minutes, R12.2).
const SKIP_GC_MS: u64 = 11 * 60_000;
/// Reconnection attempts during an outage back off from this …
const RECONNECT_MIN: Duration = Duration::from_millis(100);
/// … to this.
const RECONNECT_MAX: Duration = Duration::from_secs(5);
/// Sessions the local view remembers at most.
const LOCAL_SESSIONS: usize = 65_536;
/// An edit that lost the race this many times in a row gives up.
const CAS_RETRIES: usize = 1000;

/// `KEYS[i]` hash, `ARGV[3i-2]` field, `ARGV[3i-1]` the value read (`''`
/// for none), `ARGV[3i]` the value to write (`''` to delete): all or
/// nothing, only when every field still holds what was read. A field whose
/// new value is the one read is only compared (a record an edit left as it
/// was, checked to be still current).
const CAS: &str = r"
for i = 1, #KEYS do
  local cur = redis.call('HGET', KEYS[i], ARGV[3*i-2])
  if cur == false then cur = '' end
  if cur ~= ARGV[3*i-1] then return 0 end
end
for i = 1, #KEYS do
  local new = ARGV[3*i]
  if new ~= ARGV[3*i-1] then
    if new == '' then redis.call('HDEL', KEYS[i], ARGV[3*i-2])
    else redis.call('HSET', KEYS[i], ARGV[3*i-2], new) end
  end
end
return 1
";

/// `KEYS[1]` holds the time of the last grant; grants (and records
/// `ARGV[1]`) when none is within `ARGV[2]` ms; `ARGV[3]` is the GC TTL.
const TAKE_SLOT: &str = r"
local t = redis.call('GET', KEYS[1])
local now = tonumber(ARGV[1])
if t and now - tonumber(t) < tonumber(ARGV[2]) and now >= tonumber(t) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[3])
return 1
";

/// `redis://user:secret@host/0` as `redis://user:***@host/0`.
pub(crate) fn redact_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|i| i + 3) else {
        return url.to_string();
    };
    let rest = &url[scheme_end..];
    let Some(at) = rest.rfind('@') else {
        return url.to_string();
    };
    let creds = &rest[..at];
    let shown = match creds.split_once(':') {
        Some((user, _)) => format!("{user}:***"),
        None => "***".to_string(),
    };
    format!("{}{shown}{}", &url[..scheme_end], &rest[at..])
}

/// See the module documentation.
pub struct RedisStore {
    files: FileStore,
    keys: Keys,
    shown: String,
    client: redis::Client,
    conn: ConnectionManager,
    sync: Mutex<Option<redis::Connection>>,
    cas: Script,
    slot: Script,
    local: Mutex<Local>,
    down: AtomicBool,
    outages: AtomicU64,
    /// Commands sent (a pipeline or a script counts once): round trips.
    trips: AtomicU64,
    /// The raw text of each record (hash, field) as this replica last read
    /// or wrote it; `None`: known to be absent. A record's update uses it
    /// as the expected value of its first compare-and-set, which saves the
    /// read before the write; a stale one fails the compare, and the
    /// update reads and retries as before.
    seen: Mutex<HashMap<(String, String), Option<String>>>,
    /// Hashes `seen` holds whole, as of this replica's last `HGETALL` of
    /// them (the routing state's `stats` and `lastgood`): a field of one
    /// that `seen` lacks was absent then. Also only a hint.
    whole: Mutex<std::collections::HashSet<String>>,
}

/// Records remembered in [`RedisStore`]'s `seen` at most; past this the
/// memory is cleared (it is only a hint).
const SEEN_RECORDS: usize = 65_536;

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("server", &self.shown)
            .field("prefix", &self.keys.base)
            .finish_non_exhaustive()
    }
}

struct Keys {
    base: String,
    stats: String,
    last_good: String,
    order: String,
    doc: String,
    sessions: String,
}

fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

impl Keys {
    fn new(prefix: &str, agent: &str) -> Self {
        let base = format!("{prefix}{agent}:");
        Keys {
            stats: format!("{base}stats"),
            last_good: format!("{base}lastgood"),
            order: format!("{base}order"),
            doc: format!("{base}doc"),
            sessions: format!("{base}sessions"),
            base,
        }
    }
}

fn to_text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("state serialises")
}

impl RedisStore {
    /// Connects to `url` for `agent_id`'s state under `prefix`; secrets
    /// stay in the file store under `root`. Fails (naming the server, never
    /// its password) when the server does not answer a `PING`.
    pub async fn connect(
        url: &str,
        prefix: &str,
        root: impl AsRef<Path>,
        agent_id: &str,
    ) -> Result<Self, StoreError> {
        let files = FileStore::open(root, agent_id)?;
        let shown = redact_url(url);
        let fail = |detail: String| StoreError::Io {
            op: "connect to redis",
            path: shown.clone(),
            detail,
        };
        let client = redis::Client::open(url).map_err(|e| fail(scrub(&e, url)))?;
        let cfg = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_secs(2));
        let mut conn = tokio::time::timeout(
            CONNECT_TIMEOUT * 2,
            ConnectionManager::new_with_config(client.clone(), cfg),
        )
        .await
        .map_err(|_| fail("timed out".into()))?
        .map_err(|e| fail(scrub(&e, url)))?;
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| fail(scrub(&e, url)))?;
        Ok(RedisStore {
            files,
            keys: Keys::new(prefix, agent_id),
            shown,
            client,
            conn,
            sync: Mutex::new(None),
            cas: Script::new(CAS),
            slot: Script::new(TAKE_SLOT),
            local: Mutex::new(Local::default()),
            down: AtomicBool::new(false),
            outages: AtomicU64::new(0),
            trips: AtomicU64::new(0),
            seen: Mutex::new(HashMap::new()),
            whole: Mutex::new(std::collections::HashSet::new()),
        })
    }

    /// The server as errors name it (no password).
    pub fn server(&self) -> &str {
        &self.shown
    }

    fn err(&self, op: &'static str) -> impl Fn(redis::RedisError) -> StoreError + '_ {
        move |e| StoreError::Io {
            op,
            path: self.shown.clone(),
            detail: e.to_string().replace(&self.shown, ""),
        }
    }

    /// A handle for one command (or pipeline, or script): one round trip.
    fn conn(&self) -> ConnectionManager {
        self.trips.fetch_add(1, Ordering::Relaxed);
        self.conn.clone()
    }

    /// Round trips to the server since start (each command, pipeline or
    /// script call counts once): what a run costs, for tests and tuning.
    pub fn round_trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Option<String>>> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers records as read or written (see `seen`).
    fn remember<'a>(&self, records: impl IntoIterator<Item = (&'a str, &'a str, Option<String>)>) {
        let mut seen = self.seen();
        let mut cleared = false;
        for (hash, field, text) in records {
            if seen.len() >= SEEN_RECORDS {
                seen.clear();
                cleared = true;
            }
            seen.insert((hash.to_string(), field.to_string()), text);
        }
        drop(seen);
        if cleared {
            self.whole().clear();
        }
    }

    fn whole(&self) -> std::sync::MutexGuard<'_, std::collections::HashSet<String>> {
        self.whole.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The remembered text of a record: `Some(None)` when known absent,
    /// `None` when not known.
    fn recall(&self, hash: &str, field: &str) -> Option<Option<String>> {
        let known = self
            .seen()
            .get(&(hash.to_string(), field.to_string()))
            .cloned();
        known.or_else(|| self.whole().contains(hash).then_some(None))
    }

    fn forget(&self, records: &[(&str, &str)]) {
        let mut seen = self.seen();
        for (hash, field) in records {
            seen.remove(&(hash.to_string(), field.to_string()));
        }
        drop(seen);
        let mut whole = self.whole();
        for (hash, _) in records {
            whole.remove(*hash);
        }
    }

    /// Runs `f` on the plain connection (opened on first use).
    fn with_sync<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut redis::Connection) -> redis::RedisResult<R>,
    ) -> Result<R, StoreError> {
        let mut guard = self.sync.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let c = self
                .client
                .get_connection_with_timeout(CONNECT_TIMEOUT)
                .map_err(self.err(op))?;
            c.set_read_timeout(Some(RESPONSE_TIMEOUT))
                .map_err(self.err(op))?;
            c.set_write_timeout(Some(RESPONSE_TIMEOUT))
                .map_err(self.err(op))?;
            *guard = Some(c);
        }
        let r = f(guard.as_mut().expect("connection"));
        if r.is_err() {
            // A broken connection is reopened next time.
            *guard = None;
        }
        r.map_err(self.err(op))
    }

    fn parse_state(
        &self,
        stats: BTreeMap<String, String>,
        last_good: BTreeMap<String, String>,
        order: BTreeMap<String, String>,
        doc: BTreeMap<String, String>,
    ) -> AuthState {
        let mut st = AuthState::default();
        for (k, v) in stats {
            if let Ok(s) = serde_json::from_str::<UsageStats>(&v) {
                st.usage_stats.insert(k, s);
            }
        }
        st.last_good = last_good;
        for (k, v) in order {
            if let Ok(l) = serde_json::from_str::<Vec<String>>(&v) {
                st.order.insert(k, l);
            }
        }
        for (k, v) in doc {
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&v) {
                if k == "version" {
                    st.version = v.as_u64();
                } else {
                    st.extra.insert(k, v);
                }
            }
        }
        st
    }

    /// The hash fields of a whole state, by hash key.
    fn state_fields(&self, st: &AuthState) -> Vec<(&str, BTreeMap<String, String>)> {
        let mut doc: BTreeMap<String, String> = st
            .extra
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        if let Some(v) = st.version {
            doc.insert("version".into(), v.to_string());
        }
        vec![
            (
                self.keys.stats.as_str(),
                st.usage_stats
                    .iter()
                    .map(|(k, v)| (k.clone(), to_text(v)))
                    .collect(),
            ),
            (self.keys.last_good.as_str(), st.last_good.clone()),
            (
                self.keys.order.as_str(),
                st.order
                    .iter()
                    .map(|(k, v)| (k.clone(), to_text(v)))
                    .collect(),
            ),
            (self.keys.doc.as_str(), doc),
        ]
    }

    fn reprobe_key(&self, session: &str, primary: &str) -> String {
        format!("{}reprobe:{}:{primary}", self.keys.base, hex(session))
    }

    fn skip_key(&self, session: &str, p: &str, m: &str) -> String {
        format!("{}skip:{}:{p}/{m}", self.keys.base, hex(session))
    }

    /// Deletes every key of this agent under the prefix (tests, `state
    /// import --replace`).
    pub async fn clear(&self) -> Result<(), StoreError> {
        let mut c = self.conn();
        let pattern = format!("{}*", glob_escape(&self.keys.base));
        let keys: Vec<String> = scan(&mut c, &pattern).await.map_err(self.err("clear"))?;
        for chunk in keys.chunks(500) {
            let _: () = c.del(chunk).await.map_err(self.err("clear"))?;
        }
        Ok(())
    }

    async fn cas_async(
        &self,
        writes: &[(&str, &str, Option<String>, Option<String>)],
    ) -> redis::RedisResult<bool> {
        let mut inv = self.cas.prepare_invoke();
        for (key, field, old, new) in writes {
            inv.key(*key)
                .arg(*field)
                .arg(old.as_deref().unwrap_or(""))
                .arg(new.as_deref().unwrap_or(""));
        }
        let mut c = self.conn();
        let n: i64 = inv.invoke_async(&mut c).await?;
        Ok(n == 1)
    }

    fn local(&self) -> std::sync::MutexGuard<'_, Local> {
        self.local.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the server answers now; `false` for the whole of an outage.
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::SeqCst)
    }

    /// Outages since start (each one warned about once).
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::SeqCst)
    }

    fn enter_outage(&self, e: &redis::RedisError) {
        if !self.down.swap(true, Ordering::SeqCst) {
            self.outages.fetch_add(1, Ordering::SeqCst);
            let mut l = self.local();
            l.backoff = RECONNECT_MIN;
            l.retry_at = Some(Instant::now() + l.backoff);
            drop(l);
            tracing::warn!(
                target: "failover::store",
                server = %self.shown,
                error = %e.to_string().replace(&self.shown, ""),
                "state backend unreachable: serving from this replica's local view until it returns"
            );
        }
    }

    /// While down: `true` (use the local view) unless it is time to try
    /// the server again and it answers, in which case the local changes
    /// are merged back first.
    async fn use_local(&self) -> bool {
        if self.is_up() {
            return false;
        }
        {
            let l = self.local();
            if l.retry_at.is_some_and(|t| Instant::now() < t) {
                return true;
            }
        }
        match self.merge_back().await {
            Ok(n) => {
                self.down.store(false, Ordering::SeqCst);
                tracing::info!(
                    target: "failover::store",
                    server = %self.shown,
                    merged = n,
                    "state backend is back; local changes merged"
                );
                false
            }
            Err(_) => {
                let mut l = self.local();
                l.backoff = (l.backoff * 2).min(RECONNECT_MAX);
                l.retry_at = Some(Instant::now() + l.backoff);
                true
            }
        }
    }

    /// Writes what changed locally during an outage back to the server:
    /// per profile a merge that never shortens a deadline nor lowers a
    /// count; per session the local entry.
    async fn merge_back(&self) -> redis::RedisResult<usize> {
        let mut c = self.conn();
        let _: String = redis::cmd("PING").query_async(&mut c).await?;
        let (profiles, sessions) = {
            let l = self.local();
            let profiles: Vec<(String, String, Option<UsageStats>, Option<String>)> = l
                .dirty_profiles
                .iter()
                .map(|(id, p)| {
                    (
                        id.clone(),
                        p.clone(),
                        l.state.usage_stats.get(id).cloned(),
                        l.state.last_good.get(p).cloned(),
                    )
                })
                .collect();
            let sessions: Vec<(String, SessionEntry)> = l
                .dirty_sessions
                .iter()
                .filter_map(|k| Some((k.clone(), l.sessions.get(k)?.clone())))
                .collect();
            (profiles, sessions)
        };
        let bases: HashMap<String, Option<UsageStats>> = {
            let l = self.local();
            l.bases
                .iter()
                .filter_map(|(id, text)| match text {
                    None => Some((id.clone(), None)),
                    // A remembered record that does not parse is as unknown.
                    Some(t) => serde_json::from_str::<UsageStats>(t)
                        .ok()
                        .map(|s| (id.clone(), Some(s))),
                })
                .collect()
        };
        let n = profiles.len() + sessions.len();
        for (id, p, local, good) in profiles {
            let base = bases.get(&id).map(Option::as_ref);
            self.remote_update_profile(&id, &p, &mut |st| {
                if let Some(l) = &local {
                    let merged = merge_stats(base, st.usage_stats.get(&id), l);
                    st.usage_stats.insert(id.clone(), merged);
                }
                if let Some(g) = &good {
                    st.last_good.insert(p.clone(), g.clone());
                }
            })
            .await?;
        }
        for (k, e) in sessions {
            self.remote_update_session(&k, &mut |cur| *cur = e.clone())
                .await?;
        }
        let mut l = self.local();
        l.dirty_profiles.clear();
        l.dirty_sessions.clear();
        l.bases.clear();
        Ok(n)
    }

    async fn remote_update_profile(
        &self,
        profile_id: &str,
        provider: &str,
        f: &mut (dyn FnMut(&mut AuthState) + Send),
    ) -> redis::RedisResult<AuthState> {
        let p = normalize_provider(provider);
        let (stats_key, good_key) = (self.keys.stats.as_str(), self.keys.last_good.as_str());
        // The first try compares against the records as this replica last
        // saw them, without reading; later tries read.
        let mut remembered = self
            .recall(stats_key, profile_id)
            .zip(self.recall(good_key, &p));
        for _ in 0..CAS_RETRIES {
            let from_memory = remembered.is_some();
            let (stats, good): (Option<String>, Option<String>) = match remembered.take() {
                Some(r) => r,
                None => {
                    let mut c = self.conn();
                    redis::pipe()
                        .hget(stats_key, profile_id)
                        .hget(good_key, &p)
                        .query_async(&mut c)
                        .await?
                }
            };
            let mut st = AuthState::default();
            if let Some(s) = stats
                .as_deref()
                .and_then(|t| serde_json::from_str::<UsageStats>(t).ok())
            {
                st.usage_stats.insert(profile_id.to_string(), s);
            }
            if let Some(g) = &good {
                st.last_good.insert(p.clone(), g.clone());
            }
            f(&mut st);
            let new_stats = st.usage_stats.get(profile_id).map(to_text);
            let new_good = st.last_good.get(&p).cloned();
            if new_stats == stats && new_good == good {
                if from_memory {
                    // Unchanged against a memory that may be stale: only
                    // the server can say; read it.
                    continue;
                }
                self.remember([(stats_key, profile_id, stats), (good_key, p.as_str(), good)]);
                return Ok(st);
            }
            let writes = [
                (stats_key, profile_id, stats, new_stats.clone()),
                (good_key, p.as_str(), good, new_good.clone()),
            ];
            if self.cas_async(&writes).await? {
                self.remember([
                    (stats_key, profile_id, new_stats),
                    (good_key, p.as_str(), new_good),
                ]);
                return Ok(st);
            }
            self.forget(&[(stats_key, profile_id), (good_key, p.as_str())]);
        }
        Err(too_many_writers())
    }

    async fn remote_update_session(
        &self,
        key: &str,
        f: &mut (dyn FnMut(&mut SessionEntry) + Send),
    ) -> redis::RedisResult<SessionEntry> {
        let hash = self.keys.sessions.as_str();
        // As for profiles: the first try compares against the entry as
        // this replica last saw it (at the start of the run), unread.
        let mut remembered = self.recall(hash, key);
        for _ in 0..CAS_RETRIES {
            let from_memory = remembered.is_some();
            let old: Option<String> = match remembered.take() {
                Some(r) => r,
                None => {
                    let mut c = self.conn();
                    c.hget(hash, key).await?
                }
            };
            let mut e: SessionEntry = old
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default();
            f(&mut e);
            let new = Some(to_text(&e));
            if new == old {
                if from_memory {
                    continue;
                }
                self.remember([(hash, key, old)]);
                return Ok(e);
            }
            if self.cas_async(&[(hash, key, old, new.clone())]).await? {
                self.remember([(hash, key, new)]);
                return Ok(e);
            }
            self.forget(&[(hash, key)]);
        }
        Err(too_many_writers())
    }

    /// The session's entry and the whole routing state in one pipeline
    /// (one round trip), both remembered.
    async fn remote_load_run(
        &self,
        key: &str,
    ) -> redis::RedisResult<(Option<SessionEntry>, AuthState)> {
        let mut c = self.conn();
        type Run = (
            Option<String>,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
        );
        let (v, a, b, o, d): Run = redis::pipe()
            .hget(&self.keys.sessions, key)
            .hgetall(&self.keys.stats)
            .hgetall(&self.keys.last_good)
            .hgetall(&self.keys.order)
            .hgetall(&self.keys.doc)
            .query_async(&mut c)
            .await?;
        self.remember_state(&a, &b);
        self.remember([(self.keys.sessions.as_str(), key, v.clone())]);
        let entry = v.and_then(|t| serde_json::from_str(&t).ok());
        Ok((entry, self.parse_state(a, b, o, d)))
    }

    /// A run's success as one compare-and-set of up to three records: the
    /// session's entry, and the profile's `usageStats` entry and its
    /// provider's `lastGood` (when the run used a profile). The first try
    /// compares against the records as this replica last saw them (at the
    /// start of the run), unread; a record another writer changed since
    /// fails the compare, and all three are read (one pipeline) and the
    /// edits run again on what was read. A record an edit leaves as it was
    /// is still compared, so nothing is settled against a stale view.
    async fn remote_update_success(
        &self,
        mut profile: Option<(&str, &str, ProfileEdit<'_>)>,
        key: &str,
        f: &mut (dyn FnMut(&mut SessionEntry) + Send),
    ) -> redis::RedisResult<(Option<AuthState>, SessionEntry)> {
        let p = profile
            .as_ref()
            .map(|(_, prov, _)| normalize_provider(prov));
        let mut fields: Vec<(&str, &str)> = vec![(self.keys.sessions.as_str(), key)];
        if let (Some((id, _, _)), Some(p)) = (&profile, &p) {
            fields.push((self.keys.stats.as_str(), id));
            fields.push((self.keys.last_good.as_str(), p.as_str()));
        }
        let mut remembered: Option<Vec<Option<String>>> =
            fields.iter().map(|(h, f)| self.recall(h, f)).collect();
        for _ in 0..CAS_RETRIES {
            let from_memory = remembered.is_some();
            let old: Vec<Option<String>> = match remembered.take() {
                Some(r) => r,
                None => {
                    let mut pipe = redis::pipe();
                    for (h, f) in &fields {
                        pipe.hget(*h, *f);
                    }
                    let mut c = self.conn();
                    pipe.query_async(&mut c).await?
                }
            };
            let mut e: SessionEntry = old[0]
                .as_deref()
                .and_then(|t| serde_json::from_str(t).ok())
                .unwrap_or_default();
            f(&mut e);
            let mut new = vec![Some(to_text(&e))];
            let mut state = None;
            if let (Some((id, _, pf)), Some(p)) = (profile.as_mut(), &p) {
                let mut st = AuthState::default();
                if let Some(s) = old[1]
                    .as_deref()
                    .and_then(|t| serde_json::from_str::<UsageStats>(t).ok())
                {
                    st.usage_stats.insert(id.to_string(), s);
                }
                if let Some(g) = &old[2] {
                    st.last_good.insert(p.clone(), g.clone());
                }
                pf(&mut st);
                new.push(st.usage_stats.get(*id).map(to_text));
                new.push(st.last_good.get(p).cloned());
                state = Some(st);
            }
            if new == old && !from_memory {
                self.remember(fields.iter().zip(old).map(|((h, f), v)| (*h, *f, v)));
                return Ok((state, e));
            }
            let writes: Vec<(&str, &str, Option<String>, Option<String>)> = fields
                .iter()
                .zip(old)
                .zip(new.iter().cloned())
                .map(|(((h, f), o), n)| (*h, *f, o, n))
                .collect();
            if self.cas_async(&writes).await? {
                self.remember(fields.iter().zip(new).map(|((h, f), v)| (*h, *f, v)));
                return Ok((state, e));
            }
            self.forget(&fields);
        }
        Err(too_many_writers())
    }

    fn remember_state(&self, a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) {
        // A field remembered before and deleted since stays remembered:
        // a stale hint, which only costs a failed compare and a read.
        self.remember(
            a.iter()
                .map(|(k, v)| (self.keys.stats.as_str(), k.as_str(), Some(v.clone())))
                .chain(
                    b.iter()
                        .map(|(k, v)| (self.keys.last_good.as_str(), k.as_str(), Some(v.clone()))),
                ),
        );
        let mut whole = self.whole();
        whole.insert(self.keys.stats.clone());
        whole.insert(self.keys.last_good.clone());
    }

    /// An update of one profile's record in the local view (an outage).
    fn local_update_profile(&self, profile_id: &str, p: &str, f: ProfileEdit<'_>) {
        let mut l = self.local();
        let mut st = AuthState::default();
        if let Some(s) = l.state.usage_stats.get(profile_id) {
            st.usage_stats.insert(profile_id.to_string(), s.clone());
        }
        if let Some(g) = l.state.last_good.get(p) {
            st.last_good.insert(p.to_string(), g.clone());
        }
        f(&mut st);
        apply_record(&mut l.state, profile_id, p, &st);
        l.dirty_profiles
            .insert((profile_id.to_string(), p.to_string()));
        if !l.bases.contains_key(profile_id) {
            // The server's record as this replica last saw it, before its
            // first local change: the merge's common ancestor.
            if let Some(text) = self.recall(&self.keys.stats, profile_id) {
                l.bases.insert(profile_id.to_string(), text);
            }
        }
    }

    /// An update of one session's entry in the local view (an outage).
    fn local_update_session(&self, key: &str, f: &mut (dyn FnMut(&mut SessionEntry) + Send)) {
        let mut l = self.local();
        let mut e = l.sessions.get(key).cloned().unwrap_or_default();
        f(&mut e);
        l.dirty_sessions.insert(key.to_string());
        l.remember_session(key, &e);
    }

    async fn remote_load_state(&self) -> redis::RedisResult<AuthState> {
        let mut c = self.conn();
        type Maps = (
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
            BTreeMap<String, String>,
        );
        let (a, b, o, d): Maps = redis::pipe()
            .hgetall(&self.keys.stats)
            .hgetall(&self.keys.last_good)
            .hgetall(&self.keys.order)
            .hgetall(&self.keys.doc)
            .query_async(&mut c)
            .await?;
        self.remember_state(&a, &b);
        Ok(self.parse_state(a, b, o, d))
    }

    async fn remote_load_session(&self, key: &str) -> redis::RedisResult<Option<SessionEntry>> {
        let mut c = self.conn();
        let v: Option<String> = c.hget(&self.keys.sessions, key).await?;
        self.remember([(self.keys.sessions.as_str(), key, v.clone())]);
        Ok(v.and_then(|t| serde_json::from_str(&t).ok()))
    }
}

/// An error that means the server is gone (not a refused command): any
/// I/O error (refused, reset, timed out, unreachable: redis gives every
/// error that holds an `io::Error` the kind `Io`), or one after which the
/// connection must be replaced (a reply that does not parse).
fn is_outage(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_unrecoverable_error()
}

fn too_many_writers() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Client, "too many concurrent writers"))
}

/// A profile record written during an outage (`local`) merged into the
/// server's (`remote`). `base` is the server's record as this replica last
/// saw it before changing it locally (`Some(None)`: absent; `None`: not
/// known), the two histories' common ancestor.
///
/// * Nobody else wrote it meanwhile (`remote == base`): the local record
///   is its whole history and stands as it is — a success recorded during
///   the outage clears the window and the counts, as it would have online.
/// * The local record holds a success newer than any the server knows,
///   and every failure the server holds came before it: the success
///   resets them, as `record_success` does online, so the local counts and
///   windows stand — except a cooldown scoped to a model (R7.3) that
///   another replica set meanwhile: the success may have been on another
///   model, which leaves such a window in place, so it is kept (with its
///   counts); the cost of keeping it wrongly is one probe.
/// * Otherwise (failures on both sides, or one after the success): counts
///   never go back, deadlines never move earlier (each keeps the reason of
///   the later deadline), the latest times win.
fn merge_stats(
    base: Option<Option<&UsageStats>>,
    remote: Option<&UsageStats>,
    local: &UsageStats,
) -> UsageStats {
    let Some(r) = remote else {
        return local.clone();
    };
    if base == Some(Some(r)) {
        return local.clone();
    }
    // Files written before per-model windows (R7.3) hold one model window
    // in `cooldownModel`: each side's is moved into its map first.
    let migrated = |s: &UsageStats| {
        let mut s = s.clone();
        s.migrate_model_window();
        s
    };
    let (r, local) = (&migrated(r), &migrated(local));
    let base = base.map(|b| b.map(migrated));
    let base = base.as_ref().map(Option::as_ref);
    let later = |a: Option<u64>, b: Option<u64>| a.max(b);
    let known_success = later(base.flatten().and_then(|b| b.last_used), r.last_used);
    let success = local.last_used.filter(|t| Some(*t) > known_success);
    let mut m = if let Some(t) = success.filter(|t| r.last_failure_at.is_none_or(|f| f <= *t)) {
        let mut m = local.clone();
        // A model window another replica set meanwhile stays, with its
        // count: the local success may have been on another model (R7.3);
        // the cost of keeping it wrongly is one probe.
        for (model, theirs) in &r.model_cooldowns {
            let seen = base.flatten().and_then(|b| b.model_cooldowns.get(model));
            let mine = m.model_cooldowns.get(model);
            if seen != Some(theirs) && theirs.cooldown_until > mine.and_then(|c| c.cooldown_until) {
                m.model_cooldowns.insert(model.clone(), theirs.clone());
            }
        }
        m.last_used = Some(t);
        m.last_failure_at = later(r.last_failure_at, local.last_failure_at);
        m.last_probe_at = later(r.last_probe_at, local.last_probe_at);
        for (k, v) in &r.extra {
            m.extra.entry(k.clone()).or_insert_with(|| v.clone());
        }
        m
    } else {
        let mut m = r.clone();
        m.error_count = r.error_count.max(local.error_count);
        for (k, v) in &local.failure_counts {
            let e = m.failure_counts.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
        // The profile-wide cooldown: the later deadline, with its reason.
        let (rp, lp) = (r.profile_cooldown(), local.profile_cooldown());
        if lp.map(|p| p.0) > rp.map(|p| p.0) {
            m.cooldown_until = local.cooldown_until;
            m.cooldown_reason = local.cooldown_reason.clone();
            m.cooldown_model = None;
        }
        // Each model's window likewise; counts never go back.
        for (model, mine) in &local.model_cooldowns {
            let e = m.model_cooldowns.entry(model.clone()).or_default();
            if mine.cooldown_until > e.cooldown_until {
                e.cooldown_until = mine.cooldown_until;
                e.cooldown_reason = mine.cooldown_reason.clone();
            }
            e.error_count = e.error_count.max(mine.error_count);
            e.last_failure_at = later(e.last_failure_at, mine.last_failure_at);
        }
        if local.disabled_until > r.disabled_until {
            m.disabled_until = local.disabled_until;
            m.disabled_reason = local.disabled_reason.clone();
        }
        m.last_used = later(r.last_used, local.last_used);
        m.last_failure_at = later(r.last_failure_at, local.last_failure_at);
        m.last_probe_at = later(r.last_probe_at, local.last_probe_at);
        for (k, v) in &local.extra {
            m.extra.insert(k.clone(), v.clone());
        }
        m
    };
    // The original's fields copy the model window that ends last, as of
    // the latest event either side knows.
    let now = [m.last_used, m.last_failure_at, m.last_probe_at]
        .into_iter()
        .flatten()
        .max()
        .unwrap_or(0);
    m.mirror_model_windows(now);
    m
}

/// This replica's view of the shared state, for outages: the last state
/// read, every record this replica wrote or read since, and what changed
/// while the server was gone.
#[derive(Default)]
struct Local {
    state: AuthState,
    sessions: HashMap<String, SessionEntry>,
    dirty_profiles: BTreeSet<(String, String)>,
    /// Per dirty profile, the server's record (raw text, `None`: absent)
    /// as this replica last saw it before changing it locally, when known.
    bases: HashMap<String, Option<String>>,
    dirty_sessions: BTreeSet<String>,
    retry_at: Option<Instant>,
    backoff: Duration,
}

impl Local {
    fn remember_session(&mut self, key: &str, e: &SessionEntry) {
        if self.sessions.len() >= LOCAL_SESSIONS && !self.sessions.contains_key(key) {
            // Bounded: forget a clean entry (a dirty one must merge back).
            if let Some(k) = self
                .sessions
                .keys()
                .find(|k| !self.dirty_sessions.contains(*k))
                .cloned()
            {
                self.sessions.remove(&k);
            }
        }
        self.sessions.insert(key.to_string(), e.clone());
    }
}

fn scrub(e: &redis::RedisError, url: &str) -> String {
    let shown = redact_url(url);
    e.to_string().replace(url, &shown)
}

fn glob_escape(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

async fn scan(c: &mut ConnectionManager, pattern: &str) -> redis::RedisResult<Vec<String>> {
    let mut cursor: u64 = 0;
    let mut out = Vec::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(c)
            .await?;
        out.extend(batch);
        if next == 0 {
            return Ok(out);
        }
        cursor = next;
    }
}

impl AsyncStore for RedisStore {
    fn agent_id(&self) -> &str {
        self.files.agent_id()
    }

    fn load_profiles(&self) -> StoreFuture<'_, AuthProfiles> {
        Box::pin(std::future::ready(self.files.load_profiles()))
    }

    fn load_state(&self) -> StoreFuture<'_, AuthState> {
        Box::pin(async move {
            if !self.use_local().await {
                match self.remote_load_state().await {
                    Ok(st) => {
                        let mut l = self.local();
                        l.state = st.clone();
                        return Ok(st);
                    }
                    Err(e) if is_outage(&e) => self.enter_outage(&e),
                    Err(e) => return Err(self.err("read")(e)),
                }
            }
            Ok(self.local().state.clone())
        })
    }

    fn load_session<'a>(&'a self, key: &'a str) -> StoreFuture<'a, Option<SessionEntry>> {
        Box::pin(async move {
            if !self.use_local().await {
                match self.remote_load_session(key).await {
                    Ok(v) => {
                        if let Some(e) = &v {
                            self.local().remember_session(key, e);
                        }
                        return Ok(v);
                    }
                    Err(e) if is_outage(&e) => self.enter_outage(&e),
                    Err(e) => return Err(self.err("read")(e)),
                }
            }
            Ok(self.local().sessions.get(key).cloned())
        })
    }

    fn update_profile<'a>(
        &'a self,
        profile_id: &'a str,
        provider: &'a str,
        f: ProfileEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let p = normalize_provider(provider);
            if !self.use_local().await {
                match self.remote_update_profile(profile_id, provider, f).await {
                    Ok(st) => {
                        let mut l = self.local();
                        apply_record(&mut l.state, profile_id, &p, &st);
                        return Ok(());
                    }
                    Err(e) if is_outage(&e) => self.enter_outage(&e),
                    Err(e) => return Err(self.err("update")(e)),
                }
            }
            self.local_update_profile(profile_id, &p, f);
            Ok(())
        })
    }

    fn update_session<'a>(&'a self, key: &'a str, f: SessionEdit<'a>) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if !self.use_local().await {
                match self.remote_update_session(key, f).await {
                    Ok(e) => {
                        self.local().remember_session(key, &e);
                        return Ok(());
                    }
                    Err(e) if is_outage(&e) => self.enter_outage(&e),
                    Err(e) => return Err(self.err("update")(e)),
                }
            }
            self.local_update_session(key, f);
            Ok(())
        })
    }

    fn load_run<'a>(&'a self, key: &'a str) -> StoreFuture<'a, (Option<SessionEntry>, AuthState)> {
        Box::pin(async move {
            if !self.use_local().await {
                match self.remote_load_run(key).await {
                    Ok((v, st)) => {
                        let mut l = self.local();
                        if let Some(e) = &v {
                            l.remember_session(key, e);
                        }
                        l.state = st.clone();
                        return Ok((v, st));
                    }
                    Err(e) if is_outage(&e) => self.enter_outage(&e),
                    Err(e) => return Err(self.err("read")(e)),
                }
            }
            let l = self.local();
            Ok((l.sessions.get(key).cloned(), l.state.clone()))
        })
    }

    fn update_success<'a>(
        &'a self,
        mut profile: Option<(&'a str, &'a str, ProfileEdit<'a>)>,
        key: &'a str,
        f: SessionEdit<'a>,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            if !self.use_local().await {
                let reborrow = profile
                    .as_mut()
                    .map(|(id, p, pf)| (*id, *p, &mut **pf as _));
                match self.remote_update_success(reborrow, key, f).await {
                    Ok((st, e)) => {
                        let mut l = self.local();
                        if let (Some((id, p, _)), Some(st)) = (&profile, &st) {
                            apply_record(&mut l.state, id, &normalize_provider(p), st);
                        }
                        l.remember_session(key, &e);
                        return Ok(());
                    }
                    Err(e) if is_outage(&e) => self.enter_outage(&e),
                    Err(e) => return Err(self.err("update")(e)),
                }
            }
            if let Some((id, p, pf)) = profile {
                self.local_update_profile(id, &normalize_provider(p), pf);
            }
            self.local_update_session(key, f);
            Ok(())
        })
    }

    fn update_session_now(
        &self,
        key: &str,
        mut f: Box<dyn FnMut(&mut SessionEntry) + Send + 'static>,
    ) -> Result<(), StoreError> {
        if !self.is_up() {
            let mut l = self.local();
            let mut e = l.sessions.get(key).cloned().unwrap_or_default();
            f(&mut e);
            l.dirty_sessions.insert(key.to_string());
            l.remember_session(key, &e);
            return Ok(());
        }
        let sessions = self.keys.sessions.clone();
        let r = self.with_sync("update", |c| {
            for _ in 0..CAS_RETRIES {
                let old: Option<String> = c.hget(&sessions, key)?;
                let mut e: SessionEntry = old
                    .as_deref()
                    .and_then(|t| serde_json::from_str(t).ok())
                    .unwrap_or_default();
                f(&mut e);
                let new = to_text(&e);
                if Some(&new) == old.as_ref() {
                    return Ok(e);
                }
                let n: i64 = self
                    .cas
                    .key(&sessions)
                    .arg(key)
                    .arg(old.as_deref().unwrap_or(""))
                    .arg(&new)
                    .invoke(c)?;
                if n == 1 {
                    return Ok(e);
                }
            }
            Err(too_many_writers())
        })?;
        self.local().remember_session(key, &r);
        Ok(())
    }

    fn take_problems(&self) -> Vec<Problem> {
        self.files.take_problems()
    }

    fn shared_tables(&self) -> Option<&dyn SharedTables> {
        // During an outage the runner's own tables stand in.
        self.is_up().then_some(self as &dyn SharedTables)
    }

    fn health(&self) -> Option<(bool, u64)> {
        Some((self.is_up(), self.outages()))
    }
}

/// Puts the one record an update returned into the local state.
fn apply_record(state: &mut AuthState, profile_id: &str, provider: &str, st: &AuthState) {
    match st.usage_stats.get(profile_id) {
        Some(s) => {
            state.usage_stats.insert(profile_id.to_string(), s.clone());
        }
        None => {
            state.usage_stats.remove(profile_id);
        }
    }
    match st.last_good.get(provider) {
        Some(g) => {
            state.last_good.insert(provider.to_string(), g.clone());
        }
        None => {
            state.last_good.remove(provider);
        }
    }
}

impl SharedTables for RedisStore {
    fn try_probe<'a>(
        &'a self,
        provider: &'a str,
        now: u64,
        window_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let key = format!("{}probe:{provider}", self.keys.base);
            let mut c = self.conn();
            let n: i64 = self
                .slot
                .key(key)
                .arg(now)
                .arg(window_ms)
                .arg(DAY_MS)
                .invoke_async(&mut c)
                .await
                .map_err(self.err("probe throttle"))?;
            Ok(n == 1)
        })
    }

    fn take_reprobe<'a>(
        &'a self,
        session: &'a str,
        primary: &'a str,
        now: u64,
        interval_ms: u64,
    ) -> StoreFuture<'a, bool> {
        Box::pin(async move {
            let mut c = self.conn();
            let n: i64 = self
                .slot
                .key(self.reprobe_key(session, primary))
                .arg(now)
                .arg(interval_ms)
                .arg(DAY_MS)
                .invoke_async(&mut c)
                .await
                .map_err(self.err("re-probe"))?;
            Ok(n == 1)
        })
    }

    fn note_reprobe<'a>(
        &'a self,
        session: &'a str,
        primary: &'a str,
        now: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.conn();
            let _: () = c
                .pset_ex(self.reprobe_key(session, primary), now, DAY_MS)
                .await
                .map_err(self.err("re-probe"))?;
            Ok(())
        })
    }

    fn skip_get<'a>(
        &'a self,
        session: &'a str,
        provider: &'a str,
        model: &'a str,
        now: u64,
    ) -> StoreFuture<'a, Option<String>> {
        Box::pin(async move {
            let mut c = self.conn();
            let v: Option<String> = c
                .get(self.skip_key(session, provider, model))
                .await
                .map_err(self.err("skip cache"))?;
            Ok(v.and_then(|t| {
                let (until, reason) = t.split_once('\t')?;
                (until.parse::<u64>().ok()? > now).then(|| reason.to_string())
            }))
        })
    }

    fn skip_put<'a>(
        &'a self,
        session: &'a str,
        provider: &'a str,
        model: &'a str,
        reason: &'a str,
        until: u64,
    ) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.conn();
            // The TTL only collects garbage: the value's deadline decides.
            let _: () = c
                .pset_ex(
                    self.skip_key(session, provider, model),
                    format!("{until}\t{reason}"),
                    SKIP_GC_MS,
                )
                .await
                .map_err(self.err("skip cache"))?;
            Ok(())
        })
    }

    fn forget_session<'a>(&'a self, session: &'a str) -> StoreFuture<'a, ()> {
        Box::pin(async move {
            let mut c = self.conn();
            let mut keys = Vec::new();
            for kind in ["reprobe", "skip"] {
                let pattern = format!("{}{kind}:{}:*", glob_escape(&self.keys.base), hex(session));
                keys.extend(scan(&mut c, &pattern).await.map_err(self.err("forget"))?);
            }
            if !keys.is_empty() {
                let _: () = c.del(keys).await.map_err(self.err("forget"))?;
            }
            Ok(())
        })
    }
}

impl Store for RedisStore {
    fn agent_id(&self) -> &str {
        self.files.agent_id()
    }

    fn load_profiles(&self) -> Result<AuthProfiles, StoreError> {
        self.files.load_profiles()
    }

    fn load_state(&self) -> Result<AuthState, StoreError> {
        let k = &self.keys;
        let (a, b, o, d) = self.with_sync("read", |c| {
            redis::pipe()
                .hgetall(&k.stats)
                .hgetall(&k.last_good)
                .hgetall(&k.order)
                .hgetall(&k.doc)
                .query::<(
                    BTreeMap<String, String>,
                    BTreeMap<String, String>,
                    BTreeMap<String, String>,
                    BTreeMap<String, String>,
                )>(c)
        })?;
        Ok(self.parse_state(a, b, o, d))
    }

    fn load_sessions(&self) -> Result<SessionStore, StoreError> {
        let all: BTreeMap<String, String> =
            self.with_sync("read", |c| c.hgetall(&self.keys.sessions))?;
        let mut out = SessionStore::default();
        for (k, v) in all {
            if let Ok(e) = serde_json::from_str(&v) {
                out.entries.insert(k, e);
            }
        }
        Ok(out)
    }

    fn load_session(&self, key: &str) -> Result<Option<SessionEntry>, StoreError> {
        let v: Option<String> = self.with_sync("read", |c| c.hget(&self.keys.sessions, key))?;
        Ok(v.and_then(|t| serde_json::from_str(&t).ok()))
    }

    fn update_profiles_dyn(&self, f: &mut dyn FnMut(&mut AuthProfiles)) -> Result<(), StoreError> {
        self.files.update_profiles_dyn(f)
    }

    fn update_state_dyn(&self, f: &mut dyn FnMut(&mut AuthState)) -> Result<(), StoreError> {
        let k = &self.keys;
        let keys = [&k.stats, &k.last_good, &k.order, &k.doc];
        self.with_sync("update", |c| {
            for _ in 0..CAS_RETRIES {
                redis::cmd("WATCH").arg(&keys).query::<()>(c)?;
                let (a, b, o, d) = redis::pipe()
                    .hgetall(&k.stats)
                    .hgetall(&k.last_good)
                    .hgetall(&k.order)
                    .hgetall(&k.doc)
                    .query(c)?;
                let before = self.parse_state(a, b, o, d);
                let mut after = before.clone();
                f(&mut after);
                if after == before {
                    redis::cmd("UNWATCH").query::<()>(c)?;
                    return Ok(());
                }
                let mut pipe = redis::pipe();
                pipe.atomic();
                let old = self.state_fields(&before);
                let new = self.state_fields(&after);
                for ((key, o), (_, n)) in old.iter().zip(new.iter()) {
                    diff_into(&mut pipe, key, o, n);
                }
                let done: Option<()> = pipe.query(c)?;
                if done.is_some() {
                    return Ok(());
                }
            }
            Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "too many concurrent writers",
            )))
        })
    }

    fn update_sessions_dyn(&self, f: &mut dyn FnMut(&mut SessionStore)) -> Result<(), StoreError> {
        let key = &self.keys.sessions;
        self.with_sync("update", |c| {
            for _ in 0..CAS_RETRIES {
                redis::cmd("WATCH").arg(key).query::<()>(c)?;
                let all: BTreeMap<String, String> = c.hgetall(key)?;
                let mut before = SessionStore::default();
                for (k, v) in &all {
                    if let Ok(e) = serde_json::from_str(v) {
                        before.entries.insert(k.clone(), e);
                    }
                }
                let mut after = before.clone();
                f(&mut after);
                let text = |s: &SessionStore| -> BTreeMap<String, String> {
                    s.entries
                        .iter()
                        .map(|(k, e)| (k.clone(), to_text(e)))
                        .collect()
                };
                let mut pipe = redis::pipe();
                pipe.atomic();
                diff_into(&mut pipe, key, &text(&before), &text(&after));
                let done: Option<()> = pipe.query(c)?;
                if done.is_some() {
                    return Ok(());
                }
            }
            Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "too many concurrent writers",
            )))
        })
    }

    fn take_problems(&self) -> Vec<Problem> {
        self.files.take_problems()
    }
}

fn diff_into(
    pipe: &mut redis::Pipeline,
    key: &str,
    before: &BTreeMap<String, String>,
    after: &BTreeMap<String, String>,
) {
    for (f, v) in after {
        if before.get(f) != Some(v) {
            pipe.hset(key, f, v).ignore();
        }
    }
    for f in before.keys() {
        if !after.contains_key(f) {
            pipe.hdel(key, f).ignore();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_767_225_600_000;

    fn cooling(at: u64, until: u64, model: Option<&str>) -> UsageStats {
        UsageStats {
            error_count: 2,
            cooldown_until: Some(until),
            cooldown_reason: Some("rate_limit".into()),
            cooldown_model: model.map(str::to_string),
            last_failure_at: Some(at),
            last_used: Some(T - 60_000),
            ..Default::default()
        }
    }

    fn succeeded(from: &UsageStats, at: u64) -> UsageStats {
        let mut s = AuthState::default();
        s.usage_stats.insert("p:a".into(), from.clone());
        crate::auth::record_success(&mut s, "p:a", "p", Some("m"), at);
        s.usage_stats["p:a"].clone()
    }

    // Item 6 of issue 13: a success recorded during an outage, on a record
    // nobody else changed meanwhile, stands after the merge: the window it
    // cleared stays cleared and the counts stay reset.
    #[test]
    fn a_success_during_an_outage_stands_when_nobody_else_wrote() {
        let base = cooling(T, T + 600_000, None);
        let local = succeeded(&base, T + 60_000);
        assert_eq!(local.cooldown_until, None);
        let m = merge_stats(Some(Some(&base)), Some(&base), &local);
        assert_eq!(m, local);
        // Base unknown (the memory was cleared): still the success's, for
        // every failure the server holds is older than it.
        let m = merge_stats(None, Some(&base), &local);
        assert_eq!((m.error_count, m.cooldown_until), (0, None));
    }

    // Another replica's failure after our success (both during the
    // outage) is kept: counts never go back, its deadline stands.
    #[test]
    fn a_failure_after_the_success_is_kept() {
        let base = cooling(T, T + 600_000, None);
        let local = succeeded(&base, T + 60_000);
        let remote = cooling(T + 120_000, T + 900_000, None);
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.error_count, 2);
        assert_eq!(m.cooldown_until, Some(T + 900_000));
        assert_eq!(m.last_used, Some(T + 60_000));
    }

    // Another replica's whole-profile window set before our success is
    // cleared by it (as online); a model-scoped one it set meanwhile is
    // kept (our success may have been on another model, R7.3).
    #[test]
    fn a_success_after_another_replicas_failure() {
        let base = UsageStats {
            last_used: Some(T - 60_000),
            ..Default::default()
        };
        let local = succeeded(&base, T + 60_000);
        let whole = cooling(T + 30_000, T + 600_000, None);
        let m = merge_stats(Some(Some(&base)), Some(&whole), &local);
        assert_eq!((m.error_count, m.cooldown_until), (0, None));
        let scoped = cooling(T + 30_000, T + 600_000, Some("other"));
        let m = merge_stats(Some(Some(&base)), Some(&scoped), &local);
        assert_eq!(m.cooldown_until, Some(T + 600_000));
        assert_eq!(m.cooldown_model.as_deref(), Some("other"));
        assert_eq!(m.model_cooldowns["other"].error_count, 2, "its count kept");
        assert_eq!(m.error_count, 0, "the profile's count is the success's");
        assert_eq!(m.last_used, Some(T + 60_000));
    }

    // Failures on both sides, no success: the larger count, the later
    // deadline, never shortened.
    #[test]
    fn failures_on_both_sides_never_go_back() {
        let base = cooling(T, T + 60_000, None);
        let mut local = cooling(T + 10_000, T + 300_000, None);
        local.error_count = 3;
        let remote = cooling(T + 20_000, T + 120_000, None);
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.error_count, 3);
        assert_eq!(m.cooldown_until, Some(T + 300_000));
        assert_eq!(m.last_failure_at, Some(T + 20_000));
    }

    // A success the server already holds (the same `lastUsed`) is not a
    // new one: it resets nothing, and the merge keeps the server's window
    // and count (only a success newer than every known one clears them).
    #[test]
    fn a_success_the_server_already_holds_resets_nothing() {
        let mut remote = cooling(T - 1_000, T + 600_000, None);
        remote.last_used = Some(T);
        let local = UsageStats {
            last_used: Some(T),
            ..Default::default()
        };
        let m = merge_stats(None, Some(&remote), &local);
        assert_eq!((m.error_count, m.cooldown_until), (2, Some(T + 600_000)));
    }

    // A model-scoped window another replica set meanwhile is kept by a
    // newer success only when it ends later than the success's own; at an
    // equal deadline the success's record stands, its reason and counts.
    #[test]
    fn an_equal_scoped_window_leaves_the_successs_record() {
        let base = UsageStats {
            last_used: Some(T - 60_000),
            ..Default::default()
        };
        let mut remote = cooling(T + 30_000, T + 600_000, Some("other"));
        remote.error_count = 4;
        remote.cooldown_reason = Some("overloaded".into());
        let mut local = cooling(T + 20_000, T + 600_000, Some("other"));
        local.error_count = 1;
        local.last_used = Some(T + 60_000);
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.error_count, 1);
        assert_eq!(m.cooldown_reason.as_deref(), Some("rate_limit"));
        // A later one is theirs, with its reason and the larger count.
        remote.cooldown_until = Some(T + 900_000);
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.model_cooldowns["other"].error_count, 4);
        assert_eq!(m.cooldown_reason.as_deref(), Some("overloaded"));
    }

    // R7.3 (issue 51): failures of different models on two replicas
    // during an outage both stand, each model's window and count its own.
    #[test]
    fn model_windows_of_both_sides_merge_per_model() {
        let window = |until: u64, n: u32| crate::store::ModelCooldown {
            cooldown_until: Some(until),
            cooldown_reason: Some("rate_limit".into()),
            error_count: n,
            last_failure_at: Some(T),
            ..Default::default()
        };
        let base = UsageStats::default();
        let mut local = UsageStats {
            error_count: 1,
            last_failure_at: Some(T),
            ..Default::default()
        };
        local
            .model_cooldowns
            .insert("m1".into(), window(T + 60_000, 1));
        local
            .model_cooldowns
            .insert("m2".into(), window(T + 300_000, 2));
        let mut remote = UsageStats {
            error_count: 2,
            last_failure_at: Some(T + 1),
            ..Default::default()
        };
        remote
            .model_cooldowns
            .insert("m2".into(), window(T + 60_000, 3));
        remote
            .model_cooldowns
            .insert("m3".into(), window(T + 120_000, 1));
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        let got: Vec<_> = m
            .model_cooldowns
            .iter()
            .map(|(k, c)| (k.as_str(), c.cooldown_until.unwrap() - T, c.error_count))
            .collect();
        assert_eq!(
            got,
            [("m1", 60_000, 1), ("m2", 300_000, 3), ("m3", 120_000, 1)]
        );
        assert_eq!(m.error_count, 2);
        assert_eq!(
            m.cooldown_model.as_deref(),
            Some("m2"),
            "the latest window mirrored"
        );
        assert_eq!(m.cooldown_until, Some(T + 300_000));
        // The same end on both sides: the server's reason stays (what the
        // other replicas already read), as for profile-wide windows.
        let mut theirs = window(T + 60_000, 1);
        theirs.cooldown_reason = Some("overloaded".into());
        remote.model_cooldowns.insert("m1".into(), theirs);
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(
            m.model_cooldowns["m1"].cooldown_reason.as_deref(),
            Some("overloaded")
        );
    }

    // Failures on both sides: each deadline takes the later one with its
    // reason; on a tie the server's reason stays (what other replicas
    // already read), for cooldowns and disables alike (R8).
    #[test]
    fn each_deadline_keeps_the_later_ones_reason_and_the_servers_on_a_tie() {
        let base = cooling(T, T + 60_000, None);
        let disabled = |until: u64, reason: &str| {
            let mut s = cooling(T + 10_000, T + 120_000, None);
            s.cooldown_reason = Some(format!("{reason} cooldown"));
            s.disabled_until = Some(until);
            s.disabled_reason = Some(reason.into());
            s
        };
        let remote = disabled(T + 5 * 3_600_000, "billing");
        // The local disable ends later: it stands, with its reason.
        let local = disabled(T + 10 * 3_600_000, "auth_permanent");
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.disabled_until, Some(T + 10 * 3_600_000));
        assert_eq!(m.disabled_reason.as_deref(), Some("auth_permanent"));
        // It ends earlier: the server's stands (never shortened).
        let local = disabled(T + 3_600_000, "auth_permanent");
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.disabled_until, Some(T + 5 * 3_600_000));
        assert_eq!(m.disabled_reason.as_deref(), Some("billing"));
        // The same deadlines: the server's reasons.
        let local = disabled(T + 5 * 3_600_000, "auth_permanent");
        let m = merge_stats(Some(Some(&base)), Some(&remote), &local);
        assert_eq!(m.disabled_reason.as_deref(), Some("billing"));
        assert_eq!(m.cooldown_reason.as_deref(), Some("billing cooldown"));
    }

    // What makes a replica serve from its local view: the connection is
    // gone (any I/O error: refused, reset, timed out, unreachable; a reply
    // that does not parse), not a command the server or the client
    // refused.
    #[test]
    fn an_outage_is_a_lost_connection_not_a_refused_command() {
        use std::io::ErrorKind as Io;
        for kind in [
            Io::ConnectionRefused,
            Io::ConnectionReset,
            Io::BrokenPipe,
            Io::UnexpectedEof,
            Io::TimedOut,
            Io::HostUnreachable,
            Io::NetworkUnreachable,
        ] {
            let e = redis::RedisError::from(std::io::Error::new(kind, "lost"));
            assert!(is_outage(&e), "{kind:?}");
        }
        let garbled = redis::RedisError::from((redis::ErrorKind::Parse, "bad reply"));
        assert!(is_outage(&garbled), "the connection must be replaced");
        for e in [
            too_many_writers(),
            redis::RedisError::from((redis::ErrorKind::UnexpectedReturnType, "bad reply")),
            redis::RedisError::from((
                redis::ErrorKind::Server(redis::ServerErrorKind::ResponseError),
                "WRONGTYPE",
            )),
        ] {
            assert!(!is_outage(&e), "{e}");
        }
    }

    // The local view is bounded (LOCAL_SESSIONS): at the bound a new
    // session forgets a clean one, never one written during the outage
    // (it must merge back); an entry already held forgets nothing.
    #[test]
    fn the_local_view_is_bounded_and_keeps_what_must_merge_back() {
        let mut l = Local::default();
        let e = SessionEntry::default();
        for i in 0..LOCAL_SESSIONS {
            l.sessions.insert(format!("s{i}"), e.clone());
            if i > 0 {
                l.dirty_sessions.insert(format!("s{i}"));
            }
        }
        l.remember_session("s1", &e);
        assert_eq!(l.sessions.len(), LOCAL_SESSIONS, "already held");
        l.remember_session("new", &e);
        assert_eq!(l.sessions.len(), LOCAL_SESSIONS);
        assert!(l.sessions.contains_key("new"));
        assert!(!l.sessions.contains_key("s0"), "the clean one went");
        assert!(l.dirty_sessions.iter().all(|k| l.sessions.contains_key(k)));
        // Below the bound nothing is forgotten.
        let mut small = Local::default();
        small.remember_session("a", &e);
        small.remember_session("b", &e);
        assert_eq!(small.sessions.len(), 2);
    }

    // docs/gateway.md ("retries with backoff"): the first retry is due RECONNECT_MIN
    // after the outage began; none before it is due; each failed one
    // doubles the wait, up to RECONNECT_MAX. (The test sets the due time
    // itself, so a slow host cannot change what it sees.)
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reconnection_backs_off_doubling_up_to_the_cap() {
        let Some(mut server) = failover_testkit::RedisServer::start() else {
            eprintln!("skipped: no redis-server");
            return;
        };
        let dir = failover_testkit::temp_root("redis-backoff", "main");
        let s = RedisStore::connect(&server.url(), "backoff:", &dir, "main")
            .await
            .unwrap();
        server.kill();
        let before = Instant::now();
        AsyncStore::load_state(&s).await.unwrap();
        assert!(!s.is_up());
        {
            let l = s.local();
            assert_eq!(l.backoff, RECONNECT_MIN);
            assert!(l.retry_at.unwrap() >= before + RECONNECT_MIN);
        }
        let mut trips = s.round_trips();
        s.local().retry_at = Some(Instant::now() + Duration::from_secs(60));
        AsyncStore::load_state(&s).await.unwrap();
        assert_eq!(s.round_trips(), trips, "not due: not tried");
        for ms in [200, 400, 800, 1600, 3200, 5000, 5000] {
            s.local().retry_at = Some(Instant::now() - Duration::from_millis(1));
            let before = Instant::now();
            AsyncStore::load_state(&s).await.unwrap();
            trips += 1;
            assert_eq!(s.round_trips(), trips, "due: tried once");
            let l = s.local();
            assert_eq!(l.backoff, Duration::from_millis(ms));
            assert!(l.retry_at.unwrap() >= before + l.backoff);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            redact_url("redis://user:hunter2@127.0.0.1:6379/0"),
            "redis://user:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact_url("redis://:hunter2@h/0"), "redis://:***@h/0");
        assert_eq!(redact_url("redis://127.0.0.1/0"), "redis://127.0.0.1/0");
    }
}
