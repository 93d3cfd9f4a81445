//! `application/vnd.amazon.eventstream`: the binary framing of Bedrock's
//! `ConverseStream` answer, decoded incrementally.
//!
//! One message (all integers big-endian; smithy-rs
//! `aws-smithy-eventstream/src/frame.rs`):
//!
//! ```text
//! offset 0   u32  total_length    the whole message, these 4 bytes and the trailing CRC included
//! offset 4   u32  headers_length  bytes of the header block (0, or 2 and more)
//! offset 8   u32  prelude_crc     CRC-32 of bytes [0, 8)
//! offset 12       headers         headers_length bytes
//!                 payload         total_length - headers_length - 16 bytes
//! last 4     u32  message_crc     CRC-32 of bytes [0, total_length - 4)
//! ```
//!
//! A header is `u8 name_len`, the name (UTF-8), `u8 type`, the value: types
//! 0 and 1 are `true` and `false` (no bytes), 2–5 integers of 1, 2, 4 and 8
//! bytes, 6 bytes and 7 a string (`u16` length, then the bytes), 8 a
//! timestamp (8 bytes), 9 a UUID (16 bytes). Bedrock sends strings only:
//! `:message-type` (`event`, `exception`, `error`), `:event-type`,
//! `:exception-type`, `:error-code`, `:error-message`, `:content-type`.
//!
//! The decoder checks both CRCs of every message, refuses a message longer
//! than [`MAX_MESSAGE_LEN`] as soon as its prelude says so (a corrupt
//! length must not make it buffer gigabytes), refuses a header block that
//! does not add up, and never panics, whatever it is fed (the property
//! tests below feed it random bytes and valid streams cut at every
//! offset). After an error the stream cannot be resynchronised: every
//! later call returns the same error.
//!
//! The CRC is `crc32fast`'s, the crate smithy-rs itself uses for this
//! framing: the standard IEEE CRC-32, one small dependency, and fast on
//! the long payloads (tool-call arguments, images) a table loop would walk
//! byte by byte. The test kit's encoder computes its CRCs with its own
//! table, so the two are checked against each other.

use std::fmt;

use bytes::{Buf, Bytes, BytesMut};

/// The longest message accepted, prelude and CRC included: 16 MiB, like
/// the bound on one SSE event (Bedrock's events are tens to thousands of
/// bytes).
pub(crate) const MAX_MESSAGE_LEN: usize = 16 * 1024 * 1024;

/// Prelude (12 bytes) plus the message CRC (4): the shortest message.
const MIN_MESSAGE_LEN: usize = 16;
const PRELUDE_LEN: usize = 12;

/// One decoded message: the headers Bedrock gives meaning to, and the
/// payload (the event's JSON).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct EventStreamMessage {
    /// `:message-type`: `event`, `exception` or `error`.
    pub(crate) message_type: String,
    /// `:event-type` of an event (`contentBlockDelta`, …), `:exception-type`
    /// of an exception (`throttlingException`, …), `:error-code` of an
    /// error.
    pub(crate) event_type: Option<String>,
    /// `:error-message` (of an `error` message).
    pub(crate) error_message: Option<String>,
    /// The payload, as received.
    pub(crate) payload: Bytes,
}

/// Why a byte stream is not a valid event stream. The text names lengths
/// and checksums, never payload bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum EventStreamError {
    /// A message's prelude says it is longer than [`MAX_MESSAGE_LEN`].
    MessageTooLong { length: u32 },
    /// A message's prelude says it is shorter than its prelude and CRC.
    MessageTooShort { length: u32 },
    /// The header block is longer than the message, or 1 byte long.
    BadHeadersLength {
        headers_length: u32,
        total_length: u32,
    },
    /// The prelude's CRC does not match.
    PreludeCrc { expected: u32, computed: u32 },
    /// The message's CRC does not match.
    MessageCrc { expected: u32, computed: u32 },
    /// A header that cannot be read (cut off, unknown value type, a name
    /// or string that is not UTF-8, a known header of the wrong type).
    BadHeader(String),
    /// No `:message-type` header.
    NoMessageType,
    /// A `:message-type` other than `event`, `exception` or `error`.
    UnknownMessageType(String),
    /// The stream ended inside a message.
    // The relay needs no such check: a body that ends before Bedrock's
    // `messageStop` is a cut stream by its completion markers
    // (stream.rs), whatever bytes were left in the decoder.
    #[cfg_attr(not(test), allow(dead_code))]
    Truncated { buffered: usize },
}

