//! The reader over the untyped YAML tree: it knows the R15 keys, records
//! each problem with its key path (`agents.list[2].model.fallbacks`), keeps
//! going, and returns the typed [`GatewayConfig`] with *all* problems.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_yaml::{Mapping, Value};

use crate::auth::{CooldownPolicy, CredentialKind, ProfileMeta};
use crate::diag::did_you_mean;
use crate::model_ref::{shown, ModelRef};
use crate::redact::{looks_like_secret, secret_key_name};
use crate::store::{StateBackend, StateConfig};

use super::model::*;
use crate::diag::Code;

use super::problem::{ConfigProblem, Seg};

/// A key path as shown: keys shaped like credentials (a profile id that is
/// itself a pasted key) are masked like values (SPEC R16.11).
pub(super) fn path_string(segs: &[Seg]) -> String {
    let mut out = String::new();
    for seg in segs {
        match seg {
            Seg::Key(k) if looks_like_secret(k) => {
                let _ = write!(
                    out,
                    "[{}]",
                    serde_json::Value::String(crate::redact::redact(k).into_owned())
                );
            }
            Seg::Key(k) if is_plain_key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Seg::Key(k) => {
                let _ = write!(out, "[{}]", serde_json::Value::String(shown(k)));
            }
            Seg::Index(i) => {
                let _ = write!(out, "[{i}]");
            }
        }
    }
    out
}

fn is_plain_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The type of a value in operator words.
fn found(v: &Value) -> &'static str {
    match v {
        Value::Null => "nothing",
        Value::Bool(_) => "true or false",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Sequence(_) => "a list",
        Value::Mapping(_) => "a mapping",
        Value::Tagged(_) => "a tagged value",
    }
}

/// A value from the file for a message, or `None` when it looks like a
/// credential ([`looks_like_secret`]): the message then says what is wrong
/// without it.
pub(super) fn quotable(value: &str) -> Option<String> {
    (!looks_like_secret(value)).then(|| shown(value))
}

#[derive(Default)]
pub(super) struct Reader {
    pub(super) problems: Vec<ConfigProblem>,
    path: Vec<Seg>,
}

impl Reader {
    fn push(&mut self, code: Code, message: String, help: Option<String>, at_key: bool) {
        self.problems.push(ConfigProblem {
            code,
            path: path_string(&self.path),
            message,
            help,
            line: None,
            column: None,
            segments: self.path.clone(),
            at_key,
            conceal_line: false,
        });
    }

    fn error(&mut self, message: impl Into<String>) {
        self.push(Code::E023, message.into(), None, false);
    }

    fn error_help(&mut self, message: impl Into<String>, help: impl Into<String>) {
        self.push(Code::E023, message.into(), Some(help.into()), false);
    }

    fn warn(&mut self, message: impl Into<String>) {
        self.push(Code::W005, message.into(), None, false);
    }

    /// Runs `f` with `seg` appended to the current path.
    fn at<T>(&mut self, seg: Seg, f: impl FnOnce(&mut Self) -> T) -> T {
        self.path.push(seg);
        let out = f(self);
        self.path.pop();
        out
    }

    fn key<T>(&mut self, key: &str, f: impl FnOnce(&mut Self) -> T) -> T {
        self.at(Seg::Key(key.to_string()), f)
    }

