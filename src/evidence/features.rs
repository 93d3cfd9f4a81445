//! The evidence model's features: one pass over the normalised error,
//! no allocation.
//!
//! What an error contributes (the model's documented tokenisation; a
//! change here is a new [`super::FORMAT_VERSION`]):
//!
//! - **Text** — the first [`MAX_TEXT_BYTES`] of the text the rules read
//!   (the message and what the body says, ASCII-lower-cased by the
//!   classifier), each character lower-cased again (so Cyrillic, Greek …
//!   fold too) and every ASCII digit read as `0` (request ids, token
//!   counts and timestamps then share features; other scripts' numerals are
//!   kept). A *word* is a maximal run
//!   of alphanumeric characters (`char::is_alphanumeric`: Latin, Cyrillic,
//!   CJK ideographs, kana, Hangul …); everything else separates words.
//!   Per word: the word itself (its first [`MAX_WORD_CHARS`] characters),
//!   the pair it forms with the word before it, and the character n-grams
//!   of `<word>` (with boundary marks) for n = 3 and 5 — and n = 2 when
//!   the word holds a CJK, kana or Hangul character, where one character
//!   is a morpheme and a text has no spaces. Each text feature weighs
//!   `1/√n`, n the number of text features of the error, so long and
//!   short messages are on one scale.
//! - **Fields** — one token each, weight 1: the status (`429`), its class
//!   (`4xx`; `none` without a status), the provider, the code and the type
//!   (lower-cased, first [`MAX_WORD_CHARS`] characters).
//!
//! The hash is the library's own and fixed (never a randomised hasher):
//! FNV-1a with one step per Unicode scalar value (not per byte), over the
//! feature's kind byte and its characters, then one multiplication
//! (Fibonacci hashing); the high [`super::BUCKET_BITS`] bits pick the
//! weight row. The grams that start at one character share their
//! prefix's state, so a word's grams cost one step per character and
//! size, not one per character of every gram.
//!
//! Format 3 (issue 47) changed the tokenisation for speed: the first 512
//! bytes (was 2 KiB), no 4-grams, the cheaper finaliser. Cross-validated
//! by source on the field corpus, agreement rose from 88.2% to 88.5%
//! (benches/README.md has the speed). Format 4 reads the first 256 bytes:
//! by source, rules + model 92.2% → 92.3% (decision), and `predict`'s p99
//! fell from 4.0–5.9 µs to 2.8–3.2 µs (the tail was the long texts).

/// Only the first 256 bytes of the text are read: an error says what it
/// means early (a longer text is a stack trace or an echoed request), and
/// the cost per consulted message stays bounded.
pub const MAX_TEXT_BYTES: usize = 256;
/// The value of the status token (the other field tokens: 1).
pub const STATUS_WEIGHT: f32 = 2.0;
/// Longer words (ids, base64) are read as their first 32 characters.
pub const MAX_WORD_CHARS: usize = 32;
/// Field weights are whole multiples of `1 / FIELD_STEPS`
/// ([`Kind::field_weight_steps`]).
pub(crate) const FIELD_STEPS: i32 = 2;

/// The kinds of feature, as the byte that starts their hash.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A character n-gram of a word with its boundary marks.
    Gram = b'c' as isize,
    /// A word.
    Word = b'w' as isize,
    /// Two consecutive words.
    Pair = b'b' as isize,
    /// The HTTP status.
    Status = b's' as isize,
    /// The status class (`4xx`, `none`).
    Class = b'S' as isize,
    /// The provider id.
    Provider = b'p' as isize,
    /// The error code.
    Code = b'k' as isize,
    /// The error type.
    Type = b't' as isize,
}

impl Kind {
    /// What an explanation prints before the feature's text.
    pub fn label(self) -> &'static str {
        match self {
            Kind::Gram => "text",
            Kind::Word => "word",
            Kind::Pair => "words",
            Kind::Status => "status",
            Kind::Class => "status class",
            Kind::Provider => "provider",
            Kind::Code => "code",
            Kind::Type => "type",
        }
    }

    /// Whether the feature comes from the text (weight `1/√n`).
    pub fn is_text(self) -> bool {
        matches!(self, Kind::Gram | Kind::Word | Kind::Pair)
    }

    /// The value of a field token. The status counts double: a status
    /// rule's evidence, which the model must outweigh to overrule it.
    pub fn field_weight(self) -> f32 {
        match self {
            Kind::Status => STATUS_WEIGHT,
            _ => 1.0,
        }
    }

    /// [`Kind::field_weight`] in steps of `1 / FIELD_STEPS`: the integer
    /// the model's exact sums multiply a field's row by.
    #[inline]
    pub(crate) fn field_weight_steps(self) -> i32 {
        (self.field_weight() * FIELD_STEPS as f32) as i32
    }
}

