//! `failover keys`: the gateway's client keys (SPEC R18). Thin: flags to
//! the key table of the state backend, keys made by the gateway crate.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use serde_json::json;

use super::{CmdResult, Stop, UsageError};
use failover::state::keys::{ClientKey, KeyStore};
use failover::StateConfig;

/// How long a rotated key keeps working by default (R18.7): a day lets
/// every client of a fleet pick up the new key on its next deploy.
const DEFAULT_GRACE: &str = "24h";

#[derive(Args, Debug)]
pub(super) struct KeysArgs {
    #[command(subcommand)]
    pub command: KeysCommand,
}

#[derive(Subcommand, Debug)]
pub(super) enum KeysCommand {
    /// Create a key: printed once (the last line of output), stored as its hash.
    Create(CreateArgs),
    /// List the keys: names, scopes, limits, last use, usage (never a key).
    List(ListArgs),
    /// Revoke every key of a name, at once.
    Revoke(NameArgs),
    /// Replace a key: a new key of the same name and scopes; the old one
    /// works for the grace period.
    Rotate(RotateArgs),
}

#[derive(Args, Debug)]
pub(super) struct Where {
    /// The state directory the gateway serves with.
    #[arg(long = "state", value_name = "DIR")]
    pub state: PathBuf,
    /// The gateway config whose `state:` block names the backend
    /// (default: SQLite under `--state`).
    #[arg(long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
}

