//! failover-cli: the `failover` command line. Thin: it parses arguments,
//! calls the libraries (`failover` for the engine, state and runner,
//! `failover-syntax` for the rules text and diagnostics, `failover-gateway`
//! for `serve`), and formats their results for a terminal, a pipe or JSON.

// The stages this binary sits on, named as the library names them.
use failover_syntax::rules as syntax;
use failover_syntax::{diag, redact};

// The embedded golden cases and field corpus, below both their readers.
mod cli;
mod embedded;
mod lsp;

// mimalloc: measured in benches/README.md ("Gateway"); the
// library leaves the allocator to whoever embeds it.
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    std::process::exit(cli::main());
}
