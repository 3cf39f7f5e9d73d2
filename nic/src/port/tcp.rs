//! The port's TCP, for the out-of-band exchanges RDMA tools make before their RDMA traffic
//! (ibv_rc_pingpong and perftest swap QP numbers, PSNs and GIDs over TCP port 18515 of the NIC's
//! IP address): connections host programs open from the NIC's addresses, and listeners that
//! accept them. Every established connection becomes a [`Bridge`]; the host program gets its
//! end of it as an ordinary stream. Answers to connects and accepts are sent when the
//! connection is there, so a refused or timed-out connect is an error like `connect(2)`'s.

use std::collections::{HashMap, HashSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use smoltcp::iface::{Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp::{self, State};
use tracing::{debug, info};

use super::bridge::Bridge;
use crate::control::{ClientId, Reply, Response};
use crate::error::VerbsError;
use crate::waker::Interest;

/// Bytes each direction of a connection buffers in the port.
const SOCKET_BUFFER: usize = 64 * 1024;
/// Connections a listener holds in the handshake or waiting to be accepted; further SYNs are
/// refused.
pub const BACKLOG: usize = 4;
/// How long a connect may take before it fails.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Where local ports of outgoing connections come from (the IANA dynamic range).
const EPHEMERAL_FIRST: u16 = 49152;

#[derive(Default)]
pub(super) struct Tcp {
    connecting: Vec<Connecting>,
    listeners: HashMap<u16, Listener>,
    bridges: Vec<Bridge>,
    /// Sockets that are done, kept until the interface has polled them once more so that a
    /// reset or final ACK they owe still goes out.
    doomed: Vec<SocketHandle>,
    /// The next ephemeral port to try.
    next_port: u16,
}

/// A connect waiting for the handshake.
struct Connecting {
    socket: SocketHandle,
    peer: SocketAddr,
    reply: Reply,
    deadline: Instant,
}

struct Listener {
    owner: ClientId,
    /// Sockets listening or in the handshake.
    waiting: Vec<SocketHandle>,
    /// Established connections not yet accepted.
    ready: VecDeque<SocketHandle>,
    accepts: VecDeque<Accept>,
}

/// A host waiting in accept.
struct Accept {
    reply: Reply,
    deadline: Option<Instant>,
}

fn error(kind: io::ErrorKind, message: String) -> VerbsError {
    VerbsError::Io(io::Error::new(kind, message))
}

fn new_socket() -> tcp::Socket<'static> {
    let mut socket = tcp::Socket::new(
        tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
        tcp::SocketBuffer::new(vec![0; SOCKET_BUFFER]),
    );
    // Out-of-band exchanges are small request/answer messages that the tools read with one
    // read() each: send every write at once, as its own segment.
    socket.set_nagle_enabled(false);
    socket
}

/// Past the handshake (possibly already closing, with data still to deliver).
fn connected(state: State) -> bool {
    !matches!(
        state,
        State::Closed | State::Listen | State::SynSent | State::SynReceived
    )
}

impl Tcp {
    /// Starts a connection to `peer`; `reply` gets the stream once it is established.
    pub fn connect(
        &mut self,
        iface: &mut Interface,
        sockets: &mut SocketSet<'static>,
        peer: SocketAddr,
        reply: Reply,
        now: Instant,
    ) {
        let Some(local_port) = self.free_port(sockets) else {
            let _ = reply.send(Err(error(
                io::ErrorKind::AddrNotAvailable,
                "every local TCP port of the NIC is in use".into(),
            )));
            return;
        };
        let mut socket = new_socket();
        if let Err(e) = socket.connect(iface.context(), peer, local_port) {
            let _ = reply.send(Err(error(
                io::ErrorKind::AddrNotAvailable,
                format!("cannot connect to {peer} from the NIC: {e}"),
            )));
            return;
        }
        debug!(%peer, local_port, "TCP connecting");
        self.connecting.push(Connecting {
            socket: sockets.add(socket),
            peer,
            reply,
            deadline: now + CONNECT_TIMEOUT,
        });
    }

    pub fn listen(
        &mut self,
        sockets: &mut SocketSet<'static>,
        owner: ClientId,
        port: u16,
    ) -> Result<Response, VerbsError> {
        if port == 0 {
            return Err(VerbsError::Invalid(
                "a TCP listener needs a port other than 0".into(),
            ));
        }
        if self.listeners.contains_key(&port) {
            return Err(error(
                io::ErrorKind::AddrInUse,
                format!("TCP port {port} of the NIC is already listened on"),
            ));
        }
        let mut listener = Listener {
            owner,
            waiting: Vec::new(),
            ready: VecDeque::new(),
            accepts: VecDeque::new(),
        };
        listener.fill_backlog(sockets, port);
        self.listeners.insert(port, listener);
        info!(port, "TCP listening");
        Ok(Response::Listening { port })
    }

    /// Queues an accept on `port`; answered by [`Tcp::progress`].
    pub fn accept(
        &mut self,
        client: ClientId,
        port: u16,
        timeout: Option<Duration>,
        reply: Reply,
        now: Instant,
    ) {
        match self.listeners.get_mut(&port).filter(|l| l.owner == client) {
            Some(listener) => listener.accepts.push_back(Accept {
                reply,
                deadline: timeout.map(|t| now + t),
            }),
            None => {
                let _ = reply.send(Err(not_listening(port)));
            }
        }
    }

    pub fn unlisten(
        &mut self,
        sockets: &mut SocketSet<'static>,
        client: ClientId,
        port: u16,
    ) -> Result<Response, VerbsError> {
        if self.listeners.get(&port).map(|l| l.owner) != Some(client) {
            return Err(not_listening(port));
        }
        if let Some(listener) = self.listeners.remove(&port) {
            listener.close(sockets, port, &mut self.doomed);
        }
        Ok(Response::Done)
    }

    /// Closes the listeners of a host program that went away.
    pub fn forget_client(&mut self, sockets: &mut SocketSet<'static>, client: ClientId) {
        let ports: Vec<u16> = self
            .listeners
            .iter()
            .filter(|(_, l)| l.owner == client)
            .map(|(p, _)| *p)
            .collect();
        for port in ports {
            if let Some(listener) = self.listeners.remove(&port) {
                listener.close(sockets, port, &mut self.doomed);
            }
        }
    }

    /// Bytes hosts wrote, and their half-closes, into their sockets (before the interface
    /// sends). Returns whether any socket has something new to send.
    pub fn host_to_peer(&mut self, sockets: &mut SocketSet<'static>) -> bool {
        let mut news = false;
        for bridge in &mut self.bridges {
            news |= bridge.host_to_peer(sockets.get_mut::<tcp::Socket>(bridge.socket));
        }
        news
    }

    /// After the interface ran (`polled`) or not: answers connects and accepts, delivers
    /// received bytes to the hosts, expires waits and retires finished connections. Returns
    /// whether anything happened.
    pub fn progress(
        &mut self,
        sockets: &mut SocketSet<'static>,
        now: Instant,
        polled: bool,
    ) -> bool {
        if polled {
            for socket in self.doomed.drain(..) {
                sockets.remove(socket);
            }
        }
        let mut busy = self.finish_connects(sockets, now);
        for (port, listener) in &mut self.listeners {
            busy |= listener.progress(sockets, *port, &mut self.bridges, &mut self.doomed, now);
        }
        let mut moved = 0;
        let doomed = &mut self.doomed;
        self.bridges.retain_mut(|bridge| {
            let socket = sockets.get_mut::<tcp::Socket>(bridge.socket);
            moved += bridge.peer_to_host(socket);
            let over = bridge.finished(socket);
            if over {
                debug!("TCP connection over");
                doomed.push(bridge.socket);
            }
            !over
        });
        busy || moved > 0
    }

    /// Whether sockets wait to be retired (the interface must poll them once more).
    pub fn has_doomed(&self) -> bool {
        !self.doomed.is_empty()
    }

    /// The earliest connect or accept deadline.
    pub fn deadline(&self) -> Option<Instant> {
        let connects = self.connecting.iter().map(|c| c.deadline);
        let accepts = self
            .listeners
            .values()
            .flat_map(|l| l.accepts.iter().filter_map(|a| a.deadline));
        connects.chain(accepts).min()
    }

    pub fn interests(&self, sockets: &SocketSet<'static>, out: &mut Vec<Interest>) {
        out.extend(
            self.bridges
                .iter()
                .filter_map(|b| b.interest(sockets.get::<tcp::Socket>(b.socket))),
        );
    }

    fn finish_connects(&mut self, sockets: &mut SocketSet<'static>, now: Instant) -> bool {
        let before = self.connecting.len();
        let mut i = 0;
        while i < self.connecting.len() {
            let c = &self.connecting[i];
            let socket = sockets.get_mut::<tcp::Socket>(c.socket);
            let outcome = if connected(socket.state()) {
                Some(bridge(&mut self.bridges, c.socket, c.peer))
            } else if socket.state() == State::Closed {
                Some(Err(error(
                    io::ErrorKind::ConnectionRefused,
                    format!("connection to {} refused", c.peer),
                )))
            } else if now >= c.deadline {
                socket.abort();
                Some(Err(error(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no answer from {} within {} s",
                        c.peer,
                        CONNECT_TIMEOUT.as_secs()
                    ),
                )))
            } else {
                None
            };
            match outcome {
                Some(result) => {
                    let c = self.connecting.swap_remove(i);
                    if result.is_err() {
                        self.doomed.push(c.socket);
                    }
                    info!(peer = %c.peer, ok = result.is_ok(), "TCP connect finished");
                    let _ = c.reply.send(result);
                }
                None => i += 1,
            }
        }
        self.connecting.len() != before
    }

    /// An ephemeral port no TCP socket of the port uses.
    fn free_port(&mut self, sockets: &SocketSet<'static>) -> Option<u16> {
        let used: HashSet<u16> = sockets
            .iter()
            .filter_map(|(_, s)| match s {
                smoltcp::socket::Socket::Tcp(t) => Some(
                    t.local_endpoint()
                        .map_or(t.listen_endpoint().port, |e| e.port),
                ),
                _ => None,
            })
            .chain(self.listeners.keys().copied())
            .collect();
        let span = u16::MAX - EPHEMERAL_FIRST + 1;
        (0..span).find_map(|_| {
            let port = EPHEMERAL_FIRST + self.next_port % span;
            self.next_port = self.next_port.wrapping_add(1) % span;
            (!used.contains(&port)).then_some(port)
        })
    }
}

