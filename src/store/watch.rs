//! Whether a few files under a state directory may have changed, told
//! without looking at them: one inotify instance watching every directory
//! on their paths, asked with one non-blocking `read`.
//!
//! A run reads the secrets at its start (SPEC R5.1). Where the secrets
//! file does not exist, that was three `statx` calls per gateway request
//! (the file, then the two legacy places), and one where it does; with a
//! watch it is one `read` that finds nothing, whatever exists.
//!
//! The kernel queues an event before the system call that caused it
//! returns, so a change is seen by the first look after it, as a `statx`
//! would see it: nothing here depends on a thread's timing. It is sound
//! only where every change to the files goes through this kernel's file
//! system code, so [`Watch::new`] declines (and the caller looks at the
//! files instead) on any file system not known to be local, when a
//! component on a path is a symbolic link (a link swapped elsewhere, as
//! Kubernetes does with secret volumes, changes nothing under the watched
//! directories), and when the instance cannot be had (its per-user limit).
//!
//! Hand-written over `rustix`'s inotify calls (already a dependency, for
//! `flock`): the crates that wrap inotify add a thread or an async stream,
//! where this needs one non-blocking read on the caller's thread.

/// An inotify instance over the directories on a few paths.
pub(crate) struct Watch {
    #[cfg(target_os = "linux")]
    fd: rustix::fd::OwnedFd,
    /// Per watch descriptor, the names in that directory that lie on a
    /// watched path (a file, or a directory on the way to one).
    #[cfg(target_os = "linux")]
    names: Vec<(i32, Vec<Vec<u8>>)>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch").finish_non_exhaustive()
    }
}

#[cfg(not(target_os = "linux"))]
impl Watch {
    /// No inotify here: the caller looks at the files.
    pub(crate) fn new(_root: &std::path::Path, _files: &[&std::path::Path]) -> Option<Watch> {
        None
    }

    /// Never called: there is no watch to ask.
    pub(crate) fn changed(&self) -> bool {
        true
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use super::Watch;
    use rustix::fs::inotify::{self, CreateFlags, ReadFlags, WatchFlags};
    use rustix::io::Errno;
    use std::mem::MaybeUninit;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Component, Path};

    /// File systems whose every change passes through this kernel
    /// (`statfs`'s `f_type`, linux/magic.h): ext2/3/4, XFS, Btrfs, tmpfs,
    /// overlayfs (a container's root), F2FS, ZFS. Network and FUSE file
    /// systems are left out: a change made by another machine or a
    /// user-space server raises no event here.
    const LOCAL: [u32; 7] = [
        0xEF53,      // ext2/3/4
        0x5846_5342, // XFS
        0x9123_683E, // Btrfs
        0x0102_1994, // tmpfs
        0x794C_7630, // overlayfs
        0xF2F5_2010, // F2FS
        0x2FC1_2FC1, // ZFS
    ];

    /// What counts as a change in a watched directory: an entry created,
    /// removed, renamed in or out, written, or its mode changed; the
    /// directory itself removed or renamed. Reads and opens are left out,
    /// so the store's own reads raise nothing.
    fn mask() -> WatchFlags {
        WatchFlags::CREATE
            | WatchFlags::DELETE
            | WatchFlags::MOVED_FROM
            | WatchFlags::MOVED_TO
            | WatchFlags::MODIFY
            | WatchFlags::CLOSE_WRITE
            | WatchFlags::ATTRIB
            | WatchFlags::DELETE_SELF
            | WatchFlags::MOVE_SELF
            | WatchFlags::ONLYDIR
    }

    impl Watch {
        /// A watch over every directory from `root` down to each of
        /// `files` (all under `root`), as far as they exist: a missing
        /// directory or file is watched for in the directory above it.
        /// `None` where a watch would not be sound or cannot be had (see
        /// the module's documentation).
        pub(crate) fn new(root: &Path, files: &[&Path]) -> Option<Watch> {
            let fs = rustix::fs::statfs(root).ok()?;
            // `f_type`'s width differs between targets; the magics fit in 32 bits.
            #[allow(clippy::unnecessary_cast)]
            let magic = fs.f_type as u32;
            if !LOCAL.contains(&magic) {
                return None;
            }
            let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
            let mut watch = Watch {
                fd,
                names: Vec::new(),
            };
            for file in files {
                watch.add_path(root, file.strip_prefix(root).ok()?)?;
            }
            Some(watch)
        }

