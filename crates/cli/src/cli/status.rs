//! `failover status`: profiles, cooldowns, disables and session overrides of
//! a state directory, readable (or `--json`). Read-only: a damaged file is
//! reported, never moved. Secrets are shown masked at most (`sk-…abcd`).

use std::collections::BTreeSet;
use std::path::PathBuf;

use clap::Args;
use serde_json::{json, Value};

use super::CmdResult;
use super::UsageError;
use crate::syntax::display_name;
use failover::routing::routing_of;
use failover::routing::{block_for, order_profiles, AuthRouting, Block, Excluded, ProfileOrder};
use failover::state::{
    normalize_provider, open_docs_read_only, AuthProfiles, AuthState, FileStore, SessionEntry,
    SessionStore, Store, DEFAULT_AGENT,
};
use failover::state::{provider_of_id, ModelWindow, UsageStats};
use failover::time::{format_span, format_utc, Clock, SystemClock};

#[derive(Args, Debug)]
pub(super) struct StatusArgs {
    /// The state directory (holds `agents/<id>/agent/auth-profiles.json`).
    #[arg(long = "state", value_name = "DIR")]
    pub state: PathBuf,
    /// The agent whose state to show.
    #[arg(long = "agent", value_name = "ID", default_value = DEFAULT_AGENT)]
    pub agent: String,
    /// The gateway config (YAML, or JSON when the name ends in `.json`):
    /// its `auth.order` and `auth.profiles` give the profile order shown,
    /// as the runner would use it. Without it, only the stored order and
    /// profiles count.
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Evaluate windows at this instant (epoch ms) instead of now.
    #[arg(long = "now", value_name = "MS", hide = true)]
    pub now: Option<u64>,
}

/// Everything shown, gathered once for both output forms.
struct Report {
    root: String,
    agent: String,
    now: u64,
    profiles: AuthProfiles,
    state: AuthState,
    sessions: SessionStore,
    orders: Vec<ProfileOrder>,
    problems: Vec<String>,
    /// The database was read as an immutable snapshot: the directory
    /// cannot be written (a read-only mount).
    snapshot: bool,
}

pub(super) fn run(args: &StatusArgs) -> CmdResult {
    let meta = std::fs::metadata(&args.state).map_err(|e| {
        UsageError(format!(
            "cannot read state directory `{}`: {}",
            display_name(&args.state),
            failover_syntax::fsio::plain_io(&e)
        ))
    })?;
    if !meta.is_dir() {
        return Err(UsageError(format!(
            "`{}` is not a directory",
            display_name(&args.state)
        ))
        .into());
    }
    let (routing, state_cfg, config_profiles) = match &args.config {
        None => (AuthRouting::default(), None, Vec::new()),
        Some(path) => {
            let config = super::load_config(path)?;
            // Issue 48: the profiles the config holds in memory
            // (`apiKey: "${VAR}"`, the AWS environment) are the runner's
            // too. A provider block the gateway would refuse is said, and
            // status goes on with the stored profiles.
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let held = match failover_gateway::config_profiles(&display_name(path), &text) {
                Ok(p) => p,
                Err(e) => {
                    eprint!("{e}");
                    Vec::new()
                }
            };
            (
                routing_of(&config).map_err(|e| UsageError(e.to_string()))?,
                config.state,
                held,
            )
        }
    };
    // The config's `state:` block names the backend; without one, the
    // gateway's database when it exists, else the files (issue 13).
    let files = FileStore::open(&args.state, &args.agent).map_err(|e| UsageError(e.to_string()))?;
    // `status` writes nothing: the database is opened read-only.
    let (store, _, snapshot) = open_docs_read_only(state_cfg.as_ref(), &args.state, &args.agent)
        .map_err(|e| UsageError(e.to_string()))?;
    let now = args.now.unwrap_or_else(|| SystemClock.now_ms());
    let mut report = gather(
        store.as_ref(),
        &files,
        &args.state,
        &routing,
        config_profiles,
        now,
    )
    .map_err(|e| UsageError(e.to_string()))?;
    report.snapshot = snapshot;
    // The gateway's client keys (SPEC R18): names, scopes, last use and
    // usage, never a key or a whole hash. A table that cannot be read is
    // said and left out.
    let client_keys: Vec<failover::state::keys::ClientKey> =
        match failover::state::keys::open(state_cfg.as_ref(), &args.state).and_then(|s| s.load()) {
            Ok(t) => {
                let mut v: Vec<_> = t.keys.into_values().collect();
                v.sort_by(|x, y| (&x.name, x.created_ms).cmp(&(&y.name, y.created_ms)));
                v
            }
            Err(e) => {
                eprintln!("warning: client keys: {e}");
                Vec::new()
            }
        };
    if args.json {
        // Ids and names shaped like keys (a profile id that is a pasted
        // key, an order entry, a model) are masked like values (R16.11).
        let mut json = to_json(&report);
        if !client_keys.is_empty() {
            json["clientKeys"] = client_keys
                .iter()
                .map(|k| {
                    json!({
                        "name": k.name, "hint": format!("{}…", k.hint),
                        "state": super::keys::key_state(k, now),
                        "agents": k.agents, "models": k.models, "rpm": k.rpm,
                        "concurrency": k.concurrency, "expiresMs": k.expires_ms,
                        "lastUsedMs": k.last_used_ms, "requests": k.usage.requests,
                        "requestsPerMinute": k.recent.per_minute(now),
                    })
                })
                .collect();
        }
        crate::redact::redact_json(&mut json);
        println!("{}", serde_json::to_string_pretty(&json).expect("JSON"));
    } else {
        let mut text = render(&report);
        if !client_keys.is_empty() {
            let refs: Vec<&_> = client_keys.iter().collect();
            text.push_str("\nclient keys:\n");
            text.push_str(&super::keys::render_list(&refs, now));
        }
        print!("{}", crate::redact::redact(&text));
    }
    Ok(i32::from(!report.problems.is_empty()))
}

