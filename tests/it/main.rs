//! The `failover` crate's tests on its public API alone, one binary (the
//! tests that reach its internals are unit tests, `src/tests/`). The data
//! they read stays at the repository's root (`tests/diagnostics/`,
//! `tests/field/`, `rules/` …).
//!
//! `no_alloc`'s counting allocator is this binary's global allocator.

mod diagnostics;
mod evidence;
mod field_corpus;
mod no_alloc;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod store_kill;
#[cfg(all(feature = "sqlite", feature = "redis"))]
mod store_processes;
#[cfg(feature = "sqlite")]
mod store_scale;
mod store_state_preserve;
#[cfg(feature = "redis")]
mod store_transient_slot;

/// The name the test harness gives test `name` of the module whose
/// `module_path!()` is `module`: its path without the crate's name
/// (`store_kill::writer`). The tests that run this binary again as a
/// child pick the child's test by it, with `--exact`.
#[allow(dead_code)] // only the backend-gated modules use it
fn test_name(module: &str, name: &str) -> String {
    let path = module.split_once("::").map_or("", |(_, p)| p);
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}::{name}")
    }
}