        /// Watches `root` and each directory of `rel` below it, in order,
        /// each one before its entry is looked at: an entry that appears
        /// or changes between the two raises an event already.
        fn add_path(&mut self, root: &Path, rel: &Path) -> Option<()> {
            let mut dir = root.to_path_buf();
            // The root itself may be a link (`--state` given through one);
            // below it, no component may be.
            let mut flags = mask();
            for part in rel.components() {
                let Component::Normal(name) = part else {
                    return None;
                };
                let wd = inotify::add_watch(&self.fd, &dir, flags).ok()?;
                flags |= WatchFlags::DONT_FOLLOW;
                self.note(wd, name.as_bytes());
                let next = dir.join(name);
                match std::fs::symlink_metadata(&next) {
                    Ok(m) if m.file_type().is_symlink() => return None,
                    Ok(m) if m.is_dir() => dir = next,
                    // The file itself (or something else in its place,
                    // which reading will report).
                    Ok(_) => return Some(()),
                    // Watched for in `dir`.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Some(()),
                    Err(_) => return None,
                }
            }
            Some(())
        }

        fn note(&mut self, wd: i32, name: &[u8]) {
            match self.names.iter_mut().find(|(w, _)| *w == wd) {
                Some((_, names)) if names.iter().any(|n| n == name) => {}
                Some((_, names)) => names.push(name.to_vec()),
                None => self.names.push((wd, vec![name.to_vec()])),
            }
        }

        /// Whether a watched name may have changed since the watch was
        /// set or since the last call that answered `false`. Events on
        /// other names (the database's own files beside the secrets) are
        /// read and dropped. After `true` the watch is spent: the caller
        /// reads the files and sets a new one.
        pub(crate) fn changed(&self) -> bool {
            // Room for a dozen events of the longest name; the kernel never
            // splits one across reads.
            let mut buf = [MaybeUninit::<u8>::uninit(); 4096];
            let mut events = inotify::Reader::new(&self.fd, &mut buf);
            loop {
                match events.next() {
                    Ok(event) => {
                        if self.touches(event.wd(), event.events(), event.file_name()) {
                            return true;
                        }
                    }
                    Err(Errno::AGAIN) => return false,
                    Err(Errno::INTR) => {}
                    // Anything else (a buffer too small cannot happen
                    // with 4 KiB): assume the worst.
                    Err(_) => return true,
                }
            }
        }

