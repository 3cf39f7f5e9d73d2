//! The files behind regions: which names are allowed, where they live, and reserving their pages.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::RegionError;

/// Where named regions live: the tmpfs that POSIX shared memory uses, so the pages are RAM.
pub const SHM_DIR: &str = "/dev/shm";

/// Prefix of every region file, so `ls /dev/shm` tells which files belong to the emulator and a
/// region name can never collide with another program's shared memory.
pub const FILE_PREFIX: &str = "roce-";

/// Longest region name accepted; far below NAME_MAX so the prefixed file name always fits.
pub const MAX_NAME_LEN: usize = 64;

/// The path of the file behind the region called `name`, after checking the name cannot escape
/// [`SHM_DIR`] or confuse a shell.
pub fn path_for(name: &str) -> Result<PathBuf, RegionError> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if name.len() > MAX_NAME_LEN {
        Some("it is longer than 64 bytes")
    } else if name.contains("..") {
        Some("it contains '..'")
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        Some("only letters, digits, '.', '_' and '-' are allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(RegionError::BadName {
            name: name.to_owned(),
            reason,
        }),
        None => Ok(Path::new(SHM_DIR).join(format!("{FILE_PREFIX}{name}"))),
    }
}

/// Device and inode of a file: which file a path named when we created it, so that dropping the
/// owner never removes a different file that has since been created under the same name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    pub fn of(file: &File, path: &Path) -> Result<FileId, RegionError> {
        let meta = file.metadata().map_err(io_error("inspect", path))?;
        Ok(FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Whether `path` still names this file.
    pub fn is_at(self, path: &Path) -> bool {
        std::fs::symlink_metadata(path)
            .is_ok_and(|meta| meta.dev() == self.dev && meta.ino() == self.ino)
    }
}

/// Creates a new file of exactly `size` bytes with all its pages reserved.
///
/// Reserving up front turns "no room" into an error here; a sparse file would instead kill the
/// first process that touches an unbacked page with SIGBUS, possibly the NIC in the middle of a
/// DMA. On failure the half-made file is removed again.
pub fn create_file(path: &Path, size: usize) -> Result<File, RegionError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|err| match err.kind() {
            io::ErrorKind::AlreadyExists => RegionError::Exists {
                path: path.to_owned(),
            },
            _ => io_error("create", path)(err),
        })?;
    if let Err(err) = reserve(&file, path, size) {
        // Best effort: the reservation error is what the caller needs to hear about.
        let _ = std::fs::remove_file(path);
        return Err(err);
    }
    Ok(file)
}

/// Opens an existing region file for reading and writing and returns it with its length.
///
/// `follow_links` is false for named regions: /dev/shm is world-writable, and a planted symlink
/// must not make us map some other file read-write, nor a file another user made or can open.
pub fn open_file(path: &Path, follow_links: bool) -> Result<(File, usize), RegionError> {
    let flags = if follow_links { 0 } else { libc::O_NOFOLLOW };
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|err| match err.kind() {
            io::ErrorKind::NotFound => RegionError::NotFound {
                path: path.to_owned(),
            },
            _ => io_error("open", path)(err),
        })?;
    let meta = file.metadata().map_err(io_error("inspect", path))?;
    if !meta.is_file() {
        return Err(RegionError::NotAFile {
            path: path.to_owned(),
        });
    }
    if !follow_links {
        // /dev/shm is everyone's: a file another user planted there (or can read or change)
        // would let that user see or change what peers write into it.
        check_owner(&meta, euid(), 0o077).map_err(|reason| RegionError::Untrusted {
            path: path.to_owned(),
            reason,
        })?;
    }
    // Only a 32-bit host can saturate here, and then mapping fails with a clear error.
    let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if len == 0 {
        return Err(RegionError::Empty {
            path: path.to_owned(),
        });
    }
    Ok((file, len))
}

/// What the NIC needs of a descriptor a host passed for it to map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A memfd sealed against shrinking: its pages stay for as long as it is mapped.
    Sealed,
    /// A file its owner may shrink at any time (a named region): mapped guarded.
    Shrinkable,
}

/// Seals that make a memfd's size final: no process can shrink or grow it, nor change that.
const SIZE_SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// A new memfd of `size` bytes (whole pages, reserved), sealed so that its size is final.
pub fn create_sealed(label: &str, size: usize) -> Result<File, RegionError> {
    let what = Path::new("memfd");
    let name = std::ffi::CString::new(format!("{FILE_PREFIX}{label}")).map_err(|_| {
        RegionError::BadName {
            name: label.to_owned(),
            reason: "it contains a NUL byte",
        }
    })?;
    // SAFETY: a valid NUL-terminated name; the result is checked.
    let fd =
        unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING) };
    if fd < 0 {
        return Err(io_error("create", what)(io::Error::last_os_error()));
    }
    // SAFETY: `fd` is new and owned by nobody else.
    let file = unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // The memfd mount has no size of its own to check against (it reports no free blocks):
    // reserving the pages is the check.
    let len = libc::off_t::try_from(size).map_err(|_| RegionError::TooLarge {
        size,
        max: crate::MAX_SIZE,
    })?;
    // SAFETY: the descriptor is open for writing for the duration of the call.
    match unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) } {
        0 => {}
        libc::ENOSPC | libc::ENOMEM => {
            return Err(RegionError::NoRoom {
                path: what.to_owned(),
                size,
                available: 0,
            })
        }
        errno => {
            return Err(io_error("reserve space for", what)(
                io::Error::from_raw_os_error(errno),
            ))
        }
    }
    // SAFETY: valid descriptor and seal flags.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, SIZE_SEALS) } != 0 {
        return Err(io_error("seal", what)(io::Error::last_os_error()));
    }
    Ok(file)
}

