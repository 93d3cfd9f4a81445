//! Finding rules files: the embedded default ruleset and operator
//! directories.
//!
//! Within a directory, `.rules` files are taken recursively in path order
//! (byte order of the relative path, `/`-separated), which is also their
//! precedence order. Golden cases (`*.cases.yaml`) beside them are found the
//! same way by `failover test`.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::compile::{self, Build, Layer, Lints};
use crate::diag::Diagnostic;
pub(crate) use crate::fsio::{plain_io, read_regular, too_large};
use crate::syntax::{display_name, SourceMap, MAX_FILE_BYTES};

/// The embedded default ruleset: `rules/` at build time, as (path, text).
/// A unit test checks that this list matches the directory.
pub const DEFAULT_RULES: &[(&str, &str)] = &[
    (
        "rules/00-reasons.rules",
        include_str!("../rules/00-reasons.rules"),
    ),
    (
        "rules/05-selection.rules",
        include_str!("../rules/05-selection.rules"),
    ),
    (
        "rules/10-overrides.rules",
        include_str!("../rules/10-overrides.rules"),
    ),
    (
        "rules/20-providers/bedrock.rules",
        include_str!("../rules/20-providers/bedrock.rules"),
    ),
    (
        "rules/20-providers/cloudflare.rules",
        include_str!("../rules/20-providers/cloudflare.rules"),
    ),
    (
        "rules/20-providers/google.rules",
        include_str!("../rules/20-providers/google.rules"),
    ),
    (
        "rules/20-providers/ollama.rules",
        include_str!("../rules/20-providers/ollama.rules"),
    ),
    (
        "rules/20-providers/openrouter.rules",
        include_str!("../rules/20-providers/openrouter.rules"),
    ),
    (
        "rules/20-providers/qwen.rules",
        include_str!("../rules/20-providers/qwen.rules"),
    ),
    (
        "rules/20-providers/zai.rules",
        include_str!("../rules/20-providers/zai.rules"),
    ),
    (
        "rules/30-billing.rules",
        include_str!("../rules/30-billing.rules"),
    ),
    (
        "rules/40-models.rules",
        include_str!("../rules/40-models.rules"),
    ),
    (
        "rules/45-access.rules",
        include_str!("../rules/45-access.rules"),
    ),
    (
        "rules/50-codes.rules",
        include_str!("../rules/50-codes.rules"),
    ),
    (
        "rules/60-messages.rules",
        include_str!("../rules/60-messages.rules"),
    ),
    (
        "rules/65-languages.rules",
        include_str!("../rules/65-languages.rules"),
    ),
    (
        "rules/70-generic-codes.rules",
        include_str!("../rules/70-generic-codes.rules"),
    ),
    (
        "rules/80-status.rules",
        include_str!("../rules/80-status.rules"),
    ),
    (
        "rules/90-fallbacks.rules",
        include_str!("../rules/90-fallbacks.rules"),
    ),
];

/// A file or directory named as input that cannot be used (missing, not a
/// directory, unreadable, empty of rules files), as opposed to a problem
/// inside a rules file (a diagnostic). The command line reports it as a
/// usage error (exit code 2).
#[derive(Debug)]
pub struct InputError(pub String);

impl fmt::Display for InputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for InputError {}

/// Files of one directory with the given suffix, recursively, in path order.
pub fn files_with_suffix(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>, InputError> {
    let meta = std::fs::metadata(dir).map_err(|e| {
        InputError(format!(
            "cannot read rules directory `{}`: {}",
            display_name(dir),
            plain_io(&e)
        ))
    })?;
    if !meta.is_dir() {
        return Err(InputError(format!(
            "`{}` is not a directory",
            display_name(dir)
        )));
    }
    let mut out = Vec::new();
    let mut within = vec![std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf())];
    walk(dir, suffix, &mut out, &mut within)?;
    out.sort_by(|a, b| {
        a.as_os_str()
            .as_encoded_bytes()
            .cmp(b.as_os_str().as_encoded_bytes())
    });
    Ok(out)
}

