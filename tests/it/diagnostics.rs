//! Golden diagnostics: every broken rules file in `tests/diagnostics/`
//! compiles (layered over the embedded defaults, like an operator's
//! `--rules` directory) to a reviewed snapshot of its rendered diagnostics.
//! Files named `nodefaults_*` compile alone.

use failover::rules::build_layers;
use failover_syntax::diag::{render_all, Code};

/// The repository's root, where `tests/diagnostics/` is, as a prefix:
/// `…/failover/` (the root package is the repository).
const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/");

fn render(path: &std::path::Path) -> (String, Vec<Code>) {
    let name = path.file_name().unwrap().to_string_lossy().into_owned();
    let bytes = std::fs::read(path).unwrap();
    let with_defaults = !name.starts_with("nodefaults_");
    let build = build_layers(
        vec![(
            "tests/diagnostics".into(),
            vec![(format!("tests/diagnostics/{name}"), bytes)],
        )],
        with_defaults,
    );
    let codes = build.diagnostics.iter().map(|d| d.code).collect();
    (render_all(&build.diagnostics, &build.sources), codes)
}

#[test]
fn broken_rules_files_render_reviewed_diagnostics() {
    insta::glob!("../../tests", "diagnostics/*.rules", |path| {
        let (text, codes) = render(path);
        assert!(
            !codes.is_empty(),
            "{} produced no diagnostic",
            path.display()
        );
        // The file name announces the code it exercises.
        let name = path.file_name().unwrap().to_string_lossy().to_uppercase();
        if !codes.iter().any(|c| name.contains(c.as_str())) && !name.starts_with("THREE") {
            panic!(
                "{} does not produce the code its name announces: {codes:?}",
                path.display()
            );
        }
        insta::assert_snapshot!(text);
    });
}

/// A broken cases file (`tests/diagnostics/*.cases.yaml`): its rendered
/// diagnostics and their codes.
fn render_cases(path: &std::path::Path) -> (String, Vec<Code>) {
    let name = format!(
        "tests/diagnostics/{}",
        path.file_name().unwrap().to_string_lossy()
    );
    let text = std::fs::read_to_string(path).unwrap();
    match failover::golden::parse_cases(&name, &text) {
        Ok(_) => (String::new(), Vec::new()),
        Err(e) => (e.render(), e.diagnostics.iter().map(|d| d.code).collect()),
    }
}

/// Cases-file problems are diagnostics like the rules' own: a stable
/// code, `file:line:col`, the line with a caret, help (issue 15 item 1).
#[test]
fn broken_cases_files_render_reviewed_diagnostics() {
    insta::glob!("../../tests", "diagnostics/*.cases.yaml", |path| {
        let (text, codes) = render_cases(path);
        let name = path.file_name().unwrap().to_string_lossy().to_uppercase();
        assert!(
            codes.iter().any(|c| name.contains(c.as_str())),
            "{} does not produce the code its name announces: {codes:?}",
            path.display()
        );
        insta::assert_snapshot!(text);
    });
}

#[test]
fn every_code_is_exercised_by_a_golden_file() {
    let dir = std::path::Path::new(ROOT).join("tests/diagnostics");
    let mut seen = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "rules") {
            seen.extend(render(&path).1.into_iter().map(|c| c.as_str()));
        }
        if path.to_string_lossy().ends_with(".cases.yaml") {
            seen.extend(render_cases(&path).1.into_iter().map(|c| c.as_str()));
        }
        if path.to_string_lossy().contains(".config.") {
            seen.extend(render_config(&path).1.into_iter().map(|c| c.as_str()));
        }
    }
    for code in Code::ALL {
        assert!(
            seen.contains(code.as_str()),
            "no golden file produces {}",
            code.as_str()
        );
    }
}

#[test]
fn three_independent_errors_are_reported_together() {
    let path = std::path::Path::new(ROOT).join("tests/diagnostics/three_independent_errors.rules");
    let (_, codes) = render(&path);
    assert_eq!(codes, vec![Code::E006, Code::E004, Code::E002]);
}

/// A broken gateway config (`tests/diagnostics/*.config.*`), read as
/// `--config` reads it: its rendered problems and their codes. It is
/// named as from the repository's root (`tests/diagnostics/…`, as the
/// command line run there names it): the root's prefix is cut from the
/// text.
fn render_config(path: &std::path::Path) -> (String, Vec<Code>) {
    let name = format!(
        "{ROOT}tests/diagnostics/{}",
        path.file_name().unwrap().to_string_lossy()
    );
    let (text, codes) = match failover::GatewayConfig::load(std::path::Path::new(&name)) {
        Ok(c) => (
            failover::render_problems(&c.warnings, &c.name, &c.text),
            c.warnings.iter().map(|p| p.code).collect(),
        ),
        Err(e) => (e.to_string(), e.problems.iter().map(|p| p.code).collect()),
    };
    (text.replace(ROOT, ""), codes)
}

/// Config problems are diagnostics like the rules' own: a stable code
/// (E021–E023, W003–W005), the key path, `file:line:col`, the line with a
/// caret unless it may hold a secret, help (issue 14).
#[test]
fn broken_config_files_render_reviewed_diagnostics() {
    insta::glob!("../../tests", "diagnostics/*.config.*", |path| {
        let (text, codes) = render_config(path);
        let name = path.file_name().unwrap().to_string_lossy().to_uppercase();
        assert!(
            codes.iter().any(|c| name.starts_with(c.as_str())),
            "{} does not produce the code its name announces: {codes:?}\n{text}",
            path.display()
        );
        assert!(!text.contains("sk-FAKE"), "{text}");
        insta::assert_snapshot!(text);
    });
}
