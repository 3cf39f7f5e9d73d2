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
    // The protocol byte itself: smoltcp's `next_header` maps every number to its enum first.
    let protocol = bytes[PROTOCOL];
    if protocol != u8::from(IpProtocol::Udp) {
        return Err(Error::NotRoce(NotRoce::IpProtocol(protocol)));
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
    if !checksum_ok(&bytes[..ihl]) {
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

/// Where the protocol number sits in the header.
const PROTOCOL: usize = 9;

/// Whether a header's checksum is right: its 16-bit words, the checksum among them, add up to
/// all ones in ones' complement. The 20-byte header every RoCE sender writes is summed in five
/// 32-bit words without a loop (a fifth of what smoltcp's general loop costs, on every packet
/// decoded); a header with options goes to smoltcp.
#[inline(always)]
fn checksum_ok(header: &[u8]) -> bool {
    let Ok(words) = <&[u8; HEADER_LEN]>::try_from(header) else {
        return Ipv4Packet::new_unchecked(header).verify_checksum();
    };
    // In the machine's byte order: a ones' complement sum is the same in either, swapped.
    let word = |i: usize| {
        u64::from(u32::from_ne_bytes([
            words[i],
            words[i + 1],
            words[i + 2],
            words[i + 3],
        ]))
    };
    let sum = word(0) + word(4) + word(8) + word(12) + word(16);
    // Fold the carries back in (end-around carry) until 16 bits remain.
    let sum = (sum & 0xffff_ffff) + (sum >> 32);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    sum == 0xffff
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The straight-line sum agrees with smoltcp's on any header, with or without options,
        /// whether its checksum is right or not.
        #[test]
        fn the_checksum_agrees_with_smoltcp(
            mut header in proptest::collection::vec(any::<u8>(), 20..=60),
            fill in any::<bool>(),
        ) {
            header.truncate(header.len() / 4 * 4);
            let ihl = (header.len() / 4) as u8;
            header[0] = 0x40 | ihl;
            if fill {
                Ipv4Packet::new_unchecked(&mut header[..]).fill_checksum();
            }
            let smoltcp = Ipv4Packet::new_unchecked(&header[..]).verify_checksum();
            prop_assert_eq!(checksum_ok(&header), smoltcp);
            prop_assert!(!fill || smoltcp);
        }
    }

    #[test]
    fn a_header_of_zeros_or_of_ones_is_judged_as_smoltcp_does() {
        for byte in [0x00, 0xff] {
            let mut header = [byte; 20];
            header[0] = 0x45;
            let smoltcp = Ipv4Packet::new_unchecked(&header[..]).verify_checksum();
            assert_eq!(checksum_ok(&header), smoltcp);
        }
    }
}
