//! `failover check`: parse, validate and lint; rustc-style diagnostics.

use clap::Args;

use super::{CmdResult, RulesArgs};
use crate::diag::render_all;
use crate::load;

#[derive(Args, Debug)]
pub struct CheckArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
    /// Exit 1 on warnings too.
    #[arg(long)]
    pub deny_warnings: bool,
    /// Also print the matcher plan: how each rule is reached (atoms,
    /// provider/code/type/status tables, or every message).
    #[arg(long)]
    pub plan: bool,
}

pub fn run(args: &CheckArgs) -> CmdResult {
    let mut build = load::build(&args.rules.dirs, !args.rules.no_defaults)?;
    let errors = build.diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = build.diagnostics.len() - errors;
    if build.diagnostics.is_empty() {
        let (rules, reasons) = build
            .ruleset
            .as_ref()
            .map_or((0, 0), |r| (r.rules.len(), r.reasons.len()));
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
        print!("{}", render_all(&build.diagnostics, &build.sources));
    }
    if args.plan {
        if let Some(rs) = build.ruleset.as_mut() {
            println!();
            print!(
                "{}",
                crate::compile::plan::render(
                    &crate::compile::Plan::build(&mut rs.rules),
                    &rs.rules
                )
            );
        }
    }
    Ok(if errors > 0 || (args.deny_warnings && warnings > 0) {
        1
    } else {
        0
    })
}

pub(crate) fn plural(n: usize) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
