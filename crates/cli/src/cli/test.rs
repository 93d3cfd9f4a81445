//! `failover test`: run the golden cases, print the per-reason and
//! per-rule table, fail on any miss or on a rule no case decides; then
//! measure the rules on the field corpus (real provider errors) and fail
//! below its agreement floor or on any unsafe stop.
//!
//! With `--rules DIR` the report covers those layers' cases and rules
//! (`--all`: every layer in use). `--accept` rewrites the failing cases'
//! expectations where they are written; `--add-from FILE` appends a case
//! per line of a JSONL of errors with its current verdict.

use std::io::{BufRead, IsTerminal, Write};
use std::path::{Path, PathBuf};

use clap::Args;

use super::UsageError;
use super::{load_engine, CmdResult, RulesArgs};
use crate::syntax::display_name;
use failover::field::{self, FieldFile};
use failover::golden::{self, CaseFile, CasesError, Scope};
use failover::learn;
use failover::rules as load;

#[derive(Args, Debug)]
pub(super) struct TestArgs {
    #[command(flatten)]
    pub rules: RulesArgs,
    /// With `--rules`: run and report every layer's cases and rules, the
    /// embedded defaults' too (without `--rules` every layer is reported).
    #[arg(long)]
    pub all: bool,
    /// Rewrite the failing cases' `expect` and `rule` to what the rules
    /// now say, in place (comments, order and layout kept), after showing
    /// the diff and asking; `--yes` writes without asking.
    #[arg(long, visible_alias = "bless", conflicts_with = "add_from")]
    pub accept: bool,
    /// With `--accept` or `--add-from`: write without asking.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Append a case per line of this JSONL of errors (the `classify`
    /// input) with its current verdict, for review, to `--add-to`.
    #[arg(long, value_name = "FILE")]
    pub add_from: Option<PathBuf>,
    /// The cases file `--add-from` appends to (created if missing);
    /// default: `added.cases.yaml` in the first `--rules` directory.
    #[arg(long, value_name = "FILE", requires = "add_from")]
    pub add_to: Option<PathBuf>,
    /// Print one JSON document (schema `failover.test/2`, docs/json.md)
    /// instead of the tables.
    #[arg(long)]
    pub json: bool,
    /// A directory of field-corpus files (`*.yaml`: real errors with their
    /// labels) to measure the rules on, instead of the embedded corpus
    /// (repeatable).
    #[arg(long = "field", value_name = "DIR")]
    pub field: Vec<PathBuf>,
    /// Do not measure the rules on any field corpus.
    #[arg(long, conflicts_with = "field")]
    pub no_field: bool,
    /// Print the field corpus's whole report (tables, every disagreement)
    /// even with `--rules`; by default the operator's own cases are
    /// followed by the corpus's six-line summary then (and the whole
    /// report without `--rules`, or with `--all`).
    #[arg(long)]
    pub field_report: bool,
    /// Exact agreement on the field corpus, in percent, below which the
    /// test fails.
    #[arg(long, value_name = "PCT", default_value_t = field::DEFAULT_FLOOR_PCT)]
    pub field_floor: f64,
}

/// A cases file and, for one on disk, its path (`--accept` writes there).
pub(super) struct Loaded {
    pub file: CaseFile,
    pub path: Option<PathBuf>,
}

/// The cases of the layers in use: each operator directory's
/// `*.cases.yaml`, then (with `all`) the embedded defaults' cases. A file
/// with problems is `Ok(Err(..))`: its diagnostics (exit 1).
pub(super) fn case_files(
    rules: &RulesArgs,
    all: bool,
) -> Result<Result<Vec<Loaded>, Vec<CasesError>>, UsageError> {
    let mut files = Vec::new();
    let mut errors = Vec::new();
    for dir in &rules.dirs {
        for path in load::files_with_suffix(dir, ".cases.yaml")? {
            let text = read(&path, golden::MAX_CASES_BYTES)?;
            match golden::parse_cases(&display_name(&path), &text) {
                Ok(file) => files.push(Loaded {
                    file,
                    path: Some(path),
                }),
                Err(e) => errors.push(e),
            }
        }
    }
    if !rules.no_defaults && (all || rules.dirs.is_empty()) {
        for (name, text) in crate::embedded::DEFAULT_CASES {
            match golden::parse_cases(name, text) {
                Ok(file) => files.push(Loaded { file, path: None }),
                Err(e) => errors.push(e),
            }
        }
    }
    Ok(if errors.is_empty() {
        Ok(files)
    } else {
        Err(errors)
    })
}

