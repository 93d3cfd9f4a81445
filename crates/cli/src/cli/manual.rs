//! What the command line says about itself: the exit codes under every
//! `--help`, `failover completions SHELL` and `failover man`, all from the
//! one clap definition, so none can drift from the real flags.

use std::path::PathBuf;

use clap::{Args, CommandFactory};

use super::{CmdResult, UsageError};

/// The exit codes of a command, as its `--help` ends.
pub(super) fn exit_codes(command: &str) -> &'static str {
    match command {
        "check" => "Exit codes:\n  0  no errors (warnings too, with --deny-warnings)\n  1  the rules have errors (or warnings, with --deny-warnings)\n  2  usage errors (missing directories, bad flags)",
        "test" => "Exit codes:\n  0  every case passes, every rule in scope is decided by a case and the\n     field corpus holds; --accept/--add-from wrote what they showed\n  1  a failing case, a rule no case decides, problems in a cases file or the\n     rules, the field corpus below its floor or an unsafe stop; a case\n     --accept could not rewrite; an answer other than yes\n  2  usage errors (missing directories, bad flags; --accept or --add-from\n     with neither a terminal to confirm on nor --yes)",
        "classify" => "Exit codes:\n  0  every line classified\n  1  bad input lines (each answered with an `error` line) or rules with errors\n  2  usage errors (missing files, bad flags)",
        "chain" => "Exit codes:\n  0  a chain was built\n  1  the rules have errors\n  2  usage errors: the config or the flags have errors (unknown agent,\n     malformed model, bad YAML)",
        "simulate" => "Exit codes:\n  0  the scenario ran and every `expect:` held\n  1  an expectation did not hold (the differences are printed), or the rules\n     have errors\n  2  usage errors: the scenario cannot be run (missing file, bad YAML, bad\n     config, the backend of its `state:` block unreachable)\n\nA `state:` block in the scenario's config runs it on that backend (files,\nsqlite, redis) on a scratch copy - a temporary directory, for Redis a scratch\nkey prefix - removed afterwards: the configured state is never touched.",
        "status" => "Exit codes:\n  0  the state was read\n  1  damaged state files (reported, the rest shown)\n  2  usage errors (missing directory, bad flags)",
        "fmt" => "Exit codes:\n  0  every file is in the canonical layout (or was rewritten to it)\n  1  with --check, a file that would change (its diff is printed); a file that\n     does not parse (left as it was); a file that could not be written\n  2  usage errors (missing paths, bad flags)",
        "lsp" => "Exit codes:\n  0  the editor asked the server to shut down, then to exit\n  1  the connection failed or ended without a shutdown\n  2  usage errors (bad flags)",
        "state" => "Exit codes:\n  0  exported or imported\n  1  the state or the document to import has problems (reported)\n  2  usage errors: a missing directory or file, a bad `state:` block, a\n     backend that cannot be reached (named, without its password)",
        "completions" | "man" => "Exit codes:\n  0  written\n  2  usage errors (unknown shell, unwritable directory)",
        _ => "Exit codes:\n  0  success\n  1  the input has problems (rule errors, failing cases, bad lines, damaged state)\n  2  usage errors (missing files or directories, bad flags)",
    }
}

/// The whole CLI definition, with every command's exit codes.
pub(super) fn command() -> clap::Command {
    super::Cli::command()
        .after_help(exit_codes(""))
        .mut_subcommands(|sub| {
            let codes = exit_codes(sub.get_name());
            // A command's own closing text (`chain`'s precedence) stays,
            // the exit codes after it.
            let text = match sub.get_after_help() {
                Some(own) => format!("{own}\n\n{codes}"),
                None => codes.to_string(),
            };
            sub.after_help(text)
        })
}

#[derive(Args, Debug)]
pub(super) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

pub(super) fn completions(args: &CompletionsArgs) -> CmdResult {
    let mut cmd = command();
    clap_complete::generate(args.shell, &mut cmd, "failover", &mut std::io::stdout());
    Ok(0)
}

#[derive(Args, Debug)]
pub(super) struct ManArgs {
    /// Write `failover.1` and one `failover-COMMAND.1` per command into
    /// this directory, instead of printing `failover.1`.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The man pages: `(file name, roff)`, the main page first.
pub(super) fn pages() -> Vec<(String, Vec<u8>)> {
    let cmd = command();
    let mut pages = Vec::new();
    let mut render = |name: String, c: clap::Command| {
        let mut out = Vec::new();
        // Rendering into memory cannot fail.
        let _ = clap_mangen::Man::new(c).render(&mut out);
        pages.push((format!("{name}.1"), out));
    };
    render("failover".into(), cmd.clone());
    for sub in cmd.get_subcommands() {
        if sub.get_name() == "help" {
            continue;
        }
        let name = format!("failover-{}", sub.get_name());
        // clap names are `&'static str`; a handful of pages per process.
        let leaked: &'static str = Box::leak(name.clone().into_boxed_str());
        render(name, sub.clone().name(leaked));
    }
    pages
}

pub(super) fn man(args: &ManArgs) -> CmdResult {
    let pages = pages();
    match &args.dir {
        None => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(&pages[0].1);
        }
        Some(dir) => {
            // A fresh home has no man directory yet: made, as `install -D` would.
            std::fs::create_dir_all(dir).map_err(|e| {
                UsageError(format!(
                    "cannot create `{}`: {}",
                    crate::syntax::display_name(dir),
                    failover_syntax::fsio::plain_io(&e)
                ))
            })?;
            for (name, roff) in &pages {
                let path = dir.join(name);
                std::fs::write(&path, roff).map_err(|e| {
                    UsageError(format!(
                        "cannot write `{}`: {}",
                        crate::syntax::display_name(&path),
                        failover_syntax::fsio::plain_io(&e)
                    ))
                })?;
            }
            println!("wrote {} man pages to {}", pages.len(), dir.display());
        }
    }
    Ok(0)
}
