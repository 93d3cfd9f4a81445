//! The operator's command line. Thin: parses arguments, calls the library,
//! formats output. Exit codes: 0 success, 1 the input has problems
//! (diagnostics, failing cases, bad lines), 2 usage errors (missing files,
//! bad flags).

mod chain;
mod check;
mod classify;
mod fmt;
mod keys;
mod lsp;
mod manual;
mod model;
mod serve;
mod simulate;
mod state;
mod status;
mod term;
mod test;

pub(crate) use term::{paint_diagnostics, paint_diagnostics_to, paint_diff, paint_report};

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use failover::rules::{self as load, InputError};
use failover::Engine;

/// A problem with the command line's inputs (a missing file or directory,
/// a bad flag value): printed as `error: …`, exit code 2 — as opposed to a
/// problem inside a file, reported as a diagnostic (exit code 1).
#[derive(Debug)]
pub(crate) struct UsageError(pub(crate) String);

impl std::fmt::Display for UsageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<InputError> for UsageError {
    fn from(e: InputError) -> Self {
        UsageError(e.0)
    }
}

impl From<InputError> for Stop {
    fn from(e: InputError) -> Self {
        Stop::Usage(e.into())
    }
}

#[derive(Parser, Debug)]
#[command(name = "failover", version, about = "A policy engine for LLM model failover", long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Colour: `auto` (on a terminal, unless `NO_COLOR` is set), `always`,
    /// `never`.
    #[arg(long, global = true, value_enum, value_name = "WHEN", default_value_t = term::ColorWhen::Auto)]
    color: term::ColorWhen,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Parse, validate and lint rules files; print diagnostics.
    Check(check::CheckArgs),
    /// Run the golden cases beside the rules; print a per-reason and per-rule table.
    Test(test::TestArgs),
    /// Classify one error (`--message`, `--status`, …) or a JSONL stream.
    Classify(classify::ClassifyArgs),
    /// Print a run's selection source and candidate chain (SPEC R3, R4).
    Chain(chain::ChainArgs),
    /// Show auth profiles, cooldowns, disables and session overrides of a state directory.
    Status(status::StatusArgs),
    /// Run the fallback executor against scripted provider outcomes on a virtual clock.
    Simulate(simulate::SimulateArgs),
    /// Run the OpenAI- and Anthropic-compatible gateway in front of the configured upstreams.
    Serve(serve::ServeArgs),
    /// Rewrite `.rules` files in the canonical layout (`--check`: show the diff, exit 1).
    Fmt(fmt::FmtArgs),
    /// Run the language server for `.rules` files on stdin/stdout (for editors).
    Lsp(lsp::LspArgs),
    /// Export or import an agent's routing state and sessions (move them between backends).
    State(state::StateArgs),
    /// Create, list, revoke and rotate the gateway's client keys.
    Keys(keys::KeysArgs),
    /// Train the evidence model on labelled errors (field corpora, golden cases).
    #[command(subcommand)]
    Model(model::ModelCommand),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(manual::CompletionsArgs),
    /// Print the man page (generated from this command line's definition).
    Man(manual::ManArgs),
}

/// `--rules DIR` (repeatable) and `--no-defaults`, shared by the commands
/// that load a ruleset.
#[derive(Args, Debug, Clone)]
pub(crate) struct RulesArgs {
    /// A directory of operator `.rules` files, layered over the defaults
    /// (repeatable; earlier directories take precedence).
    #[arg(long = "rules", value_name = "DIR")]
    pub(crate) dirs: Vec<PathBuf>,
    /// Do not load the embedded default ruleset (nor, unless
    /// `--model-file` names one, the embedded model).
    #[arg(long)]
    pub(crate) no_defaults: bool,
    /// A model file from `failover model train` to consult where no text
    /// rule decides, instead of the embedded one (docs/model.md). (`--model`
    /// is the model of a request or an error in `classify` and `chain`.)
    #[arg(
        id = "model_file",
        long = "model-file",
        value_name = "FILE",
        conflicts_with = "no_model"
    )]
    pub(crate) model: Option<PathBuf>,
    /// Consult no model: the rules alone decide, exactly as without one.
    #[arg(long)]
    pub(crate) no_model: bool,
    /// One probability (0–1) the model's top reason needs to decide,
    /// for every reason [default: per-reason thresholds from the cost of
    /// each mistake, docs/model.md].
    #[arg(long, value_name = "P", value_parser = probability)]
    pub(crate) min_confidence: Option<f32>,
}

fn probability(s: &str) -> Result<f32, String> {
    match s.parse::<f32>() {
        Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
        _ => Err(format!("`{s}` is not a probability between 0 and 1")),
    }
}

impl RulesArgs {
    /// The model these flags choose and its threshold: `--model-file FILE`,
    /// none with `--no-model` (or `--no-defaults` alone), else the
    /// embedded one.
    pub(crate) fn model(
        &self,
    ) -> Result<
        Option<(
            std::sync::Arc<failover::evidence::Model>,
            failover::evidence::Confidence,
        )>,
        Stop,
    > {
        let threshold = failover::evidence::Confidence::from(self.min_confidence);
        if self.no_model {
            return Ok(None);
        }
        if let Some(path) = &self.model {
            return read_model(path).map(|m| Some((std::sync::Arc::new(m), threshold)));
        }
        Ok((!self.no_defaults).then(|| (failover::evidence::builtin(), threshold)))
    }
}