impl fmt::Display for EventStreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EventStreamError::MessageTooLong { length } => write!(
                f,
                "event-stream message of {length} bytes is over the {MAX_MESSAGE_LEN}-byte limit"
            ),
            EventStreamError::MessageTooShort { length } => write!(
                f,
                "event-stream message length {length} is below the {MIN_MESSAGE_LEN}-byte minimum"
            ),
            EventStreamError::BadHeadersLength {
                headers_length,
                total_length,
            } => write!(
                f,
                "event-stream header block of {headers_length} bytes does not fit a {total_length}-byte message"
            ),
            EventStreamError::PreludeCrc { expected, computed } => write!(
                f,
                "event-stream prelude checksum mismatch (sent {expected:#010x}, computed {computed:#010x})"
            ),
            EventStreamError::MessageCrc { expected, computed } => write!(
                f,
                "event-stream message checksum mismatch (sent {expected:#010x}, computed {computed:#010x})"
            ),
            EventStreamError::BadHeader(why) => write!(f, "event-stream header: {why}"),
            EventStreamError::NoMessageType => {
                f.write_str("event-stream message has no `:message-type` header")
            }
            EventStreamError::UnknownMessageType(t) => {
                write!(f, "event-stream message type `{t}` is not event, exception or error")
            }
            EventStreamError::Truncated { buffered } => write!(
                f,
                "event stream ended inside a message ({buffered} bytes of it received)"
            ),
        }
    }
}

impl std::error::Error for EventStreamError {}

/// An incremental decoder: [`push`](Self::push) the body's chunks as they
/// come, in order; each call returns the messages they complete;
/// [`finish`](Self::finish) at the end of the body says whether it ended
/// between messages.
#[derive(Debug, Default)]
pub(crate) struct EventStreamDecoder {
    /// Bytes of the message under way (and of any after it in the last
    /// chunk).
    buf: BytesMut,
    /// The error that ended the stream: returned by every later call.
    failed: Option<EventStreamError>,
}

