//! Test support shared by the workspace's crates (a dev-dependency only):
//! a real `redis-server` on a free loopback port ([`RedisServer`]), fresh
//! temporary directories ([`temp_root`]), and AWS event-stream frames and
//! an independent SigV4 verifier for a fake Bedrock ([`aws`]). It depends on no crate of the
//! workspace, so every crate's unit and integration tests can use it.
#![deny(missing_docs)]

pub mod aws;
mod redis_server;

pub use redis_server::{available, RedisServer};

use std::path::PathBuf;

/// A fresh directory under the system temp dir, unique per process, test
/// name and time: `failover-<kind>-<name>-<pid>-<nanos>`.
pub fn temp_root(kind: &str, name: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let d = std::env::temp_dir().join(format!(
        "failover-{kind}-{name}-{}-{nanos}",
        std::process::id()
    ));
    std::fs::create_dir_all(&d).unwrap();
    d
}
