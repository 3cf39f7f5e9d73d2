//! The out-of-band TCP connection the tools make before (and after) their RDMA traffic, carried
//! by the NIC's own TCP/IP stack: the peer sees it arrive on the same wire as the RoCE packets,
//! from the address of the GID the tool uses, exactly as from a host with one network card.
//!
//! The real tools read each message with one `read()` that must return all of it, so every
//! message here leaves in one write. They also wait for ever; every wait here is bounded.

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use roce_nic::verbs::{Context, VerbsError};
use tracing::debug;

use crate::ToolError;

/// Which side of the exchange a run takes. As with the real tools, a run given no peer address
/// is the server, and a client is given the server's IP address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Server,
    Client(IpAddr),
}

/// How long a run may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The longest any one step may wait: the client's connection, a message, a completion.
    pub step: Duration,
    /// How long a client keeps trying while nothing listens at the server's port. The real
    /// tools try once; trying again is safe, since a refused connection exchanged nothing, and
    /// it lets a client be started before its server.
    pub connect_retry: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            step: Duration::from_secs(60),
            connect_retry: Duration::ZERO,
        }
    }
}

/// Pause between two connection attempts while the server is not listening yet.
const RETRY_PAUSE: Duration = Duration::from_millis(200);
/// How long a finished run waits for the peer to close its side.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// One run's connection to the peer tool.
pub(crate) struct Channel {
    stream: UnixStream,
    server: bool,
    step: Duration,
}

impl Channel {
    /// Accepts the one connection a server takes on TCP `port` (and stops listening, as the
    /// real tools do), or connects to the server at `port`.
    pub fn open(
        ctx: &Context,
        role: Role,
        port: u16,
        limits: Limits,
    ) -> Result<Channel, ToolError> {
        let stream = match role {
            Role::Server => {
                let listener = ctx.tcp_listen(port)?;
                match listener.accept_timeout(limits.step) {
                    Ok((stream, peer)) => {
                        debug!(%peer, "out-of-band connection accepted");
                        stream
                    }
                    Err(VerbsError::Io(e)) if e.kind() == ErrorKind::TimedOut => {
                        return Err(ToolError::timeout(
                            format!("client connected to TCP port {port}"),
                            limits.step,
                        ))
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Role::Client(ip) => connect(ctx, SocketAddr::new(ip, port), limits.connect_retry)?,
        };
        Ok(Channel {
            stream,
            server: role == Role::Server,
            step: limits.step,
        })
    }

    /// Sends one message, in one write.
    pub fn send(&mut self, msg: &[u8]) -> Result<(), ToolError> {
        self.stream.write_all(msg)?;
        Ok(())
    }

    /// Receives a message of exactly `len` bytes.
    pub fn recv(&mut self, len: usize, what: &'static str) -> Result<Vec<u8>, ToolError> {
        let mut msg = vec![0; len];
        let deadline = Instant::now() + self.step;
        let mut got = 0;
        while got < len {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(ToolError::timeout(what, self.step));
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut msg[got..]) {
                Ok(0) => return Err(ToolError::Closed { what }),
                Ok(n) => got += n,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Err(ToolError::timeout(what, self.step))
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(msg)
    }

    /// One message each way, of the same size: the client writes first and the server reads
    /// first, the lock-step all of these exchanges follow.
    pub fn swap(&mut self, mine: &[u8], what: &'static str) -> Result<Vec<u8>, ToolError> {
        if self.server {
            let theirs = self.recv(mine.len(), what)?;
            self.send(mine)?;
            Ok(theirs)
        } else {
            self.send(mine)?;
            self.recv(mine.len(), what)
        }
    }

    pub fn is_server(&self) -> bool {
        self.server
    }

    /// Ends the exchange: closes our sending side, then reads what the peer still sends until
    /// it closes too, which must be exactly `expect` (perftest's last words are `done`). Waits
    /// for the close at most a few seconds: a peer that lingers has nothing more to say.
    pub fn finish(mut self, expect: &[u8]) -> Result<(), ToolError> {
        self.stream.shutdown(Shutdown::Write)?;
        let deadline = Instant::now() + CLOSE_WAIT.min(self.step);
        let mut rest = Vec::new();
        let mut buf = [0u8; 256];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                debug!("the peer did not close its side; leaving");
                break;
            }
            self.stream.set_read_timeout(Some(left))?;
            match self.stream.read(&mut buf) {
                Ok(0) => break,
                Ok(n) if rest.len() + n <= expect.len() => rest.extend_from_slice(&buf[..n]),
                Ok(_) => {
                    return Err(ToolError::Protocol(format!(
                        "more than the {} byte(s) expected at the end of the exchange",
                        expect.len()
                    )))
                }
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                // A reset after everything was said is a close like any other.
                Err(e) if e.kind() == ErrorKind::ConnectionReset => break,
                Err(e) => return Err(e.into()),
            }
        }
        if rest.is_empty() || rest == expect {
            Ok(())
        } else {
            Err(ToolError::Protocol(format!(
                "{:?} instead of {:?} at the end of the exchange",
                rest.escape_ascii().to_string(),
                expect.escape_ascii().to_string()
            )))
        }
    }
}

/// Connects, trying again while the server refuses (is not listening yet) or does not answer
/// (is not up yet), until `retry` has passed.
fn connect(ctx: &Context, addr: SocketAddr, retry: Duration) -> Result<UnixStream, ToolError> {
    let deadline = Instant::now() + retry;
    loop {
        match ctx.tcp_connect(addr) {
            Ok(stream) => return Ok(stream),
            Err(VerbsError::Io(e))
                if matches!(e.kind(), ErrorKind::ConnectionRefused | ErrorKind::TimedOut)
                    && Instant::now() + RETRY_PAUSE < deadline =>
            {
                debug!(%addr, error = %e, "server not there yet; trying again");
                std::thread::sleep(RETRY_PAUSE);
            }
            Err(e) => {
                return Err(ToolError::Connect {
                    peer: addr.to_string(),
                    reason: e.to_string(),
                })
            }
        }
    }
}
