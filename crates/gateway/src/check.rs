//! `failover check --config FILE` and `serve --check`: every problem of a
//! gateway config in one run — the model-failover keys (`agents`, `auth`,
//! `state`: `failover::GatewayConfig`) and the gateway's own
//! (`models.providers`, `serve`, `classify`) — each with its code, key
//! path, `file:line:col` and help, never quoting a credential.

use std::path::Path;

use failover::errors::Code;
use failover::{place_problems, ConfigProblem, GatewayConfig};

use crate::upstreams::{self, UpstreamProblem};

/// A config's problems, with the text they point into.
#[derive(Clone, Debug)]
pub struct ConfigCheck {
    /// The name shown in messages.
    pub name: String,
    /// The file's text (empty when it could not be read).
    pub text: String,
    /// Every problem, in file order.
    pub problems: Vec<ConfigProblem>,
    /// Choices the config makes that an operator should see even when
    /// nothing is wrong (`name: what`), e.g. whether clients need a key.
    pub notes: Vec<(String, String)>,
}

impl ConfigCheck {
    /// How many of the problems are errors.
    pub fn errors(&self) -> usize {
        self.problems.iter().filter(|p| p.is_error()).count()
    }

    /// The problems rendered like the rules' diagnostics, with a count.
    pub fn render(&self) -> String {
        failover::render_problems(&self.problems, &self.name, &self.text)
    }
}

/// Reads the config at `path` with every reader `serve` uses and gathers
/// all their problems (the `${VAR}` references are resolved from this
/// process's environment, as `serve` would).
pub fn check_config(path: &Path) -> ConfigCheck {
    let (name, text, mut problems) = match GatewayConfig::load(path) {
        Ok(loaded) => (loaded.name, loaded.text, loaded.warnings),
        Err(e) if e.text.is_empty() => {
            return ConfigCheck {
                name: e.name,
                text: String::new(),
                problems: e.problems,
                notes: Vec::new(),
            }
        }
        Err(e) => (e.name, e.text, e.problems),
    };
    let env = |name: &str| std::env::var(name).ok();
    let providers = provider_ids(&text);
    let mut theirs = Vec::new();
    let mut notes = Vec::new();
    match upstreams::parse(&text, &env) {
        Ok((_, serve)) => notes.push(("clientAuth".to_string(), client_auth_note(&serve))),
        Err(ps) => theirs.extend(ps),
    }
    match upstreams::classify_settings(&text) {
        // Issue 44 item 14: the model file `serve` would load, loaded
        // (a damaged, missing or unreadable one fails here, not at start).
        Ok(cs) => {
            if let upstreams::ModelSetting::Path(p) = &cs.model {
                let file = match path.parent() {
                    Some(dir) if p.is_relative() => dir.join(p),
                    _ => p.clone(),
                };
                if let Err(e) = failover::evidence::read_file(&file) {
                    theirs.push(UpstreamProblem {
                        path: "classify.model".into(),
                        message: e.to_string(),
                    });
                }
            }
        }
        Err(ps) => theirs.extend(ps),
    }
    let mut added: Vec<ConfigProblem> = theirs.iter().map(|p| to_problem(p, &providers)).collect();
    added.extend(unknown_provider_keys(&text));
    place_problems(&text, &mut added);
    problems.extend(added);
    problems.sort_by_key(|p| (p.line.unwrap_or(0), p.column.unwrap_or(0)));
    ConfigCheck {
        name,
        text,
        problems,
        notes,
    }
}

/// What `serve` will do about client keys with this config (R18.6).
fn client_auth_note(serve: &upstreams::ServeSettings) -> String {
    use upstreams::ClientAuthMode;
    match serve.client_auth {
        Some(ClientAuthMode::Required) => {
            "required (serve.clientAuth): every request but /healthz and /readyz needs a client key".into()
        }
        Some(ClientAuthMode::Off) => {
            "off (serve.clientAuth): anyone who reaches the gateway spends its provider keys; a warning is logged when it listens off loopback".into()
        }
        None => "not written: required when serve listens off loopback or once `failover keys create` has made a key; off otherwise".into(),
    }
}

/// Issue 44 item 15: a key under `models.providers.<id>` the gateway does
/// not read (`timeout:` for `timeouts:`, `apiKye`) is a warning with a
/// near miss; one holding a literal credential is an error already
/// (`upstreams::parse`), not repeated here.
pub(crate) fn unknown_provider_keys(text: &str) -> Vec<ConfigProblem> {
    let Ok(root) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return Vec::new();
    };
    let Some(providers) = root
        .get("models")
        .and_then(|m| m.get("providers"))
        .and_then(serde_yaml::Value::as_mapping)
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (id, block) in providers {
        let (Some(id), Some(block)) = (id.as_str(), block.as_mapping()) else {
            continue;
        };
        for (k, v) in block {
            let Some(name) = k.as_str() else { continue };
            if upstreams::PROVIDER_KEYS.contains(&name) || upstreams::literal_secret(name, v) {
                continue;
            }
            let help =
                failover::errors::did_you_mean(name, upstreams::PROVIDER_KEYS.iter().copied())
                    .map(|m| format!("did you mean `{m}`?"))
                    .unwrap_or_else(|| {
                        format!("known keys here: {}", upstreams::PROVIDER_KEYS.join(", "))
                    });
            out.push(ConfigProblem::at_keys(
                Code::W003,
                &["models", "providers", id, name],
                "unknown key, ignored".into(),
                Some(help),
            ));
        }
    }
    out
}

/// The gateway readers' problems rendered as `check --config` renders
/// them — placed at their lines, key-shaped text masked — so that `serve`
/// never prints what `check` masks (issue 44 item 13).
pub(crate) fn render_upstream_problems(
    name: &str,
    text: &str,
    problems: &[UpstreamProblem],
) -> String {
    let providers = provider_ids(text);
    let mut added: Vec<ConfigProblem> =
        problems.iter().map(|p| to_problem(p, &providers)).collect();
    place_problems(text, &mut added);
    failover::render_problems(&added, name, text)
}

/// The keys of `models.providers` (a provider id may hold dots).
fn provider_ids(text: &str) -> Vec<String> {
    let Ok(root) = serde_yaml::from_str::<serde_yaml::Value>(text) else {
        return Vec::new();
    };
    root.get("models")
        .and_then(|m| m.get("providers"))
        .and_then(serde_yaml::Value::as_mapping)
        .map(|m| {
            m.keys()
                .filter_map(|k| k.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A gateway reader's problem as a coded config problem (E023: a value
/// that cannot be used), its dotted path split back into keys.
fn to_problem(p: &UpstreamProblem, providers: &[String]) -> ConfigProblem {
    let mut keys: Vec<&str> = Vec::new();
    let mut rest = p.path.as_str();
    if let Some(after) = rest.strip_prefix("models.providers.") {
        keys.extend(["models", "providers"]);
        let id = providers
            .iter()
            .filter(|id| after == id.as_str() || after.starts_with(&format!("{id}.")))
            .max_by_key(|id| id.len());
        match id {
            Some(id) => {
                keys.push(id);
                rest = after[id.len()..].trim_start_matches('.');
            }
            None => rest = after,
        }
    }
    keys.extend(rest.split('.').filter(|k| !k.is_empty()));
    let (message, help) = match p.message.split_once("; ") {
        Some((m, h)) if p.message.contains("literal API key") => {
            (m.to_string(), Some(h.to_string()))
        }
        _ => (p.message.clone(), None),
    };
    ConfigProblem::at_keys(Code::E023, &keys, message, help)
}
