//! The RDMA CM's IP addressing on top of the IB CM (Linux `drivers/infiniband/core/cma.c`,
//! IBTA annex A11): how librdmacm's programs, which know only IP addresses and ports, ride on
//! CM messages.
//!
//! - The service ID of a REQ or SIDR_REQ is the port space shifted left 16 plus the port:
//!   `0x0000_0000_0106_xxxx` for TCP-like (RC) IDs, `0x0000_0000_0111_xxxx` for UDP-like (UD)
//!   IDs. The top five bytes, `00 00 00 00 01`, are annex A11's "IP CM service ID" prefix.
//! - The first 36 bytes of such a message's private data are a header with both ends'
//!   addresses; the user's own private data follows (56 bytes of a REQ's 92).
//!
//! ```text
//!  0 version (major 4 bits, minor 4 bits; 0) | IP version (4 bits), reserved (4) | source port (16)
//!  4 source IP (128; IPv4 in the last 4 bytes, after 12 zero bytes)
//! 20 destination IP (128; likewise)
//! ```

use core::fmt;

use smoltcp::wire::IpAddress;

use crate::be;
use crate::cm::PrivateData;
use crate::error::{malformed, Error, Layer};
use crate::view::fixed_header_view;
use crate::{Ipv4Address, Ipv6Address};

mod field {
    use core::ops::Range;
    pub const VERSION: usize = 0;
    pub const IP_VERSION: usize = 1;
    pub const SRC_PORT: Range<usize> = 2..4;
    pub const SRC: Range<usize> = 4..20;
    pub const DST: Range<usize> = 20..36;
}

fixed_header_view!(Layer::Cm, 36);

/// The header version Linux sends (`CMA_VERSION`).
pub const VERSION: u8 = 0x00;

/// The Q_Key of the UD QPs of the RDMA CM's UDP port space (librdmacm's `RDMA_UDP_QKEY`): what
/// a SIDR_REP names, and what both sides' QPs take.
pub const UDP_QKEY: u32 = 0x0123_4567;

/// The IP CM service ID prefix of annex A11: service IDs whose top five bytes are these are
/// the RDMA CM's, and their private data starts with this header.
pub const SERVICE_ID_PREFIX: u64 = 0x0000_0000_0100_0000;
const SERVICE_ID_PREFIX_MASK: u64 = 0xffff_ffff_ff00_0000;

/// An RDMA CM port space (librdmacm's `enum rdma_port_space`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PortSpace {
    /// Connected (RC) IDs: rping, ucmatose, perftest `-R`.
    Tcp,
    /// Datagram (UD) IDs, resolved with SIDR: udaddy.
    Udp,
    /// Either, as the IB port space.
    Ib,
    Ipoib,
}

impl PortSpace {
    pub const fn value(self) -> u16 {
        match self {
            PortSpace::Ipoib => 0x0002,
            PortSpace::Tcp => 0x0106,
            PortSpace::Ib => 0x013f,
            PortSpace::Udp => 0x0111,
        }
    }

    pub fn from_value(value: u16) -> Option<PortSpace> {
        [
            PortSpace::Ipoib,
            PortSpace::Tcp,
            PortSpace::Ib,
            PortSpace::Udp,
        ]
        .into_iter()
        .find(|ps| ps.value() == value)
    }

    /// The service ID a listener on `port` in this space is reached by.
    pub const fn service_id(self, port: u16) -> u64 {
        ((self.value() as u64) << 16) | port as u64
    }

    pub fn name(self) -> &'static str {
        match self {
            PortSpace::Tcp => "TCP",
            PortSpace::Udp => "UDP",
            PortSpace::Ib => "IB",
            PortSpace::Ipoib => "IPoIB",
        }
    }
}

impl fmt::Display for PortSpace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The port space and port of an RDMA CM service ID; `None` for any other service ID.
pub fn parse_service_id(service_id: u64) -> Option<(PortSpace, u16)> {
    if service_id >> 32 != 0 {
        return None;
    }
    let space = PortSpace::from_value((service_id >> 16) as u16)?;
    Some((space, service_id as u16))
}

/// Whether `service_id` carries annex A11's IP CM prefix (what tshark checks before it reads a
/// REQ's private data as this header).
pub fn has_ip_prefix(service_id: u64) -> bool {
    service_id & SERVICE_ID_PREFIX_MASK == SERVICE_ID_PREFIX
}

impl<T: AsRef<[u8]>> Packet<T> {
    pub fn version(&self) -> u8 {
        self.bytes()[field::VERSION]
    }
    /// 4 or 6 (the high nibble).
    pub fn ip_version(&self) -> u8 {
        self.bytes()[field::IP_VERSION] >> 4
    }
    pub fn src_port(&self) -> u16 {
        be::u16(&self.bytes()[field::SRC_PORT])
    }
    /// The source address as the IP version says: the last 4 bytes for IPv4.
    pub fn src(&self) -> Option<IpAddress> {
        self.address(field::SRC)
    }
    pub fn dst(&self) -> Option<IpAddress> {
        self.address(field::DST)
    }

