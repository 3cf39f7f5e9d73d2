//! TCP through the NIC's own IP addresses, for the out-of-band exchanges RDMA programs make
//! before their RDMA traffic (QP numbers, PSNs, GIDs). Not part of libibverbs: on a real host
//! these go through the kernel's TCP on the RNIC's Ethernet function; here the NIC's port runs
//! the TCP, and a host program gets each connection as one end of a Unix stream pair — an
//! ordinary blocking stream, which a host in another process receives over the NIC's socket.

use std::net::SocketAddr;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use super::context::{Context, Inner};
use super::VerbsError;
use crate::control::{Request, Response};

impl Context {
    /// Connects from the NIC's address to `addr` (on one of the NIC's subnets). Fails like
    /// `connect(2)`: `ConnectionRefused` when nobody listens, `TimedOut` after
    /// [`CONNECT_TIMEOUT`](crate::port::CONNECT_TIMEOUT) without an answer.
    pub fn tcp_connect(&self, addr: SocketAddr) -> Result<UnixStream, VerbsError> {
        match self.inner.call(Request::TcpConnect { addr })? {
            Response::TcpStream { stream, .. } => Ok(stream),
            _ => Err(self.inner.unexpected("a TCP connect")),
        }
    }

    /// Listens on TCP `port` of every address of the NIC; stops when the listener is dropped.
    pub fn tcp_listen(&self, port: u16) -> Result<PortListener, VerbsError> {
        match self.inner.call(Request::TcpListen { port })? {
            Response::Listening { port } => Ok(PortListener {
                ctx: Arc::clone(&self.inner),
                port,
            }),
            _ => Err(self.inner.unexpected("a TCP listen")),
        }
    }
}

/// A TCP port the NIC listens on for this host program. Connections that arrive wait (up to
/// [`BACKLOG`](crate::port::BACKLOG) of them) until accepted.
pub struct PortListener {
    ctx: Arc<Inner>,
    port: u16,
}

impl PortListener {
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Waits for the next connection: the stream and the peer's address.
    pub fn accept(&self) -> Result<(UnixStream, SocketAddr), VerbsError> {
        self.accept_within(None)
    }

    /// Like [`PortListener::accept`], but fails with `TimedOut` after `timeout`.
    pub fn accept_timeout(
        &self,
        timeout: Duration,
    ) -> Result<(UnixStream, SocketAddr), VerbsError> {
        self.accept_within(Some(timeout))
    }

    fn accept_within(
        &self,
        timeout: Option<Duration>,
    ) -> Result<(UnixStream, SocketAddr), VerbsError> {
        let request = Request::TcpAccept {
            port: self.port,
            timeout,
        };
        match self.ctx.call(request)? {
            Response::TcpStream { stream, peer } => Ok((stream, peer)),
            _ => Err(self.ctx.unexpected("a TCP accept")),
        }
    }
}

impl Drop for PortListener {
    fn drop(&mut self) {
        let _ = self.ctx.call(Request::TcpUnlisten { port: self.port });
    }
}
