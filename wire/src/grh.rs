//! RoCEv1's Global Route Header (40 bytes): InfiniBand's routing header, laid out as IPv6, straight
//! after the Ethernet header (Ethernet type 0x8915), with next header 0x1b (a BTH) and no UDP.

use smoltcp::wire::Ipv6Packet;

use crate::error::{check_len, malformed, Error, Layer};
use crate::ipv6::HEADER_LEN;
use crate::network::{NetworkRepr, Parsed};

/// The Ethernet type of RoCEv1 (a GRH straight after the Ethernet header).
pub const ROCE_V1_ETHERTYPE: u16 = 0x8915;

/// The GRH "next header" value for an InfiniBand BTH.
pub const GRH_NEXT_HEADER_BTH: u8 = 0x1b;

/// Parses the GRH at the start of `bytes`, and the length of the packet it announces.
#[inline(always)]
pub(crate) fn parse(bytes: &[u8]) -> Result<Parsed, Error> {
    check_len(Layer::Grh, HEADER_LEN, bytes.len())?;
    let grh = Ipv6Packet::new_unchecked(bytes);
    if grh.version() != 6 {
        return Err(malformed(
            Layer::Grh,
            "IPVer",
            grh.version().into(),
            "not 6",
        ));
    }
    let next: u8 = grh.next_header().into();
    if next != GRH_NEXT_HEADER_BTH {
        return Err(malformed(
            Layer::Grh,
            "next header",
            next.into(),
            "not a BTH (0x1b)",
        ));
    }
    let total = HEADER_LEN + usize::from(grh.payload_len());
    check_len(Layer::Grh, total, bytes.len())?;
    Ok(Parsed {
        repr: NetworkRepr::Grh {
            sgid: grh.src_addr(),
            dgid: grh.dst_addr(),
            traffic_class: grh.traffic_class(),
            flow_label: grh.flow_label(),
            hop_limit: grh.hop_limit(),
        },
        header_len: HEADER_LEN,
        packet_len: total,
        udp: false,
    })
}
