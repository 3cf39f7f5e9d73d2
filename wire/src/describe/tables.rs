//! Where every field of every header lies, what tshark calls it and how to show it.
//!
//! One row per field: essential (`E`) or detail (`D`), name, key, byte offset within its
//! header, length in bytes, bit mask over those bytes read as one big-endian number (0: all of
//! them), shape of the value and what it means. The walker reads any value from these rows
//! alone, so the table is the whole story of each header's layout: the thing a reader of this
//! code or of the `-v` view wants to learn.

/// How the value of a field is read and shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    /// The ICRC against the one computed (set by the walker: it depends on the packet).
    Icrc(crate::icrc::Check),
    MgmtClass,
    MadMethod,
    CmAttribute,
    /// A CM service ID: the RDMA CM's port space and port, where it is one.
    ServiceId,
    /// The low byte of an RDMA CM port space, as tshark shows it.
    PortSpaceLow,
    /// 4.096 µs × 2^value.
    Timeout,
    ServiceType,
    Mtu,
    RnrRetry,
    Rate,
    MraMessage,
    RejMessage,
    RejReason,
    Failover,
    SidrStatus,
}

/// Whether a field is part of what a RoCE tool looks at (see [`super::Field::essential`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Depth {
    Essential,
    Detail,
}

/// A field as the tables describe it, the same in every packet.
#[derive(Debug, PartialEq, Eq, Hash)]
pub(super) struct Spec {
    pub depth: Depth,
    pub name: &'static str,
    /// The key as it opens a JSON entry that follows another, `,"key":`, made once here so a
    /// JSON writer need not quote keys per packet. [`Spec::key`] is the key itself.
    pub entry: &'static str,
    /// [`Spec::entry`] followed by spaces up to a fixed size: copied whole, a fixed-size copy
    /// compiles to a few stores where a copy of a length known only at run time is a call.
    pub padded_entry: [u8; PADDED_ENTRY],
    pub at: usize,
    pub len: usize,
    pub mask: u32,
    pub shape: Shape,
    pub meaning: Meaning,
}

/// Room for the longest JSON entry, `,"infiniband.aeth.syndrome.reserved_value":`, and then
/// some; a longer key fails to compile.
pub(super) const PADDED_ENTRY: usize = 48;

pub(super) const fn pad_entry(entry: &str) -> [u8; PADDED_ENTRY] {
    let mut padded = [b' '; PADDED_ENTRY];
    let bytes = entry.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        padded[i] = bytes[i];
        i += 1;
    }
    padded
}

impl Spec {
    pub fn key(&self) -> &'static str {
        let entry = self.entry;
        entry.get(2..entry.len().saturating_sub(2)).unwrap_or(entry)
    }
}

/// A row: `spec!(depth, name, key, (at, len, mask), shape, meaning)`.
macro_rules! spec {
    ($depth:expr, $name:expr, $key:expr, ($at:expr, $len:expr, $mask:expr), $shape:expr, $meaning:expr) => {
        Spec {
            depth: $depth,
            name: $name,
            entry: concat!(",\"", $key, "\":"),
            padded_entry: $crate::describe::tables::pad_entry(concat!(",\"", $key, "\":")),
            at: $at,
            len: $len,
            mask: $mask,
            shape: $shape,
            meaning: $meaning,
        }
    };
}

pub(super) use spec;

use Depth::{Detail as D, Essential as E};
use Meaning as M;
use Shape::*;

const NONE: Meaning = Meaning::None;

#[rustfmt::skip]
pub(super) const ETHERNET: &[Spec] = &[
    spec!(D, "Destination", "eth.dst",  (0, 6, 0),  Mac,     NONE),
    spec!(D, "Source",      "eth.src",  (6, 6, 0),  Mac,     NONE),
    spec!(D, "Type",        "eth.type", (12, 2, 0), Hex(4),  M::EtherType),
];

/// Offsets from the start of the 802.1Q tag (byte 14 of the frame).
#[rustfmt::skip]
pub(super) const VLAN: &[Spec] = &[
    spec!(E, "Priority",      "vlan.priority", (0, 2, 0xe000), Dec,    NONE),
    spec!(D, "Drop eligible", "vlan.dei",      (0, 2, 0x1000), Flag,   NONE),
    spec!(E, "VLAN ID",       "vlan.id",       (0, 2, 0x0fff), Dec,    NONE),
    spec!(D, "Type",          "vlan.etype",    (2, 2, 0),      Hex(4), M::EtherType),
];

