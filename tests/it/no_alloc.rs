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
use std::sync::atomic::{AtomicUsize, Ordering};

use failover::{Engine, Scratch};

#[path = "../../benches/support/corpus.rs"]
mod corpus;

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static MEASURING: Cell<bool> = const { Cell::new(false) };
}

fn count() {
    if MEASURING.with(Cell::get) {
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