fn read(path: &std::path::Path, limit: u64) -> Result<String, UsageError> {
    failover_syntax::fsio::read_regular_text(path, limit).map_err(|e| {
        UsageError(format!(
            "cannot read `{}`: {}",
            display_name(path),
            failover_syntax::fsio::plain_io(&e)
        ))
    })
}

/// The field corpus to measure: the `--field` directories, else the
/// embedded one when the defaults are in use (it labels what providers
/// send, which the default rules are written for).
pub(super) fn field_files(args: &TestArgs) -> Result<Vec<FieldFile>, UsageError> {
    if args.no_field {
        return Ok(Vec::new());
    }
    field_dirs(&args.field, args.rules.no_defaults, false)
}

/// The field files of `dirs`; the embedded corpus when no directory is
/// given (or, with `and_defaults`, besides them), unless `no_defaults`.
pub(super) fn field_dirs(
    dirs: &[PathBuf],
    no_defaults: bool,
    and_defaults: bool,
) -> Result<Vec<FieldFile>, UsageError> {
    let mut files = Vec::new();
    for dir in dirs {
        let before = files.len();
        for path in load::files_with_suffix(dir, ".yaml")? {
            let text = read(&path, golden::MAX_CASES_BYTES)?;
            files.push(field::parse(&display_name(&path), &text).map_err(UsageError)?);
        }
        if files.len() == before {
            return Err(UsageError(format!(
                "no field-corpus `*.yaml` files found in `{}`",
                display_name(dir)
            )));
        }
    }
    if !no_defaults && (dirs.is_empty() || and_defaults) {
        for (name, text) in crate::embedded::DEFAULT_FIELD {
            files.push(field::parse(name, text).map_err(UsageError)?);
        }
    }
    Ok(files)
}

pub(super) fn run(args: &TestArgs) -> CmdResult {
    if !(0.0..=100.0).contains(&args.field_floor) {
        return Err(UsageError(format!(
            "`--field-floor` is a percentage (0–100), not {}",
            args.field_floor
        ))
        .into());
    }
    let engine = load_engine(&args.rules)?;
    if let Some(from) = &args.add_from {
        // A case pins the rules' verdict (its `rule`), never the model's.
        return add_from(&engine.without_model(), args, from);
    }
    let files = match case_files(&args.rules, args.all)? {
        Ok(files) => files,
        Err(errors) => return Ok(cases_errors(&errors, args.json)),
    };
    if files.is_empty() {
        return Err(UsageError("no `*.cases.yaml` files found beside the rules".into()).into());
    }
    let scope = if args.all || args.rules.dirs.is_empty() {
        Scope::All
    } else {
        Scope::Operator
    };
    let cases: Vec<CaseFile> = files.iter().map(|l| l.file.clone()).collect();
    let report = golden::run_scoped(&engine, &cases, scope);
    if args.accept {
        return accept(&files, &report, args.yes);
    }
    let field_files = field_files(args)?;
    // The field report is the rules' (a model would be judged on what it
    // learned from); the model is measured by cross-validation beside it.
    let threshold = engine.model().map(|(_, t)| t);
    let rules_only = engine.without_model();
    let field =
        (!field_files.is_empty()).then(|| field::run(&rules_only, &field_files, args.field_floor));
    // The cross-validation trains the model ten times (some seconds): it
    // runs with the whole report, not for an operator's own cases.
    let whole = args.field_report || args.all || args.rules.dirs.is_empty();
    let evaluation = match (&field, threshold) {
        (Some(_), Some(threshold)) if whole || args.json => {
            Some(evaluate(args, &rules_only, &field_files, threshold)?)
        }
        _ => None,
    };
    let field_passed = field.as_ref().is_none_or(|f| f.passed());
    let passed = report.passed() && field_passed;
    if args.json {
        let scope = match scope {
            Scope::All => "all",
            Scope::Operator => "operator",
        };
        let mut doc = serde_json::json!({
            "schema": golden::TEST_JSON_SCHEMA,
            "passed": passed,
            "scope": scope,
            "diagnostics": [],
        });
        if let serde_json::Value::Object(golden) = golden::report_json(&report) {
            doc.as_object_mut().unwrap().extend(golden);
        }
        doc["field"] = field
            .as_ref()
            .map_or(serde_json::Value::Null, field::report_json);
        if let (Some(f), Some(e)) = (doc["field"].as_object_mut(), &evaluation) {
            f.insert("model".into(), learn::evaluation_json(e));
        }
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        print!("{}", super::paint_report(&golden::render_report(&report)));
        if let Some(field) = &field {
            println!();
            if threshold.is_some() {
                println!("the rules alone on the field corpus:");
            }
            if whole {
                print!("{}", field::render(field));
            } else {
                print!("{}", field::render_summary(field));
                println!("(the whole field report: --field-report)");
            }
            if let Some(e) = &evaluation {
                let limit = if args.field_report { usize::MAX } else { 10 };
                print!("{}", learn::render(e, limit, "all with --field-report"));
            } else if threshold.is_some() {
                println!("(the evidence model, cross-validated: --field-report)");
            }
        }
    }
    Ok(if passed { 0 } else { 1 })
}

