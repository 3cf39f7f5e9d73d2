//! BTH opcodes and the table every other part of the project consults: which extension headers
//! follow the BTH, whether a payload does, and where the packet sits in its message.
//!
//! An opcode is three transport bits (RC, UC, RD, UD) over five operation bits; the same operation
//! means the same headers on every transport, except that UD adds a DETH. CNP (0x81) is the RoCEv2
//! congestion notification packet.

use core::fmt;

use crate::error::Error;

/// The transport service an opcode belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Transport {
    /// Reliable Connected.
    Rc,
    /// Unreliable Connected.
    Uc,
    /// Unreliable Datagram.
    Ud,
    /// RoCEv2 Congestion Notification Packet.
    Cnp,
}

impl fmt::Display for Transport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Transport::Rc => "RC",
            Transport::Uc => "UC",
            Transport::Ud => "UD",
            Transport::Cnp => "CNP",
        })
    }
}

/// The operation an opcode carries, independent of the transport (the low five bits).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    SendFirst = 0x00,
    SendMiddle = 0x01,
    SendLast = 0x02,
    SendLastImm = 0x03,
    SendOnly = 0x04,
    SendOnlyImm = 0x05,
    WriteFirst = 0x06,
    WriteMiddle = 0x07,
    WriteLast = 0x08,
    WriteLastImm = 0x09,
    WriteOnly = 0x0a,
    WriteOnlyImm = 0x0b,
    ReadRequest = 0x0c,
    ReadResponseFirst = 0x0d,
    ReadResponseMiddle = 0x0e,
    ReadResponseLast = 0x0f,
    ReadResponseOnly = 0x10,
    Acknowledge = 0x11,
    AtomicAcknowledge = 0x12,
    CompareSwap = 0x13,
    FetchAdd = 0x14,
    SendLastInv = 0x16,
    SendOnlyInv = 0x17,
    Flush = 0x1c,
    AtomicWrite = 0x1d,
    /// Only with [`Transport::Cnp`].
    Cnp = 0x81,
}

/// Where a packet sits in its message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    First,
    Middle,
    Last,
    Only,
}

impl Position {
    /// Starts a message (FIRST or ONLY).
    pub fn is_start(self) -> bool {
        matches!(self, Position::First | Position::Only)
    }

    /// Ends a message (LAST or ONLY).
    pub fn is_end(self) -> bool {
        matches!(self, Position::Last | Position::Only)
    }
}

/// A set of extension headers. Iterating yields them in wire order.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Headers(u8);

impl Headers {
    pub const NONE: Headers = Headers(0);
    pub const DETH: Headers = Headers(1 << 0);
    pub const FETH: Headers = Headers(1 << 1);
    pub const RETH: Headers = Headers(1 << 2);
    pub const ATOMIC_ETH: Headers = Headers(1 << 3);
    pub const AETH: Headers = Headers(1 << 4);
    pub const ATOMIC_ACK_ETH: Headers = Headers(1 << 5);
    pub const IMMDT: Headers = Headers(1 << 6);
    pub const IETH: Headers = Headers(1 << 7);

    /// Every extension header in the order they appear after the BTH, with its size in bytes.
    pub const WIRE_ORDER: [(Headers, usize); 8] = [
        (Headers::DETH, 8),
        (Headers::FETH, 4),
        (Headers::RETH, 16),
        (Headers::ATOMIC_ETH, 28),
        (Headers::AETH, 4),
        (Headers::ATOMIC_ACK_ETH, 8),
        (Headers::IMMDT, 4),
        (Headers::IETH, 4),
    ];

    pub const fn union(self, other: Headers) -> Headers {
        Headers(self.0 | other.0)
    }

    pub const fn contains(self, other: Headers) -> bool {
        self.0 & other.0 == other.0
    }

    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Total size in bytes of the headers in this set.
    pub const fn len(self) -> usize {
        SET_LEN[self.0 as usize] as usize
    }

    /// The headers of this set with their sizes, in wire order.
    pub fn iter(self) -> impl Iterator<Item = (Headers, usize)> {
        Self::WIRE_ORDER
            .into_iter()
            .filter(move |(h, _)| self.contains(*h))
    }

