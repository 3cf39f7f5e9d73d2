//! Shared receive queues as the engine holds them: one ring of receive requests in host shared
//! memory that several QPs of the same protection domain take their receives from, in posting
//! order, whichever QP a SEND arrives on (IBTA 10.2.9; rxe's `rxe_srq.c` and `get_srq_wqe`).
//!
//! The host posts into the ring as into a QP's receive ring; the engine copies requests out
//! only when a QP takes one, so the ring is the queue and nothing waits in the engine. The SRQ
//! limit is the low watermark of IBTA 11.2.3 ("SRQ limit reached"): armed by a modify with a
//! non-zero limit, it fires once when a take leaves fewer requests posted than the limit, and
//! is disarmed (the limit reads 0) from then on, as in rxe.

use std::sync::{Arc, Mutex, MutexGuard};

use roce_hostmem::{PdId, Region};

use crate::control::ClientId;
use crate::ring::{Consumer, Geometry, Ring, RingError};
use crate::transport::recv_queue::RecvQueue;
use crate::types::QpCap;
use crate::wqe::{recv_slot_size, RecvWqe, WqeError};

/// What a shared receive queue was created with, and its limit now (`ibv_query_srq`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct SrqAttr {
    /// Requests the queue holds (its ring's capacity).
    pub max_wr: u32,
    /// Scatter/gather entries of one request.
    pub max_sge: u32,
    /// The armed limit, or 0 when no limit event is armed.
    pub srq_limit: u32,
}

/// Why a shared receive queue's attributes were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SrqError {
    #[error("srq_limit {limit} is above the queue's {max_wr} requests")]
    LimitAboveSize { limit: u32, max_wr: u32 },
}

impl From<SrqError> for crate::error::VerbsError {
    fn from(e: SrqError) -> Self {
        crate::error::VerbsError::Invalid(e.to_string())
    }
}

/// A shared receive queue, engine side.
#[derive(Debug)]
pub struct Srq {
    pub srqn: u32,
    /// The client (host program) that created it.
    pub owner: ClientId,
    pub pd: PdId,
    /// The receive sizes requests are decoded with (`max_recv_wr`/`max_recv_sge` only).
    cap: QpCap,
    limit: u32,
    region: Arc<Region>,
    ring: Consumer,
    /// The one request being decoded and taken (a queue of one: see [`Srq::take`]).
    staged: RecvQueue,
    slot: Vec<u8>,
}

/// A shared receive queue as its QPs hold it: one engine thread takes from it, so the lock is
/// never contended; it lets the QPs and the engine's table share it without lifetimes.
pub type SharedSrq = Arc<Mutex<Srq>>;

/// Locks a shared receive queue (a poisoned lock still holds a consistent queue: every change
/// is a ring index or a slot copy).
pub fn lock(srq: &SharedSrq) -> MutexGuard<'_, Srq> {
    srq.lock().unwrap_or_else(|e| e.into_inner())
}

/// The ring geometry of a shared receive queue of `max_wr` requests of `max_sge` entries.
pub fn ring_layout(max_wr: u32, max_sge: u32) -> Geometry {
    Geometry::new(0, max_wr, recv_slot_size(&recv_cap(max_wr, max_sge)))
}

fn recv_cap(max_wr: u32, max_sge: u32) -> QpCap {
    QpCap {
        max_recv_wr: max_wr,
        max_recv_sge: max_sge,
        ..QpCap::default()
    }
}

/// What [`Srq::take`] found.
#[derive(Debug, PartialEq, Eq)]
pub struct Taken {
    /// The request, or why it could not be decoded (`into.wr_id` still names it).
    pub request: Result<(), WqeError>,
    /// This take left fewer requests posted than the armed limit: the limit event fires (and
    /// the limit is disarmed).
    pub limit_reached: bool,
}

impl Srq {
    /// A new, empty shared receive queue with its ring laid out in `region`.
    pub fn new(
        srqn: u32,
        owner: ClientId,
        pd: PdId,
        max_wr: u32,
        max_sge: u32,
        region: Arc<Region>,
    ) -> Result<Srq, RingError> {
        let geometry = ring_layout(max_wr, max_sge);
        let ring = Ring::create(Arc::clone(&region), geometry)?;
        let cap = recv_cap(geometry.capacity, max_sge.max(1));
        Ok(Srq {
            srqn,
            owner,
            pd,
            cap,
            limit: 0,
            region,
            ring: Consumer::new(ring),
            staged: RecvQueue::new(1, &cap),
            slot: vec![0; geometry.slot_size],
        })
    }