#[rustfmt::skip]
pub(super) const IPV4: &[Spec] = &[
    spec!(D, "Version",         "ip.version",      (0, 1, 0xf0),   Dec,     NONE),
    spec!(D, "Header length",   "ip.hdr_len",      (0, 1, 0x0f),   Words32, M::Fixed("bytes")),
    spec!(E, "DSCP",            "ip.dsfield.dscp", (1, 1, 0xfc),   Dec,     NONE),
    spec!(E, "ECN",             "ip.dsfield.ecn",  (1, 1, 0x03),   Dec,     M::Ecn),
    spec!(D, "Total length",    "ip.len",          (2, 2, 0),      Dec,     NONE),
    spec!(D, "Identification",  "ip.id",           (4, 2, 0),      Hex(4),  NONE),
    spec!(D, "Don't fragment",  "ip.flags.df",     (6, 1, 0x40),   Flag,    NONE),
    spec!(D, "More fragments",  "ip.flags.mf",     (6, 1, 0x20),   Flag,    NONE),
    spec!(D, "Fragment offset", "ip.frag_offset",  (6, 2, 0x1fff), Dec,     NONE),
    spec!(D, "Time to live",    "ip.ttl",          (8, 1, 0),      Dec,     NONE),
    spec!(D, "Protocol",        "ip.proto",        (9, 1, 0),      Dec,     M::Fixed("UDP")),
    spec!(D, "Header checksum", "ip.checksum",     (10, 2, 0),     Hex(4),  M::Fixed("correct")),
    spec!(E, "Source",          "ip.src",          (12, 4, 0),     Ipv4,    NONE),
    spec!(E, "Destination",     "ip.dst",          (16, 4, 0),     Ipv4,    NONE),
];

#[rustfmt::skip]
pub(super) const IPV6: &[Spec] = &[
    spec!(D, "Version",        "ipv6.version", (0, 1, 0xf0),     Dec,    NONE),
    spec!(E, "Traffic class",  "ipv6.tclass",  (0, 2, 0x0ff0),   Hex(2), NONE),
    spec!(E, "DSCP",           "ipv6.tclass.dscp", (0, 2, 0x0fc0), Dec,   NONE),
    spec!(E, "ECN",            "ipv6.tclass.ecn",  (0, 2, 0x0030), Dec,   M::Ecn),
    spec!(D, "Flow label",     "ipv6.flow",    (1, 3, 0x0f_ffff), Hex(5), NONE),
    spec!(D, "Payload length", "ipv6.plen",    (4, 2, 0),        Dec,    NONE),
    spec!(D, "Next header",    "ipv6.nxt",     (6, 1, 0),        Dec,    M::Fixed("UDP")),
    spec!(D, "Hop limit",      "ipv6.hlim",    (7, 1, 0),        Dec,    NONE),
    spec!(E, "Source",         "ipv6.src",     (8, 16, 0),       Ipv6,   NONE),
    spec!(E, "Destination",    "ipv6.dst",     (24, 16, 0),      Ipv6,   NONE),
];

/// RoCEv1's Global Route Header: the IPv6 layout under InfiniBand's names.
#[rustfmt::skip]
pub(super) const GRH: &[Spec] = &[
    spec!(D, "IP version",     "infiniband.grh.ipver",     (0, 1, 0xf0),      Dec,    NONE),
    spec!(E, "Traffic class",  "infiniband.grh.tclass",    (0, 2, 0x0ff0),    Hex(2), NONE),
    spec!(D, "Flow label",     "infiniband.grh.flowlabel", (1, 3, 0x0f_ffff), Hex(5), NONE),
    spec!(D, "Payload length", "infiniband.grh.paylen",    (4, 2, 0),         Dec,    NONE),
    spec!(D, "Next header",    "infiniband.grh.nxthdr",    (6, 1, 0),         Dec,    M::Fixed("BTH")),
    spec!(D, "Hop limit",      "infiniband.grh.hoplmt",    (7, 1, 0),         Dec,    NONE),
    spec!(E, "Source GID",     "infiniband.grh.sgid",      (8, 16, 0),        Ipv6,   NONE),
    spec!(E, "Destination GID","infiniband.grh.dgid",      (24, 16, 0),       Ipv6,   NONE),
];

