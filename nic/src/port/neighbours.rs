//! Who has which MAC on the wire.
//!
//! smoltcp resolves addresses for its own sockets but keeps its neighbour cache to itself (0.14
//! has no public lookup), while the RoCE engine needs peers' MACs for QPs and address handles.
//! So the engine learns (IP → MAC) from every frame a NIC would accept ([`sender_of`]), and
//! when it needs a MAC nobody has told it, it makes smoltcp ask: a [`Probes`] entry queues an
//! ICMP echo request to the address on a socket of its own, and smoltcp, lacking the MAC, sends
//! ARP requests (IPv4) or neighbour solicitations (IPv6) about once a second until the peer
//! answers. The answer is learnt from its frame before smoltcp gets to send the echo, and the
//! probe is then dropped with its echo unsent.

use std::collections::HashMap;
use std::net::IpAddr;
use std::time::Instant;

use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::phy::ChecksumCapabilities;
use smoltcp::socket::icmp;
use smoltcp::wire::{
    ArpPacket, ArpRepr, EthernetAddress, EthernetFrame, EthernetProtocol, Icmpv4Packet, Icmpv4Repr,
    Icmpv6Packet, Icmpv6Repr, IpAddress, Ipv4Packet, Ipv6Address, Ipv6Packet,
};
use tracing::debug;

/// The sender's (IP, MAC) of a frame addressed to `us` (or broadcast or multicast): ARP's
/// sender fields, or the IP source and Ethernet source of an IPv4 or IPv6 packet. `None` for
/// anything that names no usable unicast address.
pub(crate) fn sender_of(frame: &[u8], us: EthernetAddress) -> Option<(IpAddr, EthernetAddress)> {
    let eth = EthernetFrame::new_checked(frame).ok()?;
    let dst = eth.dst_addr();
    if dst != us && !dst.is_broadcast() && !dst.is_multicast() {
        return None;
    }
    let (ip, mac): (IpAddr, EthernetAddress) = match eth.ethertype() {
        EthernetProtocol::Arp => {
            let ArpRepr::EthernetIpv4 {
                source_hardware_addr,
                source_protocol_addr,
                ..
            } = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?
            else {
                return None;
            };
            (source_protocol_addr.into(), source_hardware_addr)
        }
        EthernetProtocol::Ipv4 => {
            let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
            (ip.src_addr().into(), eth.src_addr())
        }
        EthernetProtocol::Ipv6 => {
            let ip = Ipv6Packet::new_checked(eth.payload()).ok()?;
            (ip.src_addr().into(), eth.src_addr())
        }
        _ => return None,
    };
    let usable = match ip {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    };
    (usable && mac.is_unicast() && mac != us).then_some((ip, mac))
}

/// Addresses being resolved, each with the socket whose queued echo makes smoltcp ask.
#[derive(Default)]
pub(super) struct Probes {
    active: HashMap<IpAddr, Probe>,
}

struct Probe {
    socket: SocketHandle,
    /// Nobody needs the answer after this.
    until: Instant,
}

/// The echo's identifier and payload: recognisable in a capture.
const PROBE_IDENT: u16 = 0x524e;
const PROBE_DATA: &[u8] = b"roce-nic: who has this address?";

impl Probes {
    /// Starts resolving `ip`, or keeps resolving it until `until` if it already is.
    pub fn start(&mut self, sockets: &mut SocketSet<'static>, ip: IpAddr, until: Instant) {
        if let Some(probe) = self.active.get_mut(&ip) {
            probe.until = probe.until.max(until);
            return;
        }
        let mut socket = icmp::Socket::new(
            icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY], vec![]),
            icmp::PacketBuffer::new(vec![icmp::PacketMetadata::EMPTY], vec![0; 64]),
        );
        if let Err(e) = queue_echo(&mut socket, ip) {
            debug!(%ip, error = %e, "could not queue a neighbour probe");
            return;
        }
        debug!(%ip, "resolving: ARP / neighbour solicitation through the port");
        let socket = sockets.add(socket);
        self.active.insert(ip, Probe { socket, until });
    }

    /// `ip` is resolved: its probe goes, echo unsent if smoltcp has not sent it yet.
    pub fn stop(&mut self, sockets: &mut SocketSet<'static>, ip: IpAddr) {
        if let Some(probe) = self.active.remove(&ip) {
            sockets.remove(probe.socket);
        }
    }

    /// Drops the probes nobody waits for any more.
    pub fn expire(&mut self, sockets: &mut SocketSet<'static>, now: Instant) {
        self.active.retain(|ip, probe| {
            let keep = probe.until > now;
            if !keep {
                debug!(%ip, "gave up resolving");
                sockets.remove(probe.socket);
            }
            keep
        });
    }

    /// When the next probe expires.
    pub fn deadline(&self) -> Option<Instant> {
        self.active.values().map(|p| p.until).min()
    }
}

