//! ECN in the IP header of a frame: what a switch reads and marks, and what a sender sets to say
//! that its packets may be marked instead of dropped (RFC 3168). RoCEv2 congestion control
//! (DCQCN) starts here: a sender marks its packets ECN-capable (ECT), a congested switch turns
//! ECT into CE, and the receiver answers CE with a CNP.
//!
//! The ICRC leaves the IPv4 TOS and IPv6 traffic class out (they change on the way), so only the
//! IPv4 header checksum needs fixing after a change.

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::Instant;

use smoltcp::wire::{Ipv4Packet, Ipv6Packet};

use super::Link;
use crate::buf::{BufPool, FrameBuf};
use crate::waker::Waker;

/// The RoCEv2 UDP destination port.
pub const ROCEV2_PORT: u16 = 4791;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: u16 = 0x8100;
const UDP: u8 = 17;

/// The two ECN bits of an IP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ecn {
    NotEct = 0,
    Ect1 = 1,
    Ect0 = 2,
    Ce = 3,
}

impl Ecn {
    fn from_bits(bits: u8) -> Ecn {
        match bits & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// Whether a switch may mark this packet instead of dropping it.
    pub fn is_capable(self) -> bool {
        matches!(self, Ecn::Ect0 | Ecn::Ect1)
    }
}

/// Where the IP header starts (after one optional 802.1Q tag) and its version.
fn ip_header(frame: &[u8]) -> Option<(usize, u8)> {
    let ethertype = |at: usize| Some(u16::from_be_bytes(frame.get(at..at + 2)?.try_into().ok()?));
    let (at, kind) = match ethertype(12)? {
        ETHERTYPE_VLAN => (18, ethertype(16)?),
        kind => (14, kind),
    };
    match kind {
        ETHERTYPE_IPV4 => Some((at, 4)),
        ETHERTYPE_IPV6 => Some((at, 6)),
        _ => None,
    }
}

/// The ECN bits of an IP frame; `None` for anything else (ARP, pause frames, a truncated header).
pub fn ecn(frame: &[u8]) -> Option<Ecn> {
    let (at, version) = ip_header(frame)?;
    let ip = &frame[at..];
    Some(match version {
        4 => Ecn::from_bits(Ipv4Packet::new_checked(ip).ok()?.ecn()),
        _ => Ecn::from_bits(Ipv6Packet::new_checked(ip).ok()?.traffic_class()),
    })
}

/// Sets the ECN bits of an IP frame (and the IPv4 header checksum); false if it is not one.
pub fn set_ecn(frame: &mut [u8], value: Ecn) -> bool {
    let Some((at, version)) = ip_header(frame) else {
        return false;
    };
    let ip = &mut frame[at..];
    match version {
        4 => {
            let Ok(mut packet) = Ipv4Packet::new_checked(ip) else {
                return false;
            };
            packet.set_ecn(value as u8);
            packet.fill_checksum();
        }
        _ => {
            let Ok(mut packet) = Ipv6Packet::new_checked(ip) else {
                return false;
            };
            let class = packet.traffic_class();
            packet.set_traffic_class((class & !3) | value as u8);
        }
    }
    true
}

/// Whether the frame is a RoCEv2 packet (UDP to port 4791 over IPv4 or IPv6).
pub fn is_rocev2(frame: &[u8]) -> bool {
    let Some((at, version)) = ip_header(frame) else {
        return false;
    };
    let ip = &frame[at..];
    let udp_at = match version {
        4 => match Ipv4Packet::new_checked(ip) {
            Ok(p) if p.next_header() == smoltcp::wire::IpProtocol::Udp => {
                usize::from(p.header_len())
            }
            _ => return false,
        },
        _ => match Ipv6Packet::new_checked(ip) {
            Ok(p) if u8::from(p.next_header()) == UDP => 40,
            _ => return false,
        },
    };
    ip.get(udp_at + 2..udp_at + 4) == Some(&ROCEV2_PORT.to_be_bytes()[..])
}

/// A link that marks the RoCEv2 packets it sends ECN-capable (ECT(0)), as a NIC with congestion
/// control enabled does, so that switches on the way mark them CE instead of dropping them when
/// their queues grow. Other traffic (ARP, the port's TCP) is left as it is: it has not
/// negotiated ECN.
pub struct Ect<L> {
    inner: L,
}

impl<L: Link> Ect<L> {
    pub fn new(inner: L) -> Ect<L> {
        Ect { inner }
    }
}

impl<L: Link> Link for Ect<L> {
    fn send(&mut self, mut frame: FrameBuf) -> io::Result<()> {
        if is_rocev2(&frame) && ecn(&frame) == Some(Ecn::NotEct) {
            set_ecn(&mut frame, Ecn::Ect0);
        }
        self.inner.send(frame)
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
        format!("{}, ECT on RoCE", self.inner.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::mem;
    use roce_wire::{Kind, Opcode, Transport};

    /// A RoCEv2 SEND over IPv4 or IPv6, as the NIC builds them.
    pub(crate) fn roce_frame(v6: bool) -> Vec<u8> {
        use roce_wire::{EthernetAddress, EthernetRepr, Extensions, FrameRepr, NetworkRepr};
        let network = if v6 {
            NetworkRepr::Ipv6 {
                src: "fd00::1".parse().unwrap(),
                dst: "fd00::2".parse().unwrap(),
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                udp_src_port: 0xc000,
            }
        } else {
            NetworkRepr::Ipv4 {
                src: "10.0.0.1".parse().unwrap(),
                dst: "10.0.0.2".parse().unwrap(),
                dscp: 0,
                ecn: 0,
                ident: 1,
                ttl: 64,
                udp_src_port: 0xc000,
            }
        };
        let opcode = Opcode::new(Transport::Rc, Kind::SendOnly).unwrap();
        let repr = FrameRepr {
            ethernet: Some(EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 2]),
                src: EthernetAddress([2, 0, 0, 0, 0, 1]),
                vlan: None,
            }),
            network,
            bth: roce_wire::bth::Repr::new(opcode, 0x12, 7),
            ext: Extensions::for_opcode(opcode),
            payload_len: 32,
        };
        let mut buf = vec![0u8; 200];
        let len = repr.emit(&mut buf, &[0x5a; 32]).expect("frame builds");
        buf.truncate(len);
        buf
    }