/// The inputs the model reads: what the classifier normalised.
#[derive(Clone, Copy, Debug, Default)]
pub struct Input<'a> {
    /// The text the rules read, ASCII-lower-cased.
    pub text: &'a str,
    /// The status used (explicit, from the body or from the text).
    pub status: Option<u16>,
    /// The provider id, lower-cased.
    pub provider: Option<&'a str>,
    /// The error code, lower-cased.
    pub code: Option<&'a str>,
    /// The error type, lower-cased.
    pub error_type: Option<&'a str>,
}

/// Receives every feature of an error, in a fixed order.
pub trait Sink {
    /// One feature: its kind, its characters (a pair's words are separated
    /// by a space; empty for a pair when [`Sink::reads_text`] is false)
    /// and its hash.
    fn feature(&mut self, kind: Kind, chars: &[char], hash: u32);

    /// Whether the sink reads a pair's characters (explanations do; the
    /// sums of `predict` read only hashes, and the pair's text is then
    /// not spelled out).
    fn reads_text(&self) -> bool {
        true
    }
}

const FNV_OFFSET: u32 = 0x811c_9dc5;
const FNV_PRIME: u32 = 0x0100_0193;

#[inline]
fn fnv(h: u32, c: u32) -> u32 {
    // One FNV-1a step per scalar value: a quarter of the byte-wise cost,
    // and the finaliser below mixes what one step leaves.
    (h ^ c).wrapping_mul(FNV_PRIME)
}

/// The finaliser: one multiplication by the golden ratio's 32-bit
/// fraction (Fibonacci hashing), whose high bits mix every bit of FNV's
/// state; the model's bucket is the high [`super::BUCKET_BITS`] bits.
/// (MurmurHash3's finaliser, used before, cost two multiplications and
/// three shifts per feature for no measurable gain in agreement.)
#[inline]
fn fmix(h: u32) -> u32 {
    h.wrapping_mul(0x9e37_79b1)
}

/// The hash of a feature: its kind, then its characters.
#[inline]
pub fn hash(kind: Kind, chars: &[char]) -> u32 {
    let mut h = fnv(FNV_OFFSET, kind as u32);
    for &c in chars {
        h = fnv(h, c as u32);
    }
    fmix(h)
}

fn is_cjk(c: char) -> bool {
    // CJK radicals … Hangul syllables; compatibility ideographs; the
    // supplementary ideograph planes.
    matches!(c as u32, 0x2E80..=0xD7AF | 0xF900..=0xFAFF | 0x20000..=0x3FFFF)
}

#[inline]
fn fold(c: char) -> char {
    if c.is_ascii() {
        if c.is_ascii_digit() {
            '0'
        } else {
            c.to_ascii_lowercase()
        }
    } else {
        // The first character of the lower case (one for nearly all).
        c.to_lowercase().next().unwrap_or(c)
    }
}

/// A word being read: `<`, its first [`MAX_WORD_CHARS`] characters, `>`.
struct Word {
    buf: [char; MAX_WORD_CHARS + 2],
    len: usize,
    cjk: bool,
}

impl Word {
    fn new() -> Self {
        Word {
            buf: ['<'; MAX_WORD_CHARS + 2],
            len: 1,
            cjk: false,
        }
    }
    fn chars(&self) -> &[char] {
        &self.buf[1..self.len]
    }
}

