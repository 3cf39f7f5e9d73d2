//! Raw Ethernet on a Linux network interface (a veth end, a tap, a real port) through pnet's
//! datalink channel. The NIC is a host of its own on that wire, with its own MAC and IP
//! addresses, like a second machine plugged into the same switch port; the addresses the
//! kernel has on the interface play no part.
//!
//! The AF_PACKET socket is opened here and handed to pnet (which binds it, turns on promiscuous
//! mode so frames to the NIC's own MAC arrive, and makes it non-blocking), so that the engine
//! can sleep in `poll(2)` on it instead of needing a receive thread. Frames that this machine
//! itself sends out of the interface — the kernel's, and our own — are not delivered to the
//! socket (`PACKET_IGNORE_OUTGOING`): on a real wire a NIC never hears its own transmissions.
//!
//! A kernel on this machine sending through the far end of a veth may use segmentation offload
//! and pass frames larger than any wire's (up to 64 KiB of TCP) for "hardware" to cut up; they
//! do not fit a frame buffer and are dropped (logged once). Turn it off on the sending
//! interface (`ip link set DEV gso_max_size 1500`) for bulk TCP from a local kernel.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Duration;

use pnet_datalink::{Channel, DataLinkReceiver, DataLinkSender};
use tracing::{debug, warn};

use super::Link;
use crate::buf::{BufPool, FrameBuf, FRAME_CAPACITY};
use crate::waker::Waker;

/// Linux's socket option that stops an AF_PACKET socket from seeing outgoing frames (4.20+).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Why an interface could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum IfaceError {
    #[error("no network interface named {0}")]
    NoInterface(String),
    #[error("opening {0} needs the CAP_NET_RAW capability (run as root or grant it)")]
    NotPermitted(String),
    #[error("cannot open a raw socket on {name}: {source}")]
    Os { name: String, source: io::Error },
}

impl From<IfaceError> for io::Error {
    fn from(e: IfaceError) -> io::Error {
        let kind = match &e {
            IfaceError::NoInterface(_) => io::ErrorKind::NotFound,
            IfaceError::NotPermitted(_) => io::ErrorKind::PermissionDenied,
            IfaceError::Os { source, .. } => source.kind(),
        };
        io::Error::new(kind, e)
    }
}

/// A link on a network interface.
pub struct IfaceLink {
    name: String,
    tx: Box<dyn DataLinkSender>,
    rx: Box<dyn DataLinkReceiver>,
    /// The AF_PACKET socket behind `tx` and `rx` (pnet owns and closes it), for `poll(2)`.
    fd: RawFd,
    pool: Arc<BufPool>,
    /// An oversized frame was dropped and said so (once is enough).
    warned_oversized: bool,
}

impl IfaceLink {
    /// Opens interface `name` of the calling thread's network namespace.
    pub fn open(name: &str) -> Result<IfaceLink, IfaceError> {
        let interface = pnet_datalink::interfaces()
            .into_iter()
            .find(|i| i.name == name)
            .ok_or_else(|| IfaceError::NoInterface(name.to_owned()))?;
        let fd = packet_socket(name)?;
        ignore_outgoing(fd, name);
        let config = pnet_datalink::Config {
            // One byte more than a frame buffer, so that an oversized frame shows.
            read_buffer_size: FRAME_CAPACITY + 1,
            write_buffer_size: FRAME_CAPACITY,
            // Zero timeouts: `recv` and `send` never wait; the engine polls the socket itself.
            read_timeout: Some(Duration::ZERO),
            write_timeout: Some(Duration::ZERO),
            promiscuous: true,
            socket_fd: Some(fd),
            ..Default::default()
        };
        // On failure pnet has closed the socket already.
        let channel = pnet_datalink::channel(&interface, config).map_err(|e| os_error(name, e))?;
        let Channel::Ethernet(tx, rx) = channel else {
            return Err(IfaceError::Os {
                name: name.to_owned(),
                source: io::Error::other("pnet gave a channel that is not Ethernet"),
            });
        };
        debug!(interface = name, fd, "raw Ethernet link open");
        Ok(IfaceLink {
            name: name.to_owned(),
            tx,
            rx,
            fd,
            pool: BufPool::new(64),
            warned_oversized: false,
        })
    }
}

/// A raw socket for every protocol, closed on exec.
fn packet_socket(name: &str) -> Result<RawFd, IfaceError> {
    let protocol = (libc::ETH_P_ALL as u16).to_be();
    // SAFETY: plain system call; the result is checked.
    let fd = unsafe {
        libc::socket(
            libc::AF_PACKET,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::c_int::from(protocol),
        )
    };
    if fd < 0 {
        return Err(os_error(name, io::Error::last_os_error()));
    }
    Ok(fd)
}

fn os_error(name: &str, source: io::Error) -> IfaceError {
    match source.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) => IfaceError::NotPermitted(name.to_owned()),
        Some(libc::ENODEV) => IfaceError::NoInterface(name.to_owned()),
        _ => IfaceError::Os {
            name: name.to_owned(),
            source,
        },
    }
}

/// Asks the kernel not to loop outgoing frames back to the socket. Older kernels lack the
/// option; the engine then still drops frames from its own MAC, but may see the kernel's.
fn ignore_outgoing(fd: RawFd, name: &str) {
    let on: libc::c_int = 1;
    // SAFETY: `fd` is a socket we own; the option value is a valid c_int.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_IGNORE_OUTGOING,
            (&on as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        warn!(
            interface = name,
            error = %io::Error::last_os_error(),
            "the kernel cannot hide outgoing frames from the NIC"
        );
    }
}

/// Reads and so clears a pending socket error (e.g. the interface went down): until it is
/// cleared, `poll(2)` reports the socket ready and the engine would never sleep.
fn clear_socket_error(fd: RawFd) -> Option<io::Error> {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `fd` is our socket; `err` and `len` are valid for the call.
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&mut err as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0 && err != 0).then(|| io::Error::from_raw_os_error(err))
}

/// pnet's way of saying that nothing is there (a zero read timeout expired).
fn would_block(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

impl Link for IfaceLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        match self.tx.send_to(&frame, None) {
            Some(result) => result,
            None => Err(io::Error::other("the datalink channel cannot send frames")),
        }
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        loop {
            match self.rx.next() {
                Ok(bytes) if bytes.len() > FRAME_CAPACITY => {
                    if !self.warned_oversized {
                        warn!(
                            interface = %self.name,
                            "a frame larger than {FRAME_CAPACITY} bytes arrived (segmentation \
                             offload of a local sender?): dropped, as will be any more"
                        );
                    }
                    self.warned_oversized = true;
                }
                Ok(bytes) => return Ok(Some(self.pool.copy_of(bytes))),
                Err(e) if would_block(&e) => return Ok(None),
                Err(e) => return Err(clear_socket_error(self.fd).unwrap_or(e)),
            }
        }
    }

    fn attach(&mut self, pool: &Arc<BufPool>, _waker: &Arc<Waker>) {
        self.pool = Arc::clone(pool);
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn describe(&self) -> String {
        format!("interface {}", self.name)
    }
}
