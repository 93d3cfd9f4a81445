//! Client keys at the door (SPEC R18, issue 45): making keys, hashing
//! them, and admitting requests by key, scope and limits.
//!
//! The table of key records lives in the state backend
//! ([`failover::state::keys`]); this module owns the cryptography (ring,
//! which rustls already builds: random bytes and SHA-256) and the
//! per-replica limits. A verified table is reused for at most
//! [`CACHE_TTL`]; usage is added to the records every [`FLUSH_EVERY`].

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use failover::state::keys::{ClientKey, KeyRefusal, KeyStore, KeyTable, KeyUsage};
use failover::state::Secret;

use super::protocol::ClientError;
use super::upstreams::ClientAuthMode;

/// The prefix of every key: recognisable to people and secret scanners.
pub const KEY_PREFIX: &str = "fo-";
/// Random bytes per key: 192 bits.
const KEY_BYTES: usize = 24;
/// How long a loaded key table is trusted (SPEC R18.3).
pub(crate) const CACHE_TTL: Duration = Duration::from_millis(500);
/// How often a replica adds its keys' usage to their records (R18.8).
pub(crate) const FLUSH_EVERY: Duration = Duration::from_secs(5);
/// The sliding window of `rpm`.
const MINUTE: Duration = Duration::from_secs(60);

/// A key just made: shown once, stored as its hash.
pub struct NewKey {
    /// The key (`fo-` and 48 hex digits).
    pub key: Secret,
    /// Its SHA-256, hex: the record's id.
    pub hash: String,
    /// `fo-` and its first 4 hex digits, for listings.
    pub hint: String,
}

/// Makes a key from the system's random source.
pub fn generate() -> Result<NewKey, String> {
    use ring::rand::SecureRandom;
    let mut bytes = [0u8; KEY_BYTES];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| "the system's random source failed".to_string())?;
    let mut key = String::from(KEY_PREFIX);
    for b in bytes {
        key.push_str(&format!("{b:02x}"));
    }
    let hint = key[..KEY_PREFIX.len() + 4].to_string();
    Ok(NewKey {
        hash: hash_of(&key),
        key: Secret::new(key),
        hint,
    })
}

/// The hex SHA-256 of a key: fast and right for keys of 192 random bits
/// (no password hashing is needed when the input cannot be guessed).
pub fn hash_of(key: &str) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, key.as_bytes());
    let mut out = String::with_capacity(64);
    for b in d.as_ref() {
        out.push_str(&format!("{b:02x}"));
    }
    out
}

/// Equality whose time does not depend on where the inputs differ.
/// Written here because ring's `verify_slices_are_equal` is deprecated and
/// the comparison is two 64-byte strings.
fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// The key a request presents: `Authorization: Bearer <key>` (OpenAI's
/// SDKs) or `x-api-key: <key>` (Anthropic's).
fn presented(headers: &HeaderMap) -> Option<&str> {
    if let Some(v) = headers.get("x-api-key").and_then(|v| v.to_str().ok()) {
        let v = v.trim();
        if !v.is_empty() {
            return Some(v);
        }
    }
    let v = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .trim();
    let (scheme, rest) = v.split_once(' ')?;
    let rest = rest.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty()).then_some(rest)
}

/// Whether `/metrics` may be read with these headers.
pub(crate) fn metrics_allowed(token: Option<&Secret>, headers: &HeaderMap) -> bool {
    let Some(token) = token else { return true };
    let Some(v) = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let Some((scheme, rest)) = v.trim().split_once(' ') else {
        return false;
    };
    scheme.eq_ignore_ascii_case("bearer")
        && ct_eq(
            hash_of(rest.trim()).as_bytes(),
            hash_of(token.expose()).as_bytes(),
        )
}

/// A request's verified key: its record as loaded.
#[derive(Clone, Debug)]
pub(crate) struct Verified {
    pub(crate) hash: String,
    pub(crate) record: ClientKey,
}

impl Verified {
    pub(crate) fn name(&self) -> &str {
        &self.record.name
    }
}

/// What one replica tracks of a key.
#[derive(Default)]
struct Live {
    /// Admissions in the last minute (R18.5).
    window: VecDeque<Instant>,
    in_flight: u32,
    /// Usage not yet added to the record.
    pending: KeyUsage,
    last_used_ms: Option<u64>,
}

