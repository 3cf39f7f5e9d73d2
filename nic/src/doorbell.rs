//! Doorbell records: a doorbell that names its QP. A host that posts work sets its QP's bit in
//! a bitmap in memory it shares with the NIC (as an mlx5 host writes a QP's doorbell record,
//! and as Soft-RoCE schedules the posting QP's task), then wakes the engine if it sleeps. The
//! engine drains the bits it finds set and looks at those QPs only, so that a pass costs what
//! the QPs that rang cost, not one load of every idle QP's send ring.
//!
//! Each host in another process has a record of its own, in the page after its "sleeping" word;
//! the hosts in the NIC's process share one record in private memory. A record is a two-level
//! bitmap: one bit per QP number in the leaf words, and one summary bit per leaf word, so that
//! an engine finds the few set bits of a large record in a few loads.
//!
//! ```text
//! offset 0                sleeping word (u32; see `Waker`), hosts in other processes only
//! offset 64               summary words (u64): bit j of word s <=> leaf word 64 s + j has a bit
//! offset 64 + 8 S         leaf words (u64): bit b of word w <=> QP number 64 w + b rang
//! ```
//!
//! A record is written by an untrusted host: whatever it holds, draining it reads and clears
//! at most every word once (bounded work per pass), and every QP number it names is only a hint
//! the engine checks against the QPs the ringing host owns.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::engine::FIRST_QPN;
use crate::waker::Waker;

/// Where a host's record starts in its doorbell region (after the sleeping word's cache line).
pub const RECORD_OFFSET: usize = 64;
/// The most QP numbers a record covers (128 KiB of leaves): a NIC allowed more QPs than this
/// numbers no QP beyond it.
pub const MAX_QPNS: u32 = 1 << 20;

/// The QP numbers a NIC allowed `max_qp` QPs may give out (QP numbers are reused lowest first,
/// so they stay below [`FIRST_QPN`] + `max_qp`), up to [`MAX_QPNS`].
pub fn qpns_for(max_qp: u64) -> u32 {
    (u64::from(FIRST_QPN).saturating_add(max_qp)).min(u64::from(MAX_QPNS)) as u32
}

/// One record's bits: which QPs rang since the engine last looked.
pub struct ReadyBits {
    words: *const AtomicU64,
    summaries: usize,
    leaves: usize,
    /// Keeps the memory behind `words` mapped.
    _keep: Arc<dyn Send + Sync + fmt::Debug>,
}

// SAFETY: the words are only accessed atomically, and `_keep` keeps their memory alive.
unsafe impl Send for ReadyBits {}
// SAFETY: as for Send: every access to the words is atomic.
unsafe impl Sync for ReadyBits {}

impl fmt::Debug for ReadyBits {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadyBits")
            .field("qpns", &self.qpns())
            .finish()
    }
}

/// The summary and leaf words of a record covering `qpns` QP numbers.
fn shape(qpns: u32) -> (usize, usize) {
    let leaves = (qpns as usize).div_ceil(64).max(1);
    (leaves.div_ceil(64), leaves)
}

impl ReadyBits {
    /// Bytes of a record covering `qpns` QP numbers.
    pub fn bytes(qpns: u32) -> usize {
        let (summaries, leaves) = shape(qpns);
        (summaries + leaves) * 8
    }

    /// A record in private memory (hosts in the NIC's process).
    pub fn private(qpns: u32) -> ReadyBits {
        let (summaries, leaves) = shape(qpns);
        let words: Arc<[AtomicU64]> = (0..summaries + leaves).map(|_| AtomicU64::new(0)).collect();
        ReadyBits {
            words: words.as_ptr(),
            summaries,
            leaves,
            _keep: Arc::new(words),
        }
    }

    /// A record at `ptr`, covering `qpns` QP numbers.
    ///
    /// # Safety
    /// `ptr` must be 8-byte aligned and point to [`ReadyBits::bytes`]`(qpns)` bytes that `keep`
    /// keeps mapped, accessed by everyone only atomically.
    pub unsafe fn at(
        ptr: *mut u8,
        qpns: u32,
        keep: Arc<dyn Send + Sync + fmt::Debug>,
    ) -> ReadyBits {
        let (summaries, leaves) = shape(qpns);
        ReadyBits {
            words: ptr as *const AtomicU64,
            summaries,
            leaves,
            _keep: keep,
        }
    }