/// `within`: the real paths of the directories being walked, outermost
/// first. A symlink to a directory is followed (its files count, in path
/// order as if it were a directory), unless it leads back into one of
/// them: that loop is refused, never skipped in silence.
fn walk(
    dir: &Path,
    suffix: &str,
    out: &mut Vec<PathBuf>,
    within: &mut Vec<PathBuf>,
) -> Result<(), InputError> {
    let entries = std::fs::read_dir(dir).map_err(|e| {
        InputError(format!(
            "cannot read directory `{}`: {}",
            display_name(dir),
            plain_io(&e)
        ))
    })?;
    for entry in entries {
        let entry = entry.map_err(|e| {
            InputError(format!(
                "cannot read directory `{}`: {}",
                display_name(dir),
                plain_io(&e)
            ))
        })?;
        let path = entry.path();
        let ty = entry.file_type().map_err(|e| {
            InputError(format!(
                "cannot read `{}`: {}",
                display_name(&path),
                plain_io(&e)
            ))
        })?;
        let is_dir =
            ty.is_dir() || (ty.is_symlink() && std::fs::metadata(&path).is_ok_and(|m| m.is_dir()));
        if is_dir {
            let real = std::fs::canonicalize(&path).map_err(|e| {
                InputError(format!(
                    "cannot read directory `{}`: {}",
                    display_name(&path),
                    plain_io(&e)
                ))
            })?;
            if let Some(outer) = within.iter().find(|w| **w == real) {
                return Err(InputError(format!(
                    "`{}` is a symlink loop: it leads back to `{}`",
                    display_name(&path),
                    display_name(outer)
                )));
            }
            within.push(real);
            walk(&path, suffix, out, within)?;
            within.pop();
        } else if path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    Ok(())
}

/// Loads and compiles: operator directories first (in the order given),
/// then the embedded defaults unless `with_defaults` is false.
pub fn build(dirs: &[PathBuf], with_defaults: bool) -> Result<Build, InputError> {
    build_with(dirs, with_defaults, Lints::Run)
}

/// [`build`] without the lints, for commands that only use the rules.
pub fn build_unlinted(dirs: &[PathBuf], with_defaults: bool) -> Result<Build, InputError> {
    build_with(dirs, with_defaults, Lints::Skip)
}

fn build_with(dirs: &[PathBuf], with_defaults: bool, lints: Lints) -> Result<Build, InputError> {
    let layers = dirs
        .iter()
        .map(|d| read_layer(d))
        .collect::<Result<_, _>>()?;
    Ok(build_layers_with(layers, with_defaults, lints))
}

/// Reads one operator directory: every `.rules` file in it, recursively,
/// in path order, as a layer named after the directory. A file over
/// [`MAX_FILE_BYTES`] is not read (it becomes an E014 diagnostic).
pub fn read_layer(dir: &Path) -> Result<OperatorLayer<RulesBytes>, InputError> {
    let paths = files_with_suffix(dir, ".rules")?;
    if paths.is_empty() {
        return Err(InputError(format!(
            "`{}` holds no `.rules` files (looked recursively)",
            display_name(dir)
        )));
    }
    let mut files = Vec::new();
    for path in paths {
        // A file over the limit is an E014 diagnostic, like a file
        // that is not UTF-8; it is never read.
        let bytes = match read_regular(&path, MAX_FILE_BYTES as u64) {
            Ok(bytes) => RulesBytes::Read(bytes),
            Err(e) if too_large(&e).is_some() => {
                RulesBytes::TooLarge(too_large(&e).map_or(0, |t| t.size))
            }
            Err(e) => {
                return Err(InputError(format!(
                    "cannot read `{}`: {}",
                    display_name(&path),
                    plain_io(&e)
                )))
            }
        };
        files.push((display_name(&path), bytes));
    }
    Ok((display_name(dir), files))
}

/// An operator layer in memory: its name and its files as (name, bytes).
pub type OperatorLayer<B = Vec<u8>> = (String, Vec<(String, B)>);

/// A rules file's content as read: its bytes, or only its size when it was
/// over [`MAX_FILE_BYTES`] and so not read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RulesBytes {
    /// The file's bytes.
    Read(Vec<u8>),
    /// The file's size in bytes (0 when it could not be told); it was not read.
    TooLarge(u64),
}

impl From<Vec<u8>> for RulesBytes {
    fn from(bytes: Vec<u8>) -> Self {
        RulesBytes::Read(bytes)
    }
}

/// Compiles operator layers given as (layer name, [(file name, bytes)]),
/// highest priority first, then the defaults unless `with_defaults` is false.
pub fn build_layers<B: Into<RulesBytes>>(
    operator: Vec<OperatorLayer<B>>,
    with_defaults: bool,
) -> Build {
    build_layers_with(operator, with_defaults, Lints::Run)
}

pub(crate) fn build_layers_with<B: Into<RulesBytes>>(
    operator: Vec<OperatorLayer<B>>,
    with_defaults: bool,
    lints: Lints,
) -> Build {
    // The defaults alone, used without the lints: read back as compiled
    // ahead of time (`compile::frozen`) when the frozen file is theirs.
    if operator.is_empty() && with_defaults && lints == Lints::Skip {
        if let Some(build) = thaw_defaults() {
            return build;
        }
    }
    compile_layers(operator, with_defaults, lints)
}

/// [`build_layers_with`], compiled now.
fn compile_layers<B: Into<RulesBytes>>(
    operator: Vec<OperatorLayer<B>>,
    with_defaults: bool,
    lints: Lints,
) -> Build {
    let mut sources = SourceMap::new();
    let mut layers = Vec::new();
    let mut early = Vec::new();
    for (name, files) in operator {
        let mut ids = Vec::new();
        for (file, bytes) in files {
            let (id, diag) = match bytes.into() {
                RulesBytes::Read(bytes) => sources.add_bytes(file, bytes),
                RulesBytes::TooLarge(size) => {
                    let (id, problem) = sources.add_too_large(file, size);
                    (id, Some(problem))
                }
            };
            early.extend(diag.map(Diagnostic::unreadable));
            ids.push(id);
        }
        layers.push(Layer {
            name,
            files: ids,
            is_default: false,
        });
    }
    if with_defaults {
        let files = DEFAULT_RULES
            .iter()
            .map(|(name, text)| sources.add(*name, *text))
            .collect();
        layers.push(Layer {
            name: "defaults".into(),
            files,
            is_default: true,
        });
    }
    compile::compile_with(sources, layers, early, lints)
}

