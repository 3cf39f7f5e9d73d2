//! Single-producer, single-consumer rings of fixed-size slots in shared memory: the send, receive
//! and completion queues between a host program and the NIC, as a hardware RNIC has them in host
//! RAM. The same rings serve a host program in the NIC's own process and one in another process,
//! so the engine never knows which it talks to.
//!
//! ```text
//! offset 0    producer index (u32, free-running)   <- written by the producer only
//! offset 64   consumer index (u32, free-running)   <- written by the consumer only
//! offset 96   notify word (u32)                     <- completion queues: "wake me once this
//!                                                      many entries wait" (0: no wake-up)
//! offset 100  overrun word (u32)                    <- completion queues: set by the NIC when
//!                                                      the queue was full and it lost a completion
//! offset 128  slot 0, slot 1, ... (capacity a power of two)
//! ```
//! The other side may be another process that misbehaves: every index read from shared memory
//! is treated as untrusted and clamped, so a corrupt ring can stall its own queue but never make
//! the engine read or write outside the ring.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use roce_hostmem::Region;
use serde::{Deserialize, Serialize};

const PRODUCER: usize = 0;
const CONSUMER: usize = 64;
const NOTIFY: usize = 96;
const OVERRUN: usize = 100;
const HEADER: usize = 128;

/// The geometry of a ring: where it lies in its region and how its slots are sized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    pub offset: usize,
    pub capacity: u32,
    pub slot_size: usize,
}

impl Geometry {
    /// A ring of at least `min_entries` slots (rounded up to a power of two) at `offset`.
    pub fn new(offset: usize, min_entries: u32, slot_size: usize) -> Geometry {
        Geometry {
            offset,
            capacity: min_entries.max(1).next_power_of_two(),
            slot_size: slot_size.next_multiple_of(64),
        }
    }

    /// Bytes the ring occupies, header included.
    pub fn bytes(&self) -> usize {
        HEADER + self.capacity as usize * self.slot_size
    }

    /// The first byte after the ring, page aligned is not needed; cache-line aligned is.
    pub fn end(&self) -> usize {
        self.offset + self.bytes()
    }
}

/// A ring in a mapped region.
#[derive(Debug, Clone)]
pub struct Ring {
    region: Arc<Region>,
    base: *mut u8,
    geometry: Geometry,
}

// SAFETY: the ring's memory is only touched through atomics (indices) and through slot copies
// whose ownership the indices hand back and forth; `region` keeps it mapped.
unsafe impl Send for Ring {}
// SAFETY: as for Send: shared access goes through atomics and index-handed slots only.
unsafe impl Sync for Ring {}

/// Why a ring could not be laid out or attached.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    #[error("the ring needs {needed} bytes at offset {offset} but its region has {available}")]
    TooSmall {
        offset: usize,
        needed: usize,
        available: usize,
    },
    #[error("the ring offset {0} is not aligned to a cache line")]
    Misaligned(usize),
    /// Not a layout [`Geometry::new`] makes (the geometry came from another process).
    #[error("a ring of {capacity} slots of {slot_size} bytes is not a valid layout")]
    Layout { capacity: u32, slot_size: usize },
}

impl Ring {
    /// A new, empty ring in `region`.
    pub fn create(region: Arc<Region>, geometry: Geometry) -> Result<Ring, RingError> {
        let ring = Ring::attach(region, geometry)?;
        ring.word(PRODUCER).store(0, Ordering::SeqCst);
        ring.word(CONSUMER).store(0, Ordering::SeqCst);
        ring.word(NOTIFY).store(0, Ordering::SeqCst);
        ring.word(OVERRUN).store(0, Ordering::SeqCst);
        Ok(ring)
    }

