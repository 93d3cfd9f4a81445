//! `failover fmt`: rewrite `.rules` files in the canonical layout
//! (`src/syntax/fmt.rs`), or with `--check` show what would change.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use clap::Args;

use super::CmdResult;
use super::UsageError;
use crate::diag::render_all;
use crate::syntax::fmt::{format_str, FmtError};
use crate::syntax::{display_name, MAX_FILE_BYTES};
use failover_syntax::fsio::{plain_io, read_regular_text, too_large};

// Its exit codes are written with every command's, in `manual::exit_codes`.
#[derive(Args, Debug)]
pub(super) struct FmtArgs {
    /// Write nothing: print each file that would change, with a diff, and
    /// exit 1 if any would.
    #[arg(long)]
    pub check: bool,
    /// `.rules` files, or directories searched recursively for them
    /// (hidden directories, `target` and `node_modules` skipped; symlinked
    /// directories not followed; paths a `.failoverignore` file in a
    /// searched directory lists, one per line relative to it, skipped — a
    /// file named here is never skipped). `-` formats standard input to
    /// standard output. Default: the current directory.
    #[arg(value_name = "PATH")]
    pub paths: Vec<PathBuf>,
}

pub(super) fn run(args: &FmtArgs) -> CmdResult {
    if args.paths.len() == 1 && args.paths[0].as_os_str() == "-" {
        return stdin(args.check);
    }
    let roots = if args.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        args.paths.clone()
    };
    let mut files = Vec::new();
    for root in &roots {
        let meta = std::fs::metadata(root).map_err(|e| {
            UsageError(format!(
                "cannot read `{}`: {}",
                display_name(root),
                plain_io(&e)
            ))
        })?;
        if meta.is_dir() {
            walk(root, &mut files)?;
        } else {
            files.push(root.clone());
        }
    }
    let mut failed = false;
    let mut changed = 0usize;
    for path in &files {
        let name = display_name(path);
        let text = match read_regular_text(path, MAX_FILE_BYTES as u64) {
            Ok(t) => t,
            Err(e) if too_large(&e).is_some() => {
                eprintln!("error: `{name}` is too large to be a rules file");
                failed = true;
                continue;
            }
            Err(e) => {
                return Err(UsageError(format!("cannot read `{name}`: {}", plain_io(&e))).into())
            }
        };
        let out = match format_str(&name, &text) {
            Ok(out) => out,
            Err(e) => {
                report(&e);
                failed = true;
                continue;
            }
        };
        let on_disk = std::fs::read(path).unwrap_or_default();
        if out.as_bytes() == on_disk.as_slice() {
            continue;
        }
        changed += 1;
        if args.check {
            println!("would reformat {name}");
            print!("{}", diff(&name, &text, &out));
        } else if let Err(e) = write_in_place(path, &out) {
            eprintln!("error: cannot write `{name}`: {}", plain_io(&e));
            failed = true;
        } else {
            println!("formatted {name}");
        }
    }
    if args.check && changed > 0 {
        eprintln!(
            "{changed} file{} would be reformatted; run `failover fmt` to rewrite",
            super::check::plural(changed)
        );
    }
    Ok(i32::from(failed || (args.check && changed > 0)))
}

fn stdin(check: bool) -> CmdResult {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_FILE_BYTES as u64 + 1)
        .read_to_string(&mut text)
        .map_err(|e| UsageError(format!("cannot read standard input: {}", plain_io(&e))))?;
    match format_str("<stdin>", &text) {
        Ok(out) if check => {
            if out == text {
                Ok(0)
            } else {
                print!("{}", diff("<stdin>", &text, &out));
                Ok(1)
            }
        }
        Ok(out) => {
            let _ = std::io::stdout().write_all(out.as_bytes());
            Ok(0)
        }
        Err(e) => {
            report(&e);
            Ok(1)
        }
    }
}

fn report(e: &FmtError) {
    match e {
        FmtError::Syntax(sources, diags) => eprint!("{}", render_all(diags, sources)),
        FmtError::Internal(msg) => eprintln!("error: {msg}"),
    }
}

/// A unified diff, as `git diff` shows it.
pub(crate) fn diff(name: &str, old: &str, new: &str) -> String {
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(2)
        .header(&format!("a/{name}"), &format!("b/{name}"))
        .to_string()
}

/// Replaces a file through a temporary file in the same directory and a
/// rename, so an interrupted run leaves the old file or the new one, never
/// half of one; the file's permissions are kept.
fn write_in_place(path: &Path, text: &str) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    let dir = dir.unwrap_or(Path::new("."));
    let file_name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{file_name}.fmt-{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        if let Ok(meta) = std::fs::metadata(path) {
            std::fs::set_permissions(&tmp, meta.permissions())?;
        }
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The name of the file that lists what `fmt` leaves out of a directory
/// search (intentionally broken fixtures, generated files).
const IGNORE_FILE: &str = ".failoverignore";

/// The paths `dir/.failoverignore` lists (one per line, relative to `dir`,
/// `#` starts a comment), joined to `dir`.
fn ignored_in(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_to_string(dir.join(IGNORE_FILE))
        .map(|text| {
            text.lines()
                .map(|l| {
                    l.split('#')
                        .next()
                        .unwrap_or("")
                        .trim()
                        .trim_end_matches('/')
                })
                .filter(|l| !l.is_empty())
                .map(|l| dir.join(l.trim_start_matches("./")))
                .collect()
        })
        .unwrap_or_default()
}

/// `.rules` files under a directory, in path order.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), UsageError> {
    walk_ignoring(dir, &mut Vec::new(), out)
}

fn walk_ignoring(
    dir: &Path,
    ignored: &mut Vec<PathBuf>,
    out: &mut Vec<PathBuf>,
) -> Result<(), UsageError> {
    let before = ignored.len();
    ignored.extend(ignored_in(dir));
    let r = walk_dir(dir, ignored, out);
    ignored.truncate(before);
    r
}

fn walk_dir(
    dir: &Path,
    ignored: &mut Vec<PathBuf>,
    out: &mut Vec<PathBuf>,
) -> Result<(), UsageError> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .and_then(|rd| rd.collect::<Result<Vec<_>, _>>())
        .map_err(|e| {
            UsageError(format!(
                "cannot read directory `{}`: {}",
                display_name(dir),
                plain_io(&e)
            ))
        })?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        let Ok(ty) = entry.file_type() else { continue };
        if ignored.contains(&path) {
            continue;
        }
        if ty.is_dir() {
            if !name.starts_with('.') && name != "target" && name != "node_modules" {
                walk_ignoring(&path, ignored, out)?;
            }
        } else if name.ends_with(".rules") && (ty.is_file() || ty.is_symlink()) {
            out.push(path);
        }
    }
    Ok(())
}
