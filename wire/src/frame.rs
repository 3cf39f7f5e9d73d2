//! A whole RoCE frame: Ethernet (with an optional 802.1Q tag), then IPv4 or IPv6 and UDP port
//! 4791 (RoCEv2) or a GRH (RoCEv1), then the BTH, its extension headers, payload, pad and ICRC.
//!
//! Ethernet, IP and UDP are read and written with `smoltcp::wire`; this module adds the 802.1Q tag
//! (which smoltcp does not model), the InfiniBand headers and the ICRC. [`Frame::parse`] checks
//! every length and field a receiver relies on and never panics; [`FrameRepr::emit_with`] writes
//! a complete frame into a caller's buffer, letting the caller place the payload directly (a NIC
//! reads it from host memory straight into the frame).

use core::ops::Range;

use smoltcp::wire::{
    EthernetAddress, EthernetFrame, EthernetProtocol, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv6Address, Ipv6Packet, UdpPacket,
};

use crate::error::{check_len, Error, Layer, NotRoce};
use crate::icrc::{self, Scope};
use crate::opcode::{Headers, Opcode};
use crate::{aeth, atomic_ack_eth, atomic_eth, be, bth, deth, feth, ieth, immdt, reth};

/// The UDP destination port that marks RoCEv2.
pub const ROCE_V2_PORT: u16 = 4791;
/// The Ethernet type of RoCEv1 (a GRH straight after the Ethernet header).
pub const ROCE_V1_ETHERTYPE: u16 = 0x8915;
/// The Ethernet type that announces an 802.1Q tag.
pub const VLAN_ETHERTYPE: u16 = 0x8100;
/// The GRH "next header" value for an InfiniBand BTH.
pub const GRH_NEXT_HEADER_BTH: u8 = 0x1b;

const ETHERNET_LEN: usize = 14;
const VLAN_LEN: usize = 4;
const IPV4_LEN: usize = 20;
const IPV6_LEN: usize = 40;
const UDP_LEN: usize = 8;
pub const ICRC_LEN: usize = 4;

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    fn tci(&self) -> u16 {
        (u16::from(self.pcp & 0x7) << 13) | (u16::from(self.dei) << 12) | (self.vid & 0x0fff)
    }

    fn from_tci(tci: u16) -> VlanTag {
        VlanTag {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0x0fff,
        }
    }
}

/// The Ethernet header of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    pub dst: EthernetAddress,
    pub src: EthernetAddress,
    pub vlan: Option<VlanTag>,
}

impl EthernetRepr {
    pub fn header_len(&self) -> usize {
        ETHERNET_LEN + if self.vlan.is_some() { VLAN_LEN } else { 0 }
    }
}

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

impl NetworkRepr {
    /// Bytes from the start of the IP header (or GRH) to the BTH.
    pub fn header_len(&self) -> usize {
        match self {
            NetworkRepr::Ipv4 { .. } => IPV4_LEN + UDP_LEN,
            NetworkRepr::Ipv6 { .. } => IPV6_LEN + UDP_LEN,
            NetworkRepr::Grh { .. } => IPV6_LEN,
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

    fn ethertype(&self) -> u16 {
        match self {
            NetworkRepr::Ipv4 { .. } => 0x0800,
            NetworkRepr::Ipv6 { .. } => 0x86dd,
            NetworkRepr::Grh { .. } => ROCE_V1_ETHERTYPE,
        }
    }
}

/// The extension headers of one packet; which are present is fixed by the opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Extensions {
    pub deth: Option<deth::Repr>,
    pub feth: Option<feth::Repr>,
    pub reth: Option<reth::Repr>,
    pub atomic_eth: Option<atomic_eth::Repr>,
    pub aeth: Option<aeth::Repr>,
    pub atomic_ack_eth: Option<atomic_ack_eth::Repr>,
    pub immdt: Option<immdt::Repr>,
    pub ieth: Option<ieth::Repr>,
}

impl Extensions {
    /// The extension headers `opcode` calls for, every field zero (an AETH says ACK without
    /// credit information), ready for the caller to fill in.
    pub fn for_opcode(opcode: Opcode) -> Extensions {
        let has = |h| opcode.headers().contains(h);
        Extensions {
            deth: has(Headers::DETH).then(deth::Repr::default),
            feth: has(Headers::FETH).then(feth::Repr::default),
            reth: has(Headers::RETH).then(reth::Repr::default),
            atomic_eth: has(Headers::ATOMIC_ETH).then(atomic_eth::Repr::default),
            aeth: has(Headers::AETH).then_some(aeth::Repr {
                syndrome: aeth::Syndrome::ack(),
                msn: 0,
            }),
            atomic_ack_eth: has(Headers::ATOMIC_ACK_ETH).then(atomic_ack_eth::Repr::default),
            immdt: has(Headers::IMMDT).then(immdt::Repr::default),
            ieth: has(Headers::IETH).then(ieth::Repr::default),
        }
    }

