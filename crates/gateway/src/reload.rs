//! The active set: config, upstreams, compiled rules and one runner per
//! agent, built and checked as a whole, then swapped in at once.
//!
//! A reload (SIGHUP, or a file change under `--watch`) builds a new set
//! from the files; any problem — a config error, an upstream problem, a
//! rule that does not compile — refuses the whole set: its diagnostics are
//! logged and the old set keeps serving. A request holds the set it
//! started with (an `Arc`) until it ends, so a reload never changes the
//! rules or the chain under a request in flight. `GET /readyz` reports the
//! active set's hash: of the config text and of every rules file's name
//! and text.
//!
//! What a reload does not carry over: the runners' in-memory tables (probe
//! throttle, re-probe times, skip cache) start empty in the new set, as
//! after a restart. The state on disk — cooldowns, disables, session
//! overrides — is the same store and carries over untouched.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use failover::Engine;
use failover::GatewayConfig;
use failover::Runner;
use failover::{StateBackend, StateConfig};

use crate::errors::Error;
use failover::state::{backend_of, open as open_backend, Opened, Profile, DEFAULT_AGENT};

use super::metrics::Metrics;
use super::state::GatewayStore;
use super::upstream::client_for;
use super::upstreams::{self, ServeSettings, Upstreams};

/// Where a set comes from.
#[derive(Clone, Debug)]
pub struct Sources {
    /// The gateway config file.
    pub config: PathBuf,
    /// The state directory (`auth-profiles.json` and, by default, the database).
    pub state: PathBuf,
    /// Operator rules directories, highest priority first.
    pub rules: Vec<PathBuf>,
    /// Leave the embedded default rules out.
    pub no_defaults: bool,
    /// The command line's choice of evidence model, over the config's
    /// `classify:` block.
    pub model: ModelFlags,
}

/// `serve --model-file FILE`, `--no-model`, `--min-confidence P`: they win over
/// the config's `classify:` block (docs/model.md).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ModelFlags {
    /// A model file to consult instead of the configured one.
    pub model: Option<PathBuf>,
    /// Consult no model.
    pub no_model: bool,
    /// The threshold, over `classify.minConfidence`.
    pub min_confidence: Option<f32>,
}

/// One state backend per agent (the config's `state:` block, SQLite by
/// default), opened once and kept across reloads: a changed `state:`
/// block takes effect at the next start.
#[derive(Default)]
pub struct Stores {
    by_agent: Mutex<HashMap<String, Opened>>,
    /// Whether the state can be written, shared by every runner of every
    /// set (`/readyz`, `/metrics`).
    health: Arc<failover::StateHealth>,
}

impl Stores {
    /// Whether the state can be written (every agent's runners report here).
    pub fn health(&self) -> &Arc<failover::StateHealth> {
        &self.health
    }

