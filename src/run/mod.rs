//! Stage 7, run: the fallback executor (SPEC R1, R9–R14, R16.7–R16.11).
//!
//! [`Runner::run`] wraps the caller's attempt function — one model call for
//! a (provider, model, auth profile) — and walks the two stages of R1.1:
//! profiles inside a provider, then models down the candidate chain. It
//! decides everything from the *declared behaviour* of the reason the
//! engine gives each failure ([`ReasonBehaviour`](crate::compile::ReasonBehaviour)), never from a reason's
//! name (the one exception is the engine's own `unclassified` label,
//! R16.8). In order, per run:
//!
//! 1. **Session** (R1.2 step 1): read the session entry; a `user` or legacy
//!    override is strict; an `auto` override is used unless its origin — the
//!    selection it fell back from — is due for its 5-minute re-probe
//!    (R11.5), in which case the run starts on the origin again.
//! 2. **Chain** (R3, R4): [`build_chain`](crate::policy::build_chain) with the session's selection.
//! 3. **Per candidate**: providers marked `skip provider` earlier in the
//!    run, and skip-cache hits (R12, never the primary), are skipped. The
//!    provider's profile order comes from [`order_profiles`](crate::auth::order_profiles) and the
//!    session pin from [`choose_session_profile`](crate::auth::choose_session_profile). When every profile is
//!    blocked the candidate gets its own decision (R10, R16.1–R16.3): skip
//!    the provider for a `skip provider` block; probe a disabled primary
//!    only alone or near expiry; probe a cooling primary in its window,
//!    throttled per provider; probe a cooling sibling once per provider and
//!    run when its block is `transient`; otherwise skip.
//! 4. **Per profile**: before an attempt on a fallback candidate the
//!    runner writes the override fields it owns (R11.3); the attempt runs;
//!    a failure is classified, recorded on the profile ([`mark_failure`](crate::auth::mark_failure)),
//!    and the override is rolled back narrowly (R11.4). A reason that is
//!    not `failover` ends the run with the original error. A reason that
//!    cools or disables the profile rotates to the next profile, limited by
//!    its `rotations` budget (R8.5); `advance model`, a user pin (R6.5),
//!    `skip provider` and reasons that say nothing about the profile
//!    (`unclassified`) advance the model at once.
//! 5. **End**: the first success persists the pin, clears a recovered auto
//!    override, and returns the value with its notices (R13); otherwise a
//!    [`FallbackSummaryError`] with every attempt and the model-aware
//!    soonest expiry (R14.3, R14.4) — or, with a single attempt or an
//!    unrecognised error on the last candidate, the original error (R16.8).
//!
//! The runner is cancel-safe: the only state written across an `.await` is
//! the override of step 4, and a guard rolls it back when the future is
//! dropped. It shares nothing mutable between runs but the store (locked
//! read-modify-writes) and three small in-memory tables behind a mutex
//! never held across an `.await` (probe throttle, re-probe times, skip
//! cache), so many sessions may run at once.
//!
//! Worked example (`examples/scenarios/rate-limit-recovery.yaml`): config
//! primary `anthropic/claude`, fallbacks `[openai/gpt]`. At 12:00 the
//! primary answers 429: `rate_limit` (failover; cooldown; scope model) →
//! `anthropic:default` cools for 1 min for `claude`; the one profile is
//! exhausted, so the run moves on; `openai/gpt` is written to the session as
//! an `auto` override with origin `anthropic/claude`, succeeds, and the turn
//! carries `↪️ Model Fallback: openai/gpt (selected anthropic/claude; rate
//! limit)`. At 12:02 the session stays on `openai/gpt`, silently. At 12:05
//! the origin is due for its re-probe: the run starts on `anthropic/claude`,
//! which answers; the override is cleared and the turn carries `↪️ Model
//! Fallback cleared: anthropic/claude (was openai/gpt)`.

mod executor;
mod health;
mod retry;
pub mod scenario;
mod time;
mod types;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use crate::redact::Redactor;

pub use health::StateHealth;
pub use retry::{
    requested_wait, should_wait, RetryCap, RetryDecision, DEFAULT_RETRY_MAX_WAIT,
    MAX_REQUESTED_WAIT, RETRY_MAX_WAIT_ENV,
};
pub use time::{Sleep, Sleeper, TokioClock, TokioSleeper, VirtualSleeper};
pub(crate) use types::DeferredSuccess;
pub use types::{
    Attempt, AttemptError, AttemptOutcome, AttemptRecord, Cause, Decision, DecisionKind,
    FallbackSummaryError, Notice, ProviderFailure, RunError, RunOutput, StepOutcome, SurfacedError,
};

