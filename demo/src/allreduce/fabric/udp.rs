//! The taps between processes: each host's cable, from its NIC to its port of the switch, runs
//! through two loopback UDP sockets of the demo — one facing the NIC, one facing the switch —
//! and one thread passes every datagram (one Ethernet frame each) on, showing the NIC's to the
//! [`Taps`] on the way.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::time::Duration;

use super::Taps;
use crate::wire::forward::{cable_end, Forwarder};
use crate::DemoError;

/// The demo's ends of the cables: for host `i`, socket `2i` faces its NIC and `2i + 1` the
/// switch.
pub struct Cables {
    sockets: Vec<UdpSocket>,
}

impl Cables {
    /// The sockets for `hosts` cables, on loopback ports the kernel picks.
    pub fn bind(hosts: usize) -> Result<Cables, DemoError> {
        Ok(Cables {
            sockets: (0..2 * hosts)
                .map(|_| cable_end())
                .collect::<Result<_, _>>()?,
        })
    }

    fn addr(&self, socket: usize) -> Result<SocketAddr, DemoError> {
        self.sockets[socket]
            .local_addr()
            .map_err(|e| DemoError::because("cannot read a socket's address", e))
    }

    /// Where host `host`'s NIC sends its frames.
    pub fn nic_side(&self, host: usize) -> Result<SocketAddr, DemoError> {
        self.addr(2 * host)
    }

    /// Where the switch sends host `host`'s frames.
    pub fn switch_side(&self, host: usize) -> Result<SocketAddr, DemoError> {
        self.addr(2 * host + 1)
    }

    /// Starts passing frames between the NICs whose cables end at `nics` and the switch ports
    /// at `ports` (one each per host, in order), until the forwarder is dropped or `limit` has
    /// passed.
    pub fn connect(
        self,
        nics: &[SocketAddr],
        ports: &[SocketAddr],
        taps: Arc<Taps>,
        limit: Duration,
    ) -> Result<Forwarder, DemoError> {
        let ends = nics.iter().zip(ports).flat_map(|(n, p)| [n, p]);
        for (socket, end) in self.sockets.iter().zip(ends) {
            // Connected: only the NIC or the switch port at the other end can send us frames.
            socket
                .connect(end)
                .and_then(|()| socket.set_nonblocking(true))
                .map_err(|e| DemoError::because("cannot connect the demo's cable ends", e))?;
        }
        Forwarder::spawn(
            "demo-taps",
            self.sockets,
            limit,
            move |sockets, from, frame| {
                if from % 2 == 0 {
                    taps.carry(from / 2, frame);
                }
                // A full socket buffer or a peer not listening: the frame is lost, as on a
                // wire, and the transport recovers.
                let _ = sockets[from ^ 1].send(frame);
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
    fn frames_pass_both_ways_and_the_nics_are_tapped() {
        let macs: Vec<[u8; 6]> = (1..=2).map(|i| [2, 0, 10, 0, 0, i]).collect();
        let taps = Taps::new(macs, None).unwrap();
        let cables = Cables::bind(2).unwrap();
        let open = |to: SocketAddr| {
            let s = UdpSocket::bind("127.0.0.1:0").unwrap();
            s.connect(to).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            s
        };
        let nics: Vec<UdpSocket> = (0..2).map(|i| open(cables.nic_side(i).unwrap())).collect();
        let ports: Vec<UdpSocket> = (0..2)
            .map(|i| open(cables.switch_side(i).unwrap()))
            .collect();
        let addrs = |s: &[UdpSocket]| -> Vec<SocketAddr> {
            s.iter().map(|s| s.local_addr().unwrap()).collect()
        };
        let _forwarder = cables
            .connect(
                &addrs(&nics),
                &addrs(&ports),
                Arc::clone(&taps),
                Duration::from_secs(30),
            )
            .unwrap();
        let frame = roce_frame(Kind::WriteOnly, 1, b"to host 1");
        let mut buf = [0u8; 512];
        nics[0].send(&frame).unwrap();
        let n = ports[0].recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &frame[..]);
        // The switch passes it to host 1's port; host 1's cable carries it to its NIC.
        ports[1].send(&frame).unwrap();
        let n = nics[1].recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &frame[..]);
        // Seen once, as host 0 sent it.
        let seen = taps.seen();
        assert_eq!(seen.frames, 1);
        assert_eq!(seen.link(0, 1).payload, 9);
    }
}
