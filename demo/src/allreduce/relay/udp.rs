//! The relay between NIC processes: a loopback UDP socket of the demo for each NIC's cable, and
//! one thread that forwards every datagram (one Ethernet frame each) where the [`Relay`] says.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use super::{Relay, Route};
use crate::wire::forward::{cable_end, Forwarder};
use crate::DemoError;

/// The relay's ends of the cables, one per port.
pub struct Ports {
    sockets: Vec<UdpSocket>,
}

impl Ports {
    /// `n` sockets on loopback ports the kernel picks.
    pub fn bind(n: usize) -> Result<Ports, DemoError> {
        Ok(Ports {
            sockets: (0..n).map(|_| cable_end()).collect::<Result<_, _>>()?,
        })
    }

    /// Where the NIC on `port` sends its frames.
    pub fn addr(&self, port: usize) -> Result<SocketAddr, DemoError> {
        self.sockets[port]
            .local_addr()
            .map_err(|e| DemoError::because("cannot read a socket's address", e))
    }

    /// Starts relaying between the NICs whose cables end at `nics` (one per port, in order),
    /// until the forwarder is dropped or `limit` has passed.
    pub fn relay(
        self,
        nics: &[SocketAddr],
        relay: Arc<Relay>,
        limit: Duration,
    ) -> Result<Forwarder, DemoError> {
        for (socket, nic) in self.sockets.iter().zip(nics) {
            // Connected: only the NIC at the other end of this cable can send us frames.
            socket
                .connect(nic)
                .and_then(|()| socket.set_nonblocking(true))
                .map_err(|e| DemoError::because("cannot connect the relay's cable ends", e))?;
        }
        Forwarder::spawn(
            "demo-relay",
            self.sockets,
            limit,
            move |sockets, from, frame| {
                // A full socket buffer or a NIC not listening: the frame is lost, as on a
                // wire, and the transport recovers.
                match relay.route(from, frame) {
                    Route::Port(to) => {
                        let _ = sockets[to].send(frame);
                    }
                    Route::Flood => {
                        for (to, socket) in sockets.iter().enumerate() {
                            if to != from {
                                let _ = socket.send(frame);
                            }
                        }
                    }
                    Route::Drop => {}
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::tests::roce_frame;
    use roce_wire::Kind;

    #[test]
    fn frames_reach_the_port_of_their_mac_and_broadcasts_all_others() {
        let macs: Vec<[u8; 6]> = (1..=3).map(|i| [2, 0, 10, 0, 0, i]).collect();
        let relay = Relay::new(macs, None).unwrap();
        let ports = Ports::bind(3).unwrap();
        let nics: Vec<UdpSocket> = (0..3)
            .map(|i| {
                let nic = UdpSocket::bind("127.0.0.1:0").unwrap();
                nic.connect(ports.addr(i).unwrap()).unwrap();
                nic.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                nic
            })
            .collect();
        let ends: Vec<SocketAddr> = nics.iter().map(|n| n.local_addr().unwrap()).collect();
        let _forwarder = ports
            .relay(&ends, Arc::clone(&relay), Duration::from_secs(30))
            .unwrap();
        let frame = roce_frame(Kind::WriteOnly, 1, b"to port 1");
        nics[0].send(&frame).unwrap();
        let mut buf = [0u8; 512];
        let n = nics[1].recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &frame[..]);
        let mut broadcast = frame.clone();
        broadcast[..6].copy_from_slice(&[0xff; 6]);
        nics[1].send(&broadcast).unwrap();
        for i in [0, 2] {
            let n = nics[i].recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &broadcast[..]);
        }
        let seen = relay.seen();
        assert_eq!((seen.frames, seen.flooded), (2, 1));
        assert_eq!(seen.link(0, 1).payload, 9);
    }
}
