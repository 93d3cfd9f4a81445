//! The JSONL stream: many provider errors in, one verdict per line out,
//! in input order — what `failover classify FILE` runs, callable by an
//! embedder or a gateway.
//!
//! # The line contract (stable; DESIGN.md)
//!
//! Each input line is a JSON object with `message` (string) and/or `body`
//! (a string, or a JSON object or array such as a provider's error body,
//! handed to the engine as its text), and optional `provider`, `model`,
//! `code`, `type` (strings) and `status` (an integer 100–599, or a string
//! of those digits, as some gateways quote it). Unknown fields are
//! ignored; a byte-order mark before a line is skipped; blank lines are
//! skipped and get no output line.
//!
//! Each output line, in input order, is
//! `{"reason":…,"rule":…,"failover":…}` with `"status"` when the input had
//! one, `"truncated":true` when the message was judged on its head only
//! (the first 1 MiB), and with
//! [`Options::explain`] an `"explain"` object (atoms hit, rules verified
//! and where the winning rule is written). A bad line (not UTF-8, not
//! JSON, not an object, a field of the wrong type, longer than
//! [`Options::max_line_bytes`]) yields
//! `{"line":N,"reason":null,"rule":null,"failover":null,"error":"…"}` and
//! the stream goes on; [`Summary::bad`] counts them.
//!
//! # The pipeline
//!
//! A reader (the calling thread) cuts the input into chunks of whole lines
//! of about 256 KiB; [`Options::workers`] threads classify chunks; a writer
//! thread puts the chunks' output back in order. The queues between them
//! are bounded, so memory stays flat whatever the input size, and no line
//! longer than the limit is held. A source that pauses (a pipe fed live,
//! `tail -f log | failover classify`) is answered as it comes: a short
//! read that ends a line ends its chunk, and that chunk's output is
//! flushed.
//!
//! ```
//! use failover::stream::{self, Options};
//! use failover::Engine;
//!
//! let engine = Engine::builtin();
//! let input = "{\"status\": 429, \"message\": \"Too Many Requests\"}\n[1]\n";
//! let mut output = Vec::new();
//! let summary = stream::classify(&engine, input.as_bytes(), &mut output, &Options::default(), |_| {})?;
//! assert_eq!((summary.lines, summary.bad), (2, 1));
//! let text = String::from_utf8(output).unwrap();
//! assert!(text.starts_with("{\"reason\":\"rate_limit\""));
//! assert!(text.lines().nth(1).unwrap().contains("\"error\":\"expected a JSON object per line\""));
//! # Ok::<(), stream::StreamError>(())
//! ```

use std::io::{self, BufRead, BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::Value;

use super::{Body, Classification, Decider, Engine, ProviderError, Scratch};
use crate::compile::plan::RuleIdx;

/// One input line. Its string fields are kept as they are written and
/// read by [`text_field`]: borrowed from the line unless they hold
/// escapes. Unknown fields are ignored (forward compatibility).
#[derive(Deserialize)]
struct InLine<'a> {
    #[serde(borrow, default)]
    message: Option<&'a RawValue>,
    #[serde(borrow, default)]
    provider: Option<&'a RawValue>,
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "status_value")]
    status: Option<u16>,
    #[serde(borrow, default)]
    code: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "type")]
    error_type: Option<&'a RawValue>,
    #[serde(borrow, default)]
    body: Option<&'a RawValue>,
}

/// A worker's buffers for the string fields of a line that hold escapes
/// (a body written as a JSON string always does). Reading a field with
/// serde allocated a `String` per field per line: serde's `Cow<str>` is
/// never borrowed inside an `Option`, whatever `#[serde(borrow)]` says.
#[derive(Default)]
struct Texts {
    message: String,
    provider: String,
    model: String,
    code: String,
    error_type: String,
    body: String,
}

/// The string field `name` of a line as written (`raw`, which serde_json
/// has read as one JSON value): its text, borrowed from the line, or
/// unescaped into `buf` when it holds escapes. `null` is absent.
fn text_field<'t>(
    name: &str,
    raw: Option<&'t RawValue>,
    buf: &'t mut String,
) -> Result<Option<&'t str>, String> {
    let raw = match raw.map(RawValue::get) {
        None | Some("null") => return Ok(None),
        Some(raw) => raw,
    };
    let Some(inner) = raw.strip_prefix('"').and_then(|r| r.strip_suffix('"')) else {
        return Err(format!("`{name}` must be a string"));
    };
    if memchr::memchr(b'\\', inner.as_bytes()).is_none() {
        return Ok(Some(inner));
    }
    unescape_into(raw, buf).map_err(|e| format!("`{name}`: {e}"))?;
    Ok(Some(buf.as_str()))
}

/// The text of `raw`, a JSON string literal that serde_json has read
/// (quoted, no raw control characters, every escape one of JSON's), into
/// `out`. Written here because serde_json unescapes into a buffer of its
/// own, allocated per call. A `\u` escape of half a surrogate pair is an
/// error, as serde_json makes it.
fn unescape_into(raw: &str, out: &mut String) -> Result<(), String> {
    out.clear();
    let mut rest = raw
        .strip_prefix('"')
        .and_then(|r| r.strip_suffix('"'))
        .ok_or("not a JSON string")?;
    while let Some(at) = memchr::memchr(b'\\', rest.as_bytes()) {
        out.push_str(&rest[..at]);
        let plain = match rest.as_bytes().get(at + 1) {
            Some(b'"') => '"',
            Some(b'\\') => '\\',
            Some(b'/') => '/',
            Some(b'b') => '\u{8}',
            Some(b'f') => '\u{c}',
            Some(b'n') => '\n',
            Some(b'r') => '\r',
            Some(b't') => '\t',
            Some(b'u') => {
                // Every byte read so far is ASCII: the slices below start
                // on character boundaries.
                let (c, len) = unicode_escape(&rest[at + 2..])?;
                out.push(c);
                rest = &rest[at + 2 + len..];
                continue;
            }
            _ => return Err("invalid escape".into()),
        };
        out.push(plain);
        rest = &rest[at + 2..];
    }
    out.push_str(rest);
    Ok(())
}