use crate::auth::{AuthRouting, CooldownPolicy, ProbeThrottle, RoutingError};
use crate::classify::Engine;
use crate::config::GatewayConfig;
use crate::policy::{CronPayload, ModelKind, ModelRef};
use crate::store::{
    AsyncStore, Clock, OverrideSource, SessionEntry, Store, StoreError, SyncFace, SystemClock,
    MINUTE_MS, SECOND_MS,
};

/// The origin of an auto override is re-probed this often per session and
/// primary (R11.5: fixed, not configurable): often enough that a recovered
/// primary is back within minutes, rarely enough that a known-bad primary
/// does not cost every message a failed call.
pub(crate) const REPROBE_INTERVAL_MS: u64 = 5 * MINUTE_MS;
/// Re-probe times are remembered for this many (session, primary) pairs;
/// the oldest is forgotten first (REFERENCE e).
pub(crate) const REPROBE_KEYS: usize = 4096;
/// The skip-cache TTL is clamped to this range (R12.2).
pub(crate) const SKIP_TTL_MIN_MS: u64 = SECOND_MS;
pub(crate) const SKIP_TTL_MAX_MS: u64 = 10 * MINUTE_MS;
/// The environment variable that enables the skip cache (R12.2).
pub const SKIP_TTL_ENV: &str = "OPENCLAW_FALLBACK_SKIP_TTL_MS";
/// Skip-cache entries kept at most (process-local, R12.2).
const SKIP_KEYS: usize = 16_384;
/// `fallbackStepFromFailureDetail` is cut to this many characters.
pub(crate) const DETAIL_CHARS: usize = 400;

/// The `tracing` target of the runner's spans (`failover_run`,
/// `failover_attempt`) and of its `model_fallback_decision` events; the
/// schema is in `docs/tracing.md`.
pub const TRACING_TARGET: &str = "failover::run";