/// The features of the finished word `words[cur]`: the word, its pair
/// with `words[cur ^ 1]` (when `has_prev`) and its character grams.
#[inline]
fn emit(sink: &mut impl Sink, words: &mut [Word; 2], cur: usize, has_prev: bool, n: &mut usize) {
    let (word, prev) = match words {
        [a, b] if cur == 0 => (a, &*b),
        [a, b] => (b, &*a),
    };
    let w = word.chars();
    sink.feature(Kind::Word, w, hash(Kind::Word, w));
    *n += 1;
    if has_prev {
        // The pair's hash runs over both words without copying them; its
        // text is spelled out only for a sink that reads it.
        let p = prev.chars();
        let mut h = fnv(FNV_OFFSET, Kind::Pair as u32);
        for &c in p {
            h = fnv(h, c as u32);
        }
        h = fnv(h, ' ' as u32);
        for &c in w {
            h = fnv(h, c as u32);
        }
        if sink.reads_text() {
            let mut pair = ['\0'; 2 * MAX_WORD_CHARS + 1];
            pair[..p.len()].copy_from_slice(p);
            pair[p.len()] = ' ';
            pair[p.len() + 1..p.len() + 1 + w.len()].copy_from_slice(w);
            sink.feature(Kind::Pair, &pair[..p.len() + 1 + w.len()], fmix(h));
        } else {
            sink.feature(Kind::Pair, &[], fmix(h));
        }
        *n += 1;
    }
    word.buf[word.len] = '>';
    let marked = &word.buf[..word.len + 1];
    // The grams that start at `start` — its 2-gram (CJK words only), 3-gram
    // and 5-gram — from one running hash: the same values
    // `hash(Kind::Gram, gram)` gives. (Written out: as nested loops over
    // sizes, iterator overhead cost more than the hashing.)
    let seed = fnv(FNV_OFFSET, Kind::Gram as u32);
    let m = marked.len();
    for start in 0..m.saturating_sub(1) {
        let g = &marked[start..];
        let mut h = fnv(fnv(seed, g[0] as u32), g[1] as u32);
        if word.cjk {
            sink.feature(Kind::Gram, &g[..2], fmix(h));
            *n += 1;
        }
        if g.len() < 3 {
            break;
        }
        h = fnv(h, g[2] as u32);
        sink.feature(Kind::Gram, &g[..3], fmix(h));
        *n += 1;
        if g.len() >= 5 {
            h = fnv(fnv(h, g[3] as u32), g[4] as u32);
            sink.feature(Kind::Gram, &g[..5], fmix(h));
            *n += 1;
        }
    }
}

/// Calls `sink` for every feature of `input`; returns the number of text
/// features (the `n` of their `1/√n` weight).
pub fn visit(input: &Input, sink: &mut impl Sink) -> usize {
    let mut text = input.text;
    if text.len() > MAX_TEXT_BYTES {
        let mut end = MAX_TEXT_BYTES;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text = &text[..end];
    }
    let mut n = 0usize;
    // The word being read and the one before it (for the pair), swapped by
    // index, not by copying their buffers.
    let mut words = [Word::new(), Word::new()];
    let mut cur = 0;
    let mut has_prev = false;
    let bytes = text.as_bytes();
    let mut at = 0;
    while at < bytes.len() {
        // ASCII (most of an error's text) without decoding UTF-8 or asking
        // the Unicode tables.
        let (c, alphanumeric, ascii) = match bytes[at] {
            b if b.is_ascii() => {
                at += 1;
                (char::from(b), b.is_ascii_alphanumeric(), true)
            }
            _ => {
                let c = text[at..].chars().next().unwrap_or(' ');
                at += c.len_utf8();
                (c, c.is_alphanumeric(), false)
            }
        };
        if alphanumeric {
            let word = &mut words[cur];
            if word.len <= MAX_WORD_CHARS {
                word.buf[word.len] = fold(c);
                word.len += 1;
                word.cjk |= !ascii && is_cjk(c);
            }
        } else if words[cur].len > 1 {
            emit(sink, &mut words, cur, has_prev, &mut n);
            has_prev = true;
            cur ^= 1;
            words[cur].len = 1;
            words[cur].cjk = false;
        }
    }
    if words[cur].len > 1 {
        emit(sink, &mut words, cur, has_prev, &mut n);
    }

    match input.status {
        Some(s) => {
            let mut digits = [0u8; 5];
            let text = format_u16(s, &mut digits);
            field(sink, Kind::Status, text);
            let class = [char::from(b'0' + (s / 100 % 10) as u8), 'x', 'x'];
            sink.feature(Kind::Class, &class, hash(Kind::Class, &class));
        }
        None => field(sink, Kind::Class, "none"),
    }
    for (kind, value) in [
        (Kind::Provider, input.provider),
        (Kind::Code, input.code),
        (Kind::Type, input.error_type),
    ] {
        if let Some(v) = value.filter(|v| !v.is_empty()) {
            field(sink, kind, v);
        }
    }
    n
}

