//! The runner's clock and sleeper, injected so that cooldowns, probes and
//! the 5-minute re-probe are tested without waiting.
//!
//! [`TokioClock`] reads tokio's clock (so `tokio::time::pause()` freezes it
//! and `advance` moves it) from a fixed epoch origin; [`TokioSleeper`]
//! sleeps on tokio's timer. The simulator uses a [`ManualClock`] with a
//! [`VirtualSleeper`] that moves the clock instead of waiting.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::store::{Clock, ManualClock};

/// A boxed sleep.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Where the runner waits (rotation backoff, `overloadedBackoffMs`).
pub trait Sleeper: Send + Sync {
    /// A future that completes after `ms` milliseconds.
    fn sleep(&self, ms: u64) -> Sleep;
}

/// Sleeps on tokio's timer.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioSleeper;

impl Sleeper for TokioSleeper {
    fn sleep(&self, ms: u64) -> Sleep {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}

/// Epoch milliseconds from tokio's clock: `origin_ms` at construction,
/// then whatever tokio's (possibly paused) clock says has elapsed.
#[derive(Clone, Copy, Debug)]
pub struct TokioClock {
    origin_ms: u64,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// Must be called inside a tokio runtime.
    pub fn starting_at(origin_ms: u64) -> Self {
        TokioClock {
            origin_ms,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Clock for TokioClock {
    fn now_ms(&self) -> u64 {
        self.origin_ms + self.start.elapsed().as_millis() as u64
    }
}

/// A sleeper that moves a [`ManualClock`] forward instead of waiting:
/// virtual time for simulations.
#[derive(Clone, Debug)]
pub struct VirtualSleeper(pub Arc<ManualClock>);

impl Sleeper for VirtualSleeper {
    fn sleep(&self, ms: u64) -> Sleep {
        self.0.advance(ms);
        Box::pin(std::future::ready(()))
    }
}
