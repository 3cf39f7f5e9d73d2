//! A region: a block of shared memory that stands in for host RAM.
//!
//! The host program creates a region; the NIC, possibly another process, gets the region's
//! descriptor passed over its control socket and maps the same pages, the way a DMA engine
//! reaches RAM without the CPU. A region is a sealed memfd ([`Region::shared`]: nobody can
//! shrink it under the NIC) or a named file in /dev/shm that tools can find by name
//! ([`Region::create`]), which the NIC maps guarded (see [`crate::guard`]).

use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Mutex;

use memmap2::{MmapOptions, MmapRaw};

use crate::guard::{Guard, MAX_GUARDED};
use crate::shm::{self, FileId, Kind};
use crate::{RegionError, MAX_SIZE};

/// The files of this process's device memory (the NIC's rings and doorbells), which a host
/// must not register: see [`Region::device_memory`].
static DEVICE_FILES: Mutex<Vec<FileId>> = Mutex::new(Vec::new());

fn device_files() -> std::sync::MutexGuard<'static, Vec<FileId>> {
    DEVICE_FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `fd` is a file of this process's device memory (a ring or a doorbell of a NIC
/// running here), so that a host's registration of it can be refused.
pub fn is_device_memory(fd: BorrowedFd<'_>) -> bool {
    let Ok(file) = fd.try_clone_to_owned().map(File::from) else {
        return false;
    };
    let Ok(id) = FileId::of(&file, Path::new("a passed descriptor")) else {
        return false;
    };
    device_files().contains(&id)
}

/// One process's mapping of a block of shared memory.
///
/// The mapping is held as a raw pointer, never as a Rust slice: other processes write the same
/// pages at any time, which a `&[u8]` would promise cannot happen. All accesses are bounds-checked
/// raw copies.
#[derive(Debug)]
pub struct Region {
    map: MmapRaw,
    name: Option<String>,
    path: Option<PathBuf>,
    /// For the owner of a region that does not persist: the file to remove on drop.
    owned: Option<FileId>,
    /// The descriptor behind the mapping, to pass to another process (None: private memory).
    file: Option<File>,
    /// Set for a mapping of a file that others may shrink (dropped before the mapping).
    guard: Option<Guard>,
    /// Set for device memory: the file id to forget on drop.
    device: Option<FileId>,
}

impl Region {
    /// Creates the region `name` (file `/dev/shm/roce-<name>`) of `size` bytes rounded up to whole
    /// pages. The file is removed when the returned region is dropped; mappings that other
    /// processes attached stay valid until they drop theirs.
    pub fn create(name: &str, size: usize) -> Result<Region, RegionError> {
        Self::create_named(name, size, true)
    }

    /// Like [`Region::create`], but the file stays after the region is dropped, until
    /// [`Region::remove`] (or `roce mem rm`) removes it.
    pub fn create_persistent(name: &str, size: usize) -> Result<Region, RegionError> {
        Self::create_named(name, size, false)
    }

    /// Creates a region backed by a new file at `path`, removed again when the region is dropped.
    pub fn create_at(path: &Path, size: usize) -> Result<Region, RegionError> {
        Self::create_file(path.to_owned(), size, true)
    }

    /// Maps the existing region `name`. Dropping the result never removes the region.
    pub fn attach(name: &str) -> Result<Region, RegionError> {
        let mut region = Self::attach_file(shm::path_for(name)?, false)?;
        region.name = Some(name.to_owned());
        Ok(region)
    }

    /// Maps the region backed by the existing file at `path`.
    pub fn attach_at(path: &Path) -> Result<Region, RegionError> {
        Self::attach_file(path.to_owned(), true)
    }

    /// A region of `size` bytes (rounded up to whole pages) that no process can ever shrink or
    /// grow: a memfd with its size sealed. It has no name; it reaches another process as a
    /// descriptor ([`Region::fd`]) passed over a Unix socket, which is how a host program
    /// registers memory with a NIC process. Its pages are reserved up front.
    pub fn shared(size: usize) -> Result<Region, RegionError> {
        Self::sealed("shared", size)
    }

