//! Completion queues as the engine sees them: rings it produces completion entries into, and an
//! event line to wake a host program that waits for one.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::counters::{self, Counters};
use crate::eventfd::EventFd;
use crate::ring::{Producer, Ring};
use crate::types::{Wc, WcStatus};
use crate::wqe::{encode_cqe, CQE_SIZE};

/// An eventfd a host program sleeps on until the engine signals a completion.
#[derive(Debug)]
pub struct EventLine {
    fd: EventFd,
}

impl EventLine {
    pub fn new() -> io::Result<Arc<EventLine>> {
        Ok(Arc::new(EventLine {
            fd: EventFd::new()?,
        }))
    }

    pub fn from_fd(fd: OwnedFd) -> Arc<EventLine> {
        Arc::new(EventLine {
            fd: EventFd::from_fd(fd),
        })
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }

    pub fn signal(&self) {
        self.fd.signal();
    }

    /// Waits until signalled, `timeout` passes, or `hangup` (the NIC's end of a connection)
    /// hangs up. Consumes the signal.
    pub fn wait(&self, timeout: Option<Duration>, hangup: Option<BorrowedFd<'_>>) -> Woken {
        let timeout = timeout.map(|t| {
            Timespec::try_from(t).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
        let signalled = PollFd::new(&self.fd, PollFlags::IN);
        let (ready, hung_up) = match hangup {
            Some(hangup) => {
                // Only the hang-up is of interest: the connection's answers are read elsewhere.
                let mut fds = [
                    signalled,
                    PollFd::from_borrowed_fd(hangup, PollFlags::RDHUP),
                ];
                let ready = poll(&mut fds, timeout.as_ref()).unwrap_or(0);
                let gone = PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR;
                (ready, fds[1].revents().intersects(gone))
            }
            None => (poll(&mut [signalled], timeout.as_ref()).unwrap_or(0), false),
        };
        if hung_up {
            return Woken::HungUp;
        }
        self.fd.drain();
        if ready > 0 {
            Woken::Signalled
        } else {
            Woken::TimedOut
        }
    }
}

impl AsFd for EventLine {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Why [`EventLine::wait`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Woken {
    Signalled,
    TimedOut,
    /// The hang-up descriptor reported that the other end is gone.
    HungUp,
}

/// One completion queue, engine side. Its QPs may live on several engine threads
/// (`--threads`), so its producer side is behind a lock, held for a run of entries: uncontended
/// when the queue's QPs share one thread, as they do with one thread.
#[derive(Debug)]
pub struct Cq {
    pub cqn: u32,
    pub owner: u64,
    ring: Ring,
    event: Arc<EventLine>,
    producing: Mutex<Producing>,
}

#[derive(Debug)]
struct Producing {
    producer: Producer,
    /// Entries written but not yet published (see [`Cq::write`]).
    unpublished: bool,
}

impl Cq {
    pub fn new(cqn: u32, owner: u64, ring: Ring, event: Arc<EventLine>) -> Cq {
        Cq {
            cqn,
            owner,
            producing: Mutex::new(Producing {
                producer: Producer::new(ring.clone()),
                unpublished: false,
            }),
            ring,
            event,
        }
    }

    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    pub fn event(&self) -> &Arc<EventLine> {
        &self.event
    }

    /// Whether the queue overran: it lost a completion and is in error, as the spec has it
    /// (the QPs that complete on it are moved to the error state by the engine).
    pub fn overran(&self) -> bool {
        self.ring.overrun().load(Ordering::SeqCst) != 0
    }

    fn producing(&self) -> MutexGuard<'_, Producing> {
        self.producing.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes one completion, which the consumer sees from the next [`Cq::publish`] on: several
    /// written in a row cost one index store and at most one wake-up. A full queue overruns:
    /// the completion is lost, the queue is in error from then on (it takes no more), and a
    /// waiting consumer is woken to find that out, after the entries written before it.
    pub fn write(&self, wc: &Wc, counters: &Counters) {
        self.write_held(&mut self.producing(), wc, counters);
    }

    fn write_held(&self, p: &mut Producing, wc: &Wc, counters: &Counters) {
        let mut slot = [0u8; CQE_SIZE];
        encode_cqe(&mut slot, wc);
        if self.overran() || !p.producer.push(&slot) {
            counters::bump(&counters.cq_overflows);
            self.publish_held(p);
            if self.ring.overrun().swap(1, Ordering::SeqCst) == 0 {
                tracing::warn!(
                    cqn = self.cqn,
                    "completion queue overrun: completion lost, queue in error"
                );
                self.event.signal();
            }
            return;
        }
        p.unpublished = true;
        counters::bump(&counters.completions);
        if wc.status != WcStatus::Success {
            counters::bump(&counters.completion_errors);
        }
    }

    /// Makes the completions written so far visible to the consumer, and wakes it if it waits
    /// for as many as now wait in the queue (the notify word: 1 for any completion, more for a
    /// consumer that moderates its wake-ups, see `CompletionQueue::moderate`).
    pub fn publish(&self) {
        self.publish_held(&mut self.producing());
    }

    fn publish_held(&self, p: &mut Producing) {
        if !std::mem::take(&mut p.unpublished) {
            return;
        }
        // The data a completion reports is in host memory before the completion is.
        roce_hostmem::fence_writes();
        p.producer.publish();
        // A load first: a consumer busy polling asks for nothing, and a locked swap at every
        // publish would cost it the cache line for nothing. The consumer stores its wish before
        // it looks at the producer index, and we published before we look at its wish (both
        // sequentially consistent), so one of the two sides sees the other.
        let want = self.ring.notify().load(Ordering::SeqCst);
        if want != 0
            && p.producer.pending() >= want
            && self.ring.notify().swap(0, Ordering::SeqCst) != 0
        {
            self.event.signal();
        }
    }
}

/// All completion queues of a device, by number.
#[derive(Debug, Default)]
pub struct CqTable {
    slots: Vec<Option<Cq>>,
}

impl CqTable {
    /// The number the next queue gets.
    pub fn free_index(&self) -> u32 {
        self.slots
            .iter()
            .position(Option::is_none)
            .unwrap_or(self.slots.len()) as u32
    }

    /// Adds a queue under its number.
    pub fn put(&mut self, cq: Cq) {
        let index = cq.cqn as usize;
        if index >= self.slots.len() {
            self.slots.resize_with(index + 1, || None);
        }
        self.slots[index] = Some(cq);
    }

    pub fn get(&self, cqn: u32) -> Option<&Cq> {
        self.slots.get(cqn as usize)?.as_ref()
    }

    pub fn remove(&mut self, cqn: u32) -> Option<Cq> {
        self.slots.get_mut(cqn as usize)?.take()
    }

    /// Completes each of `completions` in order (a queue that vanished loses its own),
    /// publishing the entries of one queue written in a row with one index store and at most
    /// one wake-up, under one hold of its lock. Returns whether a queue overran because of them.
    pub fn complete_all(
        &self,
        completions: impl IntoIterator<Item = (u32, Wc)>,
        counters: &Counters,
    ) -> bool {
        let mut overran = false;
        let mut open: Option<(u32, &Cq, MutexGuard<'_, Producing>)> = None;
        for (cqn, wc) in completions {
            if open.as_ref().map(|(n, _, _)| *n) != Some(cqn) {
                if let Some((_, cq, mut held)) = open.take() {
                    cq.publish_held(&mut held);
                }
                open = self.get(cqn).map(|cq| (cqn, cq, cq.producing()));
            }
            if let Some((_, cq, held)) = open.as_mut() {
                let before = cq.overran();
                cq.write_held(held, &wc, counters);
                overran |= !before && cq.overran();
            }
        }
        if let Some((_, cq, mut held)) = open {
            cq.publish_held(&mut held);
        }
        overran
    }

    /// Whether queue `cqn` overran (see [`Cq::overran`]).
    pub fn overran(&self, cqn: u32) -> bool {
        self.get(cqn).is_some_and(Cq::overran)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Cq> {
        self.slots.iter().flatten()
    }
}

#[cfg(test)]
mod tests {
    use roce_hostmem::Region;

    use super::*;
    use crate::ring::{Consumer, Geometry};

    /// Queue `cqn` of `entries` slots, with the consumer's end of its ring.
    fn queue(cqn: u32, entries: u32) -> (Cq, Consumer) {
        let geometry = Geometry::new(0, entries, CQE_SIZE);
        let region = Arc::new(Region::anonymous(geometry.bytes()).unwrap());
        let ring = Ring::create(region, geometry).unwrap();
        let consumer = Consumer::new(ring.clone());
        (Cq::new(cqn, 0, ring, EventLine::new().unwrap()), consumer)
    }

    fn wc(wr_id: u64) -> Wc {
        Wc {
            wr_id,
            ..Wc::default()
        }
    }

    #[test]
    fn written_completions_are_seen_from_the_publish_on() {
        let counters = Counters::default();
        let (cq, consumer) = queue(0, 8);
        cq.ring().notify().store(1, Ordering::SeqCst);
        cq.write(&wc(1), &counters);
        cq.write(&wc(2), &counters);
        assert_eq!(consumer.available(), 0);
        cq.publish();
        assert_eq!(consumer.available(), 2);
        cq.publish();
        assert_eq!(cq.event().fd.drain(), 1, "one wake-up for the two");
    }

    #[test]
    fn a_consumer_that_asks_for_several_is_woken_once_that_many_wait() {
        let counters = Counters::default();
        let (cq, mut consumer) = queue(0, 8);
        // A completion left over from before: it counts towards the four.
        cq.write(&wc(0), &counters);
        cq.publish();
        cq.ring().notify().store(4, Ordering::SeqCst);
        for id in 1..3 {
            cq.write(&wc(id), &counters);
            cq.publish();
            assert_eq!(cq.event().fd.drain(), 0, "{} of 4 waiting", id + 1);
        }
        assert_eq!(cq.ring().notify().load(Ordering::SeqCst), 4);
        cq.write(&wc(3), &counters);
        cq.publish();
        assert_eq!(cq.event().fd.drain(), 1, "the fourth wakes");
        assert_eq!(
            cq.ring().notify().load(Ordering::SeqCst),
            0,
            "the wish is spent"
        );
        // What the consumer released no longer counts.
        let mut slot = [0u8; CQE_SIZE];
        while consumer.next(&mut slot) {
            consumer.release(1);
        }
        cq.ring().notify().store(2, Ordering::SeqCst);
        cq.write(&wc(4), &counters);
        cq.publish();
        assert_eq!(cq.event().fd.drain(), 0);
        cq.write(&wc(5), &counters);
        cq.publish();
        assert_eq!(cq.event().fd.drain(), 1);
        // Nobody asking: no wake-up, and the word stays untouched.
        cq.write(&wc(6), &counters);
        cq.publish();
        assert_eq!(cq.event().fd.drain(), 0);
        assert_eq!(cq.ring().notify().load(Ordering::SeqCst), 0);
    }

    #[test]
    fn a_batch_publishes_each_run_once_and_keeps_its_order() {
        let counters = Counters::default();
        let mut table = CqTable::default();
        let (a, mut from_a) = queue(0, 8);
        let (b, from_b) = queue(1, 8);
        for cq in [&a, &b] {
            cq.ring().notify().store(1, Ordering::SeqCst);
        }
        let (event_a, event_b) = (Arc::clone(a.event()), Arc::clone(b.event()));
        table.put(a);
        table.put(b);
        let batch = [(0, wc(1)), (0, wc(2)), (1, wc(3)), (0, wc(4)), (7, wc(5))];
        assert!(!table.complete_all(batch, &counters));
        assert_eq!((from_a.available(), from_b.available()), (3, 1));
        assert_eq!((event_a.fd.drain(), event_b.fd.drain()), (1, 1));
        let mut slot = [0u8; CQE_SIZE];
        let mut ids = Vec::new();
        while from_a.next(&mut slot) {
            ids.push(crate::wqe::decode_cqe(&slot).wr_id);
        }
        assert_eq!(ids, [1, 2, 4]);
        assert_eq!(counters.completions.load(Ordering::Relaxed), 4);
    }

    #[test]
    fn a_batch_that_overruns_a_queue_says_so_after_publishing_what_fit() {
        let counters = Counters::default();
        let mut table = CqTable::default();
        let (cq, consumer) = queue(0, 2);
        table.put(cq);
        let batch = (0..4).map(|i| (0, wc(i)));
        assert!(table.complete_all(batch, &counters));
        assert_eq!(consumer.available(), 2);
        assert!(table.overran(0));
        assert_eq!(counters.cq_overflows.load(Ordering::Relaxed), 2);
        // Already in error: no news.
        assert!(!table.complete_all([(0, wc(9))], &counters));
    }
}
