//! The send queue as the transport holds it: for every request fetched from the host's ring
//! the engine's copy plus its progress (PSNs, packets sent, response bytes received). The ring
//! itself is the engine's: it copies posted requests in ([`SendQueue::push`]) and gives a slot
//! back to the host only once its request is retired here, so the host cannot reuse a slot
//! whose work might still need retransmitting.
//!
//! Three free-running indices walk the queue: `head` (oldest request not yet retired), `next`
//! (the next request the requester transmits) and `fetched` (requests copied in).
//! `head <= next <= fetched`.

use crate::types::{QpCap, WcStatus};
use crate::wqe::{SendWqe, WqeError};

use super::psn;

/// A fetched send request and its progress.
#[derive(Debug, Clone)]
pub struct Entry {
    pub wqe: SendWqe,
    /// The request could not be decoded or checked: it completes with this status when it
    /// reaches the head.
    pub failed: Option<WcStatus>,
    /// PSNs have been given to the request (it was transmitted at least once).
    pub assigned: bool,
    pub first_psn: u32,
    /// PSNs the request uses: its packets, or for a READ the response packets it asks for.
    pub npkts: u32,
    /// Packets sent in the current pass (go-back-N rewinds it).
    pub sent: u32,
    /// READ: response packets received and placed; atomics: 1 once the result is in.
    pub responses: u32,
    /// Counted against max_rd_atomic.
    pub rd_counted: bool,
}

impl Entry {
    fn new(cap: &QpCap) -> Entry {
        Entry {
            wqe: SendWqe::with_capacity(cap),
            failed: None,
            assigned: false,
            first_psn: 0,
            npkts: 0,
            sent: 0,
            responses: 0,
            rd_counted: false,
        }
    }

    pub fn last_psn(&self) -> u32 {
        psn::add(self.first_psn, self.npkts.saturating_sub(1))
    }

    /// Whether `p` is one of the request's PSNs.
    pub fn covers(&self, p: u32) -> bool {
        self.assigned && {
            let d = psn::diff(p, self.first_psn);
            d >= 0 && (d as u32) < self.npkts
        }
    }

    /// All its packets were sent in the current pass.
    pub fn fully_sent(&self) -> bool {
        self.assigned && self.sent >= self.npkts
    }
}

/// The send queue.
#[derive(Debug)]
pub struct SendQueue {
    entries: Vec<Entry>,
    mask: u32,
    pub head: u32,
    pub next: u32,
    pub fetched: u32,
}

impl SendQueue {
    /// A queue of `capacity` requests (a power of two: the ring's).
    pub fn new(capacity: u32, cap: &QpCap) -> SendQueue {
        debug_assert!(capacity.is_power_of_two());
        SendQueue {
            entries: (0..capacity).map(|_| Entry::new(cap)).collect(),
            mask: capacity - 1,
            head: 0,
            next: 0,
            fetched: 0,
        }
    }

    /// Room for more requests.
    pub fn is_full(&self) -> bool {
        self.outstanding() as usize >= self.entries.len()
    }

    /// Adds the request posted in `slot`; `check` validates it. A request that cannot be
    /// decoded is kept as failed (it completes with an error in its turn) and its error
    /// returned.
    pub fn push(
        &mut self,
        slot: &[u8],
        cap: &QpCap,
        ud: bool,
        check: impl FnOnce(&SendWqe) -> Option<WcStatus>,
    ) -> Result<(), WqeError> {
        debug_assert!(!self.is_full());
        let entry = &mut self.entries[(self.fetched & self.mask) as usize];
        let decoded = entry.wqe.decode(slot, cap, ud);
        entry.failed = match &decoded {
            Ok(()) => check(&entry.wqe),
            Err(WqeError::UnknownOpcode(_)) => Some(WcStatus::LocQpOpErr),
            Err(_) => Some(WcStatus::LocLenErr),
        };
        entry.assigned = false;
        entry.sent = 0;
        entry.responses = 0;
        entry.rd_counted = false;
        self.fetched = self.fetched.wrapping_add(1);
        decoded
    }

    pub fn entry(&self, index: u32) -> &Entry {
        &self.entries[(index & self.mask) as usize]
    }

    pub fn entry_mut(&mut self, index: u32) -> &mut Entry {
        &mut self.entries[(index & self.mask) as usize]
    }

    /// Fetched requests not yet retired.
    pub fn outstanding(&self) -> u32 {
        self.fetched.wrapping_sub(self.head)
    }

    pub fn is_empty(&self) -> bool {
        self.head == self.fetched
    }

    /// Whether `index` lies in `head..fetched`.
    pub fn contains(&self, index: u32) -> bool {
        index.wrapping_sub(self.head) < self.outstanding()
    }

    /// Retires the head request (the engine then gives its slot back to the host).
    pub fn retire_head(&mut self) {
        if self.is_empty() {
            return;
        }
        self.head = self.head.wrapping_add(1);
        if self.contains(self.next) || self.next == self.fetched {
            // `next` is still at or after head.
        } else {
            self.next = self.head;
        }
    }

    /// The index of the outstanding request that covers `p`, if any.
    pub fn find_psn(&self, p: u32) -> Option<u32> {
        (0..self.outstanding())
            .map(|i| self.head.wrapping_add(i))
            .find(|&i| self.entry(i).covers(p))
    }

    /// Restarts transmission at PSN `p` (go-back-N): the request covering it resends from that
    /// packet, every later one from its first. Returns false if no request covers `p`.
    pub fn rewind_to(&mut self, p: u32) -> bool {
        let Some(index) = self.find_psn(p) else {
            return false;
        };
        let entry = self.entry_mut(index);
        entry.sent = psn::diff(p, entry.first_psn) as u32;
        let mut i = index.wrapping_add(1);
        while i != self.fetched {
            let e = self.entry_mut(i);
            if !e.assigned {
                break;
            }
            e.sent = 0;
            i = i.wrapping_add(1);
        }
        self.next = index;
        true
    }
}