/// Checks a descriptor another process passed before it is mapped, and returns its size and
/// kind: a regular file on tmpfs (RAM, as host memory is: no disk file, no hugetlbfs, whose
/// pages can be missing), not empty, and either sealed against shrinking or owned by
/// `owner_uid` and writable by nobody else.
pub fn check_passed(file: &File, owner_uid: u32) -> Result<(usize, Kind), RegionError> {
    let what = Path::new("a passed descriptor");
    let untrusted = |reason: String| RegionError::Untrusted {
        path: what.to_owned(),
        reason,
    };
    let meta = file.metadata().map_err(io_error("inspect", what))?;
    if !meta.is_file() {
        return Err(RegionError::NotAFile {
            path: what.to_owned(),
        });
    }
    // SAFETY: statfs is plain old data; all-zero is a valid value to be overwritten.
    let mut fs: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and a pointer to a live, writable statfs.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut fs) } != 0 {
        return Err(io_error("inspect the file system of", what)(
            io::Error::last_os_error(),
        ));
    }
    #[allow(clippy::unnecessary_cast)] // the field's type differs between targets
    if fs.f_type as i64 != libc::TMPFS_MAGIC as i64 {
        return Err(untrusted(
            "it is not shared memory (tmpfs or memfd)".to_owned(),
        ));
    }
    // SAFETY: valid descriptor; F_GET_SEALS takes no argument.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    let kind = if seals >= 0 && seals & libc::F_SEAL_SHRINK != 0 {
        Kind::Sealed
    } else {
        check_owner(&meta, owner_uid, 0o022).map_err(untrusted)?;
        Kind::Shrinkable
    };
    let len = usize::try_from(meta.len()).unwrap_or(usize::MAX);
    if len == 0 {
        return Err(RegionError::Empty {
            path: what.to_owned(),
        });
    }
    Ok((len, kind))
}

/// Err with the reason unless the file is owned by `uid` and none of the `forbidden` mode bits
/// are set.
pub fn check_owner(meta: &std::fs::Metadata, uid: u32, forbidden: u32) -> Result<(), String> {
    if meta.uid() != uid {
        return Err(format!(
            "it belongs to user {}, not to user {uid}",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o777;
    if mode & forbidden != 0 {
        return Err(format!(
            "its mode {mode:03o} lets other users {} it",
            if forbidden & 0o044 != 0 && mode & 0o044 != 0 {
                "read"
            } else {
                "write"
            }
        ));
    }
    Ok(())
}

/// The effective user of this process.
pub fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() }
}

fn reserve(file: &File, path: &Path, size: usize) -> Result<(), RegionError> {
    let no_room = |available| RegionError::NoRoom {
        path: path.to_owned(),
        size,
        available,
    };
    let available = available_bytes(file, path)?;
    if size as u64 > available {
        return Err(no_room(available));
    }
    let len = libc::off_t::try_from(size).map_err(|_| no_room(available))?;
    // SAFETY: the descriptor is open for writing for the duration of the call.
    let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), 0, len) };
    match rc {
        0 => Ok(()),
        // Someone else took the room between the check and the reservation.
        libc::ENOSPC => Err(no_room(available_bytes(file, path)?)),
        errno => Err(io_error("reserve space for", path)(
            io::Error::from_raw_os_error(errno),
        )),
    }
}

fn available_bytes(file: &File, path: &Path) -> Result<u64, RegionError> {
    // SAFETY: statvfs is plain old data; all-zero is a valid value to be overwritten.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid descriptor and a pointer to a live, writable statvfs.
    if unsafe { libc::fstatvfs(file.as_raw_fd(), &mut stat) } != 0 {
        return Err(io_error("inspect the file system of", path)(
            io::Error::last_os_error(),
        ));
    }
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    Ok(u64::from(stat.f_bavail).saturating_mul(u64::from(stat.f_frsize)))
}

fn io_error<'a>(action: &'static str, path: &'a Path) -> impl Fn(io::Error) -> RegionError + 'a {
    move |source| RegionError::Io {
        action,
        path: path.to_owned(),
        source,
    }
}

/// The size of a memory page, which every region size is rounded up to.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_names_map_into_the_shm_directory() {
        assert_eq!(
            path_for("host-A_1.buf").unwrap(),
            Path::new("/dev/shm/roce-host-A_1.buf")
        );
        assert!(path_for(&"x".repeat(MAX_NAME_LEN)).is_ok());
    }

    #[test]
    fn names_that_could_escape_or_confuse_are_refused() {
        let too_long = "x".repeat(MAX_NAME_LEN + 1);
        for name in [
            "", "a/b", "/etc", "..", "a..b", "sp ace", "tab\t", "nul\0", "é", &too_long,
        ] {
            assert!(
                matches!(path_for(name), Err(RegionError::BadName { .. })),
                "{name:?} accepted"
            );
        }
    }
}
