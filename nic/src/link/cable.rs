//! A UDP cable: each Ethernet frame travels as one UDP datagram between two socket addresses,
//! with no header of its own. This is exactly what QEMU's `-netdev dgram` (and the older
//! `-netdev socket,udp=`) sends, so two NIC processes can be cabled together over loopback, or a
//! virtual machine's network card plugged straight into our NIC, with no root and no tap device.
//!
//! Frames go out and come in by the batch: `send` collects frames and [`Link::flush_sends`] (at
//! the end of each engine pass, or when a batch is full) hands them to the kernel with one
//! `sendmmsg` ([`super::udp_batch`], runs of equal frames as one GSO message each); `recv` hands
//! out frames that one `recvmmsg` brought in ([`super::udp_recv`], runs coalesced by GRO).

use std::collections::VecDeque;
use std::fmt;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::str::FromStr;
use std::sync::Arc;

use rustix::net::sockopt;
use tracing::{debug, warn};

use super::udp_batch::{UdpBatch, MAX_BATCH};
use super::udp_recv::{BatchReceiver, RECV_BUFFERS};
use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// Socket buffer size asked for in each direction. The default (about 200 KiB) holds fewer than
/// fifty 4 KiB frames: a burst of one 1 MiB message, or a QEMU guest catching up, overflows it
/// and every overflow is a retransmission.
pub const SOCKET_BUFFER: usize = 8 << 20;

/// The two ends of a cable: where our frames arrive, and where we send them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CableAddrs {
    pub local: SocketAddr,
    pub remote: SocketAddr,
}

/// Why a cable description could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CableSpecError {
    #[error("a cable is LOCAL_UDP_ADDR,REMOTE_UDP_ADDR (for example 127.0.0.1:7001,127.0.0.1:7002), not {0:?}")]
    Shape(String),
    #[error("{0:?} is not a UDP address such as 127.0.0.1:7001 or [::1]:7001")]
    Address(String),
    #[error("the cable's ends {local} and {remote} are of different IP families")]
    Family {
        local: SocketAddr,
        remote: SocketAddr,
    },
}

impl FromStr for CableAddrs {
    type Err = CableSpecError;

    /// Reads `LOCAL,REMOTE`, each an IPv4 `a.b.c.d:port` or IPv6 `[addr]:port`.
    fn from_str(text: &str) -> Result<CableAddrs, CableSpecError> {
        let (local, remote) = text
            .split_once(',')
            .ok_or_else(|| CableSpecError::Shape(text.to_owned()))?;
        let addr = |s: &str| {
            s.trim()
                .parse::<SocketAddr>()
                .map_err(|_| CableSpecError::Address(s.trim().to_owned()))
        };
        let (local, remote) = (addr(local)?, addr(remote)?);
        if local.is_ipv4() != remote.is_ipv4() {
            return Err(CableSpecError::Family { local, remote });
        }
        Ok(CableAddrs { local, remote })
    }
}

impl fmt::Display for CableAddrs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.local, self.remote)
    }
}

/// One end of a UDP cable.
pub struct CableLink {
    socket: UdpSocket,
    addrs: CableAddrs,
    pool: Option<Arc<BufPool>>,
    batch: UdpBatch,
    receiver: BatchReceiver,
    /// Frames sent but not yet handed to the kernel.
    pending: Vec<FrameBuf>,
    /// Frames received and not yet taken.
    received: VecDeque<FrameBuf>,
    /// Frames lost by batches sent since the last `flush_sends`.
    lost: u64,
}

impl CableLink {
    /// Binds `addrs.local` and sends to `addrs.remote`. Fails if the local address is taken or
    /// not ours.
    pub fn open(addrs: CableAddrs) -> io::Result<CableLink> {
        let socket = UdpSocket::bind(addrs.local)?;
        // Connected: the kernel then delivers only datagrams from the other end, so a stray
        // sender on the same port cannot inject frames.
        socket.connect(addrs.remote)?;
        socket.set_nonblocking(true)?;
        grow_buffers(&socket);
        let mut receiver = BatchReceiver::new();
        receiver.enable_gro(socket.as_fd());
        Ok(CableLink {
            socket,
            addrs,
            pool: None,
            batch: UdpBatch::new(true),
            receiver,
            pending: Vec::with_capacity(MAX_BATCH),
            received: VecDeque::with_capacity(RECV_BUFFERS),
            lost: 0,
        })
    }