    /// The name of a single header.
    pub fn name(self) -> &'static str {
        match self {
            Headers::DETH => "DETH",
            Headers::FETH => "FETH",
            Headers::RETH => "RETH",
            Headers::ATOMIC_ETH => "AtomicETH",
            Headers::AETH => "AETH",
            Headers::ATOMIC_ACK_ETH => "AtomicAckETH",
            Headers::IMMDT => "ImmDt",
            Headers::IETH => "IETH",
            Headers::NONE => "none",
            _ => "several headers",
        }
    }
}

/// The size of every set of headers, worked out at compile time: the parser asks for every
/// packet.
const SET_LEN: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut set = 0;
    while set < 256 {
        let mut i = 0;
        while i < Headers::WIRE_ORDER.len() {
            let (header, len) = Headers::WIRE_ORDER[i];
            if set & header.0 as usize != 0 {
                table[set] += len as u8;
            }
            i += 1;
        }
        set += 1;
    }
    table
};

impl core::ops::BitOr for Headers {
    type Output = Headers;
    fn bitor(self, rhs: Headers) -> Headers {
        self.union(rhs)
    }
}

impl fmt::Debug for Headers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|(h, _)| h.name()))
            .finish()
    }
}

/// What the table says about one operation.
struct Traits {
    headers: Headers,
    payload: bool,
    position: Position,
    name: &'static str,
}

const fn traits(headers: Headers, payload: bool, position: Position, name: &'static str) -> Traits {
    Traits {
        headers,
        payload,
        position,
        name,
    }
}

impl Kind {
    /// Every operation, in opcode order.
    pub const ALL: [Kind; 26] = [
        Kind::SendFirst,
        Kind::SendMiddle,
        Kind::SendLast,
        Kind::SendLastImm,
        Kind::SendOnly,
        Kind::SendOnlyImm,
        Kind::WriteFirst,
        Kind::WriteMiddle,
        Kind::WriteLast,
        Kind::WriteLastImm,
        Kind::WriteOnly,
        Kind::WriteOnlyImm,
        Kind::ReadRequest,
        Kind::ReadResponseFirst,
        Kind::ReadResponseMiddle,
        Kind::ReadResponseLast,
        Kind::ReadResponseOnly,
        Kind::Acknowledge,
        Kind::AtomicAcknowledge,
        Kind::CompareSwap,
        Kind::FetchAdd,
        Kind::SendLastInv,
        Kind::SendOnlyInv,
        Kind::Flush,
        Kind::AtomicWrite,
        Kind::Cnp,
    ];