    /// The set of headers present.
    pub fn headers(&self) -> Headers {
        let mut h = Headers::NONE;
        let mut add = |present: bool, header| {
            if present {
                h = h | header;
            }
        };
        add(self.deth.is_some(), Headers::DETH);
        add(self.feth.is_some(), Headers::FETH);
        add(self.reth.is_some(), Headers::RETH);
        add(self.atomic_eth.is_some(), Headers::ATOMIC_ETH);
        add(self.aeth.is_some(), Headers::AETH);
        add(self.atomic_ack_eth.is_some(), Headers::ATOMIC_ACK_ETH);
        add(self.immdt.is_some(), Headers::IMMDT);
        add(self.ieth.is_some(), Headers::IETH);
        h
    }

    /// Parses the headers `which` from the start of `bytes`.
    // Inlined, like the network parsers: a result handed back through memory is read back
    // in wider loads than it was written with, which stalls store forwarding.
    #[inline(always)]
    fn parse(which: Headers, bytes: &[u8]) -> Result<Extensions, Error> {
        // One test per header, in wire order (the order of the fields below, which Rust
        // evaluates in the order written), rather than a loop over the table: this runs for
        // every packet.
        let mut at = 0;
        let mut next = |header: Headers, len: usize| {
            which.contains(header).then(|| {
                let b = bytes.get(at..).unwrap_or_default();
                at += len;
                b
            })
        };
        Ok(Extensions {
            deth: next(Headers::DETH, deth::HEADER_LEN)
                .map(|b| deth::Repr::parse(&deth::Packet::new_checked(b)?))
                .transpose()?,
            feth: next(Headers::FETH, feth::HEADER_LEN)
                .map(|b| feth::Repr::parse(&feth::Packet::new_checked(b)?))
                .transpose()?,
            reth: next(Headers::RETH, reth::HEADER_LEN)
                .map(|b| reth::Repr::parse(&reth::Packet::new_checked(b)?))
                .transpose()?,
            atomic_eth: next(Headers::ATOMIC_ETH, atomic_eth::HEADER_LEN)
                .map(|b| atomic_eth::Repr::parse(&atomic_eth::Packet::new_checked(b)?))
                .transpose()?,
            aeth: next(Headers::AETH, aeth::HEADER_LEN)
                .map(|b| aeth::Repr::parse(&aeth::Packet::new_checked(b)?))
                .transpose()?,
            atomic_ack_eth: next(Headers::ATOMIC_ACK_ETH, atomic_ack_eth::HEADER_LEN)
                .map(|b| atomic_ack_eth::Repr::parse(&atomic_ack_eth::Packet::new_checked(b)?))
                .transpose()?,
            immdt: next(Headers::IMMDT, immdt::HEADER_LEN)
                .map(|b| immdt::Repr::parse(&immdt::Packet::new_checked(b)?))
                .transpose()?,
            ieth: next(Headers::IETH, ieth::HEADER_LEN)
                .map(|b| ieth::Repr::parse(&ieth::Packet::new_checked(b)?))
                .transpose()?,
        })
    }