/// The `session` field of the `failover_run` span: the session key hashed
/// (64-bit FNV-1a, 16 hex digits), so logs and traces can group a
/// session's runs without carrying the key, which may name a user or chat.
/// Stable across processes and versions.
pub fn session_hash(session: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in session.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// What a run asks for.
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RunRequest {
    /// The session key (`agent:main:telegram:123`).
    pub session: String,
    /// The config agent (`agents.list[].id`) the run belongs to.
    pub agent: Option<String>,
    /// Which configured chain: the text model or the image model.
    pub kind: ModelKind,
    /// A provider/model for this invocation only (strict).
    pub one_shot: Option<ModelRef>,
    /// A cron job's `payload.model` and `payload.fallbacks`, for a cron run.
    pub cron: Option<CronPayload>,
    /// The first run after `/new`, `/reset` or `sessions.reset` (rotates
    /// the auto profile pin, R6.4).
    pub new_session: bool,
    /// A heartbeat run without an explicit `heartbeat.model`: clears a
    /// direct auto override whose origin is no longer the configured
    /// default (R3.2).
    pub heartbeat: bool,
    /// Hand the answering profile's success record (its `lastUsed`, R6.2,
    /// and error-count reset, R7.4) back in [`RunOutput::deferred`] instead of
    /// writing it before the run returns, for the caller to write with
    /// [`Runner::settle`] once it has answered, when the record is the
    /// run's only write: always with [`RunRequest::one_off`]; for a kept
    /// session, when its entry, read again at the success, has nothing to
    /// settle (no notice, no pin or override to change), and then nothing
    /// of the session is written. When the session does change, or the
    /// backend is networked (Redis: the atomic step is one round trip, as
    /// the read would be), the record and the session are written together
    /// before the run returns, as without this flag.
    pub defer_success_record: bool,
    /// The run's session ends with it: no later run reads it (the
    /// gateway's requests without `x-session-id`, each a session key of
    /// its own). Leaving the primary then starts no re-probe clock
    /// (R11.5): one would never be read, and each would take a place among
    /// the 4,096 (session, primary) pairs kept in memory, pushing real sessions'
    /// clocks out, or a key on a shared backend (Redis keeps it a day). Nor
    /// does an auth failure of a fallback leave a skip-cache mark (R12.2),
    /// for the same reasons.
    pub one_off: bool,
    /// The run continues an answer that these candidates served, in
    /// order, the last of which broke off (a gateway's stream cut after
    /// its first byte, issue 32): the run starts at the candidate after
    /// the last one in the chain, with every rule of selection as usual,
    /// and none of them is tried again. Empty: an ordinary run. Its
    /// decisions carry `fallbackStepType = "continuation"`.
    pub resume_after: Vec<ModelRef>,
    /// The reason the answer broke off (with [`RunRequest::resume_after`]):
    /// the notice's reason when the continuation itself saw no failure.
    pub resume_reason: Option<String>,
    /// Who asked: the gateway's client key name (SPEC R18.8), carried as
    /// the `client` field of the run's `model_fallback_decision` events.
    /// Never a key.
    pub client: Option<String>,
    /// When the whole run must be over, in the runner's clock's ms (the
    /// gateway's `serve.requestTimeoutMs`, issue 44 item 7): once it has
    /// passed, no candidate is started (the rest are skipped, reason
    /// `timeout`), and no retry whose wait would end past it is made.
    /// The attempt under way is the caller's to bound.
    pub deadline_ms: Option<u64>,
}

impl RunRequest {
    /// A request for the session `key`, everything else default.
    pub fn session(key: impl Into<String>) -> Self {
        RunRequest {
            session: key.into(),
            ..Default::default()
        }
    }
}

/// The in-memory tables shared by the runs of one runner.
#[derive(Debug, Default)]
struct Shared {
    throttle: ProbeThrottle,
    /// (session, primary) → when the primary was last tried (R11.5).
    reprobe: ReprobeClocks,
    /// (session, provider, model) → (skip until, reason) (R12).
    skip: SkipCache,
}

/// The process-local skip cache (R12.2): (session, provider, model) →
/// (skip until, reason), at most [`SKIP_KEYS`] entries; a mark that finds
/// it full of live entries is dropped (a skip only saves an attempt).
/// `sweep_at` is at most the earliest expiry held, so a full cache is
/// walked for expired entries only when one can have expired: before it
/// was, every mark made while the cache was full walked all 16,384
/// entries, during exactly the failure storms that fill it.
#[derive(Debug, Default)]
struct SkipCache {
    at: HashMap<(String, String, String), (u64, String)>,
    /// No entry expires before this (0 when empty: nothing to trust).
    sweep_at: u64,
    /// Walks over the full cache (tests).
    #[cfg(test)]
    sweeps: usize,
}

impl SkipCache {
    /// The reason to skip `key` at `now`, if a live mark holds one.
    fn get(&mut self, key: &(String, String, String), now: u64) -> Option<String> {
        match self.at.get(key) {
            Some((until, reason)) if *until > now => Some(reason.clone()),
            Some(_) => {
                self.at.remove(key);
                None
            }
            None => None,
        }
    }

    /// Marks `key` until `until`, unless the cache is full of live marks.
    fn put(&mut self, key: (String, String, String), until: u64, reason: &str, now: u64) {
        if self.at.len() >= SKIP_KEYS && !self.at.contains_key(&key) && self.sweep_at <= now {
            #[cfg(test)]
            {
                self.sweeps += 1;
            }
            self.at.retain(|_, (u, _)| *u > now);
            self.sweep_at = self.at.values().map(|(u, _)| *u).min().unwrap_or(0);
        }
        if self.at.len() < SKIP_KEYS || self.at.contains_key(&key) {
            self.sweep_at = if self.at.is_empty() {
                until
            } else {
                self.sweep_at.min(until)
            };
            self.at.insert(key, (until, reason.to_string()));
        }
    }

    /// Forgets every mark of `session` (a reset session).
    fn forget_session(&mut self, session: &str) {
        self.at.retain(|(s, _, _), _| s != session);
    }
}

/// When each (session, primary) pair last tried its primary (R11.5), for
/// at most [`REPROBE_KEYS`] pairs: past that, the pair tried longest ago
/// is forgotten (REFERENCE e). The times are kept ordered as well, so
/// that forgetting the oldest is a tree step rather than a walk over all
/// 4,096 pairs: with the table full, every run that left its primary
/// paid that walk (the top user-space symbol in a profile of the
/// gateway failing over, where each request without `x-session-id` is a
/// session of its own; benches/README.md, "The re-probe table").
#[derive(Debug, Default)]
struct ReprobeClocks {
    at: HashMap<(String, String), u64>,
    by_time: std::collections::BTreeSet<(u64, (String, String))>,
}

impl ReprobeClocks {
    fn get(&self, key: &(String, String)) -> Option<u64> {
        self.at.get(key).copied()
    }

    /// Records `now` for `key`, forgetting the oldest pair past the bound.
    fn note(&mut self, key: (String, String), now: u64) {
        if let Some(old) = self.at.insert(key.clone(), now) {
            self.by_time.remove(&(old, key.clone()));
        } else if self.at.len() > REPROBE_KEYS {
            if let Some((_, oldest)) = self.by_time.pop_first() {
                self.at.remove(&oldest);
            }
        }
        self.by_time.insert((now, key));
    }

    /// Forgets every pair of `session` (a reset session).
    fn forget_session(&mut self, session: &str) {
        self.at.retain(|(s, _), _| s != session);
        self.by_time.retain(|(_, (s, _))| s != session);
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        debug_assert_eq!(self.at.len(), self.by_time.len());
        self.at.len()
    }
}

/// A provider's same-candidate retry budget (issue 32;
/// `models.providers.<id>.retries`): a failure that is a rate limit, an
/// overload or a server error (a 429, 529 or 5xx, or a connection reset
/// before the response head, code `ECONNRESET`) is asked again of the same
/// candidate and profile up to `max` times, after a backoff: the wait the
/// response asked for (`Retry-After`, `retry-after-ms`) when it is within
/// the R7.5 cap (above it: no retry, the run fails over at once), else
/// full jitter, a random wait in `0 ..= min(max_delay_ms, base_delay_ms ×
/// 2^retry)`. Never a deadline (`ETIMEDOUT`: a silent upstream is not
/// asked again), never a reason that disables, skips the provider, hands
/// off or stops. The cooldown is recorded when the budget is spent, not
/// per retry; each retry is an [`AttemptOutcome::Retried`] attempt and a
/// `retry_same_candidate` decision.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryBudget {
    /// Retries after the first attempt (0: none, the default).
    pub max: u32,
    /// The first backoff's ceiling, in ms.
    pub base_delay_ms: u64,
    /// The largest backoff ceiling, in ms.
    pub max_delay_ms: u64,
    /// The candidate's time budget, its retries included, in ms from its
    /// first call (the gateway's `totalMs`, issue 44 item 7): a retry
    /// whose wait would end past it is not made, and the run fails over.
    /// `None`: no bound but `max`.
    pub within_ms: Option<u64>,
}

