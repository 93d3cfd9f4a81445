//! The crate's own tests that reach its internals (the private stages and
//! the `#[cfg(test)]` hooks such as the store's write faults), one module
//! per subject. Tests the public API alone can run are in `tests/it`.
//!
//! The data they read stays at the repository root (`rules/`, `docs/`,
//! `examples/`, `tests/fixtures/`): [`repo_root`].

use std::path::PathBuf;

/// What this thread logs while the capture lives, as plain text: a
/// `tracing` subscriber scoped to the thread, writing into a buffer.
///
/// `tracing` computes a call site's interest, the first time any thread
/// meets it, from every live dispatcher, but when only one exists, from
/// the default of the thread that meets it. The other tests of a binary
/// run on threads without a subscriber: one of them meeting a call site
/// first would cache it as "never", and the capture would miss it. So a
/// second, idle dispatcher lives as long as the capture: with two alive,
/// every call site asks them all.
pub(crate) struct LogCapture {
    buf: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    _guard: tracing::subscriber::DefaultGuard,
    _idle: tracing::Dispatch,
}

#[derive(Clone)]
struct LogWriter(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl LogCapture {
    /// Starts capturing this thread's log.
    pub(crate) fn start() -> Self {
        let idle = idle_dispatcher();
        let buf = std::sync::Arc::default();
        let w = LogWriter(std::sync::Arc::clone(&buf));
        let sub = tracing_subscriber::fmt()
            .with_writer(move || w.clone())
            .with_ansi(false)
            .finish();
        LogCapture {
            buf,
            _guard: tracing::subscriber::set_default(sub),
            _idle: idle,
        }
    }

    /// What was logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8(self.buf.lock().unwrap().clone()).unwrap()
    }
}

/// A dispatcher that does nothing, kept alive beside a capture scoped to
/// one thread (see [`LogCapture`]).
pub(crate) fn idle_dispatcher() -> tracing::Dispatch {
    tracing::Dispatch::new(tracing_subscriber::registry())
}

mod fuzz_readers;
mod golden_cases;
mod matcher_agrees;
mod parser_fuzz;
mod precedence;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_common;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_events;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_executor;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_load;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_skip;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_streams;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod run_tracing;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod store_backends;
mod store_bad_input;
mod store_concurrency;
mod store_crash;
#[cfg(feature = "redis")]
mod store_outage_merge;
mod store_quarantine;
#[cfg(feature = "redis")]
mod store_redis_outage;
#[cfg(feature = "redis")]
mod store_round_trips;
mod store_rules;

/// The repository's root, where the data files are.
pub(crate) fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .canonicalize()
        .expect("the repository root")
}

/// The golden cases of the default ruleset (`rules/**/*.cases.yaml`) as
/// (path from the root, text), in path order: what the command line
/// embeds for `failover test`.
pub(crate) fn default_cases() -> Vec<(String, String)> {
    let root = repo_root();
    crate::load::files_with_suffix(&root.join("rules"), ".cases.yaml")
        .expect("rules/")
        .into_iter()
        .map(|p| {
            let name = crate::syntax::display_name(p.strip_prefix(&root).unwrap());
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect()
}

/// The name the test harness gives test `name` of the module whose
/// `module_path!()` is `module`: its path without the crate's name
/// (`tests::store_crash::crash_child`). The tests that run this binary
/// again as a child pick the child's test by it, with `--exact`.
pub(crate) fn test_name(module: &str, name: &str) -> String {
    let path = module.split_once("::").map_or("", |(_, p)| p);
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}::{name}")
    }
}

/// Whether this is a deep run (`FAILOVER_DEEP=1`, as CI runs the tests).
pub(crate) fn deep() -> bool {
    std::env::var_os("FAILOVER_DEEP").is_some_and(|v| !v.is_empty() && v != "0")
}

/// A property's case count: `n`, or eight times as many in a deep run.
pub(crate) fn cases(n: u32) -> u32 {
    if deep() {
        n * 8
    } else {
        n
    }
}