    /// Opens the backend of every agent the config names, before the
    /// first set is built (a Redis connection needs the runtime). A config
    /// that does not load is left for the first build to report.
    pub async fn preopen(&self, sources: &Sources) -> Result<(), Error> {
        let Ok(loaded) = GatewayConfig::load(&sources.config) else {
            return Ok(());
        };
        let cfg = loaded.config;
        let mut agents: Vec<String> = vec![DEFAULT_AGENT.to_string()];
        agents.extend(cfg.agents.list.iter().map(|a| a.id.clone()));
        for agent in agents {
            if self.cached(&agent).is_some() {
                continue;
            }
            let opened = open_backend(cfg.state.as_ref(), &sources.state, &agent)
                .await
                .map_err(|e| state_error(&e))?;
            self.lock().insert(agent, opened);
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Opened>> {
        self.by_agent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn cached(&self, agent: &str) -> Option<Opened> {
        self.lock().get(agent).cloned()
    }

    fn get(
        &self,
        root: &std::path::Path,
        agent: &str,
        cfg: Option<&StateConfig>,
    ) -> Result<Opened, Error> {
        if let Some(s) = self.cached(agent) {
            return Ok(s);
        }
        // An agent added by a reload (or a set built outside `start`):
        // open its backend now.
        let opened = match backend_of(cfg) {
            StateBackend::Redis => match tokio::runtime::Handle::try_current() {
                Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                    tokio::task::block_in_place(|| h.block_on(open_backend(cfg, root, agent)))
                }
                _ => {
                    return Err(Error::State {
                        message: format!(
                            "error: agent `{agent}`: a Redis state backend is opened at start; restart the gateway"
                        ),
                    })
                }
            },
            // Files and SQLite open without waiting on anything.
            _ => futures_util::FutureExt::now_or_never(open_backend(cfg, root, agent))
                .expect("files and sqlite open without waiting"),
        }
        .map_err(|e| state_error(&e))?;
        self.lock().insert(agent.to_string(), opened.clone());
        Ok(opened)
    }
}

/// A backend that cannot be opened, as the operator reads it.
fn state_error(e: &failover::errors::StoreError) -> Error {
    Error::State {
        message: format!("error: state backend: {e}"),
    }
}

/// See the module documentation.
pub struct ActiveSet {
    pub hash: String,
    pub config: Arc<GatewayConfig>,
    pub upstreams: Upstreams,
    pub settings: ServeSettings,
    pub engine: Arc<Engine>,
    /// By agent id; [`DEFAULT_AGENT`] serves requests that name no agent.
    pub runners: HashMap<String, Arc<Runner>>,
    /// One map of pooled upstream clients per lane (`super::lane`): a
    /// connection's task lives on the worker that opened it, so each
    /// worker calls upstreams through its own pool and a request never
    /// hops threads to reach its connection.
    clients: Vec<HashMap<String, super::upstream::Client>>,
    /// `GET /v1/models`: agent ids, then every `provider/model` the config
    /// names, in order, without repeats.
    pub models: Vec<String>,
    /// The models the config names, by provider (metric labels).
    known: HashMap<String, HashSet<String>>,
    pub loaded_at_ms: u64,
}

impl ActiveSet {
    /// Every secret any agent's state holds now (and the `${VAR}` keys):
    /// what no client may read, whichever agent it asked (R16.11).
    pub async fn redactor(&self) -> failover::Redactor {
        let mut r = failover::Redactor::default();
        for runner in self.runners.values() {
            r.extend(runner.redactor().await);
        }
        r
    }

    /// The pooled client of `provider`'s upstream, for this thread's lane.
    pub fn client(&self, provider: &str) -> Option<&super::upstream::Client> {
        let lane = super::lane() % self.clients.len().max(1);
        let clients = self.clients.get(lane)?;
        if provider.bytes().any(|b| b.is_ascii_uppercase()) {
            clients.get(&provider.to_ascii_lowercase())
        } else {
            clients.get(provider)
        }
    }

    /// A model as a metric label: named by the config, or `other`.
    pub fn model_label<'a>(&self, provider: &str, model: &'a str) -> &'a str {
        if self.known.get(provider).is_some_and(|m| m.contains(model)) {
            model
        } else {
            "other"
        }
    }
}

/// `provider/model` ids grouped by provider.
fn by_provider(ids: &BTreeSet<String>) -> HashMap<String, HashSet<String>> {
    let mut out: HashMap<String, HashSet<String>> = HashMap::new();
    for id in ids {
        if let Some((p, m)) = id.split_once('/') {
            out.entry(p.to_string()).or_default().insert(m.to_string());
        }
    }
    out
}

/// The providers of the stored profiles (none when they cannot be read:
/// the runner reports that itself).
fn opened_profiles(docs: &Arc<dyn failover::Store>) -> BTreeSet<String> {
    docs.load_profiles()
        .map(|p| {
            p.profiles
                .values()
                .map(|x| failover::state::normalize_provider(&x.provider))
                .collect()
        })
        .unwrap_or_default()
}

/// Issue 35: warns of each provider `agent`'s chains reach with no
/// credential: no profile of it for the agent, no `apiKey` reference, and
/// not declared `auth: none`. Its attempts would be refused as `auth`.
pub(crate) fn warn_missing_credentials(
    agent: &str,
    config: &GatewayConfig,
    ups: &Upstreams,
    with_profiles: BTreeSet<String>,
) {
    for provider in missing_credentials(agent, config, ups, &with_profiles) {
        tracing::warn!(
            target: "failover::serve",
            agent,
            provider = provider.as_str(),
            fix = %format!(
                "add a `{provider}` profile to agents/{agent}/agent/auth-profiles.json, set `apiKey: \"${{ENV_VAR}}\"` on the provider, or declare it `auth: none` if it takes no key"
            ),
            "no credential for a provider this agent's chain reaches: its attempts will be refused as auth"
        );
    }
}

