//! The SDK retry-after cap (SPEC R7.5, REFERENCE h).
//!
//! A provider SDK that honours `Retry-After` would happily sleep for an
//! hour on a rate-limited key, while another model could answer now. So
//! SDK-internal waits are capped: a retryable response (408, 409, 429,
//! 5xx) whose `retry-after-ms` / `retry-after` asks for more than the cap
//! (60 s by default) surfaces at once and failover runs. Without a header
//! only 429 surfaces at once (the SDK would guess a wait); the other
//! retryable statuses keep the SDK's own short backoff.
//!
//! Worked example, default cap: `429` with `retry-after: 30` → wait 30 s;
//! `429` with `retry-after: 120` → surface now; `503` without header →
//! wait (SDK backoff); `OPENCLAW_SDK_RETRY_MAX_WAIT_SECONDS=off` → every
//! header is honoured.

use std::time::Duration;

/// The default cap (R7.5).
pub const DEFAULT_RETRY_MAX_WAIT: Duration = Duration::from_secs(60);
/// The environment variable that tunes the cap.
pub const RETRY_MAX_WAIT_ENV: &str = "OPENCLAW_SDK_RETRY_MAX_WAIT_SECONDS";

/// What the SDK should do with a retryable response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetryDecision {
    /// Retry inside the SDK: after the header's wait, or (`None`) after the
    /// SDK's own backoff.
    Wait(Option<Duration>),
    /// Do not retry: hand the error to the runner so failover runs
    /// (`x-should-retry: false`).
    SurfaceNow,
}

/// The cap: `None` means disabled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetryCap(pub Option<Duration>);

impl Default for RetryCap {
    fn default() -> Self {
        RetryCap(Some(DEFAULT_RETRY_MAX_WAIT))
    }
}

impl RetryCap {
    /// Parses the environment value: unset → 60 s; `0`, `false`, `off`,
    /// `none`, `disabled` → no cap; a decimal number of seconds → that;
    /// anything else → 60 s.
    pub fn from_env_value(value: Option<&str>) -> Self {
        let Some(v) = value.map(str::trim) else {
            return RetryCap::default();
        };
        let lower = v.to_ascii_lowercase();
        if matches!(lower.as_str(), "0" | "false" | "off" | "none" | "disabled") {
            return RetryCap(None);
        }
        match v.parse::<f64>() {
            Ok(s)
                if s.is_finite()
                    && s > 0.0
                    && v.chars().all(|c| c.is_ascii_digit() || c == '.') =>
            {
                RetryCap(Some(Duration::from_secs_f64(s)))
            }
            Ok(0.0) => RetryCap(None),
            _ => RetryCap::default(),
        }
    }

    /// Reads [`RETRY_MAX_WAIT_ENV`].
    pub fn from_env() -> Self {
        Self::from_env_value(std::env::var(RETRY_MAX_WAIT_ENV).ok().as_deref())
    }
}

fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..600).contains(&status)
}

/// The longest wait a response can ask for, as this crate reads it: a
/// `Retry-After` beyond it is read as this (a week). A provider's header
/// is untrusted input: `1e308`, `18446744073709551616` or a date in the
/// year 9999 saturate here instead of overflowing a `Duration` or an
/// epoch, and what the runner then does with the wait is capped again by
/// the policy of the failure's reason (`auth.cooldowns`, R7.5).
pub const MAX_REQUESTED_WAIT: Duration = Duration::from_secs(7 * 24 * 3600);

/// A number of `unit_ms` milliseconds as a header gives it (`30`, `1.5`,
/// `1e308`): negative, NaN and non-numbers are `None`; anything past
/// [`MAX_REQUESTED_WAIT`] is that.
fn bounded_wait(text: &str, unit_ms: f64) -> Option<Duration> {
    let n = text.parse::<f64>().ok().filter(|n| *n >= 0.0)?;
    let ms = n * unit_ms;
    let max_ms = MAX_REQUESTED_WAIT.as_millis() as f64;
    // `+inf` (from `1e400`) is past the bound too; NaN failed the filter.
    Some(if ms >= max_ms {
        MAX_REQUESTED_WAIT
    } else {
        Duration::from_micros((ms * 1000.0) as u64)
    })
}

/// The wait a response asks for: `retry-after-ms` first, then
/// `retry-after` as seconds or as an HTTP date (against `now_ms`), at most
/// [`MAX_REQUESTED_WAIT`]. Never panics, whatever the header says.
pub fn requested_wait(headers: &[(&str, &str)], now_ms: u64) -> Option<Duration> {
    let get = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim())
    };
    if let Some(w) = get("retry-after-ms").and_then(|v| bounded_wait(v, 1.0)) {
        return Some(w);
    }
    let v = get("retry-after")?;
    if v.parse::<f64>().is_ok() {
        return bounded_wait(v, 1000.0);
    }
    let at = parse_http_date(v)?;
    Some(Duration::from_millis(at.saturating_sub(now_ms)).min(MAX_REQUESTED_WAIT))
}

/// Whether the SDK may wait for this response (see the module docs).
pub fn should_wait(
    status: u16,
    headers: &[(&str, &str)],
    now_ms: u64,
    cap: RetryCap,
) -> RetryDecision {
    if !retryable(status) {
        return RetryDecision::SurfaceNow;
    }
    match requested_wait(headers, now_ms) {
        Some(w) => match cap.0 {
            Some(max) if w > max => RetryDecision::SurfaceNow,
            _ => RetryDecision::Wait(Some(w)),
        },
        None if status == 429 && cap.0.is_some() => RetryDecision::SurfaceNow,
        None => RetryDecision::Wait(None),
    }
}

/// IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`) → epoch ms. Every field
/// is range-checked (years 1970–9999), so no arithmetic below can
/// overflow.
fn parse_http_date(s: &str) -> Option<u64> {
    let mut parts = s.split_whitespace();
    let (Some(_), Some(day), Some(month), Some(year), Some(time), Some(zone), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    if !zone.eq_ignore_ascii_case("GMT") {
        return None;
    }
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    let field = |t: &str, max: i64| t.parse::<i64>().ok().filter(|n| (0..=max).contains(n));
    let m = MONTHS.iter().position(|n| n.eq_ignore_ascii_case(month))? as i64 + 1;
    let d = field(day, 31).filter(|d| *d >= 1)?;
    let y = field(year, 9999).filter(|y| *y >= 1970)?;
    let mut hms = time.split(':');
    let (Some(hh), Some(mm), Some(ss), None) = (hms.next(), hms.next(), hms.next(), hms.next())
    else {
        return None;
    };
    let (hh, mm, ss) = (field(hh, 23)?, field(mm, 59)?, field(ss, 60)?);
    // Howard Hinnant's days_from_civil.
    let y2 = if m <= 2 { y - 1 } else { y };
    let era = y2 / 400;
    let yoe = y2 - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hh * 3600 + mm * 60 + ss;
    u64::try_from(secs).ok().map(|s| s * 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

    // R7.5: waits up to the cap, longer windows surface at once.
    #[test]
    fn r7_5_cap() {
        let cap = RetryCap::default();
        assert_eq!(
            should_wait(429, &[("retry-after", "30")], NOW, cap),
            RetryDecision::Wait(Some(Duration::from_secs(30)))
        );
        assert_eq!(
            should_wait(429, &[("Retry-After", "120")], NOW, cap),
            RetryDecision::SurfaceNow
        );
        assert_eq!(
            should_wait(503, &[("retry-after-ms", "1500")], NOW, cap),
            RetryDecision::Wait(Some(Duration::from_millis(1500)))
        );
        assert_eq!(
            should_wait(503, &[("retry-after-ms", "61000")], NOW, cap),
            RetryDecision::SurfaceNow
        );
        assert_eq!(should_wait(429, &[], NOW, cap), RetryDecision::SurfaceNow);
        assert_eq!(should_wait(500, &[], NOW, cap), RetryDecision::Wait(None));
        assert_eq!(
            should_wait(400, &[("retry-after", "1")], NOW, cap),
            RetryDecision::SurfaceNow
        );
    }

    // R7.5: an HTTP date counts from now.
    #[test]
    fn r7_5_http_date() {
        let h = [("retry-after", "Thu, 01 Jan 2026 00:00:45 GMT")];
        assert_eq!(requested_wait(&h, NOW), Some(Duration::from_secs(45)));
        let h = [("retry-after", "Thu, 01 Jan 2026 00:05:00 GMT")];
        assert_eq!(
            should_wait(429, &h, NOW, RetryCap::default()),
            RetryDecision::SurfaceNow
        );
    }

    // R7.5: OPENCLAW_SDK_RETRY_MAX_WAIT_SECONDS tunes or disables the cap.
    #[test]
    fn r7_5_env_values() {
        for off in ["0", "false", "OFF", "none", "disabled"] {
            assert_eq!(RetryCap::from_env_value(Some(off)), RetryCap(None), "{off}");
        }
        assert_eq!(RetryCap::from_env_value(None), RetryCap::default());
        assert_eq!(
            RetryCap::from_env_value(Some("5")),
            RetryCap(Some(Duration::from_secs(5)))
        );
        assert_eq!(RetryCap::from_env_value(Some("5s")), RetryCap::default());
        let off = RetryCap(None);
        assert_eq!(
            should_wait(429, &[("retry-after", "3600")], NOW, off),
            RetryDecision::Wait(Some(Duration::from_secs(3600)))
        );
    }

    // Issue 30: whatever a provider's header says, the wait is bounded and
    // reading it never panics.
    #[test]
    fn r7_5_hostile_headers_saturate() {
        let week = MAX_REQUESTED_WAIT;
        for (name, value) in [
            ("retry-after", "1e308"),
            ("retry-after", "18446744073709551616"),
            ("retry-after", "1e20"),
            ("retry-after", "999999999"),
            ("retry-after", "inf"),
            ("retry-after-ms", "1e308"),
            ("retry-after-ms", "340282366920938463463374607431768211456"),
            ("retry-after", "Fri, 31 Dec 9999 23:59:59 GMT"),
        ] {
            assert_eq!(
                requested_wait(&[(name, value)], NOW),
                Some(week),
                "{name}: {value}"
            );
        }
        for bad in [
            "-1",
            "NaN",
            "",
            "Fri, 31 Dec 99999999999999999 23:59:59 GMT",
            "Fri, 32 Dec 2026 00:00:00 GMT",
            "Fri, 01 Dec 2026 24:00:00 GMT",
            "Fri, 01 Dec 2026 00:00:00 GMT extra",
        ] {
            assert_eq!(requested_wait(&[("retry-after", bad)], NOW), None, "{bad}");
        }
        assert_eq!(
            requested_wait(&[("retry-after", "1.5")], NOW),
            Some(Duration::from_millis(1500))
        );
        // A date in the past asks for no wait.
        assert_eq!(
            requested_wait(&[("retry-after", "Thu, 01 Jan 1970 00:00:00 GMT")], NOW),
            Some(Duration::ZERO)
        );
        assert_eq!(
            should_wait(429, &[("retry-after", "1e308")], NOW, RetryCap::default()),
            RetryDecision::SurfaceNow
        );
    }
}