    /// Like [`Region::shared`], for memory a NIC creates for its hosts (rings, doorbells):
    /// [`is_device_memory`] knows its descriptor for as long as the region lives, so that no
    /// host can register it as its own memory. `label` names the memfd (seen in
    /// /proc/PID/maps).
    pub fn device_memory(label: &str, size: usize) -> Result<Region, RegionError> {
        let mut region = Self::sealed(label, size)?;
        let id = FileId::of(
            region.file.as_ref().ok_or(RegionError::NoDescriptor)?,
            Path::new("memfd"),
        )?;
        device_files().push(id);
        region.device = Some(id);
        Ok(region)
    }

    fn sealed(label: &str, size: usize) -> Result<Region, RegionError> {
        let size = whole_pages(size)?;
        let file = shm::create_sealed(label, size)?;
        let map = map(&file, Path::new("memfd"), size)?;
        let mut region = Region::bare(map);
        region.file = Some(file);
        Ok(region)
    }

    /// Maps a descriptor another process passed (a host's memory for the NIC, or the NIC's
    /// rings for a host). It must be shared memory (tmpfs or memfd), not empty, and either
    /// sealed against shrinking or a file owned by `owner_uid` that no other user may write;
    /// such a file is mapped guarded, so that its owner shrinking it costs a failed access,
    /// never a crash (see [`Region::faulted`]).
    pub fn from_fd(fd: OwnedFd, owner_uid: u32) -> Result<Region, RegionError> {
        let file = File::from(fd);
        let (len, kind) = shm::check_passed(&file, owner_uid)?;
        whole_pages(len)?;
        let map = map(&file, Path::new("a passed descriptor"), len)?;
        let guard = match kind {
            Kind::Sealed => None,
            Kind::Shrinkable => Some(
                Guard::new(map.as_mut_ptr(), map.len())
                    .ok_or(RegionError::TooManyGuarded { max: MAX_GUARDED })?,
            ),
        };
        tracing::debug!(len, ?kind, "passed region mapped");
        let mut region = Region::bare(map);
        region.name = shm_name(&file);
        region.file = Some(file);
        region.guard = guard;
        Ok(region)
    }

    fn bare(map: MmapRaw) -> Region {
        Region {
            map,
            name: None,
            path: None,
            owned: None,
            file: None,
            guard: None,
            device: None,
        }
    }

