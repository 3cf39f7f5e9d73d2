//! Messages with file descriptors over a Unix stream socket: each message is a 4-byte
//! little-endian length and that many bytes, and the descriptors that go with it travel as
//! SCM_RIGHTS ancillary data on the same `sendmsg`. The kernel attaches them to the message's
//! first byte, so the reader collects them while reading the message.
//!
//! rustix does the `cmsghdr` arithmetic (std's ancillary API is not stable yet); this module only
//! frames messages and refuses what does not fit.
//!
//! Every transfer can be bounded ([`Limit`]): the NIC gives a host a few seconds to finish a
//! message it started and to take an answer, and stops waiting at once when it shuts down, so
//! a host that sends half a message, or never reads, holds nothing up but itself.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::Instant;

use rustix::event::{poll, PollFd, PollFlags};
use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

use super::stop_line::{StopLine, Waited};

/// When a transfer gives up: when `stop` is raised (an error of kind `Interrupted`), or at
/// `deadline` (`TimedOut`). The default waits for ever.
#[derive(Clone, Copy, Default)]
pub struct Limit<'a> {
    pub stop: Option<&'a StopLine>,
    pub deadline: Option<Instant>,
}

impl Limit<'_> {
    /// Waits until `socket` is ready for `events`, within the limit.
    fn wait(&self, socket: &UnixStream, events: PollFlags) -> io::Result<()> {
        let waited = match self.stop {
            Some(stop) => stop.wait_until(socket.as_fd(), events, self.deadline),
            None => {
                let left = self
                    .deadline
                    .map(|d| d.saturating_duration_since(Instant::now()));
                if left.is_some_and(|l| l.is_zero()) {
                    Waited::TimedOut
                } else {
                    let timeout = left.and_then(|l| rustix::event::Timespec::try_from(l).ok());
                    let mut fds = [PollFd::new(socket, events)];
                    match poll(&mut fds, timeout.as_ref()) {
                        Ok(0) => Waited::TimedOut,
                        Ok(_) | Err(rustix::io::Errno::INTR) => Waited::Ready(fds[0].revents()),
                        Err(e) => return Err(e.into()),
                    }
                }
            }
        };
        match waited {
            Waited::Ready(_) => Ok(()),
            Waited::Stopped => Err(io::Error::new(
                io::ErrorKind::Interrupted,
                "the NIC is shutting down",
            )),
            Waited::TimedOut => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the other end did not finish a message in time",
            )),
        }
    }
}

/// Largest message accepted: far above any control message, small enough that a garbage
/// length cannot make the reader allocate much.
pub const MAX_MESSAGE: usize = 1 << 16;

/// Most descriptors one message carries.
pub const MAX_FDS: usize = 8;