    /// A mapping, or an error (`null` counts as an empty mapping: `auth:`
    /// with nothing under it).
    fn mapping<'v>(&mut self, v: &'v Value) -> Option<&'v Mapping> {
        match v {
            Value::Mapping(m) => Some(m),
            Value::Null => None,
            other => {
                self.error(format!(
                    "expected a mapping of keys, found {}",
                    found(other)
                ));
                None
            }
        }
    }

    /// Warns about every key of `map` not in `known`; returns the
    /// string-keyed entries.
    fn entries<'v>(&mut self, map: &'v Mapping, known: &[&str]) -> Vec<(&'v str, &'v Value)> {
        let mut out = Vec::new();
        for (k, v) in map {
            let Some(name) = key_text(k) else {
                self.warn(format!("a key of {} is not a name; ignored", found(k)));
                continue;
            };
            if known.contains(&name) {
                out.push((name, v));
                continue;
            }
            let help = did_you_mean(name, known.iter().copied())
                .map(|m| format!("did you mean `{m}`?"))
                .unwrap_or_else(|| format!("known keys here: {}", known.join(", ")));
            self.unknown_key(name, help);
        }
        out
    }

    /// Warns that key `name` is not read (`help`: a near miss, or the
    /// known keys).
    fn unknown_key(&mut self, name: &str, help: String) {
        self.at(Seg::Key(name.to_string()), |r| {
            r.push(
                Code::W003,
                "unknown key, ignored".to_string(),
                Some(help),
                true,
            )
        });
    }

    pub(super) fn root(&mut self, v: &Value) -> GatewayConfig {
        let mut config = GatewayConfig::default();
        let map = match v {
            Value::Mapping(m) => m,
            Value::Null => {
                self.warn("the config is empty");
                return config;
            }
            other => {
                self.error(format!(
                    "the config must be a mapping of keys, found {}",
                    found(other)
                ));
                return config;
            }
        };
        for (k, v) in self.entries_lenient(map, &["agents", "auth", "state"]) {
            match k {
                "agents" => config.agents = self.key(k, |r| r.agents(v)),
                "auth" => config.auth = self.key(k, |r| r.auth(v)),
                "state" => config.state = self.key(k, |r| r.state(v)),
                _ => unreachable!("filtered by entries"),
            }
        }
        config
    }

    /// The top level of a gateway config holds many sections this tool does
    /// not read (`gateway`, `channels`, …); they are not worth a warning,
    /// but a near miss of a section it does read (`agnets`) is.
    fn entries_lenient<'v>(
        &mut self,
        map: &'v Mapping,
        known: &[&str],
    ) -> Vec<(&'v str, &'v Value)> {
        let mut out = Vec::new();
        for (k, v) in map {
            let Some(name) = key_text(k) else { continue };
            if known.contains(&name) {
                out.push((name, v));
            } else if let Some(m) = did_you_mean(name, known.iter().copied()) {
                self.unknown_key(name, format!("did you mean `{m}`?"));
            }
        }
        out
    }

    fn agents(&mut self, v: &Value) -> AgentsConfig {
        let mut out = AgentsConfig::default();
        let Some(map) = self.mapping(v) else {
            return out;
        };
        for (k, v) in self.entries(map, &["defaults", "list"]) {
            self.key(k, |r| match k {
                "defaults" => {
                    let Some(map) = r.mapping(v) else { return };
                    for (k, v) in r.entries(map, &["model", "imageModel"]) {
                        r.key(k, |r| {
                            let slot = r.model_config(v, false);
                            match k {
                                "model" => out.model = slot.unwrap_or_default(),
                                _ => out.image_model = slot.unwrap_or_default(),
                            }
                        });
                    }
                }
                _ => out.list = r.agent_list(v),
            });
        }
        out
    }

    fn agent_list(&mut self, v: &Value) -> Vec<AgentConfig> {
        let items = match v {
            Value::Sequence(items) => items,
            Value::Null => return Vec::new(),
            other => {
                self.error(format!(
                    "expected a list of agents (`- id: …`), found {}",
                    found(other)
                ));
                return Vec::new();
            }
        };
        let mut out: Vec<AgentConfig> = Vec::new();
        // The list index of each agent in `out`, for messages.
        let mut indices: Vec<usize> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            self.at(Seg::Index(i), |r| {
                let Some(map) = r.mapping(item) else {
                    if item.is_null() {
                        r.error("expected an agent (`id: …`), found nothing");
                    }
                    return;
                };
                let mut id = None;
                let mut model = None;
                for (k, v) in r.entries(map, &["id", "model"]) {
                    r.key(k, |r| match k {
                        "id" => match v {
                            Value::String(s) if !s.trim().is_empty() => id = Some(s.clone()),
                            Value::String(_) => r.error("agent id is empty"),
                            other => r.error(format!(
                                "expected an agent id string, found {}",
                                found(other)
                            )),
                        },
                        _ => model = r.model_config(v, true),
                    });
                }
                let Some(id) = id else {
                    if !map.contains_key("id") {
                        r.error("agent has no `id`");
                    }
                    return;
                };
                if let Some(first) = out.iter().position(|a| a.id.eq_ignore_ascii_case(&id)) {
                    let first = indices[first];
                    r.key("id", |r| {
                        r.error(match quotable(&id) {
                            Some(id) => format!(
                                "agent id `{id}` is used twice (first at `agents.list[{first}]`)"
                            ),
                            None => format!(
                                "this agent id is used twice (first at `agents.list[{first}]`); it is not shown, as it looks like a secret"
                            ),
                        })
                    });
                    return;
                }
                out.push(AgentConfig { id, model });
                indices.push(i);
            });
        }
        out
    }

    /// A model slot: a `provider/model` string (a primary without
    /// fallbacks), or `{primary, fallbacks}`.
    fn model_config(&mut self, v: &Value, agent: bool) -> Option<ModelConfig> {
        match v {
            Value::Null => None,
            Value::String(_) => Some(ModelConfig {
                primary: self.model_ref(v),
                fallbacks: None,
            }),
            Value::Mapping(map) => {
                let mut out = ModelConfig::default();
                for (k, v) in self.entries(map, &["primary", "fallbacks"]) {
                    self.key(k, |r| match k {
                        "primary" => out.primary = r.model_ref(v),
                        _ => out.fallbacks = r.model_list(v),
                    });
                }
                if agent && map.is_empty() {
                    self.warn("empty model object: the agent uses the configured default");
                }
                Some(out)
            }
            other => {
                self.error(format!(
                    "expected a \"provider/model\" string or `{{primary, fallbacks}}`, found {}",
                    found(other)
                ));
                None
            }
        }
    }

    fn model_ref(&mut self, v: &Value) -> Option<ModelRef> {
        match v {
            Value::String(s) => match ModelRef::parse(s) {
                Ok(m) => Some(m),
                // The parser's message quotes the value.
                Err(_) if looks_like_secret(s) => {
                    self.error(
                        "expected a \"provider/model\" string; the value is not shown, as it looks like a secret",
                    );
                    None
                }
                Err(e) => {
                    self.error(e.to_string());
                    None
                }
            },
            Value::Null => None,
            other => {
                self.error(format!(
                    "expected a \"provider/model\" string, found {}",
                    found(other)
                ));
                None
            }
        }
    }

    /// A list of model references; duplicates are warned about and kept
    /// (the chain builder drops them, SPEC R4.2).
    fn model_list(&mut self, v: &Value) -> Option<Vec<ModelRef>> {
        let items = match v {
            Value::Sequence(items) => items,
            Value::Null => return None,
            Value::String(s) => {
                let example = if let Some(s) = quotable(s).filter(|_| ModelRef::parse(s).is_ok()) {
                    format!("write `[{s}]`, or one `- provider/model` line per fallback")
                } else {
                    "write `[provider/model, …]`, or one `- provider/model` line per fallback"
                        .to_string()
                };
                self.error_help(
                    "expected a list of \"provider/model\" strings, found a string",
                    example,
                );
                return None;
            }
            other => {
                self.error(format!(
                    "expected a list of \"provider/model\" strings, found {}",
                    found(other)
                ));
                return None;
            }
        };
        let mut out: Vec<ModelRef> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            self.at(Seg::Index(i), |r| {
                if item.is_null() {
                    r.error("expected a \"provider/model\" string, found nothing");
                    return;
                }
                let Some(m) = r.model_ref(item) else { return };
                if let Some(first) = out.iter().position(|x| *x == m) {
                    r.warn(match quotable(m.as_str()) {
                        Some(m) => format!(
                            "`{m}` is listed twice (first at index {first}); the repeat is ignored"
                        ),
                        None => format!(
                            "this model is listed twice (first at index {first}); the repeat is ignored"
                        ),
                    });
                }
                out.push(m);
            });
        }
        Some(out)
    }

    fn auth(&mut self, v: &Value) -> AuthConfig {
        let mut out = AuthConfig::default();
        let Some(map) = self.mapping(v) else {
            return out;
        };
        for (k, v) in self.entries(map, &["profiles", "order", "cooldowns"]) {
            self.key(k, |r| match k {
                "profiles" => out.profiles = r.profiles(v),
                "order" => out.order = r.order(v),
                _ => out.cooldowns = r.cooldowns(v),
            });
        }
        out
    }

    /// `state` (issue 13): `backend` is required; `url` only and always
    /// with `redis`; `prefix` only with `redis`.
    fn state(&mut self, v: &Value) -> Option<StateConfig> {
        if matches!(v, Value::Null) {
            return None;
        }
        let map = self.mapping(v)?;
        let (mut backend, mut url, mut prefix) = (None, None, None);
        for (k, v) in self.entries(map, &["backend", "url", "prefix"]) {
            self.key(k, |r| match k {
                "backend" => {
                    if let Some(name) = r.string(v, "a backend name") {
                        match StateBackend::from_name(&name) {
                            Some(b) => backend = Some(b),
                            None => r.error(format!(
                                "unknown state backend `{name}`: expected `sqlite`, `redis` or `files`"
                            )),
                        }
                    }
                }
                "url" => url = r.string(v, "a URL such as \"redis://127.0.0.1:6379/0\""),
                _ => prefix = r.string(v, "a key prefix"),
            });
        }
        let Some(backend) = backend else {
            self.error("`state` needs a `backend`: `sqlite`, `redis` or `files`");
            return None;
        };
        match backend {
            StateBackend::Redis => {
                match &url {
                    None => self.error("`state.backend: redis` needs a `url`"),
                    Some(u) if !(u.starts_with("redis://") || u.starts_with("unix://")) => self
                        .key("url", |r| {
                            r.error("expected a `redis://` URL (or `unix://` for a socket)")
                        }),
                    _ => {}
                }
                if prefix.as_deref() == Some("") {
                    self.key("prefix", |r| r.error("the prefix must not be empty"));
                }
            }
            _ => {
                for (name, set) in [("url", url.is_some()), ("prefix", prefix.is_some())] {
                    if set {
                        self.key(name, |r| {
                            r.error(format!(
                                "`{name}` applies only to `backend: redis`; remove it"
                            ))
                        });
                    }
                }
            }
        }
        Some(StateConfig {
            backend,
            url,
            prefix,
        })
    }

    fn profiles(&mut self, v: &Value) -> Vec<ProfileMeta> {
        let Some(map) = self.mapping(v) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (k, v) in map {
            let Some(id) = key_text(k) else {
                self.error(format!("a profile id must be a name, found {}", found(k)));
                continue;
            };
            if let Some(p) = self.key(id, |r| r.profile(id, v)) {
                out.push(p);
            }
        }
        out
    }

    fn profile(&mut self, id: &str, v: &Value) -> Option<ProfileMeta> {
        let map = self.mapping(v)?;
        const META: [&str; 4] = ["provider", "mode", "type", "email"];
        // A key whose name says it holds a secret (`apiKey`, `accessToken`,
        // `client-secret`) is not an unknown key but a secret in the wrong
        // place. The value is never read, stored or shown.
        let mut meta = Mapping::new();
        for (k, v) in map {
            match key_text(k) {
                Some(name) if !META.contains(&name) && secret_key_name(name) => {
                    self.key(name, |r| {
                        r.push(
                            Code::W004,
                            "secrets do not belong in the config file; this value is ignored".into(),
                            Some(
                                "keep keys and tokens in `<state>/agents/<agentId>/agent/auth-profiles.json` (SPEC R5.1)"
                                    .into(),
                            ),
                            true,
                        )
                    });
                }
                _ => {
                    meta.insert(k.clone(), v.clone());
                }
            }
        }
        let mut provider = None;
        let mut mode = None;
        let mut email = None;
        for (k, v) in self.entries(&meta, &META) {
            self.key(k, |r| match k {
                "provider" => provider = r.string(v, "a provider id"),
                "mode" | "type" => {
                    let Some(s) = r.string(v, CredentialKind::EXPECTED) else {
                        return;
                    };
                    mode = match CredentialKind::from_name(&s) {
                        known @ Some(_) => known,
                        // The value is never echoed, whatever its shape: a
                        // mode field is where a pasted credential lands, and
                        // no shape test can tell a secret from a word (a
                        // short lower-case word may be a password). The
                        // message says what is allowed instead, and a near
                        // miss (`OAuth`, `apikey`) names the known mode,
                        // which shows nothing of the value.
                        None => {
                            let names = CredentialKind::ALL.map(CredentialKind::name);
                            let help = did_you_mean(s.trim(), names)
                                .map(|m| format!("did you mean `{m}`?"))
                                .unwrap_or_else(|| {
                                    "the value is not shown, in case it is a secret".to_string()
                                });
                            r.error_help(
                                format!(
                                    "unknown credential mode: expected {}",
                                    CredentialKind::EXPECTED
                                ),
                                help,
                            );
                            // The source line would show the value.
                            if let Some(p) = r.problems.last_mut() {
                                p.conceal_line = true;
                            }
                            None
                        }
                    };
                }
                _ => email = r.string(v, "an e-mail address"),
            });
        }
        let Some(provider) = provider else {
            if !map.contains_key("provider") {
                self.error_help(
                    "profile has no `provider`",
                    format!("add `provider: {}`", id.split(':').next().unwrap_or("…")),
                );
            }
            return None;
        };
        let provider = provider.trim().to_ascii_lowercase();
        let prefix = id.split(':').next().unwrap_or("");
        if !id.contains(':') || !prefix.eq_ignore_ascii_case(&provider) {
            // `provider` is a value from the file; the id is a key, shown
            // in the path too.
            self.warn(match (quotable(id), quotable(&provider)) {
                (Some(id), Some(provider)) => format!(
                    "profile id `{id}` does not start with `{provider}:` (ids are `provider:default` or `provider:<email>`)"
                ),
                _ => "profile id does not start with the profile's provider and `:` (ids are `provider:default` or `provider:<email>`); the value is not shown, as it looks like a secret"
                    .to_string(),
            });
        }
        Some(
            ProfileMeta::new(id, provider)
                .with_mode(mode)
                .with_email(email),
        )
    }

    fn order(&mut self, v: &Value) -> BTreeMap<String, Vec<String>> {
        let mut out = BTreeMap::new();
        let Some(map) = self.mapping(v) else {
            return out;
        };
        for (k, v) in map {
            let Some(provider) = key_text(k) else {
                self.error(format!("a provider id must be a name, found {}", found(k)));
                continue;
            };
            self.key(provider, |r| {
                let items = match v {
                    Value::Sequence(items) => items,
                    other => {
                        r.error(format!(
                            "expected a list of profile ids, found {}",
                            found(other)
                        ));
                        return;
                    }
                };
                let mut ids: Vec<String> = Vec::new();
                for (i, item) in items.iter().enumerate() {
                    r.at(Seg::Index(i), |r| {
                        let Some(id) = r.string(item, "a profile id") else {
                            return;
                        };
                        if ids.contains(&id) {
                            r.warn(match quotable(&id) {
                                Some(id) => {
                                    format!("profile `{id}` is listed twice; the repeat is ignored")
                                }
                                None => "this profile is listed twice; the repeat is ignored"
                                    .to_string(),
                            });
                        } else {
                            ids.push(id);
                        }
                    });
                }
                out.insert(provider.trim().to_ascii_lowercase(), ids);
            });
        }
        out
    }

    fn cooldowns(&mut self, v: &Value) -> CooldownPolicy {
        let Some(map) = self.mapping(v) else {
            return CooldownPolicy::new();
        };
        // The figures as written (hours, minutes), for the cap checks and
        // their messages; unset ones are the policy's defaults.
        let d = CooldownPolicy::new();
        let in_hours = |d: std::time::Duration| d.as_secs_f64() / 3600.0;
        let in_minutes = |d: std::time::Duration| d.as_secs_f64() / 60.0;
        let mut billing_backoff_hours = in_hours(d.billing_backoff());
        let mut billing_max_hours = in_hours(d.billing_max());
        let mut failure_window_hours = in_hours(d.failure_window());
        let mut auth_permanent_backoff_minutes = in_minutes(d.auth_permanent_backoff());
        let mut auth_permanent_max_minutes = in_minutes(d.auth_permanent_max());
        let mut provider_reset_max_hours = in_hours(d.provider_reset_max());
        let mut overloaded_profile_rotations = crate::auth::DEFAULT_OVERLOADED_PROFILE_ROTATIONS;
        let mut rate_limited_profile_rotations =
            crate::auth::DEFAULT_RATE_LIMITED_PROFILE_ROTATIONS;
        let mut overloaded_backoff = crate::auth::DEFAULT_OVERLOADED_BACKOFF;
        let mut by_provider = Vec::new();
        let known = [
            "billingBackoffHours",
            "billingBackoffHoursByProvider",
            "billingMaxHours",
            "failureWindowHours",
            "overloadedProfileRotations",
            "overloadedBackoffMs",
            "rateLimitedProfileRotations",
            "authPermanentBackoffMinutes",
            "authPermanentMaxMinutes",
            "providerResetMaxHours",
        ];
        for (k, v) in self.entries(map, &known) {
            self.key(k, |r| match k {
                "billingBackoffHours" => r.positive(v, &mut billing_backoff_hours),
                "billingMaxHours" => r.positive(v, &mut billing_max_hours),
                "failureWindowHours" => r.positive(v, &mut failure_window_hours),
                "authPermanentBackoffMinutes" => r.positive(v, &mut auth_permanent_backoff_minutes),
                "authPermanentMaxMinutes" => r.positive(v, &mut auth_permanent_max_minutes),
                "providerResetMaxHours" => r.positive(v, &mut provider_reset_max_hours),
                "overloadedProfileRotations" => r.count(v, u32::MAX.into(), |n| {
                    overloaded_profile_rotations = n as u32
                }),
                "rateLimitedProfileRotations" => r.count(v, u32::MAX.into(), |n| {
                    rate_limited_profile_rotations = n as u32
                }),
                "overloadedBackoffMs" => r.count(v, u64::MAX, |n| {
                    overloaded_backoff = std::time::Duration::from_millis(n)
                }),
                _ => {
                    let Some(map) = r.mapping(v) else { return };
                    for (k, v) in map {
                        let Some(provider) = key_text(k) else {
                            r.error(format!("a provider id must be a name, found {}", found(k)));
                            continue;
                        };
                        let mut hours = f64::NAN;
                        r.key(provider, |r| r.positive(v, &mut hours));
                        if hours.is_finite() {
                            by_provider.push((provider.trim().to_ascii_lowercase(), hours));
                        }
                    }
                }
            });
        }
        if billing_max_hours < billing_backoff_hours {
            self.key("billingMaxHours", |r| {
                r.warn(format!(
                    "the cap ({} h) is below the base billing backoff ({} h); every billing disable lasts {} h",
                    billing_max_hours, billing_backoff_hours, billing_max_hours
                ))
            });
        }
        if auth_permanent_max_minutes < auth_permanent_backoff_minutes {
            self.key("authPermanentMaxMinutes", |r| {
                r.warn(format!(
                    "the cap ({} min) is below the base backoff ({} min)",
                    auth_permanent_max_minutes, auth_permanent_backoff_minutes
                ))
            });
        }
        // Every figure passed `positive` (finite, above zero), so each
        // converts; a default stands in for the impossible failure.
        let hours = |h: f64, or| CooldownPolicy::hours(h).unwrap_or(or);
        let minutes = |m: f64, or| CooldownPolicy::minutes(m).unwrap_or(or);
        let base = hours(billing_backoff_hours, d.billing_backoff());
        let mut c = CooldownPolicy::new()
            .with_billing_backoff(base)
            .with_billing_max(hours(billing_max_hours, d.billing_max()))
            .with_failure_window(hours(failure_window_hours, d.failure_window()))
            .with_auth_permanent_backoff(minutes(
                auth_permanent_backoff_minutes,
                d.auth_permanent_backoff(),
            ))
            .with_auth_permanent_max(minutes(auth_permanent_max_minutes, d.auth_permanent_max()))
            .with_provider_reset_max(hours(provider_reset_max_hours, d.provider_reset_max()))
            .with_overloaded_profile_rotations(overloaded_profile_rotations)
            .with_rate_limited_profile_rotations(rate_limited_profile_rotations)
            .with_overloaded_backoff(overloaded_backoff);
        for (provider, h) in by_provider {
            c = c.with_billing_backoff_for(provider, hours(h, base));
        }
        c
    }

    fn string(&mut self, v: &Value, what: &str) -> Option<String> {
        match v {
            Value::String(s) => Some(s.clone()),
            other => {
                self.error(format!("expected {what}, found {}", found(other)));
                None
            }
        }
    }

    /// A positive, finite number (hours, minutes).
    fn positive(&mut self, v: &Value, slot: &mut f64) {
        match v.as_f64() {
            Some(n) if n.is_finite() && n > 0.0 => *slot = n,
            Some(_) => self.error("expected a positive number"),
            None => self.error(format!("expected a positive number, found {}", found(v))),
        }
    }

    /// A whole number from 0 to `max`.
    fn count(&mut self, v: &Value, max: u64, set: impl FnOnce(u64)) {
        match v.as_u64() {
            Some(n) if n <= max => set(n),
            Some(_) => self.error(format!("expected a whole number up to {max}")),
            None if v.is_number() => self.error("expected a whole number, 0 or more"),
            None => self.error(format!(
                "expected a whole number, 0 or more, found {}",
                found(v)
            )),
        }
    }
}

/// A mapping key as text (keys that are numbers, lists… are not names).
fn key_text(k: &Value) -> Option<&str> {
    match k {
        Value::String(s) => Some(s),
        _ => None,
    }
}
