//! DMA on resolved memory: what the NIC does once a key check has passed.
//!
//! A [`Place`] or [`AtomicPlace`] can only be made by resolving a key in an [`MrTable`], which
//! checked its range; it borrows the table, so the registration cannot go away while it is used.
//! Copies are raw-pointer copies and atomics real atomic instructions on the shared mapping,
//! because another process (the host program) may read or write the same bytes meanwhile.
//!
//! A large write into host memory (a packet's payload of a kilobyte or more) bypasses the CPU's
//! caches, as a NIC's DMA does: the memory a stream of WRITEs lands in is usually far larger than
//! the caches, and an ordinary store first reads every line it writes (3–4 GB/s into a 64 MiB
//! region on the project's machine, against 12 GB/s for a streaming store). Streaming stores are
//! weakly ordered, so the thread that made them calls [`fence_writes`] before it tells anyone the data is
//! there (a completion, an acknowledgement on the wire).
//!
//! [`MrTable`]: crate::MrTable

use std::cell::Cell;
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
    /// pass the end of the place. Other threads may see the bytes only after this thread's next
    /// [`fence_writes`] (see the module's documentation).
    pub fn write(&self, at: usize, src: &[u8]) -> Result<(), AccessError> {
        let dst = self.span(at, src.len())?;
        // SAFETY: `span` checked the range; `src` is a Rust slice, so it cannot be the shared
        // mapping, which is only ever reached through raw pointers.
        unsafe { copy_to_memory(src.as_ptr(), dst, src.len()) };
        self.intact()
    }

    /// As [`write`](Self::write), for the packet that ends a message: its last cache line lands
    /// after every byte this thread wrote before it (this packet's and earlier packets'), so a
    /// host that polls the last byte of an RDMA WRITE's buffer — as many programs do, though
    /// IBTA does not promise it — finds the whole message there once that byte changes. The
    /// rest is written as `write` does, then fenced, then the last line with plain stores,
    /// which x86 makes visible in program order.
    pub fn write_last(&self, at: usize, src: &[u8]) -> Result<(), AccessError> {
        let dst = self.span(at, src.len())?;
        let split = src.len().saturating_sub(LAST_LINE);
        // SAFETY: as in `write`; both pieces lie inside the checked span.
        unsafe {
            copy_to_memory(src.as_ptr(), dst, split);
            fence_writes();
            ptr::copy_nonoverlapping(src.as_ptr().add(split), dst.add(split), src.len() - split);
        }
        self.intact()
    }

    /// Copies bytes starting `at` bytes in straight into `dst`, typically the payload of an
    /// outgoing frame, so READ responses need no intermediate buffer. Refused, reading nothing,
    /// if it would pass the end of the place.
    pub fn read_into(&self, at: usize, dst: &mut [u8]) -> Result<(), AccessError> {
        let src = self.span(at, dst.len())?;
        // SAFETY: as in `write`, with the roles swapped.
        unsafe { ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) };
        self.prefetch_after(at + dst.len(), dst.len());
        self.intact()
    }

    /// Starts bringing the `len` bytes that follow `end` (a place's offset) in its region into
    /// the cache. A message is read packet after packet, and each packet's bytes come from
    /// memory far larger than the caches: the hardware's prefetchers stop at every 4 KiB page,
    /// so a packet's copy began with the wait for its first lines (the sender's copy was 38% of
    /// a cable sender's samples). Asked for one packet ahead, they arrive while this packet's
    /// frame is finished and sent. Never past the region's end; a hint, it faults on nothing.
    fn prefetch_after(&self, end: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(region) = self.region {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let from = self.region_offset + end;
            let until = from.saturating_add(len).min(region.len());
            let mut line = from;
            while line < until {
                // SAFETY: `line` lies inside the region's mapping (`from` is at most the end of
                // this place, `until` at most the region's length); a prefetch reads nothing.
                unsafe { _mm_prefetch::<_MM_HINT_T0>(region.as_ptr().add(line).cast()) };
                line += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (end, len);
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

/// Copies of at least this many bytes into host memory use streaming stores.
pub const STREAMING_MIN: usize = 1024;

/// How much of a message's last packet [`Place::write_last`] writes after the fence: one cache
/// line, so the bytes a poller watches are never in a streamed line.
const LAST_LINE: usize = 64;

thread_local! {
    /// Whether this thread made streaming stores since its last [`fence_writes`].
    static UNFENCED: Cell<bool> = const { Cell::new(false) };
}

/// Makes every write this thread made into host memory visible to other threads before any
/// store it makes after: call it before publishing what tells another thread (or process) that
/// the data is there — a completion, a frame that acknowledges it. Costs nothing when this thread
/// wrote nothing with streaming stores since its last fence.
#[inline]
pub fn fence_writes() {
    if UNFENCED.with(|u| u.replace(false)) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: SSE2 is part of x86_64; a store fence has no other effect.
        unsafe {
            std::arch::x86_64::_mm_sfence()
        };
    }
}

/// Copies `len` bytes from `src` to `dst`: with streaming stores from [`STREAMING_MIN`] bytes
/// on (x86_64), plainly otherwise.
///
/// # Safety
/// As for [`ptr::copy_nonoverlapping`].
unsafe fn copy_to_memory(src: *const u8, dst: *mut u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    if len >= STREAMING_MIN {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        // Plain stores up to a 16-byte boundary, streaming stores of 64 bytes (a cache line,
        // which the write-combining buffers fill in one go) after it, plain stores for the rest.
        let head = dst.align_offset(16).min(len);
        let body = (len - head) / 64 * 64;
        // SAFETY: the caller's ranges; every access below stays inside `..len` of both, and
        // `dst + head` is 16-byte aligned as the streaming store needs. SSE2 is part of x86_64.
        unsafe {
            ptr::copy_nonoverlapping(src, dst, head);
            let mut i = head;
            while i < head + body {
                let from = src.add(i) as *const __m128i;
                let to = dst.add(i) as *mut __m128i;
                let (a, b) = (_mm_loadu_si128(from), _mm_loadu_si128(from.add(1)));
                let (c, d) = (_mm_loadu_si128(from.add(2)), _mm_loadu_si128(from.add(3)));
                _mm_stream_si128(to, a);
                _mm_stream_si128(to.add(1), b);
                _mm_stream_si128(to.add(2), c);
                _mm_stream_si128(to.add(3), d);
                i += 64;
            }
            ptr::copy_nonoverlapping(src.add(i), dst.add(i), len - i);
        }
        UNFENCED.with(|u| u.set(true));
        return;
    }
    // SAFETY: the caller's.
    unsafe { ptr::copy_nonoverlapping(src, dst, len) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the streaming threshold, at every alignment of the destination
    /// within a cache line, lands byte for byte and touches nothing around it.
    #[test]
    fn streamed_writes_land_exactly() {
        let region = Region::anonymous(16384).unwrap();
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        for len in [
            STREAMING_MIN - 1,
            STREAMING_MIN,
            STREAMING_MIN + 63,
            4096,
            4097,
        ] {
            for at in [0, 1, 15, 16, 33, 63, 64] {
                region.write(0, &[0xAA; 16384]).unwrap();
                let place = Place::new(&region, 100, 10000);
                place.write(at, &src[..len]).unwrap();
                fence_writes();
                let mut back = vec![0u8; 16384];
                region.read(0, &mut back).unwrap();
                let start = 100 + at;
                assert_eq!(&back[start..start + len], &src[..len], "len {len} at {at}");
                assert!(back[..start].iter().all(|&b| b == 0xAA));
                assert!(back[start + len..].iter().all(|&b| b == 0xAA));
            }
        }
    }

    /// The ending packet's write lands exactly too, whatever its length against the last line
    /// and the streaming threshold, and leaves nothing unfenced behind it.
    #[test]
    fn a_last_write_lands_exactly_and_fenced() {
        let region = Region::anonymous(16384).unwrap();
        let src: Vec<u8> = (0..5000u32).map(|i| (i * 5 + 1) as u8).collect();
        for len in [
            0,
            1,
            63,
            64,
            65,
            STREAMING_MIN,
            STREAMING_MIN + 64,
            4096,
            4097,
        ] {
            for at in [0, 7, 64] {
                region.write(0, &[0x55; 16384]).unwrap();
                let place = Place::new(&region, 200, 10000);
                place.write_last(at, &src[..len]).unwrap();
                assert!(!UNFENCED.with(Cell::get), "len {len} at {at} left unfenced");
                let mut back = vec![0u8; 16384];
                region.read(0, &mut back).unwrap();
                let start = 200 + at;
                assert_eq!(&back[start..start + len], &src[..len], "len {len} at {at}");
                assert!(back[..start].iter().all(|&b| b == 0x55));
                assert!(back[start + len..].iter().all(|&b| b == 0x55));
            }
        }
        let place = Place::new(&region, 200, 100);
        assert!(place.write_last(50, &src[..51]).is_err());
    }

    /// Reads land byte for byte wherever they lie, up to the region's last byte: the look
    /// ahead after each read stops at the region's end.
    #[test]
    fn reads_land_exactly_up_to_the_regions_end() {
        let region = Region::anonymous(16384).unwrap();
        let data: Vec<u8> = (0..16384u32).map(|i| (i * 13 + 7) as u8).collect();
        region.write(0, &data).unwrap();
        for (offset, len) in [
            (0, 4096),
            (12288, 4096),
            (16383, 1),
            (10000, 6384),
            (16384, 0),
        ] {
            let place = Place::new(&region, offset, len);
            let mut back = vec![0u8; len];
            place.read_into(0, &mut back).unwrap();
            assert_eq!(back, data[offset..offset + len], "{len} bytes at {offset}");
        }
    }
}
