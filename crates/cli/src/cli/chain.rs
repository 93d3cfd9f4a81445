//! `failover chain`: the selection source, strictness and candidate chain of
//! a run, with the reason each candidate is there.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;

use super::UsageError;
use super::{CmdResult, RulesArgs};
use crate::diag::render_all;
use crate::diag::MAX_COLUMN;
use failover::rules as load;
use failover::selection::{
    build_chain, CandidateChain, ChainRequest, CronPayload, FallbackList, ModelKind, ModelRef,
    OverrideKind, SelectionSource, SelectionTarget, SessionOverride, Why,
};
use failover::GatewayConfig;

const PRECEDENCE: &str = "\
Which selection wins when several are given (first that applies):
  1. --model               one-shot CLI override (cli_override)
  2. --session-override    session override; --source picks auto_override,
                           user_override or legacy_override
  3. --cron-model          cron payload model (cron_payload)
  4. --agent               the agent's own model (agent_primary)
  5. the config            agents.defaults.model.primary (configured_default)
With --image the chain starts from agents.defaults.imageModel instead.
Which fallbacks each source may use comes from the `selection` declarations
of the rules (SPEC R3); the default ruleset makes user, legacy and CLI
overrides strict.";

#[derive(Args, Debug)]
#[command(after_help = PRECEDENCE)]
pub(super) struct ChainArgs {
    /// The gateway config file (YAML; JSON when the name ends in `.json`).
    #[arg(long, value_name = "FILE")]
    pub config: PathBuf,
    /// The agent the run belongs to (`agents.list[].id`).
    #[arg(long, value_name = "ID")]
    pub agent: Option<String>,
    /// The session's model override, `provider/model`.
    #[arg(long, value_name = "MODEL", requires = "source")]
    pub session_override: Option<String>,
    /// Who wrote the session override (`modelOverrideSource`; `legacy` is an
    /// old entry without one).
    #[arg(long, value_enum, requires = "session_override")]
    pub source: Option<SourceArg>,
    /// A cron job's `payload.model`.
    #[arg(long, value_name = "MODEL")]
    pub cron_model: Option<String>,
    /// The cron job's `payload.fallbacks`, comma-separated; `''` (empty)
    /// makes the run strict.
    #[arg(long, value_name = "LIST", requires = "cron_model")]
    pub cron_fallbacks: Option<String>,
    /// A one-shot model override for this invocation (strict by default).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Build the image-model chain (`agents.defaults.imageModel`).
    #[arg(long, conflicts_with_all = ["agent", "session_override", "cron_model"])]
    pub image: bool,
    #[command(flatten)]
    pub rules: RulesArgs,
    /// Print `{"source", "strict", "candidates", …}` as one JSON line.
    #[arg(long)]
    pub json: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum SourceArg {
    User,
    Auto,
    Legacy,
}

pub(super) fn run(args: &ChainArgs) -> CmdResult {
    let request = request(args)?;
    let build = load::build_unlinted(&args.rules.dirs, !args.rules.no_defaults)?;
    let policies = match build.selections() {
        Some(r) if !build.has_errors() => r.clone(),
        None if build.diagnostics.is_empty() => {
            return Err(UsageError(
                "no rules to take the selection policy from: `--no-defaults` needs at least one `--rules` directory".into(),
            ).into());
        }
        _ => {
            eprint!("{}", render_all(&build.diagnostics, &build.sources));
            return Ok(1);
        }
    };
    let config = super::load_config(&args.config)?;
    for note in precedence_notes(args) {
        eprintln!("note: {note}");
    }
    let chain = build_chain(&config, &policies, &request).map_err(|e| UsageError(e.to_string()))?;
    // Model names shaped like keys are masked like values (R16.11).
    if args.json {
        println!("{}", json_line(&chain));
    } else {
        print!("{}", crate::redact::redact(&human(&chain, args, &config)));
    }
    Ok(0)
}

fn model_flag(flag: &str, value: &str) -> Result<ModelRef, UsageError> {
    ModelRef::parse(value).map_err(|e| UsageError(format!("`--{flag}`: {e}")))
}

fn request(args: &ChainArgs) -> Result<ChainRequest, UsageError> {
    let session_override = match (&args.session_override, args.source) {
        (Some(m), Some(source)) => Some(SessionOverride {
            model: model_flag("session-override", m)?,
            source: match source {
                SourceArg::User => OverrideKind::User,
                SourceArg::Auto => OverrideKind::Auto,
                SourceArg::Legacy => OverrideKind::Legacy,
            },
        }),
        _ => None,
    };
    let cron = match &args.cron_model {
        None => None,
        Some(m) => Some(CronPayload {
            model: model_flag("cron-model", m)?,
            fallbacks: match &args.cron_fallbacks {
                None => None,
                Some(list) if list.trim().is_empty() => Some(Vec::new()),
                Some(list) => Some(
                    list.split(',')
                        .map(|item| model_flag("cron-fallbacks", item))
                        .collect::<Result<_, _>>()?,
                ),
            },
        }),
    };
    Ok(ChainRequest {
        kind: if args.image {
            ModelKind::Image
        } else {
            ModelKind::Text
        },
        agent: args.agent.clone(),
        one_shot: args
            .model
            .as_deref()
            .map(|m| model_flag("model", m))
            .transpose()?,
        session_override,
        cron,
    })
}

/// Says which given selections lost to a higher-precedence one.
fn precedence_notes(args: &ChainArgs) -> Vec<String> {
    let given: Vec<&str> = [
        (args.model.is_some(), "--model"),
        (args.session_override.is_some(), "--session-override"),
        (args.cron_model.is_some(), "--cron-model"),
    ]
    .into_iter()
    .filter_map(|(on, flag)| on.then_some(flag))
    .collect();
    match given.split_first() {
        Some((winner, losers)) if !losers.is_empty() => vec![format!(
            "`{winner}` takes precedence; {} ignored (see `failover chain --help`)",
            losers
                .iter()
                .map(|f| format!("`{f}`"))
                .collect::<Vec<_>>()
                .join(" and ")
                + if losers.len() == 1 { " is" } else { " are" }
        )],
        _ => Vec::new(),
    }
}

#[derive(Serialize)]
struct JsonChain<'a> {
    source: &'a str,
    strict: bool,
    candidates: Vec<std::borrow::Cow<'a, str>>,
    /// Parallel to `candidates`.
    why: Vec<Why>,
    policy: String,
    duplicates: Vec<std::borrow::Cow<'a, str>>,
}