    const fn traits(self) -> Traits {
        use Position::*;
        const H: Headers = Headers::NONE;
        match self {
            Kind::SendFirst => traits(H, true, First, "SEND_FIRST"),
            Kind::SendMiddle => traits(H, true, Middle, "SEND_MIDDLE"),
            Kind::SendLast => traits(H, true, Last, "SEND_LAST"),
            Kind::SendLastImm => traits(Headers::IMMDT, true, Last, "SEND_LAST_WITH_IMMEDIATE"),
            Kind::SendOnly => traits(H, true, Only, "SEND_ONLY"),
            Kind::SendOnlyImm => traits(Headers::IMMDT, true, Only, "SEND_ONLY_WITH_IMMEDIATE"),
            Kind::WriteFirst => traits(Headers::RETH, true, First, "RDMA_WRITE_FIRST"),
            Kind::WriteMiddle => traits(H, true, Middle, "RDMA_WRITE_MIDDLE"),
            Kind::WriteLast => traits(H, true, Last, "RDMA_WRITE_LAST"),
            Kind::WriteLastImm => {
                traits(Headers::IMMDT, true, Last, "RDMA_WRITE_LAST_WITH_IMMEDIATE")
            }
            Kind::WriteOnly => traits(Headers::RETH, true, Only, "RDMA_WRITE_ONLY"),
            Kind::WriteOnlyImm => traits(
                Headers::RETH.union(Headers::IMMDT),
                true,
                Only,
                "RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            ),
            Kind::ReadRequest => traits(Headers::RETH, false, Only, "RDMA_READ_REQUEST"),
            Kind::ReadResponseFirst => {
                traits(Headers::AETH, true, First, "RDMA_READ_RESPONSE_FIRST")
            }
            Kind::ReadResponseMiddle => traits(H, true, Middle, "RDMA_READ_RESPONSE_MIDDLE"),
            Kind::ReadResponseLast => traits(Headers::AETH, true, Last, "RDMA_READ_RESPONSE_LAST"),
            Kind::ReadResponseOnly => traits(Headers::AETH, true, Only, "RDMA_READ_RESPONSE_ONLY"),
            Kind::Acknowledge => traits(Headers::AETH, false, Only, "ACKNOWLEDGE"),
            Kind::AtomicAcknowledge => traits(
                Headers::AETH.union(Headers::ATOMIC_ACK_ETH),
                false,
                Only,
                "ATOMIC_ACKNOWLEDGE",
            ),
            Kind::CompareSwap => traits(Headers::ATOMIC_ETH, false, Only, "COMPARE_SWAP"),
            Kind::FetchAdd => traits(Headers::ATOMIC_ETH, false, Only, "FETCH_ADD"),
            Kind::SendLastInv => traits(Headers::IETH, true, Last, "SEND_LAST_WITH_INVALIDATE"),
            Kind::SendOnlyInv => traits(Headers::IETH, true, Only, "SEND_ONLY_WITH_INVALIDATE"),
            Kind::Flush => traits(Headers::FETH.union(Headers::RETH), false, Only, "FLUSH"),
            Kind::AtomicWrite => traits(Headers::RETH, true, Only, "ATOMIC_WRITE"),
            // A CNP carries 16 reserved bytes where a payload would be.
            Kind::Cnp => traits(H, true, Only, "CNP"),
        }
    }

    /// The operation with these low five opcode bits, if there is one.
    pub const fn from_low_bits(bits: u8) -> Option<Kind> {
        Some(match bits {
            0x00 => Kind::SendFirst,
            0x01 => Kind::SendMiddle,
            0x02 => Kind::SendLast,
            0x03 => Kind::SendLastImm,
            0x04 => Kind::SendOnly,
            0x05 => Kind::SendOnlyImm,
            0x06 => Kind::WriteFirst,
            0x07 => Kind::WriteMiddle,
            0x08 => Kind::WriteLast,
            0x09 => Kind::WriteLastImm,
            0x0a => Kind::WriteOnly,
            0x0b => Kind::WriteOnlyImm,
            0x0c => Kind::ReadRequest,
            0x0d => Kind::ReadResponseFirst,
            0x0e => Kind::ReadResponseMiddle,
            0x0f => Kind::ReadResponseLast,
            0x10 => Kind::ReadResponseOnly,
            0x11 => Kind::Acknowledge,
            0x12 => Kind::AtomicAcknowledge,
            0x13 => Kind::CompareSwap,
            0x14 => Kind::FetchAdd,
            0x16 => Kind::SendLastInv,
            0x17 => Kind::SendOnlyInv,
            0x1c => Kind::Flush,
            0x1d => Kind::AtomicWrite,
            _ => return None,
        })
    }

    /// A SEND of any position or flavour.
    pub fn is_send(self) -> bool {
        matches!(
            self,
            Kind::SendFirst
                | Kind::SendMiddle
                | Kind::SendLast
                | Kind::SendLastImm
                | Kind::SendOnly
                | Kind::SendOnlyImm
                | Kind::SendLastInv
                | Kind::SendOnlyInv
        )
    }

    /// An RDMA WRITE of any position or flavour.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Kind::WriteFirst
                | Kind::WriteMiddle
                | Kind::WriteLast
                | Kind::WriteLastImm
                | Kind::WriteOnly
                | Kind::WriteOnlyImm
        )
    }

    /// An RDMA READ response packet.
    pub fn is_read_response(self) -> bool {
        matches!(
            self,
            Kind::ReadResponseFirst
                | Kind::ReadResponseMiddle
                | Kind::ReadResponseLast
                | Kind::ReadResponseOnly
        )
    }

    /// COMPARE_SWAP or FETCH_ADD.
    pub fn is_atomic(self) -> bool {
        matches!(self, Kind::CompareSwap | Kind::FetchAdd)
    }

    /// A packet a responder sends back (ACK, atomic ACK, READ response).
    pub fn is_response(self) -> bool {
        self.is_read_response() || matches!(self, Kind::Acknowledge | Kind::AtomicAcknowledge)
    }

    /// Carries immediate data.
    pub fn has_immediate(self) -> bool {
        self.traits().headers.contains(Headers::IMMDT)
    }

    /// Carries an R_Key to invalidate.
    pub fn has_invalidate(self) -> bool {
        self.traits().headers.contains(Headers::IETH)
    }
}