    /// Writes the present headers in wire order; `buf` holds exactly `headers().len()` bytes.
    fn emit(&self, buf: &mut [u8]) {
        let mut at = 0;
        let mut next = |len: usize| {
            let range = at..at + len;
            at += len;
            range
        };
        if let Some(r) = &self.deth {
            r.emit(&mut deth::Packet::new_unchecked(
                &mut buf[next(deth::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.feth {
            r.emit(&mut feth::Packet::new_unchecked(
                &mut buf[next(feth::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.reth {
            r.emit(&mut reth::Packet::new_unchecked(
                &mut buf[next(reth::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.atomic_eth {
            r.emit(&mut atomic_eth::Packet::new_unchecked(
                &mut buf[next(atomic_eth::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.aeth {
            r.emit(&mut aeth::Packet::new_unchecked(
                &mut buf[next(aeth::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.atomic_ack_eth {
            r.emit(&mut atomic_ack_eth::Packet::new_unchecked(
                &mut buf[next(atomic_ack_eth::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.immdt {
            r.emit(&mut immdt::Packet::new_unchecked(
                &mut buf[next(immdt::HEADER_LEN)],
            ));
        }
        if let Some(r) = &self.ieth {
            r.emit(&mut ieth::Packet::new_unchecked(
                &mut buf[next(ieth::HEADER_LEN)],
            ));
        }
    }
}

/// Everything needed to emit a frame, and everything a parse yields except the payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameRepr {
    /// `None` for a packet that starts at the IP header (captures without Ethernet framing).
    pub ethernet: Option<EthernetRepr>,
    pub network: NetworkRepr,
    pub bth: bth::Repr,
    pub ext: Extensions,
    /// Payload bytes, not counting the pad.
    pub payload_len: usize,
}

/// Pad bytes that bring `payload_len` to a multiple of four.
pub const fn pad_len(payload_len: usize) -> usize {
    (4 - payload_len % 4) % 4
}

impl FrameRepr {
    /// Bytes before the payload.
    pub fn header_len(&self) -> usize {
        self.l2_len() + self.network.header_len() + bth::HEADER_LEN + self.ext.headers().len()
    }

    /// Bytes of the whole frame, ICRC included.
    pub fn frame_len(&self) -> usize {
        self.header_len() + self.payload_len + pad_len(self.payload_len) + ICRC_LEN
    }

    fn l2_len(&self) -> usize {
        self.ethernet.map_or(0, |e| e.header_len())
    }

    /// Checks that the repr describes a packet that can exist.
    fn validate(&self) -> Result<(), Error> {
        let op = self.bth.opcode;
        if self.ext.headers() != op.headers() {
            return Err(Error::Malformed {
                layer: Layer::Bth,
                field: "opcode",
                value: op.value().into(),
                reason: "the extension headers given do not match the opcode",
            });
        }
        if !op.has_payload() && self.payload_len != 0 {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                field: "length",
                value: self.payload_len as u64,
                reason: "the opcode carries no payload",
            });
        }
        let ip_len = self.frame_len() - self.l2_len();
        if ip_len > usize::from(u16::MAX) {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                field: "length",
                value: self.payload_len as u64,
                reason: "the packet would not fit in one IP datagram",
            });
        }
        Ok(())
    }

    /// Writes the complete frame into `buf`: every header, then `fill` places exactly
    /// `payload_len` payload bytes into the slice it is given, then pad and ICRC. Returns the
    /// frame's length.
    pub fn emit_with(&self, buf: &mut [u8], fill: impl FnOnce(&mut [u8])) -> Result<usize, Error> {
        self.validate()?;
        let frame_len = self.frame_len();
        check_len(Layer::Ethernet, frame_len, buf.len())?;
        let buf = &mut buf[..frame_len];
        let l2 = self.l2_len();
        let pad = pad_len(self.payload_len);

        if let Some(eth) = &self.ethernet {
            self.emit_ethernet(eth, &mut buf[..l2]);
        }
        let l3_len = frame_len - l2;
        let bth_at = l2 + self.network.header_len();
        self.emit_network(&mut buf[l2..bth_at], l3_len);

        let mut bth = self.bth;
        bth.pad_count = pad as u8;
        bth.emit(&mut bth::Packet::new_unchecked(
            &mut buf[bth_at..bth_at + bth::HEADER_LEN],
        ));
        let ext_at = bth_at + bth::HEADER_LEN;
        let payload_at = ext_at + self.ext.headers().len();
        self.ext.emit(&mut buf[ext_at..payload_at]);

        let pad_at = payload_at + self.payload_len;
        fill(&mut buf[payload_at..pad_at]);
        let icrc_at = pad_at + pad;
        buf[pad_at..icrc_at].fill(0);

        let crc = icrc::compute(self.network.icrc_scope(), &buf[l2..icrc_at]).ok_or(
            Error::Truncated {
                layer: Layer::Bth,
                needed: bth::HEADER_LEN,
                available: icrc_at - bth_at,
            },
        )?;
        icrc::write(&mut buf[icrc_at..], crc);
        Ok(frame_len)
    }

    /// Writes the complete frame with `payload` (whose length must be `payload_len`).
    pub fn emit(&self, buf: &mut [u8], payload: &[u8]) -> Result<usize, Error> {
        if payload.len() != self.payload_len {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                field: "length",
                value: payload.len() as u64,
                reason: "the payload given differs from the length in the header",
            });
        }
        self.emit_with(buf, |dst| dst.copy_from_slice(payload))
    }

    fn emit_ethernet(&self, eth: &EthernetRepr, buf: &mut [u8]) {
        let mut frame = EthernetFrame::new_unchecked(&mut *buf);
        frame.set_dst_addr(eth.dst);
        frame.set_src_addr(eth.src);
        let ethertype = self.network.ethertype();
        match eth.vlan {
            Some(tag) => {
                frame.set_ethertype(EthernetProtocol::Unknown(VLAN_ETHERTYPE));
                be::set_u16(&mut buf[14..16], tag.tci());
                be::set_u16(&mut buf[16..18], ethertype);
            }
            None => frame.set_ethertype(EthernetProtocol::from(ethertype)),
        }
    }

    /// Writes the IP and UDP headers (or the GRH) for a network packet of `l3_len` bytes.
    fn emit_network(&self, buf: &mut [u8], l3_len: usize) {
        match self.network {
            NetworkRepr::Ipv4 {
                src,
                dst,
                dscp,
                ecn,
                ident,
                ttl,
                udp_src_port,
            } => {
                let mut ip = Ipv4Packet::new_unchecked(&mut buf[..IPV4_LEN]);
                ip.set_version(4);
                ip.set_header_len(IPV4_LEN as u8);
                ip.set_dscp(dscp);
                ip.set_ecn(ecn);
                ip.set_total_len(l3_len as u16);
                ip.set_ident(ident);
                ip.clear_flags();
                ip.set_dont_frag(true);
                ip.set_frag_offset(0);
                ip.set_hop_limit(ttl);
                ip.set_next_header(IpProtocol::Udp);
                ip.set_src_addr(src);
                ip.set_dst_addr(dst);
                ip.fill_checksum();
                emit_udp(&mut buf[IPV4_LEN..], udp_src_port, l3_len - IPV4_LEN);
            }
            NetworkRepr::Ipv6 {
                src,
                dst,
                traffic_class,
                flow_label,
                hop_limit,
                udp_src_port,
            } => {
                let payload_len = l3_len - IPV6_LEN;
                emit_ipv6(
                    &mut buf[..IPV6_LEN],
                    (src, dst, traffic_class, flow_label, hop_limit),
                    IpProtocol::Udp,
                    payload_len,
                );
                emit_udp(&mut buf[IPV6_LEN..], udp_src_port, payload_len);
            }
            NetworkRepr::Grh {
                sgid,
                dgid,
                traffic_class,
                flow_label,
                hop_limit,
            } => emit_ipv6(
                &mut buf[..IPV6_LEN],
                (sgid, dgid, traffic_class, flow_label, hop_limit),
                IpProtocol::Unknown(GRH_NEXT_HEADER_BTH),
                l3_len - IPV6_LEN,
            ),
        }
    }
}

fn emit_ipv6(
    buf: &mut [u8],
    (src, dst, traffic_class, flow_label, hop_limit): (Ipv6Address, Ipv6Address, u8, u32, u8),
    next_header: IpProtocol,
    payload_len: usize,
) {
    let mut ip = Ipv6Packet::new_unchecked(buf);
    ip.set_version(6);
    ip.set_traffic_class(traffic_class);
    ip.set_flow_label(flow_label & 0x000f_ffff);
    ip.set_payload_len(payload_len as u16);
    ip.set_next_header(next_header);
    ip.set_hop_limit(hop_limit);
    ip.set_src_addr(src);
    ip.set_dst_addr(dst);
}

fn emit_udp(buf: &mut [u8], src_port: u16, udp_len: usize) {
    let mut udp = UdpPacket::new_unchecked(&mut buf[..UDP_LEN]);
    udp.set_src_port(src_port);
    udp.set_dst_port(ROCE_V2_PORT);
    udp.set_len(udp_len as u16);
    udp.set_checksum(0);
}

/// Byte offsets of each part of a parsed frame, for views that show where each field lives.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Layout {
    /// The 802.1Q tag, if any.
    pub vlan: Option<Range<usize>>,
    /// The IP header (or GRH).
    pub network: Range<usize>,
    /// The UDP header (RoCEv2 only).
    pub udp: Option<Range<usize>>,
    pub bth: Range<usize>,
    /// All extension headers together; see [`Layout::ext`] for one.
    pub ext: Range<usize>,
    pub payload: Range<usize>,
    pub pad: Range<usize>,
    pub icrc: Range<usize>,
    /// Bytes after the IP packet (Ethernet minimum-size padding), if any.
    pub trailer: Range<usize>,
}

impl Layout {
    /// Where one extension header of this packet lies, if the packet has it.
    pub fn ext_header(&self, which: Headers, present: Headers) -> Option<Range<usize>> {
        let mut at = self.ext.start;
        for (h, len) in present.iter() {
            if h == which {
                return Some(at..at + len);
            }
            at += len;
        }
        None
    }
}

/// A parsed RoCE frame over the bytes it was parsed from.
#[derive(Debug, Clone)]
pub struct Frame<'a> {
    bytes: &'a [u8],
    pub repr: FrameRepr,
    pub layout: Layout,
}

impl<'a> Frame<'a> {
    /// Parses an Ethernet frame (RoCEv2 over IPv4/IPv6, or RoCEv1). The ICRC is not checked
    /// here; see [`Frame::icrc`].
    pub fn parse(bytes: &'a [u8]) -> Result<Frame<'a>, Error> {
        check_len(Layer::Ethernet, ETHERNET_LEN, bytes.len())?;
        let eth = EthernetFrame::new_unchecked(bytes);
        let mut ethertype = be::u16(&bytes[12..14]);
        let mut l3 = ETHERNET_LEN;
        let mut vlan = None;
        let mut vlan_range = None;
        if ethertype == VLAN_ETHERTYPE {
            check_len(Layer::Vlan, ETHERNET_LEN + VLAN_LEN, bytes.len())?;
            vlan = Some(VlanTag::from_tci(be::u16(&bytes[14..16])));
            ethertype = be::u16(&bytes[16..18]);
            vlan_range = Some(14..18);
            l3 += VLAN_LEN;
        }
        let ethernet = EthernetRepr {
            dst: eth.dst_addr(),
            src: eth.src_addr(),
            vlan,
        };
        Frame::parse_network(bytes, l3, ethertype, Some(ethernet), vlan_range)
    }

    /// Parses a packet that starts at its IP header (or GRH), as in captures with Linux cooked
    /// framing; `ethertype` says which (0x0800, 0x86dd or 0x8915).
    pub fn parse_network_layer(bytes: &'a [u8], ethertype: u16) -> Result<Frame<'a>, Error> {
        Frame::parse_network(bytes, 0, ethertype, None, None)
    }

    /// Like [`Frame::parse_network_layer`], for a packet whose IP header (or GRH) starts
    /// `offset` bytes into `bytes`, after a link header this crate does not model (a Linux
    /// cooked capture header, say). Keeping the whole record lets [`Frame::layout`] give offsets
    /// into the bytes as captured, which is what a reader of a hex dump needs.
    pub fn parse_network_layer_at(
        bytes: &'a [u8],
        offset: usize,
        ethertype: u16,
    ) -> Result<Frame<'a>, Error> {
        check_len(Layer::Ethernet, offset, bytes.len())?;
        Frame::parse_network(bytes, offset, ethertype, None, None)
    }

    // Inlined into each entry point so that the frame, some 400 bytes, is built where the caller
    // wants it rather than copied there.
    #[inline(always)]
    fn parse_network(
        bytes: &'a [u8],
        l3: usize,
        ethertype: u16,
        ethernet: Option<EthernetRepr>,
        vlan: Option<Range<usize>>,
    ) -> Result<Frame<'a>, Error> {
        let rest = &bytes[l3..];
        let (network, header_len, l3_len, udp) = match ethertype {
            0x0800 => parse_ipv4(rest)?,
            0x86dd => parse_ipv6(rest)?,
            ROCE_V1_ETHERTYPE => parse_grh(rest)?,
            other => return Err(Error::NotRoce(NotRoce::EtherType(other))),
        };
        let bth_at = l3 + header_len;
        let end = l3 + l3_len;
        let transport = &bytes[bth_at..end];
        check_len(Layer::Bth, bth::HEADER_LEN + ICRC_LEN, transport.len())?;
        let bth = bth::Repr::parse(&bth::Packet::new_unchecked(transport))?;
        let headers = bth.opcode.headers();
        let ext_len = headers.len();
        let after_bth = &transport[bth::HEADER_LEN..];
        let ext = Extensions::parse(headers, after_bth)?;
        // What is left after the extension headers is payload, pad and ICRC.
        let body = after_bth.len() - ext_len.min(after_bth.len());
        if body < ICRC_LEN || after_bth.len() < ext_len {
            return Err(Error::Truncated {
                layer: Layer::Payload,
                needed: ext_len + ICRC_LEN,
                available: after_bth.len(),
            });
        }
        let payload_and_pad = body - ICRC_LEN;
        let pad = usize::from(bth.pad_count);
        if pad > payload_and_pad {
            return Err(Error::Malformed {
                layer: Layer::Bth,
                field: "PadCnt",
                value: pad as u64,
                reason: "more pad bytes than the packet has after its headers",
            });
        }
        if payload_and_pad % 4 != 0 {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                field: "length",
                value: payload_and_pad as u64,
                reason: "payload and pad are not a multiple of 4 bytes",
            });
        }
        if !bth.opcode.has_payload() && payload_and_pad != 0 {
            return Err(Error::Malformed {
                layer: Layer::Payload,
                field: "length",
                value: payload_and_pad as u64,
                reason: "the opcode carries no payload",
            });
        }
        let payload_len = payload_and_pad - pad;
        let ext_at = bth_at + bth::HEADER_LEN;
        let payload_at = ext_at + ext_len;
        let pad_at = payload_at + payload_len;
        let icrc_at = pad_at + pad;
        Ok(Frame {
            bytes,
            repr: FrameRepr {
                ethernet,
                network,
                bth,
                ext,
                payload_len,
            },
            layout: Layout {
                vlan,
                network: l3..l3 + header_len - udp.map_or(0, |_| UDP_LEN),
                udp: udp.map(|_| bth_at - UDP_LEN..bth_at),
                bth: bth_at..ext_at,
                ext: ext_at..payload_at,
                payload: payload_at..pad_at,
                pad: pad_at..icrc_at,
                icrc: icrc_at..end,
                trailer: end..bytes.len(),
            },
        })
    }

    /// The bytes the frame was parsed from.
    pub fn bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The payload, without pad.
    pub fn payload(&self) -> &'a [u8] {
        &self.bytes[self.layout.payload.clone()]
    }

    /// Computes the ICRC and compares it with the one the frame carries.
    pub fn icrc(&self) -> icrc::Check {
        let covered = &self.bytes[self.layout.network.start..self.layout.icrc.start];
        icrc::Check {
            // The parse already checked every length compute relies on.
            expected: icrc::compute(self.repr.network.icrc_scope(), covered).unwrap_or(0),
            found: icrc::read(&self.bytes[self.layout.icrc.clone()]).unwrap_or(0),
        }
    }
}

type NetworkParse = (NetworkRepr, usize, usize, Option<()>);

#[inline(always)]
fn parse_ipv4(bytes: &[u8]) -> Result<NetworkParse, Error> {
    check_len(Layer::Ipv4, IPV4_LEN, bytes.len())?;
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
    if ihl < IPV4_LEN {
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
    check_roce_port(bytes.get(ihl..).unwrap_or_default())?;
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
    check_udp_len(&bytes[ihl..total])?;
    Ok((
        NetworkRepr::Ipv4 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            dscp: ip.dscp(),
            ecn: ip.ecn(),
            ident: ip.ident(),
            ttl: ip.hop_limit(),
            udp_src_port: be::u16(&bytes[ihl..ihl + 2]),
        },
        ihl + UDP_LEN,
        total,
        Some(()),
    ))
}

#[inline(always)]
fn parse_ipv6(bytes: &[u8]) -> Result<NetworkParse, Error> {
    check_len(Layer::Ipv6, IPV6_LEN, bytes.len())?;
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
    check_roce_port(&bytes[IPV6_LEN..])?;
    let total = IPV6_LEN + usize::from(ip.payload_len());
    check_len(Layer::Ipv6, total, bytes.len())?;
    check_udp_len(&bytes[IPV6_LEN..total])?;
    Ok((
        NetworkRepr::Ipv6 {
            src: ip.src_addr(),
            dst: ip.dst_addr(),
            traffic_class: ip.traffic_class(),
            flow_label: ip.flow_label(),
            hop_limit: ip.hop_limit(),
            udp_src_port: be::u16(&bytes[IPV6_LEN..IPV6_LEN + 2]),
        },
        IPV6_LEN + UDP_LEN,
        total,
        Some(()),
    ))
}

#[inline(always)]
fn parse_grh(bytes: &[u8]) -> Result<NetworkParse, Error> {
    check_len(Layer::Grh, IPV6_LEN, bytes.len())?;
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
    let total = IPV6_LEN + usize::from(grh.payload_len());
    check_len(Layer::Grh, total, bytes.len())?;
    Ok((
        NetworkRepr::Grh {
            sgid: grh.src_addr(),
            dgid: grh.dst_addr(),
            traffic_class: grh.traffic_class(),
            flow_label: grh.flow_label(),
            hop_limit: grh.hop_limit(),
        },
        IPV6_LEN,
        total,
        None,
    ))
}

/// Checks that the UDP header at the start of `datagram` (an IP payload, possibly cut short by
/// the capture) goes to RoCEv2's port. The source port says nothing: RoCE picks it for ECMP
/// entropy, and it may well be a well-known port such as 53 or 69.
fn check_roce_port(datagram: &[u8]) -> Result<(), Error> {
    check_len(Layer::Udp, UDP_LEN, datagram.len())?;
    let udp = UdpPacket::new_unchecked(datagram);
    if udp.dst_port() != ROCE_V2_PORT {
        return Err(Error::NotRoce(NotRoce::UdpPort(udp.dst_port())));
    }
    Ok(())
}

/// Checks that the UDP length agrees with the IP length (`datagram` is the whole IP payload).
fn check_udp_len(datagram: &[u8]) -> Result<(), Error> {
    check_len(Layer::Udp, UDP_LEN, datagram.len())?;
    let udp = UdpPacket::new_unchecked(datagram);
    if usize::from(udp.len()) != datagram.len() {
        return Err(malformed(
            Layer::Udp,
            "length",
            udp.len().into(),
            "disagrees with the IP length",
        ));
    }
    Ok(())
}

fn malformed(layer: Layer, field: &'static str, value: u64, reason: &'static str) -> Error {
    Error::Malformed {
        layer,
        field,
        value,
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::{Kind, Opcode, Transport};

    fn hex(s: &str) -> Vec<u8> {
        let digits: Vec<u8> = s.bytes().filter(u8::is_ascii_hexdigit).collect();
        digits
            .chunks(2)
            .map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap())
            .collect()
    }

    #[test]
    fn rocev1_write_only_from_scapy_tests() {
        let bytes = hex("7cfe90753cd8 7cfe90753cd8 8915 6020
             0000 0028 1b 40 00000000000000000000ffff0f000002
             00000000000000000000ffff0f000002 0a70 ffff 00 00010a 80 a788bc
             000055d4c0726000 000047b3 00000005 0000000001000000 e3d856bb");
        let frame = Frame::parse(&bytes).unwrap();
        assert!(matches!(
            frame.repr.network,
            NetworkRepr::Grh {
                traffic_class: 2,
                ..
            }
        ));
        assert_eq!(frame.repr.bth.pad_count, 3);
        assert_eq!(frame.repr.ext.reth.unwrap().dma_len, 5);
        assert_eq!(frame.payload().len(), 5);
        assert!(frame.icrc().is_ok(), "{:x?}", frame.icrc());
    }

    fn sample(network: NetworkRepr, vlan: Option<VlanTag>) -> FrameRepr {
        let op = Opcode::new(Transport::Rc, Kind::WriteOnlyImm).unwrap();
        let mut bth = bth::Repr::new(op, 0x12, 0xfffffe);
        bth.ack_req = true;
        FrameRepr {
            ethernet: Some(EthernetRepr {
                dst: EthernetAddress([2, 0, 0, 0, 0, 1]),
                src: EthernetAddress([2, 0, 0, 0, 0, 2]),
                vlan,
            }),
            network,
            bth,
            ext: Extensions {
                reth: Some(reth::Repr {
                    va: 0x1000,
                    r_key: 0x1234,
                    dma_len: 7,
                }),
                immdt: Some(immdt::Repr { imm: 0xdeadbeef }),
                ..Extensions::default()
            },
            payload_len: 7,
        }
    }

    #[test]
    fn emit_then_parse_is_identity_on_every_network() {
        let v4 = NetworkRepr::Ipv4 {
            src: Ipv4Address::new(10, 0, 0, 1),
            dst: Ipv4Address::new(10, 0, 0, 2),
            dscp: 0,
            ecn: 0,
            ident: 7,
            ttl: 64,
            udp_src_port: 0xc123,
        };
        let v6 = NetworkRepr::Ipv6 {
            src: Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            dst: Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
            traffic_class: 0,
            flow_label: 0x12345,
            hop_limit: 64,
            udp_src_port: 0xc123,
        };
        let grh = NetworkRepr::Grh {
            sgid: Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
            dgid: Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 2),
            traffic_class: 2,
            flow_label: 0,
            hop_limit: 64,
        };
        for network in [v4, v6, grh] {
            for vlan in [
                None,
                Some(VlanTag {
                    pcp: 3,
                    dei: false,
                    vid: 100,
                }),
            ] {
                let mut repr = sample(network, vlan);
                let mut buf = [0u8; 256];
                let len = repr.emit(&mut buf, b"payload").unwrap();
                assert_eq!(len, repr.frame_len());
                let frame = Frame::parse(&buf[..len]).unwrap();
                assert!(frame.icrc().is_ok());
                assert_eq!(frame.payload(), b"payload");
                assert_eq!(frame.layout.pad.len(), 1);
                repr.bth.pad_count = 1;
                assert_eq!(frame.repr, repr);
            }
        }
    }

    #[test]
    fn every_truncation_is_an_error() {
        let repr = sample(
            NetworkRepr::Ipv4 {
                src: Ipv4Address::new(10, 0, 0, 1),
                dst: Ipv4Address::new(10, 0, 0, 2),
                dscp: 0,
                ecn: 0,
                ident: 7,
                ttl: 64,
                udp_src_port: 0xc123,
            },
            None,
        );
        let mut buf = [0u8; 256];
        let len = repr.emit(&mut buf, b"payload").unwrap();
        for cut in 0..len {
            assert!(Frame::parse(&buf[..cut]).is_err(), "cut at {cut}");
        }
    }
    fn v4() -> NetworkRepr {
        NetworkRepr::Ipv4 {
            src: Ipv4Address::new(10, 0, 0, 1),
            dst: Ipv4Address::new(10, 0, 0, 2),
            dscp: 0,
            ecn: 0,
            ident: 7,
            ttl: 64,
            udp_src_port: 0xc123,
        }
    }

    fn emitted(repr: &FrameRepr) -> Vec<u8> {
        let mut buf = vec![0u8; repr.frame_len()];
        repr.emit(&mut buf, &vec![0x5a; repr.payload_len]).unwrap();
        buf
    }

    #[test]
    fn other_traffic_is_not_roce_even_when_snapped_or_corrupt() {
        let good = emitted(&sample(v4(), None));
        // TCP, with the IP checksum now wrong as well.
        let mut tcp = good.clone();
        tcp[14 + 9] = 6;
        assert_eq!(
            Frame::parse(&tcp).unwrap_err(),
            Error::NotRoce(NotRoce::IpProtocol(6))
        );
        // DNS, snapped right after the UDP header, checksum wrong.
        let mut dns = good.clone();
        dns[14 + 20 + 2..14 + 20 + 4].copy_from_slice(&53u16.to_be_bytes());
        assert_eq!(
            Frame::parse(&dns[..14 + 20 + 8]).unwrap_err(),
            Error::NotRoce(NotRoce::UdpPort(53))
        );
        // The same corruption on a RoCE packet is a fault of that packet.
        let mut bad_checksum = good.clone();
        bad_checksum[14 + 10] ^= 0xff;
        assert!(matches!(
            Frame::parse(&bad_checksum).unwrap_err(),
            Error::Malformed {
                layer: Layer::Ipv4,
                field: "header checksum",
                ..
            }
        ));
    }

    #[test]
    fn an_ip_length_too_short_for_udp_is_an_error() {
        let mut frame = emitted(&sample(v4(), None));
        // Total length 23: three bytes of UDP. Recompute the checksum so only the length is off.
        frame[14 + 2..14 + 4].copy_from_slice(&23u16.to_be_bytes());
        let mut ip = Ipv4Packet::new_unchecked(&mut frame[14..34]);
        ip.fill_checksum();
        assert_eq!(
            Frame::parse(&frame).unwrap_err(),
            Error::Truncated {
                layer: Layer::Udp,
                needed: 8,
                available: 3
            }
        );
    }

    #[test]
    fn network_layer_at_an_offset_keeps_offsets_into_the_whole_record() {
        let frame = emitted(&sample(v4(), None));
        let mut cooked = vec![0xee; 16];
        cooked.extend_from_slice(&frame[14..]);
        let parsed = Frame::parse_network_layer_at(&cooked, 16, 0x0800).unwrap();
        assert_eq!(parsed.repr.ethernet, None);
        assert_eq!(parsed.layout.network, 16..36);
        assert_eq!(parsed.layout.bth, 44..56);
        assert_eq!(parsed.bytes().len(), cooked.len());
        assert!(parsed.icrc().is_ok());
        assert_eq!(
            Frame::parse_network_layer_at(&cooked[..10], 16, 0x0800).unwrap_err(),
            Error::Truncated {
                layer: Layer::Ethernet,
                needed: 16,
                available: 10
            }
        );
    }

    #[test]
    fn extensions_for_an_opcode_are_the_ones_it_carries() {
        for op in Opcode::all() {
            let ext = Extensions::for_opcode(op);
            assert_eq!(ext.headers(), op.headers(), "{op}");
        }
    }

    #[test]
    fn ipv4_options_are_stepped_over() {
        let mut frame = emitted(&sample(v4(), None));
        // Four bytes of options (NOPs) after the 20-byte header: IHL 6, four more bytes.
        frame.splice(34..34, [1, 1, 1, 1]);
        frame[14] = 0x46;
        let total = u16::from_be_bytes([frame[16], frame[17]]) + 4;
        frame[16..18].copy_from_slice(&total.to_be_bytes());
        Ipv4Packet::new_unchecked(&mut frame[14..38]).fill_checksum();
        let icrc_at = frame.len() - ICRC_LEN;
        let crc = icrc::compute(Scope::Ipv4, &frame[14..icrc_at]).unwrap();
        icrc::write(&mut frame[icrc_at..], crc);

        let parsed = Frame::parse(&frame).unwrap();
        assert_eq!(parsed.layout.network, 14..38);
        assert_eq!(parsed.layout.udp, Some(38..46));
        assert_eq!(parsed.layout.bth, 46..58);
        assert_eq!(parsed.payload(), [0x5a; 7]);
        assert!(parsed.icrc().is_ok());
        let fields = crate::describe::Description::new(&parsed).fields();
        let options = fields
            .iter()
            .find(|f| f.key() == "roce.ip.options")
            .unwrap();
        assert_eq!(
            (options.bytes.clone(), options.to_string()),
            (34..38, "01:01:01:01".into())
        );
    }
}
