//! The receive queue as the transport holds it: the receive requests fetched from the host's
//! ring, oldest first, waiting for a SEND (or a WRITE with immediate) to take them. As with the
//! send queue, the ring is the engine's: it copies posted requests in ([`RecvQueue::push`]) and
//! gives a slot back to the host once the responder has taken its request.

use crate::types::QpCap;
use crate::wqe::{RecvWqe, WqeError};

/// A fetched receive request.
#[derive(Debug, Clone)]
struct Entry {
    wqe: RecvWqe,
    /// It could not be decoded: it completes with an error when its turn comes.
    malformed: Option<WqeError>,
}

/// The receive queue.
#[derive(Debug)]
pub struct RecvQueue {
    entries: Vec<Entry>,
    mask: u32,
    /// Oldest request not yet taken.
    pub head: u32,
    /// Requests copied in.
    pub fetched: u32,
}

impl RecvQueue {
    /// A queue of `capacity` requests (a power of two: the ring's).
    pub fn new(capacity: u32, cap: &QpCap) -> RecvQueue {
        debug_assert!(capacity.is_power_of_two());
        RecvQueue {
            entries: (0..capacity)
                .map(|_| Entry {
                    wqe: RecvWqe::with_capacity(cap),
                    malformed: None,
                })
                .collect(),
            mask: capacity - 1,
            head: 0,
            fetched: 0,
        }
    }

    /// Requests fetched and not yet taken.
    pub fn len(&self) -> u32 {
        self.fetched.wrapping_sub(self.head)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn is_full(&self) -> bool {
        self.len() as usize >= self.entries.len()
    }

    /// Adds the request posted in `slot`.
    pub fn push(&mut self, slot: &[u8], cap: &QpCap) {
        debug_assert!(!self.is_full());
        let entry = &mut self.entries[(self.fetched & self.mask) as usize];
        entry.malformed = entry.wqe.decode(slot, cap).err();
        self.fetched = self.fetched.wrapping_add(1);
    }

    /// Takes the oldest request into `into` (whose buffers are swapped in its place, so nothing
    /// is allocated). `None` when the queue is empty; `Some(Err)` when the request was
    /// malformed (`into.wr_id` still names it).
    pub fn take(&mut self, into: &mut RecvWqe) -> Option<Result<(), WqeError>> {
        if self.is_empty() {
            return None;
        }
        let entry = &mut self.entries[(self.head & self.mask) as usize];
        self.head = self.head.wrapping_add(1);
        std::mem::swap(into, &mut entry.wqe);
        Some(match entry.malformed.take() {
            Some(e) => Err(e),
            None => Ok(()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{RecvWr, Sge};
    use crate::wqe::{encode_recv, recv_slot_size};

    fn slot(cap: &QpCap, wr_id: u64, sges: &[Sge]) -> Vec<u8> {
        let mut slot = vec![0; recv_slot_size(cap)];
        encode_recv(
            &mut slot,
            &RecvWr {
                wr_id,
                sg_list: sges,
            },
            cap,
        )
        .unwrap();
        slot
    }

    #[test]
    fn receives_are_taken_oldest_first_and_a_malformed_one_is_named() {
        let cap = QpCap {
            max_recv_sge: 1,
            ..QpCap::default()
        };
        let mut q = RecvQueue::new(2, &cap);
        let sge = Sge {
            addr: 0x40,
            length: 100,
            lkey: 7,
        };
        q.push(&slot(&cap, 1, &[sge]), &cap);
        // Two entries where the QP allows one: decoded as malformed, kept in its turn.
        let mut two = slot(&cap, 2, &[sge]);
        two[8..12].copy_from_slice(&2u32.to_ne_bytes());
        q.push(&two, &cap);
        assert!(q.is_full());
        let mut wqe = RecvWqe::with_capacity(&cap);
        assert_eq!(q.take(&mut wqe), Some(Ok(())));
        assert_eq!((wqe.wr_id, wqe.capacity()), (1, 100));
        assert!(matches!(
            q.take(&mut wqe),
            Some(Err(WqeError::TooManySge(2, 1)))
        ));
        assert_eq!(wqe.wr_id, 2);
        assert_eq!(q.take(&mut wqe), None);
        // The slots are reused, wrapping around.
        q.push(&slot(&cap, 3, &[sge]), &cap);
        assert_eq!(q.take(&mut wqe), Some(Ok(())));
        assert_eq!((wqe.wr_id, q.len()), (3, 0));
    }
}
