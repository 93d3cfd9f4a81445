//! Writes a JSONL workload of real provider errors for `failover classify`
//! and the side-by-side benchmark against the original
//! (`benches/README.md`, "Against the original"): the items of the field
//! corpus, the holdout and the original's test vectors, as input lines,
//! cycled to N lines in file order.
//!
//! ```sh
//! cargo run --release --example field_workload -- 100000 > /tmp/work100k.jsonl
//! ```
//!
//! Each line carries what the item gives: `provider`, `model`, `status`,
//! `code`, `type`, `message` and `body` (text, or the body's JSON as text,
//! the way a gateway hands a response body on).

use std::io::Write;

use failover::field;
use serde_json::{Map, Value};

const DIRS: &[&str] = &["tests/field", "tests/holdout", "tests/vectors"];

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut lines = Vec::new();
    for dir in DIRS {
        let mut files: Vec<_> = std::fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("{dir}: {e}"))
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect();
        files.sort();
        for path in files {
            let text = std::fs::read_to_string(&path).expect("read");
            let file = field::parse(&path.display().to_string(), &text)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            for item in &file.items {
                lines.push(line(item));
            }
        }
    }
    assert!(!lines.is_empty(), "no items under {DIRS:?}");
    eprintln!("{} distinct errors, cycled to {n} lines", lines.len());
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for l in lines.iter().cycle().take(n) {
        writeln!(out, "{l}").expect("write");
    }
}

fn line(item: &field::Item) -> String {
    let mut m = Map::new();
    let text = |s: &Option<String>| s.clone().map(Value::String);
    for (k, v) in [
        ("provider", text(&item.provider)),
        ("model", text(&item.model)),
        ("status", item.status.map(Value::from)),
        ("code", text(&item.code)),
        ("type", text(&item.error_type)),
        ("message", text(&item.message)),
    ] {
        if let Some(v) = v {
            m.insert(k.into(), v);
        }
    }
    match &item.body {
        Some(Value::String(s)) => {
            m.insert("body".into(), Value::String(s.clone()));
        }
        Some(Value::Null) | None => {}
        Some(other) => {
            m.insert("body".into(), Value::String(other.to_string()));
        }
    }
    Value::Object(m).to_string()
}