/// Reads a model file: a clear error for a missing, damaged or foreign one.
pub(crate) fn read_model(path: &std::path::Path) -> Result<failover::evidence::Model, Stop> {
    failover::evidence::read_file(path).map_err(|e| Stop::Usage(UsageError(e.to_string())))
}

/// Runs the command line and returns the process exit code.
pub(crate) fn main() -> i32 {
    use clap::FromArgMatches;
    // `--color` decides clap's own colour too, so it is looked at first.
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let when = term_choice(&args);
    term::set_color(when);
    let parsed = manual::command()
        .color(term::clap_choice(when))
        .try_get_matches_from(args)
        .and_then(|m| Cli::from_arg_matches(&m));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return code;
        }
    };
    if !matches!(cli.command, Command::Serve(_)) {
        default_sigpipe();
    }
    let result = match cli.command {
        Command::Check(args) => check::run(&args),
        Command::Test(args) => test::run(&args),
        Command::Classify(args) => classify::run(&args),
        Command::Chain(args) => chain::run(&args),
        Command::Status(args) => status::run(&args),
        Command::Simulate(args) => simulate::run(&args),
        Command::Serve(args) => serve::run(&args),
        Command::Fmt(args) => fmt::run(&args),
        Command::Lsp(args) => lsp::run(&args),
        Command::State(args) => state::run(&args),
        Command::Keys(args) => keys::run(&args),
        Command::Model(cmd) => model::run(&cmd),
        Command::Completions(args) => manual::completions(&args),
        Command::Man(args) => manual::man(&args),
    };
    match result {
        Ok(code) => code,
        Err(Stop::Usage(e)) => {
            eprintln!("error: {e}");
            2
        }
        Err(Stop::Reported(code)) => code,
    }
}

/// A command that prints restores the default action of SIGPIPE, which the
/// Rust runtime sets to "ignore": a reader that goes away (`failover test
/// | head`) then ends the process quietly, as it does any Unix tool,
/// instead of every `print!` panicking on the closed pipe. The gateway
/// keeps "ignore": a client that hangs up must not kill the server.
#[allow(unsafe_code)]
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: `signal` with `SIG_DFL` only changes this process's action
    // for SIGPIPE; it runs before any other thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// The `--color` of a command line, read before clap parses it.
fn term_choice(args: &[std::ffi::OsString]) -> term::ColorWhen {
    use clap::ValueEnum;
    let mut when = term::ColorWhen::Auto;
    let mut it = args.iter().filter_map(|a| a.to_str());
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        let value = match a.strip_prefix("--color") {
            Some("") => it.next(),
            Some(v) => v.strip_prefix('='),
            None => None,
        };
        if let Some(w) = value.and_then(|v| term::ColorWhen::from_str(v, false).ok()) {
            when = w;
        }
    }
    when
}

/// Why a command stopped before its normal end.
#[derive(Debug)]
pub(crate) enum Stop {
    /// A problem with the command line's inputs: printed by `main` as
    /// `error: …`, exit code 2.
    Usage(UsageError),
    /// The problems were already printed (diagnostics, config problems);
    /// exit with this code.
    Reported(i32),
}

impl From<UsageError> for Stop {
    fn from(e: UsageError) -> Self {
        Stop::Usage(e)
    }
}

/// The result of a command: its exit code, or why it stopped.
pub(crate) type CmdResult = Result<i32, Stop>;

/// Loads the ruleset for a command. Rules with errors print their
/// diagnostics to stderr and stop the command with exit code 1.
pub(crate) fn load_engine(rules: &RulesArgs) -> Result<Engine, Stop> {
    // The model is decoded on another thread while the rules compile: it
    // does not depend on them, and each is milliseconds of a command's
    // start-up. Its result is looked at after the rules', as before, so
    // the same problem is reported first.
    std::thread::scope(|scope| {
        let model = (!rules.no_model).then(|| scope.spawn(|| rules.model()));
        // Warnings are `check`'s to show: the lints are not run here.
        let build = load::build_unlinted(&rules.dirs, !rules.no_defaults)?;
        let engine = Engine::from_build(build).map_err(|d| {
            eprint!("{}", paint_diagnostics(&d.render()));
            eprintln!("error: the rules have errors; run `failover check` for details");
            Stop::Reported(1)
        })?;
        let model = match model {
            Some(thread) => thread
                .join()
                .unwrap_or_else(|panic| std::panic::resume_unwind(panic))?,
            None => rules.model()?,
        };
        Ok(match model {
            Some((model, threshold)) => engine.with_model(model, threshold),
            None => engine,
        })
    })
}

/// Loads the gateway config of a command: its warnings go to stderr; when
/// it cannot be used, the problems go to stderr and the command stops with
/// exit code 2.
pub(crate) fn load_config(path: &std::path::Path) -> Result<failover::GatewayConfig, Stop> {
    let loaded = match failover::GatewayConfig::load(path) {
        Ok(c) => c,
        Err(e) => {
            eprint!("{e}");
            return Err(Stop::Reported(2));
        }
    };
    if !loaded.warnings.is_empty() {
        eprint!(
            "{}",
            failover::render_problems(&loaded.warnings, &loaded.name, &loaded.text)
        );
    }
    Ok(loaded.config)
}
