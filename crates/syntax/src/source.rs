//! Source files and spans: a leaf that the parser (`syntax`), the
//! diagnostics (`diag`) and everything that points into a file share.
//!
//! Every AST node carries a [`Span`]: the file, the byte range, and the
//! 1-based line and column (in characters) of its start, so a diagnostic or
//! an `--explain` line can point at it without the source at hand.

/// Index of a file in a [`SourceMap`].
#[derive(
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    serde::Serialize,
    serde::Deserialize,
)]
pub struct FileId(pub u32);

/// A location in a rules file.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct Span {
    /// The file the span is in.
    pub file: FileId,
    /// Byte offsets into the file's text.
    pub start: u32,
    /// Byte offset just past the span.
    pub end: u32,
    /// 1-based line of `start`.
    pub line: u32,
    /// 1-based column of `start`, in characters.
    pub col: u32,
}

/// Rules files larger than this are refused with a diagnostic: a ruleset
/// is written by people, and a multi-megabyte file is almost certainly a
/// mistake (a log pasted in, a binary), not 40,000 rules.
pub const MAX_FILE_BYTES: usize = 4 * 1024 * 1024;

pub use crate::fsio::UTF8_BOM;

/// One rules file's name (as shown to the operator) and text.
#[derive(Debug)]
pub struct SourceFile {
    name: String,
    text: String,
    line_starts: Vec<usize>,
    /// Byte offsets of UTF-8 continuation bytes (none in ASCII text): a
    /// column is the bytes since the line start less those among them, so
    /// finding it costs a binary search, not a walk along the line.
    continuation: Vec<usize>,
}

impl SourceFile {
    fn new(name: String, text: String) -> Self {
        let mut line_starts = vec![0];
        line_starts.extend(memchr::memchr_iter(b'\n', text.as_bytes()).map(|i| i + 1));
        let continuation = if text.is_ascii() {
            Vec::new()
        } else {
            (0..text.len())
                .filter(|&i| (0x80..0xC0).contains(&text.as_bytes()[i]))
                .collect()
        };
        SourceFile {
            name,
            text,
            line_starts,
            continuation,
        }
    }

    /// The file's name as diagnostics show it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The file's whole text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (u32, u32) {
        let offset = offset.min(self.text.len());
        let line = self.line_starts.partition_point(|&s| s <= offset) - 1;
        let start = self.line_starts[line];
        let before = |at: usize| self.continuation.partition_point(|&c| c < at);
        let col = offset - start - (before(offset) - before(start)) + 1;
        (line as u32 + 1, col as u32)
    }

    /// Byte offset where a 1-based line starts.
    pub fn line_start(&self, line: u32) -> usize {
        let idx = (line.max(1) as usize - 1).min(self.line_starts.len() - 1);
        self.line_starts[idx]
    }

    /// The text of a 1-based line, without its line break.
    pub fn line_text(&self, line: u32) -> &str {
        let start = self.line_start(line);
        let rest = &self.text[start..];
        let end = rest.find('\n').unwrap_or(rest.len());
        rest[..end].trim_end_matches('\r')
    }
}

/// Why a file's bytes cannot be parsed (diagnostic E014).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unreadable {
    /// The text is not UTF-8; `at` is the first bad byte.
    NotUtf8 {
        /// The first byte that is not UTF-8.
        at: Span,
    },
    /// The file is over [`MAX_FILE_BYTES`] and was not read.
    TooLarge {
        /// The start of the (empty) file.
        at: Span,
        /// Its size in bytes.
        size: u64,
    },
}

/// All files of one run: the embedded defaults and the operator's files.
#[derive(Debug, Default)]
pub struct SourceMap {
    files: Vec<SourceFile>,
}

impl SourceMap {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a file; its id is its index.
    pub fn add(&mut self, name: impl Into<String>, text: impl Into<String>) -> FileId {
        let id = FileId(self.files.len() as u32);
        self.files.push(SourceFile::new(name.into(), text.into()));
        id
    }

    /// A rules file of `size` bytes that was not read because it is over
    /// the 4 MiB limit: an empty file, and the problem (E014).
    pub fn add_too_large(&mut self, name: impl Into<String>, size: u64) -> (FileId, Unreadable) {
        let id = self.add(name.into(), String::new());
        let at = self.span(id, 0, 0);
        (id, Unreadable::TooLarge { at, size })
    }

