//! `failover lsp`: a language server for `.rules` files over stdio.
//!
//! - Diagnostics as you type: the open text is compiled with the same code
//!   as `failover check` (parse, validate, lint: `load::build_layers`), as
//!   an operator layer over the embedded defaults, or, for one of the
//!   shipped files (`rules/…`), in place of that default; the codes and
//!   messages are `check`'s.
//! - Hover on a reason: its declaration (behaviour clauses) and the comment
//!   above it; on a rule id: its reason and its golden cases with hit
//!   counts (the embedded cases, run once at start).
//! - Go to definition of a reason (in the open file, or the shipped
//!   `00-reasons.rules` when it is on disk).
//! - Completion of reasons, providers and fields.
//! - Formatting through `failover fmt`.
//!
//! Synchronous (`lsp-server`): one thread reads requests, answers them in
//! order; compiling one file is milliseconds.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lsp_server::{Connection, Message, Notification, Request, Response};
use lsp_types::*;
use serde_json::json;

use crate::embedded::DEFAULT_CASES;
use crate::syntax::ast::{Decl, RuleDecl};
use crate::syntax::{display_name, parse_str};
use failover::golden::{self, Report};
use failover::rules::{build_layers, DEFAULT_RULES};
use failover::Engine;

/// The fields a predicate may read, for completion.
const FIELDS: &[(&str, &str)] = &[
    ("message", "the error message text"),
    ("status", "the HTTP status"),
    ("provider", "the provider id"),
    ("model", "the model id"),
    ("code", "the error code (`RESOURCE_EXHAUSTED`, `ETIMEDOUT`)"),
    ("type", "the error type (`overloaded_error`)"),
    (
        "body",
        "the raw body text; `body.PATH` a field of the JSON body",
    ),
];

/// Runs the server on stdin/stdout until the client says `exit`.
pub(crate) fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (conn, io) = Connection::stdio();
    let caps = json!({
        "textDocumentSync": 1,
        "hoverProvider": true,
        "definitionProvider": true,
        "completionProvider": { "triggerCharacters": [" ", "."] },
        "documentFormattingProvider": true,
    });
    conn.initialize(caps)?;
    let mut server = Server::new();
    for msg in &conn.receiver {
        match msg {
            Message::Request(req) => {
                if conn.handle_shutdown(&req)? {
                    break;
                }
                let resp = server.request(&req);
                conn.sender.send(Message::Response(resp))?;
            }
            Message::Notification(n) => {
                for out in server.notification(&n) {
                    conn.sender.send(Message::Notification(out))?;
                }
            }
            Message::Response(_) => {}
        }
    }
    drop(conn);
    io.join()?;
    Ok(())
}

struct Server {
    docs: HashMap<Url, String>,
    /// The embedded golden cases run on the embedded rules.
    golden: Option<Report>,
}

impl Server {
    fn new() -> Self {
        Server {
            docs: HashMap::new(),
            golden: golden_report(),
        }
    }

    fn notification(&mut self, n: &Notification) -> Vec<Notification> {
        let uri_text = match n.method.as_str() {
            "textDocument/didOpen" => {
                let Ok(p) = serde_json::from_value::<DidOpenTextDocumentParams>(n.params.clone())
                else {
                    return vec![];
                };
                Some((p.text_document.uri, p.text_document.text))
            }
            "textDocument/didChange" => {
                let Ok(p) = serde_json::from_value::<DidChangeTextDocumentParams>(n.params.clone())
                else {
                    return vec![];
                };
                // Full sync: the last change holds the whole text.
                p.content_changes
                    .into_iter()
                    .last()
                    .map(|c| (p.text_document.uri, c.text))
            }
            "textDocument/didClose" => {
                if let Ok(p) =
                    serde_json::from_value::<DidCloseTextDocumentParams>(n.params.clone())
                {
                    self.docs.remove(&p.text_document.uri);
                    return vec![publish(&p.text_document.uri, Vec::new())];
                }
                None
            }
            _ => None,
        };
        let Some((uri, text)) = uri_text else {
            return vec![];
        };
        let diags = diagnostics(&uri, &text);
        self.docs.insert(uri.clone(), text);
        vec![publish(&uri, diags)]
    }

