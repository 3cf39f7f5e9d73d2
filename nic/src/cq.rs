//! Completion queues as the engine sees them: rings it produces completion entries into, and an
//! event line to wake a host program that waits for one.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;
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

/// One completion queue, engine side.
#[derive(Debug)]
pub struct Cq {
    pub cqn: u32,
    pub owner: u64,
    producer: Producer,
    event: Arc<EventLine>,
}

impl Cq {
    pub fn new(cqn: u32, owner: u64, ring: Ring, event: Arc<EventLine>) -> Cq {
        Cq {
            cqn,
            owner,
            producer: Producer::new(ring),
            event,
        }
    }

    pub fn ring(&self) -> &Ring {
        self.producer.ring()
    }

    pub fn event(&self) -> &Arc<EventLine> {
        &self.event
    }

    /// Whether the queue overran: it lost a completion and is in error, as the spec has it
    /// (the QPs that complete on it are moved to the error state by the engine).
    pub fn overran(&self) -> bool {
        self.producer.ring().overrun().load(Ordering::SeqCst) != 0
    }

    /// Writes one completion and wakes a waiting consumer. A full queue overruns: the
    /// completion is lost, the queue is in error from then on (it takes no more), and a waiting
    /// consumer is woken to find that out.
    pub fn push(&mut self, wc: &Wc, counters: &Counters) {
        let mut slot = [0u8; CQE_SIZE];
        encode_cqe(&mut slot, wc);
        if self.overran() || !self.producer.push(&slot) {
            counters::bump(&counters.cq_overflows);
            if self.producer.ring().overrun().swap(1, Ordering::SeqCst) == 0 {
                tracing::warn!(
                    cqn = self.cqn,
                    "completion queue overrun: completion lost, queue in error"
                );
                self.event.signal();
            }
            return;
        }
        self.producer.publish();
        counters::bump(&counters.completions);
        if wc.status != WcStatus::Success {
            counters::bump(&counters.completion_errors);
        }
        if self.producer.ring().notify().swap(0, Ordering::SeqCst) != 0 {
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

    pub fn get_mut(&mut self, cqn: u32) -> Option<&mut Cq> {
        self.slots.get_mut(cqn as usize)?.as_mut()
    }

    pub fn remove(&mut self, cqn: u32) -> Option<Cq> {
        self.slots.get_mut(cqn as usize)?.take()
    }

    /// Completes on queue `cqn`; a queue that vanished loses the completion.
    pub fn complete(&mut self, cqn: u32, wc: &Wc, counters: &Counters) {
        if let Some(cq) = self.get_mut(cqn) {
            cq.push(wc, counters);
        }
    }

    /// Whether queue `cqn` overran (see [`Cq::overran`]).
    pub fn overran(&self, cqn: u32) -> bool {
        self.get(cqn).is_some_and(Cq::overran)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Cq> {
        self.slots.iter().flatten()
    }
}
