//! Links: how frames leave and reach the NIC. The engine sees only this trait, never the medium,
//! so the same transport code runs over an in-process pair, a UDP cable or a raw interface, and
//! wrappers (a pcap tee, fault injection) compose around any of them.

pub mod cable;
pub mod ecn;
pub mod faults;
pub mod iface;
pub mod mem;
pub mod paced;
pub mod pcap;
pub mod pfc;
pub mod shm;
pub mod udp_batch;
pub mod udp_recv;

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// A medium that carries whole Ethernet frames.
pub trait Link: Send {
    /// Sends one frame. A medium that cannot take it now drops it, as a wire would; the error
    /// is for the drop counter, never a reason to stop.
    fn send(&mut self, frame: FrameBuf) -> io::Result<()>;

    /// Whether the medium can take more frames now. A wire is never "full" — the sender simply
    /// cannot transmit faster than the line rate — so a medium with a bounded queue (the
    /// in-process cable) says so here, and the engine holds back new packets instead of losing
    /// them.
    fn can_send(&self) -> bool {
        true
    }

    /// The next received frame, without blocking.
    fn recv(&mut self) -> io::Result<Option<FrameBuf>>;

    /// Called once before the engine starts: the engine's buffer pool (for received frames) and
    /// its waker (for media without a file descriptor, which must wake the engine themselves).
    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>);

    /// A file descriptor that becomes readable when frames arrive, if the medium has one.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }

    /// Lets a link that holds frames back (delay, reordering) release the ones whose time has
    /// come. Called at every engine pass; returns when it next needs to be called.
    fn service(&mut self, _now: Instant) -> Option<Instant> {
        None
    }

    /// Puts on the wire what [`Link::send`] held back to batch its system calls (the UDP cable
    /// sends up to a batch of frames with one `sendmmsg`), and returns how many frames were
    /// lost doing so since the last call (a full socket buffer: the engine counts them as
    /// dropped). The engine calls it at the end of every pass, before it sleeps; a link that
    /// sends at once has nothing to do.
    fn flush_sends(&mut self) -> u64 {
        0
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
    fn can_send(&self) -> bool {
        (**self).can_send()
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
    fn service(&mut self, now: Instant) -> Option<Instant> {
        (**self).service(now)
    }
    fn flush_sends(&mut self) -> u64 {
        (**self).flush_sends()
    }
    fn flush(&mut self) -> io::Result<()> {
        (**self).flush()
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}
