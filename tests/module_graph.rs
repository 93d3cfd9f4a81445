//! Data flows one way (ARCHITECTURE.md): no module of `src/` imports,
//! directly or through others, a module that imports it back. Checked on
//! the source text: every `crate::…` path (including `use crate::{a, b}`
//! groups) and every `super::…` sibling path outside `#[cfg(test)]`
//! blocks is an edge, between top-level modules and between the
//! submodules of one module. The façades (`lib.rs`, `errors.rs`) only
//! re-export and are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Graph = BTreeMap<String, BTreeSet<String>>;

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

/// `src/a/b.rs` → ["a", "b"]; `src/a/mod.rs` → ["a"].
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

/// The text without line comments and without `#[cfg(test)]` items (a
/// test module may use anything).
fn code_of(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            // Skip the item that follows: up to its matching closing brace.
            let mut depth = 0i32;
            let mut opened = false;
            for l in lines.by_ref() {
                for ch in l.chars() {
                    match ch {
                        '{' => {
                            depth += 1;
                            opened = true
                        }
                        '}' => depth -= 1,
                        _ => {}
                    }
                }
                if (opened && depth <= 0) || (!opened && l.trim_end().ends_with(';')) {
                    break;
                }
            }
            continue;
        }
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
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

fn graphs() -> (Graph, Graph) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let (mut top, mut sub) = (Graph::new(), Graph::new());
    for file in files {
        let me = module_path(&src, &file);
        if me.is_empty() || me == ["errors"] {
            continue; // the façades
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        let mut targets: Vec<Vec<String>> = paths_after(&code, "crate::");
        // `super::x` from `a/b.rs` is `a::x`.
        if me.len() >= 2 {
            let parent = &me[..me.len() - 1];
            for p in paths_after(&code, "super::") {
                let mut full = parent.to_vec();
                full.extend(p);
                targets.push(full);
            }
        }
        for t in targets {
            // Items of the crate root (`crate::Engine`) are re-exports.
            if t.len() < 2 && !src.join(format!("{}.rs", t[0])).exists() {
                continue;
            }
            if t[0] != me[0] {
                top.entry(me[0].clone()).or_default().insert(t[0].clone());
            } else if me.len() >= 2 && t.len() >= 2 && t[1] != me[1] {
                let is_module = src.join(&t[0]).join(format!("{}.rs", t[1])).exists()
                    || src.join(&t[0]).join(&t[1]).join("mod.rs").exists();
                if is_module {
                    sub.entry(format!("{}::{}", me[0], me[1]))
                        .or_default()
                        .insert(format!("{}::{}", t[0], t[1]));
                }
            }
        }
    }
    (top, sub)
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

#[test]
fn no_import_cycle_between_top_level_modules() {
    let (top, _) = graphs();
    assert!(top.len() > 10, "the graph was not read: {top:?}");
    let c = cycles(&top);
    assert!(
        c.is_empty(),
        "import cycles between modules: {c:?}\nedges: {top:#?}"
    );
}

#[test]
fn no_import_cycle_between_submodules() {
    let (_, sub) = graphs();
    assert!(sub.len() > 10, "the graph was not read: {sub:?}");
    let c = cycles(&sub);
    assert!(c.is_empty(), "import cycles between submodules: {c:?}");
}

/// The stages are declared in `lib.rs` in the order data flows: every
/// import points at a module declared above the importer.
#[test]
fn every_import_points_up_the_declared_stage_order() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let code = code_of(&lib);
    // `stage!(name)`, `stage!(#[cfg(…)] name)` and `mod name;`, in order.
    let decl =
        regex::Regex::new(r"stage!\(\s*(?:#\[[^\]]*\]\s*)?(\w+)\s*\)|\bmod\s+(\w+)").unwrap();
    let order: Vec<String> = decl
        .captures_iter(&code)
        .map(|c| c.get(1).or(c.get(2)).unwrap().as_str().to_string())
        .collect();
    assert!(order.len() > 15, "stage order not read: {order:?}");
    let (top, _) = graphs();
    let at = |m: &str| order.iter().position(|o| o == m);
    for (from, tos) in &top {
        let Some(f) = at(from) else {
            panic!("`{from}` is not declared in lib.rs: {order:?}")
        };
        for to in tos {
            let t = at(to).unwrap_or_else(|| panic!("`{to}` is not declared in lib.rs"));
            assert!(
                t < f,
                "`{from}` imports `{to}`, declared below it in lib.rs: {order:?}"
            );
        }
    }
}

/// The leaves import nothing of the crate: every stage may use them.
#[test]
fn the_leaves_import_nothing() {
    let (top, _) = graphs();
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
}
