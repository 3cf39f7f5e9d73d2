//! Where every field of every header lies, what tshark calls it and how to show it.
//!
//! One row per field: name, key, byte offset within its header, length in bytes, bit mask over
//! those bytes read as one big-endian number (0: all of them), shape of the value and what it
//! means. The walker reads any value from these rows alone, so the table is the whole story of
//! each header's layout: the thing a reader of this code or of the `-v` view wants to learn.

/// How the value of a field is read and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Dec,
    /// Hexadecimal with this many digits.
    Hex(u8),
    Flag,
    Mac,
    Ipv4,
    Ipv6,
    Bytes,
    /// A count of 32-bit words, shown (as tshark does) in bytes: the IPv4 header length.
    Words32,
}

/// What a value means, when the number alone does not say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Meaning {
    None,
    Fixed(&'static str),
    EtherType,
    Ecn,
    Opcode,
    Syndrome,
    SyndromeKind,
    Credits,
    RnrTimer,
    NakCode,
    Selectivity,
    Placement,
    UdpChecksum,
}

#[derive(Debug, Clone, Copy)]
pub(super) struct Spec {
    pub name: &'static str,
    pub key: &'static str,
    pub at: usize,
    pub len: usize,
    pub mask: u32,
    pub shape: Shape,
    pub meaning: Meaning,
}

const fn spec(
    name: &'static str,
    key: &'static str,
    (at, len, mask): (usize, usize, u32),
    shape: Shape,
    meaning: Meaning,
) -> Spec {
    Spec {
        name,
        key,
        at,
        len,
        mask,
        shape,
        meaning,
    }
}

use Meaning as M;
use Shape::*;

const NONE: Meaning = Meaning::None;

#[rustfmt::skip]
pub(super) const ETHERNET: &[Spec] = &[
    spec("Destination", "eth.dst",  (0, 6, 0),  Mac,     NONE),
    spec("Source",      "eth.src",  (6, 6, 0),  Mac,     NONE),
    spec("Type",        "eth.type", (12, 2, 0), Hex(4),  M::EtherType),
];

/// Offsets from the start of the 802.1Q tag (byte 14 of the frame).
#[rustfmt::skip]
pub(super) const VLAN: &[Spec] = &[
    spec("Priority",      "vlan.priority", (0, 2, 0xe000), Dec,    NONE),
    spec("Drop eligible", "vlan.dei",      (0, 2, 0x1000), Flag,   NONE),
    spec("VLAN ID",       "vlan.id",       (0, 2, 0x0fff), Dec,    NONE),
    spec("Type",          "vlan.etype",    (2, 2, 0),      Hex(4), M::EtherType),
];

#[rustfmt::skip]
pub(super) const IPV4: &[Spec] = &[
    spec("Version",         "ip.version",      (0, 1, 0xf0),   Dec,     NONE),
    spec("Header length (bytes)", "ip.hdr_len", (0, 1, 0x0f), Words32, NONE),
    spec("DSCP",            "ip.dsfield.dscp", (1, 1, 0xfc),   Dec,     NONE),
    spec("ECN",             "ip.dsfield.ecn",  (1, 1, 0x03),   Dec,     M::Ecn),
    spec("Total length",    "ip.len",          (2, 2, 0),      Dec,     NONE),
    spec("Identification",  "ip.id",           (4, 2, 0),      Hex(4),  NONE),
    spec("Don't fragment",  "ip.flags.df",     (6, 1, 0x40),   Flag,    NONE),
    spec("More fragments",  "ip.flags.mf",     (6, 1, 0x20),   Flag,    NONE),
    spec("Fragment offset", "ip.frag_offset",  (6, 2, 0x1fff), Dec,     NONE),
    spec("Time to live",    "ip.ttl",          (8, 1, 0),      Dec,     NONE),
    spec("Protocol",        "ip.proto",        (9, 1, 0),      Dec,     M::Fixed("UDP")),
    spec("Header checksum", "ip.checksum",     (10, 2, 0),     Hex(4),  M::Fixed("correct")),
    spec("Source",          "ip.src",          (12, 4, 0),     Ipv4,    NONE),
    spec("Destination",     "ip.dst",          (16, 4, 0),     Ipv4,    NONE),
];

