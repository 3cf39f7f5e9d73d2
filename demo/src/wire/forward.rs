//! The wire between two NIC processes: each NIC's UDP cable ends at a socket of the demo, which
//! forwards every datagram (one Ethernet frame each) to the other NIC's cable, through the
//! [`Wire`]. Loopback only; the loop forwards only what arrives and stops when told, or at its
//! deadline whatever happens. The loop itself ([`Forwarder`]) takes any number of cables: the
//! allreduce runs one for all its hosts' cables to their switch.

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
        Ok(Sockets {
            initiator: cable_end()?,
            target: cable_end()?,
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
        let sides = [Side::Initiator, Side::Target];
        Forwarder::spawn(
            "demo-wire",
            vec![self.initiator, self.target],
            limit,
            move |sockets, from, frame| {
                if wire.carry(sides[from], frame) {
                    // A full socket buffer or a NIC not listening: the frame is lost, as on a
                    // wire, and the transport recovers.
                    let _ = sockets[1 - from].send(frame);
                }
            },
        )
    }
}

/// A loopback UDP socket for the demo's end of a NIC's cable, with buffers as large as the
/// NICs ask for.
pub fn cable_end() -> Result<UdpSocket, DemoError> {
    let socket = UdpSocket::bind("127.0.0.1:0")
        .map_err(|e| DemoError::because("cannot open the demo's end of a cable", e))?;
    let fd = socket.as_fd();
    let _ = sockopt::set_socket_recv_buffer_size(fd, SOCKET_BUFFER);
    let _ = sockopt::set_socket_send_buffer_size(fd, SOCKET_BUFFER);
    Ok(socket)
}

/// Hands every datagram that has arrived on `sockets[from]` to `forward`: each once, so the
/// loop sends no more than the NICs do.
fn pass(
    sockets: &[UdpSocket],
    from: usize,
    buf: &mut [u8],
    forward: &mut impl FnMut(&[UdpSocket], usize, &[u8]),
) {
    loop {
        match sockets[from].recv(buf) {
            Ok(n) => forward(sockets, from, &buf[..n]),
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

impl Forwarder {
    /// Starts a thread named `name` that waits for datagrams on any of `sockets` (connected
    /// and non-blocking, one per NIC) and hands each to `forward` with the index of the socket
    /// it came on, until the forwarder is dropped or `limit` has passed.
    pub fn spawn(
        name: &str,
        sockets: Vec<UdpSocket>,
        limit: Duration,
        mut forward: impl FnMut(&[UdpSocket], usize, &[u8]) + Send + 'static,
    ) -> Result<Forwarder, DemoError> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let deadline = Instant::now() + limit;
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut buf = vec![0u8; DATAGRAM];
                let mut fds: Vec<PollFd> = sockets
                    .iter()
                    .map(|s| PollFd::new(s, PollFlags::IN))
                    .collect();
                let tick = Timespec::try_from(TICK).unwrap_or_default();
                while !flag.load(Ordering::Relaxed) && Instant::now() < deadline {
                    if poll(&mut fds, Some(&tick)).is_err() {
                        continue;
                    }
                    for (from, fd) in fds.iter().enumerate() {
                        if !fd.revents().is_empty() {
                            pass(&sockets, from, &mut buf, &mut forward);
                        }
                    }
                }
            })
            .map_err(|e| DemoError::because(&format!("cannot start {name}"), e))?;
        Ok(Forwarder {
            stop,
            thread: Some(thread),
        })
    }
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
