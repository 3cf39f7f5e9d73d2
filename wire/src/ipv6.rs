//! The IPv6 header (40 bytes) under RoCEv2, and the same layout as RoCEv1's Global Route Header
//! (see [`crate::grh`]), which differs only in its next header (0x1b, a BTH) and in having no
//! UDP behind it. Read and written with `smoltcp::wire::Ipv6Packet`.

use smoltcp::wire::{IpProtocol, Ipv6Address, Ipv6Packet};

use crate::error::{check_len, malformed, Error, Layer, NotRoce};
use crate::network::{NetworkRepr, Parsed};
use crate::udp;

/// The Ethernet type of IPv6.
pub const ETHERTYPE: u16 = 0x86dd;

/// Bytes of an IPv6 header (and of a GRH).
pub const HEADER_LEN: usize = 40;

/// Parses the IPv6 packet at the start of `bytes` as RoCEv2: the header, the UDP header behind
/// it, and the lengths of both.
#[inline(always)]
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, Error> {
    check_len(Layer::Ipv6, HEADER_LEN, bytes.len())?;
    let ip = Ipv6Packet::new_unchecked(bytes);
    if ip.version() != 6 {
        return Err(malformed(
            Layer::Ipv6,
            "version",
            ip.version().into(),
            "not 6",
        ));
    }
    if ip.next_header() != IpProtocol::Udp {
        return Err(Error::NotRoce(NotRoce::IpProtocol(ip.next_header().into())));
    }
    udp::check_roce_port(&bytes[HEADER_LEN..])?;
    let total = HEADER_LEN + usize::from(ip.payload_len());
    check_len(Layer::Ipv6, total, bytes.len())?;
    let udp_src_port = udp::check_len_and_read_src_port(&bytes[HEADER_LEN..total])?;
    Ok(Parsed {
        repr: NetworkRepr::Ipv6 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            traffic_class: ip.traffic_class(),
            flow_label: ip.flow_label(),
            hop_limit: ip.hop_limit(),
            udp_src_port,
        },
        header_len: HEADER_LEN + udp::HEADER_LEN,
        packet_len: total,
        udp: true,
    })
}

/// The fields of an IPv6 header (or GRH) a sender chooses; the version is 6.
pub(crate) struct Header {
    pub src: Ipv6Address,
    pub dst: Ipv6Address,
    pub traffic_class: u8,
    /// Only the low 20 bits are sent.
    pub flow_label: u32,
    pub hop_limit: u8,
    pub next_header: IpProtocol,
}

/// Writes the 40-byte header in front of `payload_len` bytes.
pub(crate) fn emit(buf: &mut [u8], header: Header, payload_len: usize) {
    let mut ip = Ipv6Packet::new_unchecked(&mut buf[..HEADER_LEN]);
    ip.set_version(6);
    ip.set_traffic_class(header.traffic_class);
    ip.set_flow_label(header.flow_label & 0x000f_ffff);
    ip.set_payload_len(payload_len as u16);
    ip.set_next_header(header.next_header);
    ip.set_hop_limit(header.hop_limit);
    ip.set_src_addr(header.src);
    ip.set_dst_addr(header.dst);
}
