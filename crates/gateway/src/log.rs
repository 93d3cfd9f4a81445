//! The gateway's log lines: one flat JSON object per `tracing` event.
//!
//! The shape is the one tracing-subscriber's JSON formatter gives with
//! `flatten_event(true)` and no spans, which the gateway used before:
//!
//! ```text
//! {"timestamp":"2026-12-01T19:09:05.381060Z","level":"INFO","message":"request","protocol":"openai",…,"target":"failover::serve"}
//! ```
//!
//! Written by hand because it is on every request's path twice (the
//! access line and the runner's `model_fallback_decision`): the fmt
//! layer's JSON formatter cost about 19,000 instructions per event here
//! (a serde map over an adaptor per field, a span-context lookup, a
//! formatted timestamp through `time`-style machinery), this layer a small
//! fraction of that, and it needs nothing from the crate but the
//! `Layer` trait. Strings are escaped by serde_json, so the escaping is
//! the same as before.

use std::cell::RefCell;
use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::{Context, Layer};

use failover::time::civil_from_days;

/// Where the lines go: a buffer that one thread of its own writes out in
/// batches, so a request's worker never waits on the output and, while
/// lines keep coming, makes no system call for them at all.
///
/// By hand rather than tracing-appender: that writer wakes its thread for
/// every line (a futex wake each), and its thread spins on `sched_yield`
/// between lines, which on a two-core machine takes the core from the
/// workers (strace: 3.9 `sched_yield` and 5 `futex` calls per request).
/// Here the thread wakes itself: every [`GATHER`] it writes what came in
/// one `write(2)`, and only after a whole `GATHER` with no line does it
/// wait to be woken, by the next line. A worker's wake-up of the thread
/// sits on the request's path (the line is pushed before the answer goes
/// out) and, on these virtual machines, waking a thread on the other core
/// cost the answer far more than the call itself: waking the thread for
/// the first line of every batch, as this writer did before, added about
/// 35–100 µs to the p50 of sequential requests (benches/README.md, "The
/// log writer's wake-ups"). Nothing is dropped: a worker that finds
/// [`MAX_PENDING`] bytes waiting blocks until the thread has taken them
/// (back-pressure, not loss).
#[derive(Clone)]
pub struct Batched {
    shared: Arc<Shared>,
}

struct Shared {
    pending: Mutex<Pending>,
    /// The writer thread waits here for a first line.
    wake: Condvar,
    /// Workers wait here while [`MAX_PENDING`] bytes are waiting.
    room: Condvar,
}

#[derive(Default)]
struct Pending {
    bytes: Vec<u8>,
    closed: bool,
    /// The writer thread waits on `wake` (nothing came for a whole
    /// [`GATHER`]): the next line must wake it.
    parked: bool,
    /// How often a worker woke the thread, and how often it went to wait.
    #[cfg(test)]
    wakes: usize,
    #[cfg(test)]
    parks: usize,
}

/// How often the writer thread writes while lines keep coming, and how
/// long it goes without a line before it waits to be woken.
const GATHER: Duration = Duration::from_millis(2);
/// Bytes waiting beyond which a worker waits for the writer.
const MAX_PENDING: usize = 4 << 20;

/// Flushes what is waiting and stops the writer thread when dropped.
pub struct FlushGuard {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for FlushGuard {
    fn drop(&mut self) {
        lock(&self.shared.pending).closed = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(m: &Mutex<Pending>) -> MutexGuard<'_, Pending> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Batched {
    /// Starts the writer thread on `out`. Keep the guard for as long as
    /// lines are written: dropping it writes what is waiting and stops the
    /// thread (a line pushed after that is not written).
    pub fn start<O: std::io::Write + Send + 'static>(
        mut out: O,
    ) -> std::io::Result<(Batched, FlushGuard)> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            room: Condvar::new(),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("failover-log".into())
            .spawn(move || {
                let mut spare = Vec::new();
                loop {
                    let mut p = lock(&s.pending);
                    while p.bytes.is_empty() && !p.closed {
                        #[cfg(test)]
                        {
                            p.parks += usize::from(!p.parked);
                        }
                        p.parked = true;
                        p = s.wake.wait(p).unwrap_or_else(|e| e.into_inner());
                    }
                    p.parked = false;
                    if p.bytes.is_empty() {
                        return; // closed, and everything written
                    }
                    drop(p);
                    // While lines keep coming, one batch per GATHER, with
                    // no wake-up from the workers.
                    loop {
                        if !lock(&s.pending).closed {
                            std::thread::sleep(GATHER);
                        }
                        let mut p = lock(&s.pending);
                        if p.bytes.is_empty() {
                            break;
                        }
                        std::mem::swap(&mut p.bytes, &mut spare);
                        drop(p);
                        s.room.notify_all();
                        let _ = out.write_all(&spare);
                        let _ = out.flush();
                        spare.clear();
                        if spare.capacity() > MAX_PENDING {
                            spare = Vec::new();
                        }
                    }
                }
            })?;
        Ok((
            Batched {
                shared: shared.clone(),
            },
            FlushGuard {
                shared,
                thread: Some(thread),
            },
        ))
    }

