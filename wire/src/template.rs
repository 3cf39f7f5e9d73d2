//! A connected path's frame headers, built once: every packet a QP sends to its peer carries the
//! same Ethernet, IP and UDP headers but for a few length fields, the IPv4 identification and
//! the IPv4 header checksum. [`FrameTemplate`] keeps those headers as bytes, and
//! [`FrameTemplate::emit_with`] writes a frame by copying them and patching only what varies,
//! then the BTH, extension headers, payload, pad and ICRC as [`FrameRepr::emit_with`] does.
//!
//! What it writes is byte for byte what [`FrameRepr::emit_with`] writes for the same packet
//! (wire/tests/frame_props.rs compares the two over random opcodes, networks, tags, field values
//! and payloads); it only skips building the invariant headers field by field for every packet.

use crate::error::{check_len, Error, Layer};
use crate::frame::{pad_len, EthernetRepr, Extensions, FrameRepr, NetworkRepr, ICRC_LEN};
use crate::{bth, icrc, ipv4, ipv6, udp};

/// The longest invariant part: Ethernet with an 802.1Q tag, then IPv6 and UDP.
const MAX_HEAD: usize = 18 + ipv6::HEADER_LEN + udp::HEADER_LEN;

/// The Ethernet, IP and UDP headers (or GRH) of one path, with the fields that vary per packet
/// zeroed, and where those fields are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrameTemplate {
    ethernet: Option<EthernetRepr>,
    /// The network layer, with the IPv4 identification zero (it varies per packet).
    network: NetworkRepr,
    head: [u8; MAX_HEAD],
    /// Bytes of `head` in use: everything before the BTH.
    head_len: usize,
    /// Where the IP header (or GRH) starts.
    l2_len: usize,
    /// IPv4 only: the ones' complement sum of the header's 16-bit words as the template holds
    /// them (total length, identification and checksum zero), not yet folded (smoltcp keeps its
    /// checksum arithmetic private: it checks and emits whole headers only).
    ip_sum: u32,
}

impl FrameTemplate {
    /// The template of every frame with these Ethernet and network headers (the IPv4
    /// identification in `network` is ignored: each frame gives its own).
    pub fn new(ethernet: Option<EthernetRepr>, network: NetworkRepr) -> FrameTemplate {
        let network = without_ident(network);
        let l2_len = ethernet.map_or(0, |e| e.header_len());
        let head_len = l2_len + network.header_len();
        let mut head = [0u8; MAX_HEAD];
        if let Some(eth) = &ethernet {
            eth.emit(&mut head[..l2_len], network.ethertype());
        }
        // Lengths of zero: they are patched per frame. (The IPv4 checksum emitted here is
        // replaced below.)
        network.emit(&mut head[l2_len..head_len], network.header_len());
        let mut ip_sum = 0;
        if let NetworkRepr::Ipv4 { .. } = network {
            let ip = &mut head[l2_len..l2_len + ipv4::HEADER_LEN];
            ip[2..4].fill(0); // total length
            ip[10..12].fill(0); // header checksum
            ip_sum = ip
                .chunks_exact(2)
                .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
                .sum();
        } else {
            head[l2_len + 4..l2_len + 6].fill(0); // IPv6 (or GRH) payload length
        }
        if network.udp_src_port().is_some() {
            let udp_at = head_len - udp::HEADER_LEN;
            head[udp_at + 4..udp_at + 6].fill(0); // UDP length
        }
        FrameTemplate {
            ethernet,
            network,
            head,
            head_len,
            l2_len,
            ip_sum,
        }
    }

    /// Whether `repr`'s frame has this template's Ethernet and network headers (its IPv4
    /// identification aside).
    pub fn fits(&self, repr: &FrameRepr) -> bool {
        self.ethernet == repr.ethernet && self.network == without_ident(repr.network)
    }

