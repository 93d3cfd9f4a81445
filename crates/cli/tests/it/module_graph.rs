//! Data flows one way (ARCHITECTURE.md): between the workspace's crates,
//! and inside each crate between its modules. Checked on the manifests and
//! the source text.
//!
//! - Between crates: `failover-syntax` < `failover` < `failover-gateway` <
//!   `failover-cli`. A crate depends — in its manifest's normal, build and
//!   target dependencies — and refers in its `src/` (`use failover_cli…`,
//!   `failover_gateway::…` outside `#[cfg(test)]`) only on crates below
//!   it. `failover-testkit` is test support: it depends on no crate of the
//!   workspace, and none has it as a normal dependency.
//! - Inside a crate: no module imports, directly or through others, a
//!   module that imports it back. Every `crate::…` path (including
//!   `use crate::{a, b}` groups) and every `super::…` sibling path outside
//!   `#[cfg(test)]` items, test modules, comments and string literals is
//!   an edge, between top-level modules and between the submodules of one
//!   module. The crate roots (`lib.rs`, `main.rs`) and the façade
//!   `failover/src/errors.rs` only re-export (or, the gateway's root, hold
//!   the server over its modules) and are left out.
//! - Stages: `failover`'s modules are declared in its `lib.rs` in the
//!   order data flows, below the names it takes from `failover-syntax`;
//!   `failover-syntax`'s stages are [`SYNTAX_STAGES`]. Every import points
//!   at a stage above the importer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

/// The workspace's crates, lowest first: (directory from the repository's
/// root, package, the name code uses). A crate may use only those before
/// it. The engine is the main package, at the root (`.`).
const LAYERS: &[(&str, &str, &str)] = &[
    ("crates/syntax", "failover-syntax", "failover_syntax"),
    (".", "failover", "failover"),
    ("crates/gateway", "failover-gateway", "failover_gateway"),
    ("crates/cli", "failover-cli", "failover_cli"),
];

/// Test support, a dev-dependency only: outside the layers.
const TESTKIT: (&str, &str, &str) = ("crates/testkit", "failover-testkit", "failover_testkit");

/// `failover-syntax`'s stages in the order data flows (its `lib.rs`
/// declares them alphabetically): files and reads, redaction, source
/// maps, diagnostics, the rules' parser and formatter.
const SYNTAX_STAGES: &[&str] = &["fsio", "redact", "source", "diag", "rules"];

/// Modules that only re-export, per crate directory: left out of the graph.
const FACADES: &[(&str, &[&str])] = &[(".", &["errors"])];

/// The repository's root: the workspace and the `failover` package.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn src_of(dir: &str) -> PathBuf {
    root().join(dir).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// `src/a/b.rs` → ["a", "b"]; `src/a/mod.rs` → ["a"]; the root → [].
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if matches!(
        parts.last().map(String::as_str),
        Some("mod" | "lib" | "main")
    ) {
        parts.pop();
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The text with its comments and the contents of its string and
/// character literals blanked (newlines kept): braces, `//` and paths
/// inside them are not code.
fn blank_literals(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let next = c.get(i + 1).copied();
        // (`br"…"`: the `b` is a prefix, not an identifier)
        let after_ident =
            i > 0 && is_ident(c[i - 1]) && !(c[i - 1] == 'b' && (i < 2 || !is_ident(c[i - 2])));
        if ch == '/' && next == Some('/') {
            while i < c.len() && c[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if ch == '/' && next == Some('*') {
            let mut depth = 0;
            while i < c.len() {
                if c[i] == '/' && c.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    out.push(blank(c[i]));
                    i += 1;
                }
            }
        } else if ch == 'r' && !after_ident && matches!(next, Some('"' | '#')) {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            while c.get(j) == Some(&'#') {
                j += 1;
            }
            if c.get(j) != Some(&'"') {
                out.push(ch);
                i += 1;
                continue;
            }
            let hashes = j - i - 1;
            out.extend(&c[i..=j]);
            i = j + 1;
            while i < c.len() {
                if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
                    out.extend(&c[i..=i + hashes]);
                    i += hashes + 1;
                    break;
                }
                out.push(blank(c[i]));
                i += 1;
            }
        } else if ch == '"' {
            out.push('"');
            i += 1;
            while i < c.len() {
                match c[i] {
                    '\\' => {
                        out.push(' ');
                        if let Some(&e) = c.get(i + 1) {
                            out.push(blank(e));
                        }
                        i += 2;
                    }
                    '"' => {
                        out.push('"');
                        i += 1;
                        break;
                    }
                    other => {
                        out.push(blank(other));
                        i += 1;
                    }
                }
            }
        } else if ch == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{…}'.
            let mut j = i + 3;
            while j < c.len() && c[j] != '\'' {
                j += 1;
            }
            out.push('\'');
            out.extend(std::iter::repeat_n(' ', j.min(c.len()) - i - 1));
            out.push('\'');
            i = j + 1;
        } else if ch == '\'' && c.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
        } else {
            // Code, and lifetimes (`'a`).
            out.push(ch);
            i += 1;
        }
    }
    out
}

