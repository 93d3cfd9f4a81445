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
    /// Check this gateway config instead of the rules: every problem
    /// `serve` would meet, at once, each with its code, key path and
    /// position (the `${VAR}` keys are resolved from this environment).
    #[arg(long, value_name = "FILE", conflicts_with = "plan")]
    pub config: Option<std::path::PathBuf>,
}

/// The version of the `failover check --json` document (`schema`); bumped
/// only when a field changes meaning or goes away (new fields may appear).
pub(super) const CHECK_JSON_SCHEMA: &str = "failover.check/1";

pub(super) fn run(args: &CheckArgs) -> CmdResult {
    if let Some(config) = &args.config {
        return Ok(config_report(config, args.json, args.deny_warnings));
    }
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
            print!("{}", layer_costs(&args.rules)?);
        }
    }
    Ok(i32::from(failed))
}

/// What each layer adds to start-up (issue 47): the compile `classify`
/// and `serve` run (no lints), built up one layer at a time — the
/// defaults, then each `--rules` directory — best of three each, and the
/// model's loading.
fn layer_costs(rules: &RulesArgs) -> Result<String, super::Stop> {
    use std::fmt::Write as _;
    use std::time::{Duration, Instant};
    let best = |dirs: &[std::path::PathBuf]| -> Result<(Duration, usize, bool), super::Stop> {
        let mut best = Duration::MAX;
        let (mut count, mut frozen) = (0, false);
        for _ in 0..3 {
            let t = Instant::now();
            let build = load::build_unlinted(dirs, !rules.no_defaults)?;
            (count, frozen) = (build.rule_count(), build.is_frozen());
            let engine = failover::Engine::from_build(build);
            best = best.min(t.elapsed());
            drop(engine);
        }
        Ok((best, count, frozen))
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut out = String::from(
        "\nstart-up cost (compiling as `classify` and `serve` do, one layer at a time, best of 3):\n",
    );
    let (mut before, mut rules_before) = if rules.no_defaults {
        (Duration::ZERO, 0)
    } else {
        // Compiled ahead of time and read back (the library's
        // `compile::frozen`) when they are used alone.
        let (t, n, frozen) = best(&[])?;
        let name = if frozen {
            "defaults (frozen)"
        } else {
            "defaults"
        };
        let _ = writeln!(out, "  {name:<24}{:>8.1} ms  ({n} rules)", ms(t));
        if frozen && !rules.dirs.is_empty() {
            out.push_str("  (with an operator layer the defaults compile with it)\n");
        }
        (t, n)
    };
    for i in 0..rules.dirs.len() {
        let (t, n, _) = best(&rules.dirs[..=i])?;
        let name = crate::syntax::display_name(&rules.dirs[i]);
        let _ = writeln!(
            out,
            "  + {name:<22} {:>+7.1} ms  (+{} rules)",
            ms(t.saturating_sub(before)),
            n.saturating_sub(rules_before)
        );
        (before, rules_before) = (t, n);
    }
    if let Some((model, _)) = rules.model()? {
        // Read again, as a start reads it (the embedded one is cached).
        let t = Instant::now();
        let again = match &rules.model {
            Some(path) => failover::evidence::read_file(path).is_ok(),
            None => {
                failover::evidence::Model::from_bytes(failover::evidence::BUILTIN_MODEL).is_ok()
            }
        };
        let took = t.elapsed();
        if again {
            let _ = writeln!(
                out,
                "  the model{:>23.1} ms  ({} reasons)",
                ms(took),
                model.reasons().len()
            );
        }
    }
    Ok(out)
}

/// `check --config` and `serve --check`: the config's problems, rendered
/// or as the `failover.check/1` document; exit 1 on an error (or, with
/// `deny_warnings`, a warning).
pub(super) fn config_report(path: &std::path::Path, json: bool, deny_warnings: bool) -> i32 {
    let c = failover_gateway::check_config(path);
    let errors = c.errors();
    let warnings = c.problems.len() - errors;
    let failed = errors > 0 || (deny_warnings && warnings > 0);
    if json {
        let mut sources = failover::errors::SourceMap::new();
        let file = sources.add(c.name.as_str(), c.text.as_str());
        let doc = serde_json::json!({
            "schema": CHECK_JSON_SCHEMA,
            "ok": !failed,
            "files": 1,
            "errors": errors,
            "warnings": warnings,
            "diagnostics": c
                .problems
                .iter()
                .map(|p| crate::diag::to_json(&p.to_diagnostic(&sources, file), &sources))
                .collect::<Vec<_>>(),
            "notes": c.notes.iter().map(|(k, v)| (k.clone(), serde_json::Value::from(v.as_str()))).collect::<serde_json::Map<_, _>>(),
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        if c.problems.is_empty() {
            println!("ok: config `{}`; no problems", c.name);
        } else {
            print!("{}", super::paint_diagnostics_to(&c.render(), false));
        }
        for (k, v) in &c.notes {
            println!("note: {k}: {v}");
        }
    }
    i32::from(failed)
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
    let weak = match build.weak_rules() {
        w if w.is_empty() => "none".to_string(),
        w => w.join(", "),
    };
    match rules.model()? {
        Some((model, threshold)) => {
            let what = match &rules.model {
                Some(p) => crate::syntax::display_name(p),
                None => "the embedded model".into(),
            };
            let _ = writeln!(
                out,
                "  2. otherwise (or where a weak rule holds: {weak}) {what} ({} reasons, trained on {} labelled errors) decides when its top reason differs and its probability reaches {}",
                model.reasons().len(),
                model.trained().items,
                match threshold {
                    failover::evidence::Confidence::Min(t) => format!("minConfidence {t:.2}"),
                    failover::evidence::Confidence::Costs =>
                        "its threshold over that verdict (from the cost of each mistake, docs/model.md)".into(),
                }
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
