//! failover beside the original's classifier (OpenClaw 2026.9.6 under Node
//! 24, the published package, unmodified), on the same workload of real
//! provider errors, alternating, in one run: the ratio issue 47 sets its
//! targets in. Results and analysis: `benches/README.md`, "Against the
//! original".
//!
//! ```sh
//! cargo build --release                      # the `failover` binary, for the whole-process runs
//! ORIGINAL=$SCRATCH cargo bench --bench original
//! ```
//!
//! `$SCRATCH` is set up once as `benches/README.md` says (the original's
//! package, Node 24, its harness `bench.mjs`, and the two workloads
//! `work100k.jsonl` / `ref100k.jsonl`). Without `ORIGINAL`, only failover's
//! side runs, on `WORKLOAD` (default `$SCRATCH/work100k.jsonl`).
//!
//! Measured, each round alternating the two programs:
//! - **in-process**: CPU time per message of a loop over the workload,
//!   parsed before timing (the original: its harness's median of 3 passes;
//!   failover: `Engine::classify_with` on this thread, median of 3 passes);
//!   with the model and without; failover's per-message p50 / p99;
//! - **whole process**: `failover classify WORKLOAD > /dev/null` and the
//!   harness's `--oneshot` (read, classify, write every verdict), wall and
//!   CPU time (the children's `getrusage`);
//! - **start-up**: the same on a one-line input, best of 5 wall times.
#![allow(unsafe_code)] // getrusage(RUSAGE_CHILDREN): the children's CPU time.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use failover::{Body, Engine, ProviderError, Scratch};
use serde_json::Value;

/// One input line, owned; [`Line::as_error`] borrows it the way the
/// stream does (a JSON body is handed over as its text).
struct Line {
    provider: Option<String>,
    model: Option<String>,
    status: Option<u16>,
    code: Option<String>,
    error_type: Option<String>,
    message: Option<String>,
    body: Option<String>,
}

impl Line {
    fn parse(text: &str) -> Line {
        let v: Value = serde_json::from_str(text).expect("a JSON line");
        let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
        Line {
            provider: s("provider"),
            model: s("model"),
            status: v.get("status").and_then(Value::as_u64).map(|n| n as u16),
            code: s("code"),
            error_type: s("type"),
            message: s("message"),
            body: match v.get("body") {
                Some(Value::String(b)) => Some(b.clone()),
                Some(Value::Null) | None => None,
                Some(other) => Some(other.to_string()),
            },
        }
    }

    fn as_error(&self) -> ProviderError<'_> {
        ProviderError {
            provider: self.provider.as_deref(),
            model: self.model.as_deref(),
            status: self.status,
            code: self.code.as_deref(),
            error_type: self.error_type.as_deref(),
            message: self.message.as_deref(),
            body: self.body.as_deref().map(Body::Text),
        }
    }
}

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