/// A valid BTH opcode.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Opcode(u8);

impl Opcode {
    pub const CNP: Opcode = Opcode(0x81);

    /// The opcode for `kind` on `transport`, if that transport has the operation.
    pub const fn new(transport: Transport, kind: Kind) -> Option<Opcode> {
        let valid = match transport {
            Transport::Rc => !matches!(kind, Kind::Cnp),
            Transport::Uc => (kind as u8) <= Kind::WriteOnlyImm as u8,
            Transport::Ud => matches!(kind, Kind::SendOnly | Kind::SendOnlyImm),
            Transport::Cnp => matches!(kind, Kind::Cnp),
        };
        if !valid {
            return None;
        }
        let base = match transport {
            Transport::Rc => 0x00,
            Transport::Uc => 0x20,
            Transport::Ud => 0x60,
            Transport::Cnp => 0x00,
        };
        Some(Opcode(base | kind as u8))
    }

    /// Validates a raw opcode byte.
    #[inline]
    pub const fn from_u8(value: u8) -> Result<Opcode, Error> {
        if BY_OPCODE[value as usize].valid {
            Ok(Opcode(value))
        } else {
            Err(Error::UnknownOpcode(value))
        }
    }

    /// [`Opcode::from_u8`] by the rules the table is built from.
    const fn from_u8_by_the_rules(value: u8) -> Result<Opcode, Error> {
        if value == 0x81 {
            return Ok(Opcode::CNP);
        }
        let transport = match value >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            3 => Transport::Ud,
            _ => return Err(Error::UnknownOpcode(value)),
        };
        match Kind::from_low_bits(value & 0x1f) {
            Some(kind) => match Opcode::new(transport, kind) {
                Some(op) => Ok(op),
                None => Err(Error::UnknownOpcode(value)),
            },
            None => Err(Error::UnknownOpcode(value)),
        }
    }

    /// Every valid opcode, in numeric order.
    pub fn all() -> impl Iterator<Item = Opcode> {
        (0..=u8::MAX).filter_map(|v| Opcode::from_u8(v).ok())
    }

    /// The opcode byte.
    pub const fn value(self) -> u8 {
        self.0
    }

    pub const fn transport(self) -> Transport {
        if self.0 == 0x81 {
            return Transport::Cnp;
        }
        match self.0 >> 5 {
            0 => Transport::Rc,
            1 => Transport::Uc,
            _ => Transport::Ud,
        }
    }

    pub const fn kind(self) -> Kind {
        BY_OPCODE[self.0 as usize].kind
    }

    /// [`Opcode::kind`] by the rules the table is built from.
    const fn kind_by_the_rules(self) -> Kind {
        if self.0 == 0x81 {
            return Kind::Cnp;
        }
        match Kind::from_low_bits(self.0 & 0x1f) {
            Some(kind) => kind,
            // Unreachable: an `Opcode` is only ever built from a valid kind.
            None => Kind::Cnp,
        }
    }

    /// The extension headers that follow the BTH, in wire order.
    pub const fn headers(self) -> Headers {
        BY_OPCODE[self.0 as usize].headers
    }

    /// Whether a payload follows the extension headers (it may still be zero bytes long).
    pub const fn has_payload(self) -> bool {
        BY_OPCODE[self.0 as usize].payload
    }

    const fn headers_from_the_table(self) -> Headers {
        let headers = self.kind_by_the_rules().traits().headers;
        match self.transport() {
            Transport::Ud => headers.union(Headers::DETH),
            _ => headers,
        }
    }

    pub const fn position(self) -> Position {
        BY_OPCODE[self.0 as usize].position
    }

    /// The IBTA name of the operation, e.g. `RDMA_WRITE_FIRST`.
    pub const fn name(self) -> &'static str {
        self.kind().traits().name
    }
}

/// What the parser and the transport ask of an opcode byte for every packet, worked out at
/// compile time from the rules above: whether it is valid, its operation and position, its
/// extension headers and whether a payload follows.
#[derive(Clone, Copy)]
struct Entry {
    valid: bool,
    kind: Kind,
    position: Position,
    headers: Headers,
    payload: bool,
}

