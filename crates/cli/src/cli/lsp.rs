//! `failover lsp`: the language server for editors (src/lsp.rs).

use clap::Args;

use super::CmdResult;

#[derive(Args, Debug)]
#[command(after_help = "Speaks the Language Server Protocol on stdin/stdout; an editor starts it.")]
pub(super) struct LspArgs {
    /// Accepted for editors that pass it (VS Code's language client does);
    /// stdio is the only transport.
    #[arg(long)]
    pub stdio: bool,
}

pub(super) fn run(_args: &LspArgs) -> CmdResult {
    match crate::lsp::run() {
        Ok(()) => Ok(0),
        Err(e) => {
            eprintln!("error: failover lsp: {e}");
            Ok(1)
        }
    }
}