/// The `<file>.corrupt-<ms>` copies of damaged state files kept beside
/// them: while one exists, something was damaged and nobody has looked
/// (the live file may even be the damaged one, when the rewrite after the
/// copy failed), so `status` names each and exits 1.
fn quarantined(store: &FileStore) -> Vec<String> {
    let paths = store.paths();
    let mut live: Vec<&std::path::Path> = vec![&paths.profiles, &paths.state, &paths.sessions];
    live.extend(paths.legacy_profiles.as_deref());
    let mut out = Vec::new();
    for file in live {
        let (Some(dir), Some(name)) = (file.parent(), file.file_name()) else {
            continue;
        };
        let prefix = format!("{}.corrupt-", name.to_string_lossy());
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut found: Vec<String> = entries
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&prefix))
            .collect();
        found.sort();
        for n in found {
            out.push(format!(
                "`{}` holds a damaged copy of `{}` kept aside: inspect it, then delete it",
                display_name(&dir.join(&n)),
                display_name(file)
            ));
        }
    }
    out
}

fn gather(
    store: &dyn Store,
    files: &FileStore,
    root: &std::path::Path,
    routing: &AuthRouting,
    held: Vec<(String, failover::state::Profile)>,
    now: u64,
) -> Result<Report, failover::errors::StoreError> {
    let mut profiles = store.load_profiles()?;
    // As the gateway's store does: a stored profile of the same id wins.
    for (id, p) in held {
        profiles.profiles.entry(id).or_insert(p);
    }
    let state = store.load_state()?;
    let sessions = store.load_sessions()?;
    let mut providers: BTreeSet<String> = profiles
        .profiles
        .values()
        .map(|p| normalize_provider(&p.provider))
        .collect();
    providers.extend(state.order.keys().map(|k| normalize_provider(k)));
    // A profile known only from its routing state (its key is in the
    // config, not stored) still names its provider.
    providers.extend(
        state
            .usage_stats
            .keys()
            .filter_map(|id| provider_of_id(id))
            .map(normalize_provider),
    );
    let orders = providers
        .iter()
        .map(|p| order_profiles(routing, &profiles, &state, p, None, now))
        .collect();
    let mut problems: Vec<String> = store
        .take_problems()
        .iter()
        .map(ToString::to_string)
        .collect();
    problems.extend(quarantined(files));
    Ok(Report {
        root: display_name(root),
        agent: store.agent_id().into(),
        now,
        profiles,
        state,
        sessions,
        orders,
        problems,
        snapshot: false,
    })
}

/// One profile row.
struct Row {
    position: String,
    id: String,
    kind: String,
    credential: String,
    state: String,
    errors: String,
    last_used: String,
}

fn when(at: u64, now: u64) -> String {
    if at >= now {
        format!("{} (in {})", format_utc(at), format_span(at - now))
    } else {
        format!("{} ({} ago)", format_utc(at), format_span(now - at))
    }
}