    /// How many QP numbers (from 0) the record covers.
    pub fn qpns(&self) -> u32 {
        (self.leaves * 64).min(u32::MAX as usize) as u32
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < self.summaries + self.leaves);
        // SAFETY: i is within the record (callers index summaries below `summaries` and leaves
        // below `leaves`), which the constructors keep mapped and aligned.
        unsafe { &*self.words.add(i) }
    }

    /// Host side: marks QP `qpn` as rung. False if the record does not cover it.
    pub fn set(&self, qpn: u32) -> bool {
        let leaf = qpn as usize / 64;
        if leaf >= self.leaves {
            return false;
        }
        // Leaf first, then summary: an engine that clears the summary before the leaves sees
        // either this leaf bit now or the summary bit on its next pass.
        self.word(self.summaries + leaf)
            .fetch_or(1 << (qpn % 64), Ordering::SeqCst);
        self.word(leaf / 64)
            .fetch_or(1 << (leaf % 64), Ordering::SeqCst);
        true
    }

    /// Engine side: takes every bit set and calls `f` with its QP number, each at most once.
    /// Reads each word at most once, whatever the record holds. Returns how many bits were set.
    pub fn drain(&self, mut f: impl FnMut(u32)) -> usize {
        let mut n = 0;
        for s in 0..self.summaries {
            let summary = self.word(s);
            // A load first: an idle record is not written (its cache line stays shared).
            if summary.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut marked = summary.swap(0, Ordering::SeqCst);
            while marked != 0 {
                let leaf = s * 64 + marked.trailing_zeros() as usize;
                marked &= marked - 1;
                // A summary bit past the last leaf is garbage a host wrote: nothing to read.
                if leaf >= self.leaves {
                    continue;
                }
                let mut bits = self.word(self.summaries + leaf).swap(0, Ordering::SeqCst);
                while bits != 0 {
                    let qpn = leaf * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    n += 1;
                    f(qpn as u32);
                }
            }
        }
        n
    }

    /// Every word of the record (summaries, then leaves), as a host may write them: for tests
    /// that play a hostile host.
    pub fn words(&self) -> impl Iterator<Item = &AtomicU64> {
        (0..self.summaries + self.leaves).map(|i| self.word(i))
    }
}

/// A host's doorbell: its record, and the line that wakes the engine.
#[derive(Debug, Clone)]
pub struct Doorbell {
    ready: Arc<ReadyBits>,
    waker: Arc<Waker>,
}

impl Doorbell {
    pub fn new(ready: Arc<ReadyBits>, waker: Arc<Waker>) -> Doorbell {
        Doorbell { ready, waker }
    }

    /// Says that QP `qpn` has new work (after the work was published), and wakes the engine if
    /// it sleeps.
    pub fn ring(&self, qpn: u32) {
        // The NIC numbers no QP past its record (see `qpns_for`).
        let covered = self.ready.set(qpn);
        debug_assert!(covered, "QP {qpn} is past the doorbell record");
        self.waker.wake();
    }

    pub fn ready(&self) -> &Arc<ReadyBits> {
        &self.ready
    }

    pub fn waker(&self) -> &Arc<Waker> {
        &self.waker
    }
}

/// One record the engine drains, and whose QPs it may name: the QPs of the host with that
/// number, or (`None`) of the hosts in the NIC's process.
#[derive(Debug, Clone)]
pub struct Record {
    pub host: Option<u32>,
    pub ready: Arc<ReadyBits>,
}

/// The records an engine drains: hosts come and go while it runs.
#[derive(Debug)]
pub struct Records {
    list: Mutex<Arc<[Record]>>,
    /// Bumped on every change, so that the engine takes the list again only then.
    version: AtomicU64,
}

