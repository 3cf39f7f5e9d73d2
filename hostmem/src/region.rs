//! A region: a block of shared memory that stands in for host RAM.
//!
//! The host program creates a region; the NIC, possibly another process, attaches to it by name
//! and gets its own mapping of the same pages, the way a DMA engine reaches RAM without the CPU.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::ptr;

use memmap2::{MmapOptions, MmapRaw};

use crate::shm::{self, FileId};
use crate::{RegionError, MAX_SIZE};

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

    /// A region private to this process, for the NIC's own queues and rings: the same interface
    /// and page alignment, without a file.
    pub fn anonymous(size: usize) -> Result<Region, RegionError> {
        let size = whole_pages(size)?;
        let map = MmapOptions::new()
            .len(size)
            .map_anon()
            .map_err(|source| RegionError::Anonymous { size, source })?;
        Ok(Region {
            map: map.into(),
            name: None,
            path: None,
            owned: None,
        })
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
                Ok(Region {
                    map,
                    name: None,
                    path: Some(path),
                    owned,
                })
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
        Ok(Region {
            map,
            name: None,
            path: Some(path),
            owned: None,
        })
    }
}

impl Drop for Region {
    fn drop(&mut self) {
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
