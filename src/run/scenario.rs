//! Scenarios: the real [`Runner`] against scripted provider outcomes on a
//! virtual clock (`failover simulate`).
//!
//! A scenario file (YAML) holds the gateway config (inline, or a path
//! relative to the scenario), the auth profiles (fake secrets), optional
//! initial `usageStats` and session entry, and a list of turns. Each turn
//! happens at an offset from the start (`at: +6m`), may first apply a
//! session operation (`/model openai/gpt`, `/model openai/gpt@openai:b`,
//! `/new`, `/reset`, `sessions.reset`), and scripts the provider: each
//! attempt takes the first unused outcome whose `match` fits
//! (`provider/model` or `provider/model@profile`); an attempt nothing
//! matches succeeds. An outcome is an `error` (status, code, type, message,
//! body, `resetAfter`), a `reply`, a `liveSwitch: provider/model`, each
//! optionally after a `delay`. A turn's `expect` lists what must happen:
//! `attempts` (`model[@profile] outcome [reason]`), `probes` (the attempts
//! that were cooldown probes, in the same form), `notices`, `result`
//! (`ok` / `error`), `model`, `error` (the message), `session` fields and
//! `usageStats` fields (a field may be a path into the record:
//! `modelCooldowns/gpt-5/cooldownUntil`). Times in `usageStats` (input or
//! expected) may be written as offsets from the start (`+1m`).
//!
//! The clock is a [`ManualClock`] that only the scenario moves (turn
//! offsets, delays, rotation backoffs through a [`VirtualSleeper`]), so a
//! scenario spanning hours runs in milliseconds and always the same way.
//! State lives in a [`MemoryStore`] — unless the scenario's config has a
//! `state:` block (issue 13: `simulate` honours the block `serve` reads):
//! then the scenario runs on that backend, so the simulation exercises the
//! very code the gateway would (the Redis store's shared probe throttle,
//! re-probe times and skip cache included), but on a **scratch copy**: a
//! fresh private temporary directory for `files` and `sqlite`, and for
//! `redis` the configured server under a scratch prefix
//! (`<prefix>simulate:<pid>-<nanos>:`), all removed when the simulation
//! ends. The operator's real state is never read nor written: the
//! scenario declares its own, and its virtual clock (2026-01-01) would
//! plant meaningless deadlines in live state. A backend that cannot be
//! reached is an error naming it (never its password).
//!
//! Worked example: `examples/scenarios/rate-limit-recovery.yaml`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::Deserialize;
use serde_json::{json, Map, Value};

use super::{
    AttemptError, AttemptOutcome, AttemptRecord, Decision, ProviderFailure, RunError, RunRequest,
    Runner, VirtualSleeper,
};
use crate::classify::Engine;
use crate::config::{Format, GatewayConfig};
use crate::policy::ModelRef;
use crate::store::{
    format_span, AsyncStore, AuthProfiles, AuthState, Clock, ManualClock, MemoryStore,
    SessionStore, StateBackend, StateConfig, Store, SyncFace, DAY_MS, HOUR_MS, MINUTE_MS,
    SECOND_MS,
};

/// Scenario time zero: 2026-01-01T12:00:00Z.
pub const SCENARIO_START_MS: u64 = 1_767_268_800_000;

/// A scenario file. See the module documentation.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    /// What the scenario shows, printed at the top of the timeline.
    #[serde(default)]
    pub description: Option<String>,
    /// The gateway config: inline, or a path relative to the scenario file.
    pub config: serde_yaml::Value,
    /// The auth profiles by id, as in `auth-profiles.json` (fake secrets); a
    /// plain string is an API key of the id's provider.
    #[serde(default)]
    pub profiles: BTreeMap<String, Value>,
    /// The initial `usageStats` (R5.2); times may be offsets from the start (`+1m`).
    #[serde(default)]
    pub usage_stats: Option<Value>,
    /// The initial session entry, stored under `session_key`.
    #[serde(default)]
    pub session: Option<Value>,
    /// The session every turn runs in (default `agent:main:main`).
    #[serde(default = "default_session_key")]
    pub session_key: String,
    /// The agent the turns run as (`agents.list[].id`); `None`: the defaults.
    #[serde(default)]
    pub agent: Option<String>,
    /// Enables the skip cache (R12) with this TTL.
    #[serde(default)]
    pub skip_ttl_ms: Option<u64>,
    /// The turns, run in order.
    pub turns: Vec<Turn>,
}

fn default_session_key() -> String {
    "agent:main:main".into()
}

/// One run in a scenario's session.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Turn {
    /// When the turn runs, as an offset from the start (`+6m`); never before
    /// where the clock stands. `None`: where the previous turn left the clock.
    #[serde(default)]
    pub at: Option<String>,
    /// A note for the reader, printed beside the turn.
    #[serde(default)]
    pub note: Option<String>,
    /// A session operation applied before the run: `/model provider/model[@profile]`,
    /// `/new`, `/reset` or `sessions.reset`.
    #[serde(default)]
    pub op: Option<String>,
    /// The scripted provider outcomes; an attempt nothing matches succeeds.
    #[serde(default)]
    pub outcomes: Vec<Scripted>,
    /// What must happen; each difference is a mismatch.
    #[serde(default)]
    pub expect: Option<Expect>,
}

