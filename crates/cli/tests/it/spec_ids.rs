//! The behaviour reference stands in the repository (issue 15 item 7):
//! every SPEC id (`R8.3`) that the rules, the sources and the tests cite
//! is defined in `docs/SPEC.md`, and the README links nothing outside the
//! repository.

use std::collections::BTreeSet;
use std::path::Path;

fn root() -> std::path::PathBuf {
    crate::repo_root()
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            walk(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn every_cited_spec_id_is_defined_in_docs_spec() {
    let spec = std::fs::read_to_string(root().join("docs/SPEC.md")).unwrap();
    // Defined: `- R8.3 …` items and `## R8.` section headings.
    let def = regex::Regex::new(r"(?m)^(?:- |#+ )(R[0-9]+(?:\.[0-9]+)*)\b").unwrap();
    let defined: BTreeSet<&str> = def
        .captures_iter(&spec)
        .map(|c| c.get(1).unwrap().as_str())
        .collect();
    assert!(defined.len() > 80, "{defined:?}");
    let cite = regex::Regex::new(r"\bR[0-9]+(?:\.[0-9]+)*\b").unwrap();
    let mut files = Vec::new();
    // `crates/` holds every crate's sources, tests, benches and examples.
    for dir in ["rules", "crates", "tests", "examples"] {
        walk(&root().join(dir), &mut files);
    }
    let mut missing = Vec::new();
    let mut cited = 0;
    for path in files {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue; // not text
        };
        for (n, line) in text.lines().enumerate() {
            for m in cite.find_iter(line) {
                cited += 1;
                if !defined.contains(m.as_str()) {
                    missing.push(format!(
                        "{}:{}: {}",
                        path.strip_prefix(root()).unwrap().display(),
                        n + 1,
                        m.as_str()
                    ));
                }
            }
        }
    }
    assert!(cited > 500, "only {cited} citations found");
    assert!(
        missing.is_empty(),
        "cited but not in docs/SPEC.md:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_readme_links_nothing_outside_the_repository() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        !readme.contains("../"),
        "README.md points outside the repository"
    );
    // Every relative link or backquoted repository path it names exists.
    let link = regex::Regex::new(r"\]\(([^)#:]+)(?:#[^)]*)?\)").unwrap();
    for c in link.captures_iter(&readme) {
        let target = c.get(1).unwrap().as_str();
        assert!(
            root().join(target).exists(),
            "README links `{target}`, which is not in the repository"
        );
    }
    for path in [
        "docs/SPEC.md",
        "docs/json.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
    ] {
        assert!(readme.contains(path), "README does not mention {path}");
        assert!(root().join(path).exists(), "{path} is missing");
    }
}

// Issue 48: the README is the front door — at most 400 lines, no `sudo` in
// a copy-paste line — and every relative link of the pages it hands over
// to (docs/*.md) resolves.
#[test]
fn i48_the_front_door_is_short_and_its_pages_link_true() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(lines <= 400, "README.md has {lines} lines");
    let mut in_block = false;
    for l in readme.lines() {
        if l.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if in_block {
            assert!(
                !l.trim_start().starts_with("sudo "),
                "a copy-paste line with sudo: {l}"
            );
        }
    }
    let link = regex::Regex::new(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)").unwrap();
    for e in std::fs::read_dir(root().join("docs")).unwrap().flatten() {
        let path = e.path();
        if path.extension().is_none_or(|x| x != "md") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for c in link.captures_iter(&text) {
            let target = c.get(1).unwrap().as_str();
            assert!(
                path.parent().unwrap().join(target).exists(),
                "{} links `{target}`, which does not exist",
                path.display()
            );
        }
    }
}