impl RetryBudget {
    /// No retry; when retries are asked for, backoff ceilings of 500 ms
    /// doubling to 8 s (both SDKs' shape).
    pub const DEFAULT: RetryBudget = RetryBudget {
        max: 0,
        base_delay_ms: 500,
        max_delay_ms: 8_000,
        within_ms: None,
    };
}

impl Default for RetryBudget {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The fallback executor. Build once per agent and share (`Arc`); see the
/// module documentation.
pub struct Runner {
    engine: Arc<Engine>,
    config: Arc<GatewayConfig>,
    routing: AuthRouting,
    policy: CooldownPolicy,
    store: Arc<dyn AsyncStore>,
    /// The same state as whole documents, for callers outside a run.
    docs: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    sleeper: Arc<dyn Sleeper>,
    skip_ttl_ms: Option<u64>,
    shared: Mutex<Shared>,
    /// The secrets of the last run's profiles and their redactor, reused
    /// while the profiles' secrets stay the same (building one costs
    /// microseconds per secret, every run).
    redactor: Mutex<(Vec<String>, Arc<Redactor>)>,
    health: Arc<StateHealth>,
    /// Retry budgets by provider (lower-cased), issue 32.
    retries: HashMap<String, RetryBudget>,
    /// The R7.5 cap on a requested wait a retry honours.
    retry_cap: RetryCap,
    /// The state of the backoff's jitter (splitmix64).
    jitter: std::sync::atomic::AtomicU64,
    /// Declared context windows by `provider/model`, issue 32.
    windows: HashMap<String, u64>,
}

impl std::fmt::Debug for Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runner")
            .field("agent", &self.store.agent_id())
            .field("skip_ttl_ms", &self.skip_ttl_ms)
            .finish_non_exhaustive()
    }
}

/// `auth.profiles` / `auth.order` of a config as one validated value.
pub fn routing_of(config: &GatewayConfig) -> Result<AuthRouting, RoutingError> {
    AuthRouting::new(config.auth.profiles.clone(), config.auth.order.clone())
}

/// R12.2: `0`, unset or not a plain number disables the skip cache; other
/// values are clamped to 1 s … 10 min.
pub(crate) fn skip_ttl_from_value(value: Option<&str>) -> Option<u64> {
    let v = value?.trim();
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms: u64 = v.parse().unwrap_or(u64::MAX);
    (ms > 0).then(|| ms.clamp(SKIP_TTL_MIN_MS, SKIP_TTL_MAX_MS))
}