    /// The descriptor behind the region, to pass to another process; `None` for private
    /// memory ([`Region::anonymous`]).
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.file.as_ref().map(AsFd::as_fd)
    }

    /// Whether part of a guarded mapping vanished under an access (its owner shrank the file):
    /// what was read there was zeros and what was written is lost, so the access must fail.
    /// Always false for sealed and private memory, which cannot shrink.
    pub fn faulted(&self) -> bool {
        self.guard.as_ref().is_some_and(Guard::faulted)
    }

    /// A region private to this process, for the NIC's own queues and rings: the same interface
    /// and page alignment, without a file.
    pub fn anonymous(size: usize) -> Result<Region, RegionError> {
        let size = whole_pages(size)?;
        let map = MmapOptions::new()
            .len(size)
            .map_anon()
            .map_err(|source| RegionError::Anonymous { size, source })?;
        Ok(Region::bare(map.into()))
    }

    /// Removes the region `name`. Processes that have it mapped keep their mapping.
    pub fn remove(name: &str) -> Result<(), RegionError> {
        let path = shm::path_for(name)?;
        std::fs::remove_file(&path).map_err(|source| match source.kind() {
            std::io::ErrorKind::NotFound => RegionError::NotFound { path },
            _ => RegionError::Io {
                action: "remove",
                path,
                source,
            },
        })
    }

    /// The name this region was created or attached by, if it is a named region.
    pub fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    /// The file behind this region, unless it is anonymous.
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Size of the mapping in bytes.
    #[allow(clippy::len_without_is_empty)] // a region is never empty: zero sizes are refused
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Base of this process's mapping, page aligned. Valid for [`Region::len`] bytes as long as
    /// the region lives; other processes may change the bytes at any time.
    pub fn as_ptr(&self) -> *mut u8 {
        self.map.as_mut_ptr()
    }

    /// Copies `buf.len()` bytes starting at `offset` out of the region.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<(), RegionError> {
        let src = self.span(offset, buf.len())?;
        // SAFETY: `span` checked that the range lies inside the mapping; `buf` is ours, so the
        // two cannot overlap.
        unsafe { ptr::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` into the region starting at `offset`.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), RegionError> {
        let dst = self.span(offset, data.len())?;
        // SAFETY: as in `read`, with the roles swapped.
        unsafe { ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Reads the byte at `offset` as a CPU polls memory that a device writes: a volatile load
    /// each call, so a loop waiting for the NIC's DMA (perftest's `ib_write_lat` spins on the
    /// last byte of its buffer) sees every new value instead of one the compiler kept.
    pub fn poll_byte(&self, offset: usize) -> Result<u8, RegionError> {
        let at = self.span(offset, 1)?;
        // SAFETY: `span` checked that the byte lies inside the mapping.
        Ok(unsafe { ptr::read_volatile(at) })
    }

    fn span(&self, offset: usize, len: usize) -> Result<*mut u8, RegionError> {
        match offset.checked_add(len) {
            // SAFETY: offset <= end <= len, so the pointer stays inside the mapping.
            Some(end) if end <= self.len() => Ok(unsafe { self.as_ptr().add(offset) }),
            _ => Err(RegionError::OutOfBounds {
                offset,
                len,
                size: self.len(),
            }),
        }
    }

    fn create_named(name: &str, size: usize, remove_on_drop: bool) -> Result<Region, RegionError> {
        let mut region = Self::create_file(shm::path_for(name)?, size, remove_on_drop)?;
        region.name = Some(name.to_owned());
        Ok(region)
    }

    fn create_file(
        path: PathBuf,
        size: usize,
        remove_on_drop: bool,
    ) -> Result<Region, RegionError> {
        let size = whole_pages(size)?;
        let file = shm::create_file(&path, size)?;
        let mapped = map(&file, &path, size).and_then(|map| {
            let owned = if remove_on_drop {
                Some(FileId::of(&file, &path)?)
            } else {
                None
            };
            Ok((map, owned))
        });
        match mapped {
            Ok((map, owned)) => {
                tracing::debug!(path = %path.display(), size, remove_on_drop, "region created");
                let mut region = Region::bare(map);
                region.path = Some(path);
                region.owned = owned;
                region.file = Some(file);
                Ok(region)
            }
            Err(err) => {
                // Best effort: the mapping error is what the caller needs to hear about.
                let _ = std::fs::remove_file(&path);
                Err(err)
            }
        }
    }

    fn attach_file(path: PathBuf, follow_links: bool) -> Result<Region, RegionError> {
        let (file, size) = shm::open_file(&path, follow_links)?;
        let map = map(&file, &path, size)?;
        tracing::debug!(path = %path.display(), size, "region attached");
        let mut region = Region::bare(map);
        region.path = Some(path);
        region.file = Some(file);
        Ok(region)
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // Stop guarding before the mapping goes (it is unmapped after this function).
        self.guard = None;
        if let Some(id) = self.device {
            device_files().retain(|f| *f != id);
        }
        let (Some(owned), Some(path)) = (self.owned, &self.path) else {
            return;
        };
        // Someone may have removed our file and made a new one under the same name since.
        if !owned.is_at(path) {
            return;
        }
        if let Err(err) = std::fs::remove_file(path) {
            tracing::warn!(path = %path.display(), %err, "cannot remove region");
        }
    }
}

/// The region name of a passed file that lies in /dev/shm, for logs (the NIC traces where its
/// DMA lands by region name).
fn shm_name(file: &File) -> Option<String> {
    use std::os::fd::AsRawFd;
    let path = std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd())).ok()?;
    let name = path.strip_prefix(shm::SHM_DIR).ok()?.to_str()?;
    let name = name.strip_prefix(shm::FILE_PREFIX)?;
    shm::path_for(name).ok().map(|_| name.to_owned())
}

fn map(file: &File, path: &Path, size: usize) -> Result<MmapRaw, RegionError> {
    MmapOptions::new()
        .len(size)
        .map_raw(file)
        .map_err(|source| RegionError::Io {
            action: "map",
            path: path.to_owned(),
            source,
        })
}

/// `size` rounded up to whole pages, after refusing zero and absurd sizes.
fn whole_pages(size: usize) -> Result<usize, RegionError> {
    if size == 0 {
        return Err(RegionError::ZeroSize);
    }
    if size as u64 > MAX_SIZE {
        return Err(RegionError::TooLarge {
            size,
            max: MAX_SIZE,
        });
    }
    // Cannot overflow: size is at most MAX_SIZE, far below usize::MAX.
    Ok(size.next_multiple_of(shm::page_size()))
}
