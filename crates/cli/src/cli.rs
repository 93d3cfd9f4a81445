//! The operator's command line. Thin: parses arguments, calls the library,
//! formats output. Exit codes: 0 success, 1 the input has problems
//! (diagnostics, failing cases, bad lines), 2 usage errors (missing files,
//! bad flags).

mod chain;
mod check;
mod classify;
mod fmt;
mod lsp;
mod manual;
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
    /// Do not load the embedded default ruleset.
    #[arg(long)]
    pub(crate) no_defaults: bool,
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
    // Warnings are `check`'s to show: the lints are not run here.
    let build = load::build_unlinted(&rules.dirs, !rules.no_defaults)?;
    Engine::from_build(build).map_err(|d| {
        eprint!("{}", paint_diagnostics(&d.render()));
        eprintln!("error: the rules have errors; run `failover check` for details");
        Stop::Reported(1)
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
