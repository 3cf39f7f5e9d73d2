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
    /// Someone calls [`Link::flush_sends`] (an engine does at the end of every pass): the peer
    /// is then woken once per pass that sent it frames, not once per frame (each wake is a
    /// full memory fence). Until the first call, and so for a bare end or a wrapper that does
    /// not pass the call on, the peer is woken at every send.
    engine_driven: bool,
    /// Frames sent since the peer was last woken.
    unwoken: bool,
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
            engine_driven: false,
            unwoken: false,
            name: "a",
        },
        MemLink {
            tx: tx_ba,
            rx: rx_ab,
            peer: waker_a,
            me: waker_b,
            engine_driven: false,
            unwoken: false,
            name: "b",
        },
    )
}

impl MemLink {
    fn wake_peer(&self) {
        if let Some(peer) = self.peer.get() {
            peer.wake();
        }
    }
}

impl Link for MemLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        match self.tx.try_send(frame) {
            Ok(()) => {
                if self.engine_driven {
                    self.unwoken = true;
                } else {
                    self.wake_peer();
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
        let frame = self.rx.try_recv().ok();
        // The other end holds new packets back while this direction is full (`can_send`) and
        // may fall asleep doing so; a responder streaming READ responses hears nothing from us
        // that would wake it. So the frame whose taking gives it room again wakes it.
        if frame.is_some() && self.rx.len() + HEADROOM + 1 == QUEUE_DEPTH {
            self.wake_peer();
        }
        Ok(frame)
    }

    fn attach(&mut self, _pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        let _ = self.me.set(Arc::clone(waker));
    }

    fn flush_sends(&mut self) -> u64 {
        self.engine_driven = true;
        if std::mem::take(&mut self.unwoken) {
            self.wake_peer();
        }
        0
    }

    fn flush(&mut self) -> io::Result<()> {
        self.flush_sends();
        Ok(())
    }

    fn describe(&self) -> String {
        format!("in-process cable (end {})", self.name)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::{AsFd, AsRawFd};

    use super::*;
    use crate::waker::SharedWord;

    /// Whether `waker` was signalled (its eventfd is readable).
    fn signalled(waker: &Waker) -> bool {
        let mut pollfd = libc::pollfd {
            fd: waker.as_fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut pollfd, 1, 0) == 1 }
    }

    #[test]
    fn taking_a_frame_from_a_full_direction_wakes_the_sender() {
        let (mut a, mut b) = pair();
        let pool = BufPool::new(4);
        let wake_a = Waker::new(SharedWord::private()).unwrap();
        let wake_b = Waker::new(SharedWord::private()).unwrap();
        a.attach(&pool, &wake_a);
        b.attach(&pool, &wake_b);
        while a.can_send() {
            a.send(pool.take()).unwrap();
        }
        // a holds back its next packets and falls asleep; b takes one frame.
        wake_a.prepare_sleep();
        assert!(!signalled(&wake_a));
        assert!(b.recv().unwrap().is_some());
        assert!(a.can_send());
        assert!(signalled(&wake_a), "a has room again and must hear of it");
    }
}