/// The character of a `\u` escape whose hex digits open `s` (a surrogate
/// pair takes the next escape too), and how many bytes of `s` it took.
fn unicode_escape(s: &str) -> Result<(char, usize), String> {
    fn hex4(s: &str) -> Option<u32> {
        let digits = s.as_bytes().get(..4)?;
        digits
            .iter()
            .try_fold(0u32, |n, &d| Some(n * 16 + char::from(d).to_digit(16)?))
    }
    let hi = hex4(s).ok_or("invalid \\u escape")?;
    let code = match hi {
        0xD800..=0xDBFF => {
            let lo = s
                .get(4..)
                .and_then(|t| t.strip_prefix("\\u"))
                .and_then(hex4)
                .filter(|lo| (0xDC00..=0xDFFF).contains(lo))
                .ok_or("lone leading surrogate in hex escape")?;
            return char::from_u32(0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00))
                .map(|c| (c, 10))
                .ok_or_else(|| "invalid \\u escape".into());
        }
        0xDC00..=0xDFFF => return Err("lone trailing surrogate in hex escape".into()),
        code => code,
    };
    char::from_u32(code)
        .map(|c| (c, 4))
        .ok_or_else(|| "invalid \\u escape".into())
}

/// `status` as an integer, or a string of digits (some gateways quote it).
fn status_value<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    use serde::de::Error;
    let v: Option<Value> = Option::deserialize(d)?;
    let bad = || D::Error::custom("`status` must be an HTTP status code (an integer 100–599)");
    let status = match v {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Number(n)) => n.as_u64(),
        Some(Value::String(s)) => s.trim().parse::<u64>().ok(),
        Some(_) => None,
    };
    match status {
        Some(s @ 100..=599) => Ok(Some(s as u16)),
        _ => Err(bad()),
    }
}

#[derive(Serialize)]
struct OutLine<'a> {
    reason: &'a str,
    rule: Option<&'a str>,
    decided_by: &'static str,
    failover: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    probability: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    explain: Option<ExplainOut<'a>>,
}

impl<'a> From<&Classification<'a>> for OutLine<'a> {
    fn from(c: &Classification<'a>) -> Self {
        OutLine {
            reason: c.reason,
            rule: c.rule,
            decided_by: c.decided_by.as_str(),
            probability: line_probability(c),
            failover: c.failover,
            status: c.status,
            truncated: c.truncated,
            explain: None,
        }
    }
}

#[derive(Serialize)]
struct ExplainOut<'a> {
    atoms: Vec<String>,
    verified: Vec<VerifiedOut<'a>>,
    at: Option<String>,
}

#[derive(Serialize)]
struct VerifiedOut<'a> {
    rule: &'a str,
    holds: bool,
    at: String,
}

#[derive(Serialize)]
struct ErrorLine<'a> {
    line: u64,
    reason: Option<&'a str>,
    rule: Option<&'a str>,
    failover: Option<bool>,
    error: String,
}

/// How a stream is run. `Options::default()` is what `failover classify`
/// uses; the setters change one value each.
///
/// ```
/// use failover::stream::{self, Options};
/// let options = Options::default().workers(2).max_line_bytes(64);
/// let input = format!("{{\"message\": \"{}\"}}\n{{\"status\": 503}}\n", "x".repeat(100));
/// // Read 16 bytes at a time, so the 64-byte limit is checked exactly.
/// let reader = std::io::BufReader::with_capacity(16, input.as_bytes());
/// let mut output = Vec::new();
/// let engine = failover::Engine::builtin();
/// let summary = stream::classify(&engine, reader, &mut output, &options, |_| {})?;
/// assert_eq!((summary.lines, summary.bad), (2, 1));
/// let text = String::from_utf8(output).unwrap();
/// assert!(text.starts_with("{\"line\":1,"), "{text}");
/// # Ok::<(), stream::StreamError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    workers: usize,
    max_line_bytes: usize,
    explain: bool,
}

impl Default for Options {
    /// One worker per core (at most 8), lines up to 64 MiB, no `explain`.
    fn default() -> Self {
        Options {
            workers: std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .clamp(1, 8),
            max_line_bytes: MAX_LINE_BYTES,
            explain: false,
        }
    }
}

impl Options {
    /// Classifying threads (at least 1; 0 is taken as 1). The output order
    /// is the input order whatever the number.
    pub fn workers(mut self, workers: usize) -> Self {
        self.workers = workers.max(1);
        self
    }

    /// Lines longer than this many bytes are not read: each gets an error
    /// line (`line is longer than … ; not read`) and the stream goes on.
    /// The check runs on the line being read, so it is exact when the
    /// limit is larger than one read of the input (`failover classify`
    /// reads 64 KiB at a time); a line that arrives whole in one larger
    /// read (from a `&[u8]`, say, whose one read is all of it) may be
    /// classified even when longer. Default 64 MiB; a message is judged
    /// on its first 1 MiB anyway.
    pub fn max_line_bytes(mut self, bytes: usize) -> Self {
        self.max_line_bytes = bytes;
        self
    }

    /// Adds an `explain` object to each output line: the atoms found, the
    /// rules verified and where the winning rule is written. Much slower.
    pub fn explain(mut self, explain: bool) -> Self {
        self.explain = explain;
        self
    }
}

/// How far a stream has come: handed to the progress callback of
/// [`classify`] each time output has been written.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Input lines read so far, blank ones included (the reader may be
    /// ahead of the writer by a few chunks).
    pub lines_read: u64,
    /// Output lines written so far (one per non-blank input line).
    pub lines_written: u64,
    /// Of those, error lines (bad input lines).
    pub bad: u64,
    /// Input bytes whose output has been written (a line over the limit
    /// counts as its line break only).
    pub bytes: u64,
    /// Time since the stream started.
    pub elapsed: Duration,
}