fn json_line(chain: &CandidateChain) -> String {
    let out = JsonChain {
        source: chain.source.name(),
        strict: chain.strict,
        candidates: chain
            .models()
            .map(|m| crate::redact::redact(m.as_str()))
            .collect(),
        why: chain.candidates.iter().map(|c| c.why).collect(),
        policy: policy_text(chain),
        duplicates: chain
            .duplicates
            .iter()
            .map(|c| crate::redact::redact(c.model.as_str()))
            .collect(),
    };
    serde_json::to_string(&out).expect("plain strings and booleans serialize")
}

/// `fallbacks agent else strict`, as the rules file writes it.
fn policy_text(chain: &CandidateChain) -> String {
    // `else` matters only for the lists that can be absent; the configured
    // list always exists (see the `policy` module).
    let p = chain.policy;
    match p.target {
        SelectionTarget::Fallbacks(FallbackList::Agent | FallbackList::Payload) => {
            format!("{} else {}", p.target, p.otherwise)
        }
        _ => p.target.to_string(),
    }
}

fn human(chain: &CandidateChain, args: &ChainArgs, config: &GatewayConfig) -> String {
    let slot = if args.image {
        "agents.defaults.imageModel"
    } else {
        "agents.defaults.model"
    };
    let agent_name = args.agent.as_deref().unwrap_or("");
    let requested_from = match chain.source {
        SelectionSource::ConfiguredDefault => format!("{slot}.primary"),
        SelectionSource::AgentPrimary => {
            let own = config
                .agents
                .agent(agent_name)
                .and_then(|a| a.model.as_ref())
                .is_some_and(|m| m.primary.is_some());
            if own {
                format!("agent `{agent_name}`")
            } else {
                format!("{slot}.primary; agent `{agent_name}` sets only fallbacks")
            }
        }
        SelectionSource::AutoOverride => "session override, source auto".into(),
        SelectionSource::UserOverride => "session override, source user".into(),
        SelectionSource::LegacyOverride => "session override without a source".into(),
        SelectionSource::CronPayload => "cron payload model".into(),
        SelectionSource::CliOverride => "--model".into(),
    };
    let from = |why: Why| -> String {
        match why {
            Why::Requested => format!("requested ({requested_from})"),
            Why::ConfiguredFallback => format!("configured fallback ({slot}.fallbacks)"),
            Why::AgentFallback => format!("agent fallback (agent `{agent_name}`)"),
            Why::PayloadFallback => "cron payload fallback (--cron-fallbacks)".into(),
            Why::ConfiguredPrimaryAppended => {
                format!("configured primary, appended last ({slot}.primary)")
            }
        }
    };
    let width = chain
        .models()
        .chain(chain.duplicates.iter().map(|c| &c.model))
        .map(|m| m.as_str().chars().count())
        .max()
        .unwrap_or(0)
        .min(MAX_COLUMN);
    let mut out = String::new();
    out.push_str(&format!("source: {}\n", chain.source));
    out.push_str(&format!("policy: {}\n", policy_text(chain)));
    out.push_str(&format!(
        "strict: {}\n",
        if chain.strict {
            "yes (the requested model or its error, no fallback)"
        } else {
            "no"
        }
    ));
    out.push_str("candidates:\n");
    for (i, c) in chain.candidates.iter().enumerate() {
        out.push_str(&format!(
            "  {}. {:width$}  {}\n",
            i + 1,
            c.model.as_str(),
            from(c.why)
        ));
    }
    if !chain.duplicates.is_empty() {
        out.push_str("skipped duplicates:\n");
        for c in &chain.duplicates {
            let first = chain
                .models()
                .position(|m| *m == c.model)
                .map_or(0, |i| i + 1);
            out.push_str(&format!(
                "     {:width$}  {}, already candidate {first}\n",
                c.model.as_str(),
                from(c.why)
            ));
        }
    }
    out
}