#[rustfmt::skip]
pub(super) const IPV6: &[Spec] = &[
    spec("Version",        "ipv6.version", (0, 1, 0xf0),     Dec,    NONE),
    spec("Traffic class",  "ipv6.tclass",  (0, 2, 0x0ff0),   Hex(2), NONE),
    spec("Flow label",     "ipv6.flow",    (1, 3, 0x0f_ffff), Hex(5), NONE),
    spec("Payload length", "ipv6.plen",    (4, 2, 0),        Dec,    NONE),
    spec("Next header",    "ipv6.nxt",     (6, 1, 0),        Dec,    M::Fixed("UDP")),
    spec("Hop limit",      "ipv6.hlim",    (7, 1, 0),        Dec,    NONE),
    spec("Source",         "ipv6.src",     (8, 16, 0),       Ipv6,   NONE),
    spec("Destination",    "ipv6.dst",     (24, 16, 0),      Ipv6,   NONE),
];

/// RoCEv1's Global Route Header: the IPv6 layout under InfiniBand's names.
#[rustfmt::skip]
pub(super) const GRH: &[Spec] = &[
    spec("IP version",     "infiniband.grh.ipver",     (0, 1, 0xf0),      Dec,    NONE),
    spec("Traffic class",  "infiniband.grh.tclass",    (0, 2, 0x0ff0),    Hex(2), NONE),
    spec("Flow label",     "infiniband.grh.flowlabel", (1, 3, 0x0f_ffff), Hex(5), NONE),
    spec("Payload length", "infiniband.grh.paylen",    (4, 2, 0),         Dec,    NONE),
    spec("Next header",    "infiniband.grh.nxthdr",    (6, 1, 0),         Dec,    M::Fixed("BTH")),
    spec("Hop limit",      "infiniband.grh.hoplmt",    (7, 1, 0),         Dec,    NONE),
    spec("Source GID",     "infiniband.grh.sgid",      (8, 16, 0),        Ipv6,   NONE),
    spec("Destination GID","infiniband.grh.dgid",      (24, 16, 0),       Ipv6,   NONE),
];

#[rustfmt::skip]
pub(super) const UDP: &[Spec] = &[
    spec("Source port",      "udp.srcport",  (0, 2, 0), Dec,    NONE),
    spec("Destination port", "udp.dstport",  (2, 2, 0), Dec,    M::Fixed("RoCEv2")),
    spec("Length",           "udp.length",   (4, 2, 0), Dec,    NONE),
    spec("Checksum",         "udp.checksum", (6, 2, 0), Hex(4), M::UdpChecksum),
];

#[rustfmt::skip]
pub(super) const BTH: &[Spec] = &[
    spec("Opcode",          "infiniband.bth.opcode",    (0, 1, 0),    Dec,    M::Opcode),
    spec("Solicited event", "infiniband.bth.se",        (1, 1, 0x80), Flag,   NONE),
    spec("MigReq",          "infiniband.bth.m",         (1, 1, 0x40), Flag,   NONE),
    spec("Pad count",       "infiniband.bth.padcnt",    (1, 1, 0x30), Dec,    NONE),
    spec("Header version",  "infiniband.bth.tver",      (1, 1, 0x0f), Dec,    NONE),
    spec("P_Key",           "infiniband.bth.p_key",     (2, 2, 0),    Hex(4), NONE),
    spec("FECN",            "roce.bth.fecn",            (4, 1, 0x80), Flag,   M::Fixed("congestion on the way here")),
    spec("BECN",            "roce.bth.becn",            (4, 1, 0x40), Flag,   M::Fixed("congestion on the way back")),
    spec("Destination QP",  "infiniband.bth.destqp",    (5, 3, 0),    Hex(6), NONE),
    spec("AckReq",          "infiniband.bth.a",         (8, 1, 0x80), Flag,   NONE),
    spec("Reserved",        "infiniband.bth.reserved7", (8, 1, 0x7f), Dec,    NONE),
    spec("PSN",             "infiniband.bth.psn",       (9, 3, 0),    Dec,    NONE),
];

#[rustfmt::skip]
pub(super) const DETH: &[Spec] = &[
    spec("Q_Key",     "infiniband.deth.q_key", (0, 4, 0), Hex(8), NONE),
    spec("Source QP", "infiniband.deth.srcqp", (5, 3, 0), Hex(6), NONE),
];