impl EventStreamDecoder {
    /// Bytes held for a message not yet whole.
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// A decoder at the start of a stream.
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Feeds the next bytes of the stream; returns every message they
    /// complete, in order. When a chunk completes messages and then holds
    /// an error, the messages are returned now and the error by the next
    /// call (of `push` or `finish`): nothing valid is dropped, and nothing
    /// after the error is read.
    pub(crate) fn push(
        &mut self,
        bytes: &[u8],
    ) -> Result<Vec<EventStreamMessage>, EventStreamError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.buf.extend_from_slice(bytes);
        let mut out = Vec::new();
        loop {
            match self.next_message() {
                Ok(Some(m)) => out.push(m),
                Ok(None) => return Ok(out),
                Err(e) => {
                    self.failed = Some(e.clone());
                    self.buf.clear();
                    return if out.is_empty() { Err(e) } else { Ok(out) };
                }
            }
        }
    }

    /// At the end of the body: `Ok` when it ended between messages; the
    /// stream's error, or [`EventStreamError::Truncated`] when a message
    /// was cut off.
    #[cfg_attr(not(test), allow(dead_code))] // see `Truncated`
    pub(crate) fn finish(&self) -> Result<(), EventStreamError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(EventStreamError::Truncated {
                buffered: self.buf.len(),
            })
        }
    }

    /// The next whole message of the buffer, taken out of it; `None` when
    /// the buffer holds less than one. The prelude is checked as soon as it
    /// is there, before the rest of its message is waited for.
    fn next_message(&mut self) -> Result<Option<EventStreamMessage>, EventStreamError> {
        let Some(prelude) = self.buf.get(..PRELUDE_LEN) else {
            return Ok(None);
        };
        let total_length = be_u32(&prelude[0..4]);
        let headers_length = be_u32(&prelude[4..8]);
        let prelude_crc = be_u32(&prelude[8..12]);
        let computed = crc32fast::hash(&prelude[..8]);
        if computed != prelude_crc {
            return Err(EventStreamError::PreludeCrc {
                expected: prelude_crc,
                computed,
            });
        }
        let total = total_length as usize;
        if total > MAX_MESSAGE_LEN {
            return Err(EventStreamError::MessageTooLong {
                length: total_length,
            });
        }
        if total < MIN_MESSAGE_LEN {
            return Err(EventStreamError::MessageTooShort {
                length: total_length,
            });
        }
        let hlen = headers_length as usize;
        if hlen > total - MIN_MESSAGE_LEN || hlen == 1 {
            return Err(EventStreamError::BadHeadersLength {
                headers_length,
                total_length,
            });
        }
        if self.buf.len() < total {
            return Ok(None);
        }
        let frame = self.buf.split_to(total).freeze();
        let expected = be_u32(&frame[total - 4..]);
        let computed = crc32fast::hash(&frame[..total - 4]);
        if computed != expected {
            return Err(EventStreamError::MessageCrc { expected, computed });
        }
        let headers = parse_headers(&frame[PRELUDE_LEN..PRELUDE_LEN + hlen])?;
        let payload = frame.slice(PRELUDE_LEN + hlen..total - 4);
        headers.into_message(payload).map(Some)
    }
}

fn be_u32(b: &[u8]) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[..4]);
    u32::from_be_bytes(a)
}

/// The headers Bedrock gives meaning to.
#[derive(Default)]
struct Known {
    message_type: Option<String>,
    event_type: Option<String>,
    exception_type: Option<String>,
    error_code: Option<String>,
    error_message: Option<String>,
}

impl Known {
    fn into_message(self, payload: Bytes) -> Result<EventStreamMessage, EventStreamError> {
        let message_type = self.message_type.ok_or(EventStreamError::NoMessageType)?;
        let event_type = match message_type.as_str() {
            "event" => self.event_type,
            "exception" => self.exception_type,
            "error" => self.error_code,
            _ => {
                // The value came from the upstream: show it only when it is
                // short and printable.
                let shown = if message_type.len() <= 32
                    && message_type.bytes().all(|b| b.is_ascii_graphic())
                {
                    message_type
                } else {
                    "…".into()
                };
                return Err(EventStreamError::UnknownMessageType(shown));
            }
        };
        Ok(EventStreamMessage {
            message_type,
            event_type,
            error_message: self.error_message,
            payload,
        })
    }
}