    fn request(&mut self, req: &Request) -> Response {
        let result = match req.method.as_str() {
            "textDocument/hover" => self.params(req).map(|p: HoverParams| {
                let pos = p.text_document_position_params;
                json!(self.hover(&pos.text_document.uri, pos.position))
            }),
            "textDocument/definition" => self.params(req).map(|p: GotoDefinitionParams| {
                let pos = p.text_document_position_params;
                json!(self.definition(&pos.text_document.uri, pos.position))
            }),
            "textDocument/completion" => self.params(req).map(|p: CompletionParams| {
                json!(self.completion(&p.text_document_position.text_document.uri))
            }),
            "textDocument/formatting" => self
                .params(req)
                .map(|p: DocumentFormattingParams| json!(self.formatting(&p.text_document.uri))),
            _ => Err(Response::new_err(
                req.id.clone(),
                lsp_server::ErrorCode::MethodNotFound as i32,
                format!("unsupported request `{}`", req.method),
            )),
        };
        match result {
            Ok(v) => Response::new_ok(req.id.clone(), v),
            Err(e) => e,
        }
    }

    fn params<T: serde::de::DeserializeOwned>(&self, req: &Request) -> Result<T, Response> {
        serde_json::from_value(req.params.clone()).map_err(|e| {
            Response::new_err(
                req.id.clone(),
                lsp_server::ErrorCode::InvalidParams as i32,
                e.to_string(),
            )
        })
    }

    /// The open text and every shipped file, parsed (for names).
    fn decls(&self, uri: &Url) -> Vec<(Option<Url>, String, Decl)> {
        let mut out = Vec::new();
        let mut add = |src: Option<Url>, name: &str, text: &str| {
            let (_, ast, _) = parse_str(name, text);
            for d in ast.decls {
                out.push((src.clone(), text.to_string(), d));
            }
        };
        if let Some(text) = self.docs.get(uri) {
            add(Some(uri.clone()), "doc.rules", text);
        }
        let own = uri.to_file_path().ok();
        for (name, text) in DEFAULT_RULES {
            if own.as_deref().is_some_and(|p| p.ends_with(name)) {
                continue;
            }
            add(default_url(name), name, text);
        }
        out
    }

    fn hover(&self, uri: &Url, pos: Position) -> Option<Hover> {
        let text = self.docs.get(uri)?;
        let word = word_at(text, pos)?;
        for (_, src, d) in self.decls(uri) {
            match &d {
                Decl::Reason(r) if r.name.node == word => {
                    let decl = &src[r.span.start as usize..r.span.end as usize];
                    let comment = comment_above(&src, r.span.start as usize);
                    let behaviours: Vec<String> = r
                        .behaviours
                        .iter()
                        .map(|b| match &b.arg {
                            Some(a) => format!("{} {}", b.word.node, a.node),
                            None => b.word.node.clone(),
                        })
                        .collect();
                    return Some(markdown(format!(
                        "**reason `{word}`**: {}\n\n```\n{decl}\n```\n{comment}",
                        behaviours.join(", ")
                    )));
                }
                _ => {}
            }
            for rule in rules_of(&d) {
                if rule.id.node == word {
                    return Some(markdown(self.rule_hover(rule)));
                }
            }
        }
        None
    }

