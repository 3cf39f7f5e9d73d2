//! The wire inside one process: a link wrapper that hands every frame its NIC sends to the
//! [`Wire`] first, and sends it on only if the wire does not lose it — or to any other watcher
//! (the allreduce's taps on the cables to its switch).

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::Link;
use roce_nic::waker::Waker;

use super::Wire;
use crate::Side;

/// What a tap does with each frame its NIC sends: look at it, and say whether it goes on.
type Watch = Box<dyn FnMut(&[u8]) -> bool + Send>;

/// A NIC's link, watched.
pub struct Tap<L: Link> {
    inner: L,
    watch: Watch,
}

impl<L: Link> Tap<L> {
    /// The link of the NIC on `side`, watched by the wire.
    pub fn new(inner: L, wire: Arc<Wire>, side: Side) -> Tap<L> {
        Tap::watching(inner, move |frame| wire.carry(side, frame))
    }

    /// The link `inner`, whose every frame sent goes to `watch` first, and on if it says so.
    pub fn watching(inner: L, watch: impl FnMut(&[u8]) -> bool + Send + 'static) -> Tap<L> {
        Tap {
            inner,
            watch: Box::new(watch),
        }
    }
}

impl<L: Link> Link for Tap<L> {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        if (self.watch)(&frame) {
            self.inner.send(frame)
        } else {
            // Lost on the wire: the sender cannot tell, as with a real cable.
            Ok(())
        }
    }

    fn can_send(&self) -> bool {
        self.inner.can_send()
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        self.inner.recv()
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.inner.attach(pool, waker)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.inner.poll_fd()
    }

    fn service(&mut self, now: Instant) -> Option<Instant> {
        self.inner.service(now)
    }

    fn flush_sends(&mut self) -> u64 {
        self.inner.flush_sends()
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }

    fn describe(&self) -> String {
        format!("{} watched by the demo", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use roce_nic::link::mem;
    use roce_wire::Kind;

    #[test]
    fn frames_pass_through_the_wire_and_a_lost_one_never_arrives() {
        let wire = Wire::new(None, Some(0)).unwrap();
        let (a, b) = mem::pair();
        let mut a = Tap::new(a, Arc::clone(&wire), Side::Initiator);
        let mut b = Tap::new(b, Arc::clone(&wire), Side::Target);
        let pool = BufPool::new(8);
        let lost = super::super::tests::roce_frame(Kind::WriteOnly, 1, b"lost");
        let kept = super::super::tests::roce_frame(Kind::WriteOnly, 2, b"kept");
        a.send(pool.copy_of(&lost)).unwrap();
        a.send(pool.copy_of(&kept)).unwrap();
        b.send(pool.copy_of(b"back")).unwrap();
        assert_eq!(&b.recv().unwrap().unwrap()[..], &kept[..]);
        assert!(b.recv().unwrap().is_none());
        assert_eq!(&a.recv().unwrap().unwrap()[..], b"back");
        let sides: Vec<(Side, bool)> = wire.frames().iter().map(|f| (f.from, f.dropped)).collect();
        assert_eq!(
            sides,
            [
                (Side::Initiator, true),
                (Side::Initiator, false),
                (Side::Target, false)
            ]
        );
        assert!(a.describe().ends_with("watched by the demo"));
    }
}