/// Walks a header block; it must end exactly at its last header.
fn parse_headers(mut block: &[u8]) -> Result<Known, EventStreamError> {
    let bad = |why: &str| EventStreamError::BadHeader(why.to_string());
    let mut known = Known::default();
    while block.has_remaining() {
        let name_len = block.get_u8() as usize;
        if block.remaining() < name_len {
            return Err(bad("a header name runs past the header block"));
        }
        let name = std::str::from_utf8(&block[..name_len])
            .map_err(|_| bad("a header name is not UTF-8"))?
            .to_string();
        block.advance(name_len);
        if !block.has_remaining() {
            return Err(bad("a header has no value type"));
        }
        let value_type = block.get_u8();
        let fixed = match value_type {
            0 | 1 => Some(0),
            2 => Some(1),
            3 => Some(2),
            4 => Some(4),
            5 | 8 => Some(8),
            9 => Some(16),
            6 | 7 => None,
            _ => return Err(bad("a header has an unknown value type")),
        };
        let value: &[u8] = match fixed {
            Some(n) => {
                if block.remaining() < n {
                    return Err(bad("a header value runs past the header block"));
                }
                &block[..n]
            }
            None => {
                if block.remaining() < 2 {
                    return Err(bad("a header value length runs past the header block"));
                }
                let len = block.get_u16() as usize;
                if block.remaining() < len {
                    return Err(bad("a header value runs past the header block"));
                }
                &block[..len]
            }
        };
        let slot = match name.as_str() {
            ":message-type" => Some(&mut known.message_type),
            ":event-type" => Some(&mut known.event_type),
            ":exception-type" => Some(&mut known.exception_type),
            ":error-code" => Some(&mut known.error_code),
            ":error-message" => Some(&mut known.error_message),
            _ => None,
        };
        if let Some(slot) = slot {
            if value_type != 7 {
                return Err(EventStreamError::BadHeader(format!(
                    "header `{name}` is not a string"
                )));
            }
            let text = std::str::from_utf8(value).map_err(|_| {
                EventStreamError::BadHeader(format!("header `{name}` is not UTF-8"))
            })?;
            *slot = Some(text.to_string());
        }
        let n = value.len();
        block.advance(n);
    }
    Ok(known)
}

#[cfg(test)]
mod tests {
    use super::*;
    use failover_testkit::aws::{encode_event, encode_exception, encode_message};
    use proptest::prelude::*;

    /// A `contentBlockDelta` frame built byte by byte by Python's `struct`
    /// and `zlib.crc32` (the layout of protocols notes §3.5), independently
    /// of this crate and of the test kit.
    const GOLDEN: &str = "0000009700000057f30be03e0d3a6d6573736167652d747970650700056576656e740b3a6576656e742d74797065070011636f6e74656e74426c6f636b44656c74610d3a636f6e74656e742d747970650700106170706c69636174696f6e2f6a736f6e7b22636f6e74656e74426c6f636b496e646578223a302c2264656c7461223a7b2274657874223a2268656c6c6f227d7d2aa9efe2";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn one(bytes: &[u8]) -> EventStreamMessage {
        let mut d = EventStreamDecoder::new();
        let mut got = d.push(bytes).unwrap();
        d.finish().unwrap();
        assert_eq!(got.len(), 1);
        got.remove(0)
    }

    #[test]
    fn decodes_the_golden_frame() {
        let m = one(&unhex(GOLDEN));
        assert_eq!(m.message_type, "event");
        assert_eq!(m.event_type.as_deref(), Some("contentBlockDelta"));
        assert_eq!(m.error_message, None);
        assert_eq!(
            &m.payload[..],
            br#"{"contentBlockIndex":0,"delta":{"text":"hello"}}"#
        );
        // The test kit writes the same bytes.
        assert_eq!(
            encode_event(
                "contentBlockDelta",
                br#"{"contentBlockIndex":0,"delta":{"text":"hello"}}"#
            ),
            unhex(GOLDEN)
        );
    }

    #[test]
    fn exceptions_and_errors() {
        let m = one(&encode_exception(
            "throttlingException",
            br#"{"message":"Too many requests, please wait before trying again."}"#,
        ));
        assert_eq!(m.message_type, "exception");
        assert_eq!(m.event_type.as_deref(), Some("throttlingException"));
        let m = one(&encode_message(
            &[
                (":message-type", "error"),
                (":error-code", "InternalFailure"),
                (":error-message", "boom"),
            ],
            b"",
        ));
        assert_eq!(m.message_type, "error");
        assert_eq!(m.event_type.as_deref(), Some("InternalFailure"));
        assert_eq!(m.error_message.as_deref(), Some("boom"));
        assert!(m.payload.is_empty());
    }

