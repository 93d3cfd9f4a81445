//! The README's walkthrough, run as written (issue 15, "How it is shown"):
//! each ```sh block between `<!-- walkthrough:begin` and
//! `<!-- walkthrough:end -->` runs in order with bash, in one empty
//! directory, with this build's `failover` first on the `PATH`; it must
//! exit as its last line says (`# exit N`, else 0), and its output must
//! hold the lines of the ```text block after it, in order (`…` stands for
//! anything within a line).

use std::path::Path;
use std::process::Command;

struct Step {
    script: String,
    expect: Vec<String>,
    exit: i32,
}

fn steps(readme: &str) -> Vec<Step> {
    let begin = readme
        .find("<!-- walkthrough:begin")
        .expect("README has no walkthrough");
    let end = readme[begin..]
        .find("<!-- walkthrough:end -->")
        .expect("the walkthrough does not end")
        + begin;
    let body = &readme[begin..end];
    let mut steps: Vec<Step> = Vec::new();
    let mut lines = body.lines();
    while let Some(line) = lines.next() {
        let fence = line.trim_end();
        if fence != "```sh" && fence != "```text" {
            continue;
        }
        let block: Vec<&str> = lines
            .by_ref()
            .take_while(|l| l.trim_end() != "```")
            .collect();
        if fence == "```sh" {
            let exit = block
                .last()
                .and_then(|l| l.rsplit_once("# exit "))
                .and_then(|(_, n)| n.trim().parse().ok())
                .unwrap_or(0);
            steps.push(Step {
                script: block.join("\n"),
                expect: Vec::new(),
                exit,
            });
        } else {
            let step = steps.last_mut().expect("a text block before any sh block");
            step.expect = block.iter().map(|l| l.to_string()).collect();
        }
    }
    steps
}

/// Whether `line` matches `pattern`, `…` standing for anything.
fn matches(line: &str, pattern: &str) -> bool {
    let mut rest = line;
    for (i, part) in pattern.split('…').enumerate() {
        match rest.find(part) {
            Some(at) if i > 0 || at == 0 => rest = &rest[at + part.len()..],
            _ => return false,
        }
    }
    pattern.ends_with('…') || rest.is_empty()
}

#[test]
fn the_readme_walkthrough_runs_as_written() {
    let root = crate::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let steps = steps(&readme);
    assert!(steps.len() >= 4, "{} steps", steps.len());
    let dir = std::env::temp_dir().join(format!("failover-walkthrough-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_failover")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    for (n, step) in steps.iter().enumerate() {
        let o = Command::new("bash")
            .arg("-c")
            .arg(&step.script)
            .current_dir(&dir)
            .env("PATH", &path)
            .env_remove("NO_COLOR")
            .output()
            .unwrap();
        let out = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(
            o.status.code(),
            Some(step.exit),
            "step {} exited otherwise than the README says:\n{}\n---\n{out}",
            n + 1,
            step.script
        );
        let mut lines = out.lines();
        for want in &step.expect {
            assert!(
                lines.any(|l| matches(l, want)),
                "step {}: the output does not show `{want}` (in order):\n{out}",
                n + 1
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn ellipses_match_anything_within_a_line() {
    assert!(matches(
        "ok: 13 files, 200 rules; no problems",
        "ok: 13 files, … no problems"
    ));
    assert!(!matches("ok: 13 files", "ok: 13 files, … no problems"));
    assert!(matches("a b", "a b"));
    assert!(!matches("xa b", "a b"));
}

/// CI runs the README's test command (issue 15 item 8), so the command a
/// newcomer is told to run is the one kept green.
#[test]
fn ci_runs_the_readmes_test_command() {
    let root = crate::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let two = readme
        .split("## Two commands")
        .nth(1)
        .and_then(|s| s.split("```sh\n").nth(1))
        .and_then(|s| s.split("```").next())
        .expect("the README's two commands");
    let test = two
        .lines()
        .find(|l| l.starts_with("cargo test"))
        .and_then(|l| l.split('#').next())
        .map(str::trim)
        .expect("a cargo test command");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    assert!(
        ci.lines().any(|l| l.trim().ends_with(test)),
        "`.ci/run` does not run the README's test command `{test}`"
    );
}

// Issue 35: the README's Runner example is the embedder's code, which CI
// compiles and runs (`examples/embedder`): each marked block, indented as
// in `main`, must appear there verbatim, so the copy cannot drift.
#[test]
fn readme_runner_example_is_the_compiled_embedder() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Moved from the README with the embedder's guide (issue 48).
    let readme = std::fs::read_to_string(root.join("docs/embedding.md")).unwrap();
    let embedder = std::fs::read_to_string(root.join("examples/embedder/src/main.rs")).unwrap();
    for name in ["runner-example", "runner-run"] {
        let begin = format!("<!-- {name}:begin -->");
        let start = readme
            .find(&begin)
            .unwrap_or_else(|| panic!("README lacks {begin}"));
        let rest = &readme[start + begin.len()..];
        let block = &rest[..rest
            .find(&format!("<!-- {name}:end -->"))
            .unwrap_or_else(|| panic!("{name} is not closed"))];
        let code = block
            .trim()
            .strip_prefix("```rust\n")
            .and_then(|b| b.strip_suffix("```"))
            .unwrap_or_else(|| panic!("{name}: not one rust block"));
        let indented: String = code
            .lines()
            .map(|l| {
                if l.is_empty() {
                    "\n".to_string()
                } else {
                    format!("    {l}\n")
                }
            })
            .collect();
        assert!(
            embedder.contains(&indented),
            "README's {name} block differs from examples/embedder/src/main.rs:\n{indented}"
        );
    }
}

// Issue 35: every example output in the README is what the command prints
// now — the classify line, the field corpus summary, the evidence model's
// rows — so none can drift.
#[test]
fn readme_example_outputs_are_what_the_commands_print() {
    let root = crate::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let run = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_failover"))
            .args(args)
            .current_dir(&root)
            .output()
            .unwrap();
        String::from_utf8(o.stdout).unwrap()
    };
    let block_after = |marker: &str| -> String {
        let at = readme
            .find(marker)
            .unwrap_or_else(|| panic!("README lacks {marker:?}"));
        let rest = &readme[at..];
        let start = rest.find("```").unwrap();
        let body = &rest[start..];
        let body = &body[body.find('\n').unwrap() + 1..];
        body[..body.find("```").unwrap()].to_string()
    };

    let line = block_after("The first prints one JSON line per input line:");
    let classified = run(&["classify", "examples/errors.jsonl"]);
    assert!(
        classified.lines().any(|l| l == line.trim()),
        "README's classify line is not in the output:\n{line}\n---\n{classified}"
    );

    // The field corpus's outputs live in its page (issue 48: README ≤ 400
    // lines).
    let readme = std::fs::read_to_string(root.join("docs/field-corpus.md")).unwrap();
    let block_after = |marker: &str| -> String {
        let at = readme
            .find(marker)
            .unwrap_or_else(|| panic!("docs/field-corpus.md lacks {marker:?}"));
        let rest = &readme[at..];
        let start = rest.find("```").unwrap();
        let body = &rest[start..];
        let body = &body[body.find('\n').unwrap() + 1..];
        body[..body.find("```").unwrap()].to_string()
    };
    let tested = run(&["test"]);
    for marker in [
        "`failover test` prints, after the golden table:",
        "nothing trains on:",
    ] {
        let block = block_after(marker);
        assert!(
            tested.contains(block.as_str()),
            "README's block after {marker:?} is not what `failover test` prints:\n{block}\n---\n{tested}"
        );
    }
}