fn not_listening(port: u16) -> VerbsError {
    VerbsError::Invalid(format!("this host does not listen on TCP port {port}"))
}

/// Bridges the established connection on `socket` and gives the host's end.
fn bridge(
    bridges: &mut Vec<Bridge>,
    socket: SocketHandle,
    peer: SocketAddr,
) -> Result<Response, VerbsError> {
    let (bridge, stream) = Bridge::open(socket)?;
    bridges.push(bridge);
    Ok(Response::TcpStream { stream, peer })
}

impl Listener {
    /// Listening sockets, so that the listener has `BACKLOG` connections in all.
    fn fill_backlog(&mut self, sockets: &mut SocketSet<'static>, port: u16) {
        while self.waiting.len() + self.ready.len() < BACKLOG {
            let mut socket = new_socket();
            if socket.listen(port).is_err() {
                return;
            }
            self.waiting.push(sockets.add(socket));
        }
    }

    fn progress(
        &mut self,
        sockets: &mut SocketSet<'static>,
        port: u16,
        bridges: &mut Vec<Bridge>,
        doomed: &mut Vec<SocketHandle>,
        now: Instant,
    ) -> bool {
        let mut busy = false;
        let mut i = 0;
        while i < self.waiting.len() {
            if connected(sockets.get::<tcp::Socket>(self.waiting[i]).state()) {
                self.ready.push_back(self.waiting.swap_remove(i));
            } else {
                i += 1;
            }
        }
        while !self.ready.is_empty() && !self.accepts.is_empty() {
            let (Some(socket), Some(accept)) = (self.ready.pop_front(), self.accepts.pop_front())
            else {
                break;
            };
            let peer = sockets
                .get::<tcp::Socket>(socket)
                .remote_endpoint()
                .map(|e| SocketAddr::new(e.addr.into(), e.port));
            let result = match peer {
                Some(peer) => bridge(bridges, socket, peer),
                None => Err(error(
                    io::ErrorKind::ConnectionReset,
                    format!("a connection to TCP port {port} was reset before it was accepted"),
                )),
            };
            if result.is_err() {
                doomed.push(socket);
            }
            info!(port, ?peer, "TCP connection accepted");
            let _ = accept.reply.send(result);
            busy = true;
        }
        self.accepts.retain(|a| {
            let expired = a.deadline.is_some_and(|d| now >= d);
            if expired {
                let _ = a.reply.send(Err(error(
                    io::ErrorKind::TimedOut,
                    format!("no connection to TCP port {port} in time"),
                )));
            }
            !expired
        });
        self.fill_backlog(sockets, port);
        busy
    }

    /// Resets every connection not yet accepted and fails the waiting accepts.
    fn close(self, sockets: &mut SocketSet<'static>, port: u16, doomed: &mut Vec<SocketHandle>) {
        for socket in self.waiting.into_iter().chain(self.ready) {
            sockets.get_mut::<tcp::Socket>(socket).abort();
            doomed.push(socket);
        }
        for accept in self.accepts {
            let _ = accept.reply.send(Err(VerbsError::Invalid(format!(
                "the listener on TCP port {port} was closed"
            ))));
        }
        info!(port, "TCP listener closed");
    }
}