/// The counts of a finished stream.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Summary {
    /// Output lines written: one per non-blank input line.
    pub lines: u64,
    /// Of those, error lines (bad input lines).
    pub bad: u64,
    /// Classified lines per reason, indexed by the reason id
    /// ([`Classification::reason_id`], the ruleset's order of reasons);
    /// bad lines are not counted here.
    pub per_reason: Vec<u64>,
    /// Input bytes read (a line over the limit counts as its line break
    /// only).
    pub bytes: u64,
    /// Wall time of the whole stream.
    pub elapsed: Duration,
}

/// Why a stream stopped before its end. Bad lines are not errors (they
/// get error lines); only the input or the output failing is.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// Reading the input failed; the output holds the verdicts of the
    /// lines read before.
    #[error("cannot read the input")]
    Read(#[source] io::Error),
    /// Writing (or flushing) the output failed, for example a closed pipe
    /// ([`StreamError::is_broken_pipe`]). The rest of the input was read
    /// and dropped.
    #[error("cannot write the output")]
    Write(#[source] io::Error),
}

impl StreamError {
    /// The I/O error underneath.
    pub fn io_error(&self) -> &io::Error {
        match self {
            StreamError::Read(e) | StreamError::Write(e) => e,
        }
    }

    /// Whether the output's reader went away (`failover classify | head`):
    /// usually a reason to stop quietly.
    pub fn is_broken_pipe(&self) -> bool {
        matches!(self, StreamError::Write(e) if e.kind() == io::ErrorKind::BrokenPipe)
    }
}

/// The output line of one classification, without `explain` and without
/// the line break: byte for byte what [`classify`] writes for it.
///
/// ```
/// use failover::{Engine, ProviderError};
/// let engine = Engine::builtin();
/// let c = engine.classify(&ProviderError::message("overloaded").with_status(529));
/// let line = failover::stream::verdict_line(&c);
/// assert!(line.starts_with("{\"reason\":\"overloaded\""), "{line}");
/// ```
pub fn verdict_line(c: &Classification) -> String {
    serde_json::to_string(&OutLine::from(c)).expect("a verdict serialises")
}

/// Input is cut into chunks of whole lines of about this size; workers
/// classify chunks in parallel and the writer puts them back in order.
const CHUNK_BYTES: usize = 256 << 10;
/// A JSONL line longer than this is not read (it gets an error line):
/// memory stays bounded whatever the input. A message is judged on its
/// first 1 MiB anyway.
const MAX_LINE_BYTES: usize = 64 << 20;
/// A fresh read shorter than this, ending a line, ends a chunk early: the
/// source has paused (see the reader in [`classify`]).
const PAUSED_READ: usize = 16 << 10;

/// One chunk of input lines.
struct Chunk {
    seq: u64,
    /// Line number of the chunk's first line (1-based).
    first_line: u64,
    bytes: Vec<u8>,
    /// The input paused after this chunk (a live stream): its output is
    /// flushed as soon as it is written.
    paused: bool,
    /// Lines (0-based within the chunk) longer than the limit: not read,
    /// an empty line stands in their place.
    long_lines: Vec<u64>,
}

/// Consumes input up to and including the next line break (or the end).
fn skip_line(input: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok(());
        }
        if let Some(at) = memchr::memchr(b'\n', buf) {
            input.consume(at + 1);
            return Ok(());
        }
        let n = buf.len();
        input.consume(n);
    }
}

/// One chunk's output lines and counts.
struct Classified {
    seq: u64,
    paused: bool,
    out: Vec<u8>,
    lines: u64,
    bad: u64,
    bytes: u64,
    per_reason: Vec<u64>,
}