impl Runner {
    /// A runner for `config` on `store`, with the system clock and tokio's
    /// timer, the skip cache off. The store is called through [`SyncFace`].
    pub fn new(
        engine: Arc<Engine>,
        config: Arc<GatewayConfig>,
        store: Arc<dyn Store>,
    ) -> Result<Self, RoutingError> {
        Self::with_faces(
            engine,
            config,
            Arc::new(SyncFace::new(store.clone())),
            store,
        )
    }

    /// [`Runner::new`] on a backend's async, per-record face (the SQLite
    /// and Redis stores, the gateway's store).
    pub fn with_store<S: Store + AsyncStore + 'static>(
        engine: Arc<Engine>,
        config: Arc<GatewayConfig>,
        store: Arc<S>,
    ) -> Result<Self, RoutingError> {
        Self::with_faces(engine, config, store.clone(), store)
    }

    pub(crate) fn with_faces(
        engine: Arc<Engine>,
        config: Arc<GatewayConfig>,
        store: Arc<dyn AsyncStore>,
        docs: Arc<dyn Store>,
    ) -> Result<Self, RoutingError> {
        let routing = routing_of(&config)?;
        let policy = config.auth.cooldowns.clone();
        Ok(Runner {
            engine,
            config,
            routing,
            policy,
            store,
            docs,
            clock: Arc::new(SystemClock),
            sleeper: Arc::new(TokioSleeper),
            skip_ttl_ms: None,
            shared: Mutex::new(Shared::default()),
            redactor: Mutex::new((Vec::new(), Arc::new(Redactor::default()))),
            health: Arc::default(),
            retries: HashMap::new(),
            retry_cap: RetryCap::default(),
            jitter: std::sync::atomic::AtomicU64::new(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0x5eed, |d| d.as_nanos() as u64),
            ),
            windows: HashMap::new(),
        })
    }

    /// Same-candidate retry budgets by provider (see [`RetryBudget`]), and
    /// the cap (R7.5) on a requested wait they honour.
    pub fn with_retries(
        mut self,
        budgets: impl IntoIterator<Item = (String, RetryBudget)>,
        cap: RetryCap,
    ) -> Self {
        self.retries = budgets
            .into_iter()
            .map(|(p, b)| (crate::store::normalize_provider(&p), b))
            .collect();
        self.retry_cap = cap;
        self
    }

    /// Declared context windows (tokens) by model, for the
    /// context-window-aware fallback of a `context_overflow` (SPEC R9.4).
    pub fn with_context_windows(
        mut self,
        windows: impl IntoIterator<Item = (ModelRef, u64)>,
    ) -> Self {
        self.windows = windows
            .into_iter()
            .map(|(m, w)| (m.to_string(), w))
            .collect();
        self
    }

    /// The declared context window of a candidate.
    pub(crate) fn window_of(&self, m: &ModelRef) -> Option<u64> {
        self.windows.get(&m.to_string()).copied()
    }

    /// A full-jitter wait in `0 ..= ceiling` ms.
    pub(crate) fn jitter_ms(&self, ceiling: u64) -> u64 {
        let mut z = self
            .jitter
            .fetch_add(0x9e37_79b9_7f4a_7c15, std::sync::atomic::Ordering::Relaxed)
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        match ceiling.checked_add(1) {
            Some(n) => z % n,
            None => z,
        }
    }

    /// Reports state write failures to `health` (a gateway shares one
    /// between its runners and across reloads); see [`StateHealth`].
    pub fn with_state_health(mut self, health: Arc<StateHealth>) -> Self {
        self.health = health;
        self
    }

    /// Whether the state can be written, as this runner saw it.
    pub fn state_health(&self) -> &Arc<StateHealth> {
        &self.health
    }

    /// Reads time from `clock` (tests: a manual clock).
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Waits with `sleeper` (tests: a virtual sleeper on paused tokio time).
    pub fn with_sleeper(mut self, sleeper: Arc<dyn Sleeper>) -> Self {
        self.sleeper = sleeper;
        self
    }

    /// Enables the skip cache (R12) with a TTL in ms, clamped to 1 s …
    /// 10 min; `None` or `Some(0)` disables it.
    pub fn with_skip_ttl_ms(mut self, ttl: Option<u64>) -> Self {
        self.skip_ttl_ms = ttl
            .filter(|t| *t > 0)
            .map(|t| t.clamp(SKIP_TTL_MIN_MS, SKIP_TTL_MAX_MS));
        self
    }

    /// Reads [`SKIP_TTL_ENV`] (R12.2).
    pub fn with_skip_ttl_from_env(mut self) -> Self {
        self.skip_ttl_ms = skip_ttl_from_value(std::env::var(SKIP_TTL_ENV).ok().as_deref());
        self
    }

    /// The skip cache's TTL, when it is on.
    pub fn skip_ttl_ms(&self) -> Option<u64> {
        self.skip_ttl_ms
    }

    /// The state as whole documents (status, tests).
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.docs
    }

    /// The state's async, per-record face, as runs use it.
    pub fn face(&self) -> &Arc<dyn AsyncStore> {
        &self.store
    }

    /// The engine that classifies failures.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The cooldown policy from the config's `auth.cooldowns`.
    pub fn policy(&self) -> &CooldownPolicy {
        &self.policy
    }

    /// Now, by the runner's clock (epoch ms).
    pub fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// A [`Redactor`](crate::Redactor) of every secret the state holds now,
    /// for text a run did not already scrub that reaches a client or a
    /// log (a gateway's error bodies and stream events, R16.11). With no
    /// readable profiles it removes nothing.
    pub async fn redactor(&self) -> crate::redact::Redactor {
        match self.store.load_profiles().await {
            Ok(p) => crate::redact::Redactor::new(executor::secrets_of(&p)),
            Err(_) => crate::redact::Redactor::default(),
        }
    }

    /// Records a failure that came after the run returned (a stream that
    /// broke after its first byte reached the client): classified by the
    /// engine and marked on `profile_id` (a cooldown or a disable, as the
    /// reason's behaviour says), exactly as the run would have. Returns
    /// the reason. A write that fails is noted in
    /// [`Runner::state_health`].
    pub async fn record_late_failure(
        &self,
        provider: &str,
        model: &str,
        profile_id: Option<&str>,
        failure: &ProviderFailure,
    ) -> String {
        let c = self
            .engine
            .classify(&failure.as_provider_error(provider, model));
        let reason = c.reason.to_string();
        if let Some(id) = profile_id {
            let outranks = self.outranks(c.behaviour);
            let f = crate::auth::Failure {
                reason: &reason,
                behaviour: c.behaviour,
                model: Some(model),
                reset_at: failure.reset_at,
                probe: false,
                outranks: Some(&outranks),
            };
            self.mark_failure(id, provider, &f, self.now_ms()).await;
        }
        reason
    }

    /// Writes a success record that a run with
    /// [`RunRequest::defer_success_record`] handed back: the same edit the
    /// run would have made (`record_success` at the time of the answer),
    /// applied to the profile's latest record.
    ///
    /// A failed write is noted in [`Runner::state_health`] (logged at most
    /// once per interval) and returned.
    pub async fn settle(&self, deferred: DeferredSuccess) -> Result<(), StoreError> {
        let DeferredSuccess {
            profile_id,
            provider,
            model,
            at_ms,
        } = deferred;
        let r = self
            .store
            .update_profile(&profile_id, &provider, &mut |s| {
                crate::auth::record_success(s, &profile_id, &provider, Some(&model), at_ms)
            })
            .await;
        match &r {
            Ok(()) => self.health.ok(),
            Err(e) => self.health.failed("record a success", e),
        }
        r
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `/new`, `/reset`, `sessions.reset` (R3.2, R11.5): clears an auto
    /// model override and the fallback notice state at once, and forgets
    /// the session's re-probe and skip-cache entries. A user override and
    /// the auth pin stay (the next run passes `new_session` to rotate an
    /// auto pin, R6.4).
    ///
    /// Synchronous (a command, not a turn); with a backend that shares the
    /// cross-request tables their entries are forgotten in the background.
    pub fn reset_session(&self, session: &str) -> Result<(), StoreError> {
        self.store.update_session_now(
            session,
            Box::new(|e| {
                if e.model_override_source() == Some(OverrideSource::Auto) {
                    clear_model_override(e);
                }
                clear_notice(e);
            }),
        )?;
        if self.store.shared_tables().is_some() {
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let (store, session) = (self.store.clone(), session.to_string());
                rt.spawn(async move {
                    if let Some(t) = store.shared_tables() {
                        let _ = t.forget_session(&session).await;
                    }
                });
            }
        }
        let mut sh = self.shared();
        sh.reprobe.forget_session(session);
        sh.skip.forget_session(session);
        Ok(())
    }

    /// `/model provider/model[@profile]`: a user override (strict, R3) and,
    /// with a profile, a user pin (R6.5). Marks nothing else.
    pub fn set_user_model(
        &self,
        session: &str,
        model: &ModelRef,
        profile: Option<&str>,
    ) -> Result<(), StoreError> {
        let (model, profile) = (model.clone(), profile.map(str::to_string));
        self.store.update_session_now(
            session,
            Box::new(move |e| {
                e.provider_override = Some(model.provider().into());
                e.model_override = Some(model.model().into());
                e.model_override_source = Some(OverrideSource::User.name().into());
                e.model_override_fallback_origin_provider = None;
                e.model_override_fallback_origin_model = None;
                clear_notice(e);
                if let Some(p) = &profile {
                    crate::auth::pin_user_profile(e, p);
                }
            }),
        )
    }
}

