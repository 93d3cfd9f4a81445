//! Crash-safe file replacement and a cross-process lock.
//!
//! A state file is never written in place. The new bytes go to a temporary
//! file in the same directory, which is flushed to disk (`fsync`), renamed
//! over the old file (atomic on POSIX file systems), and then the directory
//! is flushed so the rename itself survives a power cut. A reader therefore
//! sees the old file or the new one, never a torn mix; a writer that dies
//! half-way leaves only a stale `.<name>.tmp-…` file, which the next writer
//! removes.
//!
//! Read-modify-write cycles from different processes are serialised by an
//! advisory `flock` on a sidecar `<name>.lock` file (never on the data file
//! itself: the rename replaces the data file's inode, so a lock on it would
//! guard a file nobody reads any more). The lock is released when the
//! [`FileLock`] is dropped, and by the kernel when a process dies.
//!
//! Worked example: two gateways record a failure on `auth-state.json` at the
//! same moment. A takes the lock, reads `errorCount: 0`, writes `1`, renames,
//! unlocks; B was blocked in `flock`, now reads `1` and writes `2`. Without
//! the lock both would read `0` and one update would be lost.
//!
//! For the crash tests, [`FaultPlan`] stops a write at a chosen point, either
//! returning an error without cleaning up (as if the process had died) or
//! aborting the process for real.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a faulty write stops (crash tests only: the hook that sets one,
/// `FileStore::with_fault`, exists in test builds only).
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WriteFault {
    /// After this many bytes of the temporary file were written.
    AfterBytes(usize),
    /// After writing everything, before `fsync` of the temporary file.
    BeforeSync,
    /// After `fsync`, before the rename.
    BeforeRename,
    /// After the rename, before the directory `fsync`.
    AfterRename,
}

/// What a fault does when reached.
#[cfg_attr(not(test), allow(dead_code))]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FaultAction {
    /// Return an error and leave everything as it is.
    Fail,
    /// `std::process::abort()`: a real crash, no destructors, no cleanup.
    Abort,
}

/// A fault to inject into every write of a store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FaultPlan {
    pub at: WriteFault,
    pub action: FaultAction,
}

impl FaultPlan {
    fn hit(&self, here: WriteFault) -> io::Result<()> {
        if self.at != here {
            return Ok(());
        }
        match self.action {
            FaultAction::Abort => std::process::abort(),
            FaultAction::Fail => Err(io::Error::other("injected write fault")),
        }
    }
}

/// Replaces `path` with `bytes` atomically, stopping at `fault` when one
/// is injected (crash tests). `mode` is the Unix permission of the new
/// file (`0o600` for secrets).
pub(crate) fn write_atomic_with(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    fault: Option<FaultPlan>,
) -> io::Result<()> {
    let dir = parent_dir(path);
    let tmp = temp_path(path);
    let result = write_then_rename(path, &tmp, dir, bytes, mode, fault);
    // An injected `Fail` simulates a crash: leave the temporary file.
    if result.is_err() && fault.is_none() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(
    path: &Path,
    tmp: &Path,
    dir: &Path,
    bytes: &[u8],
    mode: u32,
    fault: Option<FaultPlan>,
) -> io::Result<()> {
    let mut file = create_new(tmp, mode)?;
    match fault {
        Some(
            plan @ FaultPlan {
                at: WriteFault::AfterBytes(k),
                ..
            },
        ) => {
            file.write_all(&bytes[..k.min(bytes.len())])?;
            file.flush()?;
            plan.hit(WriteFault::AfterBytes(k))?;
            file.write_all(&bytes[k.min(bytes.len())..])?;
        }
        _ => file.write_all(bytes)?,
    }
    let hit = |here| fault.map_or(Ok(()), |p| p.hit(here));
    hit(WriteFault::BeforeSync)?;
    file.sync_all()?;
    drop(file);
    hit(WriteFault::BeforeRename)?;
    fs::rename(tmp, path)?;
    hit(WriteFault::AfterRename)?;
    sync_dir(dir)
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// `.<name>.tmp-<pid>-<n>` beside `path`: unique per process and call, and
/// recognisable by [`remove_stale_temps`].
fn temp_path(path: &Path) -> PathBuf {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let name = path
        .file_name()
        .map_or_else(|| "state".into(), |n| n.to_string_lossy().into_owned());
    parent_dir(path).join(format!(".{name}.tmp-{}-{n}", std::process::id()))
}

/// Removes temporary files a crashed writer left beside `path`. Call it
/// only while holding the file's lock: then no live writer owns one.
pub(crate) fn remove_stale_temps(path: &Path) {
    let Some(name) = path.file_name() else { return };
    let prefix = format!(".{}.tmp-", name.to_string_lossy());
    let Ok(entries) = fs::read_dir(parent_dir(path)) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(&prefix) {
            let _ = fs::remove_file(entry.path());
        }
    }
}

fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(mode);
    }
    #[cfg(not(unix))]
    let _ = mode;
    opts.open(path)
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    #[cfg(unix)]
    {
        File::open(dir)?.sync_all()
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// Creates `dir` and its parents (`0o700` for new directories on Unix: they
/// hold secrets).
pub(crate) fn create_private_dir(dir: &Path) -> io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        b.mode(0o700);
    }
    b.create(dir)
}

