//! A reader that goes away (`failover test | head -1`) ends the command
//! quietly, as with any Unix tool: no panic, no "Broken pipe" backtrace.

use std::process::{Command, Stdio};

#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_the_command_without_a_panic() {
    use std::os::unix::process::ExitStatusExt;
    for args in [
        &["test", "--all"][..],
        &["classify", "examples/errors.jsonl"][..],
    ] {
        let mut child = Command::new(env!("CARGO_BIN_EXE_failover"))
            .args(args)
            .current_dir(crate::repo_root())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the command writes anything.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("Broken pipe"), "{args:?}: {stderr}");
        // Killed by SIGPIPE (13), as `yes | head` is.
        assert_eq!(
            out.status.signal(),
            Some(13),
            "{args:?}: {:?} {stderr}",
            out.status
        );
    }
}
