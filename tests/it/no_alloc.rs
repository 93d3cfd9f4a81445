//! The classification hot path does not allocate: after one warm-up pass
//! (buffers grow to their working size, regex caches fill), classifying
//! plain-message errors with a reused `Scratch` performs zero heap
//! allocations. Counted with a global allocator wrapper, on the measuring
//! thread only (the test harness's own thread allocates as it likes).
//! The wrapper is the allocator of this whole binary (`tests/it`): the
//! other tests here allocate through it, uncounted.

// A global allocator is an `unsafe impl`.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use failover::{Engine, Scratch};

#[path = "../../benches/support/corpus.rs"]
mod corpus;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

/// Counting on every thread (the stream's workers and writer), for
/// [`a_jsonl_stream_allocates_per_chunk_not_per_line`].
static MEASURING_ALL: AtomicBool = AtomicBool::new(false);

fn count() {
    if MEASURING_ALL.load(Ordering::Relaxed) || MEASURING.with(Cell::get) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The regex crate's lazy DFAs add states to their (bounded, reused)
/// caches the first times a pattern meets new text; after that no pass
/// allocates.
const WARM_UP_PASSES: usize = 3;

#[test]
fn classifying_plain_messages_does_not_allocate() {
    let engine = Engine::builtin();
    // Plain messages: no JSON body to parse (the JSON path allocates while
    // parsing, by design).
    let samples: Vec<_> = corpus::corpus(5_000, 9)
        .into_iter()
        .filter(|s| !s.message.contains('{'))
        .collect();
    assert!(samples.len() > 4_000);
    let mut scratch = Scratch::default();
    let mut checksum = 0usize;
    for _ in 0..WARM_UP_PASSES {
        for s in &samples {
            checksum += engine
                .classify_with(&s.as_error(), &mut scratch)
                .reason_id
                .0 as usize;
        }
    }
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    MEASURING.with(|m| m.set(true));
    for s in &samples {
        let b = ALLOCATIONS.load(Ordering::Relaxed);
        checksum += engine
            .classify_with(&s.as_error(), &mut scratch)
            .reason_id
            .0 as usize;
        if std::env::var("SHOW").is_ok() && ALLOCATIONS.load(Ordering::Relaxed) != b {
            eprintln!("ALLOC {:?}", s);
        }
    }
    MEASURING.with(|m| m.set(false));
    let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(
        allocated,
        0,
        "{allocated} allocations while classifying {} messages",
        samples.len()
    );
    assert!(checksum > 0);
}

/// Issue 47: `failover classify` reads and writes JSONL without allocating
/// per line. A line's string fields are borrowed from it, or unescaped
/// into buffers its worker keeps (a body written as a JSON string always
/// holds escapes); what the stream allocates is per chunk of about 256 KiB
/// (the chunk, its output, its counts) and per worker thread (its buffers,
/// and the regex crate's caches for a thread that had none). So the same
/// lines twice over cost about as many allocations as once, beyond the
/// chunks: counted on every thread, after warm-up runs, over 20,000 lines
/// of the corpus (plain messages, and its JSON error bodies as `body`
/// strings, the way a log holds them) and over the same lines twice.
/// Each run of the stream starts new worker threads, and the regex crate
/// keeps its caches in stacks chosen by thread id (eight of them): a new
/// thread may find its stack empty and build caches, until every stack
/// holds some.
const STREAM_WARM_UP_RUNS: usize = 12;

#[test]
fn a_jsonl_stream_allocates_per_chunk_not_per_line() {
    use failover::stream::{classify, Options};
    let engine = Engine::builtin();
    let mut input = String::new();
    let mut bodies = 0;
    for s in corpus::corpus(20_000, 11) {
        let mut line = serde_json::Map::new();
        for (key, value) in [
            ("provider", &s.provider),
            ("code", &s.code),
            ("type", &s.error_type),
        ] {
            if let Some(v) = value {
                line.insert(key.into(), v.clone().into());
            }
        }
        if let Some(status) = s.status {
            line.insert("status".into(), status.into());
        }
        let key = if s.message.trim_start().starts_with('{') {
            bodies += 1;
            "body"
        } else {
            "message"
        };
        line.insert(key.into(), s.message.clone().into());
        input.push_str(&serde_json::Value::Object(line).to_string());
        input.push('\n');
    }
    assert!(bodies > 300, "{bodies} bodies");
    let twice = input.repeat(2);
    let options = Options::default().workers(2);
    let allocations = |text: &str| {
        let mut out = Vec::with_capacity(text.len());
        for _ in 0..STREAM_WARM_UP_RUNS {
            out.clear();
            classify(&engine, text.as_bytes(), &mut out, &options, |_| {}).unwrap();
        }
        let first = std::mem::take(&mut out);
        out.reserve(first.len());
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        MEASURING_ALL.store(true, Ordering::Relaxed);
        let summary = classify(&engine, text.as_bytes(), &mut out, &options, |_| {});
        MEASURING_ALL.store(false, Ordering::Relaxed);
        let allocated = ALLOCATIONS.load(Ordering::Relaxed) - before;
        let summary = summary.unwrap();
        assert_eq!(summary.bad, 0);
        assert_eq!(out, first, "each run writes what the first did");
        (summary.lines, allocated)
    };
    let (lines, once) = allocations(&input);
    let (lines_twice, twice_over) = allocations(&twice);
    assert_eq!((lines, lines_twice), (20_000, 40_000));
    let more_chunks = twice.len().div_ceil(256 << 10) - input.len().div_ceil(256 << 10);
    let extra = twice_over.saturating_sub(once);
    eprintln!(
        "{once} allocations for 20,000 lines, {twice_over} for the same twice \
         ({more_chunks} more chunks)"
    );
    assert!(
        extra <= 10 * more_chunks + 200,
        "20,000 more lines cost {extra} more allocations ({once} / {twice_over})"
    );
}