/// The evidence model measured honestly: cross-validated on the field
/// corpus in use (golden cases of every layer always train), and — on the
/// embedded corpus — on the embedded held-out set, with a model trained
/// on everything. Progress goes to stderr: it takes some seconds.
fn evaluate(
    args: &TestArgs,
    rules_only: &failover::Engine,
    field_files: &[FieldFile],
    threshold: failover::evidence::Confidence,
) -> Result<learn::Evaluation, super::Stop> {
    let cases: Vec<CaseFile> = match case_files(&args.rules, true)? {
        Ok(files) => files.into_iter().map(|l| l.file).collect(),
        Err(_) => Vec::new(),
    };
    let holdout: Vec<FieldFile> = if args.field.is_empty() && !args.rules.no_defaults {
        crate::embedded::DEFAULT_HOLDOUT
            .iter()
            .map(|(name, text)| field::parse(name, text))
            .collect::<Result<_, _>>()
            .map_err(UsageError)?
    } else {
        Vec::new()
    };
    let items = learn::labelled(field_files, &cases);
    let held = learn::labelled(&holdout, &[]);
    if std::io::stderr().is_terminal() {
        eprintln!("cross-validating the evidence model (10 folds by source, 10 item by item) …");
    }
    learn::evaluate(
        rules_only,
        &items,
        &held,
        10,
        threshold,
        failover::evidence::train::Options::default(),
    )
    .map_err(|e| UsageError(e.to_string()).into())
}

/// Cases files with problems: their diagnostics, exit 1.
fn cases_errors(errors: &[CasesError], json: bool) -> i32 {
    let count: usize = errors.iter().map(|e| e.diagnostics.len()).sum();
    if json {
        let diags: Vec<serde_json::Value> = errors
            .iter()
            .flat_map(|e| {
                e.diagnostics
                    .iter()
                    .map(|d| crate::diag::to_json(d, &e.sources))
            })
            .collect();
        let doc = serde_json::json!({
            "schema": golden::TEST_JSON_SCHEMA,
            "passed": false,
            "diagnostics": diags,
        });
        println!("{}", serde_json::to_string_pretty(&doc).unwrap_or_default());
    } else {
        let mut text = String::new();
        for e in errors {
            text.push_str(&e.render());
        }
        eprint!("{}", super::paint_diagnostics(&text));
        eprintln!(
            "error: {count} problem{} in the cases files; no case was run",
            super::check::plural(count)
        );
    }
    1
}

