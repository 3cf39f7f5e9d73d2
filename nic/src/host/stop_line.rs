//! A stop signal that threads blocked on a socket can watch: an eventfd that is written once and
//! never read, so it stays readable for every thread that polls it.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};

use crate::eventfd::EventFd;

#[derive(Debug)]
pub struct StopLine {
    fd: EventFd,
}

impl StopLine {
    pub fn new() -> io::Result<StopLine> {
        Ok(StopLine {
            fd: EventFd::new()?,
        })
    }

    /// Raises the line: every present and future wait returns.
    pub fn raise(&self) {
        self.fd.signal();
    }

    /// Sleeps until `fd` reports one of `events` (or a hang-up or error), and returns what it
    /// reported; `None` once the line is raised.
    pub fn wait_for(&self, fd: BorrowedFd<'_>, events: PollFlags) -> Option<PollFlags> {
        match self.wait_until(fd, events, None) {
            Waited::Ready(flags) => Some(flags),
            Waited::Stopped | Waited::TimedOut => None,
        }
    }

    /// Like [`StopLine::wait_for`], giving up at `deadline`.
    pub fn wait_until(
        &self,
        fd: BorrowedFd<'_>,
        events: PollFlags,
        deadline: Option<Instant>,
    ) -> Waited {
        loop {
            let mut fds = [
                PollFd::from_borrowed_fd(fd, events),
                PollFd::new(&self.fd, PollFlags::IN),
            ];
            let left = match deadline.map(|d| d.saturating_duration_since(Instant::now())) {
                Some(Duration::ZERO) => return Waited::TimedOut,
                Some(left) => Some(timespec(left)),
                None => None,
            };
            match poll(&mut fds, left.as_ref()) {
                Ok(_) if !fds[1].revents().is_empty() => return Waited::Stopped,
                Ok(_) if !fds[0].revents().is_empty() => return Waited::Ready(fds[0].revents()),
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                // Only a bad descriptor makes poll fail: nothing more to wait for.
                Err(_) => return Waited::Stopped,
            }
        }
    }

    /// Sleeps for `time`; false if the line was raised meanwhile.
    pub fn sleep(&self, time: Duration) -> bool {
        let deadline = Instant::now() + time;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return true;
            }
            let mut fds = [PollFd::new(&self.fd, PollFlags::IN)];
            match poll(&mut fds, Some(&timespec(left))) {
                Ok(_) if !fds[0].revents().is_empty() => return false,
                Ok(_) | Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return false,
            }
        }
    }
}

fn timespec(d: Duration) -> Timespec {
    Timespec::try_from(d).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    })
}

/// How a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Waited {
    Ready(PollFlags),
    Stopped,
    TimedOut,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;
    use std::sync::Arc;

    #[test]
    fn a_wait_ends_on_its_descriptor_or_on_the_raised_line() {
        let stop = Arc::new(StopLine::new().unwrap());
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(b"x").unwrap();
        let seen = stop.wait_for(b.as_fd(), PollFlags::IN).unwrap();
        assert!(seen.contains(PollFlags::IN));

        let (_a, b) = UnixStream::pair().unwrap();
        let waiter = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || stop.wait_for(b.as_fd(), PollFlags::IN))
        };
        stop.raise();
        assert_eq!(waiter.join().unwrap(), None);
        // Raised for good: a later wait returns at once too.
        let (_c, d) = UnixStream::pair().unwrap();
        assert_eq!(stop.wait_for(d.as_fd(), PollFlags::IN), None);
    }
}
