//! The relay inside one process: each NIC's link hands the frames it sends to the [`Relay`],
//! which puts them on the queue of the destination port's link and wakes that NIC. No thread
//! of its own: a frame crosses in the sending NIC's engine, as over the in-process cable.

use std::io;
use std::sync::{Arc, OnceLock};

use crossbeam::channel::{self, Receiver, Sender, TrySendError};
use roce_nic::buf::{BufPool, FrameBuf};
use roce_nic::link::mem::QUEUE_DEPTH;
use roce_nic::link::Link;
use roce_nic::waker::Waker;

use super::{Relay, Route};

/// Room kept for acknowledgements when a sender is told to hold back data.
const HEADROOM: usize = 64;

/// What the links share: each port's queue, and the engine to wake when a frame is put on it.
struct Ports {
    queues: Vec<Sender<FrameBuf>>,
    wakers: Vec<OnceLock<Arc<Waker>>>,
}

/// The link of the NIC on one port of the relay.
pub struct RelayLink {
    relay: Arc<Relay>,
    ports: Arc<Ports>,
    port: usize,
    incoming: Receiver<FrameBuf>,
    /// The engine's pool, for the copies of a flooded frame.
    pool: Option<Arc<BufPool>>,
}

/// A link for each port of `relay`, in port order.
pub fn links(relay: &Arc<Relay>) -> Vec<RelayLink> {
    let (queues, incoming): (Vec<_>, Vec<_>) = (0..relay.ports())
        .map(|_| channel::bounded(QUEUE_DEPTH))
        .unzip();
    let ports = Arc::new(Ports {
        queues,
        wakers: (0..relay.ports()).map(|_| OnceLock::new()).collect(),
    });
    incoming
        .into_iter()
        .enumerate()
        .map(|(port, incoming)| RelayLink {
            relay: Arc::clone(relay),
            ports: Arc::clone(&ports),
            port,
            incoming,
            pool: None,
        })
        .collect()
}

impl RelayLink {
    /// Puts `frame` on port `to`'s queue and wakes its engine; a full queue loses it, as a
    /// switch's full buffer does.
    fn deliver(&self, to: usize, frame: FrameBuf) -> io::Result<()> {
        match self.ports.queues[to].try_send(frame) {
            Ok(()) => {
                if let Some(waker) = self.ports.wakers[to].get() {
                    waker.wake();
                }
                Ok(())
            }
            Err(TrySendError::Full(_)) => Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "the relay's queue to that port is full",
            )),
            Err(TrySendError::Disconnected(_)) => Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the NIC on that port is gone",
            )),
        }
    }
}

impl Link for RelayLink {
    fn send(&mut self, frame: FrameBuf) -> io::Result<()> {
        match self.relay.route(self.port, &frame) {
            Route::Port(to) => self.deliver(to, frame),
            Route::Flood => {
                let Some(pool) = &self.pool else {
                    return Ok(());
                };
                for to in (0..self.ports.queues.len()).filter(|&to| to != self.port) {
                    let _ = self.deliver(to, pool.copy_of(&frame));
                }
                Ok(())
            }
            Route::Drop => Ok(()),
        }
    }

    /// Whether every other port's queue has room: the relay's ports are few, and a sender
    /// cannot know where its next frame goes.
    fn can_send(&self) -> bool {
        self.ports
            .queues
            .iter()
            .enumerate()
            .all(|(port, q)| port == self.port || q.len() + HEADROOM < QUEUE_DEPTH)
    }

    fn recv(&mut self) -> io::Result<Option<FrameBuf>> {
        Ok(self.incoming.try_recv().ok())
    }

    fn attach(&mut self, pool: &Arc<BufPool>, waker: &Arc<Waker>) {
        self.pool = Some(Arc::clone(pool));
        let _ = self.ports.wakers[self.port].set(Arc::clone(waker));
    }

    fn describe(&self) -> String {
        format!("port {} of the demo's relay", self.port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::roce_frame;
    use roce_wire::Kind;

    #[test]
    fn a_frame_sent_on_one_port_comes_out_of_its_destination_only() {
        let macs: Vec<[u8; 6]> = (1..=3).map(|i| [2, 0, 10, 0, 0, i]).collect();
        let relay = Relay::new(macs, None).unwrap();
        let mut links = links(&relay);
        let pool = BufPool::new(8);
        for link in &mut links {
            link.attach(
                &pool,
                &Waker::new(roce_nic::waker::SharedWord::private()).unwrap(),
            );
        }
        let frame = roce_frame(Kind::WriteOnly, 1, b"hello");
        assert!(links[0].can_send());
        links[0].send(pool.copy_of(&frame)).unwrap();
        assert_eq!(&links[1].recv().unwrap().unwrap()[..], &frame[..]);
        assert!(links[2].recv().unwrap().is_none());
        assert!(links[0].recv().unwrap().is_none());
        let mut broadcast = frame.clone();
        broadcast[..6].copy_from_slice(&[0xff; 6]);
        links[2].send(pool.copy_of(&broadcast)).unwrap();
        for i in [0, 1] {
            assert_eq!(&links[i].recv().unwrap().unwrap()[..], &broadcast[..]);
        }
        assert!(links[2].recv().unwrap().is_none());
        assert_eq!(relay.seen().frames, 2);
        assert_eq!(links[1].describe(), "port 1 of the demo's relay");
    }
}