impl Records {
    pub fn new(first: Record) -> Records {
        Records {
            list: Mutex::new(Arc::new([first])),
            version: AtomicU64::new(0),
        }
    }

    pub fn add(&self, record: Record) {
        self.change(|list| list.push(record));
    }

    pub fn remove(&self, ready: &Arc<ReadyBits>) {
        self.change(|list| list.retain(|r| !Arc::ptr_eq(&r.ready, ready)));
    }

    fn change(&self, f: impl FnOnce(&mut Vec<Record>)) {
        let mut list = self.list.lock().unwrap_or_else(|e| e.into_inner());
        let mut new = list.to_vec();
        f(&mut new);
        *list = new.into();
        self.version.fetch_add(1, Ordering::SeqCst);
    }

    /// The list, if it changed since version `seen` (which is updated).
    pub fn changed_since(&self, seen: &mut u64) -> Option<Arc<[Record]>> {
        let now = self.version.load(Ordering::SeqCst);
        if now == *seen {
            return None;
        }
        *seen = now;
        Some(Arc::clone(
            &self.list.lock().unwrap_or_else(|e| e.into_inner()),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drained(bits: &ReadyBits) -> Vec<u32> {
        let mut out = Vec::new();
        bits.drain(|q| out.push(q));
        out
    }

    #[test]
    fn a_rung_qp_is_drained_once_and_the_record_is_empty_after() {
        let bits = ReadyBits::private(5000);
        for qpn in [4999, 17, 64, 17, 0, 4096] {
            assert!(bits.set(qpn));
        }
        assert!(!bits.set(bits.qpns()), "a QP past the record is refused");
        assert_eq!(drained(&bits), [0, 17, 64, 4096, 4999]);
        assert_eq!(drained(&bits), [] as [u32; 0]);
        assert!(bits.words().all(|w| w.load(Ordering::Relaxed) == 0));
    }

    #[test]
    fn a_record_full_of_garbage_is_drained_in_one_bounded_pass() {
        let bits = ReadyBits::private(200);
        for word in bits.words() {
            word.store(u64::MAX, Ordering::Relaxed);
        }
        // Every leaf bit once (the summary's bits past the last leaf are ignored), no more.
        let all = drained(&bits);
        assert_eq!(all.len(), bits.qpns() as usize);
        assert_eq!(all, (0..bits.qpns()).collect::<Vec<_>>());
        assert_eq!(drained(&bits), [] as [u32; 0]);
    }

    #[test]
    fn leaf_bits_without_their_summary_bit_wait_for_the_next_ring() {
        let bits = ReadyBits::private(256);
        // A host that wrote a leaf word directly (no summary bit): nothing yet.
        bits.words()
            .nth(1)
            .unwrap()
            .store(0b1010, Ordering::Relaxed);
        assert_eq!(drained(&bits), [] as [u32; 0]);
        bits.set(2);
        assert_eq!(drained(&bits), [1, 2, 3]);
    }

    #[test]
    fn the_records_list_is_taken_again_only_after_a_change() {
        let first = Arc::new(ReadyBits::private(64));
        let records = Records::new(Record {
            host: None,
            ready: Arc::clone(&first),
        });
        let mut seen = u64::MAX;
        assert_eq!(records.changed_since(&mut seen).unwrap().len(), 1);
        assert!(records.changed_since(&mut seen).is_none());
        let second = Arc::new(ReadyBits::private(64));
        records.add(Record {
            host: Some(7),
            ready: Arc::clone(&second),
        });
        let list = records.changed_since(&mut seen).unwrap();
        assert_eq!(
            list.iter().map(|r| r.host).collect::<Vec<_>>(),
            [None, Some(7)]
        );
        records.remove(&second);
        assert_eq!(records.changed_since(&mut seen).unwrap().len(), 1);
    }

    #[test]
    fn record_sizes_follow_the_qp_limit_up_to_the_cap() {
        assert_eq!(qpns_for(256), FIRST_QPN + 256);
        assert_eq!(qpns_for(u64::MAX), MAX_QPNS);
        assert_eq!(ReadyBits::bytes(FIRST_QPN + 256), (1 + 5) * 8);
    }
}
