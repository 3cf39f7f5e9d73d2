//! A completion queue (`ibv_cq`): polled from its ring, waited on through its event line.

use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::context::Inner;
use super::VerbsError;
use crate::control::Request;
use crate::cq::{EventLine, Woken};
use crate::ring::Consumer;
use crate::types::Wc;
use crate::wqe::{decode_cqe, CQE_SIZE};

pub(super) struct CqInner {
    pub(super) ctx: Arc<Inner>,
    pub(super) cq: u32,
    pub(super) consumer: Mutex<Consumer>,
    pub(super) event: Arc<EventLine>,
    pub(super) moderation: Mutex<Moderation>,
}

/// When a host sleeping in [`CompletionQueue::try_wait`] is woken, as `ibv_modify_cq`'s
/// `cq_count` and `cq_period` moderate a hardware CQ's events: once `count` completions wait
/// in the queue, or once it has slept `period` and any completion waits. Fewer wake-ups for a
/// host that keeps many WRITEs in flight: each wake-up is a system call on the NIC's engine
/// thread and a scheduling of the host's thread, on the cores the engines run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moderation {
    pub count: u32,
    pub period: Duration,
}

impl Moderation {
    /// Every completion wakes a sleeping host (the default; also any `count` of 0 or 1, or a
    /// zero `period`).
    pub const NONE: Moderation = Moderation {
        count: 1,
        period: Duration::ZERO,
    };

    fn active(&self) -> bool {
        self.count > 1 && !self.period.is_zero()
    }
}

impl Default for Moderation {
    fn default() -> Moderation {
        Moderation::NONE
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        let _ = self.ctx.call(Request::DestroyCq { cq: self.cq });
    }
}

/// A completion queue (`ibv_cq`).
#[derive(Clone)]
pub struct CompletionQueue {
    pub(super) inner: Arc<CqInner>,
}

impl CompletionQueue {
    pub fn handle(&self) -> u32 {
        self.inner.cq
    }

    /// Takes up to `out.len()` completions; returns how many.
    pub fn poll(&self, out: &mut [Wc]) -> usize {
        let mut consumer = self
            .inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut slot = [0u8; CQE_SIZE];
        let mut n = 0;
        while n < out.len() && consumer.next(&mut slot) {
            consumer.release(1);
            out[n] = decode_cqe(&slot);
            n += 1;
        }
        n
    }

    /// Whether the NIC found the queue full and lost a completion. The queue is in error from
    /// then on (as the spec has it) and its QPs are moved to the error state; completions
    /// written before still come out of [`CompletionQueue::poll`], and
    /// [`CompletionQueue::try_wait`] fails with [`VerbsError::CqOverrun`] once they are taken.
    pub fn overran(&self) -> bool {
        let consumer = self
            .inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        consumer.ring().overrun().load(Ordering::SeqCst) != 0
    }

    /// Like [`CompletionQueue::try_wait`], for callers that treat a stopped NIC like a
    /// timeout: returns 0 then.
    pub fn wait(&self, out: &mut [Wc], timeout: Option<Duration>) -> usize {
        self.try_wait(out, timeout).unwrap_or(0)
    }

    /// Like [`CompletionQueue::poll`], but sleeps until at least one completion arrives or
    /// `timeout` passes (then returns 0). Completions already written are returned even after
    /// the NIC stopped; after that, a stopped NIC is [`VerbsError::DeviceGone`], never a hang.
    ///
    /// With [`CompletionQueue::moderate`] a sleep ends only once that many completions wait,
    /// or its period has passed and at least one does; completions already there when it is
    /// called are returned at once, without a sleep.
    pub fn try_wait(&self, out: &mut [Wc], timeout: Option<Duration>) -> Result<usize, VerbsError> {
        let ctx = &self.inner.ctx;
        let deadline = timeout.map(|t| Instant::now() + t);
        let moderation = self.moderation();
        // Until when a sleep waits for `moderation.count` completions rather than one.
        let mut moderated_until = None;
        loop {
            let n = self.poll(out);
            if n > 0 {
                return Ok(n);
            }
            ctx.check_alive()?;
            if self.overran() {
                return Err(VerbsError::CqOverrun(self.inner.cq));
            }
            let now = Instant::now();
            let moderated = moderation.active()
                && now < *moderated_until.get_or_insert(now + moderation.period);
            // Ask for an event, then look once more: a completion written before the request
            // was seen would otherwise be slept through.
            self.notify_flag(if moderated { moderation.count } else { 1 });
            let n = self.poll(out);
            if n > 0 {
                self.notify_flag(0);
                return Ok(n);
            }
            let mut left = deadline.map(|d| d.saturating_duration_since(now));
            if left == Some(Duration::ZERO) {
                self.notify_flag(0);
                return Ok(0);
            }
            if let (true, Some(until)) = (moderated, moderated_until) {
                let period_left = until - now;
                left = Some(left.map_or(period_left, |l| l.min(period_left)));
            }
            if self.inner.event.wait(left, ctx.backend.hangup_fd()) == Woken::HungUp {
                self.notify_flag(0);
                ctx.gone.store(true, Ordering::Relaxed);
                // Completions the NIC flushed on its way out come first.
                let n = self.poll(out);
                return if n > 0 { Ok(n) } else { Err(ctx.device_gone()) };
            }
        }
    }

    /// `ibv_modify_cq`'s moderation, for [`CompletionQueue::try_wait`] and
    /// [`CompletionQueue::wait`] (not for [`CompletionQueue::request_notify`]: a completion
    /// channel's event still fires at the next completion).
    pub fn moderate(&self, moderation: Moderation) {
        *self
            .inner
            .moderation
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = moderation;
    }

    /// The moderation [`CompletionQueue::moderate`] set last.
    pub fn moderation(&self) -> Moderation {
        *self
            .inner
            .moderation
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    }

    /// `ibv_req_notify_cq`: the next completion signals the CQ's event descriptor.
    pub fn request_notify(&self) {
        self.notify_flag(1);
    }

    /// The descriptor that becomes readable when a requested notification fires (a
    /// completion channel watches it).
    pub fn event_fd(&self) -> BorrowedFd<'_> {
        self.inner.event.as_fd()
    }

    /// Consumes a fired notification without waiting; false if none had fired.
    pub fn take_event(&self) -> bool {
        self.inner.event.wait(Some(Duration::ZERO), None) == Woken::Signalled
    }

    pub(super) fn notify_flag(&self, value: u32) {
        let consumer = self
            .inner
            .consumer
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        consumer
            .ring()
            .notify()
            .store(value, std::sync::atomic::Ordering::SeqCst);
    }
}
