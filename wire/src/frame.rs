//! A whole RoCE frame: Ethernet (with an optional 802.1Q tag), then IPv4 or IPv6 and UDP port
//! 4791 (RoCEv2) or a GRH (RoCEv1), then the BTH, its extension headers, payload, pad and ICRC.
//!
//! Each header has a file of its own ([`crate::ethernet`], [`crate::vlan`], [`crate::ipv4`],
//! [`crate::ipv6`], [`crate::grh`], [`crate::udp`], the BTH and [`crate::extensions`]); this one
//! puts them together. [`Frame::parse`] checks every length and field a receiver relies on and
//! never panics; [`FrameRepr::emit_with`] writes a complete frame into a caller's buffer, letting
//! the caller place the payload directly (a NIC reads it from host memory straight into the
//! frame).

use core::ops::Range;

use crate::error::{check_len, Error, Layer};
use crate::icrc;
use crate::network::Parsed;
use crate::opcode::Headers;
use crate::{bth, udp};

pub use crate::ethernet::EthernetRepr;
pub use crate::extensions::Extensions;
pub use crate::grh::{GRH_NEXT_HEADER_BTH, ROCE_V1_ETHERTYPE};
pub use crate::network::NetworkRepr;
pub use crate::udp::ROCE_V2_PORT;
pub use crate::vlan::{VlanTag, VLAN_ETHERTYPE};

/// Bytes of the invariant CRC that ends every packet.
pub const ICRC_LEN: usize = 4;

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
            eth.emit(&mut buf[..l2], self.network.ethertype());
        }
        let l3_len = frame_len - l2;
        let bth_at = l2 + self.network.header_len();
        self.network.emit(&mut buf[l2..bth_at], l3_len);

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
        let (ethernet, ethertype, vlan) = EthernetRepr::parse(bytes)?;
        let l3 = ethernet.header_len();
        Frame::parse_network(bytes, l3, ethertype, Some(ethernet), vlan)
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
        let Parsed {
            repr: network,
            header_len,
            packet_len: l3_len,
            udp,
        } = NetworkRepr::parse(ethertype, rest)?;
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
                network: l3..l3 + header_len - if udp { udp::HEADER_LEN } else { 0 },
                udp: udp.then(|| bth_at - udp::HEADER_LEN..bth_at),
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

#[cfg(test)]
mod tests {
    use smoltcp::wire::Ipv4Packet;

    use super::*;
    use crate::icrc::Scope;
    use crate::opcode::{Kind, Opcode, Transport};
    use crate::{immdt, reth, EthernetAddress, Ipv4Address, Ipv6Address, NotRoce};

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
