//! `failover lsp` (issue 15 item 4), spoken to as an editor does: the
//! binary is spawned, and JSON-RPC messages with `Content-Length` headers
//! go over its stdin/stdout. Every wait is bounded (10 s).

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{channel, Receiver};
use std::time::Duration;

use serde_json::{json, Value};

const WAIT: Duration = Duration::from_secs(10);

struct Client {
    child: Child,
    stdin: ChildStdin,
    rx: Receiver<Value>,
    next_id: i64,
}

impl Client {
    fn start() -> Client {
        let mut child = Command::new(env!("CARGO_BIN_EXE_failover"))
            .args(["lsp", "--stdio"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = channel();
        std::thread::spawn(move || loop {
            let mut len = None;
            loop {
                let mut line = String::new();
                if out.read_line(&mut line).unwrap_or(0) == 0 {
                    return;
                }
                let line = line.trim_end();
                if line.is_empty() {
                    break;
                }
                if let Some(v) = line.strip_prefix("Content-Length: ") {
                    len = v.parse::<usize>().ok();
                }
            }
            let mut body = vec![0; len.expect("a Content-Length header")];
            out.read_exact(&mut body).unwrap();
            if tx.send(serde_json::from_slice(&body).unwrap()).is_err() {
                return;
            }
        });
        Client {
            child,
            stdin,
            rx,
            next_id: 1,
        }
    }

    fn send(&mut self, msg: Value) {
        let body = msg.to_string();
        write!(self.stdin, "Content-Length: {}\r\n\r\n{body}", body.len()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and waits for its response (notifications that
    /// come first are kept for `notification`).
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let msg = self.rx.recv_timeout(WAIT).expect("a response in time");
            if msg["id"] == json!(id) {
                assert!(msg.get("error").is_none(), "{msg}");
                return msg["result"].clone();
            }
        }
    }

    fn notification(&mut self, method: &str) -> Value {
        loop {
            let msg = self.rx.recv_timeout(WAIT).expect("a notification in time");
            if msg["method"] == method {
                return msg["params"].clone();
            }
        }
    }
}

fn uri(path: &Path) -> String {
    format!("file://{}", path.display())
}

fn at(uri: &str, line: u32, character: u32) -> Value {
    json!({"textDocument": {"uri": uri}, "position": {"line": line, "character": character}})
}

const TEXT: &str = "reason acme_quota { failover; cooldown }\n\nrule acme.quota\n  when message has \"acme quota\"\n  => acme_quota\n\nrule acme.typo\n  when status == 499\n  => rate_limt\n";

#[test]
fn an_editor_session() {
    let dir = std::env::temp_dir().join(format!("failover-lsp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("ops.rules");
    std::fs::write(&file, TEXT).unwrap();
    let doc = uri(&file);

    let mut c = Client::start();
    let init = c.request(
        "initialize",
        json!({"processId": null, "rootUri": uri(&dir), "capabilities": {}}),
    );
    let caps = &init["capabilities"];
    for cap in [
        "hoverProvider",
        "definitionProvider",
        "completionProvider",
        "documentFormattingProvider",
    ] {
        assert!(!caps[cap].is_null(), "{cap} missing: {init}");
    }
    c.notify("initialized", json!({}));

    // didOpen with an error: the diagnostic `failover check` prints.
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": doc, "languageId": "failover-rules", "version": 1, "text": TEXT}}),
    );
    let diags = c.notification("textDocument/publishDiagnostics");
    assert_eq!(diags["uri"], json!(doc));
    let list = diags["diagnostics"].as_array().unwrap();
    assert_eq!(list.len(), 1, "{diags}");
    let d = &list[0];
    assert_eq!(d["code"], "E002");
    assert_eq!(d["severity"], 1);
    assert_eq!(d["source"], "failover");
    assert_eq!(d["range"]["start"], json!({"line": 8, "character": 5}));
    assert_eq!(d["range"]["end"], json!({"line": 8, "character": 14}));
    let message = d["message"].as_str().unwrap();
    assert_eq!(
        message,
        "unknown reason `rate_limt`\nhelp: did you mean `rate_limit`?"
    );
    let check = Command::new(env!("CARGO_BIN_EXE_failover"))
        .args(["check", "--rules"])
        .arg(&dir)
        .output()
        .unwrap();
    let check = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.contains("error[E002]: unknown reason `rate_limt`"),
        "{check}"
    );
    assert!(check.contains("ops.rules:9:6"), "{check}");
    assert!(
        check.contains("help: did you mean `rate_limit`?"),
        "{check}"
    );

    // As you type: the fix clears it.
    let fixed = TEXT.replace("rate_limt", "rate_limit");
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": doc, "version": 2}, "contentChanges": [{"text": fixed}]}),
    );
    let diags = c.notification("textDocument/publishDiagnostics");
    assert_eq!(diags["diagnostics"], json!([]), "{diags}");

    // Hover on a reason of the file, and on a shipped one (its comment).
    let h = c.request("textDocument/hover", at(&doc, 4, 8));
    let v = h["contents"]["value"].as_str().unwrap();
    assert!(
        v.contains("reason `acme_quota`**: failover, cooldown"),
        "{v}"
    );
    let h = c.request("textDocument/hover", at(&doc, 8, 8));
    let v = h["contents"]["value"].as_str().unwrap();
    assert!(
        v.contains("failover, cooldown, transient, scope model, rotations rate_limited"),
        "{v}"
    );
    assert!(v.contains("R7.1, R7.2"), "{v}");
    // Nothing under the cursor: null.
    assert!(c.request("textDocument/hover", at(&doc, 1, 0)).is_null());

    // Go to definition: in the file, and in the shipped 00-reasons.
    let def = c.request("textDocument/definition", at(&doc, 4, 8));
    assert_eq!(def["uri"], json!(doc));
    assert_eq!(def["range"]["start"], json!({"line": 0, "character": 7}));
    let def = c.request("textDocument/definition", at(&doc, 8, 8));
    let target = def["uri"].as_str().unwrap();
    assert!(target.ends_with("/rules/00-reasons.rules"), "{def}");
    let line = def["range"]["start"]["line"].as_u64().unwrap() as usize;
    let shipped = std::fs::read_to_string(root().join("rules/00-reasons.rules")).unwrap();
    assert!(
        shipped
            .lines()
            .nth(line)
            .unwrap()
            .starts_with("reason rate_limit "),
        "{def}"
    );

    // Completion: reasons (file and shipped), providers, fields.
    let comp = c.request("textDocument/completion", at(&doc, 4, 5));
    let labels: Vec<(String, i64)> = comp
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["label"].as_str().unwrap().to_string(),
                i["kind"].as_i64().unwrap(),
            )
        })
        .collect();
    for (label, kind) in [
        ("acme_quota", 20),
        ("rate_limit", 20),
        ("billing", 20),
        ("openrouter", 9),
        ("zai", 9),
        ("message", 5),
        ("body", 5),
    ] {
        assert!(
            labels.contains(&(label.to_string(), kind)),
            "{label} missing: {labels:?}"
        );
    }

    // Formatting through `fmt`.
    let messy = "rule a.b when status==429=>rate_limit # keep\n";
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": doc, "version": 3}, "contentChanges": [{"text": messy}]}),
    );
    c.notification("textDocument/publishDiagnostics");
    let edits = c.request(
        "textDocument/formatting",
        json!({"textDocument": {"uri": doc}, "options": {"tabSize": 2, "insertSpaces": true}}),
    );
    assert_eq!(
        edits,
        json!([{
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 1, "character": 0}},
            "newText": "rule a.b\n  when status == 429\n  => rate_limit # keep\n"
        }])
    );

    // Hover on a shipped rule: its golden cases and hit counts; a shipped
    // file opened in place has no diagnostics.
    let status = root().join("rules/80-status.rules");
    let status_uri = uri(&status);
    let status_text = std::fs::read_to_string(&status).unwrap();
    c.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": status_uri, "languageId": "failover-rules", "version": 1, "text": status_text}}),
    );
    let diags = c.notification("textDocument/publishDiagnostics");
    assert_eq!(diags["diagnostics"], json!([]), "{diags}");
    let (line, col) = status_text
        .lines()
        .enumerate()
        .find_map(|(i, l)| l.find("rate_limit.status_429").map(|c| (i, c)))
        .unwrap();
    let h = c.request(
        "textDocument/hover",
        at(&status_uri, line as u32, col as u32 + 3),
    );
    let v = h["contents"]["value"].as_str().unwrap();
    assert!(
        v.contains("**rule `rate_limit.status_429`** ⇒ `rate_limit`"),
        "{v}"
    );
    let hits: usize = v
        .split("golden cases (defaults): ")
        .nth(1)
        .and_then(|s| s.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("hit counts in {v}"));
    assert!(hits >= 1, "{v}");
    assert!(v.contains("0 misses"), "{v}");
    assert!(v.contains("- `rules/80-status.cases.yaml` #"), "{v}");

    // shutdown, exit: the process ends, exit code 0.
    assert!(c.request("shutdown", json!(null)).is_null());
    c.notify("exit", json!(null));
    let deadline = std::time::Instant::now() + WAIT;
    let status = loop {
        if let Some(s) = c.child.try_wait().unwrap() {
            break s;
        }
        assert!(std::time::Instant::now() < deadline, "lsp did not exit");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status}");
    std::fs::remove_dir_all(&dir).unwrap();
}

fn root() -> PathBuf {
    crate::repo_root()
}
