//! What can go wrong, one type per layer, each message one sentence a user can act on.
//!
//! The layers are kept apart on purpose: a [`RegionError`] is about files and mappings (seen by
//! host programs and the CLI), an [`MrError`] about managing the tables (seen by the verbs layer),
//! and an [`AccessError`] about one request from the wire (turned into a NAK by the responder).

use std::io;
use std::path::PathBuf;

use thiserror::Error;

/// Why a size such as `4K` could not be used.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizeError {
    #[error("{text:?} is not a size: use a number with an optional K, M, G or T suffix")]
    Invalid { text: String },
    #[error("a size of zero bytes is not allowed")]
    Zero,
    #[error("{text:?} is too large: the limit is {} GiB", max >> 30)]
    TooLarge { text: String, max: u64 },
}

/// Why a region could not be created, attached, removed or accessed.
#[derive(Debug, Error)]
pub enum RegionError {
    #[error("region name {name:?} is not valid: {reason}")]
    BadName { name: String, reason: &'static str },
    #[error("a region of zero bytes is not allowed")]
    ZeroSize,
    #[error("a region of {size} bytes is too large: the limit is {} GiB", max >> 30)]
    TooLarge { size: usize, max: u64 },
    #[error("region {} already exists", path.display())]
    Exists { path: PathBuf },
    #[error("region {} does not exist", path.display())]
    NotFound { path: PathBuf },
    #[error("{} is not a regular file, so it cannot be a region", path.display())]
    NotAFile { path: PathBuf },
    #[error("region {} is empty", path.display())]
    Empty { path: PathBuf },
    #[error("not enough room for {size} bytes at {}: {available} bytes free", path.display())]
    NoRoom {
        path: PathBuf,
        size: usize,
        available: u64,
    },
    #[error("bytes {offset}..{offset}+{len} are outside the region of {size} bytes")]
    OutOfBounds {
        offset: usize,
        len: usize,
        size: usize,
    },
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        action: &'static str,
        path: PathBuf,
        source: io::Error,
    },
    #[error("cannot map {size} bytes of anonymous memory: {source}")]
    Anonymous { size: usize, source: io::Error },
    #[error("refusing {}: {reason}", path.display())]
    Untrusted { path: PathBuf, reason: String },
    #[error("the memory is the NIC's own (a ring or a doorbell), which no host may register")]
    DeviceMemory,
    #[error("too many mappings of files that others may shrink (at most {max})")]
    TooManyGuarded { max: usize },
    #[error("this region has no descriptor to pass to another process (it is private memory)")]
    NoDescriptor,
}

/// Why a protection domain or memory registration operation was refused.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MrError {
    #[error("no such protection domain")]
    UnknownPd,
    #[error("the protection domain still has {mrs} memory registrations")]
    PdBusy { mrs: usize },
    #[error("no memory registration has key {key:#x}")]
    UnknownKey { key: u32 },
    #[error("memory registration {key:#x} belongs to another protection domain")]
    PdMismatch { key: u32 },
    #[error("cannot register zero bytes")]
    EmptyRange,
    #[error("bytes {offset}..{offset}+{len} are outside the region of {region_len} bytes")]
    OutsideRegion {
        offset: usize,
        len: usize,
        region_len: usize,
    },
    #[error("a range of {len} bytes starting at virtual address {va:#x} runs past the end of the address space")]
    VaOverflow { va: u64, len: u64 },
    #[error("remote write or atomic access needs local write access too ({access})")]
    RemoteWriteWithoutLocalWrite { access: crate::Access },
    #[error("the memory registration table is full")]
    TableFull,
}

/// Why one access to registered memory was refused.
///
/// The variants map one-to-one onto what the responder tells the requester: see
/// [`AccessError::is_invalid_request`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum AccessError {
    #[error("no memory registration has this key")]
    UnknownKey,
    #[error("the memory registration was invalidated")]
    Invalidated,
    #[error("the memory registration belongs to another protection domain")]
    PdMismatch,
    #[error("the memory registration does not grant this access")]
    AccessDenied,
    #[error("the range is outside the registered memory")]
    OutOfBounds,
    #[error("an atomic operation needs an 8-byte aligned address")]
    Misaligned,
}

impl AccessError {
    /// True when the responder must NAK with "invalid request" rather than "remote access error".
    ///
    /// "Invalid request" is for a request that is malformed whatever the memory tables say; a
    /// misaligned atomic is the only such case here (Soft-RoCE answers it the same way). Every key,
    /// domain, permission and bounds failure is a "remote access error".
    pub fn is_invalid_request(&self) -> bool {
        matches!(self, AccessError::Misaligned)
    }
}
