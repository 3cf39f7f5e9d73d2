//! One TCP connection of the port, bridged to a Unix stream pair: the host program holds one end
//! as an ordinary blocking stream; the engine holds the other, non-blocking, and each pass moves
//! bytes between it and the smoltcp socket. End-of-file travels both ways as a half-close: the
//! host shutting its writing side sends a FIN, and the peer's FIN becomes end-of-file for the
//! host once every byte before it was delivered. Both buffers are bounded (smoltcp's socket
//! buffers and the kernel's for the stream), so a slow reader slows the writer down through
//! TCP's window rather than filling memory.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;

use smoltcp::iface::SocketHandle;
use smoltcp::socket::tcp::{self, State};
use tracing::{debug, trace};

use crate::waker::Interest;

pub(super) struct Bridge {
    pub socket: SocketHandle,
    /// The engine's end, non-blocking.
    stream: UnixStream,
    /// The host shut its writing side (or went away): our sending side is closed.
    host_finished: bool,
    /// The peer's FIN has been passed on: the host reads end-of-file.
    peer_finished: bool,
}

impl Bridge {
    /// A bridge for the connection on `socket`, and the host's end of it.
    pub fn open(socket: SocketHandle) -> io::Result<(Bridge, UnixStream)> {
        let (host, engine) = UnixStream::pair()?;
        engine.set_nonblocking(true)?;
        Ok((
            Bridge {
                socket,
                stream: engine,
                host_finished: false,
                peer_finished: false,
            },
            host,
        ))
    }

    /// Moves what the host wrote into the socket's send buffer, and closes the socket's sending
    /// side when the host closed its own. Returns whether the socket has anything new to send
    /// (bytes, a FIN or a reset), so that the interface is polled for it.
    pub fn host_to_peer(&mut self, socket: &mut tcp::Socket<'_>) -> bool {
        let mut news = false;
        while !self.host_finished && socket.can_send() {
            let read = socket.send(|space| match (&self.stream).read(space) {
                Ok(n) => (n, Ok(n)),
                Err(e) => (0, Err(e)),
            });
            match read {
                Ok(Ok(0)) => {
                    debug!("host finished sending: FIN");
                    self.host_finished = true;
                    socket.close();
                    news = true;
                }
                Ok(Ok(n)) => {
                    trace!(bytes = n, "host → TCP");
                    news = true;
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Ok(Err(e)) => {
                    debug!(error = %e, "host stream failed: connection reset");
                    self.host_finished = true;
                    socket.abort();
                    news = true;
                }
                Err(_) => break,
            }
        }
        news
    }

    /// Moves received bytes to the host, then passes on the peer's FIN once everything before
    /// it was delivered; returns the bytes moved.
    pub fn peer_to_host(&mut self, socket: &mut tcp::Socket<'_>) -> usize {
        let mut moved = 0;
        while socket.can_recv() {
            let written = socket.recv(|data| match (&self.stream).write(data) {
                Ok(n) => (n, Ok(n)),
                Err(e) => (0, Err(e)),
            });
            match written {
                Ok(Ok(n)) => {
                    trace!(bytes = n, "TCP → host");
                    moved += n;
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => break,
                Ok(Err(e)) => {
                    // The host closed its end: nobody will read what the peer sends, so the
                    // connection is reset, as the kernel does for a closed socket.
                    debug!(error = %e, "host stream closed: connection reset");
                    self.host_finished = true;
                    socket.abort();
                    break;
                }
                Err(_) => break,
            }
        }
        if !self.peer_finished && !socket.may_recv() && !socket.can_recv() {
            debug!(state = %socket.state(), "peer finished sending: end-of-file to the host");
            // The host may have closed its end already; then there is nobody to tell.
            let _ = self.stream.shutdown(Shutdown::Write);
            self.peer_finished = true;
        }
        moved
    }

    /// Whether the connection is over and everything was delivered.
    pub fn finished(&self, socket: &tcp::Socket<'_>) -> bool {
        self.peer_finished && matches!(socket.state(), State::Closed | State::TimeWait)
    }

    /// What should wake the engine for this bridge: bytes from the host while the socket can
    /// take them, room in the host's stream while bytes wait for it.
    pub fn interest(&self, socket: &tcp::Socket<'_>) -> Option<Interest> {
        let readable = !self.host_finished && socket.can_send();
        let writable = socket.can_recv();
        (readable || writable).then(|| Interest::new(self.stream.as_raw_fd(), readable, writable))
    }
}