/// Classifies a JSONL stream (the line contract above), writing one
/// output line per non-blank input line to `output`, in input order, and
/// flushing it at the end (and whenever the input pauses).
///
/// `progress` is called on the writer thread each time output has been
/// written (about every 256 KiB of input, and at each pause): cheap work
/// only, such as a counter or a throttled status line.
///
/// Bad lines are not errors: each gets an error line and is counted in
/// [`Summary::bad`]. The error is the input or the output failing; a
/// failed read is reported before a failed write.
pub fn classify<R, W, P>(
    engine: &Engine,
    mut input: R,
    output: W,
    options: &Options,
    mut progress: P,
) -> Result<Summary, StreamError>
where
    R: BufRead,
    W: Write + Send,
    P: FnMut(Progress) + Send,
{
    let workers = options.workers.max(1);
    let explain = options.explain;
    let max_line = options.max_line_bytes;
    let start = Instant::now();
    let (work_tx, work_rx) = std::sync::mpsc::sync_channel::<Chunk>(workers * 2);
    let work_rx = std::sync::Mutex::new(work_rx);
    let (done_tx, done_rx) = std::sync::mpsc::sync_channel::<Classified>(workers * 2);
    let heads = &OutputHeads::new(engine);
    let lines_read = &AtomicU64::new(0);

    std::thread::scope(|scope| {
        for _ in 0..workers {
            let done_tx = done_tx.clone();
            let work_rx = &work_rx;
            scope.spawn(move || {
                let mut scratch = Scratch::default();
                let mut texts = Texts::default();
                loop {
                    let job = work_rx.lock().map(|rx| rx.recv());
                    let Ok(Ok(chunk)) = job else { break };
                    let mut cx = LineContext {
                        engine,
                        heads,
                        scratch: &mut scratch,
                        texts: &mut texts,
                        explain,
                        max_line,
                    };
                    let done = classify_chunk(&mut cx, &chunk);
                    if done_tx.send(done).is_err() {
                        break;
                    }
                }
            });
        }
        drop(done_tx);

        let writer = scope.spawn(move || -> io::Result<Summary> {
            let mut out = BufWriter::with_capacity(1 << 16, output);
            let mut stats = Summary {
                per_reason: vec![0; engine.ruleset().reasons.len()],
                ..Default::default()
            };
            let mut pending = std::collections::BTreeMap::new();
            let mut next = 0u64;
            let mut failed: Option<io::Error> = None;
            for done in done_rx {
                pending.insert(done.seq, done);
                while let Some(done) = pending.remove(&next) {
                    next += 1;
                    stats.lines += done.lines;
                    stats.bad += done.bad;
                    stats.bytes += done.bytes;
                    for (total, n) in stats.per_reason.iter_mut().zip(&done.per_reason) {
                        *total += n;
                    }
                    // Keep draining after a write error so the pipeline ends.
                    if failed.is_none() {
                        let written = out.write_all(&done.out);
                        let flushed = match written {
                            Ok(()) if done.paused => out.flush(),
                            other => other,
                        };
                        if let Err(e) = flushed {
                            failed = Some(e);
                        }
                    }
                }
                progress(Progress {
                    lines_read: lines_read.load(Ordering::Relaxed),
                    lines_written: stats.lines,
                    bad: stats.bad,
                    bytes: stats.bytes,
                    elapsed: start.elapsed(),
                });
            }
            if let Some(e) = failed {
                return Err(e);
            }
            out.flush()?;
            Ok(stats)
        });

        // The reader: blocks of up to CHUNK_BYTES, completed to a whole
        // line. A fresh read shorter than PAUSED_READ that ends a line means
        // the source has nothing more for now (a pipe or terminal fed live:
        // `tail -f log | failover classify`): the chunk goes out at once and
        // its output is flushed, so a live stream is answered as it comes.
        // A file is read in full blocks.
        let read = (|| -> io::Result<()> {
            let mut seq = 0u64;
            let mut line_no = 1u64;
            // Whether the reader's buffer was emptied by the last consume,
            // so that the next fill is a fresh read.
            let mut drained = true;
            loop {
                let mut bytes = Vec::with_capacity(CHUNK_BYTES + (4 << 10));
                let first_line = line_no;
                let mut paused = false;
                let mut long_lines = Vec::new();
                // Where the line being read starts in `bytes`.
                let mut line_start = 0;
                loop {
                    let buf = input.fill_buf()?;
                    if buf.is_empty() {
                        break;
                    }
                    let fresh_and_short = drained && buf.len() < PAUSED_READ;
                    let n = if bytes.len() < CHUNK_BYTES {
                        buf.len().min(CHUNK_BYTES - bytes.len())
                    } else {
                        // Full: only the rest of the last line.
                        memchr::memchr(b'\n', buf).map_or(buf.len(), |at| at + 1)
                    };
                    let from = bytes.len();
                    bytes.extend_from_slice(&buf[..n]);
                    drained = n == buf.len();
                    input.consume(n);
                    if let Some(at) = memchr::memrchr(b'\n', &bytes[from..]) {
                        line_start = from + at + 1;
                    }
                    if bytes.len() - line_start > max_line {
                        // Too long to hold: skip to its end, leave an
                        // empty line in its place (numbering stays right)
                        // and say which one it was.
                        bytes.truncate(line_start);
                        skip_line(&mut input)?;
                        drained = false;
                        long_lines.push(memchr::memchr_iter(b'\n', &bytes).count() as u64);
                        bytes.push(b'\n');
                        line_start = bytes.len();
                    }
                    if bytes.last() == Some(&b'\n') {
                        if bytes.len() >= CHUNK_BYTES {
                            break;
                        }
                        if fresh_and_short {
                            paused = true;
                            break;
                        }
                    }
                }
                if bytes.is_empty() {
                    return Ok(());
                }
                line_no += memchr::memchr_iter(b'\n', &bytes).count() as u64;
                lines_read.store(line_no - 1, Ordering::Relaxed);
                let chunk = Chunk {
                    seq,
                    first_line,
                    bytes,
                    paused,
                    long_lines,
                };
                seq += 1;
                if work_tx.send(chunk).is_err() {
                    return Ok(());
                }
            }
        })();
        drop(work_tx);
        let stats = writer.join().expect("the writer thread does not panic");
        read.map_err(StreamError::Read)?;
        let mut stats = stats.map_err(StreamError::Write)?;
        stats.elapsed = start.elapsed();
        Ok(stats)
    })
}

/// What classifying a line needs: the engine, the output heads, and one
/// worker's reusable buffers.
struct LineContext<'a> {
    engine: &'a Engine,
    heads: &'a OutputHeads,
    scratch: &'a mut Scratch,
    texts: &'a mut Texts,
    explain: bool,
    /// Longer lines were not read (see [`MAX_LINE_BYTES`]).
    max_line: usize,
}

/// Each possible verdict's output line up to its optional fields,
/// serialised once: `{"reason":…,"rule":…,"failover":…` by rule index,
/// and for no rule (`unclassified`). A line is then a copy, the optional
/// `status` / `truncated`, and `}`: the same bytes serde writes.
struct OutputHeads {
    by_rule: Vec<Vec<u8>>,
    /// Per reason: a verdict of the model.
    by_model: Vec<Vec<u8>>,
    no_rule: Vec<u8>,
}

/// The model's probability as a verdict's output line gives it: only
/// when the model decided, to three decimals (its `Display` is the number
/// the line prints). The Python and Node bindings give the same number.
///
/// ```
/// use failover::{Decider, Engine, ProviderError};
/// let engine = Engine::builtin();
/// let c = engine.classify(&ProviderError::message("Rate limit reached").with_status(429));
/// assert_eq!((c.decided_by, failover::stream::line_probability(&c)), (Decider::Rule, None));
/// ```
pub fn line_probability(c: &Classification) -> Option<f32> {
    match (c.decided_by, c.probability) {
        (Decider::Model, Some(p)) => Some((p * 1000.0).round() / 1000.0),
        _ => None,
    }
}

