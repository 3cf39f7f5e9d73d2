//! Parse errors: each one names the layer and the field that was wrong, so that a capture tool or a
//! counter can say exactly why a frame was refused.

use core::fmt;

/// The protocol layer a problem was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    Ethernet,
    Vlan,
    Ipv4,
    Ipv6,
    /// The InfiniBand Global Route Header of RoCEv1.
    Grh,
    Udp,
    Bth,
    Deth,
    Feth,
    Reth,
    AtomicEth,
    Aeth,
    AtomicAckEth,
    ImmDt,
    Ieth,
    /// The common header of a management datagram (QP0/QP1 traffic).
    Mad,
    /// A Communication Management message: the data of a CM MAD.
    Cm,
    /// Payload, pad and the ICRC that ends every packet.
    Payload,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "802.1Q tag",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Grh => "GRH",
            Layer::Udp => "UDP",
            Layer::Bth => "BTH",
            Layer::Deth => "DETH",
            Layer::Feth => "FETH",
            Layer::Reth => "RETH",
            Layer::AtomicEth => "AtomicETH",
            Layer::Aeth => "AETH",
            Layer::AtomicAckEth => "AtomicAckETH",
            Layer::ImmDt => "ImmDt",
            Layer::Ieth => "IETH",
            Layer::Mad => "MAD",
            Layer::Cm => "CM",
            Layer::Payload => "payload",
        })
    }
}

impl Layer {
    /// The header's full name, as a decoder's tree heads its fields with it.
    pub fn title(self) -> &'static str {
        match self {
            Layer::Ethernet => "Ethernet",
            Layer::Vlan => "802.1Q tag",
            Layer::Ipv4 => "IPv4",
            Layer::Ipv6 => "IPv6",
            Layer::Grh => "Global Route Header (RoCEv1)",
            Layer::Udp => "UDP",
            Layer::Bth => "Base Transport Header (BTH)",
            Layer::Deth => "Datagram Extended Transport Header (DETH)",
            Layer::Feth => "FLUSH Extended Transport Header (FETH)",
            Layer::Reth => "RDMA Extended Transport Header (RETH)",
            Layer::AtomicEth => "Atomic Extended Transport Header (AtomicETH)",
            Layer::Aeth => "ACK Extended Transport Header (AETH)",
            Layer::AtomicAckEth => "Atomic ACK Extended Transport Header (AtomicAckETH)",
            Layer::ImmDt => "Immediate Data (ImmDt)",
            Layer::Ieth => "Invalidate Extended Transport Header (IETH)",
            Layer::Mad => "Management Datagram (MAD)",
            Layer::Cm => "Communication Management (CM) message",
            Layer::Payload => "Payload, pad and ICRC",
        }
    }
}

/// Why a frame is not RoCE at all. Not a fault of the frame: a capture or a port carries other
/// traffic too (ARP, TCP, ...), and those frames go elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NotRoce {
    /// The Ethernet type is neither IPv4, IPv6 nor RoCEv1.
    EtherType(u16),
    /// The IP packet does not carry UDP.
    IpProtocol(u8),
    /// The UDP destination port is not 4791.
    UdpPort(u16),
    /// An IPv4 fragment: RoCE never fragments (DF is set), so a fragment is someone else's.
    Fragment,
}

impl fmt::Display for NotRoce {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NotRoce::EtherType(t) => write!(f, "Ethernet type {t:#06x}"),
            NotRoce::IpProtocol(p) => write!(f, "IP protocol {p}"),
            NotRoce::UdpPort(p) => write!(f, "UDP destination port {p}"),
            NotRoce::Fragment => f.write_str("an IPv4 fragment"),
        }
    }
}

/// Everything that can be wrong with a frame on the way from bytes to headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, thiserror::Error)]
pub enum Error {
    /// The bytes end before the header (or the length a header announced) does.
    #[error("truncated {layer}: {needed} bytes needed, {available} available")]
    Truncated {
        layer: Layer,
        needed: usize,
        available: usize,
    },
    /// A field holds a value that cannot be right.
    #[error("bad {layer} {field} {value:#x}: {reason}")]
    Malformed {
        layer: Layer,
        field: &'static str,
        value: u64,
        reason: &'static str,
    },
    /// The BTH opcode is not one of the RC, UC, UD opcodes or CNP.
    #[error("unknown BTH opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// The frame is valid traffic of another kind.
    #[error("not RoCE: {0}")]
    NotRoce(NotRoce),
}

impl Error {
    /// The layer the problem was found in (`None` for frames that are simply not RoCE).
    pub fn layer(&self) -> Option<Layer> {
        match self {
            Error::Truncated { layer, .. } | Error::Malformed { layer, .. } => Some(*layer),
            Error::UnknownOpcode(_) => Some(Layer::Bth),
            Error::NotRoce(_) => None,
        }
    }
}

/// Checks that `available` bytes hold a `needed`-byte header of `layer`.
pub(crate) fn check_len(layer: Layer, needed: usize, available: usize) -> Result<(), Error> {
    if available < needed {
        Err(Error::Truncated {
            layer,
            needed,
            available,
        })
    } else {
        Ok(())
    }
}

/// A field that holds a value that cannot be right.
pub(crate) fn malformed(
    layer: Layer,
    field: &'static str,
    value: u64,
    reason: &'static str,
) -> Error {
    Error::Malformed {
        layer,
        field,
        value,
        reason,
    }
}