#[rustfmt::skip]
pub(super) const UDP: &[Spec] = &[
    spec!(E, "Source port",      "udp.srcport",  (0, 2, 0), Dec,    NONE),
    spec!(E, "Destination port", "udp.dstport",  (2, 2, 0), Dec,    M::Fixed("RoCEv2")),
    spec!(D, "Length",           "udp.length",   (4, 2, 0), Dec,    NONE),
    spec!(D, "Checksum",         "udp.checksum", (6, 2, 0), Hex(4), M::UdpChecksum),
];

#[rustfmt::skip]
pub(super) const BTH: &[Spec] = &[
    spec!(E, "Opcode",          "infiniband.bth.opcode",    (0, 1, 0),    Dec,    M::Opcode),
    spec!(E, "Solicited event", "infiniband.bth.se",        (1, 1, 0x80), Flag,   NONE),
    spec!(E, "MigReq",          "infiniband.bth.m",         (1, 1, 0x40), Flag,   NONE),
    spec!(E, "Pad count",       "infiniband.bth.padcnt",    (1, 1, 0x30), Dec,    NONE),
    spec!(E, "Header version",  "infiniband.bth.tver",      (1, 1, 0x0f), Dec,    NONE),
    spec!(E, "P_Key",           "infiniband.bth.p_key",     (2, 2, 0),    Hex(4), NONE),
    spec!(E, "FECN",            "roce.bth.fecn",            (4, 1, 0x80), Flag,   M::Fixed("congestion on the way here")),
    spec!(E, "BECN",            "roce.bth.becn",            (4, 1, 0x40), Flag,   M::Fixed("congestion on the way back")),
    spec!(E, "Destination QP",  "infiniband.bth.destqp",    (5, 3, 0),    Hex(6), NONE),
    spec!(E, "AckReq",          "infiniband.bth.a",         (8, 1, 0x80), Flag,   NONE),
    spec!(D, "Reserved",        "infiniband.bth.reserved7", (8, 1, 0x7f), Dec,    NONE),
    spec!(E, "PSN",             "infiniband.bth.psn",       (9, 3, 0),    Dec,    NONE),
];

#[rustfmt::skip]
pub(super) const DETH: &[Spec] = &[
    spec!(E, "Q_Key",     "infiniband.deth.q_key", (0, 4, 0), Hex(8), NONE),
    spec!(E, "Source QP", "infiniband.deth.srcqp", (5, 3, 0), Hex(6), NONE),
];

/// tshark has no FETH names (FLUSH is newer than its dissector).
#[rustfmt::skip]
pub(super) const FETH: &[Spec] = &[
    spec!(E, "Selectivity level", "roce.feth.selectivity",    (0, 4, 0x30), Dec, M::Selectivity),
    spec!(E, "Placement type",    "roce.feth.placement_type", (0, 4, 0x0f), Dec, M::Placement),
];

#[rustfmt::skip]
pub(super) const RETH: &[Spec] = &[
    spec!(E, "Virtual address", "infiniband.reth.va",     (0, 8, 0),  Hex(16), NONE),
    spec!(E, "R_Key",           "infiniband.reth.r_key",  (8, 4, 0),  Hex(8),  NONE),
    spec!(E, "DMA length",      "infiniband.reth.dmalen", (12, 4, 0), Dec,     M::Fixed("bytes in the message")),
];

/// tshark files the AtomicETH's address and key under the RETH's names.
#[rustfmt::skip]
pub(super) const ATOMIC_ETH: &[Spec] = &[
    spec!(E, "Virtual address", "infiniband.reth.va",          (0, 8, 0),  Hex(16), NONE),
    spec!(E, "R_Key",           "infiniband.reth.r_key",       (8, 4, 0),  Hex(8),  NONE),
    spec!(E, "Swap or add",     "infiniband.atomiceth.swapdt", (12, 8, 0), Hex(16), NONE),
    spec!(E, "Compare",         "infiniband.atomiceth.cmpdt",  (20, 8, 0), Hex(16), NONE),
];