    fn push(&self, line: &[u8]) {
        let mut p = lock(&self.shared.pending);
        while p.bytes.len() >= MAX_PENDING && !p.closed {
            p = self.shared.room.wait(p).unwrap_or_else(|e| e.into_inner());
        }
        let wake = p.parked && p.bytes.is_empty();
        p.bytes.extend_from_slice(line);
        #[cfg(test)]
        {
            p.wakes += usize::from(wake);
        }
        drop(p);
        if wake {
            self.shared.wake.notify_one();
        }
    }
}

impl std::io::Write for &Batched {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.push(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Batched {
    type Writer = &'a Batched;

    fn make_writer(&'a self) -> Self::Writer {
        self
    }
}

/// A layer that writes each event as one JSON line to `W`.
pub(crate) struct JsonLines<W> {
    make: W,
}

impl<W> JsonLines<W> {
    /// Lines go to the writers `make` gives (one `write_all` per line).
    pub(crate) fn new(make: W) -> Self {
        JsonLines { make }
    }
}

thread_local! {
    /// The line being built, reused across events on this thread.
    static LINE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl<S, W> Layer<S> for JsonLines<W>
where
    S: Subscriber,
    W: for<'a> MakeWriter<'a> + 'static,
{
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        LINE.with(|cell| {
            // A re-entrant event (one logged while formatting) gets a
            // buffer of its own instead of a panic.
            let mut own = Vec::new();
            let mut borrowed = cell.try_borrow_mut();
            let buf = match borrowed.as_mut() {
                Ok(b) => &mut **b,
                Err(_) => &mut own,
            };
            buf.clear();
            format_line(buf, SystemTime::now(), event);
            let _ = self.make.make_writer().write_all(buf);
            // A burst of long lines should not pin a large buffer.
            if buf.capacity() > 64 * 1024 {
                *buf = Vec::new();
            }
        });
    }
}

/// One event as a JSON line (with its `\n`), stamped `now`.
fn format_line(buf: &mut Vec<u8>, now: SystemTime, event: &Event<'_>) {
    let meta = event.metadata();
    buf.extend_from_slice(b"{\"timestamp\":\"");
    push_timestamp(buf, now);
    buf.extend_from_slice(b"\",\"level\":\"");
    buf.extend_from_slice(meta.level().as_str().as_bytes());
    buf.push(b'"');
    let mut fields = Fields {
        buf,
        scratch: String::new(),
    };
    event.record(&mut fields);
    let buf = fields.buf;
    buf.extend_from_slice(b",\"target\":");
    push_str(buf, meta.target());
    buf.extend_from_slice(b"}\n");
}

/// Writes each field as `,"name":value`.
struct Fields<'b> {
    buf: &'b mut Vec<u8>,
    /// For values that only have a `Debug` or `Display` form.
    scratch: String,
}

impl Fields<'_> {
    fn key(&mut self, field: &Field) {
        self.buf.push(b',');
        let name = field.name();
        push_str(self.buf, name.strip_prefix("r#").unwrap_or(name));
        self.buf.push(b':');
    }

