//! The IPv4 header under RoCEv2 (20 bytes, options allowed on receive): addresses, DSCP and ECN,
//! identification and TTL. RoCE never fragments, so DF is always set and a fragment is someone
//! else's traffic. Read and written with `smoltcp::wire::Ipv4Packet`.

use smoltcp::wire::{IpProtocol, Ipv4Address, Ipv4Packet};

use crate::error::{check_len, malformed, Error, Layer, NotRoce};
use crate::network::{NetworkRepr, Parsed};
use crate::udp;

/// The Ethernet type of IPv4.
pub const ETHERTYPE: u16 = 0x0800;

/// Bytes of an IPv4 header without options (all RoCE sends).
pub const HEADER_LEN: usize = 20;

/// Parses the IPv4 packet at the start of `bytes` as RoCEv2: the header, the UDP header behind
/// it, and the lengths of both.
#[inline(always)]
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, Error> {
    check_len(Layer::Ipv4, HEADER_LEN, bytes.len())?;
    let ip = Ipv4Packet::new_unchecked(bytes);
    if ip.version() != 4 {
        return Err(malformed(
            Layer::Ipv4,
            "version",
            ip.version().into(),
            "not 4",
        ));
    }
    let ihl = usize::from(ip.header_len());
    if ihl < HEADER_LEN {
        return Err(malformed(
            Layer::Ipv4,
            "IHL",
            ihl as u64,
            "shorter than 20 bytes",
        ));
    }
    // Decide whether the packet is RoCE at all before judging its lengths and checksum: a
    // snapped or corrupted packet of another protocol is not ours to call malformed.
    if ip.next_header() != IpProtocol::Udp {
        return Err(Error::NotRoce(NotRoce::IpProtocol(ip.next_header().into())));
    }
    if ip.more_frags() || ip.frag_offset() != 0 {
        return Err(Error::NotRoce(NotRoce::Fragment));
    }
    udp::check_roce_port(bytes.get(ihl..).unwrap_or_default())?;
    let total = usize::from(ip.total_len());
    if total < ihl {
        return Err(malformed(
            Layer::Ipv4,
            "total length",
            total as u64,
            "shorter than its header",
        ));
    }
    check_len(Layer::Ipv4, total, bytes.len())?;
    if !ip.verify_checksum() {
        return Err(malformed(
            Layer::Ipv4,
            "header checksum",
            ip.checksum().into(),
            "does not match the header",
        ));
    }
    let udp_src_port = udp::check_len_and_read_src_port(&bytes[ihl..total])?;
    Ok(Parsed {
        repr: NetworkRepr::Ipv4 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ident: ip.ident(),
            ttl: ip.hop_limit(),
            udp_src_port,
        },
        header_len: ihl + udp::HEADER_LEN,
        packet_len: total,
        udp: true,
    })
}

/// The IPv4 header fields RoCE chooses per packet; the rest are fixed (IHL 5, DF, protocol UDP).
pub(crate) struct Header {
    pub src: Ipv4Address,
    pub dst: Ipv4Address,
    pub dscp: u8,
    pub ecn: u8,
    pub ident: u16,
    pub ttl: u8,
}

/// Writes the 20-byte header of a `total_len`-byte packet, checksum included.
pub(crate) fn emit(buf: &mut [u8], header: Header, total_len: usize) {
    let mut ip = Ipv4Packet::new_unchecked(&mut buf[..HEADER_LEN]);
    ip.set_version(4);
    ip.set_header_len(HEADER_LEN as u8);
    ip.set_dscp(header.dscp);
    ip.set_ecn(header.ecn);
    ip.set_total_len(total_len as u16);
    ip.set_ident(header.ident);
    ip.clear_flags();
    ip.set_dont_frag(true);
    ip.set_frag_offset(0);
    ip.set_hop_limit(header.ttl);
    ip.set_next_header(IpProtocol::Udp);
    ip.set_src_addr(header.src);
    ip.set_dst_addr(header.dst);
    ip.fill_checksum();
}
