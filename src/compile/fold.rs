//! ASCII case folding of regexes, so they run on the lower-cased message.
//!
//! Matching is case-insensitive for ASCII letters. The classifier already
//! has the ASCII-lower-cased message (it scanned it for atoms); running a
//! `(?i)` regex on the original text instead would throw away the regex
//! crate's fast literal prefilters, because `(?i)rate limit` has 512 case
//! variants. So a pattern is parsed case-insensitively (classes and
//! negations folded correctly), then every `A`–`Z` is removed from every
//! class — the lower-cased text never contains them — and the result is
//! printed back as a case-sensitive pattern. `[Rr][Aa][Tt][Ee]` becomes the
//! literal `rate`, which the regex engine searches with SIMD.
//!
//! Worked example: `/Rate[_ ]Limit|[^a-z]429/` parses case-insensitively
//! to `[Rr][Aa][Tt][Ee][ _][Ll]…|[^A-Za-zſK]429`; removing `A`–`Z` leaves
//! `rate[ _]limit|[^a-zſK]429`, which on `http 429: rate limit` gives the
//! same verdict as the original on `HTTP 429: Rate Limit`. An inline
//! `(?-i:…)` cannot be honoured on lower-cased text; the `c` flag can.
//!
//! Non-ASCII letters keep Unicode case folding (both cases stay in their
//! classes; the message is not lower-cased there). The `c` flag (case-
//! sensitive) skips folding and runs the pattern on the original text.

use regex_syntax::hir::{
    Capture, Class, ClassBytes, ClassBytesRange, ClassUnicode, ClassUnicodeRange, Hir, HirKind,
    Look, Repetition,
};

/// The folded, case-sensitive equivalent of a case-insensitive pattern.
pub(crate) fn ascii_fold(pattern: &str, flags: &str, nest_limit: u32) -> Result<String, String> {
    let hir = regex_syntax::ParserBuilder::new()
        .case_insensitive(true)
        .multi_line(flags.contains('m'))
        .dot_matches_new_line(flags.contains('s'))
        .ignore_whitespace(flags.contains('x'))
        .nest_limit(nest_limit)
        .build()
        .parse(pattern)
        .map_err(|e| e.to_string())?;
    Ok(strip_upper(&hir).to_string())
}

/// Word boundaries become ASCII ones. Unicode `\b` cannot run in the
/// regex crate's lazy DFA on text with any non-ASCII character: such a
/// message fell to the slowest engine (17.8 µs against a 315 ns median,
/// issue 11) and its caches allocated on the hot path. On the lower-cased
/// text of provider errors the ASCII boundary is also the better reading:
/// `模型model not found` has a boundary before `model`.
fn ascii_look(look: Look) -> Look {
    match look {
        Look::WordUnicode => Look::WordAscii,
        Look::WordUnicodeNegate => Look::WordAsciiNegate,
        Look::WordStartUnicode => Look::WordStartAscii,
        Look::WordEndUnicode => Look::WordEndAscii,
        Look::WordStartHalfUnicode => Look::WordStartHalfAscii,
        Look::WordEndHalfUnicode => Look::WordEndHalfAscii,
        other => other,
    }
}

fn strip_upper(h: &Hir) -> Hir {
    match h.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(lit) => Hir::literal(lit.0.to_ascii_lowercase()),
        HirKind::Class(Class::Unicode(c)) => {
            let mut c = c.clone();
            c.difference(&ClassUnicode::new([ClassUnicodeRange::new('A', 'Z')]));
            Hir::class(Class::Unicode(c))
        }
        HirKind::Class(Class::Bytes(c)) => {
            let mut c = c.clone();
            c.difference(&ClassBytes::new([ClassBytesRange::new(b'A', b'Z')]));
            Hir::class(Class::Bytes(c))
        }
        HirKind::Look(look) => Hir::look(ascii_look(*look)),
        HirKind::Repetition(r) => Hir::repetition(Repetition {
            min: r.min,
            max: r.max,
            greedy: r.greedy,
            sub: Box::new(strip_upper(&r.sub)),
        }),
        HirKind::Capture(c) => Hir::capture(Capture {
            index: c.index,
            name: c.name.clone(),
            sub: Box::new(strip_upper(&c.sub)),
        }),
        HirKind::Concat(parts) => Hir::concat(parts.iter().map(strip_upper).collect()),
        HirKind::Alternation(parts) => Hir::alternation(parts.iter().map(strip_upper).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use regex::Regex;

    /// The folded regex on lower-cased text agrees with the `(?i)` original
    /// on the original text.
    fn agrees(pattern: &str, inputs: &[&str]) {
        let folded = Regex::new(&ascii_fold(pattern, "", 64).unwrap()).unwrap();
        let original = regex::RegexBuilder::new(pattern)
            .case_insensitive(true)
            .build()
            .unwrap();
        for input in inputs {
            assert_eq!(
                folded.is_match(&input.to_ascii_lowercase()),
                original.is_match(input),
                "pattern {pattern:?} on {input:?} (folded: {folded})"
            );
        }
    }

    #[test]
    fn literals_become_lower_case_literals() {
        assert_eq!(ascii_fold("Rate Limit", "", 64).unwrap(), "(?:rate limit)");
    }

    #[test]
    fn folded_regexes_agree_with_case_insensitive_originals() {
        let inputs = [
            "RATE LIMIT",
            "Rate_Limit",
            "x429",
            "A429",
            "é429",
            "É429",
            "Key  LIMIT hit",
            "straße",
            "STRASSE",
        ];
        agrees(r"rate[_ ]limit", &inputs);
        agrees(r"[^a-z]429", &inputs);
        agrees(r"\bkey\s+limit\s*(exceeded|reached|hit)\b", &inputs);
        agrees(r"[A-Z]429", &inputs);
        agrees(r"é429", &inputs);
        agrees(r"\p{Lu}429", &inputs);
    }

    /// Issue 11: word boundaries are ASCII, so a message with non-ASCII
    /// text stays on the fast engines, and CJK text next to an English word
    /// is a boundary.
    #[test]
    fn word_boundaries_are_ascii() {
        let folded = ascii_fold(r"\bModel not found\b", "", 64).unwrap();
        assert!(folded.contains(r"(?-u:\b)"), "{folded}");
        let re = Regex::new(&folded).unwrap();
        assert!(re.is_match("模型model not found"));
        assert!(re.is_match("error: model not found."));
        assert!(!re.is_match("supermodel not foundation"));
        // Case-sensitive patterns are not folded and keep Unicode `\b`.
        let unicode = Regex::new(r"\bmodel").unwrap();
        assert!(!unicode.is_match("模型model"));
    }
}