    /// Adds a file from raw bytes. Text that is not UTF-8, or too large, is
    /// still added (lossily, so diagnostics can show it) and the problem is
    /// returned (an E014 diagnostic, `Diagnostic::unreadable`); the caller
    /// must not parse it.
    pub fn add_bytes(
        &mut self,
        name: impl Into<String>,
        bytes: Vec<u8>,
    ) -> (FileId, Option<Unreadable>) {
        let name = name.into();
        // A UTF-8 byte-order mark (editors on Windows write one) is not
        // part of the text: positions count from after it.
        let mut bytes = bytes;
        if bytes.starts_with(UTF8_BOM) {
            bytes.drain(..UTF8_BOM.len());
        }
        if bytes.len() > MAX_FILE_BYTES {
            let (id, u) = self.add_too_large(name, bytes.len() as u64);
            return (id, Some(u));
        }
        match String::from_utf8(bytes) {
            Ok(text) => (self.add(name, text), None),
            Err(err) => {
                let valid = err.utf8_error().valid_up_to();
                let text = String::from_utf8_lossy(err.as_bytes()).into_owned();
                // The lossy text has the same bytes up to the first bad one.
                let id = self.add(name, text);
                let at = self.span(id, valid, valid + 1);
                (id, Some(Unreadable::NotUtf8 { at }))
            }
        }
    }

    /// The file of `id` (panics on an id of another map).
    pub fn get(&self, id: FileId) -> &SourceFile {
        &self.files[id.0 as usize]
    }

    /// Every file with its id, in the order added.
    pub fn files(&self) -> impl Iterator<Item = (FileId, &SourceFile)> {
        self.files
            .iter()
            .enumerate()
            .map(|(i, f)| (FileId(i as u32), f))
    }

    /// How many files.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether there is no file.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// Builds a span over a byte range of a file.
    pub fn span(&self, file: FileId, start: usize, end: usize) -> Span {
        let (line, col) = self.get(file).line_col(start);
        Span {
            file,
            start: start as u32,
            end: end.max(start) as u32,
            line,
            col,
        }
    }

    /// `file:line:col` of a span, for one-line output (`--explain`).
    pub fn location(&self, span: Span) -> String {
        format!("{}:{}:{}", self.get(span.file).name(), span.line, span.col)
    }
}

pub use crate::fsio::display_name;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let mut map = SourceMap::new();
        let id = map.add("a.rules", "ab\n€x\n");
        let f = map.get(id);
        assert_eq!(f.line_col(0), (1, 1));
        assert_eq!(f.line_col(3), (2, 1));
        // `x` comes after the 3-byte euro sign: column 2.
        assert_eq!(f.line_col(6), (2, 2));
        assert_eq!(f.line_text(2), "€x");
    }

    /// Columns agree with counting characters at every offset of mixed
    /// text and along one long non-ASCII line (the case that used to walk
    /// from the line start on every lookup: one rule of 150,000 terms took
    /// 50 s to load).
    #[test]
    fn line_col_agrees_with_counting_characters() {
        let text = "ab €x\n余额不足 quota\n\nſK rate limit ✓\nend".to_string();
        let mut map = SourceMap::new();
        let id = map.add("m.rules", text.clone());
        let f = map.get(id);
        for (offset, _) in text.char_indices().chain([(text.len(), ' ')]) {
            let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
            let line = text[..offset].matches('\n').count() as u32 + 1;
            let col = text[line_start..offset].chars().count() as u32 + 1;
            assert_eq!(f.line_col(offset), (line, col), "at {offset}");
        }
        let long = "é".repeat(200_000);
        let id = map.add("long.rules", long.clone());
        let f = map.get(id);
        for k in (0..200_000).step_by(997) {
            assert_eq!(f.line_col(2 * k), (1, k as u32 + 1));
        }
    }

    #[test]
    fn invalid_utf8_is_reported_at_the_bad_byte() {
        let mut map = SourceMap::new();
        let (_, problem) = map.add_bytes("bad.rules", b"rule a\n  \xff when".to_vec());
        let Some(Unreadable::NotUtf8 { at }) = problem else {
            panic!("{problem:?}")
        };
        assert_eq!((at.line, at.col), (2, 3));
    }
}