    pub fn addrs(&self) -> CableAddrs {
        self.addrs
    }

    /// Hands the pending frames to the kernel; returns how many it did not take. Those are lost,
    /// as on a wire: a full socket buffer, or nobody listening at the other end yet.
    fn send_batch(&mut self) -> u64 {
        if self.pending.is_empty() {
            return 0;
        }
        let total = self.pending.len();
        let sent = match self.batch.send(self.socket.as_fd(), &self.pending) {
            Ok(sent) => sent,
            Err(e) => {
                debug!(error = %e, frames = total, "cable send failed");
                0
            }
        };
        self.pending.clear();
        (total - sent) as u64
    }

    /// Fills `received` with what one `recvmmsg` finds.
    fn receive_batch(&mut self) -> io::Result<()> {
        // `attach` comes before any receive; a link used without an engine gets its own pool.
        let pool = self.pool.get_or_insert_with(|| BufPool::new(RECV_BUFFERS));
        self.receiver
            .recv(self.socket.as_fd(), pool, &mut self.received)?;
        Ok(())
    }
}

/// Asks for [`SOCKET_BUFFER`] each way, forcing it past the system limit where we are allowed
/// to, and says so when the kernel gives less.
fn grow_buffers(socket: &UdpSocket) {
    let fd = socket.as_fd();
    let _ = sockopt::set_socket_recv_buffer_size(fd, SOCKET_BUFFER);
    let _ = sockopt::set_socket_send_buffer_size(fd, SOCKET_BUFFER);
    // Linux reports twice what was set (bookkeeping included) and caps plain requests at
    // net.core.{r,w}mem_max; the forcing variants need CAP_NET_ADMIN.
    if sockopt::socket_recv_buffer_size(fd).unwrap_or(0) < SOCKET_BUFFER {
        let _ = sockopt::set_socket_recv_buffer_size_force(fd, SOCKET_BUFFER);
    }
    if sockopt::socket_send_buffer_size(fd).unwrap_or(0) < SOCKET_BUFFER {
        let _ = sockopt::set_socket_send_buffer_size_force(fd, SOCKET_BUFFER);
    }
    let rcv = sockopt::socket_recv_buffer_size(fd).unwrap_or(0);
    let snd = sockopt::socket_send_buffer_size(fd).unwrap_or(0);
    if rcv < SOCKET_BUFFER || snd < SOCKET_BUFFER {
        warn!(
            receive = rcv,
            send = snd,
            wanted = SOCKET_BUFFER,
            "cable socket buffers are small: bursts will be dropped and retransmitted \
             (raise net.core.rmem_max and net.core.wmem_max)"
        );
    }
}