    fn number(&mut self, field: &Field, v: impl itoa::Integer) {
        self.key(field);
        self.buf
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
}

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.key(field);
        push_str(self.buf, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.number(field, value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.number(field, value);
    }

    fn record_u128(&mut self, field: &Field, value: u128) {
        self.number(field, value);
    }

    fn record_i128(&mut self, field: &Field, value: i128) {
        self.number(field, value);
    }

    fn record_bool(&mut self, field: &Field, value: bool) {
        self.key(field);
        self.buf
            .extend_from_slice(if value { b"true" } else { b"false" });
    }

    fn record_f64(&mut self, field: &Field, value: f64) {
        self.key(field);
        // What serde_json writes for an f64: `null` when not finite.
        let _ = serde_json::to_writer(&mut *self.buf, &value);
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.scratch.clear();
        let _ = write!(self.scratch, "{value}");
        self.key(field);
        push_str(self.buf, &self.scratch);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        // `message` arrives here as the formatted arguments; every other
        // `?value` is its Debug text, as a string (as the fmt layer did).
        self.scratch.clear();
        let _ = write!(self.scratch, "{value:?}");
        self.key(field);
        push_str(self.buf, &self.scratch);
    }
}

/// `s` as a JSON string, escaped as serde_json escapes it. Most values
/// (ids, model names, reasons) need no escape, and are copied as they are.
fn push_str(buf: &mut Vec<u8>, s: &str) {
    if s.bytes().any(|b| b < 0x20 || b == b'"' || b == b'\\') {
        let _ = serde_json::to_writer(&mut *buf, s);
    } else {
        buf.reserve(s.len() + 2);
        buf.push(b'"');
        buf.extend_from_slice(s.as_bytes());
        buf.push(b'"');
    }
}

/// `v` in exactly `width` decimal digits (`v < 10^width`).
fn push_digits(buf: &mut Vec<u8>, mut v: u64, width: usize) {
    let start = buf.len();
    buf.resize(start + width, b'0');
    for slot in buf[start..].iter_mut().rev() {
        *slot = b'0' + (v % 10) as u8;
        v /= 10;
    }
}

/// `now` as RFC 3339 UTC with microseconds: `2026-12-01T19:09:05.381060Z`.
fn push_timestamp(buf: &mut Vec<u8>, now: SystemTime) {
    let d = now.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let t = secs % 86_400;
    // Years before 0 or after 9999 are not dates this clock gives; a
    // 4-digit field is what RFC 3339 has room for.
    push_digits(buf, y.clamp(0, 9999) as u64, 4);
    buf.push(b'-');
    push_digits(buf, u64::from(m), 2);
    buf.push(b'-');
    push_digits(buf, u64::from(day), 2);
    buf.push(b'T');
    push_digits(buf, t / 3600, 2);
    buf.push(b':');
    push_digits(buf, t / 60 % 60, 2);
    buf.push(b':');
    push_digits(buf, t % 60, 2);
    buf.push(b'.');
    push_digits(buf, u64::from(d.subsec_micros()), 6);
    buf.push(b'Z');
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;
    use tracing_subscriber::layer::SubscriberExt as _;

    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Sink {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    fn lines_of(f: impl FnOnce()) -> Vec<String> {
        let sink = Sink::default();
        let out = sink.clone();
        let layer = JsonLines::new(move || out.clone());
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        text.lines().map(str::to_string).collect()
    }

    /// Polls `f` every millisecond, for at most five seconds.
    fn eventually(mut f: impl FnMut() -> bool) -> bool {
        (0..5_000).any(|_| {
            f() || {
                std::thread::sleep(Duration::from_millis(1));
                false
            }
        })
    }

    // Workers wake the writer only when it waits for a line (never more
    // wake-ups than times it went to wait: a burst wakes it once, unless
    // the burst stalls for a whole GATHER), the thread writes by itself,
    // waits to be woken once nothing comes, and the next line wakes it and
    // is written (with the guard still held).
    #[test]
    fn the_writer_is_woken_only_after_it_went_to_sleep() {
        let sink = Sink::default();
        let (w, guard) = Batched::start(sink.clone()).unwrap();
        let shared = w.shared.clone();
        let written = |n: usize| {
            let sink = sink.clone();
            move || {
                String::from_utf8_lossy(&sink.0.lock().unwrap())
                    .lines()
                    .count()
                    == n
            }
        };
        let parked = || lock(&shared.pending).parked;
        assert!(eventually(parked), "the idle writer waits to be woken");
        for i in 0..100 {
            (&w).write_all(format!("{i}\n").as_bytes()).unwrap();
        }
        let (wakes, parks) = {
            let p = lock(&shared.pending);
            (p.wakes, p.parks)
        };
        assert!(
            wakes >= 1 && wakes <= parks,
            "{wakes} wake-ups, {parks} waits"
        );
        assert!(
            eventually(written(100)),
            "the burst is written without the guard"
        );
        assert!(eventually(parked));
        let before = lock(&shared.pending).wakes;
        (&w).write_all(b"late\n").unwrap();
        assert_eq!(lock(&shared.pending).wakes, before + 1);
        assert!(
            eventually(written(101)),
            "a line after the writer slept is written"
        );
        drop(guard);
        assert!(String::from_utf8_lossy(&sink.0.lock().unwrap()).ends_with("99\nlate\n"));
    }

    // Every line arrives whole and in each thread's order, through the
    // back-pressure (16 MiB written against a 4 MiB bound), and the guard
    // writes what is still waiting.
    #[test]
    fn batched_lines_all_arrive_in_order() {
        let sink = Sink::default();
        let (w, guard) = Batched::start(sink.clone()).unwrap();
        let pad = "x".repeat(1000);
        std::thread::scope(|s| {
            for t in 0..4 {
                let w = w.clone();
                let pad = &pad;
                s.spawn(move || {
                    for i in 0..4_000 {
                        let line = format!("{t} {i} {pad}\n");
                        (&w).write_all(line.as_bytes()).unwrap();
                    }
                });
            }
        });
        drop(guard);
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        let mut next = [0u32; 4];
        let mut n = 0;
        for line in text.lines() {
            let mut f = line.split(' ');
            let t: usize = f.next().unwrap().parse().unwrap();
            let i: u32 = f.next().unwrap().parse().unwrap();
            assert_eq!(f.next(), Some(pad.as_str()), "a torn line");
            assert_eq!(i, next[t], "thread {t} out of order");
            next[t] += 1;
            n += 1;
        }
        assert_eq!(n, 16_000);
    }

    #[test]
    fn dates_match_known_days() {
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(civil_from_days(-1), (1969, 12, 31));
        assert_eq!(civil_from_days(11_016), (2000, 2, 29));
        assert_eq!(civil_from_days(11_017), (2000, 3, 1));
        assert_eq!(civil_from_days(20_788), (2026, 12, 1));
        assert_eq!(civil_from_days(47_541), (2100, 3, 1));
        let mut b = Vec::new();
        let t = UNIX_EPOCH + Duration::from_micros(1_796_152_145_381_060);
        push_timestamp(&mut b, t);
        assert_eq!(String::from_utf8(b).unwrap(), "2026-12-01T19:09:05.381060Z");
    }

    // The fields in the order the event gives them, between `level` and
    // `target`, with the types the fmt layer's JSON gave them (R14.1:
    // the decision fields stay machine-readable).
    #[test]
    fn a_line_is_one_flat_json_object() {
        let lines = lines_of(|| {
            tracing::info!(
                target: "failover::serve",
                protocol = "openai",
                status = 200u16,
                attempts = 2usize,
                ok = true,
                delta = -3i64,
                ratio = 0.5f64,
                detail = ?Some("x"),
                "request"
            );
        });
        assert_eq!(lines.len(), 1);
        let line = &lines[0];
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        // serde_json's map is sorted, so compare the text's order too.
        assert_eq!(keys.len(), 11, "{line}");
        let rest = line.split_once("\"level\":\"INFO\",").unwrap().1;
        assert!(
            rest.starts_with(
                "\"message\":\"request\",\"protocol\":\"openai\",\"status\":200,\"attempts\":2,\
                 \"ok\":true,\"delta\":-3,\"ratio\":0.5,\"detail\":\"Some(\\\"x\\\")\",\
                 \"target\":\"failover::serve\"}"
            ),
            "{line}"
        );
        let ts = v["timestamp"].as_str().unwrap();
        assert_eq!(ts.len(), 27, "{ts}");
        assert!(ts.ends_with('Z') && ts.as_bytes()[10] == b'T', "{ts}");
    }

    #[test]
    fn strings_are_escaped_and_not_finite_numbers_are_null() {
        let lines = lines_of(|| {
            tracing::warn!(
                target: "t",
                text = "a \"quote\", a \\ and a\nnewline\u{1}",
                nan = f64::NAN,
                "über {}",
                1
            );
        });
        let v: serde_json::Value = serde_json::from_str(&lines[0]).unwrap();
        assert_eq!(v["level"], "WARN");
        assert_eq!(v["message"], "über 1");
        assert_eq!(v["text"], "a \"quote\", a \\ and a\nnewline\u{1}");
        assert!(v["nan"].is_null());
        assert_eq!(v["target"], "t");
    }
}
