//! Test support shared by the workspace's crates (a dev-dependency only):
//! a real `redis-server` on a free loopback port ([`RedisServer`]), fresh
//! temporary directories ([`temp_root`]), a replayable seed for the fuzz
//! targets ([`FuzzSeed`]), and AWS event-stream frames and an independent
//! SigV4 verifier for a fake Bedrock ([`aws`]). It depends on no crate of
//! the workspace, so every crate's unit and integration tests can use it.
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

/// The seed of one fuzz target's run: `FUZZ_SEED=<n>` when set (to replay
/// a run), else a fresh random one. A target prints it when it starts and
/// names it when it fails, so a failure found by a random run (in CI, say)
/// can be run again exactly, with at least as many `FUZZ_CASES`.
#[derive(Clone, Copy, Debug)]
pub struct FuzzSeed(pub u64);

impl FuzzSeed {
    /// `FUZZ_SEED` or a random seed; panics on a `FUZZ_SEED` that is not
    /// a number rather than running another seed than the one asked for.
    pub fn from_env() -> FuzzSeed {
        use std::hash::{BuildHasher, Hasher};
        match std::env::var("FUZZ_SEED") {
            Ok(v) => FuzzSeed(
                v.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("FUZZ_SEED={v:?}: not a number (u64)")),
            ),
            // SipHash with the process's random keys: random enough to
            // pick a seed, and no rand crate for one number.
            Err(_) => FuzzSeed(
                std::collections::hash_map::RandomState::new()
                    .build_hasher()
                    .finish(),
            ),
        }
    }

    /// The 32 bytes a ChaCha generator takes (proptest's
    /// `TestRng::from_seed(RngAlgorithm::ChaCha, ..)`).
    pub fn bytes(self) -> [u8; 32] {
        let mut b = [0u8; 32];
        for (i, chunk) in b.chunks_mut(8).enumerate() {
            let word = self.0 ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            chunk.copy_from_slice(&word.to_le_bytes());
        }
        b
    }
}

impl std::fmt::Display for FuzzSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "FUZZ_SEED={}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::FuzzSeed;

    #[test]
    fn a_seed_gives_the_same_bytes_and_seeds_differ() {
        assert_eq!(FuzzSeed(7).bytes(), FuzzSeed(7).bytes());
        assert_ne!(FuzzSeed(7).bytes(), FuzzSeed(8).bytes());
        let b = FuzzSeed(7).bytes();
        assert_ne!(b[..8], b[8..16], "the four words differ");
        assert_eq!(FuzzSeed(42).to_string(), "FUZZ_SEED=42");
    }
}
