//! An eventfd: a counter in the kernel that one side adds to, to wake another that sleeps in
//! `poll(2)` until it is readable. The engine's doorbell ([`crate::waker`]), a completion
//! queue's event line ([`crate::cq`]) and the control server's stop line are each one of these.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::event::{eventfd, EventfdFlags};

#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd, non-blocking (a drain never waits) and closed on exec.
    pub fn new() -> io::Result<EventFd> {
        Ok(EventFd(eventfd(
            0,
            EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK,
        )?))
    }

    /// An eventfd another process handed over.
    pub fn from_fd(fd: OwnedFd) -> EventFd {
        EventFd(fd)
    }

    /// Adds one: the eventfd becomes readable. A full counter (EAGAIN) already is, so a failed
    /// write loses nothing.
    pub fn signal(&self) {
        let _ = rustix::io::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Takes the count, 0 if nothing was signalled: the eventfd is no longer readable.
    pub fn drain(&self) -> u64 {
        let mut count = [0u8; 8];
        match rustix::io::read(&self.0, &mut count) {
            Ok(8) => u64::from_ne_bytes(count),
            _ => 0,
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_add_up_until_drained() {
        let fd = EventFd::new().unwrap();
        assert_eq!(fd.drain(), 0);
        fd.signal();
        fd.signal();
        assert_eq!(fd.drain(), 2);
        assert_eq!(fd.drain(), 0);
    }
}
