//! Time: an injectable clock and epoch-millisecond formatting.
//!
//! Every timestamp in the state files is epoch milliseconds (UTC). Code that
//! decides anything takes `now_ms: u64` as a parameter; only the edges (the
//! file store naming a quarantined file, the CLI) ask a [`Clock`], so tests
//! run on fixed times and never sleep. Formatting needs no calendar crate:
//! days since 1970 become a civil date with Howard Hinnant's algorithm.
//!
//! ```
//! use failover::time::{format_span, format_utc};
//! assert_eq!(format_utc(1_767_225_600_000), "2026-01-01T00:00:00Z");
//! assert_eq!(format_span(25 * 60_000), "25m");
//! assert_eq!(format_span(5 * 3_600_000 + 60_000), "5h 1m");
//! ```

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where "now" comes from.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system's wall clock.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}

/// A clock that only moves when told to (tests, simulations).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock stopped at `now_ms` (epoch milliseconds).
    pub fn new(now_ms: u64) -> Self {
        ManualClock(AtomicU64::new(now_ms))
    }

    /// Moves the clock to `now_ms`.
    pub fn set(&self, now_ms: u64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }

    /// Moves the clock forward (saturating: it never wraps back).
    pub fn advance(&self, ms: u64) {
        let _ = self
            .0
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |t| {
                Some(t.saturating_add(ms))
            });
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// One second in milliseconds, the unit of every time in the state.
pub const SECOND_MS: u64 = 1_000;
/// One minute in milliseconds.
pub const MINUTE_MS: u64 = 60 * SECOND_MS;
/// One hour in milliseconds.
pub const HOUR_MS: u64 = 60 * MINUTE_MS;
/// One day in milliseconds.
pub const DAY_MS: u64 = 24 * HOUR_MS;

/// `2026-01-01T00:00:00Z` (seconds precision, UTC).
pub fn format_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// A duration in the two largest non-zero units: `45s`, `25m`, `5h 1m`, `2d 3h`.
pub fn format_span(ms: u64) -> String {
    let units = [
        (DAY_MS, "d"),
        (HOUR_MS, "h"),
        (MINUTE_MS, "m"),
        (SECOND_MS, "s"),
    ];
    let mut parts = Vec::new();
    let mut rest = ms;
    for (size, name) in units {
        if rest >= size {
            parts.push(format!("{}{name}", rest / size));
            rest %= size;
        }
        if parts.len() == 2 || (!parts.is_empty() && rest == 0) {
            break;
        }
    }
    if parts.is_empty() {
        format!("{ms}ms")
    } else {
        parts.join(" ")
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian
/// (Howard Hinnant's `civil_from_days`).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_767_225_599_999), "2025-12-31T23:59:59Z");
    }

    #[test]
    fn spans() {
        assert_eq!(format_span(0), "0ms");
        assert_eq!(format_span(59_000), "59s");
        assert_eq!(format_span(HOUR_MS), "1h");
        assert_eq!(format_span(DAY_MS + 3 * HOUR_MS + 5), "1d 3h");
    }

    #[test]
    fn manual_clock_saturates_instead_of_wrapping_back() {
        let c = ManualClock::new(10);
        c.advance(u64::MAX);
        assert_eq!(c.now_ms(), u64::MAX);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(10);
        c.advance(5);
        assert_eq!(c.now_ms(), 15);
        c.set(1);
        assert_eq!(c.now_ms(), 1);
    }
}