    // smithy-rs's own test frames (aws-smithy-eventstream 0.61.6
    // `test_data/`, as hex). They carry no `:message-type` (they test the
    // framing alone), so a valid one reads to `NoMessageType`: both CRCs
    // and every header, of every type, passed.
    #[test]
    fn smithy_test_frames() {
        const ALL_HEADERS: &str = "000000960000007a8bb495fb0474727565000566616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d6520627974657303737472070008736f6d65207374720474696d6508000000012a05f200047575696409b79bc914de214e13b8b2bc47e85b7f0b736f6d65207061796c6f616401a05860";
        const EMPTY_PAYLOAD: &str =
            "0000001f0000000f172dc2ab0b736f6d652d6865616465720301f4933c5cad";
        const NO_HEADERS: &str =
            "0000002400000000516356ad616e6f746865722074657374207061796c6f61648df80e65";
        for valid in [ALL_HEADERS, EMPTY_PAYLOAD, NO_HEADERS] {
            assert_eq!(err(&unhex(valid)), EventStreamError::NoMessageType);
        }
        assert_eq!(
            err(&unhex("000000960000007adeadbeef0474727565000566616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d6520627974657303737472070008736f6d65207374720474696d6508000000012a05f200047575696409b79bc914de214e13b8b2bc47e85b7f0b736f6d65207061796c6f616401a05860")),
            EventStreamError::PreludeCrc { expected: 0xdead_beef, computed: 0x8bb4_95fb }
        );
        assert_eq!(
            err(&unhex("000000960000007a8bb495fb0474727565000566616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d6520627974657303737472070008736f6d65207374720474696d6508000000012a05f200047575696409b79bc914de214e13b8b2bc47e85b7f0b736f6d65207061796c6f6164deadbeef")),
            EventStreamError::MessageCrc { expected: 0xdead_beef, computed: 0x01a0_5860 }
        );
        assert!(matches!(
            err(&unhex("000000590000004d584c4ffe0474727565000566616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d652062797465730373747207ff")),
            EventStreamError::BadHeadersLength { headers_length: 77, total_length: 89 }
        ));
        // Edited headers (their message CRCs were not redone): refused.
        for bad in [
            "000000960000007a8bb495fb0474727565000566616c736501ff6279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d6520627974657303737472070008736f6d65207374720474696d6508000000012a05f200047575696409b79bc914de214e13b8b2bc47e85b7f0b736f6d65207061796c6f616401a05860",
            "0000005d0000004dadcce93e0474727565006605616c736501046279746502320573685d0ba43b740005627974657306000a736f6d65206279746573037374720705616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e670500005d0ba43b74000562797465730600ff00000000",
            "0000005d0000004dadcce93e0474727565000566616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d652062797465730373747207ff00000000",
            "000000960000007a8bb495fb0474727565000566616c736501046279746502320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d652062797465730373747207ffff736f6d65207374720474696d6508000000012a05f200047575696409b79bc914de214e13b8b2bc47e85b7f0b736f6d65207061796c6f616401a05860",
            "000000960000007a8bb495fb0474727565000566616c736501046279746560320573686f7274034e2003696e74040007a120046c6f6e67050000000ba43b740005627974657306000a736f6d6520627974657303737472070008736f6d65207374720474696d6508000000012a05f200047575696409b79bc914de214e13b8b2bc47e85b7f0b736f6d65207061796c6f616401a05860",
        ] {
            let e = err(&unhex(bad));
            assert!(
                matches!(e, EventStreamError::MessageCrc { .. } | EventStreamError::BadHeader(_)),
                "{e}"
            );
        }
    }

