//! `failover serve`: the gateway (the crate `failover-gateway`). Thin: flags to
//! options.

use std::path::PathBuf;

use clap::Args;

use super::UsageError;
use super::{CmdResult, RulesArgs};
use failover_gateway::{LogFormat, Logging, Options, Sources, DEFAULT_LISTEN};

#[derive(Args, Debug)]
pub(super) struct ServeArgs {
    /// The gateway config (YAML or JSON): agents, auth, models.providers, serve.
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The state directory: auth-profiles.json (secrets) and, unless the
    /// config's `state:` block says otherwise, the state database.
    #[arg(long, value_name = "DIR", required_unless_present = "check")]
    pub state: Option<PathBuf>,
    /// The address to listen on.
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_LISTEN)]
    pub listen: String,
    /// Reload when the config or a rules file changes (SIGHUP always reloads).
    #[arg(long)]
    pub watch: bool,
    /// Worker threads, each serving its share of the connections on a
    /// runtime of its own [default: one per core]. `0` serves on one
    /// runtime shared by all cores (tokio's work-stealing scheduler).
    #[arg(long, value_name = "N")]
    pub workers: Option<usize>,
    /// Check the config — every problem at once, as `failover check
    /// --config` — and exit without serving.
    #[arg(long)]
    pub check: bool,
    /// Which log lines are written: a level (`error`, `warn`, `info`,
    /// `debug`, `trace`) or env-filter directives
    /// (`info,failover::serve=debug`). Wins over `RUST_LOG`; neither: `info`.
    #[arg(long, value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// The log lines' shape: one JSON object per line, or text for a terminal.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "json")]
    pub log_format: LogFormatArg,
    #[command(flatten)]
    pub rules: RulesArgs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum LogFormatArg {
    Json,
    Text,
}

pub(super) fn run(args: &ServeArgs) -> CmdResult {
    if args.check {
        return Ok(super::check::config_report(&args.config, false, false));
    }
    let Some(state) = &args.state else {
        return Err(UsageError("`--state DIR` is required to serve".into()).into());
    };
    if !args.config.is_file() {
        return Err(UsageError(format!(
            "config `{}` is not a file",
            crate::syntax::display_name(&args.config)
        ))
        .into());
    }
    if state.exists() && !state.is_dir() {
        return Err(UsageError(format!(
            "state `{}` is not a directory",
            crate::syntax::display_name(state)
        ))
        .into());
    }
    Ok(failover_gateway::main(
        Options {
            sources: Sources {
                config: args.config.clone(),
                state: state.clone(),
                rules: args.rules.dirs.clone(),
                no_defaults: args.rules.no_defaults,
                model: failover_gateway::ModelFlags {
                    model: args.rules.model.clone(),
                    no_model: args.rules.no_model,
                    min_confidence: args.rules.min_confidence,
                },
            },
            listen: args.listen.clone(),
            watch: args.watch,
            workers: args
                .workers
                .unwrap_or_else(failover_gateway::default_workers),
        },
        Logging {
            level: args.log_level.clone(),
            format: match args.log_format {
                LogFormatArg::Json => LogFormat::Json,
                LogFormatArg::Text => LogFormat::Text,
            },
        },
    ))
}
