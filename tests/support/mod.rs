//! Helpers shared by integration tests.

#![allow(dead_code)]

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