/// One scripted provider outcome, used by the first attempt it matches.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scripted {
    /// `match`: the attempt it answers, `provider/model` or
    /// `provider/model@profile`.
    #[serde(rename = "match")]
    pub target: String,
    /// The attempt fails with this provider error.
    #[serde(default)]
    pub error: Option<ScriptedError>,
    /// The attempt succeeds with this reply (default `reply from provider/model`).
    #[serde(default)]
    pub reply: Option<String>,
    /// Virtual time the attempt takes before its outcome (`30s`).
    #[serde(default)]
    pub delay: Option<String>,
    /// The attempt fails with a live model switch to this `provider/model` (R11.6).
    #[serde(default)]
    pub live_switch: Option<String>,
}

/// A scripted provider error, classified by the rules like a real one.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ScriptedError {
    /// The HTTP status (100–599).
    #[serde(default)]
    pub status: Option<u16>,
    /// The provider's error code.
    #[serde(default)]
    pub code: Option<String>,
    /// `type`: the provider's error type.
    #[serde(default, rename = "type")]
    pub error_type: Option<String>,
    /// The error message.
    #[serde(default)]
    pub message: Option<String>,
    /// The response body, as text or as a JSON/YAML object.
    #[serde(default)]
    pub body: Option<Value>,
    /// An exact reset time, as an offset from the attempt (`3d`).
    #[serde(default)]
    pub reset_after: Option<String>,
}

/// What a turn must do; only the fields given are checked.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Expect {
    /// Every attempt, in order: `model[@profile] outcome [reason]`.
    #[serde(default)]
    pub attempts: Option<Vec<String>>,
    /// The attempts that were cooldown probes (R10, R16.1), in order, as
    /// in `attempts`; `[]`: none was.
    #[serde(default)]
    pub probes: Option<Vec<String>>,
    /// Every fallback notice sent (R13), in order.
    #[serde(default)]
    pub notices: Option<Vec<String>>,
    /// `ok` or `error`.
    #[serde(default)]
    pub result: Option<String>,
    /// The `provider/model` that answered.
    #[serde(default)]
    pub model: Option<String>,
    /// The error message of a failed turn, exactly.
    #[serde(default)]
    pub error: Option<String>,
    /// Session entry fields after the turn; `null` for an absent field.
    #[serde(default)]
    pub session: Option<BTreeMap<String, Value>>,
    /// `usageStats` fields per profile id after the turn; times may be
    /// offsets from the start (`+1m`).
    #[serde(default)]
    pub usage_stats: Option<BTreeMap<String, BTreeMap<String, Value>>>,
}

/// What one turn did.
#[derive(Clone, Debug)]
pub struct TurnReport {
    /// 1-based turn number.
    pub number: usize,
    /// When the turn started (virtual epoch ms).
    pub at_ms: u64,
    /// The turn's `note`.
    pub note: Option<String>,
    /// The session operation applied before the run.
    pub op: Option<String>,
    /// Every attempt the runner made (R14.1).
    pub attempts: Vec<AttemptRecord>,
    /// The `model_fallback_decision` events of the run (R14.2).
    pub decisions: Vec<Decision>,
    /// The fallback notices sent (R13).
    pub notices: Vec<String>,
    /// `Ok((model, reply))` or `Err(message)`.
    pub result: Result<(String, String), String>,
    /// For a failed turn, the soonest cooldown expiry the summary reports (R14.3).
    pub soonest_expiry: Option<u64>,
    /// The session entry after the turn.
    pub session: Value,
    /// Profiles cooling or disabled after the turn, readable.
    pub blocked: Vec<String>,
    /// The turn's `expect` entries that did not hold; empty when all did.
    pub mismatches: Vec<String>,
}

/// A whole simulation.
#[derive(Clone, Debug)]
pub struct Report {
    /// The scenario's name (its file name).
    pub name: String,
    /// The `state:` block's backend the scenario ran on (a scratch copy),
    /// `None` for memory.
    pub state_backend: Option<&'static str>,
    /// The scenario's `description`.
    pub description: Option<String>,
    /// One per turn, in order.
    pub turns: Vec<TurnReport>,
    /// The session entry after the last turn.
    pub final_session: Value,
    /// The `usageStats` after the last turn, times as offsets from the start.
    pub final_usage_stats: Value,
}

impl Report {
    /// How many expectations did not hold, over all turns.
    pub fn mismatches(&self) -> usize {
        self.turns.iter().map(|t| t.mismatches.len()).sum()
    }
}