pub(crate) fn clear_model_override(e: &mut SessionEntry) {
    e.provider_override = None;
    e.model_override = None;
    e.model_override_source = None;
    e.model_override_fallback_origin_provider = None;
    e.model_override_fallback_origin_model = None;
}

pub(crate) fn clear_notice(e: &mut SessionEntry) {
    e.fallback_notice_selected_model = None;
    e.fallback_notice_active_model = None;
    e.fallback_notice_reason = None;
    e.fallback_notice_started_at = None;
}

/// The reason text of a fallback notice (R16.10): the first attempt's
/// reason with `_` as spaces, else its code, else `HTTP n`, else its error
/// cut to 80 characters; `(+N more attempts)` when there were more.
pub(crate) fn notice_reason(failed: &[AttemptRecord]) -> String {
    let Some(first) = failed.first() else {
        return "fallback active".into();
    };
    let mut text = if let Some(r) = &first.reason {
        r.replace('_', " ")
    } else if let Some(c) = &first.code {
        c.clone()
    } else if let Some(s) = first.status {
        format!("HTTP {s}")
    } else {
        first
            .error
            .as_deref()
            .unwrap_or("failed")
            .chars()
            .take(80)
            .collect()
    };
    if failed.len() > 1 {
        text.push_str(&format!(" (+{} more attempts)", failed.len() - 1));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(s: &str) -> (String, String) {
        (s.to_string(), "p/m".to_string())
    }

    // R12.2: the skip cache holds at most SKIP_KEYS marks; a mark that
    // finds it full of live ones is dropped without walking it; once one
    // can have expired, one walk frees the expired and the mark is kept; a
    // mark is live until its time, and a reset session's marks go.
    #[test]
    fn skip_cache_walks_a_full_table_only_when_a_mark_can_have_expired() {
        let key = |i: usize| (format!("s{i}"), "openai".to_string(), "gpt".to_string());
        let mut c = SkipCache::default();
        for i in 0..SKIP_KEYS {
            c.put(key(i), 1_000 + i as u64, "rate_limit", 0);
        }
        assert_eq!(c.at.len(), SKIP_KEYS);
        for n in 0..100 {
            c.put(key(SKIP_KEYS + n), 5_000, "rate_limit", 500);
        }
        assert_eq!(c.sweeps, 0, "nothing could have expired at 500");
        assert_eq!(c.get(&key(SKIP_KEYS), 500), None, "dropped");
        assert_eq!(c.get(&key(3), 500).as_deref(), Some("rate_limit"));

        // At 1,010 the first eleven have expired: one walk, the mark kept.
        c.put(key(SKIP_KEYS), 5_000, "overloaded", 1_010);
        assert_eq!(c.sweeps, 1);
        assert_eq!(c.at.len(), SKIP_KEYS - 11 + 1);
        assert_eq!(c.get(&key(SKIP_KEYS), 1_010).as_deref(), Some("overloaded"));
        for n in 1..=10 {
            c.put(key(SKIP_KEYS + n), 5_000, "overloaded", 1_010);
        }
        assert_eq!(c.at.len(), SKIP_KEYS);
        c.put(key(SKIP_KEYS + 11), 5_000, "overloaded", 1_010);
        assert_eq!(c.sweeps, 1, "the earliest left expires at 1,011");
        assert_eq!(c.get(&key(SKIP_KEYS + 11), 1_010), None);

        // Expired marks are not served; a reset session's marks go.
        assert_eq!(c.get(&key(11), 1_011), None);
        assert_eq!(c.get(&key(12), 1_011).as_deref(), Some("rate_limit"));
        c.forget_session("s12");
        assert_eq!(c.get(&key(12), 1_011), None);
    }

    // R11.5 with REFERENCE e's bound: at most REPROBE_KEYS pairs, the one
    // tried longest ago forgotten first; noting a pair again makes it the
    // newest; a reset session's pairs go.
    #[test]
    fn reprobe_clocks_forget_the_oldest_pair_past_the_bound() {
        let mut c = ReprobeClocks::default();
        for i in 0..REPROBE_KEYS as u64 {
            c.note(pair(&format!("s{i}")), 1_000 + i);
        }
        assert_eq!(c.len(), REPROBE_KEYS);
        // s0 is noted again: s1 is now the oldest.
        c.note(pair("s0"), 9_000);
        assert_eq!(c.len(), REPROBE_KEYS);
        c.note(pair("new"), 9_001);
        assert_eq!(c.len(), REPROBE_KEYS);
        assert_eq!(c.get(&pair("s1")), None, "the oldest is forgotten");
        assert_eq!(c.get(&pair("s0")), Some(9_000));
        assert_eq!(c.get(&pair("s2")), Some(1_002));
        assert_eq!(c.get(&pair("new")), Some(9_001));
        c.note(pair("newer"), 9_002);
        assert_eq!(c.get(&pair("s2")), None);
        c.forget_session("s0");
        assert_eq!(c.get(&pair("s0")), None);
        assert_eq!(c.len(), REPROBE_KEYS - 1);
    }

    fn rec(
        reason: Option<&str>,
        code: Option<&str>,
        status: Option<u16>,
        error: &str,
    ) -> AttemptRecord {
        AttemptRecord {
            provider: "p".into(),
            model: "m".into(),
            profile_id: None,
            outcome: AttemptOutcome::Failed,
            reason: reason.map(str::to_string),
            rule: None,
            decided_by: None,
            probability: None,
            status,
            code: code.map(str::to_string),
            error: Some(error.into()),
            probe: false,
            at_ms: 0,
            cause: None,
        }
    }

    // R16.10: reason, else code, else HTTP n, else the error cut to 80.
    #[test]
    fn r16_10_notice_reason_text() {
        let long = "x".repeat(100);
        assert_eq!(
            notice_reason(&[rec(Some("rate_limit"), Some("c"), Some(429), "e")]),
            "rate limit"
        );
        assert_eq!(
            notice_reason(&[rec(None, Some("ETIMEDOUT"), Some(504), "e")]),
            "ETIMEDOUT"
        );
        assert_eq!(
            notice_reason(&[rec(None, None, Some(504), "e")]),
            "HTTP 504"
        );
        assert_eq!(
            notice_reason(&[rec(None, None, None, &long)]),
            "x".repeat(80)
        );
        let two = [
            rec(Some("auth_permanent"), None, None, "e"),
            rec(None, None, None, "f"),
        ];
        assert_eq!(notice_reason(&two), "auth permanent (+1 more attempts)");
    }

    // R13.1, R13.2: the exact notice texts.
    #[test]
    fn r13_notice_texts() {
        let started = Notice::FallbackStarted {
            selected: "anthropic/a".into(),
            active: "openai/b".into(),
            reason: "rate limit".into(),
        };
        assert_eq!(
            started.to_string(),
            "↪️ Model Fallback: openai/b (selected anthropic/a; rate limit)"
        );
        let cleared = Notice::FallbackCleared {
            selected: "anthropic/a".into(),
            previous: "openai/b".into(),
        };
        assert_eq!(
            cleared.to_string(),
            "↪️ Model Fallback cleared: anthropic/a (was openai/b)"
        );
    }

    // R16.9: one attempt is that error; several are listed.
    #[test]
    fn r16_9_summary_text() {
        let mut s = FallbackSummaryError {
            attempts: vec![rec(Some("rate_limit"), None, None, "slow down")],
            soonest_cooldown_expiry: None,
            session: "s".into(),
            decisions: Vec::new(),
        };
        assert_eq!(s.to_string(), "slow down");
        s.attempts.push(rec(None, None, None, "odd"));
        assert_eq!(
            s.to_string(),
            "All models failed (2): p/m: slow down (rate_limit) | p/m: odd (unclassified)"
        );
    }

    // The published FNV-1a 64 test vectors: the hash is the standard one.
    #[test]
    fn session_hash_is_fnv1a_64() {
        assert_eq!(session_hash(""), "cbf29ce484222325");
        assert_eq!(session_hash("a"), "af63dc4c8601ec8c");
        assert_eq!(session_hash("foobar"), "85944171f73967e8");
    }

    // R12.2: the TTL is clamped, and 0 disables it, in code as by env.
    #[test]
    fn r12_2_ttl_clamp() {
        assert_eq!(skip_ttl_from_value(Some("250")), Some(SKIP_TTL_MIN_MS));
        assert_eq!(skip_ttl_from_value(Some("-5")), None);
        assert_eq!(skip_ttl_from_value(Some("")), None);
        assert_eq!(skip_ttl_from_value(Some("30000")), Some(30_000));
    }
}