/// Whether the item that `l` continues ends on it (braces counted).
fn ends_item(l: &str, depth: &mut i32, opened: &mut bool) -> bool {
    for ch in l.chars() {
        match ch {
            '{' => {
                *depth += 1;
                *opened = true
            }
            '}' => *depth -= 1,
            _ => {}
        }
    }
    (*opened && *depth <= 0) || (!*opened && l.trim_end().ends_with(';'))
}

/// The code of a file: without comments, string contents and
/// `#[cfg(test)]` items (a test module may use anything).
fn code_of(text: &str) -> String {
    let text = blank_literals(text);
    let mut out = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.trim_start().strip_prefix("#[cfg(test)]") {
            // Skip the item that follows: up to its matching closing brace.
            let (mut depth, mut opened) = (0, false);
            let mut done = ends_item(rest, &mut depth, &mut opened);
            while !done {
                match lines.next() {
                    Some(l) => done = ends_item(l, &mut depth, &mut opened),
                    None => break,
                }
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// The modules a file declares as `#[cfg(test)] mod name;` (in a file of
/// their own, which is then test code).
fn test_modules(text: &str) -> Vec<String> {
    let decl = regex::Regex::new(
        r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;",
    )
    .unwrap();
    decl.captures_iter(&blank_literals(text))
        .map(|c| c[1].to_string())
        .collect()
}

/// Every path written after `prefix` (`crate::`, `super::`), with
/// `{a::b, c}` groups expanded, as segment lists.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before_ok = rest[..i].chars().next_back().is_none_or(|c| !is_ident(c));
        rest = &rest[i + prefix.len()..];
        if !before_ok {
            continue;
        }
        parse_tree(rest, Vec::new(), &mut out);
    }
    out
}

/// Reads `a::b::{c, d::e}` at the start of `s` into full paths.
fn parse_tree(s: &str, base: Vec<String>, out: &mut Vec<Vec<String>>) {
    let s = s.trim_start();
    if let Some(inner) = s.strip_prefix('{') {
        let mut depth = 0;
        let mut start = 0;
        let mut end = inner.len();
        for (i, c) in inner.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    end = i;
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    parse_tree(&inner[start..i], base.clone(), out);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parse_tree(&inner[start..end], base, out);
        return;
    }
    let ident: String = s.chars().take_while(|c| is_ident(*c)).collect();
    if ident.is_empty() {
        if !base.is_empty() {
            out.push(base);
        }
        return;
    }
    let mut path = base;
    path.push(ident.clone());
    let after = &s[ident.len()..];
    match after.strip_prefix("::") {
        Some(more) => parse_tree(more, path, out),
        None => out.push(path),
    }
}

/// The import graphs of one crate's `src/`: between its top-level modules,
/// and between the submodules of each module (`a::b` → `a::c`).
fn graphs(src: &Path, facades: &[&str]) -> (Graph, Graph) {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let texts: Vec<(Vec<String>, String)> = files
        .iter()
        .map(|f| (module_path(src, f), std::fs::read_to_string(f).unwrap()))
        .collect();
    let tests: Vec<Vec<String>> = texts
        .iter()
        .flat_map(|(me, text)| {
            test_modules(text).into_iter().map(move |m| {
                let mut p = me.clone();
                p.push(m);
                p
            })
        })
        .collect();
    let is_module = |parts: &[&String]| {
        let dir = parts.iter().fold(src.to_path_buf(), |d, p| d.join(p));
        dir.with_extension("rs").exists() || dir.join("mod.rs").exists()
    };
    let (mut top, mut sub) = (Graph::new(), Graph::new());
    for (me, text) in &texts {
        if me.is_empty()
            || (me.len() == 1 && facades.contains(&me[0].as_str()))
            || tests.iter().any(|t| me.starts_with(t))
        {
            continue; // the root, the façades, test code
        }
        let code = code_of(text);
        let mut targets: Vec<Vec<String>> = paths_after(&code, "crate::");
        // `super::x` from `a/b.rs` is `a::x`; from `a.rs`, `crate::x`.
        let parent = &me[..me.len() - 1];
        for p in paths_after(&code, "super::") {
            let mut full = parent.to_vec();
            full.extend(p);
            targets.push(full);
        }
        for t in targets {
            // Items of the crate root (`crate::Engine`) are re-exports.
            if t.len() < 2 && !is_module(&[&t[0]]) {
                continue;
            }
            if t[0] != me[0] {
                top.entry(me[0].clone()).or_default().insert(t[0].clone());
            } else if me.len() >= 2 && t.len() >= 2 && t[1] != me[1] && is_module(&[&t[0], &t[1]]) {
                sub.entry(format!("{}::{}", me[0], me[1]))
                    .or_default()
                    .insert(format!("{}::{}", t[0], t[1]));
            }
        }
    }
    (top, sub)
}

fn facades_of(dir: &str) -> &'static [&'static str] {
    FACADES
        .iter()
        .find(|(d, _)| *d == dir)
        .map_or(&[][..], |(_, f)| *f)
}

