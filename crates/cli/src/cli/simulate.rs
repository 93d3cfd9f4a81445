//! `failover simulate SCENARIO.yaml`: the real runner against scripted
//! provider outcomes on a virtual clock (see `run::scenario`).

use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;

use super::UsageError;
use super::{load_engine, CmdResult, RulesArgs};
use failover::scenario::{render, simulate_file, to_json};

#[derive(Args, Debug)]
pub(super) struct SimulateArgs {
    /// The scenario file (YAML).
    pub scenario: PathBuf,
    #[command(flatten)]
    pub rules: RulesArgs,
    /// Print the timeline as one JSON document.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: &SimulateArgs) -> CmdResult {
    let engine = Arc::new(load_engine(&args.rules)?);
    let report = simulate_file(&args.scenario, engine).map_err(|e| UsageError(e.0))?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&to_json(&report)).expect("JSON serialises")
        );
    } else {
        print!("{}", render(&report));
    }
    Ok(if report.mismatches() == 0 { 0 } else { 1 })
}