/// The providers of `agent`'s chain (its own model, else the defaults')
/// that have an upstream but no credential.
fn missing_credentials(
    agent: &str,
    config: &GatewayConfig,
    ups: &Upstreams,
    with_profiles: &BTreeSet<String>,
) -> Vec<String> {
    let own = config
        .agents
        .list
        .iter()
        .find(|a| a.id == agent)
        .and_then(|a| a.model.as_ref());
    let model = own.unwrap_or(&config.agents.model);
    let mut out = BTreeSet::new();
    for r in model.primary.iter().chain(model.fallbacks.iter().flatten()) {
        let p = failover::state::normalize_provider(r.provider());
        let Some(u) = ups.providers.get(&p) else {
            continue;
        };
        if !u.keyless && u.env_key.is_none() && u.env_aws.is_none() && !with_profiles.contains(&p) {
            out.insert(p);
        }
    }
    out.into_iter().collect()
}

/// Builds a set from its sources; `Err` holds the diagnostics.
pub(crate) fn build(
    sources: &Sources,
    stores: &Stores,
    metrics: &Arc<Metrics>,
    lanes: usize,
) -> Result<ActiveSet, Error> {
    let loaded = GatewayConfig::load(&sources.config).map_err(|e| Error::invalid(e.to_string()))?;
    for w in &loaded.warnings {
        tracing::warn!(target: "failover::serve", warning = %w.render(&loaded.name, &loaded.text), "config warning");
    }
    let env = |name: &str| std::env::var(name).ok();
    // Rendered as `check --config` renders them (masked the same way).
    let render = |problems: &[upstreams::UpstreamProblem]| {
        Error::invalid(crate::check::render_upstream_problems(
            &loaded.name,
            &loaded.text,
            problems,
        ))
    };
    let (ups, settings) = upstreams::parse(&loaded.text, &env).map_err(|p| render(&p))?;
    // Keys of a provider the gateway does not read: warned about as
    // `check --config` warns (a `timeout:` for `timeouts:` sets nothing).
    let mut unknown = crate::check::unknown_provider_keys(&loaded.text);
    if !unknown.is_empty() {
        failover::place_problems(&loaded.text, &mut unknown);
        for w in &unknown {
            tracing::warn!(target: "failover::serve", warning = %w.render(&loaded.name, &loaded.text), "config warning");
        }
    }
    let build = failover::rules::build(&sources.rules, !sources.no_defaults)
        .map_err(|e| Error::invalid(format!("error: {e}")))?;
    let engine = Engine::from_build(build).map_err(|d| Error::invalid(d.render()))?;
    // The embedded defaults' regexes and the atom scan's table are built
    // on first use; here, before the set serves, so no request pays.
    engine.warm();
    let classify = upstreams::classify_settings(&loaded.text).map_err(|p| render(&p))?;
    let (engine, model_bytes) = with_model(engine, sources, &classify).map_err(|e| match e {
        ModelFileFailed(message) => render(&[upstreams::UpstreamProblem {
            path: "classify.model".into(),
            message,
        }]),
    })?;
    let engine = Arc::new(engine);
    let config = Arc::new(loaded.config);

    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    loaded.text.hash(&mut hasher);
    model_bytes.hash(&mut hasher);
    for (_, f) in engine.sources().files() {
        f.name().hash(&mut hasher);
        f.text().hash(&mut hasher);
    }
    let hash = format!("{:016x}", hasher.finish());

    let env_profiles = env_profiles(&ups);
    let mut agents: Vec<String> = vec![DEFAULT_AGENT.to_string()];
    agents.extend(config.agents.list.iter().map(|a| a.id.clone()));
    let mut runners = HashMap::new();
    for agent in agents {
        if runners.contains_key(&agent) {
            continue;
        }
        let opened = stores.get(&sources.state, &agent, config.state.as_ref())?;
        let runner_docs = opened.docs.clone();
        let store = Arc::new(GatewayStore::new(
            opened.face,
            opened.docs,
            env_profiles.clone(),
            metrics.clone(),
        ));
        let runner = Runner::with_store(engine.clone(), config.clone(), store)
            .map_err(|e| Error::invalid(format!("error: {e}")))?
            .with_skip_ttl_from_env()
            .with_state_health(stores.health.clone())
            // Issue 32: retry budgets and context windows per provider.
            .with_retries(
                // A candidate's retries end within its `totalMs` (issue 44).
                ups.providers.values().map(|u| {
                    let mut b = u.retries;
                    b.within_ms = Some(u.timeouts.total.as_millis().try_into().unwrap_or(u64::MAX));
                    (u.id.clone(), b)
                }),
                failover::retry::RetryCap::from_env(),
            )
            .with_context_windows(ups.providers.values().flat_map(|u| {
                u.model_info.iter().filter_map(|m| {
                    let w = m.context_window?;
                    failover::ModelRef::parse(&format!("{}/{}", u.id, m.id))
                        .ok()
                        .map(|r| (r, w))
                })
            }));
        warn_missing_credentials(&agent, &config, &ups, opened_profiles(&runner_docs));
        runners.insert(agent, Arc::new(runner));
    }
    let clients = (0..lanes.max(1))
        .map(|_| {
            ups.providers
                .values()
                .map(|u| (u.id.clone(), client_for(u)))
                .collect()
        })
        .collect();

    let mut models: Vec<String> = config.agents.list.iter().map(|a| a.id.clone()).collect();
    let mut known = BTreeSet::new();
    let mut add = |r: String, models: &mut Vec<String>| {
        if known.insert(r.clone()) {
            models.push(r);
        }
    };
    let d = &config.agents.model;
    for r in d.primary.iter().chain(d.fallbacks.iter().flatten()) {
        add(r.to_string(), &mut models);
    }
    for a in &config.agents.list {
        if let Some(m) = &a.model {
            for r in m.primary.iter().chain(m.fallbacks.iter().flatten()) {
                add(r.to_string(), &mut models);
            }
        }
    }
    for u in ups.providers.values() {
        for m in &u.models {
            add(format!("{}/{m}", u.id), &mut models);
        }
    }
    for r in &models {
        if let Some((p, _)) = r.split_once('/') {
            if ups.get(p).is_none() {
                tracing::warn!(target: "failover::serve", model = %r, "no upstream is configured for this provider (models.providers.{p}); its candidates are skipped");
            }
        }
    }
    Ok(ActiveSet {
        hash,
        config,
        upstreams: ups,
        settings,
        engine,
        runners,
        clients,
        known: by_provider(&known),
        models,
        loaded_at_ms: failover::time::Clock::now_ms(&failover::time::SystemClock),
    })
}

