//! The port's own network identity. Like a real RNIC's Ethernet function, the NIC is a host on
//! its wire: it answers ARP and IPv6 neighbour discovery for its addresses, answers pings, and
//! runs a small TCP/IP stack for the out-of-band channels RDMA tools use to swap QP numbers.
//! All of it is smoltcp's `iface` and sockets; this module only feeds it frames and time.
//!
//! The engine gives the stack every frame that is not RoCE (`IpStack::ingress`) and polls it
//! once a pass (`IpStack::poll`); RoCE frames never touch smoltcp. The stack's frames go out
//! through the engine's [`Tx`], like RoCE packets.

mod bridge;
mod neighbours;
mod tcp;
mod wire;

use std::collections::VecDeque;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use smoltcp::iface::{Config, Interface, SocketSet};
use smoltcp::wire::{EthernetAddress, HardwareAddress, IpAddress, IpCidr};
use tracing::trace;

use crate::buf::FrameBuf;
use crate::control::{ClientId, Reply, Response};
use crate::error::VerbsError;
use crate::transport::Tx;
use crate::waker::Interest;

pub(crate) use neighbours::sender_of;
pub use tcp::{BACKLOG, CONNECT_TIMEOUT};

/// Frames that may wait for the stack between two polls before more are dropped.
pub const INBOX_DEPTH: usize = 256;
/// Most addresses the interface holds (smoltcp's compile-time limit, set by a feature of
/// this crate), the link-local one included.
pub const MAX_ADDRESSES: usize = 8;

/// The port's IP stack.
pub(crate) struct IpStack {
    iface: Interface,
    sockets: SocketSet<'static>,
    /// Frames handed in, waiting for the next poll.
    inbox: VecDeque<FrameBuf>,
    /// The link's IP MTU.
    mtu: usize,
    /// smoltcp counts time from here.
    epoch: Instant,
    /// When smoltcp next wants to be polled; `None` when only a frame can give it work.
    next_poll: Option<Instant>,
    /// Something changed outside smoltcp's view (a socket added or removed): poll now.
    dirty: bool,
    probes: neighbours::Probes,
    tcp: tcp::Tcp,
}

