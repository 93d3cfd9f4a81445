//! Reading the files an operator names: a leaf that `load`, `config`,
//! `store`, `syntax` and the CLI share, so none of them reaches into
//! another for it.
//!
//! Every file is read by [`read_regular`]: not a FIFO or a device, and not
//! past the limit of its kind (refused by its size before anything is
//! read, [`TooLarge`]). I/O errors are shown in plain words
//! ([`plain_io`]), paths with `/` separators ([`display_name`]).

use std::fmt;
use std::path::Path;

/// The UTF-8 byte-order mark, which editors on Windows put before a file.
pub const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Display name for a file on disk: the path as given, with `/` separators.
pub fn display_name(path: &Path) -> String {
    path.to_string_lossy().replace('\\', "/")
}

/// A file over the size limit of its kind, refused before it was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooLarge {
    /// Its size in bytes.
    pub size: u64,
    /// The limit of its kind in bytes.
    pub limit: u64,
}

impl fmt::Display for TooLarge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the file is {} and the limit for it is {}; is this the right file?",
            bytes_shown(self.size),
            bytes_shown(self.limit)
        )
    }
}

impl std::error::Error for TooLarge {}

/// The [`TooLarge`] inside an I/O error from [`read_regular`], if that is
/// what it is.
pub fn too_large(e: &std::io::Error) -> Option<&TooLarge> {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<TooLarge>())
}

/// Reads a file the operator named, refusing what is not a regular file (a
/// FIFO would block for ever and `/dev/zero` never ends; a symlink is
/// followed to what it names) and a file over `limit` bytes, by its size
/// before reading anything (a 1 GiB sparse file costs nothing to refuse).
/// At most `limit + 1` bytes are ever read, so a file that grows while it
/// is read is refused too.
pub fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let not_regular = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO, device, socket or directory)",
        )
    };
    // Before opening: opening a FIFO blocks until a writer comes.
    if !std::fs::metadata(path)?.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::File::open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let refuse =
        |size: u64| std::io::Error::new(std::io::ErrorKind::InvalidData, TooLarge { size, limit });
    if meta.len() > limit {
        return Err(refuse(meta.len()));
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(refuse(bytes.len() as u64));
    }
    Ok(bytes)
}

/// [`read_regular`] as text, without a leading UTF-8 byte-order mark
/// (editors on Windows write one); invalid UTF-8 is an error.
pub fn read_regular_text(path: &Path, limit: u64) -> std::io::Result<String> {
    let mut bytes = read_regular(path, limit)?;
    if bytes.starts_with(UTF8_BOM) {
        bytes.drain(..UTF8_BOM.len());
    }
    String::from_utf8(bytes)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not valid UTF-8"))
}

/// An I/O error in plain words, without Rust's `(os error 2)` suffix.
pub fn plain_io(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => {
            let s = e.to_string();
            match s.find(" (os error") {
                Some(i) => s[..i].to_string(),
                None => s,
            }
        }
    }
}

/// `4 MiB`, `1.0 GiB`, `512 bytes`.
pub fn bytes_shown(n: u64) -> String {
    const KIB: u64 = 1024;
    match n {
        n if n >= KIB * KIB * KIB => format!("{:.1} GiB", n as f64 / (KIB * KIB * KIB) as f64),
        n if n >= KIB * KIB && n % (KIB * KIB) == 0 => format!("{} MiB", n / (KIB * KIB)),
        n if n >= KIB * KIB => format!("{:.1} MiB", n as f64 / (KIB * KIB) as f64),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n if n >= KIB => format!("{:.1} KiB", n as f64 / KIB as f64),
        n => format!("{n} bytes"),
    }
}