/// The model file a set reads, when it reads one from disk: the flag's,
/// else the config's (relative to the config file's directory).
/// The profiles a config's providers hold in memory, never in
/// `auth-profiles.json`: an `apiKey: "${VAR}"` (`<provider>:default`) and
/// the AWS environment's keys of a Bedrock provider.
fn env_profiles(ups: &Upstreams) -> Vec<(String, Profile)> {
    ups.providers
        .values()
        .filter_map(|u| {
            let id = format!("{}:default", u.id);
            if let Some(k) = &u.env_key {
                return Some((id, Profile::api_key(&u.id, k.expose())));
            }
            // The AWS environment's keys: an `aws` profile in memory (its
            // secrets reach the redactor as a stored profile's do).
            u.env_aws.as_ref().map(|c| {
                (
                    id,
                    Profile::aws(
                        &u.id,
                        &c.access_key_id,
                        &c.secret_access_key,
                        c.session_token.as_deref(),
                        None,
                    ),
                )
            })
        })
        .collect()
}

/// The in-memory profiles of the gateway config `text` (see
/// `env_profiles`), with the process's environment, for `failover
/// status --config` to show every profile the runner would use. `Err`: the
/// config's provider problems, rendered as `check --config` renders them.
pub fn config_profiles(name: &str, text: &str) -> Result<Vec<(String, Profile)>, String> {
    let env = |n: &str| std::env::var(n).ok();
    let (ups, _) = upstreams::parse(text, &env)
        .map_err(|p| crate::check::render_upstream_problems(name, text, &p))?;
    Ok(env_profiles(&ups))
}

fn model_path(sources: &Sources, classify: &upstreams::ClassifySettings) -> Option<PathBuf> {
    if sources.model.no_model {
        return None;
    }
    if let Some(p) = &sources.model.model {
        return Some(p.clone());
    }
    match &classify.model {
        upstreams::ModelSetting::Path(p) if p.is_relative() => Some(
            sources
                .config
                .parent()
                .map_or_else(|| p.clone(), |dir| dir.join(p)),
        ),
        upstreams::ModelSetting::Path(p) => Some(p.clone()),
        _ => None,
    }
}

