//! Messages with file descriptors over a Unix stream socket: each message is a 4-byte
//! little-endian length and that many bytes, and the descriptors that go with it travel as
//! SCM_RIGHTS ancillary data on the same `sendmsg`. The kernel attaches them to the message's
//! first byte, so the reader collects them while reading the message.
//!
//! rustix does the `cmsghdr` arithmetic (std's ancillary API is not stable yet); this module only
//! frames messages and refuses what does not fit.

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

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

/// Sends one message with `fds`. Never raises SIGPIPE: a closed peer is an error.
pub fn send(socket: &UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
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
        match sendmsg(socket, &iov, &mut control, SendFlags::NOSIGNAL) {
            Ok(n) => {
                sent += n;
                // The descriptors went with the first part.
                control.clear();
            }
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// Receives one message. `Ok(None)` is a clean end: the peer closed between messages.
pub fn recv(socket: &UnixStream) -> io::Result<Option<Received>> {
    let mut received = Received::default();
    let mut header = [0u8; 4];
    if !fill(socket, &mut header, &mut received.fds, true)? {
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
    fill(socket, &mut received.bytes, &mut received.fds, false)?;
    Ok(Some(received))
}

/// Reads exactly `buf.len()` bytes, collecting descriptors. False if the peer closed before
/// the first byte and `eof_ok`.
fn fill(
    socket: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
    eof_ok: bool,
) -> io::Result<bool> {
    let mut got = 0;
    while got < buf.len() {
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
        let mut control = RecvAncillaryBuffer::new(&mut space);
        let mut iov = [IoSliceMut::new(&mut buf[got..])];
        let msg = match recvmsg(socket, &mut iov, &mut control, RecvFlags::CMSG_CLOEXEC) {
            Ok(msg) => msg,
            Err(rustix::io::Errno::INTR) => continue,
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
        send(&a, b"hello", &[w.as_fd(), r.as_fd()]).unwrap();
        send(&a, b"", &[]).unwrap();
        let first = recv(&b).unwrap().unwrap();
        assert_eq!(first.bytes, b"hello");
        assert_eq!(first.fds.len(), 2);
        // The received write end is the same pipe: what goes in comes out of our read end.
        let mut w2 = std::fs::File::from(first.fds.into_iter().next().unwrap());
        w2.write_all(b"through").unwrap();
        drop((w2, &mut w));
        let mut buf = [0u8; 7];
        r.read_exact(&mut buf).unwrap();
        assert_eq!(&buf, b"through");
        let second = recv(&b).unwrap().unwrap();
        assert!(second.bytes.is_empty() && second.fds.is_empty());
    }

    #[test]
    fn received_descriptors_are_close_on_exec() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, _w) = pipe();
        send(&a, b"x", &[r.as_fd()]).unwrap();
        let got = recv(&b).unwrap().unwrap();
        let flags = rustix::io::fcntl_getfd(&got.fds[0]).unwrap();
        assert!(flags.contains(rustix::io::FdFlags::CLOEXEC));
        assert_ne!(got.fds[0].as_raw_fd(), r.as_raw_fd());
    }

    #[test]
    fn a_clean_close_is_none_and_a_torn_message_is_an_error() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(a);
        assert!(recv(&b).unwrap().is_none());

        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&10u32.to_le_bytes()).unwrap();
        a.write_all(b"abc").unwrap();
        drop(a);
        assert_eq!(recv(&b).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
    }

    #[test]
    fn oversized_lengths_are_refused_without_allocating() {
        let (mut a, b) = UnixStream::pair().unwrap();
        a.write_all(&u32::MAX.to_le_bytes()).unwrap();
        assert_eq!(recv(&b).unwrap_err().kind(), io::ErrorKind::InvalidData);
        let too_big = vec![0u8; MAX_MESSAGE + 1];
        assert_eq!(
            send(&a, &too_big, &[]).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[test]
    fn sending_to_a_closed_peer_is_an_error_not_a_signal() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let err = send(&a, b"anyone?", &[]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    #[test]
    fn a_large_message_survives_partial_writes() {
        let (a, b) = UnixStream::pair().unwrap();
        let data: Vec<u8> = (0..MAX_MESSAGE).map(|i| (i * 7) as u8).collect();
        let (r, _w) = pipe();
        let sender = std::thread::spawn(move || send(&a, &data, &[r.as_fd()]).map(|_| data));
        let got = recv(&b).unwrap().unwrap();
        let data = sender.join().unwrap().unwrap();
        assert_eq!(got.bytes, data);
        assert_eq!(got.fds.len(), 1);
    }
}
