//! `failover test`: run the golden cases, print the per-reason and
//! per-rule table, fail on any miss or on a rule no case decides; then
//! measure the rules on the field corpus (real provider errors) and fail
//! below its agreement floor or on any unsafe stop.

use std::path::PathBuf;

use clap::Args;

use super::{load_engine, CmdResult, RulesArgs};
use crate::field::{self, FieldFile};
use crate::golden::{self, CaseFile};
use crate::load::{self, UsageError};
use crate::syntax::display_name;

#[derive(Args, Debug)]
pub struct TestArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
    /// A directory of field-corpus files (`*.yaml`: real errors with their
    /// labels) to measure the rules on, instead of the embedded corpus
    /// (repeatable).
    #[arg(long = "field", value_name = "DIR")]
    pub field: Vec<PathBuf>,
    /// Do not measure the rules on any field corpus.
    #[arg(long, conflicts_with = "field")]
    pub no_field: bool,
    /// Exact agreement on the field corpus, in percent, below which the
    /// test fails.
    #[arg(long, value_name = "PCT", default_value_t = field::DEFAULT_FLOOR_PCT)]
    pub field_floor: f64,
}

/// The cases of the layers in use: each operator directory's
/// `*.cases.yaml`, then the embedded defaults' cases.
pub fn case_files(rules: &RulesArgs) -> Result<Vec<CaseFile>, UsageError> {
    let mut files = Vec::new();
    for dir in &rules.dirs {
        for path in load::files_with_suffix(dir, ".cases.yaml")? {
            let text = read(&path, golden::MAX_CASES_BYTES)?;
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

fn read(path: &std::path::Path, limit: u64) -> Result<String, UsageError> {
    load::read_regular_text(path, limit).map_err(|e| {
        UsageError(format!(
            "cannot read `{}`: {}",
            display_name(path),
            load::plain_io(&e)
        ))
    })
}

/// The field corpus to measure: the `--field` directories, else the
/// embedded one when the defaults are in use (it labels what providers
/// send, which the default rules are written for).
pub fn field_files(args: &TestArgs) -> Result<Vec<FieldFile>, UsageError> {
    let mut files = Vec::new();
    if args.no_field {
        return Ok(files);
    }
    if !args.field.is_empty() {
        for dir in &args.field {
            for path in load::files_with_suffix(dir, ".yaml")? {
                let text = read(&path, golden::MAX_CASES_BYTES)?;
                files.push(field::parse(&display_name(&path), &text).map_err(UsageError)?);
            }
        }
        if files.is_empty() {
            return Err(UsageError("no field-corpus `*.yaml` files found".into()));
        }
    } else if !args.rules.no_defaults {
        for (name, text) in load::DEFAULT_FIELD {
            files.push(field::parse(name, text).map_err(UsageError)?);
        }
    }
    Ok(files)
}

pub fn run(args: &TestArgs) -> CmdResult {
    if !(0.0..=100.0).contains(&args.field_floor) {
        return Err(UsageError(format!(
            "`--field-floor` is a percentage (0–100), not {}",
            args.field_floor
        )));
    }
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
    let field_files = field_files(args)?;
    let report = golden::run(&engine, &files);
    print!("{}", golden::render_report(&report));
    let mut passed = report.passed();
    if !field_files.is_empty() {
        let field = field::run(&engine, &field_files, args.field_floor);
        println!();
        print!("{}", field::render(&field));
        passed &= field.passed();
    }
    Ok(if passed { 0 } else { 1 })
}