/// A field's token: its first [`MAX_WORD_CHARS`] characters, lower-cased.
fn field(sink: &mut impl Sink, kind: Kind, value: &str) {
    let mut buf = ['\0'; MAX_WORD_CHARS];
    let mut len = 0;
    for c in value.chars().take(MAX_WORD_CHARS) {
        buf[len] = c.to_lowercase().next().unwrap_or(c);
        len += 1;
    }
    sink.feature(kind, &buf[..len], hash(kind, &buf[..len]));
}

/// `s` in decimal, without allocating.
fn format_u16(s: u16, buf: &mut [u8; 5]) -> &str {
    let mut i = buf.len();
    let mut v = s;
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    std::str::from_utf8(&buf[i..]).unwrap_or("")
}

/// A feature as text, for explanations: `word "quota"`.
pub fn describe(kind: Kind, chars: &[char]) -> String {
    let text: String = chars.iter().collect();
    format!("{} {:?}", kind.label(), text)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Collect(Vec<(Kind, String)>);
    impl Sink for Collect {
        fn feature(&mut self, kind: Kind, chars: &[char], h: u32) {
            assert_eq!(h, hash(kind, chars));
            self.0.push((kind, chars.iter().collect()));
        }
    }

    fn features(input: &Input) -> (Vec<(Kind, String)>, usize) {
        let mut c = Collect(Vec::new());
        let n = visit(input, &mut c);
        (c.0, n)
    }

    #[test]
    fn words_pairs_and_grams_of_a_latin_text() {
        let (f, n) = features(&Input {
            text: "quota exceeded: 429",
            status: Some(429),
            provider: Some("openai"),
            ..Input::default()
        });
        let has = |k: Kind, t: &str| f.iter().any(|(kk, tt)| *kk == k && tt == t);
        assert!(has(Kind::Word, "quota"));
        assert!(has(Kind::Word, "000"), "digits read as 0");
        assert!(has(Kind::Pair, "quota exceeded"));
        assert!(has(Kind::Gram, "<qu"));
        assert!(has(Kind::Gram, "ta>"));
        assert!(has(Kind::Gram, "eded>"));
        assert!(!has(Kind::Gram, "<q"), "no 2-grams for Latin words");
        assert!(!has(Kind::Gram, "ota>"), "no 4-grams (format 3)");
        // "<quota>": 5 three-grams and 3 five-grams; "<exceeded>" 8 and 6;
        // "<000>": 3 and 1; three words and two pairs.
        let grams = f.iter().filter(|(k, _)| *k == Kind::Gram).count();
        assert_eq!(grams, 5 + 3 + 8 + 6 + 3 + 1);
        assert!(has(Kind::Status, "429"));
        assert!(has(Kind::Class, "4xx"));
        assert!(has(Kind::Provider, "openai"));
        assert_eq!(n, f.iter().filter(|(k, _)| k.is_text()).count());
    }

    #[test]
    fn chinese_text_without_spaces_gives_character_grams() {
        let (f, _) = features(&Input {
            text: "账户余额不足",
            ..Input::default()
        });
        let has = |k: Kind, t: &str| f.iter().any(|(kk, tt)| *kk == k && tt == t);
        assert!(has(Kind::Gram, "余额"), "{f:?}");
        assert!(has(Kind::Gram, "余额不"));
        assert!(has(Kind::Gram, "<账户"));
        assert!(has(Kind::Class, "none"));
    }

    #[test]
    fn non_ascii_letters_fold_and_long_texts_are_cut() {
        let (a, _) = features(&Input {
            text: "Ошибка",
            ..Input::default()
        });
        let (b, _) = features(&Input {
            text: "ошибка",
            ..Input::default()
        });
        assert_eq!(a, b);
        let long = "word ".repeat(10_000);
        let (_, n) = features(&Input {
            text: &long,
            ..Input::default()
        });
        // 409 whole words in 2 KiB, each with a pair and its grams.
        assert!(n < 5_000, "{n}");
    }

    #[test]
    fn the_hash_is_fixed() {
        // A changed hash silently invalidates every model: pinned.
        assert_eq!(hash(Kind::Word, &['q', 'u', 'o', 't', 'a']), 0x5561_226e);
    }
}
