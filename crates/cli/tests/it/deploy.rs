//! The deployment examples (issue 48, `examples/deploy/`, docs/deploy.md)
//! stay true to this build: the two-replica config passes `check
//! --config`, and every flag the systemd units pass to `failover serve`
//! is one `serve` has. CI also runs `systemd-analyze verify` on the units
//! (.ci/run).

use std::process::Command;

fn failover() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_failover"));
    c.current_dir(crate::repo_root());
    c
}

#[test]
fn the_two_replica_config_passes_check() {
    let o = failover()
        .args([
            "check",
            "--config",
            "examples/deploy/two-replicas/gateway.yaml",
            "--deny-warnings",
        ])
        .env("ANTHROPIC_API_KEY", "sk-ant-fake-deploy-0001")
        .env("OPENAI_API_KEY", "sk-fake-deploy-0002")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn the_units_pass_only_flags_serve_has() {
    let help = failover().args(["serve", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).to_string();
    for unit in [
        "examples/deploy/failover.service",
        "examples/deploy/two-replicas/failover@.service",
    ] {
        let text = std::fs::read_to_string(crate::repo_root().join(unit)).unwrap();
        let exec = text
            .lines()
            .find_map(|l| l.strip_prefix("ExecStart="))
            .unwrap_or_else(|| panic!("{unit} has no ExecStart"));
        assert!(
            exec.starts_with("/usr/local/bin/failover serve "),
            "{unit}: {exec}"
        );
        let flags: Vec<&str> = exec
            .split_whitespace()
            .filter(|w| w.starts_with("--"))
            .collect();
        assert!(flags.len() >= 3, "{unit}: {exec}");
        for f in flags {
            assert!(
                help.contains(&format!("{f} ")),
                "{unit}: `{f}` is not a flag of serve"
            );
        }
    }
}
