//! `failover classify`: one message from flags, or a JSONL stream.
//!
//! The stream, its line contract (DESIGN.md) and its pipeline are the
//! library's [`failover::stream`]; this module adds the flags, the
//! progress line on a terminal, the per-reason summary on stderr and the
//! exit code (1 when any line was bad).

use std::fs::File;
use std::io::{self, BufReader, IsTerminal, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::UsageError;
use super::{load_engine, CmdResult, RulesArgs};
use crate::syntax::display_name;
use failover::rules::render_explanation;
use failover::stream::{self, Options, Progress, Summary};
use failover::{Body, Engine, ProviderError};
use failover_syntax::fsio::plain_io;

#[derive(Args, Debug)]
pub(super) struct ClassifyArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
    /// A JSONL file of errors, or `-` for standard input (the default when
    /// no `--message`/`--status`/`--body` is given).
    #[arg(value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Classify one message instead of a stream.
    #[arg(long)]
    pub message: Option<String>,
    /// HTTP status of the one message (100–599).
    #[arg(long, value_parser = clap::value_parser!(u16).range(100..=599))]
    pub status: Option<u16>,
    /// Provider id of the one message (e.g. `openrouter`).
    #[arg(long)]
    pub provider: Option<String>,
    /// Model id of the one message.
    #[arg(long)]
    pub model: Option<String>,
    /// Error code of the one message (e.g. `RESOURCE_EXHAUSTED`).
    #[arg(long)]
    pub code: Option<String>,
    /// Error type of the one message (e.g. `overloaded_error`).
    #[arg(long = "type", value_name = "TYPE")]
    pub error_type: Option<String>,
    /// Response body of the one message (text or JSON).
    #[arg(long)]
    pub body: Option<String>,
    /// Show the atoms found, the rules verified and the winning rule with
    /// its file:line.
    #[arg(long)]
    pub explain: bool,
    /// Print the per-reason summary on stderr even for small inputs.
    #[arg(long, conflicts_with = "quiet")]
    pub summary: bool,
    /// No summary and no progress on stderr.
    #[arg(long)]
    pub quiet: bool,
}

/// Streams at least this long get a summary table on stderr by default.
const SUMMARY_MIN_LINES: u64 = 1000;
/// Progress appears on a terminal once a stream has run this long.
const PROGRESS_AFTER: Duration = Duration::from_secs(2);

pub(super) fn run(args: &ClassifyArgs) -> CmdResult {
    let engine = load_engine(&args.rules)?;
    let single = args.message.is_some()
        || args.status.is_some()
        || args.body.is_some()
        || args.code.is_some();
    if single {
        if args.input.is_some() {
            return Err(UsageError(
                "give either a FILE or `--message`/`--status`/`--body`, not both".into(),
            )
            .into());
        }
        return Ok(classify_one(&engine, args));
    }
    let reader: Box<dyn Read> = match args.input.as_deref() {
        None => Box::new(io::stdin().lock()),
        Some(p) if p.as_os_str() == "-" => Box::new(io::stdin().lock()),
        Some(p) => Box::new(File::open(p).map_err(|e| {
            UsageError(format!(
                "cannot read `{}`: {}",
                display_name(p),
                plain_io(&e)
            ))
        })?),
    };
    let stdout = io::stdout();
    let mut progress = TerminalProgress {
        sink: progress_sink(args),
        last: Duration::ZERO,
    };
    let options = Options::default().explain(args.explain);
    let stats = match stream::classify(
        &engine,
        BufReader::with_capacity(1 << 16, reader),
        stdout,
        &options,
        |p| progress.update(p),
    ) {
        Ok(stats) => stats,
        // The reader of our output went away (`| head`): stop quietly.
        Err(e) if e.io_error().kind() == io::ErrorKind::BrokenPipe => return Ok(0),
        Err(e) => {
            return Err(UsageError(format!(
                "cannot read input or write output: {}",
                plain_io(e.io_error())
            ))
            .into())
        }
    };
    progress.finish(stats.elapsed);
    if !args.quiet && (args.summary || stats.lines >= SUMMARY_MIN_LINES) {
        eprint!("{}", render_summary(&stats, &engine));
    }
    Ok(if stats.bad > 0 { 1 } else { 0 })
}

fn progress_sink(args: &ClassifyArgs) -> Option<io::Stderr> {
    (!args.quiet && io::stderr().is_terminal()).then(io::stderr)
}

