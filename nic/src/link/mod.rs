//! Links: how frames leave and reach the NIC. The engine sees only this trait, never the medium,
//! so the same transport code runs over an in-process pair, a UDP cable or a raw interface, and
//! wrappers (a pcap tee, fault injection) compose around any of them.

pub mod iface;
pub mod mem;
pub mod pcap;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// A medium that carries whole Ethernet frames.
pub trait Link: Send {
    /// Sends one frame. A medium that cannot take it now drops it, as a wire would; the error
    /// is for the drop counter, never a reason to stop.
    fn send(&mut self, frame: FrameBuf) -> io::Result<()>;

    /// The next received frame, without blocking.
    fn recv(&mut self) -> io::Result<Option<FrameBuf>>;

    /// Called once before the engine starts: the engine's buffer pool (for received frames) and
    /// its waker (for media without a file descriptor, which must wake the engine themselves).
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>);

    /// A file descriptor that becomes readable when frames arrive, if the medium has one.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    /// Frames that reached the wire are in their final place (flushes files). Called at shutdown.
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }

    /// A short description for logs and error messages.
    fn describe(&self) -> String;
}

impl Link for Box<dyn Link> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        (**self).send(frame)
    }
    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        (**self).recv()
    }
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        (**self).attach(pool, waker)
    }
    fn poll_fd(&self) -> Option<RawFd> {
        (**self).poll_fd()
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
