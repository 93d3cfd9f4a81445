//! Writes a JSONL corpus for `failover classify` throughput runs:
//! `cargo run --release --example gen_corpus -- 100000 > /tmp/errors.jsonl`.

#[path = "../benches/support/corpus.rs"]
mod corpus;

use std::io::Write;

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let out = std::io::stdout();
    let mut out = std::io::BufWriter::new(out.lock());
    for s in corpus::corpus(n, 0x5eed) {
        writeln!(out, "{}", s.to_jsonl()).expect("write");
    }
}