/// Attaches the evidence model the flags and the config choose; a model
/// file that cannot be used refuses the set (so a reload keeps the running
/// one). Returns the file's bytes for the set's hash.
/// A model file that cannot be used (its message names the file).
struct ModelFileFailed(String);

fn with_model(
    engine: Engine,
    sources: &Sources,
    classify: &upstreams::ClassifySettings,
) -> Result<(Engine, Vec<u8>), ModelFileFailed> {
    // Unset: the thresholds the costs give (docs/model.md).
    let threshold = failover::evidence::Confidence::from(
        sources.model.min_confidence.or(classify.min_confidence),
    );
    if sources.model.no_model {
        return Ok((engine, Vec::new()));
    }
    if let Some(path) = model_path(sources, classify) {
        let model =
            failover::evidence::read_file(&path).map_err(|e| ModelFileFailed(e.to_string()))?;
        let bytes = model.to_bytes();
        return Ok((engine.with_model(Arc::new(model), threshold), bytes));
    }
    let builtin = match classify.model {
        upstreams::ModelSetting::Off => false,
        upstreams::ModelSetting::Builtin => true,
        _ => !sources.no_defaults,
    };
    Ok(if builtin {
        (
            engine.with_model(failover::evidence::builtin(), threshold),
            match threshold {
                failover::evidence::Confidence::Min(t) => t.to_le_bytes().to_vec(),
                _ => b"costs".to_vec(),
            },
        )
    } else {
        (engine, Vec::new())
    })
}

/// The files a set is read from, with their modification times and sizes
/// (for `--watch`).
pub(crate) fn fingerprint(sources: &Sources) -> Vec<(PathBuf, Option<std::time::SystemTime>, u64)> {
    let mut paths = vec![sources.config.clone()];
    let classify = std::fs::read_to_string(&sources.config)
        .ok()
        .and_then(|t| upstreams::classify_settings(&t).ok())
        .unwrap_or_default();
    paths.extend(model_path(sources, &classify));
    for d in &sources.rules {
        if let Ok(files) = failover::rules::files_with_suffix(d, ".rules") {
            paths.extend(files);
        }
    }
    paths
        .into_iter()
        .map(|p| {
            let m = std::fs::metadata(&p).ok();
            let t = m.as_ref().and_then(|m| m.modified().ok());
            let len = m.map_or(0, |m| m.len());
            (p, t, len)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 35: per agent, the providers its chain reaches with no
    // credential; `auth: none` and an `apiKey` reference count as one.
    #[test]
    fn missing_credentials_per_agent() {
        let text = r#"agents:
  defaults:
    model:
      primary: cloud/a
      fallbacks: [local/b, envkey/c]
  list:
    - id: coder
      model:
        primary: cloud/a
        fallbacks: [other/d]
models:
  providers:
    cloud: { baseUrl: "http://127.0.0.1:1/v1", api: openai-completions }
    local: { baseUrl: "http://127.0.0.1:2/v1", api: openai-completions, auth: none }
    envkey: { baseUrl: "http://127.0.0.1:3/v1", api: openai-completions, apiKey: "${K}" }
    other: { baseUrl: "http://127.0.0.1:4/v1", api: anthropic-messages }
"#;
        let env = |n: &str| (n == "K").then(|| "sk-env-0123456789".to_string());
        let loaded = GatewayConfig::parse(text, failover::Format::Yaml, "gateway.yaml").unwrap();
        let (ups, _) = upstreams::parse(text, &env).unwrap();
        let none = BTreeSet::new();
        let cfg = &loaded.config;
        assert_eq!(missing_credentials("main", cfg, &ups, &none), ["cloud"]);
        assert_eq!(
            missing_credentials("coder", cfg, &ups, &none),
            ["cloud", "other"]
        );
        let cloud: BTreeSet<String> = ["cloud".to_string()].into();
        assert!(missing_credentials("main", cfg, &ups, &cloud).is_empty());
        assert_eq!(missing_credentials("coder", cfg, &ups, &cloud), ["other"]);
    }

    #[test]
    fn auth_takes_only_none() {
        let text = "models:\n  providers:\n    x:\n      baseUrl: http://127.0.0.1:1/v1\n      api: openai-completions\n      auth: bearer\n";
        let e = upstreams::parse(text, &|_: &str| None).unwrap_err();
        assert_eq!(e[0].path, "models.providers.x.auth");
        assert!(e[0].message.contains("expected `none`"), "{}", e[0].message);
    }
}
