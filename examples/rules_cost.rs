//! Per-message cost of ruleset directories (each without the defaults) on
//! the benchmark corpus: the best of `P` passes over the first `N`
//! messages, in nanoseconds per message. With several directories the
//! passes alternate between them (pass 1 of each, then pass 2 of each, …),
//! so a burst of load on a shared machine falls on all of them alike, and
//! each later one is also given as a ratio to the first:
//!
//! ```sh
//! cargo build --release --example rules_cost
//! N=10000 P=40 target/release/examples/rules_cost old-rules rules
//! ```
//!
//! Run under callgrind for a count that does not move with the machine's
//! load (benches/README.md, "Rules changes"):
//!
//! ```sh
//! N=3000 P=2 valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     --toggle-collect='*Engine::classify_with*' target/release/examples/rules_cost rules
//! ```
//!
//! (the first pass also fills the regex caches: take P=2 minus P=1, over N,
//! for the warm cost of one message in instructions).

use failover::Engine;
use failover::Scratch;

#[path = "../benches/support/corpus.rs"]
mod corpus;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let dirs: Vec<String> = std::env::args().skip(1).collect();
    if dirs.is_empty() {
        eprintln!("usage: rules_cost RULES_DIR...   (N=messages, P=passes)");
        std::process::exit(2);
    }
    let engines: Vec<Engine> = dirs
        .iter()
        .map(|dir| {
            let build = match failover::rules::build(&[dir.into()], false) {
                Ok(build) => build,
                Err(e) => {
                    eprintln!("error: {dir}: {e}");
                    std::process::exit(2);
                }
            };
            Engine::from_build(build).unwrap_or_else(|_| {
                eprintln!("error: {dir}: the rules have errors; run `failover check`");
                std::process::exit(1);
            })
        })
        .collect();
    let all = corpus::corpus(10_000, 0x5eed);
    let samples = &all[..env("N", 10_000).min(all.len())];
    let mut scratches: Vec<Scratch> = engines.iter().map(|_| Scratch::default()).collect();
    let mut best = vec![u128::MAX; engines.len()];
    for _ in 0..env("P", 7) {
        for ((engine, best), scratch) in engines.iter().zip(&mut best).zip(&mut scratches) {
            let t = std::time::Instant::now();
            for s in samples {
                std::hint::black_box(engine.classify_with(&s.as_error(), scratch));
            }
            *best = (*best).min(t.elapsed().as_nanos());
        }
    }
    let per = |b: u128| b / samples.len().max(1) as u128;
    for (i, (dir, &b)) in dirs.iter().zip(&best).enumerate() {
        if i == 0 {
            println!("{} ns per message  {dir}", per(b));
        } else {
            let ratio = b as f64 / best[0] as f64;
            println!("{} ns per message  {dir}  ({ratio:.3}× the first)", per(b));
        }
    }
}