/// The sidecar lock file of a data file: `<name>.lock` beside it.
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".lock");
    parent_dir(path).join(name)
}

/// An exclusive advisory lock, held until dropped.
#[derive(Debug)]
pub(crate) struct FileLock {
    _file: File,
}

impl FileLock {
    /// Blocks until the lock on `lock_file` is ours. Each call opens its own
    /// file description, so threads of one process exclude each other too.
    pub(crate) fn acquire(lock_file: &Path) -> io::Result<FileLock> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let file = opts.open(lock_file)?;
        #[cfg(unix)]
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // Elsewhere the lock is a no-op: the atomic rename still prevents
        // torn files, but concurrent writers may lose updates.
        Ok(FileLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "failover-atomic-{name}-{}-{}",
            std::process::id(),
            SystemTimeStamp::now()
        ));
        fs::create_dir_all(&d).unwrap();
        d
    }

    struct SystemTimeStamp;
    impl SystemTimeStamp {
        fn now() -> u128 {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        }
    }

    #[test]
    fn replaces_whole_file_and_sets_mode() {
        let d = tmpdir("replace");
        let p = d.join("a.json");
        write_atomic_with(&p, b"{\"old\":true}", 0o600, None).unwrap();
        write_atomic_with(&p, b"{}", 0o600, None).unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"{}");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(
                fs::metadata(&p).unwrap().permissions().mode() & 0o777,
                0o600
            );
        }
        let leftovers: Vec<_> = fs::read_dir(&d).unwrap().flatten().collect();
        assert_eq!(leftovers.len(), 1, "no temporary files remain");
        fs::remove_dir_all(d).unwrap();
    }

    // Every interruption point leaves the old bytes or the new ones.
    #[test]
    fn interrupted_writes_leave_old_or_new() {
        let d = tmpdir("faults");
        let p = d.join("s.json");
        let old = b"{\"v\":\"old\"}".to_vec();
        let new = b"{\"v\":\"new, and longer than the old one\"}".to_vec();
        let mut faults: Vec<WriteFault> = (0..=new.len()).map(WriteFault::AfterBytes).collect();
        faults.extend([
            WriteFault::BeforeSync,
            WriteFault::BeforeRename,
            WriteFault::AfterRename,
        ]);
        for at in faults {
            write_atomic_with(&p, &old, 0o600, None).unwrap();
            let plan = FaultPlan {
                at,
                action: FaultAction::Fail,
            };
            assert!(write_atomic_with(&p, &new, 0o600, Some(plan)).is_err());
            let now = fs::read(&p).unwrap();
            let expect_new = at == WriteFault::AfterRename;
            assert_eq!(&now, if expect_new { &new } else { &old }, "fault {at:?}");
            remove_stale_temps(&p);
        }
        assert_eq!(fs::read_dir(&d).unwrap().count(), 1);
        fs::remove_dir_all(d).unwrap();
    }

    #[test]
    fn lock_path_is_a_sidecar() {
        assert_eq!(
            lock_path(Path::new("/s/auth-state.json")),
            Path::new("/s/auth-state.json.lock")
        );
    }
}
