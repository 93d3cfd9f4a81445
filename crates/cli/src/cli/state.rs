//! `failover state export` / `failover state import`: an agent's routing
//! state and session overrides as one JSON document, to move them between
//! any two backends (files, SQLite, Redis; issue 13).
//!
//! ```json
//! {"failoverState": 1, "agent": "main",
//!  "authState": { …auth-state.json… }, "sessions": { …sessions.json… }}
//! ```
//!
//! Both parts have the original files' shapes (SPEC R5), unknown fields
//! included, so `export` from one backend and `import` into another is
//! lossless. `import` replaces the target's routing state and sessions.
//! Secrets are never part of it: `auth-profiles.json` stays where it is.
//!
//! The backend is the config's `state:` block (`--config`), or
//! `--backend` (`files`, `sqlite`; `redis` needs the block for its URL);
//! with neither, the gateway's default, the SQLite database — which
//! `export` reads only when it exists (else the files).

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use super::UsageError;
use super::{CmdResult, Stop};
use crate::syntax::display_name;
use failover::state::{
    open as open_backend, open_docs, AuthState, SessionStore, Store, DEFAULT_AGENT,
};
use failover::{StateBackend, StateConfig};

/// The dump format's version.
pub(super) const DUMP_VERSION: u64 = 1;

#[derive(Args, Debug)]
pub(super) struct StateArgs {
    #[command(subcommand)]
    pub command: StateCommand,
}

#[derive(Subcommand, Debug)]
pub(super) enum StateCommand {
    /// Print an agent's routing state and sessions as one JSON document.
    Export(ExportArgs),
    /// Replace an agent's routing state and sessions with an exported document.
    Import(ImportArgs),
}

#[derive(Args, Debug)]
pub(super) struct Where {
    /// The state directory (holds `agents/<id>/agent/auth-profiles.json`).
    #[arg(long = "state", value_name = "DIR")]
    pub state: PathBuf,
    /// The agent.
    #[arg(long = "agent", value_name = "ID", default_value = DEFAULT_AGENT)]
    pub agent: String,
    /// The gateway config whose `state:` block names the backend.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The backend, over the config's: `files`, `sqlite` or `redis`.
    #[arg(long = "backend", value_name = "NAME")]
    pub backend: Option<String>,
}

#[derive(Args, Debug)]
pub(super) struct ExportArgs {
    #[command(flatten)]
    pub at: Where,
    /// Write here instead of standard output.
    #[arg(long = "out", value_name = "FILE")]
    pub out: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(super) struct ImportArgs {
    #[command(flatten)]
    pub at: Where,
    /// The exported document.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub(super) fn run(args: &StateArgs) -> CmdResult {
    match &args.command {
        StateCommand::Export(a) => export(a),
        StateCommand::Import(a) => import(a),
    }
}

/// The state block the flags name.
fn state_config(at: &Where) -> Result<Option<StateConfig>, Stop> {
    let mut cfg = match &at.config {
        None => None,
        Some(path) => super::load_config(path)?.state,
    };
    if let Some(name) = &at.backend {
        let backend = StateBackend::from_name(name).ok_or_else(|| {
            UsageError(format!(
                "unknown backend `{name}`: expected `files`, `sqlite` or `redis`"
            ))
        })?;
        cfg = match (backend, cfg) {
            (StateBackend::Redis, Some(c)) if c.backend == StateBackend::Redis => Some(c),
            (StateBackend::Redis, _) => {
                return Err(UsageError(
                    "`--backend redis` needs `--config` with a `state: { backend: redis, url: … }` block".into(),
                ).into())
            }
            (b, _) => Some(StateConfig::new(b)),
        };
    }
    Ok(cfg)
}

fn export(a: &ExportArgs) -> CmdResult {
    let cfg = state_config(&a.at)?;
    let (store, _) =
        open_docs(cfg.as_ref(), &a.at.state, &a.at.agent).map_err(|e| UsageError(e.to_string()))?;
    let state = store.load_state().map_err(|e| UsageError(e.to_string()))?;
    let sessions = store
        .load_sessions()
        .map_err(|e| UsageError(e.to_string()))?;
    for p in store.take_problems() {
        eprintln!("warning: {p}");
    }
    let doc = json!({
        "failoverState": DUMP_VERSION,
        "agent": a.at.agent,
        "authState": state.to_json(),
        "sessions": sessions.to_json(),
    });
    let mut text = serde_json::to_string_pretty(&doc).expect("JSON");
    text.push('\n');
    match &a.out {
        None => print!("{text}"),
        Some(path) => std::fs::write(path, text).map_err(|e| {
            UsageError(format!(
                "cannot write `{}`: {}",
                display_name(path),
                failover_syntax::fsio::plain_io(&e)
            ))
        })?,
    }
    Ok(0)
}

fn import(a: &ImportArgs) -> CmdResult {
    let cfg = state_config(&a.at)?;
    let name = display_name(&a.file);
    let bytes = failover_syntax::fsio::read_regular(&a.file, 256 << 20).map_err(|e| {
        UsageError(format!(
            "cannot read `{name}`: {}",
            failover_syntax::fsio::plain_io(&e)
        ))
    })?;
    let doc: Value = serde_json::from_slice(&bytes)
        .map_err(|e| UsageError(format!("`{name}` is not JSON: {e}")))?;
    if doc.get("failoverState").and_then(Value::as_u64) != Some(DUMP_VERSION) {
        return Err(UsageError(format!(
            "`{name}` is not a `failover state export` document (no `\"failoverState\": 1`)"
        ))
        .into());
    }
    let mut problems = Vec::new();
    let state = AuthState::from_json(
        doc.get("authState").cloned().unwrap_or(json!({})),
        &a.file,
        &mut problems,
    )
    .map_err(|e| UsageError(format!("`{name}`: authState: {e}")))?;
    let sessions = SessionStore::from_json(
        doc.get("sessions").cloned().unwrap_or(json!({})),
        &a.file,
        &mut problems,
    )
    .map_err(|e| UsageError(format!("`{name}`: sessions: {e}")))?;
    for p in &problems {
        eprintln!("warning: {p}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| UsageError(format!("cannot start a runtime: {e}")))?;
    let opened = rt
        .block_on(open_backend(cfg.as_ref(), &a.at.state, &a.at.agent))
        .map_err(|e| UsageError(format!("state backend: {e}")))?;
    let docs: std::sync::Arc<dyn Store> = opened.docs;
    docs.update_state_dyn(&mut |s| *s = state.clone())
        .map_err(|e| UsageError(e.to_string()))?;
    docs.update_sessions_dyn(&mut |s| *s = sessions.clone())
        .map_err(|e| UsageError(e.to_string()))?;
    eprintln!(
        "imported {} profile records and {} sessions into {}",
        state.usage_stats.len(),
        sessions.entries.len(),
        opened.backend.name()
    );
    Ok(i32::from(!problems.is_empty()))
}