/// Queues one echo request to `ip`. smoltcp re-parses the message and fills in the checksum
/// and source address when it sends it, so neither matters here.
fn queue_echo(socket: &mut icmp::Socket<'_>, ip: IpAddr) -> Result<(), icmp::SendError> {
    let ignored = ChecksumCapabilities::ignored();
    match ip {
        IpAddr::V4(v4) => {
            let repr = Icmpv4Repr::EchoRequest {
                ident: PROBE_IDENT,
                seq_no: 0,
                data: PROBE_DATA,
            };
            let buf = socket.send(repr.buffer_len(), IpAddress::Ipv4(v4))?;
            repr.emit(&mut Icmpv4Packet::new_unchecked(buf), &ignored);
        }
        IpAddr::V6(v6) => {
            let repr = Icmpv6Repr::EchoRequest {
                ident: PROBE_IDENT,
                seq_no: 0,
                data: PROBE_DATA,
            };
            let buf = socket.send(repr.buffer_len(), IpAddress::Ipv6(v6))?;
            repr.emit(
                &Ipv6Address::UNSPECIFIED,
                &v6,
                &mut Icmpv6Packet::new_unchecked(buf),
                &ignored,
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use smoltcp::wire::{ArpOperation, EthernetRepr, Ipv4Address};

    const US: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 1]);
    const PEER: EthernetAddress = EthernetAddress([2, 0, 0, 0, 0, 2]);

    fn arp(operation: ArpOperation, dst: EthernetAddress, sender_ip: Ipv4Address) -> Vec<u8> {
        let arp = ArpRepr::EthernetIpv4 {
            operation,
            source_hardware_addr: PEER,
            source_protocol_addr: sender_ip,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address::new(10, 0, 0, 1),
        };
        let eth = EthernetRepr {
            src_addr: PEER,
            dst_addr: dst,
            ethertype: EthernetProtocol::Arp,
        };
        let mut bytes = vec![0; eth.buffer_len() + arp.buffer_len()];
        let mut frame = EthernetFrame::new_unchecked(&mut bytes[..]);
        eth.emit(&mut frame);
        arp.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()));
        bytes
    }

    #[test]
    fn arp_requests_and_replies_name_their_sender() {
        let peer_ip = Ipv4Address::new(10, 0, 0, 2);
        let request = arp(ArpOperation::Request, EthernetAddress::BROADCAST, peer_ip);
        assert_eq!(sender_of(&request, US), Some((peer_ip.into(), PEER)));
        let reply = arp(ArpOperation::Reply, US, peer_ip);
        assert_eq!(sender_of(&reply, US), Some((peer_ip.into(), PEER)));
    }

    fn ipv6(src_mac: EthernetAddress, src: Ipv6Address) -> Vec<u8> {
        let ip = smoltcp::wire::Ipv6Repr {
            src_addr: src,
            dst_addr: Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            next_header: smoltcp::wire::IpProtocol::Udp,
            payload_len: 0,
            hop_limit: 64,
        };
        let eth = EthernetRepr {
            src_addr: src_mac,
            dst_addr: US,
            ethertype: EthernetProtocol::Ipv6,
        };
        let mut bytes = vec![0; eth.buffer_len() + ip.buffer_len()];
        let mut frame = EthernetFrame::new_unchecked(&mut bytes[..]);
        eth.emit(&mut frame);
        ip.emit(&mut Ipv6Packet::new_unchecked(frame.payload_mut()));
        bytes
    }

    #[test]
    fn ip_packets_name_their_source() {
        let peer_ip = Ipv6Address::new(0xfd00, 0x77, 0, 0, 0, 0, 0, 2);
        assert_eq!(
            sender_of(&ipv6(PEER, peer_ip), US),
            Some((peer_ip.into(), PEER))
        );
        // Our own frame come back, and a packet from nowhere, name nobody.
        assert_eq!(sender_of(&ipv6(US, peer_ip), US), None);
        assert_eq!(sender_of(&ipv6(PEER, Ipv6Address::UNSPECIFIED), US), None);
    }

    #[test]
    fn frames_for_others_and_unusable_senders_teach_nothing() {
        let peer_ip = Ipv4Address::new(10, 0, 0, 2);
        let other = EthernetAddress([2, 0, 0, 0, 0, 3]);
        assert_eq!(
            sender_of(&arp(ArpOperation::Reply, other, peer_ip), US),
            None
        );
        // An ARP probe (RFC 5227) has no sender address yet.
        let probe = arp(
            ArpOperation::Request,
            EthernetAddress::BROADCAST,
            Ipv4Address::UNSPECIFIED,
        );
        assert_eq!(sender_of(&probe, US), None);
        assert_eq!(sender_of(&[0u8; 10], US), None);
    }
}