/// A message as it was received.
#[derive(Debug, Default)]
pub struct Received {
    pub bytes: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// Sends one message with `fds`, within `limit`. Never raises SIGPIPE: a closed peer is an
/// error.
pub fn send(
    socket: &UnixStream,
    bytes: &[u8],
    fds: &[BorrowedFd<'_>],
    limit: Limit<'_>,
) -> io::Result<()> {
    if bytes.len() > MAX_MESSAGE || fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "a message of {} bytes and {} descriptors is over the limit",
                bytes.len(),
                fds.len()
            ),
        ));
    }
    let header = (bytes.len() as u32).to_le_bytes();
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other(
            "descriptors do not fit the control buffer",
        ));
    }
    let mut sent = 0;
    let total = header.len() + bytes.len();
    while sent < total {
        let (h, b) = if sent < header.len() {
            (&header[sent..], bytes)
        } else {
            (&header[..0], &bytes[sent - header.len()..])
        };
        let iov = [IoSlice::new(h), IoSlice::new(b)];
        match sendmsg(
            socket,
            &iov,
            &mut control,
            SendFlags::NOSIGNAL | SendFlags::DONTWAIT,
        ) {
            Ok(n) => {
                sent += n;
                // The descriptors went with the first part.
                control.clear();
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => limit.wait(socket, PollFlags::OUT)?,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Receives one message within `limit`. `Ok(None)` is a clean end: the peer closed between
/// messages.
pub fn recv(socket: &UnixStream, limit: Limit<'_>) -> io::Result<Option<Received>> {
    let mut received = Received::default();
    let mut header = [0u8; 4];
    if !fill(socket, &mut header, &mut received.fds, true, limit)? {
        return Ok(None);
    }
    let len = u32::from_le_bytes(header) as usize;
    if len > MAX_MESSAGE {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a message of {len} bytes is over the {MAX_MESSAGE}-byte limit"),
        ));
    }
    received.bytes = vec![0; len];
    fill(socket, &mut received.bytes, &mut received.fds, false, limit)?;
    Ok(Some(received))
}

/// Reads exactly `buf.len()` bytes, collecting descriptors. False if the peer closed before
/// the first byte and `eof_ok`.
fn fill(
    socket: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    eof_ok: bool,
    limit: Limit<'_>,
) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut buf[got..])];
        let flags = RecvFlags::CMSG_CLOEXEC | RecvFlags::DONTWAIT;
        let msg = match recvmsg(socket, &mut iov, &mut control, flags) {
            Ok(msg) => msg,
            Err(rustix::io::Errno::INTR) => continue,
            Err(rustix::io::Errno::AGAIN) => {
                limit.wait(socket, PollFlags::IN)?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        for message in control.drain() {
            if let RecvAncillaryMessage::ScmRights(received) = message {
                fds.extend(received);
            }
        }
        if msg.flags.contains(ReturnFlags::CTRUNC) || fds.len() > MAX_FDS {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "a message came with more descriptors than allowed",
            ));
        }
        if msg.bytes == 0 {
            if got == 0 && eof_ok {
                return Ok(false);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += msg.bytes;
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::os::fd::{AsFd, AsRawFd};

    fn pipe() -> (std::fs::File, std::fs::File) {
        use std::os::fd::FromRawFd;
        let mut fds = [0; 2];
        // SAFETY: a valid two-element array for pipe2 to fill.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
        // SAFETY: both descriptors are new and owned by nobody else.
        unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    #[test]
    fn bytes_and_descriptors_arrive_together() {
        let (a, b) = UnixStream::pair().unwrap();
        let (mut r, mut w) = pipe();
        send(&a, b"hello", &[w.as_fd(), r.as_fd()], Limit::default()).unwrap();
        send(&a, b"", &[], Limit::default()).unwrap();
        let first = recv(&b, Limit::default()).unwrap().unwrap();
        assert_eq!(first.bytes, b"hello");
        assert_eq!(first.fds.len(), 2);
        // The received write end is the same pipe: what goes in comes out of our read end.
        let mut w2 = std::fs::File::from(first.fds.into_iter().next().unwrap());
        w2.write_all(b"through").unwrap();
        drop((w2, &mut w));
        let mut buf = [0u8; 7];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"through");
        let second = recv(&b, Limit::default()).unwrap().unwrap();
        assert!(second.bytes.is_empty() && second.fds.is_empty());
    }

    #[test]
    fn received_descriptors_are_close_on_exec() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, _w) = pipe();
        send(&a, b"x", &[r.as_fd()], Limit::default()).unwrap();
        let got = recv(&b, Limit::default()).unwrap().unwrap();
        let flags = rustix::io::fcntl_getfd(&got.fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        assert_ne!(got.fds[0].as_raw_fd(), r.as_raw_fd());
    }

    #[test]
    fn a_clean_close_is_none_and_a_torn_message_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(recv(&b, Limit::default()).unwrap().is_none());

        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&10u32.to_le_bytes()).unwrap();
        a.write_all(b"abc").unwrap();
        drop(a);
        assert_eq!(
            recv(&b, Limit::default()).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
    }

    #[test]
    fn oversized_lengths_are_refused_without_allocating() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(
            recv(&b, Limit::default()).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let too_big = vec![0u8; MAX_MESSAGE + 1];
        assert_eq!(
            send(&a, &too_big, &[], Limit::default())
                .unwrap_err()
                .kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn sending_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let err = send(&a, b"anyone?", &[], Limit::default()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_large_message_survives_partial_writes() {
        let (a, b) = UnixStream::pair().unwrap();
        let data: Vec<u8> = (0..MAX_MESSAGE).map(|i| (i * 7) as u8).collect();
        let (r, _w) = pipe();
        let sender = std::thread::spawn(move || {
            send(&a, &data, &[r.as_fd()], Limit::default()).map(|_| data)
        });
        let got = recv(&b, Limit::default()).unwrap().unwrap();
        let data = sender.join().unwrap().unwrap();
        assert_eq!(got.bytes, data);
        assert_eq!(got.fds.len(), 1);
    }

    #[test]
    fn half_a_message_times_out_and_a_raised_line_ends_the_wait() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&10u32.to_le_bytes()).unwrap();
        a.write_all(b"abc").unwrap();
        let limit = Limit {
            stop: None,
            deadline: Some(Instant::now() + std::time::Duration::from_millis(50)),
        };
        assert_eq!(recv(&b, limit).unwrap_err().kind(), io::ErrorKind::TimedOut);

        let stop = StopLine::new().unwrap();
        stop.raise();
        let limit = Limit {
            stop: Some(&stop),
            deadline: None,
        };
        assert_eq!(
            recv(&b, limit).unwrap_err().kind(),
            io::ErrorKind::Interrupted
        );
        // A peer that never reads: the answer that does not fit gives up too.
        let big = vec![0u8; MAX_MESSAGE];
        let err = (0..64)
            .find_map(|_| send(&b, &big, &[], limit).err())
            .expect("the socket buffer never filled");
        assert_eq!(err.kind(), io::ErrorKind::Interrupted);
    }
}
