//! `failover check`: exit codes and bad input (issue: rules language).

use std::process::{Command, Output};

fn failover(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(args)
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("failover-check-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn shipped_rules_are_clean() {
    let o = failover(&["check", "--deny-warnings"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("no problems"));
}

#[test]
fn errors_exit_1_and_warnings_only_with_deny_warnings() {
    let diags = crate::repo_root().join("tests/diagnostics");
    let dir = temp_dir("warn");
    std::fs::copy(diags.join("w002_slow_regex.rules"), dir.join("w.rules")).unwrap();
    let d = dir.to_str().unwrap();
    assert_eq!(failover(&["check", "--rules", d]).status.code(), Some(0));
    assert_eq!(
        failover(&["check", "--rules", d, "--deny-warnings"])
            .status
            .code(),
        Some(1)
    );
    std::fs::copy(diags.join("e003_duplicate_id.rules"), dir.join("x.rules")).unwrap();
    let o = failover(&["check", "--rules", d]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("E003") && text(&o).contains("W002"),
        "{}",
        text(&o)
    );
}

#[test]
fn usage_errors_exit_2_and_name_the_path() {
    let o = failover(&["check", "--rules", "/definitely/not/here"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("`/definitely/not/here`"), "{}", text(&o));

    let empty = temp_dir("empty");
    std::fs::write(empty.join("notes.txt"), "not rules").unwrap();
    let o = failover(&["check", "--rules", empty.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("holds no `.rules` files"), "{}", text(&o));

    let o = failover(&["check", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn ten_megabyte_file_is_refused_quickly_with_a_clear_message() {
    let dir = temp_dir("huge");
    let line = "rule r.x when message has \"quota\" => rate_limit\n";
    let big: String = line.repeat(10 * 1024 * 1024 / line.len() + 1);
    std::fs::write(dir.join("big.rules"), big).unwrap();
    let start = std::time::Instant::now();
    let o = failover(&["check", "--rules", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("E014") && text(&o).contains("too large"),
        "{}",
        text(&o)
    );
    assert!(start.elapsed().as_secs() < 20, "took {:?}", start.elapsed());
}

#[test]
fn unreadable_file_is_a_usage_error() {
    let dir = temp_dir("unreadable");
    std::os::unix::fs::symlink("/definitely/missing", dir.join("dangling.rules")).unwrap();
    let o = failover(&["check", "--rules", dir.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("dangling.rules"), "{}", text(&o));
}

#[test]
fn example_operator_layer_checks_and_passes_its_cases() {
    let dir = crate::repo_root().join("examples/operator-rules");
    let dir = dir.to_str().unwrap();
    let o = failover(&["check", "--deny-warnings", "--rules", dir]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = failover(&["test", "--rules", dir]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("content_policy.flagged"), "{}", text(&o));
}

/// `check --plan` is what an operator reads to see how each rule is
/// reached and how each regex is decided (issue: classification).
#[test]
fn plan_shows_routes_and_regex_decisions() {
    let dir = crate::repo_root().join("tests/plan");
    let o = failover(&[
        "check",
        "--no-defaults",
        "--rules",
        dir.to_str().unwrap(),
        "--plan",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout).replace(dir.to_str().unwrap(), "tests/plan");
    // Issue 47: the plan ends with what each layer costs at start-up —
    // timings, so they are checked for their shape, not snapshotted.
    let (plan, costs) = out
        .split_once("\nstart-up cost (")
        .unwrap_or_else(|| panic!("no start-up costs:\n{out}"));
    let layer = costs
        .lines()
        .find(|l| l.starts_with("  + tests/plan"))
        .unwrap_or_else(|| panic!("no line for the layer:\n{costs}"));
    assert!(
        layer.contains(" ms  (+") && layer.ends_with(" rules)"),
        "{layer}"
    );
    assert!(
        !costs.contains("defaults") && !costs.contains("the model"),
        "{costs}"
    );
    insta::assert_snapshot!(format!("{plan}\n"));
}

/// Issue 47: the defaults alone are read back as compiled ahead of time,
/// and `check --plan` says so; with an operator layer they compile with
/// it, and the layer's line carries that cost.
#[test]
fn plan_costs_show_the_frozen_defaults() {
    let o = failover(&["check", "--plan"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let costs = out.split_once("\nstart-up cost (").expect("costs").1;
    let line = |prefix: &str| {
        costs
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no `{prefix}` line:\n{costs}"))
            .to_string()
    };
    let defaults = line("  defaults (frozen) ");
    assert!(defaults.contains(" ms  (") && defaults.ends_with(" rules)"));
    assert!(!costs.contains("compile with it"), "{costs}");
    let dir = crate::repo_root().join("tests/plan");
    let o = failover(&["check", "--rules", dir.to_str().unwrap(), "--plan"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("  (with an operator layer the defaults compile with it)"),
        "{out}"
    );
}

/// Tables pad their columns; a name too long to pad (70,000 characters:
/// `format!` panics past a width of 65,535) prints whole instead.
#[test]
fn very_long_rule_ids_print_whole_in_tables() {
    let dir = temp_dir("long-id");
    let id = format!("ops.{}", "a".repeat(70_000));
    std::fs::write(
        dir.join("long.rules"),
        format!("rule {id} when message has \"zzqq wibble\" => timeout\n"),
    )
    .unwrap();
    std::fs::write(
        dir.join("long.cases.yaml"),
        format!("- {{message: \"zzqq wibble\", expect: timeout, rule: {id}}}\n"),
    )
    .unwrap();
    let d = dir.to_str().unwrap();
    for args in [
        vec!["check", "--rules", d, "--plan"],
        vec!["test", "--rules", d],
    ] {
        let o = failover(&args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(&id), "{args:?}");
    }
}

/// Files saved with a UTF-8 byte-order mark (Windows editors) read as if
/// it were not there, and positions in diagnostics count from after it.
#[test]
fn byte_order_marks_are_ignored() {
    let dir = temp_dir("bom");
    std::fs::write(
        dir.join("b.rules"),
        "\u{feff}rule ops.bom when message has \"zzqq wibble\" => timeout\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.cases.yaml"),
        "\u{feff}- {message: \"zzqq wibble\", expect: timeout, rule: ops.bom}\n",
    )
    .unwrap();
    let d = dir.to_str().unwrap();
    let o = failover(&["check", "--rules", d]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = failover(&["test", "--rules", d]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    std::fs::write(
        dir.join("b.rules"),
        "\u{feff}rule ops.bom when => timeout\n",
    )
    .unwrap();
    let o = failover(&["check", "--rules", d]);
    assert!(text(&o).contains("b.rules:1:19"), "{}", text(&o));
}

/// Issue 16 item 4: a 3 MB regex literal was parsed whole before the
/// compiled-size limit refused it (16.5 s and 1.2 GB). It is now refused
/// by its length, before parsing, under a 256 MiB address-space cap.
#[test]
fn a_huge_regex_is_refused_by_its_length_first() {
    let dir = temp_dir("bigregex");
    let pattern: String = (0..3_000_000u32)
        .map(|i| char::from(b'a' + (i * 7 % 26) as u8))
        .collect();
    std::fs::write(
        dir.join("x.rules"),
        format!("rule b.re when message matches /{pattern}/ => rate_limit\n"),
    )
    .unwrap();
    let started = std::time::Instant::now();
    let o = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 262144 && exec \"$@\"")
        .arg("sh")
        .arg(env!("CARGO_BIN_EXE_failover"))
        .args(["check", "--rules"])
        .arg(&dir)
        .output()
        .unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(t.contains("error[E004]: regex is too long"), "{t}");
    assert!(
        t.contains("this pattern is 2.9 MiB; the limit is 32 KiB"),
        "{t}"
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    // Short patterns that would compile too big are still refused by the
    // compiled-size limit, at once.
    std::fs::write(
        dir.join("x.rules"),
        "rule b.re when message matches /(a{1000}){1000}/ => rate_limit\n",
    )
    .unwrap();
    let o = failover(&["check", "--rules", dir.to_str().unwrap()]);
    assert!(
        text(&o).contains("the compiled pattern would exceed"),
        "{}",
        text(&o)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 16 item 6: rules diagnostics quoted whole source lines, comments
/// included, so a key pasted into a rules comment was printed by `check`.
/// A line that may hold a secret is not quoted (as config errors do), and
/// words the messages quote are masked when shaped like a key; where the
/// problem is (file:line:col) is still said.
#[test]
fn diagnostics_do_not_quote_secrets() {
    let dir = temp_dir("secrets");
    let key = "sk-proj-FAKEq8Kd93jLqP0xZ7vB2nM4cT6yW1eR5uI";
    std::fs::write(
        dir.join("a.rules"),
        format!(
            "rule a.one when message has \"x\" => rate_limt # old key {key}\n\
             rule a.two when message has \"y\" => {key}\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("b.rules"),
        format!("rule a.three when status == 429 {key} => rate_limit\n"),
    )
    .unwrap();
    let o = failover(&["check", "--rules", dir.to_str().unwrap()]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(1), "{t}");
    assert!(!t.contains("FAKE"), "{t}");
    for at in ["a.rules:1:", "a.rules:2:", "b.rules:1:"] {
        assert!(t.contains(at), "{at} missing:\n{t}");
    }
    assert!(t.contains("(line not shown: it may hold a secret)"), "{t}");
    std::fs::remove_dir_all(&dir).unwrap();
}

// Issue 35: `check --config` (and `serve --check`) report every problem of
// a gateway config in one run — the failover keys and the gateway's own —
// each with its code, key path and line:column; the literal API key is
// one of them and its value is never printed.
#[test]
fn config_problems_come_all_at_once_with_positions_and_never_a_key() {
    let dir = temp_dir("check-config");
    let config = dir.join("gw.yaml");
    let key = "sk-live-abcdef0123456789abcdef";
    std::fs::write(
        &config,
        format!(
            "agents:\n  list:\n    - id: coder\n      model: {{ primary: 42 }}\n\
             models:\n  providers:\n    openai:\n      baseUrl: https://api.openai.com/v1\n      api: openai-completions\n      apiKey: {key}\n\
             \x20   llama.cpp:\n      baseUrl: http://127.0.0.1:8080/v1\n      api: openai-completions\n      auth: maybe\n\
             classify:\n  minConfidence: 3\n"
        ),
    )
    .unwrap();
    let path = config.to_str().unwrap();
    let o = failover(&["check", "--config", path]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let out = text(&o);
    for (path, at) in [
        ("agents.list[0].model.primary", ":4:"),
        (
            "models.providers.openai.apiKey: a literal API key is refused",
            ":10:",
        ),
        ("models.providers.llama.cpp.auth", ":14:"),
        ("classify.minConfidence", ":16:"),
    ] {
        let line = out
            .lines()
            .position(|l| l.contains(path))
            .unwrap_or_else(|| panic!("{path} missing:\n{out}"));
        let next = out.lines().nth(line + 1).unwrap();
        assert!(next.contains(at), "{path} at {at}: {next}\n{out}");
    }
    assert!(out.contains("error[E023]"), "{out}");
    assert!(out.contains("4 errors, 0 warnings"), "{out}");
    assert!(!out.contains("sk-live"), "the key is never printed:\n{out}");

    let o = failover(&["check", "--config", path, "--json"]);
    assert_eq!(o.status.code(), Some(1));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["errors"], 4);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("sk-live"));

    let o = failover(&["serve", "--config", path, "--check"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(text(&o).contains("4 errors"), "{}", text(&o));

    let ok = crate::repo_root().join("examples/gateway.yaml");
    let o = failover(&["check", "--config", ok.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let _ = std::fs::remove_dir_all(dir);
}
