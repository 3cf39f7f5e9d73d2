//! The network layer under the InfiniBand transport headers: IPv4 or IPv6 with UDP (RoCEv2), or
//! a GRH (RoCEv1). Each has its own file; this one chooses between them by Ethernet type.

use smoltcp::wire::{IpProtocol, Ipv4Address, Ipv6Address};

use crate::error::{Error, NotRoce};
use crate::grh::{GRH_NEXT_HEADER_BTH, ROCE_V1_ETHERTYPE};
use crate::icrc::Scope;
use crate::{grh, ipv4, ipv6, udp};

/// The network layer under the InfiniBand transport headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetworkRepr {
    /// RoCEv2 over IPv4. DF is always set and the UDP checksum is zero.
    Ipv4 {
        src: Ipv4Address,
        dst: Ipv4Address,
        dscp: u8,
        ecn: u8,
        ident: u16,
        ttl: u8,
        udp_src_port: u16,
    },
    /// RoCEv2 over IPv6. The UDP checksum is zero, as RoCEv2 allows.
    Ipv6 {
        src: Ipv6Address,
        dst: Ipv6Address,
        traffic_class: u8,
        flow_label: u32,
        hop_limit: u8,
        udp_src_port: u16,
    },
    /// RoCEv1: a GRH (source and destination GIDs) and no UDP.
    Grh {
        sgid: Ipv6Address,
        dgid: Ipv6Address,
        traffic_class: u8,
        flow_label: u32,
        hop_limit: u8,
    },
}

/// What a network-layer parser found.
pub(crate) struct Parsed {
    pub repr: NetworkRepr,
    /// Bytes from the start of the IP header (or GRH) to the BTH.
    pub header_len: usize,
    /// Bytes of the whole IP packet (or of the GRH and what it announces).
    pub packet_len: usize,
    /// Whether a UDP header ends `header_len`.
    pub udp: bool,
}

impl NetworkRepr {
    /// Bytes from the start of the IP header (or GRH) to the BTH.
    pub fn header_len(&self) -> usize {
        match self {
            NetworkRepr::Ipv4 { .. } => ipv4::HEADER_LEN + udp::HEADER_LEN,
            NetworkRepr::Ipv6 { .. } => ipv6::HEADER_LEN + udp::HEADER_LEN,
            NetworkRepr::Grh { .. } => ipv6::HEADER_LEN,
        }
    }

    pub fn icrc_scope(&self) -> Scope {
        match self {
            NetworkRepr::Ipv4 { .. } => Scope::Ipv4,
            NetworkRepr::Ipv6 { .. } => Scope::Ipv6,
            NetworkRepr::Grh { .. } => Scope::Grh,
        }
    }

    /// The UDP source port (RoCEv1 has none).
    pub fn udp_src_port(&self) -> Option<u16> {
        match *self {
            NetworkRepr::Ipv4 { udp_src_port, .. } | NetworkRepr::Ipv6 { udp_src_port, .. } => {
                Some(udp_src_port)
            }
            NetworkRepr::Grh { .. } => None,
        }
    }

    /// The Ethernet type that announces this network layer (what [`crate::Frame::parse_network_layer`]
    /// takes for a frame without its Ethernet header).
    pub fn ethertype(&self) -> u16 {
        match self {
            NetworkRepr::Ipv4 { .. } => ipv4::ETHERTYPE,
            NetworkRepr::Ipv6 { .. } => ipv6::ETHERTYPE,
            NetworkRepr::Grh { .. } => ROCE_V1_ETHERTYPE,
        }
    }

    /// Parses the network layer that `ethertype` announces at the start of `bytes`.
    #[inline(always)]
    pub(crate) fn parse(ethertype: u16, bytes: &[u8]) -> Result<Parsed, Error> {
        match ethertype {
            ipv4::ETHERTYPE => ipv4::parse(bytes),
            ipv6::ETHERTYPE => ipv6::parse(bytes),
            ROCE_V1_ETHERTYPE => grh::parse(bytes),
            other => Err(Error::NotRoce(NotRoce::EtherType(other))),
        }
    }

    /// Writes the IP and UDP headers (or the GRH) for a network packet of `packet_len` bytes.
    pub(crate) fn emit(&self, buf: &mut [u8], packet_len: usize) {
        match *self {
            NetworkRepr::Ipv4 {
                src,
                dst,
                dscp,
                ecn,
                ident,
                ttl,
                udp_src_port,
            } => {
                let header = ipv4::Header {
                    src,
                    dst,
                    dscp,
                    ecn,
                    ident,
                    ttl,
                };
                ipv4::emit(buf, header, packet_len);
                let datagram = &mut buf[ipv4::HEADER_LEN..];
                udp::emit(datagram, udp_src_port, packet_len - ipv4::HEADER_LEN);
            }
            NetworkRepr::Ipv6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
                udp_src_port,
            } => {
                let payload_len = packet_len - ipv6::HEADER_LEN;
                let header = ipv6::Header {
                    src,
                    dst,
                    traffic_class,
                    flow_label,
                    hop_limit,
                    next_header: IpProtocol::Udp,
                };
                ipv6::emit(buf, header, payload_len);
                udp::emit(&mut buf[ipv6::HEADER_LEN..], udp_src_port, payload_len);
            }
            NetworkRepr::Grh {
                sgid,
                dgid,
                traffic_class,
                flow_label,
                hop_limit,
            } => {
                let header = ipv6::Header {
                    src: sgid,
                    dst: dgid,
                    traffic_class,
                    flow_label,
                    hop_limit,
                    next_header: IpProtocol::Unknown(GRH_NEXT_HEADER_BTH),
                };
                ipv6::emit(buf, header, packet_len - ipv6::HEADER_LEN);
            }
        }
    }
}