    /// Writes the frame of `bth`, `ext` and `payload_len` bytes of payload on this template's
    /// path, with IPv4 identification `ident` (ignored on IPv6 and RoCEv1), into `buf`: the
    /// same bytes as [`FrameRepr::emit_with`] writes for that frame, with the same errors.
    /// `fill` places exactly `payload_len` payload bytes. Returns the frame's length.
    pub fn emit_with(
        &self,
        bth: &bth::Repr,
        ext: &Extensions,
        payload_len: usize,
        ident: u16,
        buf: &mut [u8],
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<usize, Error> {
        let headers = ext.headers();
        if headers != bth.opcode.headers() || (!bth.opcode.has_payload() && payload_len != 0) {
            // Inconsistent: the full emitter says what is wrong.
            return self.repr(bth, ext, payload_len, ident).emit_with(buf, fill);
        }
        let pad = pad_len(payload_len);
        let payload_at = self.head_len + bth::HEADER_LEN + headers.len();
        let frame_len = payload_at + payload_len + pad + ICRC_LEN;
        let l3_len = frame_len - self.l2_len;
        if l3_len > usize::from(u16::MAX) {
            return self.repr(bth, ext, payload_len, ident).emit_with(buf, fill);
        }
        check_len(Layer::Ethernet, frame_len, buf.len())?;
        let buf = &mut buf[..frame_len];

        buf[..self.head_len].copy_from_slice(&self.head[..self.head_len]);
        let l3 = &mut buf[self.l2_len..self.head_len];
        match self.network {
            NetworkRepr::Ipv4 { .. } => {
                let total = l3_len as u16;
                l3[2..4].copy_from_slice(&total.to_be_bytes());
                l3[4..6].copy_from_slice(&ident.to_be_bytes());
                let sum = self.ip_sum + u32::from(total) + u32::from(ident);
                let sum = (sum & 0xffff) + (sum >> 16);
                let sum = (sum & 0xffff) + (sum >> 16);
                l3[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
                let udp_len = (l3_len - ipv4::HEADER_LEN) as u16;
                l3[ipv4::HEADER_LEN + 4..ipv4::HEADER_LEN + 6]
                    .copy_from_slice(&udp_len.to_be_bytes());
            }
            NetworkRepr::Ipv6 { .. } => {
                let payload = ((l3_len - ipv6::HEADER_LEN) as u16).to_be_bytes();
                l3[4..6].copy_from_slice(&payload);
                l3[ipv6::HEADER_LEN + 4..ipv6::HEADER_LEN + 6].copy_from_slice(&payload);
            }
            NetworkRepr::Grh { .. } => {
                let payload = ((l3_len - ipv6::HEADER_LEN) as u16).to_be_bytes();
                l3[4..6].copy_from_slice(&payload);
            }
        }

        let bth_at = self.head_len;
        let ext_at = bth_at + bth::HEADER_LEN;
        let mut bth = *bth;
        bth.pad_count = pad as u8;
        bth.emit(&mut bth::Packet::new_unchecked(&mut buf[bth_at..ext_at]));
        ext.emit(&mut buf[ext_at..payload_at]);
        let pad_at = payload_at + payload_len;
        fill(&mut buf[payload_at..pad_at]);
        let icrc_at = pad_at + pad;
        buf[pad_at..icrc_at].fill(0);
        // The headers are whole: the ICRC's masks always find what they need.
        let crc = icrc::compute(self.network.icrc_scope(), &buf[self.l2_len..icrc_at])
            .unwrap_or_default();
        icrc::write(&mut buf[icrc_at..], crc);
        Ok(frame_len)
    }

    /// The frame this template and these per-packet fields describe.
    pub fn repr(
        &self,
        bth: &bth::Repr,
        ext: &Extensions,
        payload_len: usize,
        ident: u16,
    ) -> FrameRepr {
        let mut network = self.network;
        if let NetworkRepr::Ipv4 { ident: i, .. } = &mut network {
            *i = ident;
        }
        FrameRepr {
            ethernet: self.ethernet,
            network,
            bth: *bth,
            ext: *ext,
            payload_len,
        }
    }
}

/// `network` with its IPv4 identification zero.
fn without_ident(mut network: NetworkRepr) -> NetworkRepr {
    if let NetworkRepr::Ipv4 { ident, .. } = &mut network {
        *ident = 0;
    }
    network
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::opcode::Opcode;
    use crate::Ipv4Address;

    fn v4(ident: u16, ttl: u8) -> NetworkRepr {
        NetworkRepr::Ipv4 {
            src: Ipv4Address::new(10, 0, 0, 1),
            dst: Ipv4Address::new(10, 0, 0, 2),
            dscp: 0,
            ecn: 0,
            ident,
            ttl,
            udp_src_port: 0xc123,
        }
    }

    #[test]
    fn a_template_fits_its_path_whatever_the_identification_and_no_other() {
        let template = FrameTemplate::new(None, v4(7, 64));
        let op = Opcode::from_u8(0x0a).unwrap(); // RC RDMA WRITE ONLY
        let bth = bth::Repr::new(op, 0x12, 5);
        let ext = Extensions::for_opcode(op);
        let repr = |network| FrameRepr {
            ethernet: None,
            network,
            bth,
            ext,
            payload_len: 0,
        };
        assert!(template.fits(&repr(v4(9, 64))));
        assert!(!template.fits(&repr(v4(7, 63))));
    }

    #[test]
    fn errors_are_the_full_emitters() {
        let template = FrameTemplate::new(None, v4(0, 64));
        let op = Opcode::from_u8(0x0a).unwrap(); // RC RDMA WRITE ONLY: a RETH
        let bth = bth::Repr::new(op, 0x12, 5);
        let ext = Extensions::for_opcode(op);
        let mut buf = [0u8; 128];
        let cases = [
            (Extensions::default(), 4, 128), // missing RETH
            (ext, 4, 40),                    // buffer too short
            (ext, 70_000, 128),              // too long for IP
        ];
        for (ext, payload_len, room) in cases {
            let fast = template.emit_with(&bth, &ext, payload_len, 3, &mut buf[..room], |_| {});
            let full = template
                .repr(&bth, &ext, payload_len, 3)
                .emit_with(&mut buf[..room], |_| {});
            assert!(fast.is_err());
            assert_eq!(fast, full);
        }
    }
}