fn block_text(b: &Block, now: u64) -> String {
    match b {
        Block::Cooling {
            until,
            model,
            reason,
        } => {
            let scope = model
                .as_deref()
                .map_or_else(|| "all models".to_string(), |m| format!("model `{m}`"));
            let reason = reason
                .as_deref()
                .map_or(String::new(), |r| format!("; {r}"));
            format!("cooling until {}; {scope}{reason}", when(*until, now))
        }
        Block::Disabled { until, reason } => format!(
            "disabled until {}; {}",
            when(*until, now),
            reason.as_deref().unwrap_or("no reason recorded")
        ),
    }
}

/// The model windows of `stats` active at `now` (R7.3), soonest first.
fn model_windows(stats: Option<&UsageStats>, now: u64) -> Vec<ModelWindow<'_>> {
    let mut w: Vec<ModelWindow<'_>> = stats
        .map(|s| s.model_windows().filter(|w| w.until > now).collect())
        .unwrap_or_default();
    w.sort_by_key(|w| (w.until, w.model));
    w
}

/// A profile's state for the table: its block (model unknown), and when
/// only models are cooling, every one of them (sibling models run).
fn state_text(stats: Option<&UsageStats>, now: u64) -> String {
    let block = stats.and_then(|s| block_for(s, None, now));
    let models = model_windows(stats, now);
    let list = || {
        models
            .iter()
            .map(|w| {
                let reason = w.reason.map_or(String::new(), |r| format!("; {r}"));
                format!("`{}` until {}{reason}", w.model, when(w.until, now))
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    match block {
        None => "ok".into(),
        Some(Block::Cooling { model: Some(_), .. }) => format!(
            "cooling {} model{} (others usable): {}",
            models.len(),
            if models.len() == 1 { "" } else { "s" },
            list()
        ),
        Some(b) if models.is_empty() => block_text(&b, now),
        Some(b) => format!("{}; models cooling: {}", block_text(&b, now), list()),
    }
}

fn rows(r: &Report, order: &ProfileOrder) -> Vec<Row> {
    let mut out = Vec::new();
    let mut push = |position: String, id: &str, state: String| {
        let profile = r.profiles.profiles.get(id);
        let stats = r.state.stats(id);
        out.push(Row {
            position,
            id: id.into(),
            kind: profile.map_or("-".into(), |p| p.kind().name().into()),
            credential: profile
                .and_then(|p| p.credential.primary_secret())
                .map_or_else(|| "-".into(), |s| s.masked()),
            state,
            errors: stats.map_or(0, |s| s.error_count).to_string(),
            last_used: stats
                .and_then(|s| s.last_used)
                .map_or_else(|| "never".into(), |t| when(t, r.now)),
        });
    };
    for (i, e) in order.entries.iter().enumerate() {
        // Model unknown here: model windows show with their models.
        let state = state_text(r.state.stats(&e.id), r.now);
        push((i + 1).to_string(), &e.id, state);
    }
    for x in &order.excluded {
        let why = match x {
            Excluded::Unusable { why, .. } => why.to_string(),
            other => other.to_string(),
        };
        push("-".into(), x.id(), format!("not used: {why}"));
    }
    for id in left_out(r, order) {
        push(
            "-".into(),
            id,
            format!("not used: not in {}", order.source.describe()),
        );
    }
    for id in state_only(r, order) {
        let state = format!(
            "{} (key not stored: the config's `apiKey` or the environment; --config shows it in the order)",
            state_text(r.state.stats(id), r.now)
        );
        push("-".into(), id, state);
    }
    out
}

/// Profiles of the order's provider known only from their routing state
/// (`usageStats`): a key the config holds in memory (`apiKey: "${VAR}"`,
/// the AWS environment) when `status` was not given the config.
fn state_only<'r>(r: &'r Report, order: &ProfileOrder) -> Vec<&'r str> {
    r.state
        .usage_stats
        .keys()
        .filter(|id| {
            !r.profiles.profiles.contains_key(id.as_str())
                && provider_of_id(id).map(normalize_provider).as_deref() == Some(&order.provider)
                && order.position(id).is_none()
                && !order.excluded.iter().any(|x| x.id() == id.as_str())
        })
        .map(String::as_str)
        .collect()
}

/// Stored profiles of the order's provider that an explicit order or the
/// config's profile list leaves out: never tried.
fn left_out<'r>(r: &'r Report, order: &ProfileOrder) -> Vec<&'r str> {
    // Sets: a scan of the order per stored profile took 47 s for 150,000.
    let listed: std::collections::HashSet<&str> = order
        .entries
        .iter()
        .map(|e| e.id.as_str())
        .chain(order.excluded.iter().map(|x| x.id()))
        .collect();
    r.profiles
        .profiles
        .iter()
        .filter(|(id, p)| {
            normalize_provider(&p.provider) == order.provider && !listed.contains(id.as_str())
        })
        .map(|(id, _)| id.as_str())
        .collect()
}