    /// A ring someone else laid out in `region`.
    pub fn attach(region: Arc<Region>, geometry: Geometry) -> Result<Ring, RingError> {
        if geometry.offset % 64 != 0 {
            return Err(RingError::Misaligned(geometry.offset));
        }
        let Geometry {
            capacity,
            slot_size,
            ..
        } = geometry;
        let needed = (capacity as usize)
            .checked_mul(slot_size)
            .and_then(|slots| slots.checked_add(HEADER));
        let Some(needed) =
            needed.filter(|_| capacity.is_power_of_two() && slot_size > 0 && slot_size % 64 == 0)
        else {
            return Err(RingError::Layout {
                capacity,
                slot_size,
            });
        };
        if geometry
            .offset
            .checked_add(needed)
            .is_none_or(|end| end > region.len())
        {
            return Err(RingError::TooSmall {
                offset: geometry.offset,
                needed,
                available: region.len(),
            });
        }
        // SAFETY: offset + bytes() lies within the mapping (checked above).
        let base = unsafe { region.as_ptr().add(geometry.offset) };
        Ok(Ring {
            region,
            base,
            geometry,
        })
    }

    pub fn geometry(&self) -> Geometry {
        self.geometry
    }

    pub fn region(&self) -> &Arc<Region> {
        &self.region
    }

    pub fn capacity(&self) -> u32 {
        self.geometry.capacity
    }

    pub fn slot_size(&self) -> usize {
        self.geometry.slot_size
    }

    fn word(&self, at: usize) -> &AtomicU32 {
        // SAFETY: the header lies within the mapping, and `at` is 4-byte aligned within a
        // cache-line aligned header.
        unsafe { &*(self.base.add(at) as *const AtomicU32) }
    }

    fn slot(&self, index: u32) -> *mut u8 {
        let i = (index & (self.geometry.capacity - 1)) as usize;
        // SAFETY: i < capacity, so the slot lies within the ring.
        unsafe { self.base.add(HEADER + i * self.geometry.slot_size) }
    }

    /// The notify word (completion queues: set by a consumer that waits for an event).
    pub fn notify(&self) -> &AtomicU32 {
        self.word(NOTIFY)
    }

    /// The overrun word (completion queues: set once the NIC found the queue full and lost a
    /// completion; the queue is in error from then on).
    pub fn overrun(&self) -> &AtomicU32 {
        self.word(OVERRUN)
    }

    /// Copies slot `index` out (a snapshot: the other side cannot change it under the reader).
    pub fn read_slot(&self, index: u32, out: &mut [u8]) {
        let n = out.len().min(self.geometry.slot_size);
        // SAFETY: the slot has slot_size bytes; `out` has at least n.
        unsafe { std::ptr::copy_nonoverlapping(self.slot(index), out.as_mut_ptr(), n) };
    }

    /// Copies `bytes` into slot `index`.
    pub fn write_slot(&self, index: u32, bytes: &[u8]) {
        let n = bytes.len().min(self.geometry.slot_size);
        // SAFETY: the slot has slot_size bytes; `bytes` has at least n.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), self.slot(index), n) };
    }

    fn producer_index(&self) -> u32 {
        self.word(PRODUCER).load(Ordering::Acquire)
    }

    fn consumer_index(&self) -> u32 {
        self.word(CONSUMER).load(Ordering::Acquire)
    }
}

/// The producing side of a ring.
#[derive(Debug)]
pub struct Producer {
    ring: Ring,
    head: u32,
}