/// Parses `+6m`, `30s`, `1h30m`, `500ms`, `2d`, `0`.
pub fn parse_offset(text: &str) -> Result<u64, String> {
    let t = text.trim().trim_start_matches('+').trim();
    if t == "0" {
        return Ok(0);
    }
    let mut total = 0u64;
    let mut rest = t;
    if rest.is_empty() {
        return Err(format!(
            "`{text}` is not a duration (write `+6m`, `30s`, `1h30m`)"
        ));
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(format!(
                "`{text}` is not a duration (write `+6m`, `30s`, `1h30m`)"
            ));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| format!("`{text}` is too large"))?;
        rest = &rest[digits..];
        let (unit, len) = if rest.starts_with("ms") {
            (1, 2)
        } else if rest.starts_with('s') {
            (SECOND_MS, 1)
        } else if rest.starts_with('m') {
            (MINUTE_MS, 1)
        } else if rest.starts_with('h') {
            (HOUR_MS, 1)
        } else if rest.starts_with('d') {
            (DAY_MS, 1)
        } else {
            return Err(format!(
                "`{text}` needs a unit: ms, s, m, h or d (e.g. `+6m`)"
            ));
        };
        total = n
            .checked_mul(unit)
            .and_then(|d| total.checked_add(d))
            .ok_or_else(|| format!("`{text}` is too large"))?;
        rest = &rest[len..];
    }
    Ok(total)
}

/// `+5m`, `+0s`: a time relative to the scenario start.
pub fn rel(ms: u64) -> String {
    let d = ms.saturating_sub(SCENARIO_START_MS);
    if d == 0 {
        "+0s".into()
    } else {
        format!("+{}", format_span(d).replace(' ', ""))
    }
}

