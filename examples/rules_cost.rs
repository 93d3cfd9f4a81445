//! Per-message cost of a ruleset directory (without the defaults) on the
//! benchmark corpus: the best of `P` passes over the first `N` messages,
//! in nanoseconds per message. Run under callgrind for a count that does
//! not move with the machine's load (benches/README.md, "Rules changes"):
//!
//! ```sh
//! cargo build --release --example rules_cost
//! N=3000 P=1 valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/rules_cost rules
//! N=3000 P=2 valgrind --tool=callgrind --callgrind-out-file=/dev/null target/release/examples/rules_cost rules
//! ```
//!
//! The difference of the two totals divided by `N` is the warm cost of one
//! message in instructions (the first pass also fills the regex caches).

use failover::classify::Scratch;
use failover::Engine;

#[path = "../benches/support/corpus.rs"]
mod corpus;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let Some(dir) = std::env::args().nth(1) else {
        eprintln!("usage: rules_cost RULES_DIR   (N=messages, P=passes)");
        std::process::exit(2);
    };
    let build = match failover::load::build(&[dir.into()], false) {
        Ok(build) => build,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let Ok(engine) = Engine::from_build(build) else {
        eprintln!("error: the rules have errors; run `failover check`");
        std::process::exit(1);
    };
    let all = corpus::corpus(10_000, 0x5eed);
    let samples = &all[..env("N", 10_000).min(all.len())];
    let mut scratch = Scratch::default();
    let mut best = u128::MAX;
    for _ in 0..env("P", 7) {
        let t = std::time::Instant::now();
        for s in samples {
            std::hint::black_box(engine.classify_with(&s.as_error(), &mut scratch));
        }
        best = best.min(t.elapsed().as_nanos());
    }
    println!("{} ns per message", best / samples.len().max(1) as u128);
}
