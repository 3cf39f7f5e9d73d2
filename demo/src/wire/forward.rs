//! The wire between two NIC processes: each NIC's UDP cable ends at a socket of the demo, which
//! forwards every datagram (one Ethernet frame each) to the other NIC's cable, through the
//! [`Wire`]. Loopback only; the loop forwards only what arrives and stops when told, or at its
//! deadline whatever happens.

use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::net::sockopt;

use super::Wire;
use crate::{DemoError, Side};

/// Socket buffers asked for, as the NICs' cables ask: a burst of a large WRITE must not
/// overflow the forwarder's sockets.
const SOCKET_BUFFER: usize = roce_nic::link::cable::SOCKET_BUFFER;
/// Room for the largest frame.
const DATAGRAM: usize = roce_nic::buf::FRAME_CAPACITY;
/// How often the loop looks at its stop flag while nothing arrives.
const TICK: Duration = Duration::from_millis(20);

/// The demo's two cable ends, one facing each NIC.
pub struct Sockets {
    initiator: UdpSocket,
    target: UdpSocket,
}

impl Sockets {
    /// Two sockets on loopback ports the kernel picks.
    pub fn bind() -> Result<Sockets, DemoError> {
        let bind = || {
            let socket = UdpSocket::bind("127.0.0.1:0")
                .map_err(|e| DemoError::because("cannot open the demo's end of a cable", e))?;
            let fd = socket.as_fd();
            let _ = sockopt::set_socket_recv_buffer_size(fd, SOCKET_BUFFER);
            let _ = sockopt::set_socket_send_buffer_size(fd, SOCKET_BUFFER);
            Ok::<UdpSocket, DemoError>(socket)
        };
        Ok(Sockets {
            initiator: bind()?,
            target: bind()?,
        })
    }

    /// Where the NIC on `side` sends its frames.
    pub fn addr(&self, side: Side) -> Result<SocketAddr, DemoError> {
        match side {
            Side::Initiator => &self.initiator,
            Side::Target => &self.target,
        }
        .local_addr()
        .map_err(|e| DemoError::because("cannot read a socket's address", e))
    }

    /// Starts forwarding between the NICs whose cables end at `initiator` and `target`, until
    /// the forwarder is dropped or `limit` has passed.
    pub fn forward(
        self,
        initiator: SocketAddr,
        target: SocketAddr,
        wire: Arc<Wire>,
        limit: Duration,
    ) -> Result<Forwarder, DemoError> {
        let connect = |socket: &UdpSocket, to| {
            // Connected: only the NIC at the other end of this cable can send us frames.
            socket
                .connect(to)
                .and_then(|()| socket.set_nonblocking(true))
                .map_err(|e| DemoError::because("cannot connect the demo's cable ends", e))
        };
        connect(&self.initiator, initiator)?;
        connect(&self.target, target)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let deadline = Instant::now() + limit;
        let thread = std::thread::Builder::new()
            .name("demo-wire".into())
            .spawn(move || self.run(&wire, &flag, deadline))
            .map_err(|e| DemoError::because("cannot start the wire", e))?;
        Ok(Forwarder {
            stop,
            thread: Some(thread),
        })
    }

    fn run(self, wire: &Wire, stop: &AtomicBool, deadline: Instant) {
        let mut buf = vec![0u8; DATAGRAM];
        while !stop.load(Ordering::Relaxed) && Instant::now() < deadline {
            let mut fds = [
                PollFd::new(&self.initiator, PollFlags::IN),
                PollFd::new(&self.target, PollFlags::IN),
            ];
            let tick = Timespec::try_from(TICK).unwrap_or_default();
            if poll(&mut fds, Some(&tick)).is_err() {
                continue;
            }
            let ready = [!fds[0].revents().is_empty(), !fds[1].revents().is_empty()];
            if ready[0] {
                pass(
                    &self.initiator,
                    &self.target,
                    Side::Initiator,
                    wire,
                    &mut buf,
                );
            }
            if ready[1] {
                pass(&self.target, &self.initiator, Side::Target, wire, &mut buf);
            }
        }
    }
}

/// Forwards what has arrived on `from` to `to`: each datagram once, so the loop sends no more
/// than the NICs do.
fn pass(from: &UdpSocket, to: &UdpSocket, side: Side, wire: &Wire, buf: &mut [u8]) {
    loop {
        match from.recv(buf) {
            Ok(n) => {
                if wire.carry(side, &buf[..n]) {
                    // A full socket buffer or a NIC not listening: the frame is lost, as on a
                    // wire, and the transport recovers.
                    let _ = to.send(&buf[..n]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            // ICMP port unreachable from an earlier send: nothing to read.
            Err(_) => return,
        }
    }
}

/// The forwarding thread; stopped and joined when dropped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datagrams_are_forwarded_both_ways_through_the_wire() {
        let nic_a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let nic_b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let sockets = Sockets::bind().unwrap();
        nic_a
            .connect(sockets.addr(Side::Initiator).unwrap())
            .unwrap();
        nic_b.connect(sockets.addr(Side::Target).unwrap()).unwrap();
        let wire = Wire::new(None, None).unwrap();
        let _forwarder = sockets
            .forward(
                nic_a.local_addr().unwrap(),
                nic_b.local_addr().unwrap(),
                Arc::clone(&wire),
                Duration::from_secs(30),
            )
            .unwrap();
        nic_a
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        nic_b
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 64];
        nic_a.send(b"to b").unwrap();
        let n = nic_b.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"to b");
        nic_b.send(b"to a").unwrap();
        let n = nic_a.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"to a");
        let from: Vec<Side> = wire.frames().iter().map(|f| f.from).collect();
        assert_eq!(from, [Side::Initiator, Side::Target]);
    }

    #[test]
    fn the_forwarder_stops_at_its_deadline() {
        let sockets = Sockets::bind().unwrap();
        let a = sockets.addr(Side::Initiator).unwrap();
        let b = sockets.addr(Side::Target).unwrap();
        let wire = Wire::new(None, None).unwrap();
        let forwarder = sockets
            .forward(a, b, wire, Duration::from_millis(30))
            .unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert!(forwarder.thread.as_ref().unwrap().is_finished());
    }
}