impl Link for CableLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        self.pending.push(frame);
        if self.pending.len() >= MAX_BATCH {
            self.lost += self.send_batch();
        }
        Ok(())
    }

    fn flush_sends(&mut self) -> u64 {
        let lost = self.lost + self.send_batch();
        self.lost = 0;
        lost
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        if self.received.is_empty() {
            self.receive_batch()?;
        }
        while let Some(frame) = self.received.pop_front() {
            if !frame.is_empty() {
                return Ok(Some(frame));
            }
            debug!("datagram larger than any frame dropped");
        }
        Ok(None)
    }

    fn flush(&mut self) -> io::Result<()> {
        match self.flush_sends() {
            0 => Ok(()),
            lost => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                format!("{lost} frames lost at shutdown: the socket buffer is full"),
            )),
        }
    }

    fn attach(&mut self, pool: &Arc<BufPool>, _waker: &Arc<Waker>) {
        self.pool = Some(Arc::clone(pool));
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.socket.as_raw_fd())
    }

    fn describe(&self) -> String {
        let gso = if self.batch.gso() { ", GSO" } else { "" };
        let gro = if self.receiver.gro() { ", GRO" } else { "" };
        format!(
            "UDP cable {} -> {} (batched{gso}{gro})",
            self.addrs.local, self.addrs.remote
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::buf::FRAME_CAPACITY;

    fn spec(text: &str) -> Result<CableAddrs, CableSpecError> {
        text.parse()
    }

    #[test]
    fn cable_specs_parse_for_both_families() {
        let v4 = spec("127.0.0.1:7001,127.0.0.1:7002").unwrap();
        assert_eq!(v4.local, "127.0.0.1:7001".parse().unwrap());
        assert_eq!(v4.remote, "127.0.0.1:7002".parse().unwrap());
        let v6 = spec("[::1]:7001, [::1]:7002").unwrap();
        assert_eq!(v6.remote, "[::1]:7002".parse().unwrap());
        assert_eq!(v6.to_string(), "[::1]:7001,[::1]:7002");
    }

    #[test]
    fn bad_cable_specs_say_what_is_wrong() {
        assert!(matches!(
            spec("127.0.0.1:7001"),
            Err(CableSpecError::Shape(_))
        ));
        assert_eq!(
            spec("127.0.0.1,127.0.0.1:7002"),
            Err(CableSpecError::Address("127.0.0.1".into()))
        );
        assert!(matches!(
            spec("127.0.0.1:1,[::1]:2"),
            Err(CableSpecError::Family { .. })
        ));
    }

    /// Two ends on loopback with ports the kernel picked: bind port 0 first, then cable.
    fn cabled_pair() -> (CableLink, CableLink) {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (pa, pb) = (a.local_addr().unwrap(), b.local_addr().unwrap());
        drop((a, b));
        (
            CableLink::open(CableAddrs {
                local: pa,
                remote: pb,
            })
            .unwrap(),
            CableLink::open(CableAddrs {
                local: pb,
                remote: pa,
            })
            .unwrap(),
        )
    }

    fn recv_within(link: &mut CableLink) -> FrameBuf {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            if let Some(frame) = link.recv().unwrap() {
                return frame;
            }
            assert!(std::time::Instant::now() < deadline, "no frame within 5 s");
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
    }

    #[test]
    fn frames_cross_the_cable_whole_and_in_order() {
        let (mut a, mut b) = cabled_pair();
        let pool = BufPool::new(8);
        let big: Vec<u8> = (0..FRAME_CAPACITY).map(|i| i as u8).collect();
        a.send(pool.copy_of(b"first frame")).unwrap();
        a.send(pool.copy_of(&big)).unwrap();
        assert_eq!(a.flush_sends(), 0);
        assert_eq!(&recv_within(&mut b)[..], b"first frame");
        assert_eq!(&recv_within(&mut b)[..], &big[..]);
        b.send(pool.copy_of(b"back")).unwrap();
        assert_eq!(b.flush_sends(), 0);
        assert_eq!(&recv_within(&mut a)[..], b"back");
        assert!(a.recv().unwrap().is_none());
    }

    #[test]
    fn datagrams_from_anyone_but_the_peer_are_not_frames() {
        let (mut a, mut b) = cabled_pair();
        let stranger = UdpSocket::bind("127.0.0.1:0").unwrap();
        stranger.send_to(b"injected", b.addrs().local).unwrap();
        // The peer's frame, sent after the stranger's datagram, is the first and only frame:
        // no waiting for a datagram that might still be on its way.
        let pool = BufPool::new(8);
        a.send(pool.copy_of(b"from the peer")).unwrap();
        assert_eq!(a.flush_sends(), 0);
        assert_eq!(&recv_within(&mut b)[..], b"from the peer");
        assert!(b.recv().unwrap().is_none());
    }

    #[test]
    fn sending_with_nobody_at_the_other_end_is_a_loss_not_a_failure() {
        let (mut a, b) = cabled_pair();
        let far_end = b.addrs().local;
        drop(b);
        let pool = BufPool::new(8);
        // The first send may succeed (the ICMP answer comes later); neither it nor the ones
        // after may break the link.
        for _ in 0..3 {
            a.send(pool.copy_of(b"anyone?")).unwrap();
            a.flush_sends();
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(a.recv().unwrap().is_none());
        // Someone plugs the other end back in: the next frame reaches them.
        let back = UdpSocket::bind(far_end).unwrap();
        back.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        a.send(pool.copy_of(b"still here")).unwrap();
        assert_eq!(a.flush_sends(), 0);
        let mut buf = [0u8; 64];
        let n = back.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"still here");
    }
}