    fn address(&self, at: core::ops::Range<usize>) -> Option<IpAddress> {
        let bytes = &self.bytes()[at];
        match self.ip_version() {
            4 => Some(IpAddress::Ipv4(Ipv4Address::from(
                <[u8; 4]>::try_from(&bytes[12..16]).ok()?,
            ))),
            6 => Some(IpAddress::Ipv6(Ipv6Address::from(
                <[u8; 16]>::try_from(bytes).ok()?,
            ))),
            _ => None,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    pub fn set_version(&mut self, value: u8) {
        self.bytes_mut()[field::VERSION] = value
    }
    /// Sets the IP version nibble and clears the reserved one.
    pub fn set_ip_version(&mut self, value: u8) {
        self.bytes_mut()[field::IP_VERSION] = value << 4
    }
    pub fn set_src_port(&mut self, value: u16) {
        be::set_u16(&mut self.bytes_mut()[field::SRC_PORT], value)
    }
    pub fn set_src(&mut self, value: IpAddress) {
        write_address(&mut self.bytes_mut()[field::SRC], value)
    }
    pub fn set_dst(&mut self, value: IpAddress) {
        write_address(&mut self.bytes_mut()[field::DST], value)
    }
}

/// An IPv4 address goes in the last four bytes, after twelve zero bytes.
fn write_address(bytes: &mut [u8], address: IpAddress) {
    match address {
        IpAddress::Ipv4(a) => {
            bytes[..12].fill(0);
            bytes[12..16].copy_from_slice(&a.octets());
        }
        IpAddress::Ipv6(a) => bytes.copy_from_slice(&a.octets()),
    }
}

/// A parsed RDMA CM header: who connects, from which port, to which address. (The
/// destination port is in the service ID.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    pub version: u8,
    pub src_port: u16,
    pub src: IpAddress,
    pub dst: IpAddress,
}

impl Repr {
    pub fn parse<T: AsRef<[u8]>>(packet: &Packet<T>) -> Result<Repr, Error> {
        packet.check_len()?;
        let (Some(src), Some(dst)) = (packet.src(), packet.dst()) else {
            return Err(malformed(
                Layer::Cm,
                "RDMA CM IP version",
                packet.ip_version().into(),
                "neither 4 nor 6",
            ));
        };
        Ok(Repr {
            version: packet.version(),
            src_port: packet.src_port(),
            src,
            dst,
        })
    }

    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header; `src` and `dst` must be of one IP version (the source's is sent).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) {
        packet.set_version(self.version);
        packet.set_ip_version(match self.src {
            IpAddress::Ipv4(_) => 4,
            IpAddress::Ipv6(_) => 6,
        });
        packet.set_src_port(self.src_port);
        packet.set_src(self.src);
        packet.set_dst(self.dst);
    }

    /// The private data of a message: this header, then `user`'s bytes, zero-filled; an error
    /// if they do not fit (a REQ has room for 56 bytes of the user's, a SIDR_REQ for 180).
    pub fn private_data<const N: usize>(&self, user: &[u8]) -> Result<PrivateData<N>, Error> {
        if HEADER_LEN + user.len() > N
            || core::mem::discriminant(&self.src) != core::mem::discriminant(&self.dst)
        {
            return Err(malformed(
                Layer::Cm,
                "private data length",
                (HEADER_LEN + user.len()) as u64,
                "the RDMA CM header and the user's private data do not fit, or the addresses are of two IP versions",
            ));
        }
        let mut data = PrivateData::<N>::default();
        self.emit(&mut Packet::new_unchecked(&mut data.0[..HEADER_LEN]));
        data.0[HEADER_LEN..HEADER_LEN + user.len()].copy_from_slice(user);
        Ok(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_are_the_port_space_over_the_port() {
        assert_eq!(PortSpace::Tcp.service_id(7174), 0x0000_0000_0106_1c06);
        assert_eq!(PortSpace::Udp.service_id(7174), 0x0000_0000_0111_1c06);
        assert_eq!(
            parse_service_id(0x0000_0000_0106_1c06),
            Some((PortSpace::Tcp, 7174))
        );
        assert_eq!(parse_service_id(0x0000_0001_0106_1c06), None);
        assert_eq!(parse_service_id(0x0000_0000_0107_1c06), None);
        assert!(has_ip_prefix(PortSpace::Tcp.service_id(1)));
        assert!(has_ip_prefix(PortSpace::Udp.service_id(1)));
        assert!(!has_ip_prefix(PortSpace::Ipoib.service_id(1)));
    }

    #[test]
    fn ipv4_addresses_sit_after_twelve_zero_bytes_and_round_trip() {
        let repr = Repr {
            version: VERSION,
            src_port: 0xabcd,
            src: IpAddress::Ipv4(Ipv4Address::new(10, 77, 0, 2)),
            dst: IpAddress::Ipv4(Ipv4Address::new(10, 77, 0, 1)),
        };
        let data: PrivateData<92> = repr.private_data(b"user").unwrap();
        let b = data.as_bytes();
        assert_eq!(b[..4], [0x00, 0x40, 0xab, 0xcd]);
        assert_eq!(b[4..20], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 77, 0, 2]);
        assert_eq!(b[32..36], [10, 77, 0, 1]);
        assert_eq!(&b[36..40], b"user");
        assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), Ok(repr));
        assert!(repr.private_data::<92>(&[1; 57]).is_err());
        assert!(repr.private_data::<92>(&[1; 56]).is_ok());
    }

    #[test]
    fn ipv6_round_trips_and_other_versions_are_refused() {
        let repr = Repr {
            version: VERSION,
            src_port: 1,
            src: IpAddress::Ipv6(Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
            dst: IpAddress::Ipv6(Ipv6Address::new(0xfe80, 0, 0, 0, 0, 0, 0, 2)),
        };
        let mut b = [0u8; 36];
        repr.emit(&mut Packet::new_unchecked(&mut b[..]));
        assert_eq!(b[1], 0x60);
        assert_eq!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()), Ok(repr));
        b[1] = 0x50;
        assert!(Repr::parse(&Packet::new_checked(&b[..]).unwrap()).is_err());
    }
}
