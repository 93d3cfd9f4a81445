//! `failover test`: run the golden cases, print the per-reason and
//! per-rule table, fail on any miss or on a rule no case decides.

use clap::Args;

use super::{load_engine, CmdResult, RulesArgs};
use crate::golden::{self, CaseFile};
use crate::load::{self, UsageError};
use crate::syntax::display_name;

#[derive(Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
}

/// The cases of the layers in use: each operator directory's
/// `*.cases.yaml`, then the embedded defaults' cases.
pub fn case_files(rules: &RulesArgs) -> Result<Vec<CaseFile>, UsageError> {
    let mut files = Vec::new();
    for dir in &rules.dirs {
        for path in load::files_with_suffix(dir, ".cases.yaml")? {
            let text = load::read_regular_text(&path, golden::MAX_CASES_BYTES).map_err(|e| {
                UsageError(format!(
                    "cannot read `{}`: {}",
                    display_name(&path),
                    load::plain_io(&e)
                ))
            })?;
            files.push(golden::parse_cases(&display_name(&path), &text).map_err(UsageError)?);
        }
    }
    if !rules.no_defaults {
        for (name, text) in load::DEFAULT_CASES {
            files.push(golden::parse_cases(name, text).map_err(UsageError)?);
        }
    }
    Ok(files)
}

pub fn run(args: &TestArgs) -> CmdResult {
    let engine = match load_engine(&args.rules)? {
        Ok(engine) => engine,
        Err(code) => return Ok(code),
    };
    let files = case_files(&args.rules)?;
    if files.is_empty() {
        return Err(UsageError(
            "no `*.cases.yaml` files found beside the rules".into(),
        ));
    }
    let report = golden::run(&engine, &files);
    print!("{}", golden::render_report(&report));
    Ok(if report.passed() { 0 } else { 1 })
}
