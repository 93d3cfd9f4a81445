//! Writes a large rules directory for compile-time measurements
//! (`benches/README.md`, "Compile and lint time").
//!
//! ```sh
//! cargo run --release --example gen_rules -- realistic 100000 /tmp/r100k
//! cargo run --release --example gen_rules -- identical 50000 /tmp/same
//! ```
//!
//! Shapes: `realistic` (a mix of `has`, `has any` with a status, regexes
//! and provider rules over distinct literals), `identical` (one condition
//! repeated), `nested` (literals `x`, `xx`, … that contain each other),
//! `numbers` (literals `r0` … `rN`, which contain each other too) and
//! `has-any` (one rule with a `has any` list of N literals `e0` … `eN`).
//! Files are cut at 20,000 rules, well under the 4 MiB file limit.

use std::fmt::Write as _;
use std::path::PathBuf;

const WORDS: [&str; 20] = [
    "quota",
    "limit",
    "rate",
    "exceeded",
    "overloaded",
    "timeout",
    "credit",
    "billing",
    "key",
    "token",
    "upstream",
    "gateway",
    "busy",
    "server",
    "error",
    "capacity",
    "throttled",
    "denied",
    "invalid",
    "model",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (shape, n, dir) = match args.as_slice() {
        [_, shape, n, dir] => (
            shape.as_str(),
            n.parse::<usize>().expect("a count"),
            PathBuf::from(dir),
        ),
        _ => {
            eprintln!("usage: gen_rules realistic|identical|nested|numbers|has-any N DIR");
            std::process::exit(2);
        }
    };
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let rule = |i: usize, r: u64| -> String {
        let w = |k: u64| WORDS[((r >> (k * 8)) % 20) as usize];
        match shape {
            "realistic" => match r % 10 {
                0..=3 => format!("rule g.r{i} when message has \"{} {} {i}\" => rate_limit", w(1), w(2)),
                4 | 5 => format!(
                    "rule g.r{i} when message has any [\"{} {i}\", \"{} {} {i}\"] and status == {} => overloaded",
                    w(1),
                    w(2),
                    w(3),
                    [400, 429, 500, 503][(r >> 40) as usize % 4]
                ),
                6 | 7 => format!("rule g.r{i} when message matches /{}\\s+{}\\s+{i}/ => timeout", w(1), w(2)),
                _ => format!(
                    "rule g.r{i} when provider == \"p{}\" and message has \"{} {i}\" => billing",
                    i % 50,
                    w(3)
                ),
            },
            "identical" => format!("rule s.r{i} when message has \"rate limit\" => rate_limit"),
            "nested" => format!("rule n.r{i} when message has \"{}\" => rate_limit", "x".repeat(i % 40 + 1)),
            "numbers" => format!("rule n.r{i} when message has \"r{i}\" => rate_limit"),
            other => panic!("unknown shape `{other}`"),
        }
    };
    std::fs::create_dir_all(&dir).unwrap();
    if shape == "has-any" {
        let list: Vec<String> = (0..n).map(|i| format!("\"e{i}\"")).collect();
        let text = format!(
            "rule a.big when message has any [{}] => rate_limit\n",
            list.join(", ")
        );
        std::fs::write(dir.join("x.rules"), text).unwrap();
        return;
    }
    for (f, start) in (0..n).step_by(20_000).enumerate() {
        let mut text = String::new();
        for i in start..n.min(start + 20_000) {
            let _ = writeln!(text, "{}", rule(i, next()));
        }
        std::fs::write(dir.join(format!("x{f:03}.rules")), text).unwrap();
    }
}