impl Producer {
    /// Takes over production from the ring's current producer index.
    pub fn new(ring: Ring) -> Producer {
        let head = ring.producer_index();
        Producer { ring, head }
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Slots that can be written before the consumer frees more.
    pub fn free(&self) -> u32 {
        let used = self.head.wrapping_sub(self.ring.consumer_index());
        self.ring.capacity().saturating_sub(used)
    }

    /// Slots written (published or not) that the consumer has not released yet.
    pub fn pending(&self) -> u32 {
        self.head.wrapping_sub(self.ring.consumer_index())
    }

    /// Writes the next slot (without publishing it). False when the ring is full.
    pub fn push(&mut self, bytes: &[u8]) -> bool {
        if self.free() == 0 {
            return false;
        }
        self.ring.write_slot(self.head, bytes);
        self.head = self.head.wrapping_add(1);
        true
    }

    /// Makes every pushed slot visible to the consumer.
    pub fn publish(&self) {
        self.ring.word(PRODUCER).store(self.head, Ordering::SeqCst);
    }
}

/// The consuming side of a ring. Reading and releasing are separate, so a send queue's entries
/// stay owned by the NIC (and cannot be overwritten) until their work completes.
#[derive(Debug)]
pub struct Consumer {
    ring: Ring,
    /// Next slot to read.
    read: u32,
    /// Slots before this one are released to the producer.
    released: u32,
}

impl Consumer {
    /// Takes over consumption from the ring's current consumer index.
    pub fn new(ring: Ring) -> Consumer {
        let released = ring.consumer_index();
        Consumer {
            ring,
            read: released,
            released,
        }
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// Slots written but not yet read, clamped to what a well-behaved producer could have
    /// written.
    pub fn available(&self) -> u32 {
        let written = self.ring.producer_index().wrapping_sub(self.released);
        let written = written.min(self.ring.capacity());
        let read = self.read.wrapping_sub(self.released);
        written.saturating_sub(read)
    }

    /// Copies the next unread slot into `out` and marks it read.
    pub fn next(&mut self, out: &mut [u8]) -> bool {
        if self.available() == 0 {
            return false;
        }
        self.ring.read_slot(self.read, out);
        self.read = self.read.wrapping_add(1);
        true
    }

    /// Slots read but not yet released.
    pub fn unreleased(&self) -> u32 {
        self.read.wrapping_sub(self.released)
    }

    /// Gives the `n` oldest read slots back to the producer.
    pub fn release(&mut self, n: u32) {
        let n = n.min(self.unreleased());
        self.released = self.released.wrapping_add(n);
        self.ring
            .word(CONSUMER)
            .store(self.released, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(cap: u32) -> Ring {
        let g = Geometry::new(0, cap, 16);
        let region = Arc::new(Region::anonymous(g.bytes()).unwrap());
        Ring::create(region, g).unwrap()
    }

    #[test]
    fn fifo_with_wraparound() {
        let r = ring(4);
        let mut p = Producer::new(r.clone());
        let mut c = Consumer::new(r);
        let mut out = [0u8; 16];
        for round in 0..10u8 {
            for i in 0..4u8 {
                assert!(p.push(&[round, i]));
            }
            assert!(!p.push(&[9]));
            p.publish();
            for i in 0..4u8 {
                assert!(c.next(&mut out));
                assert_eq!(out[..2], [round, i]);
            }
            assert!(!c.next(&mut out));
            assert_eq!(p.free(), 0);
            c.release(4);
            assert_eq!(p.free(), 4);
        }
    }

    #[test]
    fn a_corrupt_producer_index_is_clamped() {
        let r = ring(4);
        r.word(PRODUCER).store(1_000_000, Ordering::SeqCst);
        let c = Consumer::new(r);
        assert_eq!(c.available(), 4);
    }

    #[test]
    fn geometry_is_checked_against_the_region() {
        let g = Geometry::new(0, 1024, 64);
        let region = Arc::new(Region::anonymous(4096).unwrap());
        assert!(matches!(
            Ring::attach(Arc::clone(&region), g),
            Err(RingError::TooSmall { .. })
        ));
        // Layouts no NIC makes, as a broken or hostile one could pass them: refused, never an
        // overflow.
        for (capacity, slot_size) in [(3, 64), (0, 64), (4, 0), (4, 100), (1 << 31, 1 << 60)] {
            let g = Geometry {
                offset: 0,
                capacity,
                slot_size,
            };
            assert_eq!(
                Ring::attach(Arc::clone(&region), g).err(),
                Some(RingError::Layout {
                    capacity,
                    slot_size
                })
            );
        }
    }
}