/// The embedded defaults as frozen (`compile::frozen`), with their
/// sources for rendering; `None` when the frozen file is not theirs.
fn thaw_defaults() -> Option<Build> {
    let (ruleset, plan) = compile::frozen::thaw(compile::frozen::DEFAULTS, DEFAULT_RULES)?;
    let mut sources = SourceMap::new();
    for (name, text) in DEFAULT_RULES {
        sources.add(*name, *text);
    }
    Some(Build {
        sources,
        diagnostics: Vec::new(),
        ruleset: Some(ruleset),
        plan: Some(plan),
        frozen: true,
    })
}

/// The embedded defaults compiled now, never thawed: what the frozen file
/// must equal.
#[cfg(test)]
pub(crate) fn compile_defaults_now() -> Build {
    compile_layers(Vec::<OperatorLayer>::new(), true, Lints::Skip)
}

#[cfg(test)]
mod tests {

    /// A FIFO named as a rules file is refused at once (reading it would
    /// wait for a writer for ever), and so is a device (`/dev/zero` never
    /// ends). A regular file reads as before.
    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_read() {
        let dir = std::env::temp_dir().join(format!("failover-regular-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let fifo = dir.join("x.rules");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // On a thread: a reader that opened the FIFO would block, and the
        // timeout turns that into a failure instead of a hang.
        let (tx, rx) = std::sync::mpsc::channel();
        let path = fifo.clone();
        std::thread::spawn(move || tx.send(read_regular(&path, 1 << 20).map_err(|e| e.kind())));
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("no block");
        assert_eq!(got, Err(std::io::ErrorKind::InvalidInput));
        assert_eq!(
            read_regular(Path::new("/dev/zero"), 1 << 20).map_err(|e| e.kind()),
            Err(std::io::ErrorKind::InvalidInput)
        );
        let plain = dir.join("y.rules");
        std::fs::write(&plain, "# nothing\n").unwrap();
        assert_eq!(read_regular(&plain, 1 << 20).unwrap(), b"# nothing\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    use super::*;

    /// Issue 16 item 9: a symlinked subdirectory of a rules directory was
    /// skipped in silence (0 rules, exit 0). It is followed; a symlink
    /// that loops back is refused with a message naming it.
    #[cfg(unix)]
    #[test]
    fn symlinked_subdirectories_are_followed_and_loops_refused() {
        let root = std::env::temp_dir().join(format!("failover-symdir-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let (rules, shared) = (root.join("rules"), root.join("shared"));
        std::fs::create_dir_all(&rules).unwrap();
        std::fs::create_dir_all(&shared).unwrap();
        std::fs::write(shared.join("a.rules"), "# shared\n").unwrap();
        std::os::unix::fs::symlink(&shared, rules.join("linked")).unwrap();
        let found = files_with_suffix(&rules, ".rules").unwrap();
        assert_eq!(found, vec![rules.join("linked").join("a.rules")]);
        std::os::unix::fs::symlink(&rules, shared.join("back")).unwrap();
        let err = files_with_suffix(&rules, ".rules").unwrap_err().0;
        assert!(err.contains("is a symlink loop"), "{err}");
        assert!(err.contains("back"), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// Issue 16 item 3: the lints ran at every `classify` start (32 s on
    /// 50,000 identical rules) though only `check` shows warnings. Commands
    /// that use the rules build them without the lints.
    #[test]
    fn only_check_runs_the_lints() {
        let text = "rule a.x when message has \"quota\" => rate_limit\n\
                    rule a.y when message has \"quota\" => billing\n";
        let layer = || {
            vec![(
                "ops".to_string(),
                vec![("ops.rules".to_string(), text.as_bytes().to_vec())],
            )]
        };
        let linted = build_layers(layer(), true);
        assert!(linted
            .diagnostics
            .iter()
            .any(|d| d.code == crate::diag::Code::W001));
        let used = build_layers_with(layer(), true, Lints::Skip);
        assert!(used.diagnostics.is_empty(), "{:?}", used.diagnostics);
        assert!(used.ruleset.is_some());
    }

    #[test]
    fn embedded_list_matches_the_rules_directory() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let on_disk = |suffix: &str| -> Vec<String> {
            files_with_suffix(&root.join("rules"), suffix)
                .unwrap()
                .iter()
                .map(|p| display_name(p.strip_prefix(root).unwrap()))
                .collect()
        };
        let embedded: Vec<String> = DEFAULT_RULES.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            embedded,
            on_disk(".rules"),
            "update DEFAULT_RULES in src/load.rs"
        );
    }
}
