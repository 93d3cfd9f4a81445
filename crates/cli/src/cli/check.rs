//! `failover check`: parse, validate and lint; rustc-style diagnostics.

use clap::Args;

use super::{CmdResult, RulesArgs};
use crate::diag::render_all;
use failover::rules as load;

#[derive(Args, Debug)]
pub(super) struct CheckArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
    /// Exit 1 on warnings too.
    #[arg(long)]
    pub deny_warnings: bool,
    /// Also print the matcher plan: how each rule is reached (atoms,
    /// provider/code/type/status tables, or every message).
    #[arg(long)]
    pub plan: bool,
    /// Print one JSON document (schema `failover.check/1`, docs/json.md)
    /// instead of the rendered diagnostics.
    #[arg(long, conflicts_with = "plan")]
    pub json: bool,
}

/// The version of the `failover check --json` document (`schema`); bumped
/// only when a field changes meaning or goes away (new fields may appear).
pub(super) const CHECK_JSON_SCHEMA: &str = "failover.check/1";

pub(super) fn run(args: &CheckArgs) -> CmdResult {
    let build = load::build(&args.rules.dirs, !args.rules.no_defaults)?;
    let errors = build.diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = build.diagnostics.len() - errors;
    let failed = errors > 0 || (args.deny_warnings && warnings > 0);
    if args.json {
        let (rules, reasons) = (build.rule_count(), build.reason_count());
        let doc = serde_json::json!({
            "schema": CHECK_JSON_SCHEMA,
            "ok": !failed,
            "files": build.sources.len(),
            "rules": rules,
            "reasons": reasons,
            "errors": errors,
            "warnings": warnings,
            "diagnostics": build
                .diagnostics
                .iter()
                .map(|d| crate::diag::to_json(d, &build.sources))
                .collect::<Vec<_>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
        return Ok(i32::from(failed));
    }
    if build.diagnostics.is_empty() {
        let (rules, reasons) = (build.rule_count(), build.reason_count());
        println!(
            "ok: {} file{}, {} rule{}, {} reason{}; no problems",
            build.sources.len(),
            plural(build.sources.len()),
            rules,
            plural(rules),
            reasons,
            plural(reasons)
        );
    } else {
        print!(
            "{}",
            super::paint_diagnostics_to(&render_all(&build.diagnostics, &build.sources), false)
        );
    }
    if args.plan {
        if let Some(plan) = build.render_plan() {
            println!();
            print!("{plan}");
        }
    }
    Ok(i32::from(failed))
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
