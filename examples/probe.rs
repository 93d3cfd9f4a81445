#[path = "../benches/support/corpus.rs"]
mod corpus;
use failover::classify::Scratch;
use std::time::Instant;
fn main() {
    let engine = failover::Engine::builtin();
    let all = corpus::corpus(20000, 0x5eed);
    let (json, plain): (Vec<_>, Vec<_>) =
        all.iter().cloned().partition(|s| s.message.contains('{'));
    let mut scratch = Scratch::default();
    for (name, set) in [("all", &all), ("json", &json), ("plain", &plain)] {
        let t = Instant::now();
        let mut n = 0;
        for _ in 0..5 {
            for s in set.iter() {
                n += engine
                    .classify_with(&s.as_error(), &mut scratch)
                    .reason_id
                    .0 as usize;
            }
        }
        let per = t.elapsed().as_nanos() as f64 / (5 * set.len()) as f64;
        println!("{name}: {} msgs, {per:.0} ns/msg ({n})", set.len());
    }
    // candidates per message
    let mut total = 0;
    let mut regex_rules = 0;
    for s in plain.iter().take(2000) {
        let (_, ex) = engine.explain(&s.as_error());
        total += ex.verified.len();
        regex_rules += ex.atoms_hit.len();
    }
    println!(
        "plain: avg verified {:.1}, avg atoms hit {:.1}",
        total as f64 / 2000.0,
        regex_rules as f64 / 2000.0
    );
}