/// tshark has no FETH names (FLUSH is newer than its dissector).
#[rustfmt::skip]
pub(super) const FETH: &[Spec] = &[
    spec("Selectivity level", "roce.feth.selectivity",    (0, 4, 0x30), Dec, M::Selectivity),
    spec("Placement type",    "roce.feth.placement_type", (0, 4, 0x0f), Dec, M::Placement),
];

#[rustfmt::skip]
pub(super) const RETH: &[Spec] = &[
    spec("Virtual address", "infiniband.reth.va",     (0, 8, 0),  Hex(16), NONE),
    spec("R_Key",           "infiniband.reth.r_key",  (8, 4, 0),  Hex(8),  NONE),
    spec("DMA length",      "infiniband.reth.dmalen", (12, 4, 0), Dec,     M::Fixed("bytes in the message")),
];

/// tshark files the AtomicETH's address and key under the RETH's names.
#[rustfmt::skip]
pub(super) const ATOMIC_ETH: &[Spec] = &[
    spec("Virtual address", "infiniband.reth.va",          (0, 8, 0),  Hex(16), NONE),
    spec("R_Key",           "infiniband.reth.r_key",       (8, 4, 0),  Hex(8),  NONE),
    spec("Swap or add",     "infiniband.atomiceth.swapdt", (12, 8, 0), Hex(16), NONE),
    spec("Compare",         "infiniband.atomiceth.cmpdt",  (20, 8, 0), Hex(16), NONE),
];

/// The syndrome byte, whole and in the pieces tshark shows; the piece for the low five bits is
/// one of [`AETH_DETAIL`], chosen by the kind (bits 6:5).
#[rustfmt::skip]
pub(super) const AETH: &[Spec] = &[
    spec("Syndrome", "infiniband.aeth.syndrome",          (0, 1, 0),    Hex(2), M::Syndrome),
    spec("Reserved", "infiniband.aeth.syndrome.reserved", (0, 1, 0x80), Dec,    NONE),
    spec("Kind",     "infiniband.aeth.syndrome.opcode",   (0, 1, 0x60), Dec,    M::SyndromeKind),
];

/// Indexed by the syndrome's kind: ACK, RNR NAK, reserved, NAK.
#[rustfmt::skip]
pub(super) const AETH_DETAIL: [Spec; 4] = [
    spec("Credit count",   "infiniband.aeth.syndrome.credit_count",   (0, 1, 0x1f), Dec, M::Credits),
    spec("RNR timer",      "infiniband.aeth.syndrome.timer",          (0, 1, 0x1f), Dec, M::RnrTimer),
    spec("Reserved value", "infiniband.aeth.syndrome.reserved_value", (0, 1, 0x1f), Dec, NONE),
    spec("NAK code",       "infiniband.aeth.syndrome.error_code",     (0, 1, 0x1f), Dec, M::NakCode),
];

#[rustfmt::skip]
pub(super) const AETH_MSN: Spec =
    spec("MSN", "infiniband.aeth.msn", (1, 3, 0), Dec, M::Fixed("messages completed"));

#[rustfmt::skip]
pub(super) const ATOMIC_ACK_ETH: &[Spec] = &[
    spec("Original remote data", "infiniband.atomicacketh.origremdt", (0, 8, 0), Hex(16), NONE),
];

/// tshark shows ImmDt and IETH as bytes, not numbers.
#[rustfmt::skip]
pub(super) const IMMDT: &[Spec] = &[
    spec("Immediate data", "infiniband.immdt", (0, 4, 0), Bytes, NONE),
];

#[rustfmt::skip]
pub(super) const IETH: &[Spec] = &[
    spec("R_Key to invalidate", "infiniband.ieth", (0, 4, 0), Bytes, NONE),
];

/// Keys of the fields that are not read from a table: payload, pad, ICRC, IPv4 options and
/// Ethernet padding.
pub(super) const OTHER_TSHARK_KEYS: &[&str] =
    &["data.len", "infiniband.invariant.crc", "eth.padding"];

/// Every table, for listing the keys.
pub(super) const ALL: &[&[Spec]] = &[
    ETHERNET,
    VLAN,
    IPV4,
    IPV6,
    GRH,
    UDP,
    BTH,
    DETH,
    FETH,
    RETH,
    ATOMIC_ETH,
    AETH,
    &AETH_DETAIL,
    &[AETH_MSN],
    ATOMIC_ACK_ETH,
    IMMDT,
    IETH,
];
