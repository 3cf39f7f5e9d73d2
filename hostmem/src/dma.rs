//! DMA on resolved memory: what the NIC does once a key check has passed.
//!
//! A [`Place`] or [`AtomicPlace`] can only be made by resolving a key in an [`MrTable`], which
//! checked its range; it borrows the table, so the registration cannot go away while it is used.
//! Copies are raw-pointer copies and atomics real atomic instructions on the shared mapping,
//! because another process (the host program) may read or write the same bytes meanwhile.
//!
//! [`MrTable`]: crate::MrTable

use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{AccessError, Region};

/// A checked range of one region's mapping, ready for DMA.
#[derive(Debug)]
pub struct Place<'a> {
    start: NonNull<u8>,
    len: usize,
    region_offset: usize,
    /// `None` for the empty place of a zero-length request, which names no memory at all.
    region: Option<&'a Region>,
}

impl<'a> Place<'a> {
    /// The place `offset..offset + len` of `region`; the caller has checked that it lies inside.
    pub(crate) fn new(region: &'a Region, offset: usize, len: usize) -> Place<'a> {
        debug_assert!(offset
            .checked_add(len)
            .is_some_and(|end| end <= region.len()));
        // SAFETY: the caller guarantees the range lies inside the mapping; the base of a mapping
        // is never null.
        let start = unsafe { NonNull::new_unchecked(region.as_ptr().add(offset)) };
        Place {
            start,
            len,
            region_offset: offset,
            region: Some(region),
        }
    }

    /// The place of a zero-length request: no bytes, no memory behind it.
    pub(crate) fn empty() -> Place<'a> {
        Place {
            start: NonNull::dangling(),
            len: 0,
            region_offset: 0,
            region: None,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the place starts in its region, for tracing.
    pub fn region_offset(&self) -> usize {
        self.region_offset
    }

    /// The name of the region the place is in, for tracing.
    pub fn region_name(&self) -> Option<&'a str> {
        self.region.and_then(Region::name)
    }

    /// Copies `src` into the place starting `at` bytes in: the data of one packet of an RDMA
    /// WRITE or SEND lands at its offset in the message. Refused, writing nothing, if it would
    /// pass the end of the place.
    pub fn write(&self, at: usize, src: &[u8]) -> Result<(), AccessError> {
        let dst = self.span(at, src.len())?;
        // SAFETY: `span` checked the range; `src` is a Rust slice, so it cannot be the shared
        // mapping, which is only ever reached through raw pointers.
        unsafe { ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
        self.intact()
    }

    /// Copies bytes starting `at` bytes in straight into `dst`, typically the payload of an
    /// outgoing frame, so READ responses need no intermediate buffer. Refused, reading nothing,
    /// if it would pass the end of the place.
    pub fn read_into(&self, at: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        let src = self.span(at, dst.len())?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        self.intact()
    }

    /// Err if the memory vanished under (or before) the copy: its owner shrank the file behind
    /// a guarded mapping, so what was read is zeros and what was written went nowhere.
    fn intact(&self) -> Result<(), AccessError> {
        if self.region.is_some_and(Region::faulted) {
            return Err(AccessError::OutOfBounds);
        }
        Ok(())
    }

    fn span(&self, at: usize, len: usize) -> Result<*mut u8, AccessError> {
        self.intact()?;
        match at.checked_add(len) {
            // SAFETY: at <= end <= self.len, so the pointer stays inside the place (for the
            // empty place, at == 0 and the offset is zero).
            Some(end) if end <= self.len => Ok(unsafe { self.start.as_ptr().add(at) }),
            _ => Err(AccessError::OutOfBounds),
        }
    }
}

/// A checked, 8-byte aligned 64-bit word of one region's mapping, ready for an atomic operation.
///
/// The value is a native-endian `u64` in host memory, as in verbs; the responder converts to and
/// from the big-endian wire format.
#[derive(Debug)]
pub struct AtomicPlace<'a> {
    word: NonNull<u64>,
    region_offset: usize,
    region: &'a Region,
}

impl<'a> AtomicPlace<'a> {
    /// The word at `offset` of `region`; the caller has checked that it lies inside and that
    /// `offset` is a multiple of 8 (the base of a mapping is page aligned).
    pub(crate) fn new(region: &'a Region, offset: usize) -> AtomicPlace<'a> {
        debug_assert!(offset % 8 == 0);
        debug_assert!(offset.checked_add(8).is_some_and(|end| end <= region.len()));
        // SAFETY: as in `Place::new`.
        let start = unsafe { NonNull::new_unchecked(region.as_ptr().add(offset)) };
        AtomicPlace {
            word: start.cast(),
            region_offset: offset,
            region,
        }
    }

    /// Where the word is in its region, for tracing.
    pub fn region_offset(&self) -> usize {
        self.region_offset
    }

    /// The name of the region the word is in, for tracing.
    pub fn region_name(&self) -> Option<&'a str> {
        self.region.name()
    }

    /// Atomically replaces the word with `swap` if it equals `compare`; returns the original
    /// value either way, as the ATOMIC ACKNOWLEDGE does.
    pub fn compare_and_swap(&self, compare: u64, swap: u64) -> u64 {
        match self
            .atomic()
            .compare_exchange(compare, swap, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(original) | Err(original) => original,
        }
    }

    /// Atomically adds `add` (wrapping, as verbs does) and returns the original value.
    pub fn fetch_and_add(&self, add: u64) -> u64 {
        self.atomic().fetch_add(add, Ordering::AcqRel)
    }

    fn atomic(&self) -> &AtomicU64 {
        // SAFETY: the word is inside a live mapping (borrowed for 'a) and 8-byte aligned. Other
        // accesses to it come through other mappings of the same page or raw copies, never Rust
        // references, just as a device's DMA and a host CPU share RAM.
        unsafe { AtomicU64::from_ptr(self.word.as_ptr()) }
    }
}
