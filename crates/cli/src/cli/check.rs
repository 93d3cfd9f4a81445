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
            print!("{}", precedence(&build, &args.rules)?);
        }
    }
    Ok(i32::from(failed))
}

/// The precedence of a verdict (docs/model.md), with this build's numbers.
fn precedence(build: &failover::rules::Build, rules: &RulesArgs) -> Result<String, super::Stop> {
    use std::fmt::Write as _;
    let status = build.status_rules();
    let mut out = String::from("\nprecedence of a verdict:\n");
    let _ = writeln!(
        out,
        "  1. a text rule (testing message, body, code or type): {} of {} rules; the first that holds decides",
        build.rule_count() - status.len(),
        build.rule_count()
    );
    match rules.model()? {
        Some((model, threshold)) => {
            let what = match &rules.model {
                Some(p) => crate::syntax::display_name(p),
                None => "the embedded model".into(),
            };
            let _ = writeln!(
                out,
                "  2. otherwise {what} ({} reasons, trained on {} labelled errors) decides when its top reason has p >= {threshold:.2}",
                model.reasons().len(),
                model.trained().items
            );
        }
        None => {
            let _ = writeln!(
                out,
                "  2. (no model: --no-model, or --no-defaults without --model)"
            );
        }
    }
    let _ = writeln!(
        out,
        "  3. otherwise a status rule (status and/or provider only; {}): {}",
        status.len(),
        status.join(", ")
    );
    let _ = writeln!(out, "  4. otherwise `unclassified`");
    Ok(out)
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