struct Cached {
    at: Option<Instant>,
    table: Arc<KeyTable>,
}

/// The gateway's door: see the module documentation.
pub(crate) struct ClientAuth {
    /// `serve.clientAuth` as written.
    written: Option<ClientAuthMode>,
    /// Whether the gateway listens on loopback only (set at start).
    loopback: std::sync::atomic::AtomicBool,
    store: Option<Arc<dyn KeyStore>>,
    cache: tokio::sync::Mutex<Cached>,
    live: Mutex<HashMap<String, Live>>,
    last_flush: Mutex<Instant>,
}

/// Holds a key's concurrency slot until dropped (the whole answer, the
/// stream included).
pub(crate) struct KeySlot {
    auth: Arc<ClientAuth>,
    hash: String,
    name: String,
}

impl KeySlot {
    /// The key's name (for metrics).
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Tokens of the answer this slot is held for (a stream's, counted
    /// as its events pass).
    pub(crate) fn record_tokens(&self, prompt: u64, completion: u64) {
        self.auth.add_tokens(&self.hash, prompt, completion);
    }
}

impl Drop for KeySlot {
    fn drop(&mut self) {
        let mut live = self.auth.live.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(l) = live.get_mut(&self.hash) {
            l.in_flight = l.in_flight.saturating_sub(1);
        }
    }
}

impl ClientAuth {
    pub(crate) fn new(written: Option<ClientAuthMode>, store: Option<Arc<dyn KeyStore>>) -> Self {
        ClientAuth {
            written,
            loopback: std::sync::atomic::AtomicBool::new(true),
            store,
            cache: tokio::sync::Mutex::new(Cached {
                at: None,
                table: Arc::default(),
            }),
            live: Mutex::default(),
            last_flush: Mutex::new(Instant::now()),
        }
    }

    /// Where the gateway listens: a non-loopback address makes an
    /// unwritten `clientAuth` `required` (R18.6).
    pub(crate) fn set_loopback(&self, loopback: bool) {
        self.loopback
            .store(loopback, std::sync::atomic::Ordering::Relaxed);
    }

    /// The mode in force: written, or `required` off loopback, or — on
    /// loopback, unwritten — `required` as soon as any key exists.
    async fn mode(&self) -> ClientAuthMode {
        match self.written {
            Some(m) => m,
            None if !self.loopback.load(std::sync::atomic::Ordering::Relaxed) => {
                ClientAuthMode::Required
            }
            None if self.table().await.any_live() => ClientAuthMode::Required,
            None => ClientAuthMode::Off,
        }
    }

    /// What `serve` says at start about the door.
    pub(crate) async fn describe(&self) -> &'static str {
        match (self.written, self.mode().await) {
            (Some(ClientAuthMode::Off), _) => "off (serve.clientAuth)",
            (Some(ClientAuthMode::Required), _) => "required (serve.clientAuth)",
            (None, ClientAuthMode::Required) => {
                "required (client keys exist, or the address is not loopback)"
            }
            (None, ClientAuthMode::Off) => {
                "off until a client key is created (loopback, serve.clientAuth unwritten)"
            }
        }
    }