/// Every crate directory: the root package (`.`) and each under
/// `crates/`, each checked to be placed.
fn crate_dirs() -> Vec<String> {
    let mut dirs: Vec<String> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().join("Cargo.toml").exists())
        .map(|e| format!("crates/{}", e.file_name().to_string_lossy()))
        .collect();
    assert!(root().join("Cargo.toml").exists() && root().join("src/lib.rs").exists());
    dirs.push(".".to_string());
    dirs.sort();
    dirs
}

/// The cycles of a graph (its strongly connected components of more
/// than one node), each sorted.
fn cycles(g: &Graph) -> Vec<Vec<String>> {
    // Kosaraju: the nodes that reach and are reached by each other.
    let nodes: BTreeSet<&String> = g.keys().chain(g.values().flatten()).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in g.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reach: BTreeMap<&String, BTreeSet<String>> = nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for n in &nodes {
        if !reach[n].contains(*n) {
            continue;
        }
        let mut scc: Vec<String> = nodes
            .iter()
            .filter(|m| reach[n].contains(**m) && reach[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        scc.sort();
        if !out.contains(&scc) {
            out.push(scc);
        }
    }
    out
}

/// The names a `use` tree binds: `{a, b::c}` → a, c; `x as y` → y.
fn bound_names(tree: &str) -> Vec<String> {
    tree.replace(['{', '}'], "")
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once(" as ") {
            Some((_, alias)) => alias.trim().to_string(),
            None => {
                let segs: Vec<&str> = p.split("::").map(str::trim).collect();
                match segs.as_slice() {
                    [.., parent, "self"] => parent.to_string(),
                    [.., last] => last.to_string(),
                    [] => String::new(),
                }
            }
        })
        .collect()
}

/// The stage order a crate root declares: first the names it takes from
/// the crates below (`use failover_syntax::{diag, …}`, `… rules as
/// syntax`), then its `mod`s in the order written (test modules left out).
fn declared_order(root: &str, below: &[&str]) -> Vec<String> {
    let code = code_of(root);
    let decl = regex::Regex::new(r"\buse\s+(\w+)::([^;]+);|\bmod\s+(\w+)").unwrap();
    let mut order = Vec::new();
    for c in decl.captures_iter(&code) {
        match (c.get(1), c.get(2), c.get(3)) {
            (Some(krate), Some(tree), _) if below.contains(&krate.as_str()) => {
                order.extend(bound_names(tree.as_str()))
            }
            (_, _, Some(m)) => order.push(m.as_str().to_string()),
            _ => {}
        }
    }
    order
}

/// Every import that does not point above its importer in `order`.
fn order_violations(top: &Graph, order: &[String]) -> Vec<String> {
    let at = |m: &str| order.iter().position(|o| o == m);
    let mut out = Vec::new();
    for (from, tos) in top {
        let Some(f) = at(from) else {
            out.push(format!("`{from}` is not declared in the stage order"));
            continue;
        };
        for to in tos {
            match at(to) {
                None => out.push(format!("`{from}` imports `{to}`, not in the stage order")),
                Some(t) if t >= f => {
                    out.push(format!("`{from}` imports `{to}`, declared below it"))
                }
                Some(_) => {}
            }
        }
    }
    out
}

/// The packages a manifest depends on, by package name: its
/// `[dependencies]`, `[build-dependencies]` and `[target.….dependencies]`
/// tables, and with `dev` its `[dev-dependencies]` too.
fn manifest_deps(toml: &str, dev: bool) -> BTreeSet<String> {
    // Splits a dotted key or header on dots outside quotes.
    fn dotted(s: &str) -> Vec<String> {
        let (mut parts, mut cur, mut quote) = (Vec::new(), String::new(), None);
        for ch in s.chars() {
            match (ch, quote) {
                ('"' | '\'', None) => quote = Some(ch),
                (q, Some(open)) if q == open => quote = None,
                ('.', None) => parts.push(std::mem::take(&mut cur).trim().to_string()),
                _ => cur.push(ch),
            }
        }
        parts.push(cur.trim().to_string());
        parts
    }
    let package = regex::Regex::new(r#"\bpackage\s*=\s*"([^"]+)""#).unwrap();
    let kinds = ["dependencies", "build-dependencies", "dev-dependencies"];
    // (in a dependency table, the dependency a `[dependencies.x]` names)
    let mut section: Option<Option<String>> = None;
    let mut out = BTreeSet::new();
    for line in toml.lines() {
        let t = line.trim();
        if t.starts_with('#') || t.is_empty() {
            continue;
        }
        if t.starts_with('[') {
            let header = t.trim_matches(|c| c == '[' || c == ']');
            let segs = dotted(header);
            let pos = segs.iter().position(|s| kinds.contains(&s.as_str()));
            section = match pos {
                Some(p) if segs[0] != "workspace" && (dev || segs[p] != "dev-dependencies") => {
                    match &segs[p + 1..] {
                        [] => Some(None),
                        [name] => {
                            out.insert(name.clone());
                            Some(Some(name.clone()))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            continue;
        }
        let Some(table) = &section else { continue };
        let Some((key, value)) = t.split_once('=') else {
            continue;
        };
        match table {
            // `[dependencies.x]` with `package = "y"`: x is y.
            Some(name) => {
                if key.trim() == "package" {
                    if let Some(p) = package.captures(t) {
                        out.remove(name);
                        out.insert(p[1].to_string());
                    }
                }
            }
            None => {
                let name = dotted(key).remove(0);
                let name = match package.captures(value) {
                    Some(p) => p[1].to_string(),
                    None => name,
                };
                out.insert(name);
            }
        }
    }
    out
}

/// The workspace crates (by the name code uses) a file's code refers to:
/// `use x…`, `extern crate x`, and paths `x::…` that start at a crate
/// (not `a::x::…`).
fn crates_used(code: &str, names: &[&str]) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let word = regex::Regex::new(r"\b(failover\w*)\b").unwrap();
    for m in word.find_iter(code) {
        let name = m.as_str();
        if !names.contains(&name) {
            continue;
        }
        let before = code[..m.start()].trim_end();
        let after = code[m.end()..].trim_start();
        let path_start = after.starts_with("::")
            && !(before.ends_with("::")
                && before[..before.len() - 2]
                    .chars()
                    .next_back()
                    .is_some_and(is_ident));
        let declared = before.ends_with("use") || before.ends_with("extern crate");
        if path_start || declared {
            out.insert(name.to_string());
        }
    }
    out
}

/// What the layering check reads of one crate.
struct CrateFacts {
    /// Its directory from the repository's root (`.` for the root package).
    dir: String,
    /// Its package name.
    package: String,
    /// Normal, build and target dependencies (package names).
    deps: BTreeSet<String>,
    /// Those and the dev-dependencies.
    all_deps: BTreeSet<String>,
    /// Workspace crates its `src/` refers to outside tests (package names).
    uses: BTreeSet<String>,
}

fn facts(dir: &str) -> CrateFacts {
    let toml = std::fs::read_to_string(root().join(dir).join("Cargo.toml")).unwrap();
    let package = regex::Regex::new(r#"(?m)^\s*name\s*=\s*"([^"]+)""#)
        .unwrap()
        .captures(&toml)
        .map(|c| c[1].to_string())
        .unwrap_or_default();
    let names: Vec<&str> = LAYERS
        .iter()
        .chain([&TESTKIT])
        .map(|(_, _, n)| *n)
        .collect();
    let src = src_of(dir);
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: Vec<(Vec<String>, String)> = files
        .iter()
        .map(|f| (module_path(&src, f), std::fs::read_to_string(f).unwrap()))
        .collect();
    let tests: Vec<Vec<String>> = texts
        .iter()
        .flat_map(|(me, text)| {
            test_modules(text).into_iter().map(move |m| {
                let mut p = me.clone();
                p.push(m);
                p
            })
        })
        .collect();
    let mut uses = BTreeSet::new();
    for (me, text) in &texts {
        if !me.is_empty() && tests.iter().any(|t| me.starts_with(t)) {
            continue;
        }
        for n in crates_used(&code_of(text), &names) {
            let package = LAYERS
                .iter()
                .chain([&TESTKIT])
                .find(|(_, _, code)| *code == n)
                .map(|(_, p, _)| p.to_string())
                .unwrap();
            uses.insert(package);
        }
    }
    CrateFacts {
        dir: dir.to_string(),
        deps: manifest_deps(&toml, false),
        all_deps: manifest_deps(&toml, true),
        uses,
        package,
    }
}

/// Every dependency or use that breaks the layers.
fn layer_violations(crates: &[CrateFacts]) -> Vec<String> {
    let level = |p: &str| LAYERS.iter().position(|(_, pkg, _)| *pkg == p);
    let in_workspace = |p: &str| level(p).is_some() || p == TESTKIT.1;
    let mut out = Vec::new();
    for c in crates {
        let me = &c.package;
        if *me == TESTKIT.1 {
            for d in c.all_deps.iter().chain(&c.uses) {
                if in_workspace(d) && d != me {
                    out.push(format!("{me} (test support) depends on {d}"));
                }
            }
            continue;
        }
        let Some(mine) = level(me) else {
            out.push(format!("{} ({me}) has no place in the layer order", c.dir));
            continue;
        };
        for (how, d) in c
            .deps
            .iter()
            .map(|d| ("depends on", d))
            .chain(c.uses.iter().map(|d| ("uses", d)))
        {
            if d == me || !in_workspace(d) {
                continue;
            }
            match level(d) {
                None => out.push(format!("{me} {how} {d}, which is test support only")),
                Some(l) if l >= mine => out.push(format!("{me} {how} {d}, which is above it")),
                Some(_) => {}
            }
        }
    }
    out
}

#[test]
fn no_crate_depends_on_a_crate_above_it() {
    let dirs = crate_dirs();
    for (dir, _, _) in LAYERS.iter().chain([&TESTKIT]) {
        assert!(dirs.iter().any(|d| d == dir), "{dir} is missing: {dirs:?}");
    }
    let all: Vec<CrateFacts> = dirs.iter().map(|d| facts(d)).collect();
    // The checks read something: each crate uses the one below it.
    let by = |p: &str| all.iter().find(|c| c.package == p).unwrap();
    assert!(by("failover").deps.contains("failover-syntax"));
    assert!(by("failover").uses.contains("failover-syntax"));
    assert!(by("failover-gateway").uses.contains("failover"));
    assert!(by("failover-cli").deps.contains("failover-gateway"));
    assert!(by("failover-cli").uses.contains("failover-gateway"));
    let v = layer_violations(&all);
    assert!(v.is_empty(), "crates used out of order:\n{}", v.join("\n"));
}

#[test]
fn no_import_cycle_between_top_level_modules() {
    for dir in crate_dirs() {
        let (top, _) = graphs(&src_of(&dir), facades_of(&dir));
        let c = cycles(&top);
        assert!(
            c.is_empty(),
            "{dir}: import cycles between modules: {c:?}\nedges: {top:#?}"
        );
    }
    // The graphs were read.
    let sizes = |dir: &str| {
        let (top, sub) = graphs(&src_of(dir), facades_of(dir));
        (top.len(), sub.len())
    };
    assert!(sizes(".").0 > 8, "{:?}", sizes("."));
    assert!(
        sizes("crates/gateway").0 > 5,
        "{:?}",
        sizes("crates/gateway")
    );
    assert!(
        sizes("crates/syntax").0 >= 3,
        "{:?}",
        sizes("crates/syntax")
    );
    assert!(sizes("crates/cli").0 >= 2, "{:?}", sizes("crates/cli"));
}

#[test]
fn no_import_cycle_between_submodules() {
    let mut read = 0;
    for dir in crate_dirs() {
        let (_, sub) = graphs(&src_of(&dir), facades_of(&dir));
        read += sub.len();
        let c = cycles(&sub);
        assert!(
            c.is_empty(),
            "{dir}: import cycles between submodules: {c:?}"
        );
    }
    assert!(read > 10, "the submodule graphs were not read: {read}");
}

/// `failover`'s stages are declared in its `lib.rs` in the order data
/// flows (below the names taken from `failover-syntax`), and
/// `failover-syntax`'s are [`SYNTAX_STAGES`]: every import points at a
/// module above the importer.
#[test]
fn every_import_points_up_the_declared_stage_order() {
    let lib = std::fs::read_to_string(src_of(".").join("lib.rs")).unwrap();
    let order = declared_order(&lib, &["failover_syntax"]);
    assert!(order.len() > 15, "stage order not read: {order:?}");
    for alias in ["diag", "source", "syntax"] {
        assert!(order.contains(&alias.to_string()), "{order:?}");
    }
    let (top, _) = graphs(&src_of("."), facades_of("."));
    let v = order_violations(&top, &order);
    assert!(
        v.is_empty(),
        "failover (src/): {}\norder: {order:?}",
        v.join("\n")
    );

    // failover-syntax: the stages are exactly its modules.
    let lib = std::fs::read_to_string(src_of("crates/syntax").join("lib.rs")).unwrap();
    let declared: BTreeSet<String> = declared_order(&lib, &[]).into_iter().collect();
    let stages: Vec<String> = SYNTAX_STAGES.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        declared,
        stages.iter().cloned().collect::<BTreeSet<_>>(),
        "crates/syntax: a module is not placed in SYNTAX_STAGES"
    );
    let (top, _) = graphs(&src_of("crates/syntax"), facades_of("crates/syntax"));
    let v = order_violations(&top, &stages);
    assert!(v.is_empty(), "crates/syntax: {}", v.join("\n"));
}

/// The leaves import nothing of the crate: every stage may use them.
#[test]
fn the_leaves_import_nothing() {
    let (top, _) = graphs(&src_of("crates/syntax"), facades_of("crates/syntax"));
    for leaf in ["redact", "fsio"] {
        assert!(
            top.get(leaf).is_none_or(BTreeSet::is_empty),
            "{leaf} imports {:?}",
            top[leaf]
        );
    }
    // Source maps sit on the file reading alone.
    let source = top.get("source").cloned().unwrap_or_default();
    assert!(
        source.iter().all(|m| m == "fsio"),
        "source imports {source:?}"
    );
}

/// The checker itself finds a cycle and reads groups and `super::`.
#[test]
fn the_checker_sees_cycles_and_groups() {
    let mut g = Graph::new();
    g.entry("a".into()).or_default().insert("b".into());
    g.entry("b".into()).or_default().insert("c".into());
    g.entry("c".into()).or_default().insert("a".into());
    g.entry("c".into()).or_default().insert("d".into());
    assert_eq!(
        cycles(&g),
        vec![vec!["a".to_string(), "b".into(), "c".into()]]
    );
    let p = paths_after("use crate::{diag::{Code, Diagnostic}, syntax};", "crate::");
    assert_eq!(
        p,
        vec![
            vec!["diag".to_string(), "Code".into()],
            vec!["diag".to_string(), "Diagnostic".into()],
            vec!["syntax".to_string()],
        ]
    );
    let code =
        code_of("use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\nuse crate::c;\n");
    assert_eq!(
        paths_after(&code, "crate::"),
        vec![vec!["a".to_string()], vec!["c".to_string()]]
    );
    // Comments and literals are not code; a one-line test item is left
    // out alone; test modules in files of their own are found.
    let code = code_of(concat!(
        "// use crate::x;\n",
        "/* crate::y */ let s = \"crate::z { \"; let r = r#\"crate::w\"#;\n",
        "let c = '{'; let q = '\\''; fn f<'a>(x: &'a str) {}\n",
        "#[cfg(test)] mod tests;\n",
        "use crate::kept;\n",
    ));
    assert_eq!(
        paths_after(&code, "crate::"),
        vec![vec!["kept".to_string()]]
    );
    assert_eq!(
        test_modules("#[cfg(test)]\nmod tests;\n#[cfg(test)]\n#[path = \"t.rs\"]\npub(crate) mod more;\nmod real;\n"),
        vec!["tests".to_string(), "more".into()]
    );
}

/// The stage-order and layer checkers fail on bad input.
#[test]
fn the_checkers_reject_bad_input() {
    // A stage that imports one declared below it, and one not declared.
    let lib = concat!(
        "use failover_syntax::{diag, fsio};\nuse failover_syntax::rules as syntax;\n",
        "use serde::Deserialize;\n",
        "mod compile;\nmod load;\n#[cfg(test)]\nmod tests;\npub mod state {\n}\n",
    );
    let order = declared_order(lib, &["failover_syntax"]);
    assert_eq!(
        order,
        ["diag", "fsio", "syntax", "compile", "load", "state"]
    );
    let mut g = Graph::new();
    g.entry("compile".into()).or_default().insert("load".into());
    g.entry("compile".into()).or_default().insert("diag".into());
    g.entry("load".into()).or_default().insert("compile".into());
    g.entry("load".into()).or_default().insert("nowhere".into());
    g.entry("stray".into()).or_default().insert("diag".into());
    assert_eq!(
        order_violations(&g, &order),
        [
            "`compile` imports `load`, declared below it",
            "`load` imports `nowhere`, not in the stage order",
            "`stray` is not declared in the stage order",
        ]
    );

    // Manifests: normal, target and table-form dependencies count, a
    // rename counts as its package, dev-dependencies only with `dev`.
    let toml = concat!(
        "[package]\nname = \"failover\"\n\n[dependencies]\n",
        "failover-syntax.workspace = true\n",
        "gw = { workspace = true, package = \"failover-gateway\" } # renamed\n",
        "serde = \"1\"\n\n",
        "[target.'cfg(unix)'.dependencies]\nfailover-cli = { path = \"../cli\" }\n\n",
        "[dependencies.extra]\npackage = \"failover-testkit\"\n\n",
        "[dev-dependencies]\nproptest.workspace = true\n\n",
        "[workspace.dependencies]\nfailover-nope = \"1\"\n",
    );
    let deps = manifest_deps(toml, false);
    assert_eq!(
        deps.iter().map(String::as_str).collect::<Vec<_>>(),
        [
            "failover-cli",
            "failover-gateway",
            "failover-syntax",
            "failover-testkit",
            "serde"
        ]
    );
    assert!(manifest_deps(toml, true).contains("proptest"));

    // Code: paths and `use` of a crate count, `a::failover::…` does not.
    let code = code_of(concat!(
        "use failover_gateway as gw;\nfn f() { failover_cli::main(); }\n",
        "use crate::failover::x;\n// failover_syntax::y\nlet t = \"failover_syntax::z\";\n",
    ));
    assert_eq!(
        crates_used(
            &code,
            &[
                "failover",
                "failover_syntax",
                "failover_gateway",
                "failover_cli"
            ]
        )
        .into_iter()
        .collect::<Vec<_>>(),
        ["failover_cli", "failover_gateway"]
    );

    let set = |xs: &[&str]| xs.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    let krate = |dir: &str, package: &str, deps: &[&str], uses: &[&str]| CrateFacts {
        dir: dir.into(),
        package: package.into(),
        deps: set(deps),
        all_deps: set(deps),
        uses: set(uses),
    };
    let bad = [
        krate("syntax", "failover-syntax", &["memchr"], &["failover"]),
        krate(
            "failover",
            "failover",
            &["failover-syntax", "failover-gateway", "failover-testkit"],
            &["failover-syntax"],
        ),
        krate(
            "gateway",
            "failover-gateway",
            &["failover"],
            &["failover-cli"],
        ),
        krate(
            "cli",
            "failover-cli",
            &["failover-gateway", "failover"],
            &[],
        ),
        krate("testkit", "failover-testkit", &["redis", "failover"], &[]),
        krate("crates/extra", "failover-extra", &[], &[]),
    ];
    assert_eq!(
        layer_violations(&bad),
        [
            "failover-syntax uses failover, which is above it",
            "failover depends on failover-gateway, which is above it",
            "failover depends on failover-testkit, which is test support only",
            "failover-gateway uses failover-cli, which is above it",
            "failover-testkit (test support) depends on failover",
            "crates/extra (failover-extra) has no place in the layer order",
        ]
    );
    // The same crates in order pass.
    let good = [
        krate("syntax", "failover-syntax", &["memchr"], &[]),
        krate(
            "failover",
            "failover",
            &["failover-syntax"],
            &["failover-syntax"],
        ),
        krate("gateway", "failover-gateway", &["failover"], &["failover"]),
        krate(
            "cli",
            "failover-cli",
            &["failover-gateway", "failover"],
            &["failover-syntax"],
        ),
        krate("testkit", "failover-testkit", &["redis"], &[]),
    ];
    assert!(
        layer_violations(&good).is_empty(),
        "{:?}",
        layer_violations(&good)
    );
}