#[derive(Args, Debug)]
pub(super) struct CreateArgs {
    #[command(flatten)]
    pub at: Where,
    /// The key's name: what logs, metrics and errors show (letters,
    /// digits, `.`, `_`, `-`; at most 64).
    #[arg(long, value_name = "NAME")]
    pub name: String,
    /// An agent the key may use (repeatable; default: any).
    #[arg(long = "agent", value_name = "ID")]
    pub agents: Vec<String>,
    /// A model name the key may request, `*` matching any run of
    /// characters (repeatable; default: any).
    #[arg(long = "model", value_name = "PATTERN")]
    pub models: Vec<String>,
    /// Requests per minute, per gateway replica.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub rpm: Option<u32>,
    /// Requests at once, per gateway replica.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: Option<u32>,
    /// When the key stops working: a duration (`90d`, `12h`, `30m`) or a
    /// UTC date (`2027-01-31`).
    #[arg(long, value_name = "DURATION|DATE")]
    pub expires: Option<String>,
    /// Print one JSON document (the key in its `key` field).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(super) struct ListArgs {
    #[command(flatten)]
    pub at: Where,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
pub(super) struct NameArgs {
    #[command(flatten)]
    pub at: Where,
    /// The key's name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Args, Debug)]
pub(super) struct RotateArgs {
    #[command(flatten)]
    pub at: Where,
    /// The key's name.
    #[arg(value_name = "NAME")]
    pub name: String,
    /// How long the old key keeps working (`0s`: not at all).
    #[arg(long, value_name = "DURATION", default_value = DEFAULT_GRACE)]
    pub grace: String,
    /// Print one JSON document (the new key in its `key` field).
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: &KeysArgs) -> CmdResult {
    match &args.command {
        KeysCommand::Create(a) => create(a),
        KeysCommand::List(a) => list(a),
        KeysCommand::Revoke(a) => revoke(a),
        KeysCommand::Rotate(a) => rotate(a),
    }
}

fn now_ms() -> u64 {
    failover::time::Clock::now_ms(&failover::time::SystemClock)
}

fn open(at: &Where) -> Result<std::sync::Arc<dyn KeyStore>, Stop> {
    let cfg: Option<StateConfig> = match &at.config {
        None => None,
        Some(path) => super::load_config(path)?.state,
    };
    if at.state.exists() && !at.state.is_dir() {
        return Err(UsageError(format!(
            "state `{}` is not a directory",
            crate::syntax::display_name(&at.state)
        ))
        .into());
    }
    failover::state::keys::open(cfg.as_ref(), &at.state).map_err(|e| fail(&e))
}

fn fail(e: &dyn std::fmt::Display) -> Stop {
    eprintln!("error: client keys: {e}");
    Stop::Reported(1)
}

/// `12h`, `30m`, `90d`, `45s` (a whole number and one unit).
pub(super) fn parse_duration(s: &str) -> Option<u64> {
    let s = s.trim();
    let unit = s.chars().last()?;
    let n: u64 = s[..s.len() - unit.len_utf8()].parse().ok()?;
    let per = match unit {
        's' => 1_000,
        'm' => 60_000,
        'h' => 3_600_000,
        'd' => 86_400_000,
        _ => return None,
    };
    n.checked_mul(per)
}

/// `YYYY-MM-DD` as UTC midnight, in ms since the epoch.
fn parse_date(s: &str) -> Option<u64> {
    let mut it = s.trim().splitn(3, '-');
    let y: i64 = it.next()?.parse().ok()?;
    let m: i64 = it.next()?.parse().ok()?;
    let d: i64 = it.next()?.parse().ok()?;
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // A day past the month's end (`2027-02-31`) is refused.
    let back = failover::time::civil_from_days(days);
    (back == (y, m as u32, d as u32)).then(|| days as u64 * 86_400_000)
}

fn valid_name(n: &str) -> bool {
    !n.is_empty()
        && n.len() <= 64
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn create(a: &CreateArgs) -> CmdResult {
    if !valid_name(&a.name) {
        return Err(UsageError(format!(
            "invalid key name `{}`: use 1 to 64 letters, digits, `.`, `_` or `-`",
            a.name.chars().take(80).collect::<String>()
        ))
        .into());
    }
    let now = now_ms();
    let expires_ms = match &a.expires {
        None => None,
        Some(s) => Some(
            parse_duration(s)
                .map(|d| now.saturating_add(d))
                .or_else(|| parse_date(s))
                .ok_or_else(|| {
                    UsageError(format!(
                        "--expires `{s}`: expected a duration (`90d`, `12h`, `30m`) or a date (`2027-01-31`)"
                    ))
                })?,
        ),
    };
    if expires_ms.is_some_and(|e| e <= now) {
        return Err(UsageError("--expires is in the past".into()).into());
    }
    let store = open(&a.at)?;
    let new = failover_gateway::generate_key().map_err(|e| fail(&e))?;
    let mut rec = ClientKey::new(&a.name, &new.hint, now);
    rec.agents = a.agents.clone();
    rec.models = a.models.clone();
    rec.rpm = a.rpm;
    rec.concurrency = a.concurrency;
    rec.expires_ms = expires_ms;
    let taken = store
        .update(|t| {
            if t.current(&a.name).is_some() {
                return true;
            }
            t.keys.insert(new.hash.clone(), rec.clone());
            false
        })
        .map_err(|e| fail(&e))?;
    if taken {
        eprintln!(
            "error: a key named `{}` exists: `failover keys rotate {}` replaces it, `failover keys revoke {}` ends it",
            a.name, a.name, a.name
        );
        return Ok(1);
    }
    show_new(&rec, new.key.expose(), &store.location(), a.json, "created");
    Ok(0)
}

/// The new key's record, then the key alone on the last line (or as the
/// `key` field of one JSON document).
fn show_new(rec: &ClientKey, key: &str, at: &str, json: bool, verb: &str) {
    if json {
        let mut v = record_json(rec, rec.created_ms);
        v["key"] = json!(key);
        v["store"] = json!(at);
        println!("{v}");
        return;
    }
    println!("{verb} client key `{}` in {at}", rec.name);
    println!("  {}", scopes(rec));
    println!(
        "the key (shown this once; clients send it as `Authorization: Bearer` or `x-api-key`):"
    );
    println!("{key}");
}

fn scopes(k: &ClientKey) -> String {
    let list = |xs: &[String]| {
        if xs.is_empty() {
            "any".to_string()
        } else {
            xs.join(", ")
        }
    };
    let lim = |x: Option<u32>| x.map_or("no limit".to_string(), |n| n.to_string());
    format!(
        "agents: {}; models: {}; rpm: {}; concurrency: {}; expires: {}",
        list(&k.agents),
        list(&k.models),
        lim(k.rpm),
        lim(k.concurrency),
        k.expires_ms
            .map_or("never".to_string(), failover::time::format_utc)
    )
}

fn record_json(k: &ClientKey, now: u64) -> serde_json::Value {
    json!({
        "name": k.name,
        "hint": format!("{}…", k.hint),
        "agents": k.agents,
        "models": k.models,
        "rpm": k.rpm,
        "concurrency": k.concurrency,
        "createdMs": k.created_ms,
        "expiresMs": k.expires_ms,
        "revokedMs": k.revoked_ms,
        "rotatedMs": k.rotated_ms,
        "lastUsedMs": k.last_used_ms,
        "requestsPerMinute": k.recent.per_minute(now),
        "usage": {
            "requests": k.usage.requests,
            "promptTokens": k.usage.prompt_tokens,
            "completionTokens": k.usage.completion_tokens,
        },
    })
}

/// `active`, `grace` (rotated, still working), `expired`, `revoked`.
pub(super) fn key_state(k: &ClientKey, now: u64) -> &'static str {
    match k.usable(now) {
        Err(failover::state::keys::KeyRefusal::Revoked) => "revoked",
        Err(failover::state::keys::KeyRefusal::Expired) => "expired",
        Ok(()) if k.rotated_ms.is_some() => "grace",
        Ok(()) => "active",
    }
}

fn list(a: &ListArgs) -> CmdResult {
    let store = open(&a.at)?;
    let table = store.load().map_err(|e| fail(&e))?;
    let now = now_ms();
    let mut keys: Vec<&ClientKey> = table.keys.values().collect();
    keys.sort_by(|x, y| (&x.name, x.created_ms).cmp(&(&y.name, y.created_ms)));
    if a.json {
        let list: Vec<serde_json::Value> = keys
            .iter()
            .map(|k| {
                let mut v = record_json(k, now);
                v["state"] = json!(key_state(k, now));
                v
            })
            .collect();
        println!("{}", json!({"store": store.location(), "keys": list}));
        return Ok(0);
    }
    if keys.is_empty() {
        println!(
            "no client keys in {} (failover keys create)",
            store.location()
        );
        return Ok(0);
    }
    print!("{}", render_list(&keys, now));
    Ok(0)
}

/// The human listing, one block per key (also `failover status`'s).
pub(super) fn render_list(keys: &[&ClientKey], now: u64) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    for k in keys {
        let _ = writeln!(
            out,
            "{} ({}…) {}: created {}, last used {}",
            k.name,
            k.hint,
            key_state(k, now),
            failover::time::format_utc(k.created_ms),
            k.last_used_ms
                .map_or("never".to_string(), failover::time::format_utc)
        );
        let _ = writeln!(out, "  {}", scopes(k));
        let _ = writeln!(
            out,
            "  usage: {} requests ({}/min now), {} prompt and {} completion tokens",
            k.usage.requests,
            k.recent.per_minute(now),
            k.usage.prompt_tokens,
            k.usage.completion_tokens
        );
    }
    out
}

fn revoke(a: &NameArgs) -> CmdResult {
    let store = open(&a.at)?;
    let now = now_ms();
    let n = store
        .update(|t| {
            let mut n = 0;
            for k in t.keys.values_mut() {
                if k.name == a.name && k.revoked_ms.is_none() {
                    k.revoked_ms = Some(now);
                    n += 1;
                }
            }
            n
        })
        .map_err(|e| fail(&e))?;
    if n == 0 {
        eprintln!("error: no live key named `{}` (failover keys list)", a.name);
        return Ok(1);
    }
    println!(
        "revoked client key `{}` ({n} key{}); every gateway replica refuses it within a second (on Redis, at once)",
        a.name,
        if n == 1 { "" } else { "s" }
    );
    Ok(0)
}

fn rotate(a: &RotateArgs) -> CmdResult {
    let grace = parse_duration(&a.grace).ok_or_else(|| {
        UsageError(format!(
            "--grace `{}`: expected a duration (`24h`, `30m`, `0s`)",
            a.grace
        ))
    })?;
    let store = open(&a.at)?;
    let new = failover_gateway::generate_key().map_err(|e| fail(&e))?;
    let now = now_ms();
    let made = store
        .update(|t| {
            let (old_hash, old) = t.current(&a.name)?;
            let (old_hash, mut old) = (old_hash.clone(), old.clone());
            let mut rec = ClientKey::new(&a.name, &new.hint, now);
            rec.agents = old.agents.clone();
            rec.models = old.models.clone();
            rec.rpm = old.rpm;
            rec.concurrency = old.concurrency;
            rec.expires_ms = old.expires_ms;
            old.rotated_ms = Some(now);
            let end = now.saturating_add(grace);
            old.expires_ms = Some(old.expires_ms.map_or(end, |e| e.min(end)));
            t.keys.insert(old_hash, old);
            t.keys.insert(new.hash.clone(), rec.clone());
            Some(rec)
        })
        .map_err(|e| fail(&e))?;
    let Some(rec) = made else {
        eprintln!("error: no live key named `{}` (failover keys list)", a.name);
        return Ok(1);
    };
    if !a.json {
        println!(
            "the old key of `{}` works until {}",
            a.name,
            failover::time::format_utc(now.saturating_add(grace))
        );
    }
    show_new(&rec, new.key.expose(), &store.location(), a.json, "rotated");
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_dates() {
        assert_eq!(parse_duration("12h"), Some(12 * 3_600_000));
        assert_eq!(parse_duration("0s"), Some(0));
        assert_eq!(parse_duration("90d"), Some(90 * 86_400_000));
        assert_eq!(parse_duration("h"), None);
        assert_eq!(parse_duration("5w"), None);
        assert_eq!(parse_date("1970-01-02"), Some(86_400_000));
        assert_eq!(parse_date("2027-01-31"), Some(1_801_353_600_000));
        assert_eq!(parse_date("2027-02-31"), None);
        assert!(valid_name("ci-bot.1") && !valid_name("a b") && !valid_name(""));
    }
}