    /// Whether a non-loopback gateway was told `clientAuth: off`.
    pub(crate) fn open_on_network(&self) -> bool {
        self.written == Some(ClientAuthMode::Off)
            && !self.loopback.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The key table, reloaded when older than [`CACHE_TTL`]. A backend
    /// that cannot be read keeps the last table (logged): keys known to
    /// work keep working through a short outage, and a new key waits.
    async fn table(&self) -> Arc<KeyTable> {
        let mut c = self.cache.lock().await;
        if c.at.is_some_and(|t| t.elapsed() < CACHE_TTL) {
            return c.table.clone();
        }
        let Some(store) = self.store.clone() else {
            return c.table.clone();
        };
        match tokio::task::spawn_blocking(move || store.load()).await {
            Ok(Ok(t)) => {
                c.table = Arc::new(t);
                c.at = Some(Instant::now());
            }
            Ok(Err(e)) => {
                tracing::warn!(target: "failover::serve", error = %e, "client keys could not be read; using the last table");
                c.at = Some(Instant::now());
            }
            Err(_) => {}
        }
        c.table.clone()
    }

    /// R18.2, R18.3: the request's key, verified (`None` with
    /// `clientAuth: off`). Refusals are 401s in the client's protocol,
    /// with the metric's key label (the key's name, or `none`).
    ///
    /// A backend that reads one record cheaply (Redis) is asked on every
    /// request, so a revocation takes effect at once; the others are read
    /// through the table cached for [`CACHE_TTL`]. When that read fails,
    /// the cached table answers (logged).
    pub(crate) async fn verify(
        &self,
        headers: &HeaderMap,
    ) -> Result<Option<Verified>, (ClientError, String)> {
        if self.mode().await == ClientAuthMode::Off {
            return Ok(None);
        }
        let unauth = |msg: &str, name: &str| {
            let mut e = ClientError::new(401, msg.to_string());
            e.error_type = None;
            (e, name.to_string())
        };
        let Some(key) = presented(headers) else {
            return Err(unauth(
                "a client key is required: send it as `Authorization: Bearer <key>` or `x-api-key: <key>` (failover keys create)",
                "none",
            ));
        };
        let hash = hash_of(key);
        let fresh = match self.store.clone().filter(|s| s.per_request()) {
            Some(store) => {
                let h = hash.clone();
                match tokio::task::spawn_blocking(move || store.get(&h)).await {
                    Ok(Ok(found)) => Some(found),
                    Ok(Err(e)) => {
                        tracing::warn!(target: "failover::serve", error = %e, "client key could not be read; using the last table");
                        None
                    }
                    Err(_) => None,
                }
            }
            None => None,
        };
        let record = match fresh {
            Some(found) => found,
            None => {
                let table = self.table().await;
                table
                    .keys
                    .iter()
                    .find(|(h, _)| ct_eq(h.as_bytes(), hash.as_bytes()))
                    .map(|(_, r)| r.clone())
            }
        };
        let Some(record) = record else {
            return Err(unauth("the client key is not valid", "none"));
        };
        let h = hash;
        let now = failover::time::Clock::now_ms(&failover::time::SystemClock);
        match record.usable(now) {
            Ok(()) => Ok(Some(Verified { hash: h, record })),
            Err(KeyRefusal::Revoked) => Err(unauth(
                &format!("the client key `{}` was revoked", record.name),
                &record.name,
            )),
            Err(KeyRefusal::Expired) => Err(unauth(
                &format!("the client key `{}` has expired", record.name),
                &record.name,
            )),
        }
    }

    /// R18.4, R18.5: whether `key` may run `agent` for `model` now; a slot
    /// of its concurrency while the answer lasts.
    pub(crate) fn admit(
        self: &Arc<Self>,
        key: &Verified,
        agent: &str,
        model: &str,
    ) -> Result<KeySlot, (ClientError, &'static str)> {
        let r = &key.record;
        if !r.allows(agent, model) {
            let list = |xs: &[String]| {
                if xs.is_empty() {
                    "any".to_string()
                } else {
                    xs.join(", ")
                }
            };
            let shown: String = model.chars().take(120).collect();
            return Err((
                ClientError::new(
                    403,
                    format!(
                        "the client key `{}` may not use `{shown}` (agent `{agent}`): it may use agents {} and models {}",
                        r.name,
                        list(&r.agents),
                        list(&r.models)
                    ),
                ),
                "forbidden",
            ));
        }
        let now = Instant::now();
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let l = live.entry(key.hash.clone()).or_default();
        while l.window.front().is_some_and(|t| now - *t >= MINUTE) {
            l.window.pop_front();
        }
        if let Some(rpm) = r.rpm {
            if l.window.len() >= rpm as usize {
                let wait = l
                    .window
                    .front()
                    .map_or(MINUTE, |t| MINUTE.saturating_sub(now - *t));
                let mut e = ClientError::new(
                    429,
                    format!(
                        "the client key `{}` is over its limit of {rpm} requests per minute",
                        r.name
                    ),
                );
                e.retry_after = Some(wait.as_secs().max(1));
                return Err((e, "rate_limited"));
            }
        }
        if let Some(c) = r.concurrency {
            if l.in_flight >= c {
                let mut e = ClientError::new(
                    429,
                    format!(
                        "the client key `{}` is over its limit of {c} requests at once",
                        r.name
                    ),
                );
                e.retry_after = Some(1);
                return Err((e, "rate_limited"));
            }
        }
        if r.rpm.is_some() {
            l.window.push_back(now);
        }
        l.in_flight += 1;
        l.pending.add(KeyUsage::of(1, 0, 0));
        l.last_used_ms = Some(failover::time::Clock::now_ms(&failover::time::SystemClock));
        Ok(KeySlot {
            auth: self.clone(),
            hash: key.hash.clone(),
            name: r.name.clone(),
        })
    }

    /// Tokens of an admitted request's answer.
    pub(crate) fn record_tokens(&self, key: &Verified, prompt: u64, completion: u64) {
        self.add_tokens(&key.hash, prompt, completion);
    }

    fn add_tokens(&self, hash: &str, prompt: u64, completion: u64) {
        if prompt == 0 && completion == 0 {
            return;
        }
        let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        live.entry(hash.to_string())
            .or_default()
            .pending
            .add(KeyUsage::of(0, prompt, completion));
    }

    /// Adds the pending usage to the records when [`FLUSH_EVERY`] has
    /// passed (or always with `force`), off the request's path.
    pub(crate) fn maybe_flush(self: &Arc<Self>, force: bool) {
        {
            let mut last = self.last_flush.lock().unwrap_or_else(|e| e.into_inner());
            if !force && last.elapsed() < FLUSH_EVERY {
                return;
            }
            *last = Instant::now();
        }
        let Some(store) = self.store.clone() else {
            return;
        };
        let pending: Vec<(String, KeyUsage, Option<u64>)> = {
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            live.iter_mut()
                .filter(|(_, l)| l.pending != KeyUsage::default())
                .map(|(h, l)| (h.clone(), std::mem::take(&mut l.pending), l.last_used_ms))
                .collect()
        };
        if pending.is_empty() {
            return;
        }
        let write = move || {
            let now = failover::time::Clock::now_ms(&failover::time::SystemClock);
            let r = store.update(|t| {
                for (h, u, last) in &pending {
                    if let Some(k) = t.keys.get_mut(h) {
                        k.usage.add(*u);
                        k.recent.add(now, u.requests);
                        k.last_used_ms = k.last_used_ms.max(*last);
                    }
                }
            });
            if let Err(e) = r {
                tracing::warn!(target: "failover::serve", error = %e, "client key usage could not be written");
            }
        };
        if force {
            write();
        } else {
            tokio::task::spawn_blocking(write);
        }
    }
}

/// The `usage` of a whole answer in the client's protocol: (prompt,
/// completion) tokens, as OpenAI (`prompt_tokens`) or Anthropic and
/// Responses (`input_tokens`) spell them.
pub(crate) fn usage_of(body: &[u8]) -> (u64, u64) {
    #[derive(serde::Deserialize)]
    struct U {
        prompt_tokens: Option<u64>,
        completion_tokens: Option<u64>,
        input_tokens: Option<u64>,
        output_tokens: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    struct A {
        usage: Option<U>,
    }
    match serde_json::from_slice::<A>(body) {
        Ok(A { usage: Some(u) }) => (
            u.prompt_tokens.or(u.input_tokens).unwrap_or(0),
            u.completion_tokens.or(u.output_tokens).unwrap_or(0),
        ),
        _ => (0, 0),
    }
}

/// The `usage` one event of a stream in the client's protocol reports:
/// OpenAI's last chunk (`usage`), Anthropic's `message_start`
/// (`message.usage`) and `message_delta` (`usage`), the Responses API's
/// `response.completed` (`response.usage`). Each is a running total, so a
/// stream's tokens are the largest seen. `None` for any other event (most
/// are skipped without parsing: they do not mention `usage`).
pub(crate) fn stream_usage_of(data: &str) -> Option<(u64, u64)> {
    if !data.contains("\"usage\"") {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct U {
        prompt_tokens: Option<u64>,
        completion_tokens: Option<u64>,
        input_tokens: Option<u64>,
        output_tokens: Option<u64>,
    }
    #[derive(serde::Deserialize)]
    struct Inner {
        usage: Option<U>,
    }
    #[derive(serde::Deserialize)]
    struct Ev {
        usage: Option<U>,
        message: Option<Inner>,
        response: Option<Inner>,
    }
    let ev: Ev = serde_json::from_str(data).ok()?;
    let u = ev
        .usage
        .or(ev.message.and_then(|m| m.usage))
        .or(ev.response.and_then(|r| r.usage))?;
    Some((
        u.prompt_tokens.or(u.input_tokens).unwrap_or(0),
        u.completion_tokens.or(u.output_tokens).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// R18.1: 192 random bits behind the prefix; the hash is SHA-256.
    #[test]
    fn r18_1_keys_are_random_and_hashed() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert!(a.key.expose().starts_with(KEY_PREFIX));
        assert_eq!(a.key.expose().len(), KEY_PREFIX.len() + 2 * KEY_BYTES);
        assert_ne!(a.key, b.key);
        assert_eq!(a.hash, hash_of(a.key.expose()));
        assert_eq!(
            hash_of("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(a.key.expose().starts_with(&a.hint) && a.hint.len() == 7);
    }

    /// R18.2: both SDKs' headers; other schemes are not keys.
    #[test]
    fn r18_2_keys_come_from_either_sdk_header() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert("authorization", "Bearer fo-x".parse().unwrap());
        assert_eq!(presented(&h), Some("fo-x"));
        h.insert("authorization", "Basic Zm86eA==".parse().unwrap());
        assert_eq!(presented(&h), None);
        h.insert("x-api-key", "fo-y".parse().unwrap());
        assert_eq!(presented(&h), Some("fo-y"));
        assert!(ct_eq(b"abc", b"abc") && !ct_eq(b"abc", b"abd") && !ct_eq(b"ab", b"abc"));
    }

    #[test]
    fn r18_8_stream_usage_is_read_in_every_client_protocol() {
        let cases = [
            (
                r#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}"#,
                Some((7, 3)),
            ),
            (
                r#"{"type":"message_start","message":{"usage":{"input_tokens":9,"output_tokens":1}}}"#,
                Some((9, 1)),
            ),
            (
                r#"{"type":"message_delta","usage":{"output_tokens":12}}"#,
                Some((0, 12)),
            ),
            (
                r#"{"type":"response.completed","response":{"usage":{"input_tokens":4,"output_tokens":5}}}"#,
                Some((4, 5)),
            ),
            (
                r#"{"choices":[{"delta":{"content":"the word \"usage\""}}]}"#,
                None,
            ),
            (r#"{"choices":[{"delta":{"content":"hi"}}]}"#, None),
            ("not json \"usage\"", None),
        ];
        for (data, want) in cases {
            assert_eq!(stream_usage_of(data), want, "{data}");
        }
    }

    #[test]
    fn usage_is_read_in_every_client_protocol() {
        assert_eq!(
            usage_of(br#"{"usage":{"prompt_tokens":3,"completion_tokens":5}}"#),
            (3, 5)
        );
        assert_eq!(
            usage_of(br#"{"usage":{"input_tokens":4,"output_tokens":6}}"#),
            (4, 6)
        );
        assert_eq!(usage_of(b"not json"), (0, 0));
    }

    fn verified(rpm: Option<u32>, concurrency: Option<u32>) -> Verified {
        let mut record = ClientKey::new("ci", "fo-abcd", 0);
        record.rpm = rpm;
        record.concurrency = concurrency;
        record.agents = vec!["main".into()];
        Verified {
            hash: "a".repeat(64),
            record,
        }
    }

    /// R18.4, R18.5: scope, then the minute's count and the slots.
    #[test]
    fn r18_5_rpm_and_concurrency_per_key() {
        let auth = Arc::new(ClientAuth::new(Some(ClientAuthMode::Required), None));
        let k = verified(Some(2), None);
        let (e, why) = auth.admit(&k, "coder", "m").err().unwrap();
        assert_eq!((e.status, why), (403, "forbidden"));
        assert!(e.message.contains("`ci`") && e.message.contains("agents main"));
        let _a = auth.admit(&k, "main", "m").unwrap();
        let _b = auth.admit(&k, "main", "m").unwrap();
        let (e, why) = auth.admit(&k, "main", "m").err().unwrap();
        assert_eq!((e.status, why), (429, "rate_limited"));
        assert!(e.retry_after.is_some_and(|s| (1..=60).contains(&s)));

        let mut k = verified(None, Some(1));
        k.hash = "b".repeat(64);
        let a = auth.admit(&k, "main", "m").unwrap();
        assert_eq!(auth.admit(&k, "main", "m").err().unwrap().0.status, 429);
        drop(a);
        assert!(auth.admit(&k, "main", "m").is_ok());
    }
}