impl OutputHeads {
    fn new(engine: &Engine) -> OutputHeads {
        let rs = engine.ruleset();
        let head = |reason: crate::compile::ReasonId, rule: Option<&str>, by: Decider| {
            let def = rs.reason(reason);
            let line = OutLine {
                reason: &def.name,
                rule,
                decided_by: by.as_str(),
                probability: None,
                failover: def.behaviour.failover,
                status: None,
                truncated: false,
                explain: None,
            };
            let mut bytes = serde_json::to_vec(&line).expect("serialising to a Vec cannot fail");
            debug_assert_eq!(bytes.last(), Some(&b'}'));
            bytes.pop();
            bytes
        };
        OutputHeads {
            by_rule: rs
                .rules
                .iter()
                .enumerate()
                .map(|(i, r)| head(r.reason, Some(&r.id), engine.decider_of(i as RuleIdx)))
                .collect(),
            by_model: (0..rs.reasons.len())
                .map(|i| head(crate::compile::ReasonId(i as _), None, Decider::Model))
                .collect(),
            no_rule: head(rs.unclassified, None, Decider::None),
        }
    }

    /// Appends the output line of `c` (without `explain`).
    fn write(&self, c: &Classification, out: &mut Vec<u8>) {
        let head = match (c.rule_index, c.decided_by) {
            (Some(i), _) => &self.by_rule[i as usize],
            (None, Decider::Model) => &self.by_model[c.reason_id.0 as usize],
            (None, _) => &self.no_rule,
        };
        out.extend_from_slice(head);
        if let Some(p) = line_probability(c) {
            let _ = write!(out, ",\"probability\":{p}");
        }
        if let Some(s) = c.status {
            let _ = write!(out, ",\"status\":{s}");
        }
        if c.truncated {
            out.extend_from_slice(b",\"truncated\":true");
        }
        out.push(b'}');
    }
}

/// Classifies every line of one chunk.
fn classify_chunk(cx: &mut LineContext, chunk: &Chunk) -> Classified {
    let engine = cx.engine;
    let mut done = Classified {
        seq: chunk.seq,
        paused: chunk.paused,
        out: Vec::with_capacity(chunk.bytes.len() / 3),
        lines: 0,
        bad: 0,
        bytes: chunk.bytes.len() as u64,
        per_reason: vec![0; engine.ruleset().reasons.len()],
    };
    let bytes = &chunk.bytes[..];
    let mut start = 0;
    for i in 0u64.. {
        if start >= bytes.len() {
            break;
        }
        let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |at| start + at + 1);
        let line = trim_line(&bytes[start..end]);
        start = end;
        let long = chunk.long_lines.contains(&i);
        if !long && line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        done.lines += 1;
        let mark = done.out.len();
        let result = if long {
            Err(match cx.max_line {
                n if n >= 1 << 20 => format!("line is longer than {} MiB; not read", n >> 20),
                n => format!("line is longer than {n} bytes; not read"),
            })
        } else {
            classify_line(cx, line, &mut done.out)
        };
        match result {
            Ok(reason) => done.per_reason[reason] += 1,
            Err(error) => {
                done.out.truncate(mark);
                done.bad += 1;
                let line = ErrorLine {
                    line: chunk.first_line + i,
                    reason: None,
                    rule: None,
                    failover: None,
                    error,
                };
                serde_json::to_writer(&mut done.out, &line).expect("writing to a Vec cannot fail");
            }
        }
        done.out.push(b'\n');
    }
    done
}

fn trim_line(buf: &[u8]) -> &[u8] {
    let mut end = buf.len();
    while end > 0 && (buf[end - 1] == b'\n' || buf[end - 1] == b'\r') {
        end -= 1;
    }
    &buf[..end]
}

/// Classifies one line, appending its output JSON to `out`; returns the
/// reason index. On an error, `out` may hold a partial line to drop.
fn classify_line(cx: &mut LineContext, line: &[u8], out: &mut Vec<u8>) -> Result<usize, String> {
    let LineContext {
        engine,
        heads,
        scratch,
        texts,
        explain,
        ..
    } = cx;
    let engine: &Engine = engine;
    // A byte-order mark may open a file written on Windows.
    let line = line.strip_prefix(crate::syntax::UTF8_BOM).unwrap_or(line);
    let text = std::str::from_utf8(line).map_err(|e| {
        format!(
            "line is not valid UTF-8 (first bad byte at column {})",
            e.valid_up_to() + 1
        )
    })?;
    if !text.trim_start().starts_with('{') {
        // Serde would read an array positionally into the fields.
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => "expected a JSON object per line".into(),
            Err(e) => describe_json_error(&e, text),
        });
    }
    let parsed: InLine = serde_json::from_str(text).map_err(|e| describe_json_error(&e, text))?;
    // A JSON body is handed over as its text: the engine parses it once
    // and keeps the text for `body` predicates. A string body is unescaped.
    let Texts {
        message,
        provider,
        model,
        code,
        error_type,
        body: body_text,
    } = texts;
    let body = match parsed.body.map(RawValue::get) {
        None | Some("null") => None,
        Some(raw) if raw.starts_with('"') => {
            text_field("body", parsed.body, body_text)?.map(Body::Text)
        }
        Some(raw) if raw.starts_with('{') || raw.starts_with('[') => Some(Body::Text(raw)),
        Some(_) => return Err("`body` must be a string or a JSON object".into()),
    };
    let err = ProviderError {
        provider: text_field("provider", parsed.provider, provider)?,
        model: text_field("model", parsed.model, model)?,
        status: parsed.status,
        code: text_field("code", parsed.code, code)?,
        error_type: text_field("type", parsed.error_type, error_type)?,
        message: text_field("message", parsed.message, message)?,
        body,
    };
    if !*explain {
        let c = engine.classify_with(&err, scratch);
        heads.write(&c, out);
        return Ok(c.reason_id.0 as usize);
    }
    let (c, ex) = engine.explain(&err);
    let rs = engine.ruleset();
    let sources = engine.sources();
    let mut line_out = OutLine::from(&c);
    line_out.explain = Some(ExplainOut {
        atoms: ex.atoms_hit,
        verified: ex
            .verified
            .iter()
            .map(|(i, holds)| {
                let r = &rs.rules[*i as usize];
                VerifiedOut {
                    rule: &r.id,
                    holds: *holds,
                    at: sources.location(r.span),
                }
            })
            .collect(),
        at: c
            .rule_index
            .map(|i| sources.location(rs.rules[i as usize].span)),
    });
    serde_json::to_writer(out, &line_out).map_err(|e| e.to_string())?;
    Ok(c.reason_id.0 as usize)
}