/// Whether to write: `--yes`, or a `y` typed at the terminal.
fn confirm(yes: bool, what: &str) -> Result<bool, UsageError> {
    if yes {
        return Ok(true);
    }
    if !std::io::stdin().is_terminal() {
        return Err(UsageError(format!(
            "not writing {what}: there is no terminal to confirm on; \
             review the diff above and run again with `--yes`"
        )));
    }
    eprint!("write {what}? [y/N] ");
    let _ = std::io::stderr().flush();
    let mut answer = String::new();
    let _ = std::io::stdin().lock().read_line(&mut answer);
    Ok(matches!(answer.trim(), "y" | "Y" | "yes"))
}

fn accept(files: &[Loaded], report: &golden::Report, yes: bool) -> CmdResult {
    let mut changes = Vec::new();
    let mut refused = Vec::new();
    let mut accepted = 0;
    for loaded in files {
        let a = golden::accept(&loaded.file, &report.outcomes);
        refused.extend(a.refused.iter().cloned());
        if a.accepted == 0 {
            continue;
        }
        match &loaded.path {
            Some(path) => {
                accepted += a.accepted;
                changes.push((path.clone(), &loaded.file, a.text));
            }
            None => {
                for o in report
                    .outcomes
                    .iter()
                    .filter(|o| o.file == loaded.file.name && !o.problems.is_empty())
                {
                    refused.push((
                        o.location(),
                        "an embedded default case; run with `--rules rules --no-defaults` in a checkout to accept it".into(),
                    ));
                }
            }
        }
    }
    for (path, file, text) in &changes {
        print!(
            "{}",
            super::paint_diff(&golden::line_diff(&display_name(path), &file.text, text))
        );
    }
    for (at, why) in &refused {
        eprintln!("not accepted: {at}: {why}");
    }
    if changes.is_empty() {
        if refused.is_empty() {
            println!("nothing to accept: every case passes");
            return Ok(0);
        }
        return Ok(1);
    }
    let what = format!(
        "{accepted} accepted case{} to {} file{}",
        super::check::plural(accepted),
        changes.len(),
        super::check::plural(changes.len())
    );
    if !confirm(yes, &what)? {
        eprintln!("nothing written");
        return Ok(1);
    }
    for (path, file, text) in &changes {
        write_back(path, &file.text, text)?;
    }
    println!("wrote {what}");
    Ok(if refused.is_empty() { 0 } else { 1 })
}

/// Replaces a cases file's text with `new`, if it still holds `old` (a
/// byte-order mark kept); through a temporary file and a rename, so a
/// crash leaves the old file or the new one, never half of one.
fn write_back(path: &Path, old: &str, new: &str) -> Result<(), UsageError> {
    let io = |e: std::io::Error| {
        UsageError(format!(
            "cannot write `{}`: {}",
            display_name(path),
            failover_syntax::fsio::plain_io(&e)
        ))
    };
    let on_disk = std::fs::read(path).map_err(io)?;
    let bom = on_disk.starts_with(crate::syntax::UTF8_BOM);
    let body = if bom {
        &on_disk[crate::syntax::UTF8_BOM.len()..]
    } else {
        &on_disk[..]
    };
    if body != old.as_bytes() {
        return Err(UsageError(format!(
            "`{}` changed while the cases ran; nothing written to it",
            display_name(path)
        )));
    }
    let mut bytes = Vec::with_capacity(new.len() + 3);
    if bom {
        bytes.extend_from_slice(crate::syntax::UTF8_BOM);
    }
    bytes.extend_from_slice(new.as_bytes());
    let name = path
        .file_name()
        .map_or_else(|| "cases".into(), |n| n.to_string_lossy().into_owned());
    let tmp = path.with_file_name(format!(".{name}.accept.tmp"));
    std::fs::write(&tmp, &bytes).map_err(io)?;
    if let Ok(meta) = std::fs::metadata(path) {
        let _ = std::fs::set_permissions(&tmp, meta.permissions());
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io(e)
    })
}