        fn touches(&self, wd: i32, flags: ReadFlags, name: Option<&std::ffi::CStr>) -> bool {
            let gone = ReadFlags::QUEUE_OVERFLOW
                | ReadFlags::IGNORED
                | ReadFlags::DELETE_SELF
                | ReadFlags::MOVE_SELF
                | ReadFlags::UNMOUNT;
            if flags.intersects(gone) {
                return true;
            }
            let Some(name) = name else {
                // The directory itself (its mode): conservatively a change.
                return true;
            };
            let Some((_, names)) = self.names.iter().find(|(w, _)| *w == wd) else {
                return true;
            };
            let name = name.to_bytes();
            names.iter().any(|n| n == name)
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::fs;
    use std::path::{Path, PathBuf};

    fn tmp(name: &str) -> PathBuf {
        let dir = crate::store::test_dir("watch", name);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The test directory is on a file system the watch accepts (the CI
    /// machines' ext4 or tmpfs): otherwise these tests would prove nothing.
    fn watch(root: &Path, files: &[&Path]) -> Watch {
        Watch::new(root, files).expect("a watch on the test directory's file system")
    }

    // SPEC R5.1: every kind of change to a watched file is seen by the
    // first look after it; changes beside it are not.
    #[test]
    fn every_change_on_a_watched_path_is_seen_and_nothing_else() {
        let root = tmp("kinds");
        let file = root.join("agents/main/agent/auth-profiles.json");
        let legacy = root.join("credentials/oauth.json");
        fs::create_dir_all(file.parent().unwrap()).unwrap();

        // Missing file, then created.
        let w = watch(&root, &[&file, &legacy]);
        assert!(!w.changed());
        assert!(!w.changed());
        fs::write(&file, "{}").unwrap();
        assert!(w.changed(), "created");

        // Written in place, same size.
        let w = watch(&root, &[&file, &legacy]);
        fs::write(&file, "[]").unwrap();
        assert!(w.changed(), "written in place");

        // Renamed into place.
        let w = watch(&root, &[&file, &legacy]);
        let next = file.with_file_name("next.json");
        fs::write(&next, "{}").unwrap();
        assert!(!w.changed(), "another name in the same directory");
        fs::rename(&next, &file).unwrap();
        assert!(w.changed(), "renamed into place");

        // Its mode changed.
        let w = watch(&root, &[&file, &legacy]);
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&file, fs::Permissions::from_mode(0o600)).unwrap();
        assert!(w.changed(), "mode");

        // Removed.
        let w = watch(&root, &[&file, &legacy]);
        fs::remove_file(&file).unwrap();
        assert!(w.changed(), "removed");

        // A missing directory on the other path, created with its file.
        let w = watch(&root, &[&file, &legacy]);
        fs::write(root.join("state.sqlite-wal"), "x").unwrap();
        fs::create_dir_all(root.join("agents/ops")).unwrap();
        assert!(!w.changed(), "names on no watched path");
        fs::create_dir_all(legacy.parent().unwrap()).unwrap();
        assert!(w.changed(), "a directory on the path created");

        fs::remove_dir_all(root).unwrap();
    }

    // A directory on the path renamed away and another put in its place:
    // the file at the path is another file, though nothing in the watched
    // directory itself changed.
    #[test]
    fn a_directory_on_the_path_replaced_is_seen() {
        let root = tmp("dirs");
        let file = root.join("agents/main/agent/auth-profiles.json");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, "{}").unwrap();
        let w = watch(&root, &[&file]);
        assert!(!w.changed());
        fs::rename(root.join("agents/main"), root.join("old-main")).unwrap();
        assert!(w.changed());
        fs::remove_dir_all(root).unwrap();
    }

    // A symbolic link on the path below the root: declined, the caller
    // looks at the files (a link swapped elsewhere raises nothing here).
    #[test]
    fn a_link_on_the_path_is_declined() {
        let root = tmp("link");
        let real = root.join("real");
        fs::create_dir_all(&real).unwrap();
        fs::write(real.join("auth-profiles.json"), "{}").unwrap();
        let file = root.join("agent/auth-profiles.json");
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(real.join("auth-profiles.json"), &file).unwrap();
        assert!(Watch::new(&root, &[&file]).is_none(), "the file is a link");
        fs::remove_file(&file).unwrap();
        fs::remove_dir(file.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&real, root.join("agent")).unwrap();
        assert!(
            Watch::new(&root, &[&file]).is_none(),
            "a directory is a link"
        );

        // The root itself may be one.
        let via = tmp("via");
        let link = via.join("state");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let file = link.join("auth-profiles.json");
        let w = watch(&link, &[&file]);
        fs::write(real.join("auth-profiles.json"), "[]").unwrap();
        assert!(w.changed());
        fs::remove_dir_all(root).unwrap();
        fs::remove_dir_all(via).unwrap();
    }

    // More events than one read holds (the database beside the secrets
    // writes often): drained across reads, still no change.
    #[test]
    fn many_events_on_other_names_are_drained() {
        let root = tmp("many");
        let file = root.join("auth-profiles.json");
        let w = watch(&root, &[&file]);
        for i in 0..300 {
            fs::write(root.join(format!("state-{i:03}.sqlite-wal")), "x").unwrap();
        }
        assert!(!w.changed());
        assert!(!w.changed());
        fs::write(&file, "{}").unwrap();
        assert!(w.changed());
        fs::remove_dir_all(root).unwrap();
    }
}