/// A serde error in operator words: which field, what was wrong.
fn describe_json_error(e: &serde_json::Error, text: &str) -> String {
    // The position is reported as a column of the line, not serde's way.
    let msg = crate::yaml::strip_position(&e.to_string(), Some((e.line(), e.column())));
    if e.is_syntax() || e.is_eof() {
        format!("invalid JSON at column {}: {msg}", e.column())
    } else if text.trim_start().starts_with('{') {
        let msg = msg
            .replace("u16", "an integer 0–65535")
            .replace("a borrowed string", "a string")
            .replace("invalid type: ", "wrong type: ");
        format!("{msg} (column {})", e.column())
    } else {
        "expected a JSON object per line".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Read};

    fn run_stream(input: &str) -> (Vec<Value>, Summary) {
        let engine = Engine::builtin();
        let mut out = Vec::new();
        let stats = classify(
            &engine,
            input.as_bytes(),
            &mut out,
            &Options::default(),
            |_| {},
        )
        .unwrap();
        let lines = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines, stats)
    }

    /// A source fed line by line, as `tail -f` feeds a pipe: each read
    /// blocks until the test sends the next piece.
    struct Live {
        rx: std::sync::mpsc::Receiver<Vec<u8>>,
        buf: Vec<u8>,
        at: usize,
    }

    impl Read for Live {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = {
                let buf = self.fill_buf()?;
                let n = buf.len().min(out.len());
                out[..n].copy_from_slice(&buf[..n]);
                n
            };
            self.consume(n);
            Ok(n)
        }
    }

    impl BufRead for Live {
        fn fill_buf(&mut self) -> io::Result<&[u8]> {
            if self.at == self.buf.len() {
                // A closed channel is the end of the input.
                self.buf = self.rx.recv().unwrap_or_default();
                self.at = 0;
            }
            Ok(&self.buf[self.at..])
        }
        fn consume(&mut self, n: usize) {
            self.at += n;
        }
    }

    /// Output that hands over what it holds at each flush.
    struct Flushed(Vec<u8>, std::sync::mpsc::Sender<Vec<u8>>);

    impl Write for Flushed {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            if !self.0.is_empty() {
                let _ = self.1.send(std::mem::take(&mut self.0));
            }
            Ok(())
        }
    }

    /// A live stream is answered line by line: each line's verdict is
    /// written and flushed before the next line arrives (before, the reader
    /// waited for 256 KiB or the end of the input).
    #[test]
    fn a_live_stream_is_answered_as_it_comes() {
        let engine = Engine::builtin();
        let (feed, rx) = std::sync::mpsc::channel::<Vec<u8>>();
        let (tx, answers) = std::sync::mpsc::channel::<Vec<u8>>();
        std::thread::scope(|scope| {
            let engine = &engine;
            let stream = scope.spawn(move || {
                let input = Live {
                    rx,
                    buf: Vec::new(),
                    at: 0,
                };
                classify(
                    engine,
                    input,
                    Flushed(Vec::new(), tx),
                    &Options::default(),
                    |_| {},
                )
            });
            // A failing implementation waits for more input: the timeout
            // turns that into a failure instead of a hang.
            let wait = Duration::from_secs(20);
            for (line, reason) in [
                ("{\"message\": \"rate limit exceeded\"}\n", "rate_limit"),
                ("{\"message\": \"overloaded\"}\n", "overloaded"),
            ] {
                feed.send(line.as_bytes().to_vec()).unwrap();
                let got = answers
                    .recv_timeout(wait)
                    .expect("answered before the next line");
                let v: Value = serde_json::from_slice(&got).unwrap();
                assert_eq!(v["reason"], reason);
            }
            drop(feed);
            let stats = stream.join().unwrap().unwrap();
            assert_eq!(stats.lines, 2);
        });
    }

    /// A line longer than the limit is not held in memory: it gets an
    /// error line with its number and the lines around it are classified
    /// (here with a 1 KiB limit; the command's is 64 MiB).
    #[test]
    fn overlong_lines_are_skipped_with_an_error() {
        let engine = Engine::builtin();
        let long = format!("{{\"message\": \"{}\"}}\n", "x".repeat(5_000));
        let mut input = String::from("{\"message\": \"Too many requests\", \"status\": 429}\n");
        input.push_str(&long);
        input.push_str("{\"message\": \"insufficient credits\"}\n");
        input.push_str(&long[..long.len() - 1]); // the last line, with no line break
        let mut out = Vec::new();
        // Reads of 256 bytes, as a file read in blocks smaller than the limit.
        let reader = BufReader::with_capacity(256, input.as_bytes());
        let options = Options::default().max_line_bytes(1024);
        let stats = classify(&engine, reader, &mut out, &options, |_| {}).unwrap();
        let lines: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!((stats.lines, stats.bad), (4, 2));
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["reason"], "rate_limit");
        assert_eq!(lines[1]["line"], 2);
        assert_eq!(
            lines[1]["error"],
            "line is longer than 1024 bytes; not read"
        );
        assert_eq!(lines[2]["reason"], "billing");
        assert_eq!(lines[3]["line"], 4);
    }

    /// The output does not depend on the number of workers, and the
    /// progress callback's last report is the summary's counts.
    #[test]
    fn any_number_of_workers_writes_the_same_bytes_and_reports_progress() {
        let engine = Engine::builtin();
        let mut input = String::new();
        for i in 0..3000u32 {
            match i % 7 {
                0 => input.push_str("{\"status\": \"soon\"}\n"),
                1 => input.push('\n'),
                n => input.push_str(&format!(
                    "{{\"message\": \"Too many requests {i} {}\", \"status\": 4{n}9}}\n",
                    "z".repeat(200)
                )),
            }
        }
        assert!(input.len() > 2 * CHUNK_BYTES, "several chunks");
        let mut outputs = Vec::new();
        for workers in [1, 2, 5] {
            let mut out = Vec::new();
            let mut last = Progress::default();
            let mut calls = 0;
            let options = Options::default().workers(workers);
            let summary = classify(&engine, input.as_bytes(), &mut out, &options, |p| {
                assert!(p.lines_written >= last.lines_written);
                last = p;
                calls += 1;
            })
            .unwrap();
            assert!(calls >= 3, "one report per chunk at least, got {calls}");
            assert_eq!(last.lines_written, summary.lines);
            assert_eq!(last.bad, summary.bad);
            assert_eq!(last.lines_read, 3000);
            assert_eq!(last.bytes, input.len() as u64);
            assert_eq!((summary.lines, summary.bad), (3000 - 429, 429));
            assert_eq!(
                summary.per_reason.iter().sum::<u64>(),
                summary.lines - summary.bad
            );
            outputs.push(out);
        }
        assert_eq!(outputs[0], outputs[1]);
        assert_eq!(outputs[0], outputs[2]);
    }

    struct Failing(io::ErrorKind);

    impl Read for Failing {
        fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
            Err(io::Error::new(self.0, "the disk went away"))
        }
    }

    impl Write for Failing {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::new(self.0, "nobody reads"))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// A failing input or output is a typed error that says which side
    /// failed; a closed pipe is told apart.
    #[test]
    fn read_and_write_failures_are_typed_errors() {
        let engine = Engine::builtin();
        let options = Options::default();
        let input = BufReader::new(Failing(io::ErrorKind::Other));
        let e = classify(&engine, input, Vec::new(), &options, |_| {}).unwrap_err();
        assert!(matches!(e, StreamError::Read(_)), "{e:?}");
        assert_eq!(e.to_string(), "cannot read the input");
        assert_eq!(e.io_error().to_string(), "the disk went away");
        assert!(!e.is_broken_pipe());

        let lines = "{\"message\": \"overloaded\"}\n".repeat(10);
        let output = Failing(io::ErrorKind::BrokenPipe);
        let e = classify(&engine, lines.as_bytes(), output, &options, |_| {}).unwrap_err();
        assert!(matches!(e, StreamError::Write(_)), "{e:?}");
        assert_eq!(e.to_string(), "cannot write the output");
        assert!(e.is_broken_pipe());
        let source = std::error::Error::source(&e).expect("the io error is the source");
        assert_eq!(source.to_string(), "nobody reads");
    }

    #[test]
    fn output_heads_write_what_serde_writes() {
        let engine = Engine::builtin();
        let heads = OutputHeads::new(&engine);
        let mut scratch = Scratch::default();
        let mut checked = 0;
        for (message, status) in [
            ("rate limit exceeded", Some(429)),
            ("rate limit exceeded", None),
            ("", None),
            ("something no rule knows about", Some(500)),
            ("something no rule knows about", Some(7)),
            ("HTTP 402: your weekly usage limit resets tomorrow", None),
        ] {
            let err = ProviderError {
                message: Some(message),
                status,
                ..ProviderError::default()
            };
            let c = engine.classify_with(&err, &mut scratch);
            for truncated in [false, true] {
                let c = Classification { truncated, ..c };
                let mut fast = Vec::new();
                heads.write(&c, &mut fast);
                let serde = serde_json::to_vec(&OutLine::from(&c)).unwrap();
                assert_eq!(
                    String::from_utf8(fast).unwrap(),
                    String::from_utf8(serde).unwrap()
                );
                checked += 1;
            }
        }
        assert_eq!(checked, 12);
    }

    #[test]
    fn bad_lines_get_an_error_and_the_stream_continues() {
        let (out, stats) = run_stream(concat!(
            "{\"message\": \"Too many requests\", \"status\": 429}\n",
            "{not json\n",
            "[1, 2]\n",
            "{\"status\": \"soon\"}\n",
            "\n",
            "{\"message\": \"insufficient credits\"}\n",
        ));
        assert_eq!(out.len(), 5);
        assert_eq!(out[0]["reason"], "rate_limit");
        assert!(
            out[1]["error"]
                .as_str()
                .unwrap()
                .starts_with("invalid JSON"),
            "{}",
            out[1]
        );
        assert_eq!(out[1]["line"], 2);
        assert_eq!(out[2]["error"], "expected a JSON object per line");
        assert!(
            out[3]["error"]
                .as_str()
                .unwrap()
                .contains("`status` must be an HTTP status"),
            "{}",
            out[3]
        );
        assert_eq!(out[4]["reason"], "billing");
        assert_eq!(out[4]["line"], Value::Null);
        assert_eq!((stats.lines, stats.bad), (5, 3));
        let (quoted, _) = run_stream("{\"status\": \"429\"}\n");
        assert_eq!(quoted[0]["reason"], "rate_limit");
        // A byte-order mark before the first line (a file saved on Windows).
        let (bom, stats) = run_stream("\u{feff}{\"status\": 429}\n{\"status\": 503}\n");
        assert_eq!((stats.lines, stats.bad), (2, 0));
        assert_eq!(bom[0]["reason"], "rate_limit");
        // Numbers that are no HTTP status: a per-line error, not a crash.
        let (out, stats) = run_stream(concat!(
            "{\"message\": \"x\", \"status\": 7}\n",
            "{\"message\": \"x\", \"status\": 700}\n",
            "{\"message\": \"x\", \"status\": \"99\"}\n",
            "{\"message\": \"x\", \"status\": 65536}\n",
            "{\"message\": \"Too many requests\", \"status\": 599}\n",
        ));
        assert_eq!((stats.lines, stats.bad), (5, 4));
        for (i, line) in out[..4].iter().enumerate() {
            assert_eq!(line["line"], i + 1);
            assert!(
                line["error"].as_str().unwrap().contains("100–599"),
                "{line}"
            );
        }
        assert_eq!(out[4]["status"], 599);
    }

    #[test]
    fn invalid_utf8_is_a_per_line_error() {
        let engine = Engine::builtin();
        let mut input = b"{\"message\": \"caf".to_vec();
        input.extend_from_slice(b"\xff\"}\n{\"message\": \"overloaded\"}\n");
        let mut out = Vec::new();
        let stats = classify(&engine, &input[..], &mut out, &Options::default(), |_| {}).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            text.lines().next().unwrap().contains("not valid UTF-8"),
            "{text}"
        );
        assert!(
            text.lines().nth(1).unwrap().contains("\"overloaded\""),
            "{text}"
        );
        assert_eq!(stats.bad, 1);
    }

    /// A body written as a JSON string is read exactly as serde_json reads
    /// it, and refused where serde_json refuses it (half a surrogate
    /// pair), on strings made of every kind of escape that serde_json's
    /// reading of the line lets through.
    #[test]
    fn string_bodies_unescape_as_serde_json_reads_them() {
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};
        const PIECES: &[&str] = &[
            "a",
            " ",
            "é",
            "中",
            "😀",
            "{",
            "}",
            ":",
            r#"\""#,
            r"\\",
            r"\/",
            r"\b",
            r"\f",
            r"\n",
            r"\r",
            r"\t",
            r"\u0041",
            r"\u00e9",
            r"\u4E2D",
            r"\ud83d\ude00",
            r"\uD83D",
            r"\ude00",
            r"\ud83d\u0041",
            r"\ud83d\n",
            r"\u12",
            r"\x",
            r"\uZZZZ",
            r"\u+123",
            r"\u0000",
            r"\uffff",
            "\\",
        ];
        let (read, lone) = (std::cell::Cell::new(0), std::cell::Cell::new(0));
        let mut runner = TestRunner::new(Config {
            cases: 2000,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&proptest::collection::vec(0..PIECES.len(), 0..8), |picks| {
                let raw = format!(
                    "\"{}\"",
                    picks.iter().map(|&i| PIECES[i]).collect::<String>()
                );
                // What a line's `body` can be: one JSON string as serde_json
                // read it (it may still hold half a surrogate pair).
                if serde_json::from_str::<&RawValue>(&raw).is_err() {
                    return Ok(());
                }
                let serde: Result<String, _> = serde_json::from_str(&raw);
                // A buffer that held a previous body.
                let mut out = String::from("stale");
                let ours = unescape_into(&raw, &mut out);
                prop_assert_eq!(ours.is_ok(), serde.is_ok(), "{} {:?}", raw, ours);
                match serde {
                    Ok(text) => {
                        read.set(read.get() + 1);
                        prop_assert_eq!(&out, &text, "{}", raw);
                    }
                    Err(_) => lone.set(lone.get() + 1),
                }
                Ok(())
            })
            .unwrap();
        // Both kinds were met.
        let (read, lone) = (read.get(), lone.get());
        assert!(read > 100 && lone > 100, "{read} read, {lone} refused");
        // What serde_json says, and ours, for half a pair.
        let mut out = String::new();
        assert_eq!(
            unescape_into(r#""\ud83d x""#, &mut out).unwrap_err(),
            "lone leading surrogate in hex escape"
        );
        assert!(unescape_into("not quoted", &mut out).is_err());
    }

    #[test]
    fn bodies_as_text_and_object_and_wrong_shape() {
        let (out, _) = run_stream(concat!(
            "{\"body\": {\"error\": {\"message\": \"Key limit exceeded\", \"code\": 403}}, \"provider\": \"openrouter\"}\n",
            "{\"body\": \"{\\\"type\\\":\\\"error\\\",\\\"error\\\":{\\\"type\\\":\\\"overloaded_error\\\",\\\"message\\\":\\\"Overloaded\\\"}}\"}\n",
            "{\"body\": {\"weird\": [1, {\"x\": true}]}, \"status\": 503}\n",
            "{\"body\": 5}\n",
        ));
        assert_eq!(out[0]["reason"], "billing");
        assert_eq!(out[0]["rule"], "billing.openrouter.key_limit");
        assert_eq!(out[1]["reason"], "overloaded");
        assert_eq!(out[2]["reason"], "timeout");
        assert!(out[3]["error"].as_str().unwrap().contains("`body`"));
    }

    #[test]
    fn many_chunks_come_back_in_input_order_with_their_line_numbers() {
        let mut input = String::new();
        for i in 1..=6000u32 {
            if i % 1000 == 0 {
                input.push_str("{broken\n");
            } else if i % 2 == 0 {
                input.push_str(&format!(
                    "{{\"message\": \"insufficient credits {}\"}}\n",
                    "x".repeat(150)
                ));
            } else {
                input.push_str(&format!(
                    "{{\"message\": \"Too many requests {}\"}}\n",
                    "y".repeat(150)
                ));
            }
        }
        assert!(
            input.len() > 4 * CHUNK_BYTES,
            "the input spans several chunks"
        );
        let (out, stats) = run_stream(&input);
        assert_eq!(out.len(), 6000);
        for (i, line) in out.iter().enumerate() {
            let n = i as u64 + 1;
            if n % 1000 == 0 {
                assert_eq!(line["line"], n, "error line {n}");
            } else if n % 2 == 0 {
                assert_eq!(line["reason"], "billing", "line {n}");
            } else {
                assert_eq!(line["reason"], "rate_limit", "line {n}");
            }
        }
        assert_eq!((stats.lines, stats.bad), (6000, 6));
    }

    #[test]
    fn fifty_megabyte_message_is_classified_from_its_head() {
        let big = format!(
            "{{\"message\": \"rate limit exceeded {}\"}}\n{{\"message\": \"overloaded\"}}\n",
            "x".repeat(50 << 20)
        );
        let (out, stats) = run_stream(&big);
        assert_eq!(out[0]["reason"], "rate_limit");
        assert_eq!(out[0]["truncated"], true);
        assert_eq!(out[1]["reason"], "overloaded");
        assert_eq!(stats.bad, 0);
    }
}