impl IpStack {
    /// A stack with MAC `mac` and the addresses `addrs` (the first of which should be the
    /// link-local IPv6 address) on a link of IP MTU `mtu`.
    pub fn new(
        mac: EthernetAddress,
        addrs: &[IpCidr],
        mtu: u32,
        tx: &mut Tx,
    ) -> io::Result<IpStack> {
        if addrs.len() > MAX_ADDRESSES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "the port holds at most {MAX_ADDRESSES} IP addresses with its link-local one, not {}",
                    addrs.len()
                ),
            ));
        }
        let epoch = Instant::now();
        let mut config = Config::new(HardwareAddress::Ethernet(mac));
        config.random_seed = random_seed();
        let mut inbox = VecDeque::new();
        let mut wire = wire::Wire {
            inbox: &mut inbox,
            tx,
            mtu: mtu as usize,
            sent: 0,
        };
        let mut iface = Interface::new(config, &mut wire, smoltcp::time::Instant::ZERO);
        iface.update_ip_addrs(|list| {
            for cidr in addrs {
                // Cannot fail: the count was checked above.
                let _ = list.push(*cidr);
            }
        });
        Ok(IpStack {
            iface,
            sockets: SocketSet::new(Vec::new()),
            inbox,
            mtu: mtu as usize,
            epoch,
            next_poll: None,
            dirty: false,
            probes: neighbours::Probes::default(),
            tcp: tcp::Tcp::default(),
        })
    }

    /// Queues a frame for the stack; `false` if it had to be dropped (the queue is full).
    pub fn ingress(&mut self, frame: FrameBuf) -> bool {
        if self.inbox.len() >= INBOX_DEPTH {
            return false;
        }
        self.inbox.push_back(frame);
        true
    }

    /// Runs the stack: bytes from hosts into their sockets, queued frames in, whatever smoltcp
    /// has to send out, then answers, bytes to hosts and expiries. Returns whether anything
    /// happened.
    pub fn poll(&mut self, tx: &mut Tx, now: Instant) -> bool {
        let had_frames = !self.inbox.is_empty();
        let from_hosts = self.tcp.host_to_peer(&mut self.sockets);
        let due = self.next_poll.is_some_and(|t| t <= now);
        let polled = had_frames || from_hosts || due || self.dirty || self.tcp.has_doomed();
        let mut sent = 0;
        if polled {
            self.dirty = false;
            let stamp = self.stamp(now);
            let mut wire = wire::Wire {
                inbox: &mut self.inbox,
                tx,
                mtu: self.mtu,
                sent: 0,
            };
            self.iface.poll(stamp, &mut wire, &mut self.sockets);
            sent = wire.sent;
        }
        let progressed = self.tcp.progress(&mut self.sockets, now, polled);
        self.probes.expire(&mut self.sockets, now);
        if polled || progressed {
            let stamp = self.stamp(now);
            self.next_poll = self
                .iface
                .poll_at(stamp, &self.sockets)
                .map(|t| self.epoch + Duration::from_micros(t.total_micros().max(0) as u64));
        }
        if sent > 0 {
            trace!(frames = sent, "the port's IP stack sent");
        }
        had_frames || from_hosts || sent > 0 || progressed
    }

    /// When the stack next needs a poll without any frame arriving.
    pub fn deadline(&self) -> Option<Instant> {
        [self.next_poll, self.tcp.deadline(), self.probes.deadline()]
            .into_iter()
            .flatten()
            .min()
    }

    /// File descriptors the engine must watch while it sleeps.
    pub fn interests(&self, out: &mut Vec<Interest>) {
        self.tcp.interests(&self.sockets, out);
    }

    /// Whether `ip` is on one of the port's subnets (the port has no router).
    pub fn on_link(&self, ip: IpAddr) -> bool {
        let ip = IpAddress::from(ip);
        self.iface.ip_addrs().iter().any(|c| c.contains_addr(&ip))
    }

    /// Makes smoltcp resolve `ip` (ARP or neighbour solicitation) until it is answered or
    /// `until` passes.
    pub fn resolve(&mut self, ip: IpAddr, until: Instant) {
        self.probes.start(&mut self.sockets, ip, until);
        self.dirty = true;
    }

    /// `ip`'s MAC is known: no more asking.
    pub fn resolved(&mut self, ip: IpAddr) {
        self.probes.stop(&mut self.sockets, ip);
    }

    /// Connects to `peer`; `reply` gets the stream once the connection is established.
    pub fn tcp_connect(&mut self, peer: SocketAddr, reply: Reply, now: Instant) {
        if !self.on_link(peer.ip()) {
            let _ = reply.send(Err(self.off_link(peer.ip())));
            return;
        }
        self.tcp
            .connect(&mut self.iface, &mut self.sockets, peer, reply, now);
        self.dirty = true;
    }

    pub fn tcp_listen(&mut self, owner: ClientId, port: u16) -> Result<Response, VerbsError> {
        self.dirty = true;
        self.tcp.listen(&mut self.sockets, owner, port)
    }

    pub fn tcp_accept(
        &mut self,
        client: ClientId,
        port: u16,
        timeout: Option<Duration>,
        reply: Reply,
        now: Instant,
    ) {
        self.tcp.accept(client, port, timeout, reply, now);
        self.dirty = true;
    }

    pub fn tcp_unlisten(&mut self, client: ClientId, port: u16) -> Result<Response, VerbsError> {
        self.dirty = true;
        self.tcp.unlisten(&mut self.sockets, client, port)
    }

    /// Closes the listeners of a host program that went away.
    pub fn forget_client(&mut self, client: ClientId) {
        self.tcp.forget_client(&mut self.sockets, client);
        self.dirty = true;
    }

    /// The error for an address outside the port's subnets.
    pub fn off_link(&self, ip: IpAddr) -> VerbsError {
        let subnets: Vec<String> = self
            .iface
            .ip_addrs()
            .iter()
            .map(|c| c.to_string())
            .collect();
        VerbsError::Io(io::Error::new(
            io::ErrorKind::NetworkUnreachable,
            format!(
                "{ip} is on none of the NIC's subnets ({}) and the NIC has no router",
                subnets.join(", ")
            ),
        ))
    }

    fn stamp(&self, now: Instant) -> smoltcp::time::Instant {
        smoltcp::time::Instant::from_micros(
            now.saturating_duration_since(self.epoch).as_micros() as i64
        )
    }
}

/// A seed for smoltcp's TCP initial sequence numbers and ports: different on every start, so
/// that a restarted NIC does not reuse its last connection's numbers.
fn random_seed() -> u64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    (now.as_nanos() as u64) ^ (u64::from(std::process::id()) << 32)
}
