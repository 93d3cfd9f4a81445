//! The command line's integration tests, one binary (`cargo test -p
//! failover-cli --test it`): the `failover` binary run end to end against
//! the repository's data (`tests/fixtures`, `tests/diagnostics`,
//! `examples/`, `docs/`, the README), plus the workspace's structure
//! checks (`module_graph`, `spec_ids`).
//!
//! `serve_support` is the gateway's test support (mock upstreams on
//! loopback), shared with crates/gateway/tests/it rather than copied.

use std::path::PathBuf;

#[path = "../../../gateway/tests/it/serve_support/mod.rs"]
mod serve_support;

mod bounded_readers;
mod chain;
mod check_cli;
mod classify_cli;
mod cli_pipes;
mod config_bounds;
mod config_secrets;
mod deploy;
mod fmt;
mod keys_cli;
mod lsp;
mod model_cli;
mod module_graph;
mod readme_walkthrough;
mod serve_memory;
mod serve_process;
mod serve_reload_cli;
mod serve_state_degraded;
mod serve_traces;
mod simulate;
mod simulate_backends;
mod spec_ids;
mod state_cli;
mod status;
mod store_quarantine;
mod test_cli;

/// The repository root, where the data the tests read lives. Commands run
/// from here, so the paths in their messages (and in the snapshots) are
/// the same relative paths as before the workspace split.
fn repo_root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the repository root")
}