    #[test]
    fn marks_round_trip_and_keep_the_ipv4_checksum_and_icrc_good() {
        for v6 in [false, true] {
            let mut frame = roce_frame(v6);
            assert!(is_rocev2(&frame));
            assert_eq!(ecn(&frame), Some(Ecn::NotEct));
            for mark in [Ecn::Ect0, Ecn::Ce, Ecn::Ect1, Ecn::NotEct] {
                assert!(set_ecn(&mut frame, mark));
                assert_eq!(ecn(&frame), Some(mark));
                let parsed = roce_wire::Frame::parse(&frame).expect("still a RoCE frame");
                assert!(parsed.icrc().is_ok(), "the ICRC masks the ECN bits");
                if !v6 {
                    assert!(Ipv4Packet::new_checked(&frame[14..])
                        .unwrap()
                        .verify_checksum());
                }
            }
        }
    }

    #[test]
    fn frames_that_are_not_ip_have_no_ecn() {
        let mut arp = vec![0xffu8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(ecn(&arp), None);
        assert!(!set_ecn(&mut arp, Ecn::Ce));
        assert!(!is_rocev2(&arp));
        assert_eq!(ecn(&[0u8; 5]), None);
    }

    #[test]
    fn the_ect_link_marks_roce_and_nothing_else() {
        let (a, mut b) = mem::pair();
        let mut link = Ect::new(a);
        let pool = BufPool::new(4);
        link.send(pool.copy_of(&roce_frame(false))).unwrap();
        let mut tcp = roce_frame(false);
        tcp[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&80u16.to_be_bytes());
        link.send(pool.copy_of(&tcp)).unwrap();
        assert_eq!(ecn(&b.recv().unwrap().unwrap()), Some(Ecn::Ect0));
        assert_eq!(ecn(&b.recv().unwrap().unwrap()), Some(Ecn::NotEct));
    }
}
