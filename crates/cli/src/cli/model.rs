//! `failover model`: train the evidence model on labelled errors, and
//! show what a model file holds (docs/model.md).

use std::path::PathBuf;
use std::time::Instant;

use clap::{Args, Subcommand};

use super::{load_engine, CmdResult, RulesArgs, UsageError};
use crate::syntax::display_name;
use failover::evidence::train::Options;
use failover::golden::CaseFile;
use failover::learn;

#[derive(Subcommand, Debug)]
pub(super) enum ModelCommand {
    /// Train a model on the field corpora and the golden cases of the
    /// active layers; `--out` is where it goes.
    Train(TrainArgs),
    /// Print what a model file holds: its reasons, how it was trained.
    Info(InfoArgs),
}

#[derive(Args, Debug)]
pub(super) struct TrainArgs {
    /// A directory of operator `.rules` files whose `*.cases.yaml` are
    /// labelled examples too (repeatable).
    #[arg(long = "rules", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// A directory of field-corpus files (`*.yaml`), labelled real errors,
    /// to train on besides the embedded corpus (repeatable).
    #[arg(long = "field", value_name = "DIR")]
    pub field: Vec<PathBuf>,
    /// Leave out the embedded rules' cases and the embedded field corpus:
    /// train on the given directories alone.
    #[arg(long)]
    pub no_defaults: bool,
    /// Where to write the model.
    #[arg(long, value_name = "FILE", default_value = "model.bin")]
    pub out: PathBuf,
    /// The L2 penalty (default 1e-4, chosen by cross-validation; larger
    /// is smoother).
    #[arg(long, value_name = "LAMBDA", default_value_t = Options::default().lambda)]
    pub lambda: f64,
    /// How much rare reasons are weighed up in training: 0 not at all, 1
    /// as much as the common ones in total.
    #[arg(long, value_name = "B", default_value_t = Options::default().balance)]
    pub balance: f64,
    /// At most this many optimiser iterations.
    #[arg(long, value_name = "N", default_value_t = Options::default().max_iterations)]
    pub iterations: u32,
    /// Also cross-validate (10 folds) on the field corpora and print the
    /// agreement under the costs' thresholds and per single `minConfidence`.
    #[arg(long)]
    pub cv: bool,
}

#[derive(Args, Debug)]
pub(super) struct InfoArgs {
    /// The model file.
    pub file: PathBuf,
    /// Print `{"file", "format", "reasons", "trained": {"items", "lambda",
    /// "iterations"}}` as one JSON line.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(cmd: &ModelCommand) -> CmdResult {
    match cmd {
        ModelCommand::Train(args) => train(args),
        ModelCommand::Info(args) => info(args),
    }
}

fn rules_args(dirs: &[PathBuf], no_defaults: bool) -> RulesArgs {
    RulesArgs {
        dirs: dirs.to_vec(),
        no_defaults,
        model: None,
        no_model: true,
        min_confidence: None,
    }
}

fn train(args: &TrainArgs) -> CmdResult {
    let rules = rules_args(&args.dirs, args.no_defaults);
    let engine = load_engine(&rules)?;
    let cases: Vec<CaseFile> = match super::test::case_files(&rules, true)? {
        Ok(files) => files.into_iter().map(|l| l.file).collect(),
        Err(errors) => {
            for e in &errors {
                eprint!("{}", super::paint_diagnostics(&e.render()));
            }
            return Err(UsageError("the cases files have problems; nothing trained".into()).into());
        }
    };
    let fields = super::test::field_dirs(&args.field, args.no_defaults, true)?;
    let items = learn::labelled(&fields, &cases);
    let field_items = items.iter().filter(|l| l.field).count();
    let started = Instant::now();
    if !(args.lambda >= 0.0 && args.lambda.is_finite()) {
        return Err(
            UsageError(format!("`--lambda` must be 0 or more, not {}", args.lambda)).into(),
        );
    }
    if !(0.0..=1.0).contains(&args.balance) {
        return Err(UsageError(format!(
            "`--balance` must be between 0 and 1, not {}",
            args.balance
        ))
        .into());
    }
    let options = Options {
        lambda: args.lambda,
        balance: args.balance,
        max_iterations: args.iterations,
        ..Options::default()
    };
    let model = learn::train(&engine, &items, options).map_err(|e| UsageError(e.to_string()))?;
    let took = started.elapsed();
    let bytes = model.to_bytes();
    write_atomically(&args.out, &bytes)?;
    let t = model.trained();
    println!(
        "trained on {} labelled errors ({field_items} field items, {} golden cases), {} reasons, {} iterations in {:.1} s",
        items.len(),
        items.len() - field_items,
        model.reasons().len(),
        t.iterations,
        took.as_secs_f64()
    );
    println!("wrote {} ({} bytes)", display_name(&args.out), bytes.len());
    if args.cv {
        eprintln!("cross-validating (10 folds) …");
        let e = learn::evaluate(
            &engine,
            &items,
            &[],
            10,
            failover::evidence::Confidence::Costs,
            options,
        )
        .map_err(|e| UsageError(e.to_string()))?;
        // `model train` lists no verdicts: `failover test` does (issue 48).
        print!(
            "{}",
            learn::render(&e, 0, "listed by `failover test --field-report`")
        );
        print!("{}", learn::render_thresholds(&e));
    }
    Ok(0)
}

fn info(args: &InfoArgs) -> CmdResult {
    let model = super::read_model(&args.file)?;
    let t = model.trained();
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "file": display_name(&args.file),
                "format": failover::evidence::FORMAT_VERSION,
                "reasons": model.reasons(),
                "trained": {"items": t.items, "lambda": t.lambda, "iterations": t.iterations, "temperature": t.temperature},
            })
        );
        return Ok(0);
    }
    println!(
        "{}: failover model, format {}",
        display_name(&args.file),
        failover::evidence::FORMAT_VERSION
    );
    println!("  reasons     {}", model.reasons().join(", "));
    println!(
        "  trained on  {} labelled errors, lambda {}, {} iterations",
        t.items, t.lambda, t.iterations
    );
    println!(
        "  calibrated  temperature {} (fitted on cross-validation folds grouped by source; 1: uncalibrated)",
        t.temperature
    );
    Ok(0)
}

/// Writes through a temporary file beside `path` and a rename: a crash
/// leaves the old file or the new one.
fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> Result<(), UsageError> {
    let name = display_name(path);
    let tmp = path.with_extension("tmp~");
    std::fs::write(&tmp, bytes)
        .and_then(|()| std::fs::rename(&tmp, path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            UsageError(format!(
                "cannot write `{name}`: {}",
                failover_syntax::fsio::plain_io(&e)
            ))
        })
}
