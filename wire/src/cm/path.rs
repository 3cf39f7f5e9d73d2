//! A path as a REQ describes it (the primary and the alternate path have the same 44-byte
//! layout): LIDs, GIDs, flow label, rate, traffic class, hop limit, service level, whether the
//! peer is on the local subnet, and the local ACK timeout. On RoCE the LIDs are placeholders
//! (0xffff for a path without one) and the GIDs are the addresses that count: `::ffff:a.b.c.d`
//! for IPv4.
//!
//! ```text
//!  0 local LID (16)  | remote LID (16)
//!  4 local GID (128)
//! 20 remote GID (128)
//! 36 flow label (20) | reserved (6) | packet rate (6)
//! 40 traffic class   | hop limit | SL (4), subnet local (1), reserved (3) | local ACK timeout (5), reserved (3)
//! ```

use crate::be;
use crate::Ipv6Address;

use super::{get_bits, gid, set_bits};

/// Bytes of one path in a REQ.
pub(crate) const LEN: usize = 44;

/// One path of a REQ.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    pub local_gid: Ipv6Address,
    pub remote_gid: Ipv6Address,
    /// 20 bits.
    pub flow_label: u32,
    /// The static rate code (6 bits; IBTA table 205, or Linux's `enum ib_rate`).
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// Service level (4 bits).
    pub sl: u8,
    pub subnet_local: bool,
    /// 4.096 µs × 2^timeout, the time the requester waits for an ACK (5 bits).
    pub local_ack_timeout: u8,
}

impl Default for Path {
    /// No path: every field zero, as a REQ without an alternate path carries.
    fn default() -> Path {
        Path {
            local_lid: 0,
            remote_lid: 0,
            local_gid: Ipv6Address::UNSPECIFIED,
            remote_gid: Ipv6Address::UNSPECIFIED,
            flow_label: 0,
            packet_rate: 0,
            traffic_class: 0,
            hop_limit: 0,
            sl: 0,
            subnet_local: false,
            local_ack_timeout: 0,
        }
    }
}

impl Path {
    /// Reads a path from its [`LEN`] bytes.
    pub(crate) fn read(b: &[u8]) -> Path {
        Path {
            local_lid: be::u16(&b[0..2]),
            remote_lid: be::u16(&b[2..4]),
            local_gid: gid(&b[4..20]),
            remote_gid: gid(&b[20..36]),
            flow_label: be::u32(&b[36..40]) >> 12,
            packet_rate: get_bits(b[39], 0x3f),
            traffic_class: b[40],
            hop_limit: b[41],
            sl: get_bits(b[42], 0xf0),
            subnet_local: b[42] & 0x08 != 0,
            local_ack_timeout: get_bits(b[43], 0xf8),
        }
    }

    /// Writes the path into its [`LEN`] bytes, reserved bits zero.
    pub(crate) fn write(&self, b: &mut [u8]) {
        be::set_u16(&mut b[0..2], self.local_lid);
        be::set_u16(&mut b[2..4], self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid.octets());
        b[20..36].copy_from_slice(&self.remote_gid.octets());
        be::set_u32(
            &mut b[36..40],
            ((self.flow_label & 0xf_ffff) << 12) | u32::from(self.packet_rate & 0x3f),
        );
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = 0;
        set_bits(&mut b[42], 0xf0, self.sl);
        set_bits(&mut b[42], 0x08, u8::from(self.subnet_local));
        b[43] = 0;
        set_bits(&mut b[43], 0xf8, self.local_ack_timeout);
    }
}