/// The syndrome byte, whole and in the pieces tshark shows; the piece for the low five bits is
/// one of [`AETH_DETAIL`], chosen by the kind (bits 6:5).
#[rustfmt::skip]
pub(super) const AETH: &[Spec] = &[
    spec!(E, "Syndrome", "infiniband.aeth.syndrome",          (0, 1, 0),    Hex(2), M::Syndrome),
    spec!(D, "Reserved", "infiniband.aeth.syndrome.reserved", (0, 1, 0x80), Dec,    NONE),
    spec!(E, "Kind",     "infiniband.aeth.syndrome.opcode",   (0, 1, 0x60), Dec,    M::SyndromeKind),
];

/// Indexed by the syndrome's kind: ACK, RNR NAK, reserved, NAK.
#[rustfmt::skip]
pub(super) static AETH_DETAIL: [Spec; 4] = [
    spec!(E, "Credit count",   "infiniband.aeth.syndrome.credit_count",   (0, 1, 0x1f), Dec, M::Credits),
    spec!(E, "RNR timer",      "infiniband.aeth.syndrome.timer",          (0, 1, 0x1f), Dec, M::RnrTimer),
    spec!(E, "Reserved value", "infiniband.aeth.syndrome.reserved_value", (0, 1, 0x1f), Dec, NONE),
    spec!(E, "NAK code",       "infiniband.aeth.syndrome.error_code",     (0, 1, 0x1f), Dec, M::NakCode),
];

#[rustfmt::skip]
pub(super) static AETH_MSN: Spec =
    spec!(E, "MSN", "infiniband.aeth.msn", (1, 3, 0), Dec, M::Fixed("messages completed"));

#[rustfmt::skip]
pub(super) const ATOMIC_ACK_ETH: &[Spec] = &[
    spec!(E, "Original remote data", "infiniband.atomicacketh.origremdt", (0, 8, 0), Hex(16), NONE),
];

/// tshark shows ImmDt and IETH as bytes, not numbers.
#[rustfmt::skip]
pub(super) const IMMDT: &[Spec] = &[
    spec!(E, "Immediate data", "infiniband.immdt", (0, 4, 0), Bytes, NONE),
];

#[rustfmt::skip]
pub(super) const IETH: &[Spec] = &[
    spec!(E, "R_Key to invalidate", "infiniband.ieth", (0, 4, 0), Bytes, NONE),
];

/// Fields the walker makes itself rather than reading a row: their bytes depend on the packet.
#[rustfmt::skip]
pub(super) mod other {
    use super::{Depth::{Detail as D, Essential as E}, Meaning::None as NONE, Shape::*, Spec};

    pub static IP_OPTIONS: Spec =  spec!(D, "Options",                "roce.ip.options",          (0, 0, 0), Bytes,   NONE);
    pub static DATA_LEN: Spec =    spec!(E, "Payload and pad length", "data.len",                 (0, 0, 0), Dec,     NONE);
    pub static PAYLOAD_LEN: Spec = spec!(E, "Payload length",         "roce.payload.len",         (0, 0, 0), Dec,     NONE);
    pub static PAD: Spec =         spec!(D, "Pad",                    "roce.pad",                 (0, 0, 0), Bytes,   NONE);
    pub static ICRC: Spec =        spec!(E, "ICRC",                   "infiniband.invariant.crc", (0, 0, 0), Hex(8),  NONE);
    pub static ICRC_EXPECTED: Spec = spec!(E, "ICRC computed",        "roce.icrc.expected",       (0, 0, 0), Hex(8),  NONE);
    pub static ICRC_STATUS: Spec = spec!(E, "ICRC status",            "roce.icrc.status",         (0, 0, 0), Bytes,   NONE);
    pub static ETH_PADDING: Spec = spec!(D, "Padding",                "eth.padding",              (0, 0, 0), Bytes,   NONE);
}

/// Every field the tables know, for listing the keys.
pub(super) fn all() -> impl Iterator<Item = &'static Spec> {
    let tables: [&'static [Spec]; 17] = [
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
        core::slice::from_ref(&AETH_MSN),
        ATOMIC_ACK_ETH,
        IMMDT,
        IETH,
    ];
    let others = [
        &other::IP_OPTIONS,
        &other::DATA_LEN,
        &other::PAYLOAD_LEN,
        &other::PAD,
        &other::ICRC,
        &other::ICRC_EXPECTED,
        &other::ICRC_STATUS,
        &other::ETH_PADDING,
    ];
    tables
        .into_iter()
        .flatten()
        .chain(others)
        .chain(super::mad_tables::all())
}
