//! Whether the state can be written, and what a run does when it cannot
//! (issue 30: a full disk, a read-only mount, a database that refuses).
//!
//! A run's answer never waits on a state write that failed. Each write of
//! a run is one of two kinds:
//!
//! - **bookkeeping** — a failure's cooldown or disable (R7, R8), a
//!   success's `lastUsed` (R6.2), the probe throttle (R16.1), the re-probe
//!   clock (R11.5), the skip cache (R12), the session's settling and
//!   notice state (R13);
//! - **the persisted override** (R11.3): written before a fallback
//!   attempt starts, so that every other reader of the session sees the
//!   model about to be used.
//!
//! When one fails, the run goes on as if the write had been made and
//! lost: the answer goes out; a failure's cooldown is not remembered (the
//! next run may try the profile again); a fallback attempt runs without
//! its override persisted (so there is nothing to roll back, R11.4, and
//! the next turn starts from the configured selection again); a notice
//! may be sent again on the next turn (R13.3 cannot be kept without the
//! state). A *read* that fails still fails the run: without the state the
//! runner cannot know which profiles are blocked.
//!
//! [`StateHealth`] counts the failed writes, says whether the state is
//! degraded and why (a gateway's `/readyz` and `/metrics`), and logs:
//! the first failure at once, with its cause; then at most one line per
//! [`LOG_INTERVAL`] with the number of failures since; and one line when
//! a write succeeds again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::store::StoreError;

/// At most one log line per this long while writes keep failing.
pub(crate) const LOG_INTERVAL: Duration = Duration::from_secs(60);

/// The state's write health, shared by every runner of a gateway (see the
/// module documentation).
#[derive(Debug, Default)]
pub struct StateHealth {
    degraded: AtomicBool,
    failures: AtomicU64,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The last failure's cause (no secret: store errors name paths and
    /// operations only).
    cause: Option<String>,
    /// When the last line was logged, and the failures not logged since.
    logged: Option<Instant>,
    unlogged: u64,
}

impl StateHealth {
    /// A healthy state.
    pub fn new() -> Self {
        Self::default()
    }

    /// Why the state is degraded (the last write failure's cause), or
    /// `None` when the last write succeeded.
    pub fn degraded(&self) -> Option<String> {
        if !self.degraded.load(Ordering::Relaxed) {
            return None;
        }
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        Some(
            inner
                .cause
                .clone()
                .unwrap_or_else(|| "a state write failed".into()),
        )
    }

    /// State writes that failed since start.
    pub fn write_failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// Notes a failed write of `what` (`"record a failure"`).
    pub fn failed(&self, what: &str, e: &StoreError) {
        self.failures.fetch_add(1, Ordering::Relaxed);
        self.degraded.store(true, Ordering::Relaxed);
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.cause = Some(format!("cannot {what}: {e}"));
        let due = inner.logged.is_none_or(|t| t.elapsed() >= LOG_INTERVAL);
        if !due {
            inner.unlogged += 1;
            return;
        }
        let before = std::mem::take(&mut inner.unlogged);
        inner.logged = Some(Instant::now());
        tracing::error!(
            target: "failover::state",
            error = %e,
            write = what,
            failed_since_last_line = before,
            "state_write_failed: answering without it (degraded)"
        );
    }

    /// Notes a write that succeeded: a degraded state recovers (logged
    /// once).
    pub fn ok(&self) {
        if !self.degraded.swap(false, Ordering::Relaxed) {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let unlogged = std::mem::take(&mut inner.unlogged);
        inner.logged = None;
        tracing::warn!(
            target: "failover::state",
            failed_since_last_line = unlogged,
            total_failures = self.write_failures(),
            "state_write_recovered"
        );
    }

    /// A write's result, degraded: `Some(value)` when it was made, `None`
    /// (noted, see [`StateHealth::failed`]) when it failed.
    pub fn absorb<T>(&self, what: &str, r: Result<T, StoreError>) -> Option<T> {
        match r {
            Ok(v) => {
                self.ok();
                Some(v)
            }
            Err(e) => {
                self.failed(what, &e);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn degraded_until_a_write_succeeds() {
        let h = StateHealth::new();
        assert_eq!(h.degraded(), None);
        let e = StoreError::io(
            "write",
            std::path::Path::new("/state/x"),
            &std::io::Error::from_raw_os_error(28),
        );
        assert_eq!(h.absorb::<()>("record a failure", Err(e)), None);
        let why = h.degraded().expect("degraded");
        assert!(why.starts_with("cannot record a failure: "), "{why}");
        assert_eq!(h.write_failures(), 1);
        assert_eq!(h.absorb("record a success", Ok(7)), Some(7));
        assert_eq!(h.degraded(), None);
        assert_eq!(h.write_failures(), 1);
    }

    use crate::tests::LogCapture;

    // Issue 30: a burst of failed writes logs its first at once and counts
    // the rest (no line per failure within LOG_INTERVAL); the recovery is
    // one line with the failures since the last line and in all.
    #[test]
    fn failures_are_logged_once_per_interval_and_counted() {
        let log = LogCapture::start();
        let h = StateHealth::new();
        for _ in 0..3 {
            let e = StoreError::io(
                "write",
                std::path::Path::new("/state/x"),
                &std::io::Error::from_raw_os_error(28),
            );
            h.failed("record a failure", &e);
        }
        h.ok();
        h.ok();
        let out = log.text();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 2, "{out}");
        assert!(
            lines[0].contains("state_write_failed")
                && lines[0].contains("failed_since_last_line=0"),
            "{out}"
        );
        assert!(
            lines[1].contains("state_write_recovered")
                && lines[1].contains("failed_since_last_line=2")
                && lines[1].contains("total_failures=3"),
            "{out}"
        );
        assert_eq!(h.write_failures(), 3);
    }
}