/// One error line of the `--add-from` JSONL, as a case input.
fn line_case(text: &str) -> Result<golden::Case, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let obj = v.as_object().ok_or("expected a JSON object per line")?;
    let text_field = |key: &str| -> Result<Option<String>, String> {
        match obj.get(key) {
            None | Some(serde_json::Value::Null) => Ok(None),
            Some(serde_json::Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`{key}` must be a string")),
        }
    };
    let status = match obj.get("status") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.trim().parse().ok(),
        Some(_) => Some(0),
    };
    let status = match status {
        None => None,
        Some(s @ 100..=599) => Some(s as u16),
        Some(_) => return Err("`status` must be an HTTP status code (an integer 100–599)".into()),
    };
    let body = match obj.get("body") {
        None | Some(serde_json::Value::Null) => None,
        Some(b @ (serde_json::Value::String(_) | serde_json::Value::Object(_))) => Some(b.clone()),
        Some(_) => return Err("`body` must be a string or a JSON object".into()),
    };
    Ok(golden::Case {
        provider: text_field("provider")?,
        model: text_field("model")?,
        status,
        code: text_field("code")?,
        error_type: text_field("type")?,
        message: text_field("message")?,
        body,
        expect: None,
        rule: None,
        not: None,
        spec: None,
    })
}

fn add_from(engine: &failover::Engine, args: &TestArgs, from: &Path) -> CmdResult {
    let target = match (&args.add_to, args.rules.dirs.first()) {
        (Some(t), _) => t.clone(),
        (None, Some(dir)) => dir.join("added.cases.yaml"),
        (None, None) => {
            return Err(UsageError(
                "`--add-from` needs `--rules DIR` (the cases go to DIR/added.cases.yaml) or `--add-to FILE`".into(),
            ).into())
        }
    };
    let input = read(from, 64 << 20)?;
    let source = display_name(from);
    let mut added = String::new();
    let mut count = 0;
    let mut bad = 0;
    for (i, line) in input.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        match line_case(line) {
            Ok(case) => {
                let c = engine.classify(&case.input());
                added.push_str(&golden::case_yaml(
                    &case,
                    c.reason,
                    c.rule,
                    &format!("{source}:{}", i + 1),
                ));
                count += 1;
            }
            Err(e) => {
                eprintln!("{source}:{}: {e}; line skipped", i + 1);
                bad += 1;
            }
        }
    }
    if count == 0 {
        eprintln!("no case to add");
        return Ok(1);
    }
    let old = if target.exists() {
        read(&target, golden::MAX_CASES_BYTES)?
    } else {
        String::new()
    };
    let mut new = old.clone();
    if !new.is_empty() && !new.ends_with('\n') {
        new.push('\n');
    }
    new.push_str(&added);
    let name = display_name(&target);
    // What is appended must read back as cases (it is JSON in YAML).
    if let Err(e) = golden::parse_cases(&name, &new) {
        return Err(UsageError(format!(
            "the cases made from `{source}` do not read back; nothing written:\n{e}"
        ))
        .into());
    }
    print!("{}", super::paint_diff(&append_diff(&name, &old, &added)));
    let what = format!(
        "{count} new case{} to `{name}`",
        super::check::plural(count)
    );
    if !confirm(args.yes, &what)? {
        eprintln!("nothing written");
        return Ok(1);
    }
    if target.exists() {
        write_back(&target, &old, &new)?;
    } else {
        std::fs::write(&target, new.as_bytes()).map_err(|e| {
            UsageError(format!(
                "cannot write `{name}`: {}",
                failover_syntax::fsio::plain_io(&e)
            ))
        })?;
    }
    println!("wrote {what}; review each `expect` and `rule`, then run `failover test`");
    Ok(if bad == 0 { 0 } else { 1 })
}

fn append_diff(name: &str, old: &str, added: &str) -> String {
    let at = old.lines().count() + 1;
    let n = added.lines().count();
    let mut out = format!("--- {name}\n+++ {name}\n@@ -{},0 +{at},{n} @@\n", at - 1);
    for l in added.lines() {
        out.push('+');
        out.push_str(l);
        out.push('\n');
    }
    out
}