fn table(header: [&str; 7], rows: &[Row]) -> String {
    let cells: Vec<[&str; 7]> = rows
        .iter()
        .map(|r| {
            [
                r.position.as_str(),
                &r.id,
                &r.kind,
                &r.credential,
                &r.state,
                &r.errors,
                &r.last_used,
            ]
        })
        .collect();
    let mut width = header.map(|h| h.chars().count());
    for c in &cells {
        for (w, s) in width.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    let line = |c: &[&str; 7]| {
        let mut s = String::from("  ");
        for (i, (cell, w)) in c.iter().zip(width).enumerate() {
            s.push_str(cell);
            if i + 1 < c.len() {
                s.push_str(&" ".repeat(w - cell.chars().count() + 2));
            }
        }
        s.push('\n');
        s
    };
    let mut out = line(&header);
    for c in &cells {
        out.push_str(&line(c));
    }
    out
}

fn render(r: &Report) -> String {
    let mut out = format!(
        "state `{}`, agent `{}`, at {}\n",
        r.root,
        r.agent,
        format_utc(r.now)
    );
    if r.snapshot {
        out.push_str("read-only: the state cannot be written here, so its database was read as a snapshot (as last checkpointed)\n");
    }
    out.push_str("\nprofiles\n");
    if r.orders.is_empty() {
        out.push_str("  (none stored)\n");
    }
    for order in &r.orders {
        let disabled = if order.is_disabled() {
            "; disabled by an empty order"
        } else {
            ""
        };
        out.push_str(&format!(
            "\n{} ({}{disabled})\n",
            order.provider,
            order.source.describe()
        ));
        if !order.is_disabled() {
            out.push_str(&table(
                [
                    "#",
                    "PROFILE",
                    "TYPE",
                    "CREDENTIAL",
                    "STATE",
                    "ERRORS",
                    "LAST USED",
                ],
                &rows(r, order),
            ));
        }
    }
    out.push_str("\nsessions\n");
    let with_overrides: Vec<(&String, &SessionEntry)> = r
        .sessions
        .entries
        .iter()
        .filter(|(_, e)| e.has_overrides())
        .collect();
    if with_overrides.is_empty() {
        out.push_str("  (no overrides)\n");
    }
    for (key, e) in with_overrides {
        out.push_str(&format!("  {key}\n"));
        for (label, value) in session_lines(e) {
            out.push_str(&format!("    {label:<9} {value}\n"));
        }
    }
    if !r.problems.is_empty() {
        out.push_str("\nproblems\n");
        for p in &r.problems {
            out.push_str(&format!("  warning: {p}\n"));
        }
    }
    out
}

fn session_lines(e: &SessionEntry) -> Vec<(&'static str, String)> {
    let mut lines = Vec::new();
    if e.model_override.is_some() || e.provider_override.is_some() {
        let model = match (&e.provider_override, &e.model_override) {
            (Some(p), Some(m)) => format!("{p}/{m}"),
            (None, Some(m)) => m.clone(),
            (Some(p), None) => format!("{p}/(default)"),
            (None, None) => unreachable!(),
        };
        let source = e
            .model_override_source()
            .map_or("provider only", |s| s.name());
        let origin = match (
            &e.model_override_fallback_origin_provider,
            &e.model_override_fallback_origin_model,
        ) {
            (Some(p), Some(m)) => format!("; fallback from {p}/{m}"),
            (None, Some(m)) => format!("; fallback from {m}"),
            _ => String::new(),
        };
        lines.push(("model", format!("{model} ({source}{origin})")));
    }
    if let Some(p) = &e.auth_profile_override {
        let source = e.auth_profile_override_source().map_or("", |s| s.name());
        let at = e
            .auth_profile_override_compaction_count
            .map_or(String::new(), |c| format!(", at compaction {c}"));
        lines.push(("profile", format!("{p} ({source}{at})")));
    }
    if let Some(c) = e.compaction_count {
        lines.push(("compacted", c.to_string()));
    }
    if let (Some(sel), Some(act)) = (
        &e.fallback_notice_selected_model,
        &e.fallback_notice_active_model,
    ) {
        let reason = e
            .fallback_notice_reason
            .as_deref()
            .map_or(String::new(), |r| format!("; {r}"));
        lines.push(("notice", format!("{act} (selected {sel}{reason})")));
    }
    lines
}

fn to_json(r: &Report) -> Value {
    let providers: Vec<Value> = r
        .orders
        .iter()
        .map(|order| {
            let mut profiles: Vec<Value> = Vec::new();
            for (i, e) in order.entries.iter().enumerate() {
                let block = r.state.stats(&e.id).and_then(|s| block_for(s, None, r.now));
                let mut v = profile_json(r, &e.id);
                v["position"] = json!(i + 1);
                match block {
                    None => v["state"] = json!("ok"),
                    Some(Block::Cooling {
                        until,
                        model,
                        reason,
                    }) => {
                        v["state"] = json!("cooling");
                        v["until"] = json!(until);
                        v["model"] = json!(model);
                        v["reason"] = json!(reason);
                    }
                    Some(Block::Disabled { until, reason }) => {
                        v["state"] = json!("disabled");
                        v["until"] = json!(until);
                        v["reason"] = json!(reason);
                    }
                }
                // R7.3: every model cooling on this profile, soonest first.
                let models = model_windows(r.state.stats(&e.id), r.now);
                if !models.is_empty() {
                    v["models"] = models
                        .iter()
                        .map(|w| {
let count = r.state.stats(&e.id).map(|s| {
                                // A window in the original's fields counts with the profile's.
                                s.model_cooldowns
                                    .get(w.model)
                                    .map_or(s.error_count.max(1), |c| c.error_count)
                            });
                            json!({"model": w.model, "until": w.until, "reason": w.reason, "errorCount": count})
                        })
                        .collect();
                }
                profiles.push(v);
            }
            for x in &order.excluded {
                let mut v = profile_json(r, x.id());
                v["state"] = json!("not_used");
                v["why"] = json!(x.to_string());
                profiles.push(v);
            }
            for id in left_out(r, order) {
                let mut v = profile_json(r, id);
                v["state"] = json!("not_used");
                v["why"] = json!(format!("not in {}", order.source.describe()));
                profiles.push(v);
            }
            for id in state_only(r, order) {
                let mut v = profile_json(r, id);
                v["state"] = json!(match r.state.stats(id).and_then(|s| block_for(s, None, r.now)) {
                    None => "ok",
                    Some(Block::Cooling { .. }) => "cooling",
                    Some(Block::Disabled { .. }) => "disabled",
                });
                v["stored"] = json!(false);
                v["why"] = json!("key not stored: the config's `apiKey` or the environment; --config shows it in the order");
                profiles.push(v);
            }
            json!({
                "provider": order.provider,
                "orderSource": order.source.describe(),
                "disabled": order.is_disabled(),
                "profiles": profiles,
            })
        })
        .collect();
    let sessions: serde_json::Map<String, Value> = r
        .sessions
        .entries
        .iter()
        .filter(|(_, e)| e.has_overrides())
        .map(|(k, e)| {
            (
                k.clone(),
                json!({
                    "providerOverride": e.provider_override,
                    "modelOverride": e.model_override,
                    "modelOverrideSource": e.model_override_source().map(|s| s.name()),
                    "modelOverrideFallbackOriginProvider": e.model_override_fallback_origin_provider,
                    "modelOverrideFallbackOriginModel": e.model_override_fallback_origin_model,
                    "authProfileOverride": e.auth_profile_override,
                    "authProfileOverrideSource": e.auth_profile_override_source().map(|s| s.name()),
                    "authProfileOverrideCompactionCount": e.auth_profile_override_compaction_count,
                    "compactionCount": e.compaction_count,
                }),
            )
        })
        .collect();
    json!({
        "state": r.root,
        "agent": r.agent,
        "now": r.now,
        "providers": providers,
        "sessions": sessions,
        "problems": r.problems,
        "readOnlySnapshot": r.snapshot,
    })
}

fn profile_json(r: &Report, id: &str) -> Value {
    let profile = r.profiles.profiles.get(id);
    let stats = r.state.stats(id);
    json!({
        "id": id,
        "type": profile.map(|p| p.kind().name()),
        "credential": profile.and_then(|p| p.credential.primary_secret()).map(|s| s.masked()),
        "email": profile.and_then(|p| p.email.clone()),
        "errorCount": stats.map_or(0, |s| s.error_count),
        "lastUsed": stats.and_then(|s| s.last_used),
        "lastFailureAt": stats.and_then(|s| s.last_failure_at),
    })
}