/// Offsets (`"+1m"`) inside a `usageStats` value become epoch ms.
fn absolutise(v: &mut Value) -> Result<(), String> {
    match v {
        Value::String(s) if s.starts_with('+') => {
            *v = json!(SCENARIO_START_MS.saturating_add(parse_offset(s)?));
        }
        Value::Object(m) => {
            for x in m.values_mut() {
                absolutise(x)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// Epoch values inside a `usageStats` value shown as offsets, for reading.
fn relativise(v: &Value, key: &str) -> Value {
    match v {
        Value::Number(n)
            if (key.ends_with("Until") || key.ends_with("At") || key == "lastUsed")
                && n.as_u64().is_some_and(|x| x >= SCENARIO_START_MS - DAY_MS) =>
        {
            json!(rel(n.as_u64().unwrap_or(0)))
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), relativise(x, k)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// A scenario problem: the file cannot be simulated (exit 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioError(pub String);

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ScenarioError {}

fn bad(msg: impl Into<String>) -> ScenarioError {
    ScenarioError(msg.into())
}

/// Scenario files larger than this are refused by their size, unread: the
/// shipped ones are a few kilobytes.
pub const MAX_SCENARIO_BYTES: u64 = 1 << 20;

/// Reads a scenario's text; `path` names it in errors. A parse error never
/// quotes a value from the file (R16.11: it may be a key).
pub fn parse_scenario(text: &str, path: &Path) -> Result<Scenario, ScenarioError> {
    if let Err(refused) = crate::yaml::guard(text) {
        return Err(bad(format!(
            "`{}`:{}:{}: {refused}",
            path.display(),
            refused.line,
            refused.column
        )));
    }
    serde_yaml::from_str(text).map_err(|e| {
        bad(format!(
            "`{}`: {}",
            path.display(),
            crate::redact::scrub_quoted(&e.to_string())
        ))
    })
}

/// Reads and runs a scenario file.
pub fn simulate_file(path: &Path, engine: Arc<Engine>) -> Result<Report, ScenarioError> {
    let text = crate::fsio::read_regular_text(path, MAX_SCENARIO_BYTES).map_err(|e| {
        bad(format!(
            "cannot read `{}`: {}",
            path.display(),
            crate::fsio::plain_io(&e)
        ))
    })?;
    let scenario = parse_scenario(&text, path)?;
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    simulate_with(
        &scenario,
        &name,
        path.parent().unwrap_or(Path::new(".")),
        engine,
        Some((&path.display().to_string(), &text)),
    )
}

fn load_config(s: &Scenario, base: &Path) -> Result<GatewayConfig, ScenarioError> {
    let loaded = match &s.config {
        serde_yaml::Value::String(p) => GatewayConfig::load(&base.join(p)),
        v => {
            let text = serde_yaml::to_string(v).map_err(|e| bad(e.to_string()))?;
            GatewayConfig::parse(&text, Format::Yaml, "scenario config")
        }
    };
    loaded.map(|l| l.config).map_err(|e| {
        bad(format!(
            "the scenario's config has problems:\n{}",
            crate::config::render_problems(&e.problems, &e.name, &e.text)
        ))
    })
}

/// A scenario's initial state: profiles, routing state, sessions.
type Seed = (AuthProfiles, AuthState, SessionStore);

fn build_seed(s: &Scenario) -> Result<Seed, ScenarioError> {
    let mut problems = Vec::new();
    let here = Path::new("scenario");
    let mut profs = Map::new();
    for (id, v) in &s.profiles {
        let v = match v {
            // Shorthand: `openai:default: sk-fake` is an API key.
            Value::String(key) => {
                let provider = id.split(':').next().unwrap_or(id);
                json!({"type": "api_key", "provider": provider, "key": key})
            }
            other => other.clone(),
        };
        profs.insert(id.clone(), v);
    }
    let profiles = AuthProfiles::from_json(
        json!({"version": 1, "profiles": profs}),
        here,
        &mut problems,
    )
    .map_err(|e| bad(format!("profiles: {e}")))?;
    let mut stats = s.usage_stats.clone().unwrap_or(json!({}));
    absolutise(&mut stats).map_err(bad)?;
    let state = AuthState::from_json(
        json!({"version": 1, "usageStats": stats}),
        here,
        &mut problems,
    )
    .map_err(|e| bad(format!("usageStats: {e}")))?;
    let mut sessions = Map::new();
    if let Some(e) = &s.session {
        sessions.insert(s.session_key.clone(), e.clone());
    }
    let sessions = SessionStore::from_json(Value::Object(sessions), here, &mut problems)
        .map_err(|e| bad(format!("session: {e}")))?;
    if let Some(p) = problems.first() {
        return Err(bad(p.to_string()));
    }
    Ok((profiles, state, sessions))
}

/// Where a scenario's state lives (see the module documentation).
struct Scratch {
    face: Arc<dyn AsyncStore>,
    docs: Arc<dyn Store>,
    backend: Option<StateBackend>,
    /// The private temporary directory of a `state:` block's copy.
    dir: Option<std::path::PathBuf>,
    /// The Redis copy, whose keys go when the simulation ends.
    #[cfg(feature = "redis")]
    redis: Option<Arc<crate::store::RedisStore>>,
}

impl Scratch {
    fn open(
        cfg: Option<&StateConfig>,
        seed: Seed,
        rt: &tokio::runtime::Runtime,
    ) -> Result<Self, ScenarioError> {
        let (profiles, state, sessions) = seed;
        let Some(cfg) = cfg else {
            let mem = Arc::new(
                MemoryStore::new("main")
                    .with_profiles(profiles)
                    .with_state(state)
                    .with_sessions(sessions),
            );
            return Ok(Scratch {
                face: Arc::new(SyncFace::new(mem.clone())),
                docs: mem,
                backend: None,
                dir: None,
                #[cfg(feature = "redis")]
                redis: None,
            });
        };
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let tag = format!("{}-{nanos}", std::process::id());
        let dir = std::env::temp_dir().join(format!("failover-simulate-{tag}"));
        crate::store::create_private_dir(&dir).map_err(|e| {
            bad(format!(
                "cannot create a scratch state directory `{}`: {}",
                dir.display(),
                crate::fsio::plain_io(&e)
            ))
        })?;
        let mut scratch = Scratch {
            face: Arc::new(SyncFace::new(Arc::new(MemoryStore::new("main")))),
            docs: Arc::new(MemoryStore::new("main")),
            backend: Some(cfg.backend),
            dir: Some(dir.clone()),
            #[cfg(feature = "redis")]
            redis: None,
        };
        let unreachable =
            |e: crate::store::StoreError| bad(format!("the config's state backend: {e}"));
        match cfg.backend {
            #[cfg(feature = "redis")]
            StateBackend::Redis => {
                let url = cfg.url.as_deref().unwrap_or("redis://127.0.0.1:6379/0");
                let prefix = format!(
                    "{}simulate:{tag}:",
                    cfg.prefix
                        .as_deref()
                        .unwrap_or(crate::store::REDIS_DEFAULT_PREFIX)
                );
                let r = rt.block_on(crate::store::RedisStore::connect(
                    url, &prefix, &dir, "main",
                ));
                let r = Arc::new(r.map_err(|e| {
                    scratch.close(rt);
                    unreachable(e)
                })?);
                scratch.face = r.clone();
                scratch.docs = r.clone();
                scratch.redis = Some(r);
            }
            _ => match rt.block_on(crate::store::open_backend(Some(cfg), &dir, "main")) {
                Ok(o) => {
                    scratch.face = o.face;
                    scratch.docs = o.docs;
                }
                Err(e) => {
                    scratch.close(rt);
                    return Err(unreachable(e));
                }
            },
        }
        let docs = scratch.docs.clone();
        let seeded = docs
            .update_profiles_dyn(&mut |p| *p = profiles.clone())
            .and_then(|()| docs.update_state_dyn(&mut |st| *st = state.clone()))
            .and_then(|()| docs.update_sessions_dyn(&mut |ss| *ss = sessions.clone()));
        if let Err(e) = seeded {
            scratch.close(rt);
            return Err(bad(format!("cannot seed the scratch state: {e}")));
        }
        Ok(scratch)
    }

    /// Removes the copy: the Redis keys under the scratch prefix, the
    /// temporary directory.
    fn close(&self, rt: &tokio::runtime::Runtime) {
        #[cfg(feature = "redis")]
        if let Some(r) = &self.redis {
            let _ = rt.block_on(r.clear());
        }
        let _ = rt;
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

/// The outcome list of a turn, consumed as attempts arrive.
struct Script {
    outcomes: Vec<(Scripted, bool)>,
}

impl Script {
    fn take(&mut self, model: &str, profile: Option<&str>) -> Option<Scripted> {
        let full = format!("{model}@{}", profile.unwrap_or("-"));
        let slot = self
            .outcomes
            .iter_mut()
            .find(|(o, used)| !*used && (o.target == model || o.target == full))?;
        slot.1 = true;
        Some(slot.0.clone())
    }
}

fn to_failure(e: &ScriptedError, now: u64) -> Result<ProviderFailure, String> {
    if let Some(s) = e.status.filter(|s| !(100..=599).contains(s)) {
        return Err(format!("status {s} is not an HTTP status (100–599)"));
    }
    Ok(ProviderFailure {
        status: e.status,
        code: e.code.clone(),
        error_type: e.error_type.clone(),
        message: e.message.clone(),
        body: e.body.as_ref().map(|b| match b {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }),
        reset_at: match &e.reset_after {
            Some(r) => Some(now.saturating_add(parse_offset(r)?)),
            None => None,
        },
        cause: None,
    })
}

/// `model[@profile] outcome [reason]`.
pub fn attempt_line(a: &AttemptRecord, with_profile: bool) -> String {
    let mut s = a.model_ref();
    if with_profile {
        if let Some(p) = &a.profile_id {
            s.push('@');
            s.push_str(p);
        }
    }
    let outcome = match a.outcome {
        AttemptOutcome::Succeeded => "succeeded",
        AttemptOutcome::Failed => "failed",
        AttemptOutcome::Skipped => "skipped",
        AttemptOutcome::Switched => "switched",
        AttemptOutcome::Retried => "retried",
    };
    s.push(' ');
    s.push_str(outcome);
    if let Some(r) = &a.reason {
        s.push(' ');
        s.push_str(r);
    }
    s
}

/// Runs a parsed scenario. `base` resolves a config path.
#[cfg(test)]
pub fn simulate(
    s: &Scenario,
    name: &str,
    base: &Path,
    engine: Arc<Engine>,
) -> Result<Report, ScenarioError> {
    simulate_with(s, name, base, engine, None)
}

/// [`simulate`]; `source` (the file's name and text) places errors about
/// a turn at its line and column.
fn simulate_with(
    s: &Scenario,
    name: &str,
    base: &Path,
    engine: Arc<Engine>,
    source: Option<(&str, &str)>,
) -> Result<Report, ScenarioError> {
    // `file:line:col: ` of turn `idx`'s `at`, when the text is known.
    let at_of = |idx: usize| -> String {
        source
            .and_then(|(file, text)| {
                let path = [
                    crate::yaml::Step::Key("turns"),
                    crate::yaml::Step::Index(idx),
                    crate::yaml::Step::Key("at"),
                ];
                crate::yaml::position_of(text, &path).map(|(l, c)| format!("`{file}`:{l}:{c}: "))
            })
            .unwrap_or_default()
    };
    let config = load_config(s, base)?;
    let seed = build_seed(s)?;
    // I/O and timers on: a Redis copy's connection lives on this runtime.
    // The scenario's own clock stays the manual one.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| bad(format!("cannot start the runtime: {e}")))?;
    let scratch = Scratch::open(config.state.as_ref(), seed, &rt)?;
    let report = run_turns(s, name, config, &scratch, &rt, engine, &at_of);
    scratch.close(&rt);
    let mut report = report?;
    report.state_backend = scratch.backend.map(StateBackend::name);
    Ok(report)
}

fn run_turns(
    s: &Scenario,
    name: &str,
    config: GatewayConfig,
    scratch: &Scratch,
    rt: &tokio::runtime::Runtime,
    engine: Arc<Engine>,
    at_of: &dyn Fn(usize) -> String,
) -> Result<Report, ScenarioError> {
    let store = scratch.docs.clone();
    let clock = Arc::new(ManualClock::new(SCENARIO_START_MS));
    let runner = Runner::with_faces(
        engine,
        Arc::new(config),
        scratch.face.clone(),
        store.clone(),
    )
    .map_err(|e| bad(e.to_string()))?
    .with_clock(clock.clone())
    .with_sleeper(Arc::new(VirtualSleeper(clock.clone())))
    .with_skip_ttl_ms(s.skip_ttl_ms);
    let key = s.session_key.clone();
    let mut turns = Vec::new();
    for (idx, turn) in s.turns.iter().enumerate() {
        let number = idx + 1;
        let at = match &turn.at {
            Some(a) => SCENARIO_START_MS
                .saturating_add(parse_offset(a).map_err(|e| bad(format!("turn {number}: {e}")))?),
            None => clock.now_ms(),
        };
        // A turn written before the virtual clock (an earlier turn's `at`,
        // or where its retries and delays took the clock) would run later
        // than written: refused.
        if at < clock.now_ms() {
            return Err(bad(format!(
                "{}turn {number}: `at: {}` is before the time the scenario has reached ({}, after turn {}); turns run in order, each at or after the one before",
                at_of(idx),
                turn.at.as_deref().unwrap_or_default().trim(),
                rel(clock.now_ms()),
                number - 1
            )));
        }
        clock.set(at);
        let mut request = RunRequest::session(key.clone());
        request.agent = s.agent.clone();
        if let Some(op) = &turn.op {
            let op = op.trim();
            let (cmd, arg) = op.split_once(' ').map_or((op, ""), |(c, a)| (c, a.trim()));
            match cmd {
                "/new" | "/reset" | "sessions.reset" => {
                    runner.reset_session(&key).map_err(|e| bad(e.to_string()))?;
                    // A backend's shared tables forget the session's
                    // entries now, not in the background (the next turn
                    // must not race them).
                    if let Some(t) = runner.face().shared_tables() {
                        rt.block_on(t.forget_session(&key))
                            .map_err(|e| bad(e.to_string()))?;
                    }
                    request.new_session = true;
                }
                "/model" => {
                    let (m, p) = arg.split_once('@').map_or((arg, None), |(m, p)| (m, Some(p)));
                    let model = ModelRef::parse(m)
                        .map_err(|e| bad(format!("turn {number}: `/model`: {e}")))?;
                    runner
                        .set_user_model(&key, &model, p)
                        .map_err(|e| bad(e.to_string()))?;
                }
                other => {
                    return Err(bad(format!(
                        "turn {number}: unknown operation `{other}` (use `/model provider/model[@profile]`, `/new`, `/reset` or `sessions.reset`)"
                    )))
                }
            }
        }
        let script = Mutex::new(Script {
            outcomes: turn.outcomes.iter().cloned().map(|o| (o, false)).collect(),
        });
        let script_err: Mutex<Option<String>> = Mutex::new(None);
        let clock2 = clock.clone();
        let result = rt.block_on(runner.run(&request, |a| {
            let model = format!("{}/{}", a.provider, a.model);
            let scripted = script
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take(&model, a.profile_id.as_deref());
            let out = match scripted {
                None => Ok(format!("reply from {model}")),
                Some(o) => {
                    if let Some(d) = &o.delay {
                        match parse_offset(d) {
                            Ok(ms) => clock2.advance(ms),
                            Err(e) => {
                                *script_err.lock().unwrap_or_else(|x| x.into_inner()) = Some(e)
                            }
                        }
                    }
                    if let Some(target) = &o.live_switch {
                        let (p, m) = target.split_once('/').unwrap_or((target, ""));
                        Err(AttemptError::LiveSessionModelSwitch {
                            provider: p.into(),
                            model: m.into(),
                        })
                    } else if let Some(e) = &o.error {
                        match to_failure(e, clock2.now_ms()) {
                            Ok(f) => Err(AttemptError::Provider(f)),
                            Err(e) => {
                                *script_err.lock().unwrap_or_else(|x| x.into_inner()) = Some(e);
                                Ok(String::new())
                            }
                        }
                    } else {
                        Ok(o.reply
                            .clone()
                            .unwrap_or_else(|| format!("reply from {model}")))
                    }
                }
            };
            std::future::ready(out)
        }));
        if let Some(e) = script_err.into_inner().unwrap_or_else(|x| x.into_inner()) {
            return Err(bad(format!("turn {number}: {e}")));
        }
        let session = store
            .load_sessions()
            .map_err(|e| bad(e.to_string()))?
            .to_json()
            .get(&key)
            .cloned()
            .unwrap_or(json!({}));
        let (attempts, decisions, notices, result, soonest) = match result {
            Ok(o) => (
                o.attempts.clone(),
                o.decisions.clone(),
                o.notices.iter().map(|n| n.to_string()).collect(),
                Ok((o.model_ref(), o.value)),
                None,
            ),
            Err(e) => {
                let soonest = match &e {
                    RunError::Summary(s) => s.soonest_cooldown_expiry,
                    _ => None,
                };
                (
                    e.attempts().to_vec(),
                    e.decisions().to_vec(),
                    Vec::new(),
                    Err(e.to_string()),
                    soonest,
                )
            }
        };
        let now = clock.now_ms();
        let blocked = store
            .load_state()
            .map_err(|e| bad(e.to_string()))?
            .usage_stats
            .iter()
            .filter_map(|(id, st)| {
                let b = crate::auth::block_for(st, None, now)?;
                Some(match b {
                    crate::auth::Block::Cooling {
                        until,
                        model,
                        reason,
                    } => format!(
                        "{id} cooling until {}{}{}",
                        rel(until),
                        model.map(|m| format!(" for {m}")).unwrap_or_default(),
                        reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    ),
                    crate::auth::Block::Disabled { until, reason } => format!(
                        "{id} disabled until {}{}",
                        rel(until),
                        reason.map(|r| format!(" ({r})")).unwrap_or_default()
                    ),
                })
            })
            .collect();
        let mut report = TurnReport {
            blocked,
            number,
            at_ms: at,
            note: turn.note.clone(),
            op: turn.op.clone(),
            attempts,
            decisions,
            notices,
            result,
            soonest_expiry: soonest,
            session,
            mismatches: Vec::new(),
        };
        if let Some(x) = &turn.expect {
            let stats = store
                .load_state()
                .map_err(|e| bad(e.to_string()))?
                .to_json();
            report.mismatches = check(x, &report, &stats);
        }
        turns.push(report);
    }
    let state = store
        .load_state()
        .map_err(|e| bad(e.to_string()))?
        .to_json();
    let final_session = turns.last().map_or(json!({}), |t| t.session.clone());
    Ok(Report {
        name: name.into(),
        state_backend: None,
        description: s.description.clone(),
        turns,
        final_session,
        final_usage_stats: relativise(state.get("usageStats").unwrap_or(&json!({})), "usageStats"),
    })
}

fn list_diff(what: &str, expected: &[String], actual: &[String]) -> Option<String> {
    if expected == actual {
        return None;
    }
    let mut s = format!("{what} differ:\n");
    for e in expected {
        let _ = writeln!(s, "    - {e}");
    }
    for a in actual {
        let _ = writeln!(s, "    + {a}");
    }
    Some(s.trim_end().to_string())
}

fn check(x: &Expect, r: &TurnReport, state: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(want) = &x.attempts {
        let got: Vec<String> = r
            .attempts
            .iter()
            .zip(want.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(a, w)| attempt_line(a, w.is_some_and(|w| w.contains('@'))))
            .collect();
        out.extend(list_diff("attempts", want, &got));
    }
    if let Some(want) = &x.probes {
        let probes: Vec<&AttemptRecord> = r.attempts.iter().filter(|a| a.probe).collect();
        let got: Vec<String> = probes
            .iter()
            .zip(want.iter().map(Some).chain(std::iter::repeat(None)))
            .map(|(a, w)| attempt_line(a, w.is_some_and(|w| w.contains('@'))))
            .collect();
        out.extend(list_diff("probes", want, &got));
    }
    if let Some(want) = &x.notices {
        out.extend(list_diff("notices", want, &r.notices));
    }
    if let Some(want) = &x.result {
        let got = if r.result.is_ok() { "ok" } else { "error" };
        if want != got {
            out.push(format!("result: expected `{want}`, got `{got}`"));
        }
    }
    if let Some(want) = &x.model {
        match &r.result {
            Ok((m, _)) if m == want => {}
            Ok((m, _)) => out.push(format!("model: expected `{want}`, got `{m}`")),
            Err(_) => out.push(format!("model: expected `{want}`, but the turn failed")),
        }
    }
    if let Some(want) = &x.error {
        match &r.result {
            Err(e) if e == want => {}
            Err(e) => out.push(format!("error:\n    - {want}\n    + {e}")),
            Ok(_) => out.push(format!("error: expected `{want}`, but the turn succeeded")),
        }
    }
    if let Some(fields) = &x.session {
        for (k, want) in fields {
            let got = r.session.get(k).cloned().unwrap_or(Value::Null);
            if got != *want {
                out.push(format!("session.{k}: expected {want}, got {got}"));
            }
        }
    }
    if let Some(profiles) = &x.usage_stats {
        for (id, fields) in profiles {
            for (k, want) in fields {
                let mut want = want.clone();
                if absolutise(&mut want).is_err() {
                    out.push(format!("usageStats.{id}.{k}: bad expected value {want}"));
                    continue;
                }
                let got = state
                    .pointer(&format!(
                        "/usageStats/{}/{k}",
                        id.replace('~', "~0").replace('/', "~1")
                    ))
                    .cloned()
                    .unwrap_or(Value::Null);
                if got != want {
                    out.push(format!(
                        "usageStats.{id}.{k}: expected {}, got {}",
                        relativise(&want, k),
                        relativise(&got, k)
                    ));
                }
            }
        }
    }
    out
}

/// The human timeline.
pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "scenario {}", r.name);
    if let Some(b) = r.state_backend {
        let _ = writeln!(
            s,
            "  state: {b} (the config's `state:` block), on a scratch copy; the configured state is not touched"
        );
    }
    if let Some(d) = &r.description {
        let _ = writeln!(s, "  {}", d.trim().replace('\n', "\n  "));
    }
    for t in &r.turns {
        let _ = write!(s, "\nturn {} at {}", t.number, rel(t.at_ms));
        if let Some(n) = &t.note {
            let _ = write!(s, " — {n}");
        }
        s.push('\n');
        if let Some(op) = &t.op {
            let _ = writeln!(s, "  op        {op}");
        }
        for (i, a) in t.attempts.iter().enumerate() {
            let _ = write!(
                s,
                "  attempt {} {} {}",
                i + 1,
                rel(a.at_ms),
                attempt_line(a, true)
            );
            if a.probe {
                s.push_str(" (probe)");
            }
            if let Some(rule) = &a.rule {
                let _ = write!(s, " rule {rule}");
            }
            if let Some(st) = a.status {
                let _ = write!(s, " HTTP {st}");
            }
            if let Some(e) = &a.error {
                let _ = write!(s, ": {e}");
            }
            s.push('\n');
        }
        for d in &t.decisions {
            let _ = write!(s, "  decision  {} {}", d.decision.name(), d.from_model);
            if let Some(to) = &d.to_model {
                let _ = write!(s, " → {to}");
            }
            let _ = writeln!(s, " ({})", d.outcome.name());
        }
        for n in &t.notices {
            let _ = writeln!(s, "  notice    {n}");
        }
        match &t.result {
            Ok((m, v)) => {
                let _ = writeln!(s, "  result    ok {m}: {v}");
            }
            Err(e) => {
                let _ = writeln!(s, "  result    error: {e}");
                if let Some(x) = t.soonest_expiry {
                    let _ = writeln!(s, "  soonest   {}", rel(x));
                }
            }
        }
        let owned: Vec<String> = t
            .session
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("{k}={}", relativise(v, k)))
                    .collect()
            })
            .unwrap_or_default();
        if !owned.is_empty() {
            let _ = writeln!(s, "  session   {}", owned.join(" "));
        }
        for b in &t.blocked {
            let _ = writeln!(s, "  profile   {b}");
        }
        for m in &t.mismatches {
            let _ = writeln!(s, "  MISMATCH  {m}");
        }
    }
    let _ = writeln!(s, "\nfinal state");
    let _ = writeln!(
        s,
        "  session     {}",
        serde_json::to_string(&relativise(&r.final_session, "session")).unwrap_or_default()
    );
    if let Some(m) = r.final_usage_stats.as_object() {
        for (id, v) in m {
            let _ = writeln!(
                s,
                "  usageStats  {id} {}",
                serde_json::to_string(v).unwrap_or_default()
            );
        }
    }
    let n = r.mismatches();
    if n == 0 {
        let _ = writeln!(s, "\nok: every expectation held");
    } else {
        let _ = writeln!(s, "\nfailed: {n} expectation(s) did not hold");
    }
    s
}

/// The report as JSON (`--json`).
pub fn to_json(r: &Report) -> Value {
    let mut doc = json!({
        "scenario": r.name,
        "ok": r.mismatches() == 0,
        "turns": r.turns.iter().map(|t| json!({
            "turn": t.number,
            "at": rel(t.at_ms),
            "op": t.op,
            "attempts": t.attempts,
            "decisions": t.decisions,
            "notices": t.notices,
            "result": match &t.result {
                Ok((m, v)) => json!({"ok": true, "model": m, "value": v}),
                Err(e) => json!({"ok": false, "error": e}),
            },
            "soonestCooldownExpiry": t.soonest_expiry.map(rel),
            "session": t.session,
            "blocked": t.blocked,
            "mismatches": t.mismatches,
        })).collect::<Vec<_>>(),
        "final": {"session": r.final_session, "usageStats": r.final_usage_stats},
    });
    // Only when the config's `state:` block chose a backend.
    if let (Some(b), Some(o)) = (r.state_backend, doc.as_object_mut()) {
        o.insert("stateBackend".into(), json!(b));
    }
    doc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scripted_errors_need_an_http_status() {
        let error = |status| -> ScriptedError {
            serde_yaml::from_str(&format!("{{status: {status}, message: x}}")).unwrap()
        };
        assert_eq!(to_failure(&error(429), 0).unwrap().status, Some(429));
        for bad in [0, 99, 600, 700] {
            assert_eq!(
                to_failure(&error(bad), 0).unwrap_err(),
                format!("status {bad} is not an HTTP status (100–599)")
            );
        }
    }

    #[test]
    fn offsets_parse_and_refuse_what_overflows() {
        assert_eq!(parse_offset("+1h30m"), Ok(90 * MINUTE_MS));
        assert_eq!(parse_offset("0"), Ok(0));
        assert_eq!(parse_offset("+250ms"), Ok(250));
        // 213503982335 days is past u64 milliseconds: it used to wrap to
        // about 9 hours.
        assert_eq!(
            parse_offset("+213503982335d"),
            Err("`+213503982335d` is too large".to_string())
        );
        assert!(parse_offset("+99999999999999999999s").is_err());
    }
}