    // Headers of every value type are walked past; the known ones are read.
    #[test]
    fn headers_of_every_type_are_skipped() {
        let mut block = Vec::new();
        let mut put = |name: &str, ty: u8, value: &[u8]| {
            block.push(name.len() as u8);
            block.extend_from_slice(name.as_bytes());
            block.push(ty);
            block.extend_from_slice(value);
        };
        put("t", 0, &[]);
        put("f", 1, &[]);
        put("byte", 2, &[0xff]);
        put("short", 3, &[0, 1]);
        put("int", 4, &[0, 0, 0, 1]);
        put("long", 5, &[0; 8]);
        put("bytes", 6, &[0, 2, 0xde, 0xad]);
        put(":message-type", 7, b"\x00\x05event");
        put("time", 8, &[0; 8]);
        put("uuid", 9, &[7; 16]);
        put(":event-type", 7, b"\x00\x0cmessageStart");
        let frame = frame_with_block(&block, b"{}");
        let m = one(&frame);
        assert_eq!(m.event_type.as_deref(), Some("messageStart"));
        assert_eq!(&m.payload[..], b"{}");
    }

    /// A frame around a raw header block, with correct CRCs.
    fn frame_with_block(block: &[u8], payload: &[u8]) -> Vec<u8> {
        let total = (16 + block.len() + payload.len()) as u32;
        let mut f = Vec::new();
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&(block.len() as u32).to_be_bytes());
        let c = crc32fast::hash(&f);
        f.extend_from_slice(&c.to_be_bytes());
        f.extend_from_slice(block);
        f.extend_from_slice(payload);
        let c = crc32fast::hash(&f);
        f.extend_from_slice(&c.to_be_bytes());
        f
    }

    fn err(bytes: &[u8]) -> EventStreamError {
        let mut d = EventStreamDecoder::new();
        match d.push(bytes) {
            Err(e) => {
                // Every later call repeats it.
                assert_eq!(d.push(b"more").unwrap_err(), e);
                assert_eq!(d.finish().unwrap_err(), e);
                e
            }
            Ok(m) => match d.finish() {
                Err(e) => e,
                Ok(()) => panic!("decoded {m:?}"),
            },
        }
    }

    #[test]
    fn corruption_is_refused() {
        let good = encode_event("messageStart", br#"{"role":"assistant"}"#);
        // A flipped bit anywhere fails a CRC (or the prelude's sanity).
        let mut prelude = good.clone();
        prelude[3] ^= 1;
        assert!(matches!(err(&prelude), EventStreamError::PreludeCrc { .. }));
        let mut body = good.clone();
        let n = body.len();
        body[n - 6] ^= 0x20;
        assert!(matches!(err(&body), EventStreamError::MessageCrc { .. }));
        let mut crc = good.clone();
        crc[n - 1] ^= 1;
        assert!(matches!(err(&crc), EventStreamError::MessageCrc { .. }));

        // A length over the bound is refused from the prelude alone.
        let huge = prelude_only(MAX_MESSAGE_LEN as u32 + 1, 0);
        assert_eq!(
            err(&huge),
            EventStreamError::MessageTooLong {
                length: MAX_MESSAGE_LEN as u32 + 1
            }
        );
        assert_eq!(
            err(&prelude_only(u32::MAX, 0)),
            EventStreamError::MessageTooLong { length: u32::MAX }
        );
        assert_eq!(
            err(&prelude_only(15, 0)),
            EventStreamError::MessageTooShort { length: 15 }
        );
        // A header block that claims more than the message holds.
        assert!(matches!(
            err(&prelude_only(40, 25)),
            EventStreamError::BadHeadersLength { .. }
        ));
        assert!(matches!(
            err(&prelude_only(40, 1)),
            EventStreamError::BadHeadersLength { .. }
        ));

        // Header blocks that lie inside a message with good CRCs.
        let cases: &[(&[u8], &str)] = &[
            (b"\x0a:message", "name runs past"),
            (b"\x01x", "no value type"),
            (b"\x01x\x0a", "unknown value type"),
            (b"\x01x\x07\x00", "length runs past"),
            (b"\x01x\x07\x00\x09abc", "value runs past"),
            (b"\x01x\x05\x00\x00", "value runs past"),
            (b"\x02\xff\xfe\x00", "name is not UTF-8"),
            (b"\x0d:message-type\x04\x00\x00\x00\x01", "is not a string"),
            (b"\x0d:message-type\x07\x00\x02\xff\xfe", "is not UTF-8"),
        ];
        for (block, why) in cases {
            let e = err(&frame_with_block(block, b"{}"));
            let text = e.to_string();
            assert!(
                matches!(e, EventStreamError::BadHeader(_)) && text.contains(why),
                "{block:?}: {text}"
            );
        }
        assert_eq!(
            err(&frame_with_block(b"", b"{}")),
            EventStreamError::NoMessageType
        );
        assert_eq!(
            err(&encode_message(&[(":message-type", "gossip")], b"")),
            EventStreamError::UnknownMessageType("gossip".into())
        );
        assert_eq!(
            err(&encode_message(&[(":message-type", "x\ny")], b"")),
            EventStreamError::UnknownMessageType("…".into())
        );
        // Cut off: the bytes so far are no error until the end.
        let mut d = EventStreamDecoder::new();
        assert!(d.push(&good[..good.len() - 1]).unwrap().is_empty());
        assert_eq!(
            d.finish().unwrap_err(),
            EventStreamError::Truncated {
                buffered: good.len() - 1
            }
        );
    }

    fn prelude_only(total: u32, headers: u32) -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&total.to_be_bytes());
        f.extend_from_slice(&headers.to_be_bytes());
        let c = crc32fast::hash(&f);
        f.extend_from_slice(&c.to_be_bytes());
        f
    }

    #[test]
    fn messages_before_an_error_are_kept() {
        let mut bytes = encode_event("messageStart", br#"{"role":"assistant"}"#);
        bytes.extend_from_slice(&prelude_only(u32::MAX, 0));
        let mut d = EventStreamDecoder::new();
        let got = d.push(&bytes).unwrap();
        assert_eq!(got.len(), 1);
        assert!(matches!(
            d.finish().unwrap_err(),
            EventStreamError::MessageTooLong { .. }
        ));
        assert!(d.push(b"").is_err());
    }

    #[test]
    fn errors_say_no_payload() {
        let e = EventStreamError::MessageCrc {
            expected: 1,
            computed: 2,
        };
        assert_eq!(
            e.to_string(),
            "event-stream message checksum mismatch (sent 0x00000001, computed 0x00000002)"
        );
    }

    /// The stream of protocols notes §3.4, as Bedrock sends it.
    fn stream() -> (Vec<u8>, Vec<(String, Vec<u8>)>) {
        let events: Vec<(&str, &[u8])> = vec![
            ("messageStart", br#"{"role":"assistant"}"#),
            (
                "contentBlockDelta",
                br#"{"contentBlockIndex":0,"delta":{"text":"Checking. "},"p":"abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"}"#,
            ),
            ("contentBlockStop", br#"{"contentBlockIndex":0}"#),
            (
                "contentBlockStart",
                br#"{"contentBlockIndex":1,"start":{"toolUse":{"toolUseId":"tooluse_lookup","name":"lookup"}}}"#,
            ),
            (
                "contentBlockDelta",
                br#"{"contentBlockIndex":1,"delta":{"toolUse":{"input":"{\"query\":\"status\"}"}}}"#,
            ),
            ("contentBlockStop", br#"{"contentBlockIndex":1}"#),
            ("messageStop", br#"{"stopReason":"tool_use"}"#),
            ("metadata", br#"{"usage":{"inputTokens":20,"outputTokens":9,"totalTokens":29},"metrics":{"latencyMs":812}}"#),
        ];
        let mut bytes = Vec::new();
        for (t, p) in &events {
            bytes.extend(encode_event(t, p));
        }
        let want = events
            .into_iter()
            .map(|(t, p)| (t.to_string(), p.to_vec()))
            .collect();
        (bytes, want)
    }

    fn decode_in_pieces(bytes: &[u8], cuts: &[usize]) -> Vec<(String, Vec<u8>)> {
        let mut d = EventStreamDecoder::new();
        let mut got = Vec::new();
        let mut from = 0;
        for &c in cuts.iter().chain([bytes.len()].iter()) {
            let c = c.clamp(from, bytes.len());
            for m in d.push(&bytes[from..c]).unwrap() {
                assert_eq!(m.message_type, "event");
                got.push((m.event_type.unwrap(), m.payload.to_vec()));
            }
            from = c;
        }
        d.finish().unwrap();
        got
    }

    #[test]
    fn a_stream_split_at_every_offset_decodes_the_same() {
        let (bytes, want) = stream();
        assert_eq!(decode_in_pieces(&bytes, &[]), want);
        for cut in 0..=bytes.len() {
            assert_eq!(decode_in_pieces(&bytes, &[cut]), want, "cut at {cut}");
        }
        // Byte by byte.
        let all: Vec<usize> = (0..bytes.len()).collect();
        assert_eq!(decode_in_pieces(&bytes, &all), want);
    }

    fn cases() -> u32 {
        if std::env::var_os("FAILOVER_DEEP").is_some_and(|v| !v.is_empty() && v != "0") {
            2048
        } else {
            256
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

        // Random bytes, in random pieces: never a panic, and never more
        // buffered than the bound allows.
        #[test]
        fn random_bytes_never_panic(
            bytes in prop::collection::vec(any::<u8>(), 0..2048),
            cuts in prop::collection::vec(0usize..2048, 0..8),
        ) {
            let mut d = EventStreamDecoder::new();
            let mut cuts = cuts;
            cuts.sort_unstable();
            let mut from = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                let c = c.clamp(from, bytes.len());
                let _ = d.push(&bytes[from..c]);
                prop_assert!(d.buf.len() <= MAX_MESSAGE_LEN + bytes.len());
                from = c;
            }
            let _ = d.finish();
        }

        // Valid frames with random headers and payloads, concatenated and
        // cut anywhere: every message comes back whole, in order.
        #[test]
        fn valid_frames_split_anywhere_round_trip(
            frames in prop::collection::vec(
                ("[a-zA-Z]{1,40}", prop::collection::vec(any::<u8>(), 0..300), any::<bool>()),
                1..6,
            ),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut bytes = Vec::new();
            for (name, payload, exception) in &frames {
                bytes.extend(if *exception {
                    encode_exception(name, payload)
                } else {
                    encode_event(name, payload)
                });
            }
            let mut cuts: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            cuts.sort_unstable();
            let mut d = EventStreamDecoder::new();
            let mut got = Vec::new();
            let mut from = 0;
            for c in cuts.into_iter().chain([bytes.len()]) {
                got.extend(d.push(&bytes[from..c]).unwrap());
                from = c;
            }
            d.finish().unwrap();
            prop_assert_eq!(got.len(), frames.len());
            for (m, (name, payload, exception)) in got.iter().zip(&frames) {
                prop_assert_eq!(&m.message_type, if *exception { "exception" } else { "event" });
                prop_assert_eq!(m.event_type.as_deref(), Some(name.as_str()));
                prop_assert_eq!(&m.payload[..], &payload[..]);
            }
        }

        // One byte of a valid stream changed: an error or the same number
        // of messages, never a panic (a changed payload byte always fails
        // the message CRC).
        #[test]
        fn a_changed_byte_is_caught(at in any::<prop::sample::Index>(), flip in 1u8..=255) {
            let (mut bytes, want) = stream();
            let i = at.index(bytes.len());
            bytes[i] ^= flip;
            let mut d = EventStreamDecoder::new();
            let got = d.push(&bytes);
            let end = d.finish();
            // CRC-32 catches every error burst of 32 bits or fewer.
            prop_assert!(end.is_err(), "byte {} changed, yet {:?}", i, got);
            prop_assert!(got.map_or(0, |m| m.len()) < want.len());
        }
    }
}