    fn rule_hover(&self, rule: &RuleDecl) -> String {
        let id = &rule.id.node;
        let mut s = format!("**rule `{id}`** ⇒ `{}`\n\n", rule.reason.node);
        let Some(report) = &self.golden else {
            return s;
        };
        match report.by_rule.iter().find(|(r, _, _)| r == id) {
            Some((_, layer, t)) => s.push_str(&format!(
                "golden cases ({layer}): {} hit{}, {} miss{}, {} false alarm{}\n",
                t.hits,
                if t.hits == 1 { "" } else { "s" },
                t.misses,
                if t.misses == 1 { "" } else { "es" },
                t.false_alarms,
                if t.false_alarms == 1 { "" } else { "s" },
            )),
            None => s.push_str("no golden case of the shipped rules decides this rule\n"),
        }
        let decided: Vec<_> = report
            .outcomes
            .iter()
            .filter(|o| o.rule.as_deref() == Some(id.as_str()))
            .collect();
        for o in decided.iter().take(5) {
            s.push_str(&format!(
                "- `{}` #{}: {} ⇒ {}\n",
                o.file,
                o.index + 1,
                o.case.describe(),
                o.reason
            ));
        }
        if decided.len() > 5 {
            s.push_str(&format!("- … and {} more\n", decided.len() - 5));
        }
        s
    }

    fn definition(&self, uri: &Url, pos: Position) -> Option<Location> {
        let text = self.docs.get(uri)?;
        let word = word_at(text, pos)?;
        for (src_uri, src, d) in self.decls(uri) {
            if let Decl::Reason(r) = &d {
                if r.name.node == word {
                    let range = Range::new(
                        position(&src, r.name.span.start as usize),
                        position(&src, r.name.span.end as usize),
                    );
                    return src_uri.map(|u| Location::new(u, range));
                }
            }
        }
        None
    }

    fn completion(&self, uri: &Url) -> CompletionResponse {
        let mut items = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (_, _, d) in self.decls(uri) {
            match &d {
                Decl::Reason(r) if seen.insert(("r", r.name.node.clone())) => {
                    items.push(CompletionItem {
                        label: r.name.node.clone(),
                        kind: Some(CompletionItemKind::ENUM_MEMBER),
                        detail: Some("reason".into()),
                        ..Default::default()
                    })
                }
                Decl::Provider(p) => {
                    for n in &p.providers {
                        if seen.insert(("p", n.node.clone())) {
                            items.push(CompletionItem {
                                label: n.node.clone(),
                                kind: Some(CompletionItemKind::MODULE),
                                detail: Some("provider".into()),
                                ..Default::default()
                            });
                        }
                    }
                }
                _ => {}
            }
        }
        for (f, doc) in FIELDS {
            items.push(CompletionItem {
                label: f.to_string(),
                kind: Some(CompletionItemKind::FIELD),
                detail: Some(format!("field: {doc}")),
                ..Default::default()
            });
        }
        CompletionResponse::Array(items)
    }

    fn formatting(&self, uri: &Url) -> Option<Vec<TextEdit>> {
        let text = self.docs.get(uri)?;
        let out = crate::syntax::fmt::format_str(&doc_name(uri), text).ok()?;
        if &out == text {
            return Some(Vec::new());
        }
        let end = position(text, text.len());
        Some(vec![TextEdit::new(
            Range::new(Position::new(0, 0), end),
            out,
        )])
    }
}

fn rules_of(d: &Decl) -> Vec<&RuleDecl> {
    match d {
        Decl::Rule(r) => vec![r],
        Decl::Provider(p) => p.rules.iter().collect(),
        _ => vec![],
    }
}

fn markdown(value: String) -> Hover {
    Hover {
        contents: HoverContents::Markup(MarkupContent {
            kind: MarkupKind::Markdown,
            value,
        }),
        range: None,
    }
}

fn publish(uri: &Url, diagnostics: Vec<lsp_types::Diagnostic>) -> Notification {
    Notification::new(
        "textDocument/publishDiagnostics".into(),
        PublishDiagnosticsParams::new(uri.clone(), diagnostics, None),
    )
}

/// The name a document gets in diagnostics: its path.
fn doc_name(uri: &Url) -> String {
    uri.to_file_path()
        .map(|p| display_name(&p))
        .unwrap_or_else(|_| uri.to_string())
}