    /// The region holding the ring, and its geometry.
    pub fn ring(&self) -> (&Arc<Region>, Geometry) {
        (&self.region, self.ring.ring().geometry())
    }

    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.cap.max_recv_wr,
            max_sge: self.cap.max_recv_sge,
            srq_limit: self.limit,
        }
    }

    /// The scatter/gather entries a QP taking from this queue must have room for.
    pub fn max_sge(&self) -> u32 {
        self.cap.max_recv_sge
    }

    /// Arms the limit event at `limit` posted requests (0 disarms it).
    pub fn set_limit(&mut self, limit: u32) -> Result<(), SrqError> {
        if limit > self.cap.max_recv_wr {
            return Err(SrqError::LimitAboveSize {
                limit,
                max_wr: self.cap.max_recv_wr,
            });
        }
        self.limit = limit;
        Ok(())
    }

    /// Requests posted and not yet taken, as far as a well-behaved host could have posted.
    pub fn posted(&self) -> u32 {
        self.ring.available()
    }

    /// Takes the oldest posted request into `into` (its buffers are swapped, nothing is
    /// allocated), and gives its slot back to the host at once. `None` when nothing is posted.
    pub fn take(&mut self, into: &mut RecvWqe) -> Option<Taken> {
        if !self.ring.next(&mut self.slot) {
            return None;
        }
        self.staged.push(&self.slot, &self.cap);
        self.ring.release(1);
        let request = self.staged.take(into)?;
        let limit_reached = self.limit > 0 && self.posted() < self.limit;
        if limit_reached {
            self.limit = 0;
        }
        Some(Taken {
            request,
            limit_reached,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::Producer;
    use crate::types::{RecvWr, Sge};
    use crate::wqe::encode_recv;

    fn srq(max_wr: u32) -> (Srq, Producer) {
        let g = ring_layout(max_wr, 1);
        let region = Arc::new(Region::anonymous(g.bytes()).unwrap());
        let mut mrs = roce_hostmem::MrTable::new();
        let srq = Srq::new(1, 7, mrs.alloc_pd(), max_wr, 1, Arc::clone(&region)).unwrap();
        let ring = Ring::attach(region, g).unwrap();
        (srq, Producer::new(ring))
    }

    /// Posts as a host would, with up to three entries (a 64-byte slot has room for them,
    /// whatever `max_sge` the queue allows).
    fn post(p: &mut Producer, wr_id: u64, sges: &[Sge]) {
        let mut slot = vec![0; p.ring().slot_size()];
        let wr = RecvWr {
            wr_id,
            sg_list: sges,
        };
        encode_recv(&mut slot, &wr, &recv_cap(4, 3)).unwrap();
        assert!(p.push(&slot));
        p.publish();
    }

    const SGE: Sge = Sge {
        addr: 0x1000,
        length: 64,
        lkey: 3,
    };

    #[test]
    fn requests_are_taken_in_posting_order_and_their_slots_given_back() {
        let (mut q, mut p) = srq(4);
        let mut wqe = RecvWqe::with_capacity(&q.cap);
        for id in 1..=4 {
            post(&mut p, id, &[SGE]);
        }
        assert_eq!(p.free(), 0);
        for id in 1..=4 {
            let taken = q.take(&mut wqe).unwrap();
            assert_eq!((taken.request, wqe.wr_id), (Ok(()), id));
            assert_eq!(wqe.sges, [SGE]);
        }
        assert_eq!(q.take(&mut wqe), None);
        assert_eq!(p.free(), 4);
    }

    #[test]
    fn the_limit_fires_once_below_the_watermark_then_disarms() {
        let (mut q, mut p) = srq(8);
        let mut wqe = RecvWqe::with_capacity(&q.cap);
        assert_eq!(
            q.set_limit(9),
            Err(SrqError::LimitAboveSize {
                limit: 9,
                max_wr: 8
            })
        );
        q.set_limit(2).unwrap();
        for id in 0..4 {
            post(&mut p, id, &[SGE]);
        }
        // 4 posted: taking leaves 3, then 2, then 1 (below 2: the event), then 0.
        let fired: Vec<bool> = (0..4)
            .map(|_| q.take(&mut wqe).unwrap().limit_reached)
            .collect();
        assert_eq!(fired, [false, false, true, false]);
        assert_eq!(q.attr().srq_limit, 0);
    }

    #[test]
    fn a_malformed_request_is_named_and_its_slot_still_given_back() {
        let (mut q, mut p) = srq(2);
        let mut wqe = RecvWqe::with_capacity(&q.cap);
        post(&mut p, 9, &[SGE, SGE]);
        let taken = q.take(&mut wqe).unwrap();
        assert_eq!(taken.request, Err(WqeError::TooManySge(2, 1)));
        assert_eq!(wqe.wr_id, 9);
        assert_eq!(p.free(), 2);
    }
}