fn classify_one(engine: &Engine, args: &ClassifyArgs) -> i32 {
    // A JSON body is handed over as text: the engine reads it.
    let err = ProviderError {
        provider: args.provider.as_deref(),
        model: args.model.as_deref(),
        status: args.status,
        code: args.code.as_deref(),
        error_type: args.error_type.as_deref(),
        message: args.message.as_deref(),
        body: args.body.as_deref().map(Body::Text),
    };
    if args.explain {
        let (c, ex) = engine.explain(&err);
        print!("{}", render_explanation(engine, &c, &ex));
        // Issue 48: what happened on the wire, beside the SPEC's reason
        // (a 502 HTML page and a refused connection are both `timeout`).
        let mut f = failover::ProviderFailure::message(args.message.clone().unwrap_or_default());
        if let Some(s) = args.status {
            f = f.with_status(s);
        }
        if let Some(code) = &args.code {
            f = f.with_code(code.clone());
        }
        if let Some(b) = &args.body {
            f = f.with_body(b.clone());
        }
        if let Some(cause) = f.effective_cause() {
            println!(
                "  cause: {} (what happened on the wire; the reason above is what it means)",
                cause.name()
            );
        }
        if ex.model.is_some() && !args.rules.no_defaults {
            print!("{}", nearest_examples(engine, &err));
        }
    } else {
        let c = engine.classify(&err);
        let mut out = io::stdout().lock();
        let _ = writeln!(out, "{}", stream::verdict_line(&c));
    }
    0
}

/// The three labelled errors of the embedded corpus and cases nearest to
/// `err` in the model's feature space, with their sources.
fn nearest_examples(engine: &Engine, err: &ProviderError) -> String {
    use std::fmt::Write as _;
    let fields: Vec<failover::field::FieldFile> = crate::embedded::DEFAULT_FIELD
        .iter()
        .filter_map(|(n, t)| failover::field::parse(n, t).ok())
        .collect();
    let cases: Vec<failover::golden::CaseFile> = crate::embedded::DEFAULT_CASES
        .iter()
        .filter_map(|(n, t)| failover::golden::parse_cases(n, t).ok())
        .collect();
    let items = failover::learn::labelled(&fields, &cases);
    let mut out = String::from("  nearest labelled examples:\n");
    for (score, l) in failover::learn::nearest(engine, err, &items, 3) {
        let _ = writeln!(
            out,
            "    {score:.2}  {}  {}\n          {}",
            l.labels.join(" or "),
            l.origin,
            l.source.unwrap_or("-")
        );
    }
    out
}

/// The per-reason summary printed on stderr after a stream.
fn render_summary(stats: &Summary, engine: &Engine) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let secs = stats.elapsed.as_secs_f64().max(1e-9);
    let _ = writeln!(
        out,
        "classified {} lines ({} bad) in {:.2}s: {:.0} lines/s, {:.1} MB/s",
        stats.lines,
        stats.bad,
        secs,
        stats.lines as f64 / secs,
        stats.bytes as f64 / secs / 1e6
    );
    let mut rows: Vec<(&str, u64)> = engine
        .reason_names()
        .zip(&stats.per_reason)
        .filter(|(_, n)| **n > 0)
        .map(|(r, n)| (r, *n))
        .collect();
    rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let good = (stats.lines - stats.bad).max(1);
    for (name, n) in rows {
        let _ = writeln!(
            out,
            "  {:<18} {:>10}  {:>5.1}%",
            name,
            n,
            100.0 * n as f64 / good as f64
        );
    }
    out
}

/// The progress line on a terminal: after [`PROGRESS_AFTER`], at most
/// every 250 ms, `\r`-rewritten in place.
struct TerminalProgress {
    sink: Option<io::Stderr>,
    last: Duration,
}

impl TerminalProgress {
    fn update(&mut self, p: Progress) {
        let Some(sink) = self.sink.as_mut() else {
            return;
        };
        if p.elapsed >= PROGRESS_AFTER && p.elapsed - self.last >= Duration::from_millis(250) {
            self.last = p.elapsed;
            let rate = p.lines_written as f64 / p.elapsed.as_secs_f64();
            let _ = write!(
                sink,
                "\r  {} lines, {:.2} M lines/s ",
                p.lines_written,
                rate / 1e6
            );
            let _ = sink.flush();
        }
    }

    /// Clears the progress line once the stream has ended.
    fn finish(&mut self, elapsed: Duration) {
        if let Some(sink) = self.sink.as_mut() {
            if elapsed >= PROGRESS_AFTER {
                let _ = write!(sink, "\r{:60}\r", "");
            }
        }
    }
}