fn children_cpu() -> Duration {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is a valid, writable rusage; RUSAGE_CHILDREN is a valid `who`.
    let u = unsafe {
        libc::getrusage(libc::RUSAGE_CHILDREN, u.as_mut_ptr());
        u.assume_init()
    };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

/// CPU ns per message of one pass over `lines`.
fn pass(engine: &Engine, lines: &[Line], scratch: &mut Scratch) -> (f64, usize) {
    let t0 = thread_cpu();
    let mut acc = 0usize;
    for l in lines {
        acc += engine.classify_with(&l.as_error(), scratch).reason_id.0 as usize;
    }
    let ns = (thread_cpu() - t0).as_nanos() as f64 / lines.len() as f64;
    (ns, acc)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median CPU ns per message of 3 passes after one warm-up pass.
fn in_process(engine: &Engine, lines: &[Line]) -> f64 {
    let mut scratch = Scratch::default();
    let (_, sink) = pass(engine, lines, &mut scratch);
    std::hint::black_box(sink);
    median(
        (0..3)
            .map(|_| pass(engine, lines, &mut scratch).0)
            .collect(),
    )
}

/// Per-message wall time percentiles (p50, p99, max), ns.
fn latency(engine: &Engine, lines: &[Line]) -> (f64, f64, f64) {
    let mut scratch = Scratch::default();
    let mut ns: Vec<f64> = lines
        .iter()
        .map(|l| {
            let t = Instant::now();
            std::hint::black_box(engine.classify_with(&l.as_error(), &mut scratch));
            t.elapsed().as_nanos() as f64
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
    (at(0.5), at(0.99), ns[ns.len() - 1])
}

/// `Model::predict` alone on the messages that consult the model (its
/// input as the engine prepares it): how many, p50, p99 (ns, best of 3
/// passes per message).
fn predict_latency(engine: &Engine, lines: &[Line]) -> (usize, f64, f64) {
    struct Owned {
        text: String,
        status: Option<u16>,
        provider: Option<String>,
        code: Option<String>,
        error_type: Option<String>,
    }
    let Some((model, _)) = engine.model() else {
        return (0, f64::NAN, f64::NAN);
    };
    let consulted: Vec<Owned> = lines
        .iter()
        .filter(|l| engine.classify(&l.as_error()).probability.is_some())
        .map(|l| {
            engine.with_model_input(&l.as_error(), |i| Owned {
                text: i.text.to_owned(),
                status: i.status,
                provider: i.provider.map(str::to_owned),
                code: i.code.map(str::to_owned),
                error_type: i.error_type.map(str::to_owned),
            })
        })
        .collect();
    let mut ns: Vec<f64> = consulted
        .iter()
        .map(|o| {
            let input = failover::evidence::features::Input {
                text: &o.text,
                status: o.status,
                provider: o.provider.as_deref(),
                code: o.code.as_deref(),
                error_type: o.error_type.as_deref(),
            };
            (0..3)
                .map(|_| {
                    let t = Instant::now();
                    std::hint::black_box(model.predict(&input));
                    t.elapsed().as_nanos() as f64
                })
                .fold(f64::INFINITY, f64::min)
        })
        .collect();
    ns.sort_by(f64::total_cmp);
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
    (ns.len(), at(0.5), at(0.99))
}

/// Runs `cmd` with stdout to /dev/null: (wall, the child's CPU).
fn whole(mut cmd: Command) -> (Duration, Duration) {
    let c0 = children_cpu();
    let t0 = Instant::now();
    let status = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let wall = t0.elapsed();
    assert!(status.success(), "{cmd:?} failed: {status}");
    (wall, children_cpu() - c0)
}

/// The original's in-process CPU ns per message, from its harness's line.
fn original_in_process(node: &Path, dir: &Path, reference: &Path) -> f64 {
    let out = Command::new(node)
        .current_dir(dir.join("ref"))
        .args(["--import", "./stub-hooks.mjs", "bench.mjs"])
        .arg(reference)
        .args(["--passes", "3"])
        .output()
        .expect("run node");
    let text = String::from_utf8_lossy(&out.stdout);
    let field = "process-cpu ns/msg median=";
    let at = text.find(field).unwrap_or_else(|| {
        panic!(
            "the harness said: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    text[at + field.len()..]
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("a number")
}

fn env_path(key: &str) -> Option<PathBuf> {
    std::env::var_os(key).map(PathBuf::from)
}

fn main() {
    // `cargo bench` passes `--bench`; nothing here takes arguments.
    let original = env_path("ORIGINAL");
    let scratch_dir = original.clone().or_else(|| env_path("SCRATCH"));
    let workload = env_path("WORKLOAD")
        .or_else(|| scratch_dir.as_ref().map(|d| d.join("work100k.jsonl")))
        .expect("set ORIGINAL (or WORKLOAD): see benches/README.md, \"Against the original\"");
    let rounds: usize = std::env::var("ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let bin = env_path("FAILOVER_BIN").unwrap_or_else(|| root.join("target/release/failover"));
    let text = std::fs::read_to_string(&workload).expect("read the workload");
    let lines: Vec<Line> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(Line::parse)
        .collect();
    let n = lines.len() as f64;
    println!("workload {} ({} lines)", workload.display(), lines.len());

    let with_model = Engine::builtin();
    let rules_only = Engine::builtin_rules();
    let node = original
        .as_ref()
        .map(|d| env_path("NODE").unwrap_or_else(|| d.join("node24/package/bin/node")));
    let one_line =
        std::env::temp_dir().join(format!("failover-original-{}.jsonl", std::process::id()));
    let one_ref = std::env::temp_dir().join(format!(
        "failover-original-ref-{}.jsonl",
        std::process::id()
    ));
    std::fs::write(
        &one_line,
        "{\"status\":429,\"message\":\"Rate limit reached\"}\n",
    )
    .unwrap();
    std::fs::write(
        &one_ref,
        "{\"status\":429,\"message\":\"Rate limit reached\"}\n",
    )
    .unwrap();

    let mut rows: Vec<[f64; 9]> = Vec::new();
    for round in 1..=rounds {
        let mut r = [f64::NAN; 9];
        if let (Some(d), Some(node)) = (&original, &node) {
            r[0] = original_in_process(node, d, &d.join("ref100k.jsonl"));
        }
        r[1] = in_process(&with_model, &lines);
        r[2] = in_process(&rules_only, &lines);
        if let (Some(d), Some(node)) = (&original, &node) {
            let mut cmd = Command::new(node);
            cmd.current_dir(d.join("ref"))
                .args(["--import", "./stub-hooks.mjs", "bench.mjs"])
                .arg(d.join("ref100k.jsonl"))
                .arg("--oneshot");
            let (wall, cpu) = whole(cmd);
            r[3] = wall.as_secs_f64();
            r[4] = cpu.as_secs_f64();
        }
        if bin.exists() {
            let mut cmd = Command::new(&bin);
            cmd.arg("classify").arg(&workload);
            let (wall, cpu) = whole(cmd);
            r[5] = wall.as_secs_f64();
            r[6] = cpu.as_secs_f64();
            // Start-up: best of 5 on one line.
            let best = |mk: &dyn Fn() -> Command| {
                (0..5)
                    .map(|_| whole(mk()).0.as_secs_f64())
                    .fold(f64::INFINITY, f64::min)
            };
            r[8] = best(&|| {
                let mut c = Command::new(&bin);
                c.arg("classify").arg(&one_line);
                c
            });
            if let (Some(d), Some(node)) = (&original, &node) {
                r[7] = best(&|| {
                    let mut c = Command::new(node);
                    c.current_dir(d.join("ref"))
                        .args(["--import", "./stub-hooks.mjs", "bench.mjs"])
                        .arg(&one_ref)
                        .arg("--oneshot");
                    c
                });
            }
        }
        println!(
            "round {round}: in-process CPU/msg: original {:.0} ns, failover {:.0} ns (model) {:.0} ns (rules) \
             | whole process: original {:.3} s wall {:.3} s CPU, failover {:.3} s wall {:.3} s CPU \
             | start-up: original {:.1} ms, failover {:.1} ms",
            r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7] * 1e3, r[8] * 1e3
        );
        rows.push(r);
    }
    let col = |i: usize| median(rows.iter().map(|r| r[i]).collect());
    let (p50, p99, max) = latency(&with_model, &lines);
    let (q50, q99, qmax) = latency(&rules_only, &lines);
    let (consulted, m50, m99) = predict_latency(&with_model, &lines);
    println!();
    println!("medians of {rounds} rounds:");
    println!(
        "  in-process, CPU per message: original {:.0} ns; failover with the model {:.0} ns ({:.1}×), rules alone {:.0} ns ({:.1}×)",
        col(0), col(1), col(0) / col(1), col(2), col(0) / col(2)
    );
    println!(
        "  per message, wall: with the model p50 {p50:.0} ns, p99 {p99:.0} ns, max {max:.0} ns; rules alone p50 {q50:.0} ns, p99 {q99:.0} ns, max {qmax:.0} ns"
    );
    println!(
        "  the model: consulted for {consulted} of {} messages; Model::predict p50 {m50:.0} ns, p99 {m99:.0} ns",
        lines.len()
    );
    println!(
        "  whole process, {} lines: original {:.0} lines/s ({:.3} s CPU); failover {:.0} lines/s ({:.3} s CPU): {:.1}× by wall, {:.1}× by CPU",
        lines.len(),
        n / col(3),
        col(4),
        n / col(5),
        col(6),
        col(3) / col(5),
        col(4) / col(6)
    );
    println!(
        "  start-up, one line: original {:.1} ms, failover {:.1} ms ({:.0}×)",
        col(7) * 1e3,
        col(8) * 1e3,
        col(7) / col(8)
    );
    let _ = std::fs::remove_file(&one_line);
    let _ = std::fs::remove_file(&one_ref);
}
