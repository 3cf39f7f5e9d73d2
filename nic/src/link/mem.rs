//! An in-process pair of links: two NICs in one process, cabled back to back through crossbeam
//! channels. The default medium for tests and the zero-setup demo.

use std::io;
use std::sync::{Arc, OnceLock};

use crossbeam::channel::{self, Receiver, Sender, TrySendError};

use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// Frames that may wait on one direction of the cable, like a NIC's transmit ring.
pub const QUEUE_DEPTH: usize = 1024;
/// Room kept for acknowledgements when the sender is told to hold back data.
const HEADROOM: usize = 64;

/// One end of an in-process cable.
pub struct MemLink {
    tx: Sender<FrameBuf>,
    rx: Receiver<FrameBuf>,
    /// The engine at the other end, woken when a frame is sent to it while it sleeps.
    peer: Arc<OnceLock<Arc<Waker>>>,
    /// This end's engine, given to the peer through the shared slot.
    me: Arc<OnceLock<Arc<Waker>>>,
    name: &'static str,
}

/// Two ends of a cable: what `a` sends, `b` receives, and the reverse.
pub fn pair() -> (MemLink, MemLink) {
    let (tx_ab, rx_ab) = channel::bounded(QUEUE_DEPTH);
    let (tx_ba, rx_ba) = channel::bounded(QUEUE_DEPTH);
    let waker_a = Arc::new(OnceLock::new());
    let waker_b = Arc::new(OnceLock::new());
    (
        MemLink {
            tx: tx_ab,
            rx: rx_ba,
            peer: Arc::clone(&waker_b),
            me: Arc::clone(&waker_a),
            name: "a",
        },
        MemLink {
            tx: tx_ba,
            rx: rx_ab,
            peer: waker_a,
            me: waker_b,
            name: "b",
        },
    )
}

impl Link for MemLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        match self.tx.try_send(frame) {
            Ok(()) => {
                if let Some(peer) = self.peer.get() {
                    peer.wake();
                }
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "in-process cable queue full",
            )),
            Err(TrySendError::Disconnected(_)) => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the other end of the in-process cable is gone",
            )),
        }
    }

    fn can_send(&self) -> bool {
        self.tx.len() + HEADROOM < QUEUE_DEPTH
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        Ok(self.rx.try_recv().ok())
    }

    fn attach(&mut self, _pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        let _ = self.me.set(Arc::clone(waker));
    }

    fn describe(&self) -> String {
        format!("in-process cable (end {})", self.name)
    }
}