/// The shipped file on disk beside this binary's sources, when there.
fn default_url(name: &str) -> Option<Url> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .join(name);
    path.is_file().then(|| Url::from_file_path(&path).ok())?
}

/// `check`'s diagnostics of the open text, as LSP diagnostics.
fn diagnostics(uri: &Url, text: &str) -> Vec<lsp_types::Diagnostic> {
    let name = doc_name(uri);
    let path = uri.to_file_path().ok();
    let shipped = path
        .as_deref()
        .and_then(|p| DEFAULT_RULES.iter().find(|(n, _)| p.ends_with(n)));
    let build = match shipped {
        // One of the shipped files: the defaults with this text in its place.
        Some((own, _)) => {
            let files = DEFAULT_RULES
                .iter()
                .map(|(n, t)| {
                    if n == own {
                        (name.clone(), text.as_bytes().to_vec())
                    } else {
                        (n.to_string(), t.as_bytes().to_vec())
                    }
                })
                .collect();
            build_layers(vec![("defaults".into(), files)], false)
        }
        None => {
            let layer = path
                .as_deref()
                .and_then(Path::parent)
                .map(display_name)
                .unwrap_or_else(|| "editor".into());
            build_layers(
                vec![(layer, vec![(name.clone(), text.as_bytes().to_vec())])],
                true,
            )
        }
    };
    build
        .diagnostics
        .iter()
        .filter(|d| build.sources.get(d.span.file).name() == name)
        .map(|d| {
            let file = build.sources.get(d.span.file);
            let (l2, c2) = file.line_col(d.span.end as usize);
            let mut message = d.title.clone();
            if let Some(h) = &d.help {
                message.push_str(&format!("\nhelp: {h}"));
            }
            lsp_types::Diagnostic {
                range: Range::new(
                    Position::new(d.span.line.saturating_sub(1), d.span.col.saturating_sub(1)),
                    Position::new(l2.saturating_sub(1), c2.saturating_sub(1)),
                ),
                severity: Some(if d.is_error() {
                    DiagnosticSeverity::ERROR
                } else {
                    DiagnosticSeverity::WARNING
                }),
                code: Some(NumberOrString::String(d.code.as_str().into())),
                source: Some("failover".into()),
                message,
                ..Default::default()
            }
        })
        .collect()
}

fn golden_report() -> Option<Report> {
    let build = build_layers(Vec::<failover::rules::OperatorLayer>::new(), true);
    let engine = Engine::from_build(build).ok()?;
    let files: Vec<_> = DEFAULT_CASES
        .iter()
        .filter_map(|(n, t)| golden::parse_cases(n, t).ok())
        .collect();
    Some(golden::run(&engine, &files))
}

/// The 0-based line and column (in characters) of a byte offset.
fn position(text: &str, offset: usize) -> Position {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count();
    let col = before.rsplit('\n').next().unwrap_or("").chars().count();
    Position::new(line as u32, col as u32)
}

/// The name (reason, rule id, provider) under the cursor.
fn word_at(text: &str, pos: Position) -> Option<String> {
    let line: Vec<char> = text.lines().nth(pos.line as usize)?.chars().collect();
    let is_word = |c: char| c.is_alphanumeric() || c == '_' || c == '-' || c == '.';
    let at = (pos.character as usize).min(line.len());
    let mut s = at;
    while s > 0 && is_word(line[s - 1]) {
        s -= 1;
    }
    let mut e = at;
    while e < line.len() && is_word(line[e]) {
        e += 1;
    }
    (s < e).then(|| line[s..e].iter().collect())
}

/// The `#` lines right above a declaration.
fn comment_above(text: &str, start: usize) -> String {
    let mut lines: Vec<&str> = text[..start]
        .lines()
        .rev()
        .take_while(|l| l.trim_start().starts_with('#'))
        .map(|l| l.trim_start().trim_start_matches('#').trim())
        .collect();
    lines.reverse();
    lines.join(" ")
}