const BY_OPCODE: [Entry; 256] = {
    let mut table = [Entry {
        valid: false,
        kind: Kind::Cnp,
        position: Position::Only,
        headers: Headers::NONE,
        payload: false,
    }; 256];
    let mut byte = 0;
    while byte < 256 {
        if let Ok(op) = Opcode::from_u8_by_the_rules(byte as u8) {
            let kind = op.kind_by_the_rules();
            table[byte] = Entry {
                valid: true,
                kind,
                position: kind.traits().position,
                headers: op.headers_from_the_table(),
                payload: kind.traits().payload,
            };
        }
        byte += 1;
    }
    table
};

impl TryFrom<u8> for Opcode {
    type Error = Error;
    fn try_from(value: u8) -> Result<Opcode, Error> {
        Opcode::from_u8(value)
    }
}

impl From<Opcode> for u8 {
    fn from(op: Opcode) -> u8 {
        op.0
    }
}

impl fmt::Display for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.transport() {
            Transport::Cnp => f.write_str("CNP"),
            t => write!(f, "{t} {}", self.name()),
        }
    }
}

impl fmt::Debug for Opcode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self} ({:#04x})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_valid_byte_round_trips_and_the_rest_are_errors() {
        let mut valid = 0;
        for v in 0..=u8::MAX {
            match Opcode::from_u8(v) {
                Ok(op) => {
                    valid += 1;
                    assert_eq!(op.value(), v);
                    assert_eq!(Opcode::new(op.transport(), op.kind()), Some(op));
                }
                Err(e) => assert_eq!(e, Error::UnknownOpcode(v)),
            }
        }
        // 25 RC + 12 UC + 2 UD + CNP.
        assert_eq!(valid, 40);
    }

    #[test]
    fn the_table_matches_the_spec_for_landmark_opcodes() {
        let op = |v| Opcode::from_u8(v).unwrap();
        assert_eq!(op(0x0a).headers(), Headers::RETH);
        assert_eq!(op(0x0b).headers(), Headers::RETH | Headers::IMMDT);
        assert!(!op(0x0c).has_payload());
        assert_eq!(op(0x12).headers(), Headers::AETH | Headers::ATOMIC_ACK_ETH);
        assert_eq!(op(0x13).headers().len(), 28);
        assert_eq!(op(0x65).headers(), Headers::DETH | Headers::IMMDT);
        assert_eq!(op(0x65).to_string(), "UD SEND_ONLY_WITH_IMMEDIATE");
        assert_eq!(op(0x0e).position(), Position::Middle);
        assert_eq!(op(0x0e).headers(), Headers::NONE);
        assert_eq!(op(0x1c).headers(), Headers::FETH | Headers::RETH);
        assert_eq!(op(0x81).transport(), Transport::Cnp);
        // UC has no READ, atomics or invalidate; UD only SEND_ONLY(_IMM).
        assert!(Opcode::from_u8(0x2c).is_err());
        assert!(Opcode::from_u8(0x37).is_err());
        assert!(Opcode::from_u8(0x60).is_err());
        // RD is not supported.
        assert!(Opcode::from_u8(0x44).is_err());
    }

    #[test]
    fn the_table_agrees_with_the_rules_for_every_byte() {
        for v in 0..=u8::MAX {
            assert_eq!(
                Opcode::from_u8(v),
                Opcode::from_u8_by_the_rules(v),
                "{v:#04x}"
            );
            let Ok(op) = Opcode::from_u8(v) else { continue };
            let kind = op.kind_by_the_rules();
            assert_eq!(op.kind(), kind, "{v:#04x}");
            assert_eq!(op.position(), kind.traits().position, "{v:#04x}");
            assert_eq!(op.has_payload(), kind.traits().payload, "{v:#04x}");
            assert_eq!(op.headers(), op.headers_from_the_table(), "{v:#04x}");
        }
    }

    #[test]
    fn header_sets_iterate_in_wire_order() {
        let h = Headers::IMMDT | Headers::RETH | Headers::DETH;
        let names: Vec<_> = h.iter().map(|(h, _)| h.name()).collect();
        assert_eq!(names, ["DETH", "RETH", "ImmDt"]);
        assert_eq!(h.len(), 28);
    }
}
